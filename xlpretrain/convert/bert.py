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
from xlpretrain.convert.folder import DISCRIMINATOR, Params, Pretrained, unpadded
from xlpretrain.convert.hf import COPY, LINEAR, Part, Rule
from xlpretrain.data.tokenizer import SpecialIds
from xlpretrain.families import BERT
from xlpretrain.model import vocab
from xlpretrain.model.config import ModelConfig
from xlpretrain.model.task_heads import (
    QUESTION_ANSWERING,
    SEQUENCE_CLASSIFICATION,
    TOKEN_CLASSIFICATION,
)

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

# RULES name ``BertForMaskedLM``'s tensors: the encoder under ``bert.``, then the head; "{i}"
# as in ``xlmr.RULES``.
_HEAD = "cls.predictions."
RULES: tuple[Rule, ...] = (
    *hf.prefixed(xlmr.ENCODER_RULES, "bert."),
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
# The HF class of each fine-tuning task kind (`model.task_heads`), and its head's tensors.
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
        "architectures": [architecture],
        "model_type": BERT.hf_model_type,
        **{key: getattr(config, ours) for ours, key in CONFIG_KEYS.items()},
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


# --- parameters -----------------------------------------------------------------------------


def params_from_hf(tensors: Mapping[str, np.ndarray], config: ModelConfig) -> Params:
    """Our float32 params (layers stacked) from an HF ``BertForMaskedLM`` (or
    ``BertForPreTraining``) state dict."""
    tensors = hf.untie(_current_names(tensors), TIED)
    return hf.import_tensors(tensors, RULES, config, model="a BERT masked LM", ignored=IGNORED)


def _current_names(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``tensors`` with TensorFlow's LayerNorm names renamed as transformers renames them."""
    renamed = {}
    for name, tensor in tensors.items():
        for legacy, current in LEGACY_NORM_NAMES.items():
            if name.endswith(legacy):
                name = name.removesuffix(legacy) + current
        renamed[name] = tensor
    return renamed


def params_to_hf(params: Params, config: ModelConfig) -> dict[str, np.ndarray]:
    """The HF ``BertForMaskedLM`` state dict (as ``save_pretrained`` writes it: no tied
    copies) of our masked LM, without the vocabulary rows padded for sharding."""
    params = vocab.with_rows(params, config.vocab_size)
    return hf.export_tensors(params, [Part("", RULES, range(config.num_layers))])


def task_rules(kind: str) -> tuple[Rule, ...]:
    """The tensors of the HF task class of ``kind``: the encoder under ``bert.``, the head."""
    return (*hf.encoder_task_rules("bert.", xlmr.ENCODER_RULES), *TASK_HEAD_RULES[kind])


def task_params_to_hf(params: Params, config: ModelConfig, kind: str) -> dict[str, np.ndarray]:
    """The HF state dict of a task module's params (``backbone/``, ``head/``)."""
    params = vocab.with_rows(params, config.vocab_size)
    return hf.export_tensors(params, [Part("", task_rules(kind), range(config.num_layers))])


def task_params_from_hf(
    tensors: Mapping[str, np.ndarray], config: ModelConfig, kind: str, labels: int
) -> Params:
    """A task module's float32 params from the HF task class's state dict."""
    return hf.import_tensors(
        _current_names(tensors),
        task_rules(kind),
        config,
        model=f"an HF {TASK_ARCHITECTURES[kind]}",
        ignored=IGNORED,
        abstract=hf.abstract_task_params(config, kind, BERT.task_head, labels),
    )


# --- folders --------------------------------------------------------------------------------


def read_hf(path: str | os.PathLike, *, allow_missing_head: bool = False) -> Pretrained:
    """Reads an HF ``BertForMaskedLM`` folder: config, weights, and its tokenizer (a
    ``tokenizer.json``, or the SentencePiece model of an xlpretrain export), if it has one.
    ``allow_missing_head`` (every converter's option, XLM-R's alone uses it) changes nothing:
    a ``BertModel`` folder is refused."""
    return hf.read_masked_lm(path, config_from_hf, params_from_hf, READ_ARCHITECTURES, "BERT")


def write_hf(model: Pretrained, path: str | os.PathLike) -> None:
    """Writes an HF ``BertForMaskedLM`` folder, or for an XLM-E discriminator (no MLM head) a
    ``BertModel`` one with a fresh pooler (``hf.fresh_pooler``); ``path`` must not exist yet."""
    model = unpadded(model)
    config = model.config
    special = hf.export_ids(config, model.tokenizer)
    if model.kind == DISCRIMINATOR:
        hf_config = config_to_hf(config, ENCODER_ARCHITECTURE, special)
        encoder = Part("", xlmr.ENCODER_RULES, range(config.num_layers))
        tensors = {**hf.export_tensors(model.params, [encoder]), **hf.fresh_pooler(config)}
    else:
        hf_config = config_to_hf(config, special=special)
        tensors = params_to_hf(model.params, config)
    files = hf.tokenizer_files(model.tokenizer)  # before writing: a failure leaves no folder
    hf.write_folder(path, hf_config, tensors, model.tokenizer, files)


def write_hf_task(
    model: Pretrained, head: Params, kind: str, labels: list[str], path: str | os.PathLike
) -> None:
    """Writes a fine-tuned model (its encoder in ``model``, its ``head``) as the HF task class
    of ``kind`` with ``labels`` (a classifier's); ``path`` must not exist yet."""
    hf.write_task(
        model, head, kind, labels, path, config_to_hf=config_to_hf,
        architectures=TASK_ARCHITECTURES, params_to_hf=task_params_to_hf, tokenizer_json=True,
    )  # fmt: skip


def read_hf_task(path: str | os.PathLike) -> hf.TaskModel:
    """Reads an HF ``BertFor{Sequence,Token}Classification`` or ``…ForQuestionAnswering``."""
    return hf.read_task(path, config_from_hf, TASK_ARCHITECTURES, task_params_from_hf)
