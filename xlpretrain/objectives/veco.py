"""VECO (Luo et al., 2021): masked LM with and without the plug-in cross-attention.

A row holds pairs (x, y) as two segments sharing `pair_ids` — a sentence and its translation,
or two adjacent monolingual segments. Stream h is the plain encoder (self-attention within each
segment); stream s adds, in every layer, cross-attention to the *other* sequence's last-layer h,
under `stop_gradient`. Both sequences of every pair run in the same two passes:

    L = −log P(x|x̂) − log P(y|ŷ)            (h stream: `loss/<name>_self`)
        −log P(x|ŷ,x̂) − log P(y|x̂,ŷ)        (s stream: `loss/<name>_cross`)

`variant='iclr'` makes the s stream's self-attention causal (CS-MLM).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import jax

from xlpretrain import masks
from xlpretrain.core.settings import Section
from xlpretrain.data.pretraining.batch import Batch
from xlpretrain.data.pretraining.row_kinds import SegmentPairs
from xlpretrain.data.pretraining.streams import MONO, PARALLEL, StreamSpec
from xlpretrain.masks import catalog
from xlpretrain.model.config import ModelFamily
from xlpretrain.objectives import flops
from xlpretrain.objectives.declaration import Context, Objective, Requirement
from xlpretrain.objectives.mlm import mask_meta, prediction_loss, prediction_slots

if TYPE_CHECKING:  # the model is built by the trainer, not imported by declarations
    from xlpretrain.model.encoder import MaskedLM

VARIANTS = ("acl", "iclr")


def make_veco(name: str, variant: str = "acl"):
    """The VECO objective `(params, batch, rng, model) -> (loss, metrics)`."""
    if variant not in VARIANTS:
        raise ValueError(f"veco.variant={variant!r}; expected one of {VARIANTS}")
    s_stream_mask = masks.veco_causal if variant == "iclr" else masks.mmlm

    def veco(params, batch: Batch, rng: jax.Array, model: MaskedLM):
        h_rng, s_rng = jax.random.split(rng)
        meta = mask_meta(batch)
        slots = prediction_slots(batch)

        def stream(mask_fn, dropout_rng, memory=None):
            return model.apply(
                {"params": params},
                batch["input_ids"],
                batch["positions"],
                mask_fn=mask_fn,
                mask_meta=meta,
                lang_ids=batch["lang_ids"],
                deterministic=False,
                memory=memory,
                cross_mask_fn=masks.veco_cross,
                rngs={"dropout": dropout_rng},
            )

        h = stream(masks.mmlm, h_rng)
        self_loss, self_metrics = prediction_loss(model, params, h, *slots)
        s = stream(s_stream_mask, s_rng, memory=jax.lax.stop_gradient(h))
        cross_loss, cross_metrics = prediction_loss(model, params, s, *slots)
        return self_loss + cross_loss, {
            "loss": self_loss + cross_loss,
            "accuracy": (self_metrics["accuracy"] + cross_metrics["accuracy"]) / 2,
            "count": self_metrics["count"],
            f"loss/{name}_self": self_loss,
            f"loss/{name}_cross": cross_loss,
            f"accuracy/{name}_self": self_metrics["accuracy"],
            f"accuracy/{name}_cross": cross_metrics["accuracy"],
        }

    return veco


def veco_flops(context: Context, stream: StreamSpec, shape: flops.StepShape) -> float:
    """Two trained passes (h and s streams), the second with a cross-attention sub-layer per
    layer: its four projections and its scores over the paired sequence."""
    config = context.model
    attention = flops.attention_scores(config, shape.tokens, shape.length)
    cross = 6.0 * config.num_layers * 4 * config.hidden_size**2 * shape.tokens + attention
    return 2 * flops.masked_lm(config, shape) + cross


@dataclasses.dataclass(frozen=True)
class VecoSettings:
    """`veco.*`."""

    variant: str = "acl"  # acl: bidirectional s stream | iclr: causal s stream (CS-MLM)


VECO_SECTION = Section(
    "veco", VecoSettings, {"variant": (lambda v: v in VARIANTS, "must be 'acl' or 'iclr'")}
)
NEEDS_CROSS_ATTENTION = Requirement(
    "model.cross_attention",
    lambda context: context.model.cross_attention,
    "veco needs the plug-in cross-attention: set it True",
)
# VECO on bilingual pairs (x, y) = a sentence and its translation ...
VECO = Objective(
    "veco",
    ModelFamily.MASKED_LM,
    lambda context: StreamSpec(SegmentPairs(), {PARALLEL: context.mask_rates.parallel}),
    lambda context: make_veco("veco", context.own.variant),
    catalog.BY_OBJECTIVE["veco"],
    veco_flops,
    requires=(NEEDS_CROSS_ATTENTION,),
    section=VECO_SECTION,
)
# ... and on monolingual pairs (x, y) = two adjacent segments.
VECO_MONO = Objective(
    "veco_mono",
    ModelFamily.MASKED_LM,
    # Its rows are all monolingual: the bilingual rate only sizes its prediction slots (and
    # the benchmark's predictions), as it always has; without it its batches would change.
    lambda context: StreamSpec(
        SegmentPairs(mono_fraction=1.0),
        {MONO: context.mask_rates.mono, PARALLEL: context.mask_rates.parallel},
    ),
    lambda context: make_veco("veco_mono", context.own.variant),
    catalog.BY_OBJECTIVE["veco_mono"],
    veco_flops,
    requires=(NEEDS_CROSS_ATTENTION,),
    section=VECO_SECTION,
)
