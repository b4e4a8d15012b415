"""The ModernBERT architecture (`model.architecture = "modernbert"`, xlpretrain/model/modern.py):
local layers see only their window, in the reference and in the fused kernel, which skips the
tiles outside it; rotary attention depends on distances alone; scanned equals unrolled; every
objective trains on it, or is refused with the reason; a sharded step equals one device's; the
FLOPs count the new layers by hand. Its Hugging Face interop is tests/test_modernbert.py's.
"""

import dataclasses
import logging

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.test_flash_attention import assert_same_value_and_grads, fused, packed_meta, qkv
from tests.test_plan import shipped_config
from tests.tiny import one_device_and_a_mesh, run_config, trains_alone
from xlpretrain import api, backbones, masks, objectives
from xlpretrain.bench.kernel_check import reference_attention
from xlpretrain.core.errors import ConfigError
from xlpretrain.model import MaskedLM, ModelConfig, init_params
from xlpretrain.model.kernels import block_mask
from xlpretrain.model.modern import GLOBAL, ModernLayer, layer_schedule
from xlpretrain.objectives.flops import attention_scores, encoder_matmuls
from xlpretrain.training import trainer as trainer_lib
from xlpretrain.training.metrics import read_metrics
from xlpretrain.training.plan import resolve

CONFIG = backbones.get("modernbert").config(
    vocab_size=48, hidden_size=32, num_layers=4, num_heads=4,
    mlp_dim=40, max_positions=64, absolute_positions=False, dropout_rate=0.0,
    attention_dropout_rate=0.0, local_window=6,
)  # fmt: skip


def modern_run(**overrides):
    """The tiny pre-training run on ModernBERT layers (window 8, a global layer in three)."""
    cfg = run_config(**overrides)
    cfg.model.update(architecture="modernbert", absolute_positions=False, local_window=8)
    return cfg


def test_the_schedule_alternates_global_and_local_layers():
    schedule = layer_schedule(CONFIG)
    assert schedule["window"].tolist() == [GLOBAL, 3, 3, GLOBAL]
    assert schedule["theta"].tolist() == [160_000.0, 10_000.0, 10_000.0, 160_000.0]
    assert schedule["first"].tolist() == [True, False, False, False]


def test_a_windowed_mask_is_the_objectives_mask_within_the_distance():
    meta = packed_meta()
    window = jnp.full_like(meta["positions"], 3)
    allowed = masks.materialize(masks.windowed(masks.tlm, 3), {**meta, "window": window})[:, 0]
    plain = masks.materialize(masks.tlm, meta)[:, 0]
    index = np.arange(allowed.shape[1])
    near = np.abs(index[:, None] - index[None, :]) <= 3
    np.testing.assert_array_equal(allowed, plain & near[None])
    assert masks.windowed(masks.tlm, 3) is masks.windowed(masks.tlm, 3)  # one program


def test_the_fused_kernel_equals_the_reference_on_a_window_and_skips_tiles_outside_it():
    meta = packed_meta()
    meta = {**meta, "window": jnp.full_like(meta["positions"], 5)}
    mask_fn = masks.windowed(masks.mmlm, 5)
    assert_same_value_and_grads(
        lambda q, k, v: fused(q, k, v, mask_fn, meta),
        lambda q, k, v: reference_attention(q, k, v, mask_fn, meta),
        qkv(),
    )
    # One 64-token segment in 16-tiles: the window leaves 6 of 16 tiles, the segment all 16.
    row = {"segment_ids": jnp.ones((1, 64), jnp.int32), "window": jnp.full((1, 64), 5)}
    tiles = {
        name: block_mask.classify_tiles(fn, row, row, q_len=64, k_len=64, block_q=16, block_k=16)
        for name, fn in (("windowed", mask_fn), ("segment", masks.mmlm))
    }
    assert float(block_mask.skipped_fraction(tiles["windowed"])) == 6 / 16
    assert float(block_mask.skipped_fraction(tiles["segment"])) == 0.0


def layer_output(hidden, positions, window, segment=None):
    """One local ModernBERT layer (not the first) on `hidden` `[1, L, H]`."""
    length = hidden.shape[1]
    meta = {
        "segment_ids": jnp.ones((1, length), jnp.int32) if segment is None else segment,
        "positions": positions,
    }
    layer = ModernLayer(CONFIG, masks.mmlm, deterministic=True)
    schedule = {"window": jnp.int32(window), "theta": jnp.float32(1e4), "first": jnp.bool_(False)}
    params = layer.init(jax.random.key(0), hidden, meta, None, schedule)
    # Jitted: op by op, the Jacobian below dispatches (and compiles) each small op apart.
    run = jax.jit(lambda h, p: layer.apply(params, h, {**meta, "positions": p}, None, schedule)[0])
    return lambda h, p=positions: run(h, p)


def test_a_local_layer_reads_nothing_outside_its_window():
    hidden = jnp.asarray(np.random.default_rng(0).normal(size=(1, 20, 32)), jnp.float32)
    run = layer_output(hidden, 2 + jnp.arange(20)[None], window=3)
    influence = jax.jit(jax.jacobian(lambda h: run(h)[0, 10]))(hidden)  # [H, 1, L, H]
    reached = np.abs(np.asarray(influence)).sum(axis=(0, 1, 3)) > 0
    assert reached.tolist() == [abs(i - 10) <= 3 for i in range(20)]


def test_rotary_attention_depends_on_distances_only():
    hidden = jnp.asarray(np.random.default_rng(1).normal(size=(1, 12, 32)), jnp.float32)
    positions = 2 + jnp.arange(12)[None]
    run = layer_output(hidden, positions, window=GLOBAL)
    shifted = float(jnp.abs(run(hidden, positions + 7) - run(hidden)).max())
    reordered = float(jnp.abs(run(hidden, positions[:, ::-1]) - run(hidden)).max())
    assert shifted < 2e-6 and reordered > 100 * max(shifted, 1e-7), (shifted, reordered)


def test_scanned_layers_equal_unrolled():
    unrolled = ModelConfig(**{**CONFIG.__dict__, "scan_layers": False})
    ids = jnp.asarray(np.random.default_rng(2).integers(4, 48, (2, 16)), jnp.int32)
    positions = 2 + jnp.arange(16)[None].repeat(2, 0)
    meta = {"segment_ids": jnp.ones_like(ids), "positions": positions}
    scanned = nn.unbox(init_params(CONFIG, jax.random.key(0)))
    layers = scanned["encoder"]["layers"]
    per_layer = {f"layers_{i}": jax.tree.map(lambda x, i=i: x[i], layers) for i in range(4)}
    flat = {**scanned, "encoder": {**per_layer, "final_norm": scanned["encoder"]["final_norm"]}}
    kwargs = dict(mask_fn=masks.mmlm, mask_meta=meta)
    forward = jax.jit(  # one program each: op by op, every small op compiles apart
        lambda config, params: MaskedLM(config).apply({"params": params}, ids, positions, **kwargs),
        static_argnums=0,
    )
    np.testing.assert_allclose(forward(unrolled, flat), forward(CONFIG, scanned), atol=1e-5)


# Each objective with what it needs of the model; XLM-E's gated bias is refused (rotary).
REQUIRED = {  # what an objective needs beside the defaults
    "btmlm": {"btmlm__target_signal": "tag_token"},
    "veco": {"model__cross_attention": True}, "veco_mono": {"model__cross_attention": True},
    "mrtd": {"xlm_e__generator_layers": 1}, "trtd": {"xlm_e__generator_layers": 1},
}  # fmt: skip
OBJECTIVES = {name: REQUIRED.get(name, {}) for name in objectives.REGISTRY}  # every one


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_every_objective_trains_on_modernbert(name):
    trains_alone(resolve(modern_run(objectives={name: 1.0}, **OBJECTIVES[name])), name)


def test_relative_position_bias_and_learned_positions_are_refused_with_the_reason():
    with pytest.raises(ConfigError, match="'model.relative_position': .*rotary"):
        resolve(modern_run(model__relative_position="gated"))
    cfg = modern_run()
    cfg.model.absolute_positions = True
    with pytest.raises(ConfigError, match="'model.absolute_positions': .*rotary"):
        resolve(cfg)


def test_flops_count_geglu_and_local_windows_by_hand():
    """4 layers 32 wide, FFN 40: Q, K, V, O (4·32²) and GeGLU's three matrices (3·32·40) per
    layer; at L = 16, the global layers 0 and 3 score 16 keys, the local ones 7 (window 6)."""
    tokens = 64
    assert encoder_matmuls(CONFIG, tokens) == 6 * 4 * (4 * 32 * 32 + 3 * 32 * 40) * tokens
    assert attention_scores(CONFIG, tokens, 16) == 12 * 32 * (16 + 7 + 7 + 16) * tokens
    assert attention_scores(CONFIG, tokens, 4) == 12 * 32 * 4 * 4 * tokens  # windows ≥ the row


def test_a_sharded_step_equals_one_device():
    """MMLM + TLM on ModernBERT layers (VECO's plug-in too), data 2 × fsdp 2 × tensor 2 against
    one device: the same loss and the same updated parameters."""
    results = one_device_and_a_mesh(resolve(modern_run(model__cross_attention=True)))
    (one_metrics, one), (sharded_metrics, sharded) = results
    np.testing.assert_allclose(sharded_metrics["loss"], one_metrics["loss"], rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-4), sharded, one)


@pytest.mark.parametrize(
    "size, total, non_embedding", [("small", 140e6, 42e6), ("base", 307e6, 110e6)]
)
def test_mmbert_configs_have_the_papers_shape_and_phases(size, total, non_embedding):
    """22 layers, GeGLU 1,152, every third layer global, local windows of 128, θ 160 k / 10 k;
    140 M (42 M without the embeddings) and 307 M (110 M) parameters; the phases' mask rates,
    α and languages step at 2.3 T and 2.9 T of 3 T tokens; the decay is the last 0.1 T."""
    cfg = shipped_config("mmbert.py", size)
    plan = resolve(cfg)
    shapes = jax.eval_shape(lambda: nn.unbox(init_params(plan.model, jax.random.key(0))))
    count = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))
    embedding = plan.model.padded_vocab_size * plan.model.hidden_size
    assert count == pytest.approx(total, rel=0.01)
    assert count - embedding == pytest.approx(non_embedding, rel=0.02)  # the paper rounds
    m = plan.model
    assert (m.num_layers, m.mlp_dim, m.local_window, m.global_every) == (22, 1152, 128, 3)
    assert (m.rope_theta, m.local_rope_theta) == (160_000.0, 10_000.0)
    steps = plan.loop.steps
    for key, values in (
        ("mono_mask_rate", (0.3, 0.15, 0.05)),
        ("mono_alpha", (0.7, 0.5, 0.3)),
        ("mono_languages", (60, 110, 1833)),
    ):
        phases = [plan.anneal.value(key, round(share * steps)) for share in (0, 2.31 / 3, 2.91 / 3)]
        assert phases == pytest.approx(values), key
    assert plan.optim.schedule == "wsd"
    assert plan.optim.decay_steps == pytest.approx(steps / 30, abs=1)


def test_splash_runs_local_and_global_layers_as_the_reference_does():
    """The scanned layers' window is traced, so splash picks its band or its full kernel per
    layer at run time: 128-token rows (splash's tile) through 4 layers, two of them local with
    a 16-token window, give XLA attention's states."""
    config = dataclasses.replace(CONFIG, max_positions=128, local_window=32)
    ids = jnp.asarray(np.random.default_rng(6).integers(4, 48, (2, 128)), jnp.int32)
    mask = jnp.ones_like(ids).at[1, 90:].set(0)
    positions, meta = api._meta(config, ids, mask, config.pad_token_id)
    params = nn.unbox(init_params(config, jax.random.key(4)))
    states = {}
    for impl in ("xla", "splash"):
        model = MaskedLM(dataclasses.replace(config, attention_impl=impl, kernel_platform="cpu"))
        states[impl] = jax.jit(  # one program: op by op, every small op compiles apart
            lambda p, model=model: model.apply(
                {"params": p}, ids, positions, mask_fn=masks.mmlm, mask_meta=meta
            )
        )(params)
    np.testing.assert_allclose(states["splash"], states["xla"], atol=2e-5)


def test_mmbert_phases_resume_exactly_across_a_boundary(udhr_run_config, tmp_path, caplog):
    """ModernBERT layers, MMLM + TLM, mmBERT's phases (mask rate, α and languages stepping at
    step 4 of 8) and its context extension (8 rows of 32 tokens, then 4 of 64, the new shapes
    announced and compiled): stopped at step 3 and resumed, the run logs the losses and data
    settings of an uninterrupted one."""
    phases = (
        {"step": 0, "mono_mask_rate": 0.3, "mono_alpha": 0.7, "mono_languages": 2},
        {"step": 4, "mono_mask_rate": 0.3, "mono_alpha": 0.7},
        {"step": 4, "mono_mask_rate": 0.15, "mono_alpha": 0.3, "mono_languages": 4},
    )
    weights = {"mmlm": 1.0, "tlm": 0.5}
    schedule = (
        {"start_step": 0, "objectives": weights},
        {
            "start_step": 4,
            "objectives": weights,
            "batch_size": dict.fromkeys(weights, 4),
            "max_length": dict.fromkeys(weights, 64),
        },
    )

    def run(workdir, **overrides):
        cfg = udhr_run_config(
            data__anneal=phases, objectives=dict.fromkeys(weights, 0.0), schedule=schedule,
            **overrides,
        )  # fmt: skip
        cfg.model.update(architecture="modernbert", absolute_positions=False, local_window=8)
        trainer = trainer_lib.build(resolve(cfg), str(workdir), jax.devices()[:1])
        try:
            trainer_lib.run(trainer)
        finally:
            trainer.checkpointer.close()
        return {r["step"]: r for r in read_metrics(workdir) if "loss" in r}

    with caplog.at_level(logging.INFO, logger="xlpretrain"):
        whole = run(tmp_path / "whole")
    assert (
        "step 4: stage 2/2: mmlm 1, tlm 0.5; `loss` sums these; rows × tokens: mmlm 4 × 64 "
        "(was 8 × 32), tlm 4 × 64 (was 8 × 32): new shapes, its step compiles"
    ) in caplog.messages
    assert any(m.startswith("step 4: stage 2's step compiled and ran in") for m in caplog.messages)
    run(tmp_path / "resumed", train__stop_at=3)  # the old phase's last step
    resumed = run(tmp_path / "resumed")
    assert [whole[s]["data/mono_mask_rate"] for s in (3, 4)] == [0.3, 0.15]
    for step in range(1, 9):
        for key in ("loss", "data/mono_mask_rate", "data/mono_alpha", "data/mono_languages"):
            np.testing.assert_allclose(resumed[step][key], whole[step][key], rtol=1e-5)
