"""ERNIE-M (Ouyang et al., 2021): cross-attention MLM and back-translation MLM.

CAMLM predicts a masked token of one side from the unmasked tokens of the other side only
(`masks.camlm`). BTMLM runs two passes in one step: pass 1 decodes pseudo tokens at placeholder
slots appended to a monolingual source, seeing the source only (`masks.btmlm_generate`), with no
gradient; pass 2 trains MLM on the masked source with the pseudo tokens appended
(`masks.btmlm`), p(x_m | X \\ M, P).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from xlpretrain import masks
from xlpretrain.core.settings import Section
from xlpretrain.data.pretraining.batch import SIDE_PSEUDO, Batch
from xlpretrain.data.pretraining.row_kinds import PlaceholderSegments, TranslationPairs
from xlpretrain.data.pretraining.streams import MONO, PARALLEL, StreamSpec
from xlpretrain.data.tokenizer import SpecialIds
from xlpretrain.masks import catalog
from xlpretrain.model.config import ModelFamily
from xlpretrain.objectives import flops
from xlpretrain.objectives.declaration import Context, Objective, Requirement
from xlpretrain.objectives.mlm import (
    encode,
    mask_meta,
    masked_lm,
    masked_lm_objective,
    prediction_loss,
    prediction_slots,
)

if TYPE_CHECKING:  # the model is built by the trainer, not imported by declarations
    from xlpretrain.model.encoder import MaskedLM

camlm = masked_lm(masks.camlm)
camlm.__doc__ = "CAMLM: masked tokens see only the unmasked tokens of the other side."


def decode_pseudo_tokens(
    model: MaskedLM, params, batch: Batch, rng: jax.Array, *, decode: str, temperature: float
) -> jax.Array:
    """BTMLM pass 1: token ids at the placeholder slots `[B, K]`, without gradient.

    Decoding runs without dropout: it produces data for pass 2, not a training signal.
    """
    params = jax.lax.stop_gradient(params)
    meta = mask_meta(batch)
    hidden = model.apply(
        {"params": params},
        batch["source_ids"],
        batch["positions"],
        mask_fn=masks.btmlm_generate,
        mask_meta=meta,
        lang_ids=batch["lang_ids"],
        deterministic=True,
    )
    slots = batch["placeholder_positions"]
    selected = jnp.take_along_axis(hidden, slots[..., None], axis=1)
    logits = model.apply({"params": params}, selected, method="mlm_logits")
    if decode == "argmax":
        ids = jnp.argmax(logits, axis=-1)
    else:
        ids = jax.random.categorical(rng, logits / temperature, axis=-1)
    return jax.lax.stop_gradient(ids.astype(jnp.int32))


def pseudo_token_statistics(ids: jax.Array, weights: jax.Array, special: SpecialIds | None) -> dict:
    """Share of special and of unknown ids among the pseudo tokens (given the tokenizer's
    `special` ids), and distinct/total ratio: a collapsing generator shows up as many specials
    or few distinct tokens."""
    valid = weights > 0
    count = jnp.maximum(valid.sum(), 1)
    ordered = jnp.sort(jnp.where(valid, ids, -1).ravel())
    distinct = ((ordered[1:] != ordered[:-1]) & (ordered[1:] >= 0)).sum() + (ordered[0] >= 0)
    stats = {"pseudo_distinct_ratio": distinct / count}
    if special is not None:
        is_special = jnp.isin(ids, jnp.asarray(special.all()))
        stats["pseudo_special_share"] = (is_special & valid).sum() / count
        stats["pseudo_unknown_share"] = ((ids == special.unk) & valid).sum() / count
    return stats


def make_btmlm(decode: str = "argmax", temperature: float = 1.0, special: SpecialIds | None = None):
    """The two-pass BTMLM objective `(params, batch, rng, model) -> (loss, metrics)`; its
    metrics count the special ids among the pseudo tokens where `special` gives them."""

    def btmlm(params, batch: Batch, rng: jax.Array, model: MaskedLM):
        decode_rng, dropout_rng = jax.random.split(rng)
        pseudo = decode_pseudo_tokens(
            model, params, batch, decode_rng, decode=decode, temperature=temperature
        )
        rows = jnp.arange(pseudo.shape[0])[:, None]
        slots = batch["placeholder_positions"]
        filled = batch["placeholder_weights"] > 0
        # Empty slots point at position 0 (<s>): leave those untouched.
        input_ids, side = jnp.asarray(batch["input_ids"]), jnp.asarray(batch["side"])
        input_ids = input_ids.at[rows, slots].set(jnp.where(filled, pseudo, input_ids[rows, slots]))
        side = side.at[rows, slots].set(jnp.where(filled, SIDE_PSEUDO, side[rows, slots]))
        second = {**batch, "input_ids": input_ids, "side": side}
        hidden = encode(model, params, second, dropout_rng, masks.btmlm)
        loss, metrics = prediction_loss(model, params, hidden, *prediction_slots(batch))
        stats = pseudo_token_statistics(pseudo, batch["placeholder_weights"], special)
        return loss, {**metrics, **stats}

    return btmlm


def btmlm_stream(context: Context) -> StreamSpec:
    """Monolingual rows with placeholders after each segment, for pass 1 to fill."""
    own: BtmlmSettings = context.own
    placeholders = PlaceholderSegments(
        own.ratio,
        own.target_languages,
        own.tag_format if own.target_signal == "tag_token" else "",
    )
    return StreamSpec(placeholders, {MONO: context.mask_rates.mono})


def btmlm_flops(context: Context, stream: StreamSpec, shape: flops.StepShape) -> float:
    """Pass 2 (trained) plus pass 1: forward only (1/3 of a training pass) over every token
    and the LM head on the ⌈ratio·T⌉ placeholders."""
    config = context.model
    placeholders = math.ceil(context.own.ratio * shape.tokens)
    encoder = flops.encoder_matmuls(config, shape.tokens) + flops.attention_scores(
        config, shape.tokens, shape.length
    )
    decode = (encoder + flops.lm_head(config, placeholders)) / 3
    return flops.masked_lm(config, shape) + decode


@dataclasses.dataclass(frozen=True)
class BtmlmSettings:
    """`btmlm.*`: back-translation masked LM's placeholders and decoding."""

    ratio: float = 0.15  # placeholders per source token (ERNIE-M: 0.05-0.2)
    target_languages: tuple[str, ...] = ()  # placeholder languages; empty: every language
    # How placeholders learn their target language: its language embedding (ERNIE-M; needs
    # model.language_embeddings) or tag tokens, the tokenization of tag_format, before them.
    target_signal: str = "language_embedding"  # language_embedding | tag_token
    tag_format: str = "<{lang}>"
    decode: str = "argmax"  # argmax | sample
    temperature: float = 1.0  # for decode=sample

    def __post_init__(self) -> None:  # a config gives a list; the stream needs it hashable
        object.__setattr__(self, "target_languages", tuple(self.target_languages))


BTMLM_SECTION = Section(
    "btmlm",
    BtmlmSettings,
    {
        "ratio": (lambda v: 0.0 < v <= 1.0, "must be in (0, 1]"),
        "target_signal": (
            lambda v: v in ("language_embedding", "tag_token"),
            "must be 'language_embedding' or 'tag_token'",
        ),
        "tag_format": (lambda v: "{lang}" in v, "must contain '{lang}'"),
        "decode": (lambda v: v in ("argmax", "sample"), "must be 'argmax' or 'sample'"),
        "temperature": (lambda v: v > 0, "must be > 0"),
    },
)
CAMLM = masked_lm_objective(
    "camlm",
    lambda context: StreamSpec(TranslationPairs(), {PARALLEL: context.mask_rates.camlm}),
    lambda context: camlm,
)
BTMLM = Objective(
    "btmlm",
    ModelFamily.MASKED_LM,
    btmlm_stream,
    lambda context: make_btmlm(context.own.decode, context.own.temperature, context.special),
    catalog.BY_OBJECTIVE["btmlm"],
    btmlm_flops,
    requires=(
        Requirement(
            "model.language_embeddings",
            lambda context: context.language_embeddings or context.own.target_signal == "tag_token",
            "btmlm.target_signal='language_embedding' needs language embeddings: set this True, "
            "or use btmlm.target_signal='tag_token'",
        ),
    ),
    section=BTMLM_SECTION,
)
