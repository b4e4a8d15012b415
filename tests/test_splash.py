"""TPU splash attention (interpret mode on CPU): each mask it claims equals our mask function,
its output and gradients equal the XLA reference, and everything else falls back to XLA."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xlpretrain import masks
from xlpretrain.model.attention import dot_product_attention
from xlpretrain.model.kernels import splash
from xlpretrain.training.config import DEFAULT_LOGICAL_AXIS_RULES as RULES

B, L, H, D = 2, 128, 2, 16


def packed_meta(seed: int = 0) -> dict[str, jax.Array]:
    """Packed segments of random length with positions restarting at 2, then padding."""
    rng = np.random.default_rng(seed)
    segment = np.zeros((B, L), np.int32)
    positions = np.ones((B, L), np.int32)
    for row in range(B):
        start, unit = 0, 0
        while start < L - 20:
            size = int(rng.integers(8, 50))
            unit += 1
            segment[row, start : start + size] = unit
            positions[row, start : start + size] = 2 + np.arange(min(size, L - start))
            start += size
    side = (rng.random((B, L)) < 0.5).astype(np.int32)
    meta = {"segment_ids": segment, "pair_ids": segment, "side": side, "positions": positions,
            "is_masked": (rng.random((B, L)) < 0.2).astype(np.int32)}  # fmt: skip
    return {k: jnp.asarray(v) for k, v in meta.items()}


@pytest.mark.parametrize("mask_fn", splash.SEGMENT_MASKS, ids=lambda f: f.__name__)
def test_each_claimed_mask_is_the_segment_mask_splash_builds(mask_fn):
    meta = packed_meta()
    got = np.asarray(masks.materialize(mask_fn, meta))[:, 0]
    same = np.asarray(meta["segment_ids"])[:, :, None] == np.asarray(meta["segment_ids"])[:, None]
    np.testing.assert_array_equal(got, same)


def assert_splash_equals_xla(mask_fn, meta, seed: int) -> None:
    """Splash's attention under `mask_fn`, its value and gradients, equal XLA's (float32)."""
    rng = np.random.default_rng(seed)
    q, k, v = (jnp.asarray(rng.normal(size=(B, L, H, D)), jnp.float32) for _ in range(3))
    cotangent = jnp.asarray(rng.normal(size=(B, L, H, D)), jnp.float32)

    def loss(impl):
        def f(q, k, v):
            out = dot_product_attention(
                q, k, v, mask_fn=mask_fn, q_meta=meta, k_meta=meta, impl=impl, platform="cpu"
            )
            return jnp.sum(out * cotangent)

        return f

    with jax.default_matmul_precision("float32"):
        got = jax.value_and_grad(loss("splash"), (0, 1, 2))(q, k, v)
        want = jax.value_and_grad(loss("xla"), (0, 1, 2))(q, k, v)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4)
    for g, w in zip(got[1], want[1], strict=True):
        np.testing.assert_allclose(g, w, atol=1e-4)


def test_splash_matches_the_xla_reference():
    assert_splash_equals_xla(masks.mmlm, packed_meta(1), seed=2)


@pytest.mark.parametrize("window", [16, np.iinfo(np.int32).max], ids=["local", "global"])
def test_splash_within_a_window_matches_the_xla_reference(window):
    """A ModernBERT layer's windowed mask: a local layer (distance ≤ 16) runs splash's band
    mask, a global one its full mask; values and gradients equal the XLA reference's."""
    mask_fn = masks.windowed(masks.mmlm, 16)
    meta = packed_meta(4)
    assert splash.unsupported(mask_fn, L, L, False, False) is None
    assert_splash_equals_xla(
        mask_fn, {**meta, "window": jnp.full_like(meta["positions"], window)}, seed=5
    )


def test_other_calls_fall_back_with_a_reason():
    for mask_fn in (masks.camlm, masks.btmlm_generate, masks.veco_cross, masks.veco_causal):
        assert "not a segment mask" in splash.unsupported(mask_fn, 128, 128, False, False)
    assert "score modification" in splash.unsupported(masks.mmlm, 128, 128, True, False)
    assert "dropout" in splash.unsupported(masks.mmlm, 128, 128, False, True)
    assert "divisible" in splash.unsupported(masks.mmlm, 100, 100, False, False)
    assert splash.unsupported(masks.tlm, 256, 256, False, False) is None
    windowed = masks.windowed(masks.camlm, 64)
    assert "not a segment mask" in splash.unsupported(windowed, 128, 128, False, False)


def test_splash_under_shard_map_equals_one_device():
    from xlpretrain.parallel.sharding import batch_sharding, make_mesh, under_mesh

    meta = {f: jnp.tile(x, (4, 1)) for f, x in packed_meta(3).items()}
    rng = np.random.default_rng(4)
    q, k, v = (jnp.asarray(rng.normal(size=(4 * B, L, H, D)), jnp.float32) for _ in range(3))

    def f(q, k, v):
        out = dot_product_attention(q, k, v, mask_fn=masks.tlm, q_meta=meta, k_meta=meta,
                                    impl="splash", platform="cpu")  # fmt: skip
        return jnp.sum(out**2)

    grad_fn = jax.value_and_grad(f, (0, 1, 2))
    want = jax.jit(grad_fn)(q, k, v)
    mesh = make_mesh(4, 1, 2)
    sharded = under_mesh(mesh, RULES, grad_fn)
    assert "shard_map" in str(jax.make_jaxpr(sharded)(q, k, v))
    rows = batch_sharding(mesh, RULES)
    got = jax.jit(sharded, in_shardings=(rows,) * 3)(q, k, v)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for g, w in zip(got[1], want[1], strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5)
