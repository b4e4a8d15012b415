"""Hugging Face ``XLMRobertaForMaskedLM`` folders ⇄ xlpretrain models: names, layouts, configs.

The encoder was built to match HF XLM-R one tensor to one parameter (see
``xlpretrain.model.encoder``), so conversion is a table of renames plus a few layout changes:
``torch.nn.Linear`` stores ``[out, in]`` where Flax stores ``[in, out]``, and the attention
projections keep heads as their own axis. Every name is checked both ways: a tensor the table
does not know, or a parameter it does not fill, is an error rather than a silent drop.

Exports also write bare encoders (``XLMRobertaModel``: an XLM-E discriminator) and, through
``seq2seq.py``, VECO's ``EncoderDecoderModel``, from the same rules. ``modernbert.py`` converts
ModernBERT models with this module's machinery (``xlpretrain.convert`` picks the converter).

Reading needs only ``safetensors`` (+ NumPy) for ``model.safetensors``; ``torch`` is imported
only for ``pytorch_model.bin``. Writing needs only ``safetensors``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import flax.linen as nn
import jax
import numpy as np
from flax import traverse_util

from xlpretrain.convert.folder import (
    DISCRIMINATOR,
    RUNTIME_FIELDS,
    Params,
    Pretrained,
    abstract_params,
    new_folder,
    unpadded,
)
from xlpretrain.core.errors import require
from xlpretrain.data.tokenizer import HFTokenizer, SentencePieceTokenizer, SpecialIds, Tokenizer
from xlpretrain.model import vocab
from xlpretrain.model.config import ModelConfig
from xlpretrain.model.heads import LMHead

log = logging.getLogger(__name__)

HF_TOKENIZER_FILE = "sentencepiece.bpe.model"  # the name of a SentencePiece model in an HF folder
MODEL_TYPES = ("xlm-roberta", "roberta")
# The model's layers (`model.config.LAYER_FEATURES`): post-LN, one token type, positions after
# the padding row (`ModelConfig`'s defaults).
FEATURES = {"layer_type": "post_ln", "token_type_rows": 1, "positions_from": 2}
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
    "type_vocab_size": 1,
    "is_decoder": False,
    "add_cross_attention": False,
}
# Why an export refuses a model option; the error names both.
OPTION_REASONS = {
    "num_languages": "num_languages > 0 means XLM-style language embeddings",
    "cross_attention": "VECO's plug-in cross-attention: export it with to-hf-seq2seq",
    "relative_position": "HF XLM-R has no relative position bias",
    "absolute_positions": "HF XLM-R always adds absolute position embeddings",
    "architecture": "another family exports as its own HF masked LM, with to-hf",
}
MASKED_LM_ARCHITECTURE = "XLMRobertaForMaskedLM"
ENCODER_ARCHITECTURE = "XLMRobertaModel"


@dataclasses.dataclass(frozen=True)
class Layout:
    """How one HF tensor becomes one parameter (``to_ours(w, our_shape)``) and back."""

    to_ours: Callable[[np.ndarray, tuple[int, ...]], np.ndarray]
    to_hf: Callable[[np.ndarray], np.ndarray]


COPY = Layout(lambda w, shape: w, lambda p: p)
LINEAR = Layout(lambda w, shape: w.T, lambda p: p.T)  # [out, in] ⇄ [in, out]
HEADS_IN = Layout(  # q/k/v: [heads·kv, H] ⇄ [H, heads, kv]
    lambda w, shape: w.T.reshape(shape), lambda p: p.reshape(p.shape[0], -1).T
)
HEADS_BIAS = Layout(lambda w, shape: w.reshape(shape), lambda p: p.reshape(-1))  # [heads, kv]
HEADS_OUT = Layout(  # attention output: [H, heads·kv] ⇄ [heads, kv, H]
    lambda w, shape: w.T.reshape(shape), lambda p: p.reshape(-1, p.shape[-1]).T
)

Rule = tuple[str, str, Layout]  # (HF name, our parameter path, layout)

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
    *((_LAYER + hf, _STACK + ours, layout) for hf, ours, layout in _layer_rules()),
)
RULES: tuple[Rule, ...] = (
    *(("roberta." + hf, ours, layout) for hf, ours, layout in ENCODER_RULES),
    ("lm_head.dense.weight", "lm_head/dense/kernel", LINEAR),
    ("lm_head.dense.bias", "lm_head/dense/bias", COPY),
    ("lm_head.layer_norm.weight", "lm_head/layer_norm/scale", COPY),
    ("lm_head.layer_norm.bias", "lm_head/layer_norm/bias", COPY),
    ("lm_head.bias", "lm_head/bias", COPY),
)
# VECO's plug-in as a decoder layer's HF cross-attention (``XLMRobertaForCausalLM`` names).
CROSS_ATTENTION_RULES: tuple[Rule, ...] = tuple(
    ("roberta." + _LAYER + hf, _STACK + ours, layout)
    for hf, ours, layout in _attention_rules(
        "crossattention", "cross_attention", "cross_attention_norm"
    )
)
# Tied copies some checkpoints also store (pytorch_model.bin does): they must equal the original.
TIED = {
    "lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
    "lm_head.decoder.bias": "lm_head.bias",
}
# Tensors that are not part of the masked LM: a buffer, and the bare encoder's pooler.
IGNORED = ("roberta.embeddings.position_ids", "roberta.pooler.")


# --- configs --------------------------------------------------------------------------------


def config_from_hf(hf_config: Mapping, source: str | os.PathLike = "config.json") -> ModelConfig:
    """The ``ModelConfig`` of an HF XLM-R / RoBERTa config; unsupported settings are errors."""
    model_type = hf_config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"{source}: unsupported architecture: model_type={model_type!r}; from-hf converts "
            f"XLM-R / RoBERTa masked LMs (model_type one of {MODEL_TYPES})"
        )
    check_hf_settings(hf_config, source, FIXED_HF_SETTINGS, CONFIG_KEYS.values(), "encoder")
    return ModelConfig(**{ours: hf_config[key] for ours, key in CONFIG_KEYS.items()})


def check_hf_settings(
    hf_config: Mapping, source: str | os.PathLike, fixed: Mapping, read: Iterable[str], model: str
) -> None:
    """Refuses an HF config that sets one of the `fixed` settings (ours) otherwise, naming it,
    or lacks a key the conversion `read`s; `model` names ours in the message."""
    for key, value in fixed.items():
        if key in hf_config and hf_config[key] != value:
            raise ValueError(
                f"{source}: {key}={hf_config[key]!r} is not supported; xlpretrain's {model} "
                f"has {key}={value!r}"
            )
    missing = [key for key in read if key not in hf_config]
    if missing:
        raise ValueError(f"{source}: missing key(s) {', '.join(missing)}")


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
        "model_type": "xlm-roberta",
        **{key: getattr(config, ours) for ours, key in CONFIG_KEYS.items()},
        **FIXED_HF_SETTINGS,
        "bos_token_id": special.bos,
        "eos_token_id": special.eos,
        "tie_word_embeddings": True,
    }


def export_ids(config: ModelConfig, tokenizer: Tokenizer | None) -> SpecialIds:
    """The special ids an export's ``config.json`` states: its tokenizer's; a model without one
    states the SentencePiece layout's (XLM-R's), as it always has."""
    return tokenizer.special if tokenizer else SentencePieceTokenizer.layout(config.vocab_size)


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
        ModelConfig(),
        (*CONFIG_KEYS, *expressible),
        architecture=architecture,
        reasons=OPTION_REASONS,
        scope="only a plain XLM-R encoder can be exported",
    )


def refuse_options(
    config: ModelConfig,
    default: ModelConfig,
    mapped: Iterable[str],
    *,
    architecture: str,
    reasons: Mapping[str, str],
    scope: str,
) -> None:
    """Raises if ``config`` sets a model option away from ``default`` that HF ``architecture``
    has no place for: any field not ``mapped`` to its config and not in ``RUNTIME_FIELDS``
    (they never block an export).
    The error names each option, its ``reasons`` entry if any, and the ``scope`` of exports."""
    blocking = [
        field.name
        for field in dataclasses.fields(config)
        if field.name not in (*mapped, *RUNTIME_FIELDS)
        and getattr(config, field.name) != getattr(default, field.name)
    ]
    if blocking:
        options = ", ".join(f"{name}={getattr(config, name)!r}" for name in blocking)
        why = "; ".join(reasons[name] for name in blocking if name in reasons)
        raise ValueError(
            f"Hugging Face {architecture} cannot express the model option(s) {options}"
            f"{f' ({why})' if why else ''}; {scope}"
        )


# --- parameters -----------------------------------------------------------------------------


def hf_shape(layout: Layout, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The HF tensor shape that becomes a parameter of ``shape``."""
    return jax.eval_shape(layout.to_hf, jax.ShapeDtypeStruct(shape, np.float32)).shape


def params_from_hf(
    tensors: Mapping[str, np.ndarray], config: ModelConfig, *, allow_missing_head: bool = False
) -> Params:
    """Our float32 params (layers stacked) from an HF ``XLMRobertaForMaskedLM`` state dict.

    With ``allow_missing_head`` a state dict without any ``lm_head.*`` tensor (a bare
    ``XLMRobertaModel``) gets a freshly initialised head, as ``init_params`` would make it.
    """
    tensors = untie(_with_prefix(tensors), TIED)
    fresh_head = allow_missing_head and not any(n.startswith("lm_head.") for n in tensors)
    rules = [r for r in RULES if not (fresh_head and r[0].startswith("lm_head."))]
    params = import_tensors(tensors, rules, config, model="an XLM-R masked LM", ignored=IGNORED)
    if fresh_head:
        log.warning("no lm_head.* tensors: the MLM head is freshly initialised")
        params["lm_head"] = _fresh_head(config, params)
    return params


def import_tensors(
    tensors: Mapping[str, np.ndarray],
    rules: Sequence[Rule],
    config: ModelConfig,
    *,
    model: str,
    ignored: tuple[str, ...] = (),
) -> Params:
    """Our float32 params (layers stacked) from HF ``tensors`` by ``rules``, which must name
    every tensor but those starting with an ``ignored`` prefix (``model`` says, in errors,
    what the tensors should have been), and every parameter they fill."""
    _check_names(tensors, _expand(rules, config.num_layers), model, ignored)
    abstract = traverse_util.flatten_dict(abstract_params(config), sep="/")
    flat = {}
    for hf_name, ours, layout in rules:
        shape = abstract[ours].shape
        if "{i}" in hf_name:
            flat[ours] = np.stack(
                [
                    _to_ours(tensors, hf_name.format(i=i), layout, shape[1:])
                    for i in range(config.num_layers)
                ]
            )
        else:
            flat[ours] = _to_ours(tensors, hf_name, layout, shape)
    return traverse_util.unflatten_dict(flat, sep="/")


class Part(NamedTuple):
    """One model of an export: ``rules``' HF names under ``prefix``, HF layer ``j`` taken from
    our layer ``layers[j]``."""

    prefix: str
    rules: Sequence[Rule]
    layers: Sequence[int]


def params_to_hf(params: Params, config: ModelConfig) -> dict[str, np.ndarray]:
    """The HF state dict (as ``save_pretrained`` writes it: no tied copies) of our masked LM,
    without the vocabulary rows padded for sharding."""
    params = vocab.with_rows(params, config.vocab_size)
    return export_tensors(params, [Part("", RULES, range(config.num_layers))])


def export_tensors(params: Params, parts: Sequence[Part]) -> dict[str, np.ndarray]:
    """HF tensors of ``params`` for ``parts``; every parameter must be used by one of them."""
    flat = traverse_util.flatten_dict(params, sep="/")
    unmapped = sorted(set(flat) - {ours for part in parts for _, ours, _ in part.rules})
    if unmapped:
        raise ValueError(f"parameters with no Hugging Face equivalent: {_listing(unmapped)}")
    tensors = {}
    for prefix, rules, layers in parts:
        for hf_name, ours, layout in rules:
            value = np.asarray(flat[ours], np.float32)
            if "{i}" in hf_name:
                for j, i in enumerate(layers):
                    tensors[prefix + hf_name.format(i=j)] = np.ascontiguousarray(
                        layout.to_hf(value[i])
                    )
            else:
                tensors[prefix + hf_name] = np.ascontiguousarray(layout.to_hf(value))
    return tensors


def fresh_pooler(config: ModelConfig, prefix: str = "") -> dict[str, np.ndarray]:
    """``XLMRobertaModel``'s pooler (dense + tanh on ``<s>``), which XLM-R pre-training never
    trains and xlpretrain has no parameters for: initialised as HF initialises a missing one
    (normal(``initializer_range``), zero bias), with a fixed seed so exports repeat exactly."""
    log.info("%spooler.*: no xlpretrain counterpart, written freshly initialised", prefix)
    rng = np.random.default_rng(0)
    size = config.hidden_size
    return {
        f"{prefix}pooler.dense.weight": rng.normal(
            0.0, config.initializer_range, (size, size)
        ).astype(np.float32),
        f"{prefix}pooler.dense.bias": np.zeros(size, np.float32),
    }


def _with_prefix(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A bare encoder's names lack the ``roberta.`` prefix the masked LM's have."""
    if any(name.startswith("roberta.") for name in tensors):
        return dict(tensors)
    return {(n if n.startswith("lm_head.") else "roberta." + n): t for n, t in tensors.items()}


def untie(tensors: dict[str, np.ndarray], tied: Mapping[str, str]) -> dict[str, np.ndarray]:
    """Folds the ``tied`` copies (alias → original) into their originals, refusing checkpoints
    where they differ."""
    for alias, original in tied.items():
        if alias not in tensors:
            continue
        copy = tensors.pop(alias)
        if original not in tensors:
            tensors[original] = copy
        elif copy.shape != tensors[original].shape or not np.array_equal(copy, tensors[original]):
            raise ValueError(
                f"{alias} differs from {original}: the checkpoint unties them, but xlpretrain's "
                f"LM head always decodes with {original}"
            )
    return tensors


def _expand(rules: Iterable[Rule], num_layers: int) -> set[str]:
    names = set()
    for hf_name, _, _ in rules:
        if "{i}" in hf_name:
            names.update(hf_name.format(i=i) for i in range(num_layers))
        else:
            names.add(hf_name)
    return names


def _check_names(
    tensors: Mapping[str, np.ndarray], expected: set[str], model: str, ignored: tuple[str, ...]
) -> None:
    missing = sorted(expected - set(tensors))
    if missing:
        hint = ""
        if all(name.startswith("lm_head.") for name in missing):
            hint = " (a bare encoder: pass --allow-missing-head to start a fresh MLM head)"
        raise ValueError(f"missing tensor(s) {_listing(missing)}{hint}")
    dropped = sorted(n for n in tensors if n not in expected and n.startswith(ignored))
    unexpected = sorted(set(tensors) - expected - set(dropped))
    if unexpected:
        raise ValueError(
            f"unexpected tensor(s) {_listing(unexpected)}: not part of {model} "
            "that xlpretrain can express"
        )
    if dropped:
        log.info("dropping tensors outside the masked LM: %s", _listing(dropped))


def _to_ours(
    tensors: Mapping[str, np.ndarray], name: str, layout: Layout, shape: tuple[int, ...]
) -> np.ndarray:
    tensor = tensors[name]
    want = hf_shape(layout, shape)
    if tensor.shape != want:
        raise ValueError(
            f"tensor {name} has shape {tuple(tensor.shape)}, but config.json's sizes need {want}"
        )
    return np.asarray(layout.to_ours(np.asarray(tensor, np.float32), shape))


def _fresh_head(config: ModelConfig, params: Params) -> Params:
    word_embeddings = params["embeddings"]["word_embeddings"]["embedding"]
    head = LMHead(config).init(
        jax.random.key(0), np.zeros((1, config.hidden_size), np.float32), word_embeddings
    )
    return jax.tree.map(lambda x: np.asarray(x, np.float32), nn.unbox(head["params"]))


def _listing(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown}, … ({len(names) - limit} more)"


# --- folders --------------------------------------------------------------------------------


def read_tensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of an HF folder as NumPy: ``model.safetensors`` (or its sharded index),
    else ``pytorch_model.bin`` (or its index; needs torch)."""
    for single in ("model.safetensors", "pytorch_model.bin"):
        index = path / f"{single}.index.json"
        if (path / single).is_file():
            files = [path / single]
        elif index.is_file():
            weight_map = json.loads(index.read_text())["weight_map"]
            files = [path / name for name in sorted(set(weight_map.values()))]
        else:
            continue
        tensors: dict[str, np.ndarray] = {}
        for file in files:
            tensors.update(_read_file(file))
        return tensors
    raise FileNotFoundError(f"{path} has no model.safetensors or pytorch_model.bin")


def _read_file(file: Path) -> dict[str, np.ndarray]:
    if file.suffix == ".safetensors":
        safetensors = require("safetensors", f"reading {file.name}")
        # The 'flax' framework reads bfloat16 too (NumPy cannot); keep it off accelerators.
        with jax.default_device(jax.devices("cpu")[0]), safetensors.safe_open(file, "flax") as f:
            return {name: np.asarray(f.get_tensor(name)) for name in f.keys()}
    torch = require("torch", f"reading {file.name}")
    state = torch.load(file, map_location="cpu", weights_only=True)
    return {name: (t.float() if t.is_floating_point() else t).numpy() for name, t in state.items()}


def read_hf(path: str | os.PathLike, *, allow_missing_head: bool = False) -> Pretrained:
    """Reads an HF ``XLMRobertaForMaskedLM`` folder (config, weights, SentencePiece model)."""
    path, hf_config = read_config(path)
    config_file = path / "config.json"
    config = config_from_hf(hf_config, config_file)
    _check_architectures(hf_config.get("architectures") or [], config_file, allow_missing_head)
    params = params_from_hf(read_tensors(path), config, allow_missing_head=allow_missing_head)
    return Pretrained(config, params, read_tokenizer(path, config))


def read_config(path: str | os.PathLike) -> tuple[Path, dict]:
    """``path`` made absolute, and its ``config.json``; errors if it is no HF model folder."""
    path = Path(path).absolute()
    if not path.is_dir():
        raise FileNotFoundError(f"no such folder: {path}")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{path} has no config.json: not a Hugging Face model folder")
    return path, json.loads(config_file.read_text())


def read_tokenizer(path: Path, config: ModelConfig) -> Tokenizer | None:
    """The folder's tokenizer, if it has one: its SentencePiece model (``HF_TOKENIZER_FILE``,
    XLM-R's, whose folder has a ``tokenizer.json`` of the same ids too), else its
    ``tokenizer.json`` (ModernBERT's, mmBERT's)."""
    names = [name for name in (HF_TOKENIZER_FILE, HFTokenizer.FILE) if (path / name).is_file()]
    if not names:
        return None
    tokenizer = Tokenizer.load(path / names[0])
    if tokenizer.vocab_size != config.vocab_size:
        log.warning(
            "%s has %d ids but the model's vocab_size is %d",
            names[0],
            tokenizer.vocab_size,
            config.vocab_size,
        )
    return tokenizer


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


def safetensors_writer() -> ModuleType:
    """``safetensors.numpy``, which every export writes with."""
    return require("safetensors.numpy", "exporting")


def write_folder(
    path: str | os.PathLike,
    hf_config: Mapping,
    tensors: Mapping[str, np.ndarray],
    tokenizer: Tokenizer | None,
) -> None:
    """An HF folder: ``config.json``, ``model.safetensors`` and the tokenizer if there is one
    (a SentencePiece model as ``sentencepiece.bpe.model``, a ``tokenizer.json`` as itself, with
    its ``tokenizer_config.json``); ``path`` must not exist yet."""
    save_file = safetensors_writer().save_file
    path = new_folder(path)
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
    save_file(dict(tensors), path / "model.safetensors", metadata={"format": "pt"})
    # safetensors creates its file readable by the owner alone; give it the folder's other
    # files' permissions (the umask's), so a shared model folder is readable like them.
    os.chmod(path / "model.safetensors", (path / "config.json").stat().st_mode & 0o777)
    if tokenizer is not None:
        name = {SentencePieceTokenizer.FILE: HF_TOKENIZER_FILE}.get(tokenizer.FILE, tokenizer.FILE)
        tokenizer.save(path / name)
