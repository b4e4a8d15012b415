"""A regular (non-editable) install is whole: its wheel holds every module of the package, the
shipped configs, the demo corpus's snapshot and every program's `__main__`, and the installed
copy, away from any clone, trains from a shipped config named on the command line
(`--config xlmr:tiny`)."""

import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.compile_flags import FAST_COMPILE

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    """The project's wheel, built from a copy of what a build reads (a build writes build/ and
    *.egg-info beside setup.py)."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy(REPO / name, source)
    for name in ("xlpretrain", "configs"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
         "-q", "-w", str(out)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (built,) = out.glob("xlpretrain-*.whl")
    return built


def test_the_wheel_holds_every_module_the_configs_and_every_program(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "xlpretrain/data/demo_corpus/demo_corpus_v2.tar.xz" in names
    modules = {
        str(path.relative_to(REPO))
        for path in (REPO / "xlpretrain").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    configs = {f"xlpretrain/configs/{path.name}" for path in (REPO / "configs").glob("*.py")}
    assert "xlpretrain/configs/xlmr.py" in configs and "xlpretrain/bench/__main__.py" in modules
    assert modules | configs <= names, sorted((modules | configs) - names)


def test_an_installed_copy_trains_a_shipped_config_by_name(wheel, udhr_tokenizer_path, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
         str(target), str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    # This environment has the project installed in editable mode, whose import hook would
    # serve whatever the installed copy lacks from the clone: a sitecustomize drops it.
    isolate = tmp_path / "isolate"
    isolate.mkdir()
    (isolate / "sitecustomize.py").write_text(
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
    )
    env = {**os.environ, "XLA_FLAGS": FAST_COMPILE}  # one device, cheap compiles
    env["PYTHONPATH"] = os.pathsep.join([str(target), str(isolate)])

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip

    where = run("-c", "import xlpretrain.configs as c; print(c.__file__)")
    assert where.stdout.startswith(str(target)), where.stdout + where.stderr
    workdir = tmp_path / "run"
    trained = run(
        "-m", "xlpretrain.train", "--config", "xlmr:tiny", f"--workdir={workdir}",
        "--config.train.steps=2", "--config.train.log_every=1", "--config.data.batch_size=4",
        "--config.data.max_length=32", f"--config.tokenizer.path={udhr_tokenizer_path}",
        "--config.model.vocab_size=0", "--config.objectives.tlm=0",
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert (workdir / "checkpoints" / "2").is_dir()
    unknown = run("-m", "xlpretrain.train", "--config", "xlmrr:tiny", f"--workdir={workdir}")
    assert unknown.returncode == 2
    assert "no shipped config 'xlmrr' (shipped: demo, ernie_m" in unknown.stderr
