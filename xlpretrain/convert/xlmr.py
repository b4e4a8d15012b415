"""Hugging Face ``XLMRobertaForMaskedLM`` folders ⇄ xlpretrain XLM-R / RoBERTa models.

XLM-R's names for ``hf.py``'s machinery: the rules of ``XLMRobertaForMaskedLM`` (the encoder
under ``roberta.``, then the head), its config keys and the settings it fixes, and its
``CONVERTER``, which reads and writes the folders both ways (``converter.Converter``) with
XLM-R's own checks: a bare encoder read with a fresh MLM head, a tokenizer that pads otherwise
than HF XLM-R refused. Exports also write bare encoders (``XLMRobertaModel``: an XLM-E
discriminator) and, through ``seq2seq.py``, VECO's ``EncoderDecoderModel``, from the same
rules; BERT's converter (``bert.py``) reads the same encoder under ``bert.``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from xlpretrain.convert.converter import Converter
from xlpretrain.convert.folder import Params
from xlpretrain.convert.hf import (
    COMMON_REASONS,
    COPY,
    HEADS_BIAS,
    HEADS_IN,
    HEADS_OUT,
    LINEAR,
    QUESTION_ANSWERING,
    SEQUENCE_CLASSIFICATION,
    SHAPE_KEYS,
    TOKEN_CLASSIFICATION,
    Rule,
    Tensors,
    check_hf_settings,
    export_ids,
    exported_config,
    fresh_head,
    import_tensors,
    linear_head_rules,
    pair_head_rules,
    prefixed,
    refuse_options,
    untie,
)
from xlpretrain.data.tokenizer import SpecialIds, Tokenizer
from xlpretrain.families import XLMR
from xlpretrain.model.config import ModelConfig

log = logging.getLogger(__name__)

BARE_ENCODERS = ("XLMRobertaModel", "RobertaModel")

# ModelConfig field -> HF config.json key.
CONFIG_KEYS = {
    **SHAPE_KEYS,
    "pad_token_id": "pad_token_id",
    "layer_norm_eps": "layer_norm_eps",
    "dropout_rate": "hidden_dropout_prob",
    "attention_dropout_rate": "attention_probs_dropout_prob",
    "initializer_range": "initializer_range",
}
# HF settings that xlpretrain's encoder implements one way only.
FIXED_HF_SETTINGS = {
    "hidden_act": "gelu",
    "position_embedding_type": "absolute",
    "type_vocab_size": XLMR.features["token_type_rows"],
    "is_decoder": False,
    "add_cross_attention": False,
}
# Why an export refuses a model option; the error names both.
OPTION_REASONS = {
    **COMMON_REASONS,
    "cross_attention": "VECO's plug-in cross-attention: export it with to-hf-seq2seq",
    "relative_position": "HF XLM-R has no relative position bias",
    "absolute_positions": "HF XLM-R always adds absolute position embeddings",
    "architecture": "another family exports as its own HF masked LM, with to-hf",
}
MASKED_LM_ARCHITECTURE = "XLMRobertaForMaskedLM"
ENCODER_ARCHITECTURE = "XLMRobertaModel"

PREFIX = "roberta."  # the encoder's, in the masked LM and the task classes
_LAYER = "encoder.layer.{i}."
_STACK = "encoder/layers/"


def _attention_rules(hf: str, ours: str, norm: str) -> Iterable[Rule]:
    """One attention sub-layer: HF ``{hf}.self.*`` / ``{hf}.output.*`` ⇄ our ``ours``, ``norm``."""
    for name in ("query", "key", "value"):
        yield f"{hf}.self.{name}.weight", f"{ours}/{name}/kernel", HEADS_IN
        yield f"{hf}.self.{name}.bias", f"{ours}/{name}/bias", HEADS_BIAS
    yield f"{hf}.output.dense.weight", f"{ours}/out/kernel", HEADS_OUT
    yield f"{hf}.output.dense.bias", f"{ours}/out/bias", COPY
    yield f"{hf}.output.LayerNorm.weight", f"{norm}/scale", COPY
    yield f"{hf}.output.LayerNorm.bias", f"{norm}/bias", COPY


def _layer_rules() -> Iterable[Rule]:
    yield from _attention_rules("attention", "attention", "attention_norm")
    yield "output.LayerNorm.weight", "mlp_norm/scale", COPY
    yield "output.LayerNorm.bias", "mlp_norm/bias", COPY
    for hf, ours in (("intermediate.dense", "mlp/wi"), ("output.dense", "mlp/wo")):
        yield f"{hf}.weight", f"{ours}/kernel", LINEAR
        yield f"{hf}.bias", f"{ours}/bias", COPY


# Names with "{i}" exist once per layer and are stacked on the leading ``layers`` axis of our
# parameter. ENCODER_RULES name ``XLMRobertaModel``'s
# tensors, RULES ``XLMRobertaForMaskedLM``'s (the encoder under ``roberta.``, plus the head).
ENCODER_RULES: tuple[Rule, ...] = (
    ("embeddings.word_embeddings.weight", "embeddings/word_embeddings/embedding", COPY),
    ("embeddings.position_embeddings.weight", "embeddings/position_embeddings/embedding", COPY),
    (
        "embeddings.token_type_embeddings.weight",
        "embeddings/token_type_embeddings/embedding",
        COPY,
    ),
    ("embeddings.LayerNorm.weight", "embeddings/layer_norm/scale", COPY),
    ("embeddings.LayerNorm.bias", "embeddings/layer_norm/bias", COPY),
    *prefixed(_layer_rules(), _LAYER, _STACK),
)
RULES: tuple[Rule, ...] = (
    *prefixed(ENCODER_RULES, PREFIX),
    ("lm_head.dense.weight", "lm_head/dense/kernel", LINEAR),
    ("lm_head.dense.bias", "lm_head/dense/bias", COPY),
    ("lm_head.layer_norm.weight", "lm_head/layer_norm/scale", COPY),
    ("lm_head.layer_norm.bias", "lm_head/layer_norm/bias", COPY),
    ("lm_head.bias", "lm_head/bias", COPY),
)
# VECO's plug-in as a decoder layer's HF cross-attention (``XLMRobertaForCausalLM`` names).
CROSS_ATTENTION_RULES = prefixed(
    _attention_rules("crossattention", "cross_attention", "cross_attention_norm"),
    PREFIX + _LAYER,
    _STACK,
)
# Tied copies some checkpoints also store (pytorch_model.bin does): they must equal the original.
TIED = {
    "lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
    "lm_head.decoder.bias": "lm_head.bias",
}
# Tensors that are not part of the masked LM: a buffer, and the bare encoder's pooler.
IGNORED = ("roberta.embeddings.position_ids", "roberta.pooler.")
# The HF class of each fine-tuning task kind, and its head's tensors.
TASK_ARCHITECTURES = {
    SEQUENCE_CLASSIFICATION: "XLMRobertaForSequenceClassification",
    TOKEN_CLASSIFICATION: "XLMRobertaForTokenClassification",
    QUESTION_ANSWERING: "XLMRobertaForQuestionAnswering",
}
TASK_HEAD_RULES = {
    SEQUENCE_CLASSIFICATION: pair_head_rules("classifier.dense", "classifier.out_proj"),
    TOKEN_CLASSIFICATION: linear_head_rules("classifier"),
    QUESTION_ANSWERING: linear_head_rules("qa_outputs"),
}


# --- configs --------------------------------------------------------------------------------


def config_from_hf(hf_config: Mapping, source: str | os.PathLike = "config.json") -> ModelConfig:
    """The ``ModelConfig`` of an HF XLM-R / RoBERTa config; unsupported settings are errors."""
    model_type = hf_config.get("model_type")
    if model_type not in XLMR.hf_model_types:
        raise ValueError(
            f"{source}: unsupported architecture: model_type={model_type!r}; from-hf converts "
            f"XLM-R / RoBERTa masked LMs (model_type one of {XLMR.hf_model_types})"
        )
    check_hf_settings(hf_config, source, FIXED_HF_SETTINGS, CONFIG_KEYS.values(), "encoder")
    return XLMR.config(**{ours: hf_config[key] for ours, key in CONFIG_KEYS.items()})


def config_to_hf(
    config: ModelConfig,
    architecture: str = MASKED_LM_ARCHITECTURE,
    *,
    expressible: Iterable[str] = (),
    special: SpecialIds | None = None,
) -> dict:
    """``config.json`` of the HF XLM-R ``architecture`` equivalent to ``config``.

    ``expressible`` names model options the caller maps itself (VECO's cross-attention);
    ``special``: the ids of the model's tokenizer (``export_ids``)."""
    check_exportable(config, architecture, expressible=expressible)
    special = special or export_ids(config, None)
    return {
        **exported_config(config, architecture, XLMR.hf_model_type, CONFIG_KEYS),
        **FIXED_HF_SETTINGS,
        "bos_token_id": special.bos,
        "eos_token_id": special.eos,
        "tie_word_embeddings": True,
    }


def check_xlmr_tokenizer(config: ModelConfig, tokenizer: Tokenizer | None) -> None:
    """HF XLM-R numbers positions from the pad id (real tokens are those that are not it,
    counted from ``pad_token_id + 1``), so it has one pad id, which must be the tokenizer's:
    a model whose tokenizer pads with another id is refused, not exported to number wrong."""
    if tokenizer is not None and tokenizer.pad_id != config.pad_token_id:
        raise ValueError(
            f"HF XLM-R finds padding by its position index {config.pad_token_id}, but this "
            f"model's tokenizer pads with id {tokenizer.pad_id}: it cannot be an HF XLM-R "
            "model (an architecture='modernbert' model can, with its tokenizer.json)"
        )


def check_exportable(
    config: ModelConfig,
    architecture: str = MASKED_LM_ARCHITECTURE,
    *,
    expressible: Iterable[str] = (),
) -> None:
    """Raises if ``config`` uses a model option HF ``architecture`` has no place for."""
    refuse_options(
        config,
        XLMR.config(),
        (*CONFIG_KEYS, *expressible),
        architecture=architecture,
        reasons=OPTION_REASONS,
        scope="only a plain XLM-R encoder can be exported",
    )


# --- converter ------------------------------------------------------------------------------


def _with_prefix(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A bare encoder's names lack the ``roberta.`` prefix the masked LM's have."""
    if any(name.startswith(PREFIX) for name in tensors):
        return dict(tensors)
    return {(n if n.startswith("lm_head.") else PREFIX + n): t for n, t in tensors.items()}


class XLMRConverter(Converter):
    """XLM-R's converter: it also reads a bare encoder (``XLMRobertaModel``) when a fresh MLM
    head is allowed, and exports only a model whose tokenizer pads as HF XLM-R does."""

    def check_tokenizer(self, config: ModelConfig, tokenizer: Tokenizer | None) -> None:
        check_xlmr_tokenizer(config, tokenizer)

    def check_architectures(self, named: list[str], source: Path, allow_missing_head: bool) -> None:
        """Any masked LM; with ``allow_missing_head``, a bare encoder too."""
        if not named or any(a.endswith("ForMaskedLM") for a in named):
            return
        if allow_missing_head and all(a in BARE_ENCODERS for a in named):
            return
        raise ValueError(
            f"{source}: unsupported architecture {named}: from-hf converts masked LMs "
            f"({' or '.join(self.read_architectures)}); a bare encoder ({self.encoder}) needs "
            "--allow-missing-head"
        )

    def params_from_hf(
        self, tensors: Tensors, config: ModelConfig, *, allow_missing_head: bool = False
    ) -> Params:
        """Our float32 params (layers stacked) from an HF ``XLMRobertaForMaskedLM`` state dict.

        With ``allow_missing_head`` a state dict without any ``lm_head.*`` tensor (a bare
        ``XLMRobertaModel``) gets a freshly initialised head, as ``init_params`` would make it.
        """
        tensors = untie(_with_prefix(tensors), self.tied)
        headless = allow_missing_head and not any(n.startswith("lm_head.") for n in tensors)
        rules = [r for r in self.rules if not (headless and r[0].startswith("lm_head."))]
        params = import_tensors(
            tensors, rules, config, model="an XLM-R masked LM", ignored=self.ignored
        )
        if headless:
            log.warning("no lm_head.* tensors: the MLM head is freshly initialised")
            params["lm_head"] = fresh_head(config, params)
        return params


CONVERTER = XLMRConverter(
    family=XLMR, title="XLM-R", config_from_hf=config_from_hf, config_to_hf=config_to_hf,
    masked_lm=MASKED_LM_ARCHITECTURE, encoder=ENCODER_ARCHITECTURE,
    read_architectures=(MASKED_LM_ARCHITECTURE,), task_architectures=TASK_ARCHITECTURES,
    prefix=PREFIX, encoder_rules=ENCODER_RULES, rules=RULES, tied=TIED, ignored=IGNORED,
    task_head_rules=TASK_HEAD_RULES, tokenizer_json=False,
)  # fmt: skip
