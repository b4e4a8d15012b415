"""XLM-E (Chi et al., 2022): multilingual and translation replaced-token detection.

The generator is trained with MLM (`mrtd`, monolingual rows) or TLM (`trtd`, translation
pairs) on x^masked: every predicted token is `<mask>`, as the paper builds it, not BERT's
80/10/10 (the streams' `MASK_ONLY` corruption). Replacements are sampled from its softmax by
Gumbel-max at `temperature`, with no gradient through the sample; the discriminator labels every
non-padding token original or replaced — a sample equal to the original counts as original —
with a sigmoid cross-entropy averaged over those tokens. Total = L_G + λ·L_D.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import optax

from xlpretrain import masks
from xlpretrain.core.settings import Section
from xlpretrain.data.pretraining.batch import Batch
from xlpretrain.data.pretraining.masking import MASK_ONLY
from xlpretrain.data.pretraining.row_kinds import Segments, TranslationPairs
from xlpretrain.data.pretraining.streams import MONO, PARALLEL, StreamSpec
from xlpretrain.masks import catalog
from xlpretrain.model.config import ModelFamily, generator_config
from xlpretrain.objectives import flops
from xlpretrain.objectives.declaration import Context, Objective
from xlpretrain.objectives.mlm import mask_meta

if TYPE_CHECKING:  # the model is built by the trainer, not imported by declarations
    from xlpretrain.model.electra import ElectraPretrainer


def replace_with_samples(batch: Batch, sampled: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The corrupted ids (samples written at the prediction slots) and the replaced labels:
    1 where the corrupted id differs from the original token."""
    input_ids = jnp.asarray(batch["input_ids"])
    original = jnp.where(batch["is_masked"] > 0, batch["labels"], input_ids)
    rows = jnp.arange(sampled.shape[0])[:, None]
    slots = batch["pred_positions"]
    filled = batch["pred_weights"] > 0
    corrupted = input_ids.at[rows, slots].set(jnp.where(filled, sampled, input_ids[rows, slots]))
    return corrupted, (corrupted != original).astype(jnp.float32)


def make_rtd(
    generator_name: str, discriminator_name: str, mask_fn, *, disc_weight: float, temperature: float
):
    """`mrtd` (mask_fn = masks.mmlm) or `trtd` (masks.tlm) as one objective function."""

    def rtd(params, batch: Batch, rng: jax.Array, model: ElectraPretrainer):
        gen_rng, sample_rng, disc_rng = jax.random.split(rng, 3)
        common = dict(
            mask_fn=mask_fn,
            mask_meta=mask_meta(batch),
            lang_ids=batch["lang_ids"],
            deterministic=False,
        )
        hidden = model.apply(
            {"params": params},
            batch["input_ids"],
            batch["positions"],
            rngs={"dropout": gen_rng},
            method="generator_hidden",
            **common,
        )
        selected = jnp.take_along_axis(hidden, batch["pred_positions"][..., None], axis=1)
        logits = model.apply({"params": params}, selected, method="generator_logits")
        weights = batch["pred_weights"]
        count = jnp.maximum(weights.sum(), 1.0)
        nll = optax.softmax_cross_entropy_with_integer_labels(logits, batch["pred_labels"])
        generator_loss = (nll * weights).sum() / count

        gumbel = jax.random.gumbel(sample_rng, logits.shape)
        sampled = jnp.argmax(jax.lax.stop_gradient(logits) / temperature + gumbel, axis=-1)
        corrupted, replaced = replace_with_samples(batch, sampled.astype(jnp.int32))
        disc_logits = model.apply(
            {"params": params},
            corrupted,
            batch["positions"],
            rngs={"dropout": disc_rng},
            method="discriminator_logits",
            **common,
        )
        real = (batch["segment_ids"] > 0).astype(jnp.float32)
        tokens = jnp.maximum(real.sum(), 1.0)
        bce = optax.sigmoid_binary_cross_entropy(disc_logits, replaced)
        discriminator_loss = (bce * real).sum() / tokens

        predicted = (disc_logits > 0).astype(jnp.float32)
        correct = (predicted == replaced).astype(jnp.float32) * real
        n_replaced = (replaced * real).sum()
        n_original = tokens - n_replaced
        generator_correct = (jnp.argmax(logits, -1) == batch["pred_labels"]) * weights
        return generator_loss + disc_weight * discriminator_loss, {
            "count": weights.sum(),
            f"loss/{generator_name}": generator_loss,
            f"loss/{discriminator_name}": discriminator_loss,
            f"accuracy/{generator_name}": generator_correct.sum() / count,
            f"accuracy/{discriminator_name}": correct.sum() / tokens,
            f"accuracy/{discriminator_name}_replaced": (correct * replaced).sum()
            / jnp.maximum(n_replaced, 1.0),
            f"accuracy/{discriminator_name}_original": (correct * (1 - replaced)).sum()
            / jnp.maximum(n_original, 1.0),
            f"replaced_rate/{discriminator_name}": n_replaced / tokens,
        }

    return rtd


def make_mrtd(disc_weight: float, temperature: float):
    return make_rtd("gen_mlm", "mrtd", masks.mmlm, disc_weight=disc_weight, temperature=temperature)


def make_trtd(disc_weight: float, temperature: float):
    return make_rtd("gen_tlm", "trtd", masks.tlm, disc_weight=disc_weight, temperature=temperature)


def rtd_flops(context: Context, stream: StreamSpec, shape: flops.StepShape) -> float:
    """The discriminator's encoder, the generator's (its own depth and width) and their heads:
    the generator's LM head on the predictions, the discriminator's on every token."""
    config = context.model
    own: XlmESettings = context.own
    generator = generator_config(config, own.generator_layers, own.generator_width)
    discriminator_head = 6.0 * (config.hidden_size**2 + config.hidden_size) * shape.tokens
    return (
        flops.masked_lm(config, shape)
        + flops.encoder_matmuls(generator, shape.tokens)
        + flops.attention_scores(generator, shape.tokens, shape.length)
        + discriminator_head
    )


@dataclasses.dataclass(frozen=True)
class XlmESettings:
    """`xlm_e.*`: the generator's size and the loss's balance, shared by MRTD and TRTD."""

    generator_layers: int = 4
    generator_width: float = 1.0  # generator hidden / heads / FFN as a fraction of the model's
    disc_weight: float = 50.0  # λ in L_G + λ·L_D
    temperature: float = 1.0  # of the generator's softmax when sampling replacements


XLM_E_SECTION = Section(
    "xlm_e",
    XlmESettings,
    {
        "generator_layers": (lambda v: v > 0, "must be > 0"),
        "generator_width": (lambda v: 0.0 < v <= 1.0, "must be in (0, 1]"),
        "disc_weight": (lambda v: v >= 0, "must be >= 0"),
        "temperature": (lambda v: v > 0, "must be > 0"),
    },
)
# XLM-E's generator reads x^masked: every predicted token is `<mask>` (no 10% random/kept).
MRTD = Objective(
    "mrtd",
    ModelFamily.ELECTRA,
    lambda context: StreamSpec(Segments(), {MONO: context.mask_rates.mono}, corruption=MASK_ONLY),
    lambda context: make_mrtd(context.own.disc_weight, context.own.temperature),
    catalog.BY_OBJECTIVE["mrtd"],
    rtd_flops,
    section=XLM_E_SECTION,
)
TRTD = Objective(
    "trtd",
    ModelFamily.ELECTRA,
    lambda context: StreamSpec(
        TranslationPairs(), {PARALLEL: context.mask_rates.parallel}, corruption=MASK_ONLY
    ),
    lambda context: make_trtd(context.own.disc_weight, context.own.temperature),
    catalog.BY_OBJECTIVE["trtd"],
    rtd_flops,
    section=XLM_E_SECTION,
)
