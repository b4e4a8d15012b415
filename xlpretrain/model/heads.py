"""Output heads on top of the encoder's hidden states, and the MLM cross-entropy with its
hand-written gradient (per device under ``shard_map`` when a mesh is set)."""

import dataclasses
import functools
import itertools

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from xlpretrain.model.config import ModelConfig
from xlpretrain.model.layers import dense, gelu, layer_norm
from xlpretrain.parallel import sharding


class LMHead(nn.Module):
    """RoBERTa LM head: dense → GELU → LayerNorm → tied word embeddingᵀ + bias.

    The decoder matrix is the word-embedding table, passed in rather than owned, so it stays
    tied. The vocabulary matmul runs in the compute dtype with float32 accumulation and the
    logits are float32, as the softmax cross-entropy wants. The square ``dense`` kernel is
    ``[embed, None]``: sharding its output over ``tensor`` next to the vocabulary-sharded
    decoder made XLA (0.10, CPU, both partitioners) compute wrong gradients for it and the
    LayerNorm (``tests/test_model.py``); replicated, it costs hidden² parameters per device.
    ``transform`` and ``bias`` are separate so a loss can run the vocabulary projection in
    chunks (``chunked_cross_entropy``) instead of holding every prediction's logits.
    """

    config: ModelConfig

    def setup(self) -> None:
        cfg = self.config
        self.dense = dense(cfg, cfg.hidden_size, ("embed", None), "dense")
        self.layer_norm = layer_norm(cfg, "layer_norm")
        self.bias = self.param(
            "bias",
            nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
            (cfg.padded_vocab_size,),
            jnp.float32,
        )

    def transform(self, hidden: jax.Array) -> jax.Array:
        """dense → GELU → LayerNorm: the states the vocabulary projection reads."""
        return self.layer_norm(gelu(self.dense(hidden)))

    def __call__(self, hidden: jax.Array, word_embeddings: jax.Array) -> jax.Array:
        """float32 logits over the real vocabulary (the padding rows cut off)."""
        logits = vocabulary_logits(self.transform(hidden), word_embeddings, self.bias)
        return logits[..., : self.config.vocab_size]


def vocabulary_logits(h: jax.Array, word_embeddings: jax.Array, bias: jax.Array) -> jax.Array:
    """float32 ``[..., vocab]`` logits, the matmul in ``h``'s dtype."""
    logits = jnp.einsum(
        "...e,ve->...v", h, word_embeddings.astype(h.dtype), preferred_element_type=jnp.float32
    )
    return logits + bias


@dataclasses.dataclass(frozen=True)
class _Layout:
    """What the loss's custom gradient needs to know besides its arrays: this device holds
    ``shard`` rows of the table (from ``axis_index(axis) · shard`` when ``axis`` names the
    vocabulary-parallel mesh axes), the ids from ``size`` on are padding, the forward pass
    reads ``chunk`` predictions' logits at a time, the table's gradient is ``table_dtype``;
    under ``shard_map`` the predictions are split over ``batch_axes``."""

    axis: str | tuple[str, ...] | None
    batch_axes: str | tuple[str, ...] | None
    shard: int
    size: int
    chunk: int
    table_dtype: jnp.dtype

    def offset(self) -> jax.Array | int:
        return 0 if self.axis is None else jax.lax.axis_index(self.axis) * self.shard

    def across(self, reduce, x: jax.Array) -> jax.Array:
        return x if self.axis is None else reduce(x, self.axis)


def _online_log_sum_exp(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Row max and Σ exp(logit − max) in one pass: a variadic reduction carrying both, the sum
    rescaled whenever the max grows, so the float32 logits are read once, not once per
    statistic. ``-inf`` entries add nothing."""

    def combine(a, b):
        top = jnp.maximum(a[0], b[0])
        rescaled = [jnp.where(t == top, s, s * jnp.exp(t - top)) for t, s in (a, b)]
        return top, rescaled[0] + rescaled[1]

    return jax.lax.reduce(
        (logits, jnp.ones_like(logits)),
        (jnp.float32(-jnp.inf), jnp.float32(0)),
        combine,
        (logits.ndim - 1,),
    )


def _chunk_statistics(
    h: jax.Array, table: jax.Array, bias: jax.Array, labels: jax.Array, layout: _Layout
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(log-sum-exp, label logit, max, logits) of one chunk, each reduced over the vocabulary
    axis (Megatron's vocabulary-parallel cross-entropy: only ``[chunk]``-sized statistics cross
    devices). Padding ids are ``-inf``: they take no part in the softmax."""
    offset = layout.offset()
    logits = jnp.einsum("ne,ve->nv", h, table, preferred_element_type=jnp.float32) + bias
    logits = jnp.where(offset + jnp.arange(layout.shard) < layout.size, logits, -jnp.inf)
    local_top, local_sum = _online_log_sum_exp(logits)
    top = layout.across(jax.lax.pmax, local_top)
    total = layout.across(jax.lax.psum, local_sum * jnp.exp(local_top - top))
    local = labels - offset
    here = (local >= 0) & (local < layout.shard)
    picked = jnp.take_along_axis(logits, jnp.clip(local, 0, layout.shard - 1)[:, None], -1)
    label_logit = layout.across(jax.lax.psum, jnp.where(here, picked[:, 0], 0.0))
    return jnp.log(total) + top, label_logit, top, logits


def _over_chunks(fn, chunk: int, *rows: jax.Array) -> list[tuple[jax.Array, ...]]:
    """``fn`` on the rows ``chunk`` at a time: the full chunks in one ``lax.map`` (their outputs
    flattened back to rows, a free reshape), the remainder on its own, so no padding row does
    any work. ``chunk <= 0`` or ``>= rows``: one call on all of them."""
    count = rows[0].shape[0]
    chunk = count if chunk <= 0 or chunk >= count else chunk
    full = count - count % chunk
    pieces = []
    if full > chunk:
        split = tuple(x[:full].reshape(-1, chunk, *x.shape[1:]) for x in rows)
        stacked = jax.lax.map(lambda xs: fn(*xs), split)
        pieces.append(tuple(y.reshape(full, *y.shape[2:]) for y in stacked))
    elif full:
        pieces.append(fn(*(x[:full] for x in rows)))
    if full < count:
        pieces.append(fn(*(x[full:] for x in rows)))
    return pieces


def _rows(pieces: list[tuple[jax.Array, ...]], index: int) -> jax.Array:
    return jnp.concatenate([piece[index] for piece in pieces])


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _cross_entropy(
    h: jax.Array, table: jax.Array, bias: jax.Array, labels: jax.Array, layout: _Layout
) -> tuple[jax.Array, jax.Array]:
    """(nll, correct) per prediction."""
    table = table.astype(h.dtype)

    def chunk(h, labels):
        lse, label_logit, top, _ = _chunk_statistics(h, table, bias, labels, layout)
        return lse - label_logit, label_logit >= top

    pieces = _over_chunks(chunk, layout.chunk, h, labels)
    return _rows(pieces, 0), _rows(pieces, 1)


def _cross_entropy_forward(
    h: jax.Array, table: jax.Array, bias: jax.Array, labels: jax.Array, layout: _Layout
) -> tuple[tuple[jax.Array, jax.Array], tuple]:
    """The loss, and for the backward pass each row's gradient with respect to its logits,
    softmax − one-hot, formed (in the matmul dtype) in the pass that reads the chunk's logits:
    the backward pass then neither recomputes the vocabulary matmul nor scatters the label's
    gradient into a zeroed ``[chunk, vocab]`` buffer. The table is cast to the matmul dtype
    once, here, for every chunk and the backward pass."""
    table = table.astype(h.dtype)

    def chunk(h, labels):
        lse, label_logit, top, logits = _chunk_statistics(h, table, bias, labels, layout)
        onehot = jnp.arange(layout.shard) == (labels - layout.offset())[:, None]
        dlogits = (jnp.exp(logits - lse[:, None]) - onehot).astype(table.dtype)
        return lse - label_logit, label_logit >= top, dlogits

    pieces = _over_chunks(chunk, layout.chunk, h, labels)
    dlogits = [piece[2] for piece in pieces]
    return (_rows(pieces, 0), _rows(pieces, 1)), (h, table, bias, dlogits)


def _cross_entropy_backward(
    layout: _Layout, residuals: tuple, cotangents: tuple[jax.Array, jax.Array]
) -> tuple[jax.Array, jax.Array, jax.Array, None]:
    """``dh = g·dlogits @ W``, ``dW = dlogitsᵀ @ g·h``, ``dbias = Σ g·dlogits``, one pair of
    matmuls per piece of rows (the full chunks, the remainder). Vocabulary-parallel, ``dW`` and
    ``dbias`` are local to the device's rows and ``dh`` is summed over the vocabulary axis."""
    h, table, bias, dlogits = residuals
    g = cotangents[0]
    starts = [0, *itertools.accumulate(d.shape[0] for d in dlogits)]
    dh, dtable, dbias = [], 0.0, 0.0
    for d, (start, end) in zip(dlogits, itertools.pairwise(starts), strict=True):
        rows_g = g[start:end, None]
        dh.append(jnp.einsum("nv,ve->ne", d, table, preferred_element_type=jnp.float32) * rows_g)
        scaled_h = (h[start:end] * rows_g).astype(table.dtype)
        dtable += jnp.einsum("nv,ne->ve", d, scaled_h, preferred_element_type=jnp.float32)
        dbias += jnp.sum(d * rows_g, axis=0, dtype=jnp.float32)
    grads = (
        jnp.concatenate(dh).astype(h.dtype),
        dtable.astype(layout.table_dtype),
        dbias.astype(bias.dtype),
    )
    dh, dtable, dbias = grads
    # Under shard_map, as its own autodiff would: each device's vocabulary rows give one share
    # of ``dh``, each device's predictions one share of the table's and bias's gradients.
    if layout.axis is not None:
        dh = jax.lax.psum(dh, layout.axis)
    if layout.batch_axes is not None:
        dtable, dbias = jax.lax.psum((dtable, dbias), layout.batch_axes)
    return dh, dtable, dbias, None


_cross_entropy.defvjp(_cross_entropy_forward, _cross_entropy_backward)


def chunked_cross_entropy(
    h: jax.Array,
    word_embeddings: jax.Array,
    bias: jax.Array,
    labels: jax.Array,
    chunk: int,
    vocab_size: int,
    vocab_axis: str | tuple[str, ...] | None = None,
    batch_axes: str | tuple[str, ...] | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Per-prediction (negative log-likelihood, correct) for transformed states ``h``
    ``[N, H]`` and integer ``labels`` ``[N]``, the forward pass reading ``chunk`` predictions'
    float32 logits at a time (``chunk <= 0``: all at once).

    The gradient is hand-written (``jax.custom_vjp``): the forward pass keeps each
    prediction's softmax − one-hot in the matmul dtype (``[N, vocab]``, 1.2 GB in bfloat16 for
    XLM-R base's 2,464 predictions per 32 × 512 batch, against 2.5 GB of float32 logits), and
    the backward pass is two matmuls with it; nothing is recomputed. The table is cast to
    ``h``'s dtype once a step, not per chunk, and its gradient comes out of the matmul in the
    table's dtype. Being a ``custom_vjp``, it has reverse-mode derivatives only: ``jax.jvp``
    and ``jax.jacfwd`` through the loss refuse (a probe of the states it reads stops before it).

    ``vocab_axis`` (inside ``shard_map``): this device holds the vocabulary rows
    ``[i·V, (i+1)·V)`` of ``word_embeddings`` and ``bias``, ``i`` its index on that mesh axis;
    the softmax normaliser and the label's logit are reduced over the axis (Megatron's
    vocabulary-parallel cross-entropy), so no device holds a full row of logits. A prediction
    is correct when its label's logit is the largest (ties count as correct). Rows at and past
    ``vocab_size`` (padding for sharding) are excluded from the softmax. ``batch_axes`` (inside
    ``shard_map``): the mesh axes the predictions are split over, which the table's gradient
    is summed over.
    """
    layout = _Layout(
        vocab_axis, batch_axes, word_embeddings.shape[0], vocab_size, chunk, word_embeddings.dtype
    )
    return _cross_entropy(h, word_embeddings, bias, labels, layout)


def cross_entropy_per_device(
    h: jax.Array,
    word_embeddings: jax.Array,
    bias: jax.Array,
    labels: jax.Array,
    chunk: int,
    vocab_size: int,
) -> tuple[jax.Array, jax.Array]:
    """``chunked_cross_entropy`` under ``jax.shard_map`` when a mesh is set (the train step's
    ``sharding.under_mesh``): predictions split over the mesh axes of ``batch``, the vocabulary
    over those of ``vocab`` when they divide it, so each device projects its own predictions
    onto its own vocabulary rows and only ``[N]``-sized statistics cross devices. Without a
    mesh, or when the predictions do not divide over the batch axes, it runs as is (GSPMD
    shards it)."""
    batch = sharding.mesh_axes("batch")
    if not batch or h.shape[0] % sharding.axes_size(batch):
        return chunked_cross_entropy(h, word_embeddings, bias, labels, chunk, vocab_size)
    vocab = sharding.mesh_axes("vocab")
    size = sharding.axes_size(vocab)
    vocab_axis = vocab if size > 1 and word_embeddings.shape[0] % size == 0 else None
    rows = PartitionSpec(batch)
    return jax.shard_map(
        functools.partial(
            chunked_cross_entropy,
            chunk=chunk,
            vocab_size=vocab_size,
            vocab_axis=vocab_axis,
            batch_axes=batch,
        ),
        mesh=jax.sharding.get_abstract_mesh(),
        in_specs=(rows, PartitionSpec(vocab_axis), PartitionSpec(vocab_axis), rows),
        out_specs=(rows, rows),
    )(h, word_embeddings, bias, labels)
