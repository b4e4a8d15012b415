"""XLM-E's gated relative position bias against a direct NumPy evaluation of the formula."""

import dataclasses

import flax.linen as nn
import jax
import numpy as np
import pytest

from tests.tiny import model_config
from xlpretrain import masks
from xlpretrain.model import MaskedLM, init_params
from xlpretrain.model.relative_position import (
    bucketed_bias,
    gated_bias,
    relative_position_bucket,
)

RNG = np.random.default_rng(0)


def numpy_bucket(relative, num_buckets, max_distance):
    """T5's `_relative_position_bucket` (bidirectional), written out with NumPy."""
    half = num_buckets // 2
    out = np.where(relative > 0, half, 0)
    n = np.abs(relative)
    max_exact = half // 2
    with np.errstate(divide="ignore"):
        large = max_exact + (
            np.log(np.maximum(n, 1) / max_exact)
            / np.log(max_distance / max_exact)
            * (half - max_exact)
        ).astype(np.int64)
    return out + np.where(n < max_exact, n, np.minimum(large, half - 1))


def test_buckets_match_t5():
    relative = np.arange(-300, 301)
    got = np.asarray(relative_position_bucket(relative, 32, 128))
    np.testing.assert_array_equal(got, numpy_bucket(relative, 32, 128))
    assert got.min() == 0 and got.max() == 31
    assert len(set(got[relative < 0]) & set(got[relative > 0])) == 0  # direction-aware


def test_gated_bias_equals_the_formula():
    b, h, lq, lk, d_head, buckets = 2, 3, 5, 6, 4, 8
    q = RNG.normal(size=(b, lq, h, d_head)).astype(np.float32)
    table = RNG.normal(size=(buckets, h)).astype(np.float32)
    u, v = (RNG.normal(size=(h, d_head)).astype(np.float32) for _ in range(2))
    w = np.float32(0.7)
    q_pos = np.tile(np.arange(2, 2 + lq), (b, 1))
    k_pos = np.tile(np.arange(2, 2 + lk), (b, 1))
    d = np.asarray(bucketed_bias(q_pos, k_pos, table, num_buckets=buckets, max_distance=16))
    got = np.asarray(gated_bias(q, d, u, v, w))

    expected = np.zeros((b, h, lq, lk))
    sigmoid = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    for bi in range(b):
        for hi in range(h):
            for i in range(lq):
                g_u = sigmoid(q[bi, i, hi] @ u[hi])
                g_r = sigmoid(q[bi, i, hi] @ v[hi])
                for j in range(lk):
                    dij = table[numpy_bucket(k_pos[bi, j] - q_pos[bi, i], buckets, 16), hi]
                    expected[bi, hi, i, j] = dij + g_u * dij + (1 - g_u) * w * g_r * dij
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # a zero query opens both gates halfway: r = d + d/2 + (1/2)·w·(1/2)·d
    closed = np.asarray(gated_bias(np.full_like(q, 0.0), d, u, v, w))
    np.testing.assert_allclose(closed, d * (1.5 + 0.25 * w), rtol=1e-6)


def test_gates_fixed_at_zero_reduce_to_the_bucketed_bias():
    d = RNG.normal(size=(1, 2, 3, 3)).astype(np.float32)
    q = RNG.normal(size=(1, 3, 2, 4)).astype(np.float32)
    big = np.full((2, 4), -1e4, np.float32)  # σ(q·u) → 0 for q with positive sum
    q = np.abs(q)
    np.testing.assert_allclose(np.asarray(gated_bias(q, d, big, big, 3.0)), d, atol=1e-6)


@pytest.mark.parametrize("kind", ["bucketed", "gated"])
@pytest.mark.parametrize("shared", [True, False])
def test_model_with_relative_positions(kind, shared):
    cfg = model_config(
        vocab_size=30,
        relative_position=kind,
        share_relative_table=shared,
        absolute_positions=False,
        num_buckets=8,
        max_distance=16,
    )
    params = nn.unbox(init_params(cfg, jax.random.key(0)))
    assert "position_embeddings" not in params["embeddings"]
    layers = params["encoder"]["layers"]["attention"]
    assert ("relative_position_table" in params["encoder"]) == shared
    assert ("relative_position_table" in layers) == (not shared)
    assert ("gate_u" in layers) == (kind == "gated")
    if kind == "gated":
        assert layers["gate_u"].shape == (2, 2, 8)  # per layer (scanned), per head
    ids = np.array([[0, 5, 6, 7, 2, 1]])
    positions = np.array([[2, 3, 4, 5, 6, 1]])
    meta = {"segment_ids": np.array([[1, 1, 1, 1, 1, 0]]), "positions": positions}
    model = MaskedLM(cfg)
    out = model.apply({"params": params}, ids, positions, mask_fn=masks.mmlm, mask_meta=meta)
    # relative only: shifting every position by the same amount changes nothing
    shifted = model.apply(
        {"params": params},
        ids,
        positions + 3,
        mask_fn=masks.mmlm,
        mask_meta={**meta, "positions": positions + 3},
    )
    np.testing.assert_allclose(np.asarray(out), np.asarray(shifted), atol=1e-5)
    with pytest.raises(ValueError, match="relative_position"):
        dataclasses.replace(cfg, relative_position="none")
