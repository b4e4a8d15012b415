"""Which ``[block_q, block_k]`` tiles of an attention mask a fused kernel may skip.

The classification is derived from the mask *function* itself, exactly: every (query, key)
pair of a tile is evaluated and reduced to one code per tile. XLA fuses the comparison with
the reduction, so the ``[L, L]`` booleans are never written to memory; the result is
``[B, Lq/block_q, Lk/block_k]`` small integers. Because nothing is assumed about the shape of
the mask (ranges, segments, sides), every registered mask is exact this way; how many tiles
are skipped depends on the mask and the row (``skipped_fraction``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from xlpretrain import masks

EMPTY = 0  # no pair of the tile is allowed: the kernel skips it
PARTIAL = 1  # some pairs allowed: the kernel evaluates the mask function on the tile
FULL = 2  # every pair allowed (and every key real): the kernel skips the mask function


def pad_meta(meta: masks.Meta, length: int) -> dict[str, jax.Array]:
    """Pads every ``[B, L]`` metadata array with zeros (segment 0 = padding) to ``length``."""
    return {
        name: jnp.pad(value, ((0, 0), (0, length - value.shape[1]))) for name, value in meta.items()
    }


def classify_tiles(
    mask_fn: masks.MaskFn,
    q_meta: masks.Meta,
    k_meta: masks.Meta,
    *,
    q_len: int,
    k_len: int,
    block_q: int,
    block_k: int,
) -> jax.Array:
    """int32 ``[B, Lq_pad/block_q, Lk_pad/block_k]`` of EMPTY / PARTIAL / FULL.

    ``q_meta`` and ``k_meta`` are already padded to multiples of the blocks; ``q_len`` and
    ``k_len`` are the real lengths. Keys past ``k_len`` are never allowed, and a tile holding
    padded queries or keys is never FULL, so the kernel's fast path needs no bounds check.
    """
    allowed = masks.materialize(mask_fn, q_meta, k_meta)[:, 0]
    batch, q_pad, k_pad = allowed.shape
    q_real = jnp.arange(q_pad)[None, :, None] < q_len
    k_real = jnp.arange(k_pad)[None, None, :] < k_len
    allowed = allowed & k_real
    tiles = (batch, q_pad // block_q, block_q, k_pad // block_k, block_k)
    some = jnp.any(allowed.reshape(tiles), axis=(2, 4))
    every = jnp.all((allowed & q_real).reshape(tiles), axis=(2, 4))
    return jnp.where(every, FULL, jnp.where(some, PARTIAL, EMPTY)).astype(jnp.int32)


def skipped_fraction(tiles: jax.Array) -> jax.Array:
    """The share of tiles a kernel never computes (for benchmarks and the docs)."""
    return jnp.mean(tiles == EMPTY)
