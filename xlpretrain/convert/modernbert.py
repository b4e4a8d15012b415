"""Hugging Face ``ModernBertForMaskedLM`` folders ⇄ xlpretrain ModernBERT / mmBERT models.

Our ModernBERT layers (``xlpretrain.model.modern``) hold HF's weights one for one, so this is
the converters' machinery (``hf.py``: rules, layouts, names checked both ways, folders) with
ModernBERT's names, and three differences:

- HF stores query, key and value as one ``attn.Wqkv`` and GeGLU's input and gate as one
  ``mlp.Wi``, stacked on the output axis. Such a tensor is split into named parts
  (``attn.Wqkv.weight#query``) before the one-to-one rules run, and joined after an export.
- HF's first layer has no attention norm (it reads the embeddings' norm). Ours exists, stacked
  with the others, and layer 0 ignores it: it imports as ones and exports as nothing.
- Nothing has a bias but the decoder, and ``config.json`` states the local/global pattern and
  the rotary bases in its own terms: ``layer_types`` and ``rope_parameters`` (transformers 5),
  or ``global_attn_every_n_layers`` and ``{global,local}_rope_theta`` (transformers 4), which
  exports write too so that either reads them.

Token ids are not converted: the embedding rows stay in the HF vocabulary's order. The config
keeps xlpretrain's pad id, which numbers the batch's positions (``rotary.rotary_positions``).
A ModernBERT folder's tokenizer is its ``tokenizer.json`` (``data.tokenizer.HFTokenizer``, its
special tokens found by role), read on import and written on export with the special ids it
gives; a model without a tokenizer exports the SentencePiece layout's ids, as XLM-R exports do.
A SentencePiece model (what a run trains when given no tokenizer) is exported as XLM-R's is,
``sentencepiece.bpe.model``, and also as the ``tokenizer.json`` and ``tokenizer_config.json``
that transformers' ``XLMRobertaTokenizerFast`` converts it to (the same ids): transformers reads
a ModernBERT folder's tokenizer from a ``tokenizer.json`` only (``hf.tokenizer_files``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from xlpretrain.convert import hf
from xlpretrain.convert.converter import Converter
from xlpretrain.convert.hf import (
    COPY,
    HEADS_IN,
    HEADS_OUT,
    LINEAR,
    QUESTION_ANSWERING,
    SEQUENCE_CLASSIFICATION,
    TOKEN_CLASSIFICATION,
    Rule,
)
from xlpretrain.data.tokenizer import SpecialIds
from xlpretrain.families import MODERNBERT
from xlpretrain.model.config import ModelConfig

MASKED_LM_ARCHITECTURE = "ModernBertForMaskedLM"
ENCODER_ARCHITECTURE = "ModernBertModel"

# ModelConfig field -> HF config.json key. HF places dropout differently (``mlp_dropout`` before
# ``mlp.Wo``, ``attention_dropout`` on the attention output too); it acts in training only.
CONFIG_KEYS = {
    **hf.SHAPE_KEYS,
    "layer_norm_eps": "norm_eps",
    "local_window": "local_attention",
    "dropout_rate": "embedding_dropout",
    "attention_dropout_rate": "attention_dropout",
    "initializer_range": "initializer_range",
}
# HF settings that xlpretrain's ModernBERT implements one way only (each HF's default).
FIXED_HF_SETTINGS = {
    "hidden_activation": "gelu",
    "classifier_activation": "gelu",
    "attention_bias": False,
    "mlp_bias": False,
    "norm_bias": False,
    "classifier_bias": False,
    "decoder_bias": True,
    "tie_word_embeddings": True,
}
FULL, SLIDING = "full_attention", "sliding_attention"  # HF's layer types
# Where config.json leaves them out: transformers' defaults, and its version 4 names.
DEFAULT_GLOBAL_EVERY = 3
DEFAULT_THETA = {FULL: 160_000.0, SLIDING: 10_000.0}
LEGACY_THETA = {FULL: "global_rope_theta", SLIDING: "local_rope_theta"}
# ModelConfig fields an export states, besides CONFIG_KEYS; the relative-position ones mean
# nothing without relative positions, which a ModernBERT config cannot have.
EXPRESSED = (
    *CONFIG_KEYS, "architecture", "absolute_positions", "global_every", "rope_theta",
    "local_rope_theta", "pad_token_id", "num_buckets", "max_distance", "share_relative_table",
)  # fmt: skip
REASONS = {
    **hf.COMMON_REASONS,
    "cross_attention": "VECO's plug-in cross-attention has no ModernBERT counterpart",
}

# HF tensors holding several of our parameters, stacked on the output (first) axis in order.
FUSED = {"attn.Wqkv.weight": ("query", "key", "value"), "mlp.Wi.weight": ("input", "gate")}
PREFIX = "model."  # the encoder's, in the masked LM and the task classes
_LAYER = "layers.{i}."
_STACK = "encoder/layers/"
_LAYER_RULES: tuple[Rule, ...] = (
    ("attn_norm.weight", "attention_norm/scale", COPY),
    *(
        (f"attn.Wqkv.weight#{name}", f"attention/{name}/kernel", HEADS_IN)
        for name in ("query", "key", "value")
    ),
    ("attn.Wo.weight", "attention/out/kernel", HEADS_OUT),
    ("mlp_norm.weight", "mlp_norm/scale", COPY),
    ("mlp.Wi.weight#input", "mlp/wi_0/kernel", LINEAR),
    ("mlp.Wi.weight#gate", "mlp/wi_1/kernel", LINEAR),
    ("mlp.Wo.weight", "mlp/wo/kernel", LINEAR),
)
# ENCODER_RULES name ``ModernBertModel``'s tensors, RULES ``ModernBertForMaskedLM``'s (the
# encoder under ``model.``, then the head); "{i}" as in ``xlmr.RULES``.
ENCODER_RULES: tuple[Rule, ...] = (
    ("embeddings.tok_embeddings.weight", "embeddings/word_embeddings/embedding", COPY),
    ("embeddings.norm.weight", "embeddings/layer_norm/scale", COPY),
    *hf.prefixed(_LAYER_RULES, _LAYER, _STACK),
    ("final_norm.weight", "encoder/final_norm/scale", COPY),
)
RULES: tuple[Rule, ...] = (
    *hf.prefixed(ENCODER_RULES, PREFIX),
    ("head.dense.weight", "lm_head/dense/kernel", LINEAR),
    ("head.norm.weight", "lm_head/layer_norm/scale", COPY),
    ("decoder.bias", "lm_head/bias", COPY),
)
TIED = {"decoder.weight": "model.embeddings.tok_embeddings.weight"}
# The HF class of each fine-tuning task kind, and its head's tensors: the
# prediction head (`ModernBertPredictionHead`), then the linear layer, for every kind.
TASK_ARCHITECTURES = {
    SEQUENCE_CLASSIFICATION: "ModernBertForSequenceClassification",
    TOKEN_CLASSIFICATION: "ModernBertForTokenClassification",
    QUESTION_ANSWERING: "ModernBertForQuestionAnswering",
}
_TASK_HEAD: tuple[Rule, ...] = (
    ("head.dense.weight", "head/dense/kernel", LINEAR),
    ("head.norm.weight", "head/layer_norm/scale", COPY),
    *hf.linear_head_rules("classifier"),
)
TASK_HEAD_RULES = dict.fromkeys(TASK_ARCHITECTURES, _TASK_HEAD)
FIRST_NORM = "layers.0.attn_norm.weight"  # the one rule name HF lacks (an nn.Identity there)


# --- configs --------------------------------------------------------------------------------


def config_from_hf(hf_config: Mapping, source: str | os.PathLike = "config.json") -> ModelConfig:
    """The ``ModelConfig`` of an HF ModernBERT config; settings xlpretrain does not implement
    are errors that name them."""
    if hf_config.get("model_type") != MODERNBERT.hf_model_type:
        raise ValueError(
            f"{source}: model_type={hf_config.get('model_type')!r} is not "
            f"{MODERNBERT.hf_model_type!r}"
        )
    hf.check_hf_settings(hf_config, source, FIXED_HF_SETTINGS, CONFIG_KEYS.values(), "ModernBERT")
    dropout = hf_config["embedding_dropout"]
    if hf_config.get("mlp_dropout", dropout) != dropout:
        raise ValueError(
            f"{source}: mlp_dropout={hf_config['mlp_dropout']!r} differs from "
            f"embedding_dropout={dropout!r}; xlpretrain's ModernBERT has one rate for both"
        )
    head_dim = hf_config["hidden_size"] // hf_config["num_attention_heads"]
    if hf_config.get("head_dim", head_dim) != head_dim:
        raise ValueError(
            f"{source}: head_dim={hf_config['head_dim']!r} is not supported; xlpretrain's "
            "heads are hidden_size / num_attention_heads wide"
        )
    rope_theta, local_rope_theta = _rope_thetas(hf_config, source)
    return MODERNBERT.config(
        absolute_positions=False,
        **{ours: hf_config[key] for ours, key in CONFIG_KEYS.items()},
        global_every=_global_every(hf_config, source),
        rope_theta=rope_theta,
        local_rope_theta=local_rope_theta,
    )


def layer_types(num_layers: int, global_every: int) -> list[str]:
    """HF's ``layer_types``: global attention in every ``global_every``-th layer from the
    first, local in the others (``modern.layer_schedule``)."""
    return [SLIDING if i % global_every else FULL for i in range(num_layers)]


def _global_every(hf_config: Mapping, source: str | os.PathLike) -> int:
    """ModelConfig's ``global_every`` for HF's ``layer_types`` (else for transformers 4's
    ``global_attn_every_n_layers``), which must follow our one pattern."""
    every = hf_config.get("global_attn_every_n_layers", DEFAULT_GLOBAL_EVERY)
    if not isinstance(every, int) or every < 1:
        raise ValueError(f"{source}: global_attn_every_n_layers={every!r} is not a positive int")
    kinds = hf_config.get("layer_types")
    if kinds is None:
        return every
    num_layers = hf_config["num_hidden_layers"]
    full = [i for i, kind in enumerate(kinds) if kind == FULL]
    # The second global layer gives the period; with only the first, any period past the end.
    every = full[1] if len(full) > 1 else max(every, num_layers)
    if list(kinds) != layer_types(num_layers, every):
        raise ValueError(
            f"{source}: layer_types={kinds!r} is not supported; xlpretrain's ModernBERT has "
            f"{num_layers} layers, {FULL!r} every n-th from the first and {SLIDING!r} between"
        )
    return every


def _rope_thetas(hf_config: Mapping, source: str | os.PathLike) -> tuple[float, float]:
    """(global, local) rotary bases, resolved as transformers resolves them: ``rope_scaling``
    over ``rope_parameters[type]`` over the version 4 keys over the defaults."""
    rope = hf_config.get("rope_parameters") or {}
    scaling = hf_config.get("rope_scaling") or {}
    unknown = sorted(set(rope) - {FULL, SLIDING})
    if unknown:
        raise ValueError(
            f"{source}: rope_parameters has {unknown}; xlpretrain reads one entry per layer "
            f"type ({FULL!r}, {SLIDING!r})"
        )
    thetas = {}
    for kind in (FULL, SLIDING):
        params = {**(rope.get(kind) or {}), **scaling}
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type != "default":
            where = f"rope_parameters[{kind!r}]"
            if "rope_type" in scaling or "type" in scaling:
                where = "rope_scaling"
            raise ValueError(
                f"{source}: {where} has rope_type={rope_type!r}, which is not supported; "
                "xlpretrain's rotary embedding is the default (unscaled) RoPE"
            )
        default = hf_config.get(LEGACY_THETA[kind], DEFAULT_THETA[kind])
        thetas[kind] = float(params.get("rope_theta", default))
    return thetas[FULL], thetas[SLIDING]


def config_to_hf(
    config: ModelConfig,
    architecture: str = MASKED_LM_ARCHITECTURE,
    special: SpecialIds | None = None,
) -> dict:
    """``config.json`` of the HF ModernBERT ``architecture`` equivalent to ``config``, with
    the ids of the model's tokenizer (``special``, ``hf.export_ids``). ModernBERT numbers
    positions without the pad id, so its ``pad_token_id`` is the tokenizer's."""
    check_exportable(config, architecture)
    special = special or hf.export_ids(config, None)
    return {
        **hf.exported_config(config, architecture, MODERNBERT.hf_model_type, CONFIG_KEYS),
        "mlp_dropout": config.dropout_rate,
        **FIXED_HF_SETTINGS,
        "layer_types": layer_types(config.num_layers, config.global_every),
        "rope_parameters": {
            FULL: {"rope_type": "default", "rope_theta": config.rope_theta},
            SLIDING: {"rope_type": "default", "rope_theta": config.local_rope_theta},
        },
        "global_attn_every_n_layers": config.global_every,
        LEGACY_THETA[FULL]: config.rope_theta,
        LEGACY_THETA[SLIDING]: config.local_rope_theta,
        "pad_token_id": special.pad,
        "bos_token_id": special.bos,
        "cls_token_id": special.bos,
        "eos_token_id": special.eos,
        "sep_token_id": special.eos,
    }


def check_exportable(config: ModelConfig, architecture: str = MASKED_LM_ARCHITECTURE) -> None:
    """Raises if ``config`` uses a model option HF ModernBERT has no place for."""
    hf.refuse_options(
        config,
        MODERNBERT.config(absolute_positions=False),
        EXPRESSED,
        architecture=architecture,
        reasons=REASONS,
        scope="only a plain ModernBERT encoder can be exported",
    )


# --- fused tensors --------------------------------------------------------------------------


def _parts(name: str) -> tuple[str, ...] | None:
    """The parts an HF tensor of this name stacks, or None if it is one parameter."""
    return next((parts for fused, parts in FUSED.items() if name.endswith("." + fused)), None)


def _split(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``tensors`` with each fused one replaced by its parts, ``name#part``: equal row blocks."""
    split = {}
    for name, tensor in tensors.items():
        parts = _parts(name)
        if parts is None:
            split[name] = tensor
            continue
        if tensor.ndim != 2 or tensor.shape[0] % len(parts):
            raise ValueError(
                f"tensor {name} has shape {tuple(tensor.shape)}, but it should stack "
                f"{', '.join(parts)} as equal blocks of rows"
            )
        blocks = np.split(np.asarray(tensor), len(parts))
        split.update({f"{name}#{part}": b for part, b in zip(parts, blocks, strict=True)})
    return split


def _fuse(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inverse of ``_split``: each ``name#part`` family stacked back into ``name``."""
    fused = {}
    for name, tensor in tensors.items():
        base, _, part = name.partition("#")
        if not part:
            fused[name] = tensor
        elif base not in fused:
            blocks = [tensors[f"{base}#{p}"] for p in _parts(base)]
            fused[base] = np.ascontiguousarray(np.concatenate(blocks))
    return fused


# --- converter ------------------------------------------------------------------------------


class ModernBertConverter(Converter):
    """ModernBERT's converter: its fused tensors split into the rules' parts and joined back,
    its first layer's missing attention norm added as ones and left out again."""

    def renamed(self, tensors: hf.Tensors, config: ModelConfig) -> dict[str, np.ndarray]:
        """``tensors`` split (``_split``), with the first layer's attention norm HF lacks, as
        ones (layer 0 ignores it)."""
        tensors = _split(tensors)
        first_norm = PREFIX + FIRST_NORM
        if first_norm in tensors:
            raise ValueError(
                f"unexpected tensor {first_norm}: ModernBERT's first layer has no attention norm"
            )
        tensors[first_norm] = np.ones(config.hidden_size, np.float32)
        return tensors

    def exported(self, tensors: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
        """``tensors`` without the first layer's attention norm, fused (``_fuse``)."""
        del tensors[prefix + FIRST_NORM]
        return _fuse(tensors)


CONVERTER = ModernBertConverter(
    family=MODERNBERT, title="ModernBERT", config_from_hf=config_from_hf,
    config_to_hf=config_to_hf, masked_lm=MASKED_LM_ARCHITECTURE, encoder=ENCODER_ARCHITECTURE,
    read_architectures=(MASKED_LM_ARCHITECTURE,), task_architectures=TASK_ARCHITECTURES,
    prefix=PREFIX, encoder_rules=ENCODER_RULES, rules=RULES, tied=TIED,
    task_head_rules=TASK_HEAD_RULES, pooler=False,
)  # fmt: skip
