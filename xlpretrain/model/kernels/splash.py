"""TPU attention through JAX's splash kernel, for the masks it expresses exactly.

Splash attention takes a *static* mask (one for every row) and-ed with per-row segment ids.
Our masks are functions of per-token metadata, so only those that reduce to "same segment"
map onto it: ``mmlm``, ``tlm`` and BTMLM's second pass are ``SegmentIds`` over a full mask
(``tests/test_splash.py`` checks the mapping against the mask functions themselves). Within a
ModernBERT layer's window (``masks.windowed``) they are ``SegmentIds`` over splash's
``LocalMask`` of the layer's static half-window, whose tiles outside the band it skips: a local
layer runs that kernel and a global one the full mask's, chosen by the layer's ``window``
(traced per layer, as the scanned layers share one program). CAMLM,
BTMLM's first pass and VECO's cross-attention depend on sides and masking; VECO's causal
s-stream is causal by position, which differs from splash's causal-by-index on padding; and
relative-position biases and attention dropout have no splash form. Those calls fall back to
the XLA path, and ``unsupported`` says why.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from xlpretrain import masks
from xlpretrain.model import kernels

SEGMENT_MASKS = (masks.mmlm, masks.tlm, masks.btmlm)  # same segment: SegmentIds, full mask
BLOCK = 128  # splash tiles are multiples of the TPU's 128 lanes


def _base(mask_fn: masks.MaskFn) -> masks.MaskFn:
    """The objective's mask of a windowed one (`masks.windowed`), else the mask itself."""
    return getattr(mask_fn, "base", mask_fn)


def unsupported(
    mask_fn: masks.MaskFn, q_len: int, k_len: int, has_bias: bool, dropout: bool
) -> str | None:
    """Why splash cannot run this call exactly (None: it can)."""
    if _base(mask_fn) not in SEGMENT_MASKS:
        return "the mask is not a segment mask (splash masks are static per row)"
    if has_bias:
        return "splash has no additive score modification (relative positions)"
    if dropout:
        return "splash has no attention dropout"
    if q_len != k_len or q_len % BLOCK:
        return f"splash needs equal query/key lengths divisible by {BLOCK}"
    return None


def _kernel(heads: int, length: int, interpret: bool, window: int | None = None):
    """Splash's kernel over a full mask, or over the band of half-width `window`: built anew
    for each trace (once per compile), as a kernel keeps arrays of the trace that called it
    (a cached one leaked them into the next trace: a scanned layer's)."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    block = min(512, length)
    while length % block:
        block //= 2
    sizes = sk.BlockSizes(
        block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
        block_kv_dkv=block, block_kv_dkv_compute=block, block_q_dq=block, block_kv_dq=block,
    )  # fmt: skip
    shape = (length, length)
    mask = sm.FullMask(shape) if window is None else sm.LocalMask(shape, (window, window), 0)
    return sk.make_splash_mha(
        sm.MultiHeadMask([mask] * heads),
        block_sizes=sizes,
        head_shards=1,
        q_seq_shards=1,
        interpret=interpret,
    )


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    mask_fn: masks.MaskFn,
    segment_ids: jax.Array,
    platform: str,
    window: jax.Array | None = None,
) -> jax.Array:
    """``[B, L, H, D]`` attention under a mask of ``SEGMENT_MASKS``, or one of them windowed
    (``masks.windowed``: ``window`` ``[B, L]`` the layer's, its local value the mask's
    ``local``); ``segment_ids`` ``[B, L]``. Off ``platform='tpu'`` the kernel runs in Pallas
    interpret mode."""
    batch, length, heads, head_dim = q.shape
    interpret = kernels.check_platform(platform) != "tpu"
    from jax.experimental.pallas.ops.tpu.splash_attention.splash_attention_kernel import (
        SegmentIds,
    )

    if _base(mask_fn) not in SEGMENT_MASKS:
        raise ValueError(f"splash runs segment masks only, not {mask_fn!r}")
    scale = 1.0 / math.sqrt(head_dim)
    ids = segment_ids.astype(jnp.int32)

    def rows(kernel, q, k, v):
        def one_row(q, k, v, ids):  # splash's layout: [heads, length, head_dim]
            out = kernel(
                jnp.swapaxes(q * scale, 0, 1), jnp.swapaxes(k, 0, 1), jnp.swapaxes(v, 0, 1),
                segment_ids=SegmentIds(ids, ids),
            )  # fmt: skip
            return jnp.swapaxes(out, 0, 1)

        return jax.vmap(one_row)(q, k, v, ids)

    full = _kernel(heads, length, interpret)
    if _base(mask_fn) is mask_fn:
        return rows(full, q, k, v)
    if window is None:
        raise ValueError(f"{mask_fn.__name__} needs the layer's window")
    # One window for every token of a layer: a local layer's, or one past every distance.
    # The kernels (pytrees of their mask tables) are the branches' operands, not constants
    # they close over, so a traced window (scanned layers) leaks nothing into the cache.
    return jax.lax.cond(
        window[0, 0] < length - 1,
        lambda local, full, q, k, v: rows(local, q, k, v),
        lambda local, full, q, k, v: rows(full, q, k, v),
        _kernel(heads, length, interpret, mask_fn.local),
        full,
        q,
        k,
        v,
    )
