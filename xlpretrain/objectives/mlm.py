"""Masked language modelling on monolingual rows (MMLM) and translation pairs (TLM).

The loss is taken on gathered prediction slots only: the LM head never sees an unlabelled
position, so no `[tokens, vocabulary]` logits tensor is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from xlpretrain import masks
from xlpretrain.data.pretraining.batch import Batch
from xlpretrain.data.pretraining.row_kinds import Segments, TranslationPairs
from xlpretrain.data.pretraining.streams import MONO, PARALLEL, StreamSpec
from xlpretrain.masks import catalog
from xlpretrain.model.config import ModelFamily
from xlpretrain.objectives import flops
from xlpretrain.objectives.declaration import Context, LossFn, Objective

if TYPE_CHECKING:  # the model is built by the trainer, not imported by declarations
    from xlpretrain.model.encoder import MaskedLM

MASK_META_KEYS = ("segment_ids", "pair_ids", "side", "positions", "is_masked")


def mask_meta(batch: Batch) -> dict[str, jax.Array]:
    """The per-token metadata a mask function may read."""
    return {key: batch[key] for key in MASK_META_KEYS}


def encode(model: MaskedLM, params, batch: Batch, rng: jax.Array, mask_fn) -> jax.Array:
    """Final hidden states of `batch` under `mask_fn`; dropout is on (training)."""
    return model.apply(
        {"params": params},
        batch["input_ids"],
        batch["positions"],
        mask_fn=mask_fn,
        mask_meta=mask_meta(batch),
        lang_ids=batch["lang_ids"],
        deterministic=False,
        rngs={"dropout": rng},
    )


def prediction_slots(batch: Batch) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The batch's prediction slots `[B, P]`: positions, labels, weights."""
    return batch["pred_positions"], batch["pred_labels"], batch["pred_weights"]


def prediction_loss(
    model: MaskedLM, params, hidden: jax.Array, positions, labels, weights
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Mean cross-entropy over the weighted prediction slots `[B, P]` of `hidden` `[B, L, H]`."""
    selected = jnp.take_along_axis(hidden, positions[..., None], axis=1)
    nll, correct = model.apply({"params": params}, selected, labels, method="mlm_nll")
    count = weights.sum()
    denominator = jnp.maximum(count, 1.0)
    loss = (nll * weights).sum() / denominator
    accuracy = (correct.astype(jnp.float32) * weights).sum() / denominator
    return loss, {"loss": loss, "accuracy": accuracy, "count": count}


def masked_lm(mask_fn: masks.MaskFn):
    """An MLM objective whose encoder attends under `mask_fn`, predicting the batch's slots."""

    def objective(params, batch: Batch, rng: jax.Array, model: MaskedLM):
        hidden = encode(model, params, batch, rng, mask_fn)
        return prediction_loss(model, params, hidden, *prediction_slots(batch))

    return objective


mmlm = masked_lm(masks.mmlm)
mmlm.__doc__ = "MMLM: predict masked tokens of monolingual segments, attention within a segment."
tlm = masked_lm(masks.tlm)
tlm.__doc__ = "TLM: predict masked tokens of a translation pair, attending across both sides."


def masked_lm_flops(context: Context, stream: StreamSpec, shape: flops.StepShape) -> float:
    """One encoder pass over every token, the LM head on the predictions."""
    return flops.masked_lm(context.model, shape)


def masked_lm_objective(
    name: str,
    stream_spec: Callable[[Context], StreamSpec],
    loss: Callable[[Context], LossFn],
) -> Objective:
    """The declaration of a one-pass MLM objective `name`: every such objective trains the
    masked LM and costs one encoder pass plus the LM head on its predictions."""
    return Objective(
        name, ModelFamily.MASKED_LM, stream_spec, loss, catalog.BY_OBJECTIVE[name], masked_lm_flops
    )


MMLM = masked_lm_objective(
    "mmlm",
    lambda context: StreamSpec(Segments(), {MONO: context.mask_rates.mono}),
    lambda context: mmlm,
)
TLM = masked_lm_objective(
    "tlm",
    lambda context: StreamSpec(TranslationPairs(), {PARALLEL: context.mask_rates.parallel}),
    lambda context: tlm,
)
