"""Output heads on top of the encoder's hidden states, and the chunked MLM cross-entropy
(per device under ``shard_map`` when a mesh is set)."""

import functools

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


def chunked_cross_entropy(
    h: jax.Array,
    word_embeddings: jax.Array,
    bias: jax.Array,
    labels: jax.Array,
    chunk: int,
    vocab_size: int,
    vocab_axis: str | tuple[str, ...] | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Per-prediction (negative log-likelihood, correct) for transformed states ``h``
    ``[N, H]`` and integer ``labels`` ``[N]``, ``chunk`` predictions at a time.

    Each chunk's ``[chunk, vocab]`` logits live only inside a rematerialised scan step, so
    neither the forward nor the backward pass ever holds all ``N × vocab`` of them (2.5 GB in
    float32 for XLM-R base's 2,458 predictions per 32 × 512 batch; one 1,024-row chunk is 1 GB).
    ``chunk <= 0`` or ``chunk >= N``: a single chunk.

    ``vocab_axis`` (inside ``shard_map``): this device holds the vocabulary rows
    ``[i·V, (i+1)·V)`` of ``word_embeddings`` and ``bias``, ``i`` its index on that mesh axis;
    the softmax normaliser and the label's logit are reduced over the axis (Megatron's
    vocabulary-parallel cross-entropy), so no device holds a full row of logits. A prediction
    is correct when its label's logit is the largest (ties count as correct). Rows at and past
    ``vocab_size`` (padding for sharding) are excluded from the softmax.
    """
    count = h.shape[0]
    chunk = count if chunk <= 0 or chunk >= count else chunk
    padded = -(-count // chunk) * chunk
    h = jnp.pad(h, ((0, padded - count), (0, 0))).reshape(padded // chunk, chunk, -1)
    labels = jnp.pad(labels, (0, padded - count)).reshape(padded // chunk, chunk)
    shard_vocab = word_embeddings.shape[0]
    offset = 0 if vocab_axis is None else jax.lax.axis_index(vocab_axis) * shard_vocab

    def across_vocab(reduce, x):
        return x if vocab_axis is None else reduce(x, vocab_axis)

    real = offset + jnp.arange(shard_vocab) < vocab_size

    @jax.checkpoint
    def one_chunk(h_chunk, label_chunk):
        logits = jnp.where(real, vocabulary_logits(h_chunk, word_embeddings, bias), -jnp.inf)
        local = label_chunk - offset
        here = (local >= 0) & (local < shard_vocab)
        picked = jnp.take_along_axis(logits, jnp.clip(local, 0, shard_vocab - 1)[:, None], -1)
        label_logit = across_vocab(jax.lax.psum, jnp.where(here, picked[:, 0], 0.0))
        top = across_vocab(jax.lax.pmax, jax.lax.stop_gradient(logits.max(axis=-1)))
        total = across_vocab(jax.lax.psum, jnp.exp(logits - top[:, None]).sum(axis=-1))
        return jnp.log(total) + top - label_logit, label_logit >= top

    nll, correct = jax.lax.map(lambda xs: one_chunk(*xs), (h, labels))
    return nll.reshape(-1)[:count], correct.reshape(-1)[:count]


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
            chunked_cross_entropy, chunk=chunk, vocab_size=vocab_size, vocab_axis=vocab_axis
        ),
        mesh=jax.sharding.get_abstract_mesh(),
        in_specs=(rows, PartitionSpec(vocab_axis), PartitionSpec(vocab_axis), rows),
        out_specs=(rows, rows),
    )(h, word_embeddings, bias, labels)
