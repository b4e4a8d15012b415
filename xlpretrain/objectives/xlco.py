"""Cross-lingual contrast (XLCo): a translation pair's two sentences as each other's positive,
every other pair of the global batch as negatives.

InfoXLM (Chi et al., NAACL 2021) maximises the InfoNCE bound on the mutual information of a
sentence and its translation; LaBSE (Feng et al., ACL 2022) ranks translations against in-batch
negatives shared across all accelerators, with an additive margin, in both directions. This is
their common core. A row holds up to `xlco.pairs_per_row` pairs, each side its own segment
(`<s> x </s>`, `<s> y </s>`, positions from the start of each) that attends only to itself
(`masks.mmlm`), so each sentence is encoded alone. A sentence's vector is the mean of its final
hidden states (or its first token's, `xlco.pooling`), L2-normalised; with s = cos / τ,

    L = ½ · mean over pairs i of [ −log softmax_j(s(x_i, y_j) − m·[j = i]/τ)_i
                                   −log softmax_j(s(y_i, x_j) − m·[j = i]/τ)_i ]

over every pair j of the step's batch on every device: under a mesh each device gathers the
vectors of all devices along the batch axes (`jax.shard_map` + `all_gather`) and scores its own
pairs against all of them, so 8 devices give one device's loss. InfoXLM's momentum encoder and
queue of older negatives are not offered: a queue of past steps' vectors makes the loss depend
on the steps before it, which resuming would have to restore exactly, and LaBSE shows in-batch
negatives from the whole mesh suffice at the batch sizes a mesh gives.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from xlpretrain import masks
from xlpretrain.core.settings import Section
from xlpretrain.data.pretraining.batch import SIDE_SOURCE, SIDE_TARGET, Batch
from xlpretrain.data.pretraining.row_kinds import SegmentPairs
from xlpretrain.data.pretraining.streams import StreamSpec
from xlpretrain.masks import catalog
from xlpretrain.model.config import ModelFamily
from xlpretrain.objectives import flops
from xlpretrain.objectives.declaration import Context, Objective
from xlpretrain.objectives.mlm import encode

if TYPE_CHECKING:  # the model is built by the trainer, not imported by declarations
    from xlpretrain.model.encoder import MaskedLM

POOLINGS = ("mean", "first")
EMPTY_SLOT = -1e9  # an empty pair slot's score: below any cosine / temperature


@dataclasses.dataclass(frozen=True)
class XlcoSettings:
    """`xlco.*`."""

    temperature: float = 0.05  # τ: cosines are divided by it
    margin: float = 0.0  # m: subtracted from a pair's own cosine (LaBSE: 0.3)
    pooling: str = "mean"  # a sentence's vector: the mean of its tokens, or its first (<s>)
    pairs_per_row: int = 2  # pair slots a row holds; every slot of the batch is scored


XLCO_SECTION = Section(
    "xlco",
    XlcoSettings,
    {
        "temperature": (lambda v: v > 0, "must be > 0"),
        "margin": (lambda v: 0 <= v < 2, "must be in [0, 2): cosines differ by at most 2"),
        "pooling": (lambda v: v in POOLINGS, f"must be one of {POOLINGS}"),
        "pairs_per_row": (lambda v: v >= 1, "must be >= 1"),
    },
)


def side_weights(batch: Batch, pooling: str, pairs_per_row: int) -> jax.Array:
    """`[B, L, K, 2]`: how much token l counts in the vector of side s of pair slot k (pair
    `pair_ids` = k + 1): 1 for each of its tokens (mean) or for its first one (first), 0 for
    padding and other pairs."""
    segments = batch["segment_ids"]
    tokens = segments > 0
    if pooling == "first":
        previous = jnp.pad(segments, ((0, 0), (1, 0)))[:, :-1]
        tokens = tokens & (segments != previous)
    slot = jax.nn.one_hot(batch["pair_ids"] - 1, pairs_per_row, dtype=jnp.float32)
    side = jnp.stack([batch["side"] == SIDE_SOURCE, batch["side"] == SIDE_TARGET], axis=-1)
    return slot[..., None] * (side & tokens[..., None]).astype(jnp.float32)[:, :, None, :]


def pair_count(batch: Batch, pairs_per_row: int) -> jax.Array:
    """The batch's pairs with both sides present: what the loss is a mean over."""
    return _present(side_weights(batch, "first", pairs_per_row)).sum()


def _present(weights: jax.Array) -> jax.Array:
    """`[B, K]`: whether pair slot k holds a pair (both its sides have tokens)."""
    return (weights.sum(axis=1) > 0).all(axis=-1)


def sentence_vectors(
    hidden: jax.Array, batch: Batch, pooling: str, pairs_per_row: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(source vectors, target vectors) `[B·K, H]`, unit length, in float32, and whether each
    slot holds a pair `[B·K]`."""
    weights = side_weights(batch, pooling, pairs_per_row)
    sums = jnp.einsum("blh,blks->bksh", hidden.astype(jnp.float32), weights)
    pooled = sums / jnp.maximum(weights.sum(axis=1), 1.0)[..., None]
    unit = pooled * jax.lax.rsqrt(jnp.maximum((pooled**2).sum(-1, keepdims=True), 1e-12))
    rows = hidden.shape[0] * pairs_per_row
    return (
        unit[:, :, 0].reshape(rows, -1),
        unit[:, :, 1].reshape(rows, -1),
        _present(weights).reshape(rows),
    )


def ranking_terms(
    sources: jax.Array,
    targets: jax.Array,
    present: jax.Array,
    *,
    temperature: float,
    margin: float,
    axes: tuple[str, ...] = (),
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(Σ loss, Σ hits, pairs) of this device's pairs, each scored against every pair of the
    batch along mesh `axes` (all of it without a mesh), in both directions: the loss and the
    hits (the own partner scored highest) of a pair are the mean of its two directions."""

    def gathered(x: jax.Array) -> jax.Array:
        return jax.lax.all_gather(x, axes, tiled=True) if axes else x

    every_source, every_target, every_present = map(gathered, (sources, targets, present))
    mine = jnp.arange(sources.shape[0])
    if axes:
        mine = mine + jax.lax.axis_index(axes) * sources.shape[0]
    own = jax.nn.one_hot(mine, every_present.shape[0], dtype=jnp.float32)

    def direction(queries: jax.Array, keys: jax.Array) -> tuple[jax.Array, jax.Array]:
        logits = (queries @ keys.T - margin * own) / temperature
        # Empty slots score as nothing (finite, so an empty query's terms stay finite: its
        # weight is 0).
        logits = jnp.where(every_present[None, :], logits, EMPTY_SLOT)
        positive = jnp.where(own > 0, logits, 0.0).sum(-1)
        nll = jax.nn.logsumexp(logits, axis=-1) - positive
        return nll, (jnp.argmax(logits, axis=-1) == mine).astype(jnp.float32)

    forward_nll, forward_hits = direction(sources, every_target)
    backward_nll, backward_hits = direction(targets, every_source)
    weight = present.astype(jnp.float32)
    return (
        (0.5 * (forward_nll + backward_nll) * weight).sum(),
        (0.5 * (forward_hits + backward_hits) * weight).sum(),
        weight.sum(),
    )


def translation_ranking(
    sources: jax.Array,
    targets: jax.Array,
    present: jax.Array,
    *,
    temperature: float,
    margin: float,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(mean loss, in-batch accuracy, pairs) over the batch's pairs: `ranking_terms` per
    device under `jax.shard_map` when the train step's mesh splits the batch (the vectors of
    the other devices gathered, so every device's pairs meet the whole batch's), else as is."""
    from xlpretrain.parallel import sharding  # Flax's: declarations are read without it

    terms = functools.partial(ranking_terms, temperature=temperature, margin=margin)
    batch_axes = sharding.mesh_axes("batch")
    if batch_axes and sources.shape[0] % sharding.axes_size(batch_axes) == 0:

        def per_device(s, t, p):
            return tuple(jax.lax.psum(x, batch_axes) for x in terms(s, t, p, axes=batch_axes))

        rows = PartitionSpec(batch_axes)
        total, hits, count = jax.shard_map(
            per_device,
            mesh=jax.sharding.get_abstract_mesh(),
            in_specs=(rows, rows, rows),
            out_specs=(PartitionSpec(), PartitionSpec(), PartitionSpec()),
        )(sources, targets, present)
    else:
        total, hits, count = terms(sources, targets, present)
    denominator = jnp.maximum(count, 1.0)
    return total / denominator, hits / denominator, count


def make_xlco(settings: XlcoSettings):
    """The XLCo objective `(params, batch, rng, model) -> (loss, metrics)`."""

    def xlco(params, batch: Batch, rng: jax.Array, model: MaskedLM):
        hidden = encode(model, params, batch, rng, masks.mmlm)
        vectors = sentence_vectors(hidden, batch, settings.pooling, settings.pairs_per_row)
        loss, accuracy, count = translation_ranking(
            *vectors, temperature=settings.temperature, margin=settings.margin
        )
        return loss, {"loss": loss, "accuracy": accuracy, "count": count}

    return xlco


def xlco_flops(context: Context, stream: StreamSpec, shape: flops.StepShape) -> float:
    """One encoder pass over every token, and the scores of every pair slot against every
    other in both directions (2 · 6 · N² · hidden, N = rows · pairs_per_row)."""
    slots = shape.tokens // shape.length * context.own.pairs_per_row
    config = context.model
    encoder = flops.encoder_matmuls(config, shape.tokens) + flops.attention_scores(
        config, shape.tokens, shape.length
    )
    return encoder + 12.0 * slots**2 * config.hidden_size


XLCO = Objective(
    "xlco",
    ModelFamily.MASKED_LM,
    # No mask rates: its rows carry no masked tokens, whatever `data.anneal` says.
    lambda context: StreamSpec(SegmentPairs(max_units=context.own.pairs_per_row), {}),
    lambda context: make_xlco(context.own),
    catalog.BY_OBJECTIVE["xlco"],
    xlco_flops,
    section=XLCO_SECTION,
    count=lambda context: functools.partial(pair_count, pairs_per_row=context.own.pairs_per_row),
    whole_batch=True,
)
