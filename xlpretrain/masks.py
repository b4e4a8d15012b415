"""Attention masks as pure functions of per-token metadata.

A mask is ``allowed(q, k) -> bool array``: ``q`` and ``k`` are ``Meta`` dicts of integer
arrays taken from the Batch (``segment_ids`` (0 = padding), ``pair_ids``, ``side``
(0 source/monolingual, 1 target, 2 placeholder, 3 pseudo), ``positions``, ``is_masked``).
Like PyTorch FlexAttention's ``mask_mod``, the function only sees broadcastable arrays, so
the same definition is materialised to ``[B, 1, L, L]`` for the reference XLA path and for
tests (``q`` arrays as ``[B, L, 1]``, ``k`` arrays as ``[B, 1, L]``), and will later be
evaluated tile by tile inside fused kernels and reduced to block sparsity. Masks therefore
use elementwise ``jnp`` operations only and never index or reshape their inputs.

Additive score modifications (relative position bias) follow the same idea as ``ScoreMod``:
``score_mod(q_meta, k_meta, params) -> [B, H, Lq, Lk]`` float logits added before softmax.
"""

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

Meta = Mapping[str, jax.Array]
MaskFn = Callable[[Meta, Meta], jax.Array]
ScoreMod = Callable[[Meta, Meta, Any], jax.Array]


def materialize(mask_fn: MaskFn, meta: Meta, k_meta: Meta | None = None) -> jax.Array:
    """Evaluates ``mask_fn`` on every (query, key) pair: bool ``[B, 1, Lq, Lk]``.

    ``k_meta`` defaults to ``meta`` (self-attention); pass it for cross-attention, where the
    keys come from another sequence.
    """
    k_meta = meta if k_meta is None else k_meta
    q = {name: jnp.asarray(v)[:, :, None] for name, v in meta.items()}
    k = {name: jnp.asarray(v)[:, None, :] for name, v in k_meta.items()}
    batch, q_len = next(iter(meta.values())).shape[:2]
    k_len = next(iter(k_meta.values())).shape[1]
    allowed = jnp.broadcast_to(mask_fn(q, k), (batch, q_len, k_len))
    return allowed[:, None].astype(bool)


def mmlm(q: Meta, k: Meta) -> jax.Array:
    """Monolingual MLM: a token sees its own packed segment only.

    Padding (segment 0) sees only padding, so no row of the mask is empty and softmax stays
    finite.
    """
    return q["segment_ids"] == k["segment_ids"]


def tlm(q: Meta, k: Meta) -> jax.Array:
    """Translation LM: a pair ``<s> A </s></s> B </s>`` is one segment, so both sides see
    each other — the same rule as MMLM, registered separately because objectives name it."""
    return mmlm(q, k)


MASKS: dict[str, MaskFn] = {"mmlm": mmlm, "tlm": tlm}


def get(name: str) -> MaskFn:
    """Looks up a registered mask by objective name."""
    try:
        return MASKS[name]
    except KeyError:
        raise KeyError(f"unknown attention mask {name!r}; known: {sorted(MASKS)}") from None
