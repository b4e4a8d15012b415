"""Every command line fails the same way, as a user runs it: a mistake (a missing file, a bad
value or flag, a missing optional package) is one line on stderr, `PROGRAM: error: WHAT`, and
exit status 2, with nothing else on stderr (no usage block, no traceback, and none of the lines
JAX's CUDA plugin prints at start-up on a host without a GPU); and the `hf` extra installs
nothing that pulls CUDA.

(`xlpretrain.train`'s errors: tests/test_cli.py.)"""

import ast
import importlib.metadata
import os
import pathlib
import re
import subprocess
import sys

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from xlpretrain.convert import hf
from xlpretrain.core import quiet
from xlpretrain.core.errors import MissingExtra

REPO = pathlib.Path(__file__).resolve().parents[1]
# A user's shell: JAX picks its backend itself (conftest's CPU setting would keep the CUDA
# plugin from starting) and sees one device.
ENV = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
# What JAX's CUDA plugin prints on this host, gpu-compile extra installed and no GPU.
CHATTER = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795628923.308317   11767 cudart_stub.cc:31] Could not find cuda drivers on your "
    "machine, GPU will not be used.",
]
# And TensorFlow, when TFDS imports it on such a host.
TF_CHATTER = [
    "2025-01-07 10:00:00.000000: I tensorflow/core/util/port.cc:153] oneDNN custom operations "
    "are on. You may see slightly different numerical results due to floating-point round-off "
    "errors from different computation orders. To turn them off, set the environment variable "
    "`TF_ENABLE_ONEDNN_OPTS=0`.",
    "E0000 00:00:1736240400.000000  4242 cuda_dnn.cc:8310] Unable to register cuDNN factory: "
    "Attempting to register factory for plugin cuDNN when one has already been registered",
    "2025-01-07 10:00:00.000000: I tensorflow/core/platform/cpu_feature_guard.cc:210] This "
    "TensorFlow binary is optimized to use available CPU instructions in performance-critical "
    "operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow "
    "with the appropriate compiler flags.",
]


def run(*command: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *command],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**ENV, **env},
    )


def without(module: str, program: str, *args: str) -> tuple[str, ...]:
    """`python -m PROGRAM ARGS` where `module` is not installed (importing it raises
    ModuleNotFoundError), started as `python -m` starts a program."""
    script = (
        f"import sys, runpy; sys.modules[{module!r}] = None; sys.argv = ['-m', *{list(args)!r}]; "
        f"runpy.run_module({program!r}, run_name='__main__', alter_sys=True)"
    )
    return "-c", script


@pytest.mark.parametrize(
    "command, error",
    [
        pytest.param(
            ("-m", "xlpretrain.convert", "to-hf", "/no/such/run", "/tmp/never"),
            "xlpretrain.convert: error: no such folder: /no/such/run",
            id="convert",
        ),
        pytest.param(
            without("safetensors", "xlpretrain.convert", "to-hf", "/no/such/run", "/tmp/never"),
            "xlpretrain.convert: error: exporting needs safetensors, which is not installed: "
            "pip install safetensors transformers (the hf extra)",
            id="convert-without-safetensors",
        ),
        pytest.param(
            ("-m", "xlpretrain.bench", "--config", "configs/nope.py"),
            "xlpretrain.bench: error: --config configs/nope.py: no such file",
            id="bench",
        ),
        pytest.param(
            ("-m", "xlpretrain.bench", "--suite", "gpu"),
            "xlpretrain.bench: error: flags suite=gpu, out=: --suite needs --out DIR",
            id="bench-suite",
        ),
        pytest.param(
            ("-m", "xlpretrain.aot", "--devices", "2", "--config", "configs/nope.py"),
            "xlpretrain.aot: error: --config configs/nope.py: no such file",
            id="aot",
        ),
        pytest.param(
            ("-m", "xlpretrain.eval.retrieval", "--workdir", "runs/x", "--data", "/no/such/data"),
            "xlpretrain.eval.retrieval: error: data path /no/such/data does not exist",
            id="retrieval",
        ),
        pytest.param(
            (
                "-m", "xlpretrain.finetune", "run", "--config=configs/finetune_pair.py",
                "--init=x", "--data=x", "--out=x",
            ),
            "xlpretrain.finetune: error: --config configs/finetune_pair.py: no such file "
            f"({REPO / 'configs' / 'finetune_pair.py'}), and shipped configs are named without .py "
            "or a folder (shipped: demo, ernie_m, finetune_pairs, mbert, mmbert, veco, xlm_e, "
            "xlmr, xtreme); did you mean configs/finetune_pairs.py?",
            id="finetune",
        ),
        pytest.param(
            ("-m", "xlpretrain.data.prepare", "--out", "/tmp/never", "--shard", "2/2"),
            "xlpretrain.data.prepare: error: argument --shard: I/N needs 0 <= I < N, got '2/2'",
            id="prepare",
        ),
        pytest.param(
            ("-m", "xlpretrain.data.demo_corpus", "--out", "/tmp/never", "--languages", "1"),
            "xlpretrain.data.demo_corpus: error: num_languages must be >= 2",
            id="demo_corpus",
        ),
        pytest.param(  # the mask is computed (JAX's backend starts) before the picture fails
            ("-m", "xlpretrain.masks", "--objective", "tlm", "--example", "a ||| b",
             "--png", "/no/such/folder/tlm.png"),
            "xlpretrain.masks: error: No such file or directory (/no/such/folder/tlm.png)",
            id="masks",
        ),
        pytest.param(
            ("-m", "xlpretrain.launch", "local", "--processes", "0", "--", "--config", "x"),
            "xlpretrain.launch: error: --processes and --devices-per-process must be >= 1",
            id="launch",
        ),
    ],
)  # fmt: skip
def test_a_user_error_is_one_line_on_stderr_and_exit_2(command, error):
    assert_one_line(run(*command), error)


def test_jax_on_the_cpu_alone_holds_back_its_start_up_lines_too():
    """With JAX_PLATFORMS=cpu the CUDA plugin skips its version check and loads its library
    when JAX finds its plugins, which prints the lines again."""
    masks = ("-m", "xlpretrain.masks", "--objective", "tlm", "--example", "a ||| b", "--png")
    result = run(*masks, "/no/such/folder/tlm.png", JAX_PLATFORMS="cpu")
    assert_one_line(result, "xlpretrain.masks: error: No such file or directory (/no/such/")


def test_from_hf_refuses_another_model_type_naming_every_family_it_converts(tmp_path):
    """A GPT-2 folder is refused before any weight is read, and the line says what would
    convert: XLM-R / RoBERTa, ModernBERT (mmBERT) and BERT (mBERT) alike."""
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text('{"model_type": "gpt2"}')
    result = run(
        "-m", "xlpretrain.convert", "from-hf", str(tmp_path / "gpt2"), str(tmp_path / "out")
    )
    assert_one_line(
        result,
        f"xlpretrain.convert: error: {tmp_path / 'gpt2' / 'config.json'}: unsupported "
        "architecture: model_type='gpt2'; from-hf converts XLM-R / RoBERTa (model_type "
        "'xlm-roberta' or 'roberta'), ModernBERT / mmBERT (model_type 'modernbert') and "
        "BERT / mBERT (model_type 'bert') masked LMs",
    )
    assert not (tmp_path / "out").exists()


def assert_one_line(result: subprocess.CompletedProcess, error: str) -> None:
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(error), result.stderr


def test_this_host_has_the_start_up_chatter_that_the_programs_hold_back():
    """JAX's CUDA plugin (the gpu-compile test extra) prints its lines here: so the programs'
    single stderr line above shows they were held back."""
    plain = run("-c", "import jax")
    if not any(quiet.is_noise(line) for line in plain.stderr.splitlines()):
        # CI installs the gpu-compile extra (XLPRETRAIN_REQUIRE_GPU_COMPILE=1): there the
        # chatter must be present, or the one-line tests above would prove nothing.
        assert os.environ.get("XLPRETRAIN_REQUIRE_GPU_COMPILE") != "1", plain.stderr
        pytest.skip("importing JAX prints nothing here (no CUDA plugin installed)")
    assert all(quiet.is_noise(line) for line in plain.stderr.splitlines()), plain.stderr


def test_held_back_passes_on_every_line_but_the_known_ones(capfd):
    with quiet.held_back():
        os.write(2, "\n".join([*CHATTER, "real trouble", *TF_CHATTER, "more"]).encode() + b"\n")
    assert capfd.readouterr().err == "real trouble\nmore\n"


def test_a_missing_torch_names_the_cpu_wheel(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)
    (tmp_path / "pytorch_model.bin").touch()
    with pytest.raises(MissingExtra) as missing:
        hf.read_tensors(tmp_path)
    assert str(missing.value) == (
        "reading pytorch_model.bin needs torch, which is not installed: pip install torch "
        "--index-url https://download.pytorch.org/whl/cpu (the CPU build; plain pip install "
        "torch for CUDA)"
    )


# Packages that install CUDA libraries on any Linux machine, or are CUDA builds.
PULLS_CUDA = re.compile(r"^(torch|triton|tensorflow|tensorflow-gpu|nvidia-.+|cupy-cuda.+)$")


def pulls_cuda(requirement: str, seen: set[str]) -> list[str]:
    """The chains from `requirement` to a package that pulls CUDA, through the requirements
    of the installed packages it names (with the extras it asks for)."""
    req = Requirement(requirement)
    name = canonicalize_name(req.name)
    if PULLS_CUDA.match(name) or (name == "jax" and any("cuda" in e for e in req.extras)):
        return [str(req)]
    if name in seen:
        return []
    seen.add(name)
    try:
        requires = importlib.metadata.requires(name) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    chains = []
    for dependency in map(Requirement, requires):
        wanted = {"extra": ""}, *({"extra": extra} for extra in req.extras)
        if dependency.marker is None or any(dependency.marker.evaluate(e) for e in wanted):
            chains += [f"{req} -> {c}" for c in pulls_cuda(str(dependency), seen)]
    return chains


def test_the_hf_extra_pulls_no_cuda():
    """`pip install -e ".[hf]"` on a CPU machine must not download CUDA (torch's default
    wheel alone is 3 GB of nvidia-* libraries): nothing it names pulls CUDA, directly or
    through what the installed packages require."""
    setup = ast.parse((REPO / "setup.py").read_text())
    extras = next(
        ast.literal_eval(node.value)
        for node in ast.walk(setup)
        if isinstance(node, ast.keyword) and node.arg == "extras_require"
    )
    seen: set[str] = set()
    assert extras["hf"] and not [c for r in extras["hf"] for c in pulls_cuda(r, seen)]


def test_the_switches_bring_back_the_traceback_and_the_start_up_lines():
    """XLPRETRAIN_TRACEBACK=1: the error reported in one line comes with its traceback;
    XLPRETRAIN_QUIET=0: JAX's start-up lines are not held back."""
    convert = ("-m", "xlpretrain.convert", "to-hf", "/no/such/run", "/tmp/never")
    traced = run(*convert, XLPRETRAIN_TRACEBACK="1")
    assert traced.returncode != 0 and "Traceback (most recent call last)" in traced.stderr
    assert "no such folder: /no/such/run" in traced.stderr
    loud = run(*convert, XLPRETRAIN_QUIET="0")
    assert loud.stderr.splitlines()[-1] == "xlpretrain.convert: error: no such folder: /no/such/run"
    if os.environ.get("XLPRETRAIN_REQUIRE_GPU_COMPILE") == "1":  # the CUDA plugin is installed
        assert any(quiet.is_noise(line) for line in loud.stderr.splitlines()), loud.stderr
