"""Hugging Face ``BertForMaskedLM`` folders ⇄ xlpretrain BERT / mBERT models.

BERT's encoder is XLM-R's tensor for tensor (``xlmr.ENCODER_RULES``, under ``bert.`` where
XLM-R's is under ``roberta.``), so this is the converters' machinery (``hf.py``: rules,
layouts, names checked both ways, folders) with XLM-R's encoder, BERT's head and four
differences:

- The token-type table has two rows and the position table starts at row 0 (the declaration's
  features); the model adds type 0 to every token, as HF BERT does without ``token_type_ids``.
- The head is ``cls.predictions``: ``transform.{dense,LayerNorm}``, ``bias``, and a decoder
  tied to the word embeddings.
- HF BERT numbers positions 0, 1, … whatever the ids, so its ``pad_token_id`` only names the
  tokenizer's padding: the config keeps xlpretrain's pad id, which numbers the batch's
  positions (``layers.position_rows``), and an export states the tokenizer's.
- Hub checkpoints (mBERT's) were saved from ``BertForPreTraining``: their pooler and
  next-sentence head (``cls.seq_relationship``) are dropped with a log line, and their
  LayerNorms' TensorFlow names (``gamma``, ``beta``) read as transformers reads them.

An mBERT folder's tokenizer is its WordPiece ``tokenizer.json`` (special tokens found by role:
``[CLS]``, ``[SEP]``, ``[PAD]``, ``[MASK]``, ``[UNK]``), read on import and written on export;
a SentencePiece model is exported as ModernBERT's converter exports it
(``hf.tokenizer_files``): transformers reads a ``bert`` folder's tokenizer from a
``tokenizer.json`` (or a ``vocab.txt``), never from ``sentencepiece.bpe.model``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from xlpretrain.convert import hf, xlmr
from xlpretrain.convert.converter import Converter
from xlpretrain.convert.hf import (
    COPY,
    LINEAR,
    QUESTION_ANSWERING,
    SEQUENCE_CLASSIFICATION,
    TOKEN_CLASSIFICATION,
    Rule,
)
from xlpretrain.data.tokenizer import SpecialIds
from xlpretrain.families import BERT
from xlpretrain.model.config import ModelConfig

MASKED_LM_ARCHITECTURE = "BertForMaskedLM"
ENCODER_ARCHITECTURE = "BertModel"
# Architectures whose tensors hold the masked LM: a hub checkpoint's also holds the
# next-sentence head, which is dropped.
READ_ARCHITECTURES = (MASKED_LM_ARCHITECTURE, "BertForPreTraining")

# ModelConfig field -> HF config.json key: XLM-R's but the pad id (see the module docstring).
CONFIG_KEYS = {ours: key for ours, key in xlmr.CONFIG_KEYS.items() if ours != "pad_token_id"}
# HF settings that xlpretrain's BERT implements one way only: XLM-R's, with BERT's token types.
FIXED_HF_SETTINGS = {**xlmr.FIXED_HF_SETTINGS, "type_vocab_size": BERT.features["token_type_rows"]}
# ModelConfig fields an export states, besides CONFIG_KEYS; the relative-position ones mean
# nothing without relative positions, which are refused.
EXPRESSED = (
    *CONFIG_KEYS, "architecture", "pad_token_id", "num_buckets", "max_distance",
    "share_relative_table",
)  # fmt: skip
REASONS = {
    **hf.COMMON_REASONS,
    "cross_attention": "VECO's plug-in cross-attention has no BertForMaskedLM counterpart",
    "relative_position": "HF BERT has no relative position bias of this kind",
    "absolute_positions": "HF BERT always adds absolute position embeddings",
}

PREFIX = "bert."  # the encoder's, in the masked LM and the task classes
# RULES name ``BertForMaskedLM``'s tensors: the encoder under ``bert.``, then the head; "{i}"
# as in ``xlmr.RULES``.
_HEAD = "cls.predictions."
RULES: tuple[Rule, ...] = (
    *hf.prefixed(xlmr.ENCODER_RULES, PREFIX),
    (_HEAD + "transform.dense.weight", "lm_head/dense/kernel", LINEAR),
    (_HEAD + "transform.dense.bias", "lm_head/dense/bias", COPY),
    (_HEAD + "transform.LayerNorm.weight", "lm_head/layer_norm/scale", COPY),
    (_HEAD + "transform.LayerNorm.bias", "lm_head/layer_norm/bias", COPY),
    (_HEAD + "bias", "lm_head/bias", COPY),
)
TIED = {
    _HEAD + "decoder.weight": "bert.embeddings.word_embeddings.weight",
    _HEAD + "decoder.bias": _HEAD + "bias",
}
# Buffers, and what a hub checkpoint holds beside the masked LM: the pooler and the
# next-sentence head.
IGNORED = (
    "bert.embeddings.position_ids", "bert.embeddings.token_type_ids", "bert.pooler.",
    "cls.seq_relationship.",
)  # fmt: skip
# The HF class of each fine-tuning task kind, and its head's tensors.
TASK_ARCHITECTURES = {
    SEQUENCE_CLASSIFICATION: "BertForSequenceClassification",
    TOKEN_CLASSIFICATION: "BertForTokenClassification",
    QUESTION_ANSWERING: "BertForQuestionAnswering",
}
TASK_HEAD_RULES = {
    # The pooler (dense, tanh) on [CLS], then the classifier: the pair classifier's linear head.
    SEQUENCE_CLASSIFICATION: hf.pair_head_rules("bert.pooler.dense", "classifier"),
    TOKEN_CLASSIFICATION: hf.linear_head_rules("classifier"),
    QUESTION_ANSWERING: hf.linear_head_rules("qa_outputs"),
}
# TensorFlow's LayerNorm names, which transformers renames on load ("legacy" renamings).
LEGACY_NORM_NAMES = {"LayerNorm.gamma": "LayerNorm.weight", "LayerNorm.beta": "LayerNorm.bias"}


# --- configs --------------------------------------------------------------------------------


def config_from_hf(hf_config: Mapping, source: str | os.PathLike = "config.json") -> ModelConfig:
    """The ``ModelConfig`` of an HF BERT config; settings xlpretrain does not implement are
    errors that name them."""
    if hf_config.get("model_type") != BERT.hf_model_type:
        raise ValueError(
            f"{source}: model_type={hf_config.get('model_type')!r} is not {BERT.hf_model_type!r}"
        )
    hf.check_hf_settings(hf_config, source, FIXED_HF_SETTINGS, CONFIG_KEYS.values(), "BERT")
    return BERT.config(**{ours: hf_config[key] for ours, key in CONFIG_KEYS.items()})


def config_to_hf(
    config: ModelConfig,
    architecture: str = MASKED_LM_ARCHITECTURE,
    special: SpecialIds | None = None,
) -> dict:
    """``config.json`` of the HF BERT ``architecture`` equivalent to ``config``, its
    ``pad_token_id`` the model's tokenizer's (``special``, ``hf.export_ids``)."""
    check_exportable(config, architecture)
    special = special or hf.export_ids(config, None)
    return {
        **hf.exported_config(config, architecture, BERT.hf_model_type, CONFIG_KEYS),
        **FIXED_HF_SETTINGS,
        "pad_token_id": special.pad,
        "tie_word_embeddings": True,
    }


def check_exportable(config: ModelConfig, architecture: str = MASKED_LM_ARCHITECTURE) -> None:
    """Raises if ``config`` uses a model option HF BERT has no place for."""
    hf.refuse_options(
        config,
        BERT.config(),
        EXPRESSED,
        architecture=architecture,
        reasons=REASONS,
        scope="only a plain BERT encoder can be exported",
    )


# --- converter ------------------------------------------------------------------------------


class BertConverter(Converter):
    """BERT's converter: a hub checkpoint's TensorFlow LayerNorm names read as transformers
    reads them."""

    def renamed(self, tensors: hf.Tensors, config: ModelConfig) -> dict[str, np.ndarray]:
        """``tensors`` with TensorFlow's LayerNorm names renamed as transformers renames them."""
        renamed = {}
        for name, tensor in tensors.items():
            for legacy, current in LEGACY_NORM_NAMES.items():
                if name.endswith(legacy):
                    name = name.removesuffix(legacy) + current
            renamed[name] = tensor
        return renamed


CONVERTER = BertConverter(
    family=BERT, title="BERT", config_from_hf=config_from_hf, config_to_hf=config_to_hf,
    masked_lm=MASKED_LM_ARCHITECTURE, encoder=ENCODER_ARCHITECTURE,
    read_architectures=READ_ARCHITECTURES, task_architectures=TASK_ARCHITECTURES,
    prefix=PREFIX, encoder_rules=xlmr.ENCODER_RULES, rules=RULES, tied=TIED, ignored=IGNORED,
    task_head_rules=TASK_HEAD_RULES,
)  # fmt: skip
