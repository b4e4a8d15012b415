"""Hugging Face ``XLMRobertaForMaskedLM`` folders ⇄ xlpretrain XLM-R / RoBERTa models.

XLM-R's names for ``hf.py``'s machinery: the rules of ``XLMRobertaForMaskedLM`` (the encoder
under ``roberta.``, then the head), its config keys and the settings it fixes, and the folders
both ways. Exports also write bare encoders (``XLMRobertaModel``: an XLM-E discriminator) and,
through ``seq2seq.py``, VECO's ``EncoderDecoderModel``, from the same rules; BERT's converter
(``bert.py``) reads the same encoder under ``bert.``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from xlpretrain.convert.folder import DISCRIMINATOR, Params, Pretrained, unpadded
from xlpretrain.convert.hf import (
    COMMON_REASONS,
    COPY,
    HEADS_BIAS,
    HEADS_IN,
    HEADS_OUT,
    LINEAR,
    Part,
    Rule,
    TaskModel,
    abstract_task_params,
    check_hf_settings,
    encoder_task_rules,
    export_ids,
    export_tensors,
    fresh_head,
    fresh_pooler,
    import_tensors,
    linear_head_rules,
    pair_head_rules,
    prefixed,
    read_config,
    read_task,
    read_tensors,
    read_tokenizer,
    refuse_options,
    untie,
    write_folder,
    write_task,
)
from xlpretrain.data.tokenizer import SpecialIds, Tokenizer
from xlpretrain.families import XLMR
from xlpretrain.model import vocab
from xlpretrain.model.config import ModelConfig
from xlpretrain.model.task_heads import (
    QUESTION_ANSWERING,
    SEQUENCE_CLASSIFICATION,
    TOKEN_CLASSIFICATION,
)

log = logging.getLogger(__name__)

BARE_ENCODERS = ("XLMRobertaModel", "RobertaModel")

# ModelConfig field -> HF config.json key.
CONFIG_KEYS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "mlp_dim": "intermediate_size",
    "max_positions": "max_position_embeddings",
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
    *prefixed(ENCODER_RULES, "roberta."),
    ("lm_head.dense.weight", "lm_head/dense/kernel", LINEAR),
    ("lm_head.dense.bias", "lm_head/dense/bias", COPY),
    ("lm_head.layer_norm.weight", "lm_head/layer_norm/scale", COPY),
    ("lm_head.layer_norm.bias", "lm_head/layer_norm/bias", COPY),
    ("lm_head.bias", "lm_head/bias", COPY),
)
# VECO's plug-in as a decoder layer's HF cross-attention (``XLMRobertaForCausalLM`` names).
CROSS_ATTENTION_RULES = prefixed(
    _attention_rules("crossattention", "cross_attention", "cross_attention_norm"),
    "roberta." + _LAYER,
    _STACK,
)
# Tied copies some checkpoints also store (pytorch_model.bin does): they must equal the original.
TIED = {
    "lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
    "lm_head.decoder.bias": "lm_head.bias",
}
# Tensors that are not part of the masked LM: a buffer, and the bare encoder's pooler.
IGNORED = ("roberta.embeddings.position_ids", "roberta.pooler.")
# The HF class of each fine-tuning task kind (`model.task_heads`), and its head's tensors.
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
        "architectures": [architecture],
        "model_type": XLMR.hf_model_type,
        **{key: getattr(config, ours) for ours, key in CONFIG_KEYS.items()},
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


# --- parameters -----------------------------------------------------------------------------


def params_from_hf(
    tensors: Mapping[str, np.ndarray], config: ModelConfig, *, allow_missing_head: bool = False
) -> Params:
    """Our float32 params (layers stacked) from an HF ``XLMRobertaForMaskedLM`` state dict.

    With ``allow_missing_head`` a state dict without any ``lm_head.*`` tensor (a bare
    ``XLMRobertaModel``) gets a freshly initialised head, as ``init_params`` would make it.
    """
    tensors = untie(_with_prefix(tensors), TIED)
    headless = allow_missing_head and not any(n.startswith("lm_head.") for n in tensors)
    rules = [r for r in RULES if not (headless and r[0].startswith("lm_head."))]
    params = import_tensors(tensors, rules, config, model="an XLM-R masked LM", ignored=IGNORED)
    if headless:
        log.warning("no lm_head.* tensors: the MLM head is freshly initialised")
        params["lm_head"] = fresh_head(config, params)
    return params


def params_to_hf(params: Params, config: ModelConfig) -> dict[str, np.ndarray]:
    """The HF state dict (as ``save_pretrained`` writes it: no tied copies) of our masked LM,
    without the vocabulary rows padded for sharding."""
    params = vocab.with_rows(params, config.vocab_size)
    return export_tensors(params, [Part("", RULES, range(config.num_layers))])


def _with_prefix(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A bare encoder's names lack the ``roberta.`` prefix the masked LM's have."""
    if any(name.startswith("roberta.") for name in tensors):
        return dict(tensors)
    return {(n if n.startswith("lm_head.") else "roberta." + n): t for n, t in tensors.items()}


def task_rules(kind: str) -> tuple[Rule, ...]:
    """The tensors of the HF task class of ``kind``: the encoder under ``roberta.``, the head."""
    return (*encoder_task_rules("roberta.", ENCODER_RULES), *TASK_HEAD_RULES[kind])


def task_params_to_hf(params: Params, config: ModelConfig, kind: str) -> dict[str, np.ndarray]:
    """The HF state dict of a task module's params (``backbone/``, ``head/``)."""
    params = vocab.with_rows(params, config.vocab_size)
    return export_tensors(params, [Part("", task_rules(kind), range(config.num_layers))])


def task_params_from_hf(
    tensors: Mapping[str, np.ndarray], config: ModelConfig, kind: str, labels: int
) -> Params:
    """A task module's float32 params from the HF task class's state dict."""
    return import_tensors(
        tensors,
        task_rules(kind),
        config,
        model=f"an HF {TASK_ARCHITECTURES[kind]}",
        ignored=IGNORED,
        abstract=abstract_task_params(config, kind, XLMR.task_head, labels),
    )


# --- folders --------------------------------------------------------------------------------


def read_hf(path: str | os.PathLike, *, allow_missing_head: bool = False) -> Pretrained:
    """Reads an HF ``XLMRobertaForMaskedLM`` folder (config, weights, SentencePiece model)."""
    path, hf_config = read_config(path)
    config_file = path / "config.json"
    config = config_from_hf(hf_config, config_file)
    _check_architectures(hf_config.get("architectures") or [], config_file, allow_missing_head)
    params = params_from_hf(read_tensors(path), config, allow_missing_head=allow_missing_head)
    return Pretrained(config, params, read_tokenizer(path, config))


def _check_architectures(architectures: list[str], source: Path, allow_missing_head: bool) -> None:
    if not architectures or any(a.endswith("ForMaskedLM") for a in architectures):
        return
    if allow_missing_head and all(a in BARE_ENCODERS for a in architectures):
        return
    raise ValueError(
        f"{source}: unsupported architecture {architectures}: from-hf converts masked LMs "
        "(XLMRobertaForMaskedLM); a bare encoder (XLMRobertaModel) needs --allow-missing-head"
    )


def write_hf(model: Pretrained, path: str | os.PathLike) -> None:
    """Writes an HF ``XLMRobertaForMaskedLM`` folder, or for an XLM-E discriminator (no MLM
    head) an ``XLMRobertaModel`` one; ``path`` must not exist yet."""
    model = unpadded(model)
    config = model.config
    check_xlmr_tokenizer(config, model.tokenizer)
    special = export_ids(config, model.tokenizer)
    if model.kind == DISCRIMINATOR:
        hf_config = config_to_hf(config, ENCODER_ARCHITECTURE, special=special)
        encoder = Part("", ENCODER_RULES, range(config.num_layers))
        tensors = {**export_tensors(model.params, [encoder]), **fresh_pooler(config)}
    else:
        hf_config = config_to_hf(config, special=special)
        tensors = params_to_hf(model.params, config)
    write_folder(path, hf_config, tensors, model.tokenizer)


def write_hf_task(
    model: Pretrained, head: Params, kind: str, labels: list[str], path: str | os.PathLike
) -> None:
    """Writes a fine-tuned model (its encoder in ``model``, its ``head``) as the HF task class
    of ``kind`` with ``labels`` (a classifier's); ``path`` must not exist yet."""
    check_xlmr_tokenizer(model.config, model.tokenizer)
    write_task(
        model, head, kind, labels, path, config_to_hf=config_to_hf,
        architectures=TASK_ARCHITECTURES, params_to_hf=task_params_to_hf, tokenizer_json=False,
    )  # fmt: skip


def read_hf_task(path: str | os.PathLike) -> TaskModel:
    """Reads an HF ``XLMRobertaFor{Sequence,Token}Classification`` or ``…ForQuestionAnswering``."""
    return read_task(path, config_from_hf, TASK_ARCHITECTURES, task_params_from_hf)
