"""Attention masks as pure functions of per-token metadata.

A mask is ``allowed(q, k) -> bool array``: ``q`` and ``k`` are ``Meta`` dicts of integer
arrays taken from the Batch (``segment_ids`` (0 = padding), ``pair_ids``, ``side``
(0 source/monolingual, 1 target, 2 placeholder, 3 pseudo), ``positions``, ``is_masked``).
``materialize`` adds ``index`` (the token's place in its row, FlexAttention's ``q_idx`` /
``kv_idx``) so a mask can single out a token itself.
Like PyTorch FlexAttention's ``mask_mod``, the function only sees broadcastable arrays, so
the same definition is materialised to ``[B, 1, L, L]`` for the reference XLA path and for
tests (``q`` arrays as ``[B, L, 1]``, ``k`` arrays as ``[B, 1, L]``), and will later be
evaluated tile by tile inside fused kernels and reduced to block sparsity. Masks therefore
use elementwise ``jnp`` operations only and never index or reshape their inputs.

Additive score modifications (relative position bias) follow the same idea as ``ScoreMod``:
``score_mod(q_meta, k_meta, params) -> [B, H, Lq, Lk]`` float logits added before softmax.
"""

import dataclasses
import enum
import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

Meta = Mapping[str, jax.Array]
MaskFn = Callable[[Meta, Meta], jax.Array]
ScoreMod = Callable[[Meta, Meta, Any], jax.Array]


class ExampleLayout(enum.Enum):
    """How a mask's rows are laid out, so `python -m xlpretrain.masks` can lay out a written
    example the way the objective's data does."""

    SEGMENTS = "segments"  # <s> a </s> (a second segment packed after it with |||)
    PAIR = "pair"  # <s> a </s></s> b </s>: one unit, source then target side
    SEGMENT_PAIR = "segment_pair"  # <s> x </s> <s> y </s>: two segments of one pair (VECO)
    PLACEHOLDERS = "placeholders"  # <s> a </s> then ⌈ratio·|a|⌉ placeholders (BTMLM pass 1)
    PSEUDO_TOKENS = "pseudo_tokens"  # <s> a </s> then the pseudo tokens b (BTMLM pass 2)


@dataclasses.dataclass(frozen=True)
class AttentionMask:
    """A mask an objective runs, under the name the masks CLI shows it by."""

    name: str
    fn: MaskFn
    layout: ExampleLayout


def materialize(mask_fn: MaskFn, meta: Meta, k_meta: Meta | None = None) -> jax.Array:
    """Evaluates ``mask_fn`` on every (query, key) pair: bool ``[B, 1, Lq, Lk]``.

    ``k_meta`` defaults to ``meta`` (self-attention); pass it for cross-attention, where the
    keys come from another sequence.
    """
    k_meta = meta if k_meta is None else k_meta
    batch, q_len = next(iter(meta.values())).shape[:2]
    k_len = next(iter(k_meta.values())).shape[1]
    q = {name: jnp.asarray(v)[:, :, None] for name, v in meta.items()}
    k = {name: jnp.asarray(v)[:, None, :] for name, v in k_meta.items()}
    q["index"] = jnp.arange(q_len)[None, :, None]
    k["index"] = jnp.arange(k_len)[None, None, :]
    allowed = jnp.broadcast_to(mask_fn(q, k), (batch, q_len, k_len))
    return allowed[:, None].astype(bool)


@functools.cache
def windowed(mask_fn: MaskFn, local: int) -> MaskFn:
    """``mask_fn`` within the query's window: its distance to the key in the row (``index``,
    which the reference path and the fused kernel both supply) at most ``q["window"]`` — a
    metadata field, so every layer shares one program: ``local`` in a ModernBERT local layer,
    every distance in a global one. The function also states ``base`` (``mask_fn``) and
    ``local``, which a kernel with static masks (splash) builds its local mask from. Cached,
    so a mask keeps one identity and compiles once."""

    def allowed(q: Meta, k: Meta) -> jax.Array:
        return mask_fn(q, k) & (jnp.abs(q["index"] - k["index"]) <= q["window"])

    allowed.__name__ = f"{getattr(mask_fn, '__name__', 'mask')}_windowed"
    allowed.base, allowed.local = mask_fn, local
    return allowed


def mmlm(q: Meta, k: Meta) -> jax.Array:
    """Monolingual MLM: a token sees its own packed segment only.

    Padding (segment 0) sees only padding, so no row of the mask is empty and softmax stays
    finite.
    """
    return q["segment_ids"] == k["segment_ids"]


def padding_sees_row(q: Meta, k: Meta) -> jax.Array:
    """Fine-tuning rows as Hugging Face's `attention_mask` runs them, a mask of keys alone: a
    token sees its segment, and padding (segment 0) sees every token of its row, so that a
    padding position's state is the reference's (XTREME's QA loss runs its softmax over the
    padded window, padding's logits included). A row of padding alone sees its first place."""
    padding = q["segment_ids"] == 0
    own = (q["segment_ids"] == k["segment_ids"]) & ~padding
    return own | (padding & ((k["segment_ids"] > 0) | (k["index"] == 0)))


def tlm(q: Meta, k: Meta) -> jax.Array:
    """Translation LM: a pair ``<s> A </s></s> B </s>`` is one segment, so both sides see
    each other — the same rule as MMLM, registered separately because objectives name it."""
    return mmlm(q, k)


SIDE_PLACEHOLDER = 2  # xlpretrain.data.pretraining.batch.SIDE_* (masks sit below data)
SIDE_TAG = 4


def camlm(q: Meta, k: Meta) -> jax.Array:
    """ERNIE-M cross-attention MLM: a masked token sees itself and the *unmasked tokens of the
    other side* only, p(x_m | X \\ (M ∪ X_src)) and symmetrically for the target.

    To hold at every depth, the unmasked tokens of a side see only unmasked tokens of their own
    side: their states never carry the other side or any masked token, so nothing a masked token
    reads — directly or through any number of layers — is outside its conditioning set. Masked
    tokens are seen by nobody but themselves.
    """
    same_pair = q["segment_ids"] == k["segment_ids"]
    q_masked, k_masked = q["is_masked"] > 0, k["is_masked"] > 0
    same_side = q["side"] == k["side"]
    itself = q["index"] == k["index"]
    masked_row = q_masked & ((~k_masked & ~same_side) | itself)
    unmasked_row = ~q_masked & ~k_masked & same_side
    return same_pair & (masked_row | unmasked_row)


def btmlm_generate(q: Meta, k: Meta) -> jax.Array:
    """ERNIE-M back-translation, pass 1: the source sees itself; each placeholder sees the
    source and itself only, so pseudo tokens are decoded in parallel from the source alone.
    A target-language tag (when the run uses tags instead of language embeddings) sees the
    source and the tag, and is seen by the placeholders."""
    same_segment = q["segment_ids"] == k["segment_ids"]
    q_placeholder = q["side"] == SIDE_PLACEHOLDER
    k_placeholder = k["side"] == SIDE_PLACEHOLDER
    q_source = (q["side"] != SIDE_PLACEHOLDER) & (q["side"] != SIDE_TAG)
    k_tag = k["side"] == SIDE_TAG
    itself = q["index"] == k["index"]
    return same_segment & ~(q_source & k_tag) & (~k_placeholder | (q_placeholder & itself))


def btmlm(q: Meta, k: Meta) -> jax.Array:
    """ERNIE-M back-translation, pass 2: MLM on the source with the pseudo tokens appended,
    attending across the whole unit as in TLM: p(x_m | X \\ M, P)."""
    return mmlm(q, k)


def veco_cross(q: Meta, k: Meta) -> jax.Array:
    """VECO cross-attention: a token of x reads the memory (the plain stream's last layer) of
    the *other* sequence of its pair, y, and vice versa; never its own sequence."""
    other = (q["pair_ids"] == k["pair_ids"]) & (q["segment_ids"] != k["segment_ids"])
    padding = (q["segment_ids"] == 0) & (k["segment_ids"] == 0)
    return (other & (k["segment_ids"] > 0)) | padding


def veco_causal(q: Meta, k: Meta) -> jax.Array:
    """VECO (ICLR version) CS-MLM: the s stream's self-attention is causal within a segment."""
    return mmlm(q, k) & (k["positions"] <= q["positions"])


MASKS: dict[str, MaskFn] = {
    "mmlm": mmlm,
    "tlm": tlm,
    "camlm": camlm,
    "btmlm_generate": btmlm_generate,
    "btmlm": btmlm,
    "veco_cross": veco_cross,
    "veco_causal": veco_causal,
    "padding_sees_row": padding_sees_row,  # fine-tuning's QA (model.task_heads.SpanExtractor)
}


def get(name: str) -> MaskFn:
    """Looks up a registered mask by objective name."""
    try:
        return MASKS[name]
    except KeyError:
        raise KeyError(f"unknown attention mask {name!r}; known: {sorted(MASKS)}") from None
