"""The losses of the fine-tuning tasks (`model.task_heads`), as Hugging Face's task classes
compute them, in the step's convention (`training.step`): `(params, batch, rng, model)
-> (loss, metrics)`, the loss a mean over `metrics["count"]` items, so that the step, which
weights each micro-batch by its count, gives accumulated and sharded steps the loss of one full
batch. Each has its `CountFn`, what the step's totals count.

Token classification (`…ForTokenClassification`): cross-entropy averaged over the labelled
tokens (`label_weights` `[B, L]`, labels `[B, L]`); HF's -100 labels are weight 0 here.

Extractive QA (`…ForQuestionAnswering`): (CE(start) + CE(end)) / 2 over the batch's real rows
(`pred_weights` `[B]`; `start_positions`, `end_positions` `[B]`). As HF does, a position is
clamped to [0, L]: a negative one becomes the first token (`<s>` / `[CLS]`, "no answer"), one at
or past the row's end (L) is ignored. The softmax runs over the batch's `answer_region` `[B, L]`
(`QAWindows.batch`): by default every position of the row, padding included, as HF's and
XTREME's `run_squad.py` (its windows padded to `max_seq_length`) compute it; with
`qa.loss_over="tokens"` the row's tokens alone (`segment_ids > 0`), whose loss does not depend
on how far a row is padded (a position on padding is then ignored like one past the end). A
batch without `answer_region` is taken whole. One difference from HF, where its result is an
accident of the batch rather than of the example: the loss is the mean over the kept
boundaries, starts and ends together: equal to HF's mean of two means whenever each row keeps
both or neither (a row with one boundary in range and the other past the end is the only case
where they differ), and, unlike HF's, a sum over items divided by their count, which
accumulation and sharding need.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax

Params = Any
Batch = Mapping[str, jax.Array]
# Stands in for -inf at padding: finite, so a row of padding alone gives no NaN (even in a
# gradient multiplied by 0).
_EXCLUDED = float(jnp.finfo(jnp.float32).min)


# --- sentence(-pair) classification --------------------------------------------------------


def classification_loss(params: Params, batch: Batch, rng: jax.Array, model):
    """Cross-entropy over the batch's real rows (`pred_weights`), the step's `LossFn`: the step
    weights micro-batches by `count`, so accumulated and sharded steps equal one full batch."""
    logits = model.apply({"params": params}, batch, deterministic=False, rngs={"dropout": rng})
    weights = batch["pred_weights"]
    count = weights.sum()
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"])
    hits = (logits.argmax(-1) == batch["labels"]).astype(jnp.float32)
    loss = (nll * weights).sum() / jnp.maximum(count, 1.0)
    accuracy = (hits * weights).sum() / jnp.maximum(count, 1.0)
    return loss, {"loss": loss, "accuracy": accuracy, "count": count}


# --- token classification -------------------------------------------------------------------


def token_cross_entropy(
    logits: jax.Array, labels: jax.Array, weights: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(mean cross-entropy, accuracy, count) over the tokens with weight > 0 (weighted):
    `logits` `[B, L, C]`, `labels` and `weights` `[B, L]`. A weight-0 token's label may be
    anything (HF's -100)."""
    weights = weights.astype(jnp.float32)
    kept = weights > 0
    safe = jnp.where(kept, labels, 0)
    nll = jnp.where(kept, optax.softmax_cross_entropy_with_integer_labels(logits, safe), 0.0)
    hits = (logits.argmax(-1) == safe).astype(jnp.float32)
    count = weights.sum()
    return _mean(nll, weights, count), _mean(hits, weights, count), count


def labelled_tokens(batch: Batch) -> jax.Array:
    """What a token-classification loss is a mean over: the batch's labelled tokens."""
    return batch["label_weights"].astype(jnp.float32).sum()


def tagging_loss(params: Params, batch: Batch, rng: jax.Array, model) -> tuple[jax.Array, dict]:
    """A `TokenClassifier`'s loss (dropout on), the step's `LossFn`."""
    logits = model.apply({"params": params}, batch, deterministic=False, rngs={"dropout": rng})
    loss, accuracy, count = token_cross_entropy(logits, batch["labels"], batch["label_weights"])
    return loss, {"loss": loss, "accuracy": accuracy, "count": count}


# --- extractive QA --------------------------------------------------------------------------


def clamped_boundaries(
    positions: jax.Array, real: jax.Array, row_weights: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """(target, weight) per row for answer boundaries `positions` `[B]` over rows whose softmax
    runs over `real` `[B, L]`: HF's clamp to [0, L], then weight 0 for a target at L or outside
    `real`."""
    length = real.shape[1]
    target = jnp.clip(positions, 0, length)
    inside = jnp.take_along_axis(real, jnp.minimum(target, length - 1)[:, None], axis=1)[:, 0]
    kept = (target < length) & inside
    return jnp.minimum(target, length - 1), jnp.where(kept, row_weights.astype(jnp.float32), 0.0)


def boundary_cross_entropy(
    logits: jax.Array, target: jax.Array, weights: jax.Array, real: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Per row (nll, hit) of `target` `[B]` under a softmax of `logits` `[B, L]` over the
    row's `real` positions; 0 where `weights` is 0."""
    logits = jnp.where(real, logits, _EXCLUDED)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, target)
    hits = (logits.argmax(-1) == target).astype(jnp.float32)
    kept = weights > 0
    return jnp.where(kept, nll, 0.0), jnp.where(kept, hits, 0.0)


def answer_region(batch: Batch) -> jax.Array:
    """`[B, L]` bool: the positions a QA softmax runs over (the module docstring)."""
    if "answer_region" in batch:
        return jnp.asarray(batch["answer_region"]) > 0
    return jnp.ones(jnp.shape(batch["segment_ids"]), bool)


def span_cross_entropy(
    start_logits: jax.Array,
    end_logits: jax.Array,
    batch: Batch,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(mean cross-entropy, accuracy, count) over the kept answer boundaries of the batch's
    real rows, starts and ends alike (see the module docstring)."""
    real = answer_region(batch)
    nll_sum = hit_sum = count = 0.0
    for logits, key in ((start_logits, "start_positions"), (end_logits, "end_positions")):
        target, weights = clamped_boundaries(batch[key], real, batch["pred_weights"])
        nll, hits = boundary_cross_entropy(logits, target, weights, real)
        nll_sum = nll_sum + (nll * weights).sum()
        hit_sum = hit_sum + (hits * weights).sum()
        count = count + weights.sum()
    return nll_sum / jnp.maximum(count, 1.0), hit_sum / jnp.maximum(count, 1.0), count


def answer_boundaries(batch: Batch) -> jax.Array:
    """What a QA loss is a mean over: the kept starts and ends of the batch's real rows."""
    real = answer_region(batch)
    return sum(
        clamped_boundaries(batch[key], real, batch["pred_weights"])[1].sum()
        for key in ("start_positions", "end_positions")
    )


def span_loss(params: Params, batch: Batch, rng: jax.Array, model) -> tuple[jax.Array, dict]:
    """A `SpanExtractor`'s loss (dropout on), the step's `LossFn`."""
    start, end = model.apply({"params": params}, batch, deterministic=False, rngs={"dropout": rng})
    loss, accuracy, count = span_cross_entropy(start, end, batch)
    return loss, {"loss": loss, "accuracy": accuracy, "count": count}


def _mean(values: jax.Array, weights: jax.Array, count: jax.Array) -> jax.Array:
    return (values * weights).sum() / jnp.maximum(count, 1.0)
