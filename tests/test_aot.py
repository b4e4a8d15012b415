"""Ahead-of-time sizing compiles the step for a mesh without allocating it, and its accounting
follows the shardings."""

import importlib.util
import json
import math
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from xlpretrain import aot
from xlpretrain.training.config import default_config
from xlpretrain.training.plan import resolve


def tiny_config(**mesh):
    """A 2-layer encoder 64 wide over 512 ids, 16 rows of 32 tokens, on the mesh `mesh`."""
    cfg = default_config()
    cfg.model.update(vocab_size=512, hidden_size=64, num_layers=2, num_heads=4, mlp_dim=128)
    cfg.data.update(batch_size=16, max_length=32)
    cfg.mesh.update(**mesh)
    return cfg


def tiny(**mesh):
    """The plan of `tiny_config`, as `size_step` takes it."""
    return resolve(tiny_config(**mesh))


def test_parameters_and_optimizer_state_divide_over_fsdp():
    replicated = aot.size_step(tiny(data=8, fsdp=1, tensor=1), 8)
    sharded = aot.size_step(tiny(data=1, fsdp=8, tensor=1), 8)
    # AdamW keeps two moments of every parameter.
    np.testing.assert_allclose(replicated["optimizer_gib"], 2 * replicated["parameters_gib"],
                               rtol=1e-3)  # fmt: skip
    # Embedding-width axes are split 8 ways; the few odd-sized ones (biases) stay whole.
    assert sharded["parameters_gib"] < replicated["parameters_gib"] / 6
    params = 512 * 64 + 514 * 64 + 2 * (4 * 64 * 64 + 2 * 64 * 128) + 64 * 64  # main matrices
    assert replicated["parameters_gib"] * 2**30 > params * 4
    for report in (replicated, sharded):
        assert report["peak_gib"] >= report["arguments_gib"] > 0
        assert report["temporaries_gib"] > 0 and all(report["fits"].values())
    assert sharded["mesh"] == {"data": 1, "fsdp": 8, "tensor": 1}


def test_sizing_allocates_no_state():
    before = sum(math.prod(a.shape) for a in jax.live_arrays())
    aot.size_step(tiny(data=2, fsdp=4, tensor=1), 8)
    after = sum(math.prod(a.shape) for a in jax.live_arrays())
    assert after - before < 512 * 64  # not even the embedding table


def test_cli_sizes_a_mesh_larger_than_this_process_has():
    result = subprocess.run(
        [sys.executable, "-m", "xlpretrain.aot", "--config", "configs/xlmr.py:tiny",
         "--devices", "16", "--mesh", "2,8,1", "--json", "--config.data.batch_size=32"],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["devices"] == 16 and report["mesh"] == {"data": 2, "fsdp": 8, "tensor": 1}
    assert report["peak_gib"] > 0


def test_each_stage_sizes_its_own_shapes():
    """Context extension: a stage of rows twice as long and half as many compiles its own
    step, which `--stage` sizes (default: the last)."""
    cfg = tiny_config(data=8, fsdp=1, tensor=1)
    cfg.objectives.mmlm = 0.0
    longer = {"batch_size": {"mmlm": 8}, "max_length": {"mmlm": 64}}
    cfg.schedule = (
        {"start_step": 0, "objectives": {"mmlm": 1.0}},
        {"start_step": 5, "objectives": {"mmlm": 1.0}, **longer},
    )
    plan = resolve(cfg)
    first, last = aot.size_step(plan, 8, stage=0), aot.size_step(plan, 8)
    assert (first["stage"], first["rows"]) == (1, {"mmlm": [16, 32]})
    assert (last["stage"], last["rows"]) == (2, {"mmlm": [8, 64]})
    assert "stage 2: mmlm 8 × 64 (global rows × tokens)" in aot.format_report(last)
    bad = aot_cli("--devices", "8", "--stage", "2")
    assert bad.returncode == 2 and "--stage 2: the run has 1 stage(s), from 1" in bad.stderr


def aot_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "xlpretrain.aot", "--config", "configs/xlmr.py:tiny", *args],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None, reason="needs libtpu (pip install -e '.[tpu]')"
)
def test_cli_compiles_for_a_tpu_topology_without_a_tpu():
    """XLA:TPU compiles the step on this host; no TPU is touched."""
    result = aot_cli("--topology", "v5p:2x2x2", "--mesh", "1,-1,1", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["devices"] == 8 and report["device_kind"].startswith("TPU")
    assert report["mesh"] == {"data": 1, "fsdp": 8, "tensor": 1}
    assert report["note"].startswith("compiled by XLA:TPU") and report["peak_gib"] > 0
    too_big = aot_cli("--topology", "v5p:2x2x2", "--mesh", "1,-1,1", "--json",
                      "--config.data.batch_size=65536", "--config.data.max_length=510")  # fmt: skip
    report = json.loads(too_big.stdout.strip().splitlines()[-1])
    assert report["note"].startswith("XLA:TPU refused") and report["peak_gib"] > 95
    assert not any(report["fits"].values())
    bad = aot_cli("--topology", "v5p:3x3x3x3", "--mesh", "1,-1,1")
    assert bad.returncode == 2 and "--topology v5p:3x3x3x3: no TPU topology" in bad.stderr


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is not None, reason="libtpu installed")
def test_cli_topology_without_libtpu_says_what_to_install():
    result = aot_cli("--topology", "v5p:2x2x2")
    assert result.returncode == 2
    assert "--topology v5p:2x2x2: no TPU topology" in result.stderr
    assert "pip install -e '.[tpu]'" in result.stderr


def test_gpu_topology_names_are_checked():
    from xlpretrain.parallel import gpu_targets

    spec, hosts, per_host = gpu_targets.parse_topology("h200:2x8")
    assert (spec.name, hosts, per_host) == ("NVIDIA H200", 2, 8)
    assert gpu_targets.parse_topology("h100")[1:] == (1, 1)
    with pytest.raises(ValueError, match="unknown GPU 'v100'"):
        gpu_targets.parse_topology("v100:8")
    with pytest.raises(ValueError, match="expected GPU:N or GPU:HOSTSxN"):
        gpu_targets.parse_topology("h100:eight")
    assert "cuda_compute_capability { major: 9 minor: 0 }" in spec.target_config()


def test_sm90_cli_compiles_for_8_h100s_without_a_gpu():
    """XLA:GPU compiles the step for one 8-GPU host here, the fused kernels with Triton and
    ptxas (attention auto picks them for a GPU), and reports how ptxas built them."""
    from xlpretrain.parallel import gpu_targets

    try:
        gpu_targets.topology_devices("h100:1")
    except ValueError as error:
        if os.environ.get("XLPRETRAIN_REQUIRE_GPU_COMPILE") == "1":
            raise
        pytest.skip(str(error))
    result = aot_cli("--topology", "h100:8", "--mesh", "1,-1,1", "--json",
                     "--config.model.attention=auto")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["devices"] == 8 and report["device_kind"] == "NVIDIA H100 80GB HBM3"
    assert report["mesh"] == {"data": 1, "fsdp": 8, "tensor": 1}
    assert report["note"] == "compiled by XLA:GPU for NVIDIA H100 80GB HBM3"
    assert report["peak_gib"] > 0 and report["fits"]["H100 80GB"]
    names = {k["name"].split("__")[0] for k in report["kernels"]}  # XLA numbers repeats: __1
    assert names == {"_dkv_kernel", "_dq_kernel", "_forward_kernel"}, names
    assert all(k["spill_stores"] == 0 for k in report["kernels"]), report["kernels"]
    bad = aot_cli("--topology", "v100:8")
    assert bad.returncode == 2 and "GPU topologies are h100, h200, a100" in bad.stderr


def test_kernels_cli_names_an_unknown_gpu():
    result = subprocess.run(
        [sys.executable, "-m", "xlpretrain.aot", "--kernels", "v100"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2 and "unknown GPU 'v100'" in result.stderr


def test_the_vocabulary_is_padded_to_split_over_tensor_and_the_memory_drops(caplog):
    """XLM-R's 250,002 ids divide by no tensor size: unpadded (`model.vocab_multiple=1`) the
    word embeddings and the head's bias stay whole on every device — named in the log with
    their size — while the default padding to 250,112 rows splits them four ways."""
    from xlpretrain.model import init_params
    from xlpretrain.parallel.sharding import logical_shardings, make_mesh

    default = resolve(default_config())
    base = default.model
    boxed = jax.eval_shape(lambda rng: init_params(base, rng), jax.random.key(0))
    mesh = make_mesh(1, 2, 4)
    table = logical_shardings(boxed, mesh, default.mesh.rules)["embeddings"]
    table = table["word_embeddings"]["embedding"]
    assert table.shard_shape((base.padded_vocab_size, 768)) == (250112 // 4, 768 // 2)

    def xlmr_vocab(multiple):
        cfg = tiny_config(data=1, fsdp=2, tensor=4)
        cfg.model.update(vocab_size=250002, vocab_multiple=multiple)
        return aot.size_step(resolve(cfg), 8)

    with caplog.at_level("WARNING", logger="xlpretrain"):
        replicated = xlmr_vocab(1)
    assert "parameter embeddings/word_embeddings/embedding (250002, 64) (64.0 MB)" in caplog.text
    assert "mesh axes tensor do not divide its dimension 0 (250002)" in caplog.text
    caplog.clear()
    split = xlmr_vocab(128)
    assert "word_embeddings" not in caplog.text
    table_gib = 250002 * 64 * 4 / 2**30 / 2  # per device, split over fsdp only
    saved = replicated["parameters_gib"] - split["parameters_gib"]
    assert saved > 0.7 * table_gib  # three quarters of the table leave each device
    assert split["optimizer_gib"] < replicated["optimizer_gib"] - 1.4 * table_gib
    assert split["peak_gib"] < replicated["peak_gib"]
