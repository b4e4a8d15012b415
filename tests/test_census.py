"""The census counts what a compiled program does: a matmul's FLOPs exactly, a loop's body its
trip count times, attention custom calls by formula; the census program compiles the
framework's step beside the plain reference and reports both (`xlpretrain.bench.census`).

The H100 cases need the `gpu-compile` extra (CUDA plugin, ptxas, cuDNN), not a GPU: skipped
without it unless XLPRETRAIN_REQUIRE_GPU_COMPILE=1 (CI), which makes its absence a failure.
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import SingleDeviceSharding

from xlpretrain.bench import census, hlo_count, reference_step
from xlpretrain.parallel import gpu_targets
from xlpretrain.training.config_files import load_config
from xlpretrain.training.plan import resolve

M, K, N = 64, 128, 96


def h100():
    try:
        return gpu_targets.topology_devices("h100:1")[0]
    except ValueError as error:
        if os.environ.get("XLPRETRAIN_REQUIRE_GPU_COMPILE") == "1":
            raise
        pytest.skip(str(error))


def counted(fn, *shapes, device=None, dtype=jnp.float32):
    device = device or jax.devices("cpu")[0]
    args = [jax.ShapeDtypeStruct(s, dtype, sharding=SingleDeviceSharding(device)) for s in shapes]
    return hlo_count.count(jax.jit(fn).lower(*args).compile().as_text())


def one_matmul(x, w, w2):
    return jnp.tanh(x @ w).sum()


def two_matmuls(x, w, w2):
    return jnp.tanh(x @ w).sum() + jnp.tanh(x @ w2).sum()


@pytest.mark.parametrize("target", ["cpu", "h100"])
def test_a_redundant_matmul_adds_its_flops(target):
    device = h100() if target == "h100" else None
    dtype = jnp.bfloat16 if target == "h100" else jnp.float32
    shapes = ((M, K), (K, N), (K, N))
    one = counted(one_matmul, *shapes, device=device, dtype=dtype)
    two = counted(two_matmuls, *shapes, device=device, dtype=dtype)
    assert one.matmul_flops == 2 * M * K * N
    assert two.matmul_flops - one.matmul_flops == 2 * M * K * N
    assert two.traffic_bytes > one.traffic_bytes and one.launches >= 1


@pytest.mark.parametrize("target", ["cpu", "h100"])
def test_a_loop_body_counts_its_trip_count_times(target):
    device = h100() if target == "h100" else None

    def looped(x, w):
        def body(carry, _):
            return jnp.tanh(carry @ w), None

        return jax.lax.scan(body, x, None, length=7)[0].sum()

    counts = counted(looped, (M, K), (K, K), device=device)
    assert counts.matmul_flops == 7 * 2 * M * K * K
    assert counts.loops_without_trip_count == 0


def test_cudnn_attention_is_counted_by_formula():
    device = h100()
    b, length, heads, d = 2, 128, 4, 64

    def attention(q):
        return jax.nn.dot_product_attention(q, q, q, implementation="cudnn").astype(jnp.float32)

    forward = counted(lambda q: attention(q).sum(), (b, length, heads, d), device=device,
                      dtype=jnp.bfloat16)  # fmt: skip
    both = counted(jax.grad(lambda q: attention(q).sum()), (b, length, heads, d), device=device,
                   dtype=jnp.bfloat16)  # fmt: skip
    unit = b * heads * length * length * d
    assert forward.attention_flops == 4 * unit
    assert both.attention_flops == (4 + 10) * unit


def test_selecting_ops_read_what_they_select():
    """A dynamic slice of one row reads that row, not the table it slices."""

    def row(table, index):
        return jax.lax.dynamic_slice_in_dim(table, index.astype(jnp.int32)[0], 1) * 2.0

    device = jax.devices("cpu")[0]
    args = (
        jax.ShapeDtypeStruct((4096, 256), jnp.float32, sharding=SingleDeviceSharding(device)),
        jax.ShapeDtypeStruct((1,), jnp.float32, sharding=SingleDeviceSharding(device)),
    )
    counts = hlo_count.count(jax.jit(row).lower(*args).compile().as_text())
    assert counts.traffic_bytes < 4 * 256 * 4 * 4  # a few rows' worth, not 4 MiB


def test_the_reference_step_trains_at_the_uniform_loss():
    """The plain step is a working MLM step: at initialisation its loss is ln(vocabulary)."""
    model = reference_step.ReferenceModel(
        layers=2, hidden=32, heads=4, mlp=64, vocab=500, table_rows=512, max_positions=40,
        dtype="float32", attention="xla", dropout=0.1,
    )  # fmt: skip
    tx = reference_step.optimizer(clip_norm=1.0, weight_decay=0.01)
    params = reference_step.init_params(model, jax.random.key(0))
    rng = np.random.default_rng(0)
    batch = {
        "input_ids": rng.integers(3, 500, (4, 32)),
        "positions": np.tile(np.arange(2, 34), (4, 1)),
        "segment_ids": np.ones((4, 32), np.int32),
        "pred_positions": rng.integers(0, 32, (4, 5)),
        "pred_labels": rng.integers(3, 500, (4, 5)),
        "pred_weights": np.ones((4, 5), np.float32),
    }
    step = jax.jit(reference_step.train_step(model, tx))
    state = (params, tx.init(params), jax.random.key(1), jnp.zeros((), jnp.int32))
    losses = []
    for _ in range(2):
        state, loss = step(state, batch)
        losses.append(float(loss))
    assert abs(losses[0] - np.log(500)) < 0.05
    assert losses[-1] < losses[0]


def tiny_plan(**model):
    cfg = load_config("xlmr:tiny")
    cfg.model.update(vocab_size=512, **model)
    cfg.data.update(batch_size=8, max_length=64)
    return resolve(cfg)


def test_census_compares_the_step_with_the_reference(tmp_path):
    report = census.census(tiny_plan(), "cpu")
    census.write(report, str(tmp_path), str(tmp_path / "hlo"))
    steps = report["steps"]
    assert set(steps) == {"xlpretrain", "reference", "xlpretrain LM head", "reference LM head"}
    ours, theirs = steps["xlpretrain"], steps["reference"]
    # Both steps do at least the model's work, counted by formula.
    for row in (ours, theirs):
        assert row["compiled_tflop"] >= 0.99 * report["model_tflop"] > 0
        assert row["launches"] > 0 and row["peak_gib"] > 0
        assert row["random_launches"] > 0  # hidden dropout 0.1 in both
    assert 0 < steps["xlpretrain LM head"]["compiled_tflop"] < ours["compiled_tflop"]
    assert report["ratio"]["launches"] == ours["launches"] / theirs["launches"]
    written = json.loads((tmp_path / "census.json").read_text())
    assert written["steps"] == steps and "_hlo" not in written
    assert {p.name for p in (tmp_path / "hlo").iterdir()} == {
        "xlpretrain.hlo.txt", "reference.hlo.txt"
    }  # fmt: skip
    table = census.format_census(report)
    assert "| ratio |" in table and "| reference LM head |" in table


def test_census_without_dropout_has_no_random_bits():
    report = census.census(tiny_plan(dropout_rate=0.0, attention_dropout_rate=0.0), "cpu")
    assert report["steps"]["xlpretrain"]["random_launches"] == 0
    assert report["steps"]["reference"]["random_launches"] == 0


def test_census_of_modernbert_says_there_is_no_reference():
    cfg = load_config("mmbert:tiny")
    cfg.data.update(batch_size=4, max_length=64)
    report = census.census(resolve(cfg), "cpu")
    assert "reference" not in report["steps"] and "ratio" not in report
    assert "no reference" in report["note"]


def test_census_cli_names_an_unknown_target_in_one_line():
    result = subprocess.run(
        [sys.executable, "-m", "xlpretrain.bench", "--config", "configs/xlmr.py:tiny",
         "--census", "z100"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2
    assert "z100" in result.stderr.strip().splitlines()[-1]
