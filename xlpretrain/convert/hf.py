"""Hugging Face folders ⇄ xlpretrain models: the machinery every family's converter shares.

Our encoders were built to match their HF models one tensor to one parameter (see
``xlpretrain.model.encoder``), so a converter is a table of rules (HF name, our parameter,
``Layout``) plus a few layout changes: ``torch.nn.Linear`` stores ``[out, in]`` where Flax
stores ``[in, out]``, and the attention projections keep heads as their own axis. Here are the
layouts, the import and export of tensors by rules with every name checked both ways (a tensor
the rules do not know, or a parameter they do not fill, is an error rather than a silent drop),
the checks of an HF config's settings and of the model options an export cannot state, HF
folders' tensors, configs and tokenizers read and written, and the fresh pooler and MLM head
HF has where xlpretrain has no parameters: what the entry points every family shares
(``convert.converter.Converter``: masked LMs and fine-tuned task classes, read and written)
run on. Each family's converter module declares its names once as a ``Converter``
(``CONVERTER``): ``xlmr``,
``modernbert``, ``bert`` (and ``seq2seq``, VECO's export, on XLM-R's); ``xlpretrain.convert``
picks one by the model's backbone.

Reading needs only ``safetensors`` (+ NumPy) for ``model.safetensors``; ``torch`` is imported
only for ``pytorch_model.bin``. Writing needs only ``safetensors``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import flax.linen as nn
import jax
import numpy as np
from flax import traverse_util

from xlpretrain.convert.folder import (
    RUNTIME_FIELDS,
    Params,
    abstract_params,
    new_folder,
)
from xlpretrain.core.errors import require
from xlpretrain.data.tokenizer import HFTokenizer, SentencePieceTokenizer, SpecialIds, Tokenizer
from xlpretrain.model.config import ModelConfig
from xlpretrain.model.heads import LMHead

log = logging.getLogger(__name__)

HF_TOKENIZER_FILE = "sentencepiece.bpe.model"  # the name of a SentencePiece model in an HF folder
# ModelConfig field -> HF config.json key, for the encoder's shape: every HF encoder family
# we convert names it alike (each converter's CONFIG_KEYS start with these).
SHAPE_KEYS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "mlp_dim": "intermediate_size",
    "max_positions": "max_position_embeddings",
}
# Why every export refuses a model option that no HF encoder has; each family adds its own.
COMMON_REASONS = {"num_languages": "num_languages > 0 means XLM-style language embeddings"}


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
Tensors = Mapping[str, np.ndarray]  # an HF state dict: tensor name → tensor


# --- configs --------------------------------------------------------------------------------


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


def exported_config(
    config: ModelConfig, architecture: str, model_type: str, keys: Mapping[str, str]
) -> dict:
    """What every exported ``config.json`` starts with, in this order: the ``architecture``,
    the ``model_type`` and ``config``'s fields under their HF names (``keys``: ModelConfig
    field -> HF key); each converter adds the settings of its own family after them."""
    return {
        "architectures": [architecture],
        "model_type": model_type,
        **{key: getattr(config, ours) for ours, key in keys.items()},
    }


def export_ids(config: ModelConfig, tokenizer: Tokenizer | None) -> SpecialIds:
    """The special ids an export's ``config.json`` states: its tokenizer's; a model without one
    states the SentencePiece layout's (XLM-R's), as it always has."""
    return tokenizer.special if tokenizer else SentencePieceTokenizer.layout(config.vocab_size)


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


def import_tensors(
    tensors: Mapping[str, np.ndarray],
    rules: Sequence[Rule],
    config: ModelConfig,
    *,
    model: str,
    ignored: tuple[str, ...] = (),
    abstract: Params | None = None,
) -> Params:
    """Our float32 params (layers stacked) from HF ``tensors`` by ``rules``, which must name
    every tensor but those starting with an ``ignored`` prefix (``model`` says, in errors,
    what the tensors should have been), and every parameter they fill; ``abstract``: the
    shapes of the tree they fill (default: the masked LM's)."""
    _check_names(tensors, _expand(rules, config.num_layers), model, ignored)
    abstract = traverse_util.flatten_dict(
        abstract_params(config) if abstract is None else abstract, sep="/"
    )
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


def prefixed(rules: Iterable[Rule], hf: str = "", ours: str = "") -> tuple[Rule, ...]:
    """``rules`` one level down: ``hf`` before each HF name, ``ours`` before each path (an
    encoder's rules under its masked LM's prefix, a layer's under the stack's)."""
    return tuple((hf + name, ours + path, layout) for name, path, layout in rules)


class Part(NamedTuple):
    """One model of an export: ``rules``' HF names under ``prefix``, HF layer ``j`` taken from
    our layer ``layers[j]``."""

    prefix: str
    rules: Sequence[Rule]
    layers: Sequence[int]


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


def fresh_head(config: ModelConfig, params: Params) -> Params:
    """An MLM head for an encoder read without one, initialised as ``init_params`` would."""
    word_embeddings = params["embeddings"]["word_embeddings"]["embedding"]
    head = LMHead(config).init(
        jax.random.key(0), np.zeros((1, config.hidden_size), np.float32), word_embeddings
    )
    return jax.tree.map(lambda x: np.asarray(x, np.float32), nn.unbox(head["params"]))


def _listing(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown}, … ({len(names) - limit} more)"


# --- fine-tuning tasks ----------------------------------------------------------------------
#
# A fine-tuned model (`model.task_heads`) exports as its family's HF task class: the encoder
# under the class's prefix, the head by the converter's `task_head_rules`, and a config.json
# with the labels. Our side is the task module's tree: `backbone/` (the encoder) and its head.

# The kinds of fine-tuning task (`xlpretrain.tasks.KINDS`, by name) that Hugging Face has task
# classes for: each family's converter names its class of each (`Converter.task_architectures`).
SEQUENCE_CLASSIFICATION = "sequence_classification"
TOKEN_CLASSIFICATION = "token_classification"
QUESTION_ANSWERING = "question_answering"
QA_LABELS = ("LABEL_0", "LABEL_1")  # what HF names a QA class's two outputs (start, end)


@dataclasses.dataclass(frozen=True)
class TaskModel:
    """A fine-tuned model as an HF task folder holds it: ``params`` is the task module's tree
    (``PairClassifier``'s, ``TokenClassifier``'s, ``SpanExtractor``'s), ``labels`` a
    classifier's in id order (QA: none)."""

    config: ModelConfig
    params: Params
    kind: str
    labels: tuple[str, ...]
    tokenizer: Tokenizer | None = None


def task_tree(encoder: Params, head: Params) -> Params:
    """The task module's tree of a pre-trained tree (its LM head, if any, left out) and its
    head's params (every top-level entry but ``backbone``: ``head/``, or the linear pair
    classifier's ``head_dense/`` and ``head_out/``)."""
    return {"backbone": {k: v for k, v in encoder.items() if k != "lm_head"}, **head}


def head_of(params: Params) -> Params:
    """A task module's head params: ``task_tree``'s inverse."""
    return {k: v for k, v in params.items() if k != "backbone"}


def linear_head_rules(name: str) -> tuple[Rule, ...]:
    """HF's ``nn.Linear`` ``name`` (``classifier``, ``qa_outputs``) as our head's classifier."""
    return (
        (f"{name}.weight", "head/classifier/kernel", LINEAR),
        (f"{name}.bias", "head/classifier/bias", COPY),
    )


def pair_head_rules(dense: str, out: str) -> tuple[Rule, ...]:
    """HF's ``nn.Linear`` ``dense`` (tanh after it) and ``out`` as the linear pair classifier's
    ``head_dense`` and ``head_out``."""
    return (
        (f"{dense}.weight", "head_dense/kernel", LINEAR),
        (f"{dense}.bias", "head_dense/bias", COPY),
        (f"{out}.weight", "head_out/kernel", LINEAR),
        (f"{out}.bias", "head_out/bias", COPY),
    )


def task_config(kind: str, labels: Sequence[str], dropout: float) -> dict:
    """What a task class's ``config.json`` states beside the encoder's settings: its labels
    (QA: HF's two defaults, start and end), the dropout before its linear layer, and a
    sequence classifier's pooling (its first token's state; ModernBERT reads the setting)."""
    names = list(QA_LABELS) if kind == QUESTION_ANSWERING else list(labels)
    if len(set(names)) != len(names) or not names:
        raise ValueError(f"labels {names}: a classifier needs distinct labels")
    pooling = {"classifier_pooling": "cls"} if kind == SEQUENCE_CLASSIFICATION else {}
    return {
        "id2label": {str(i): name for i, name in enumerate(names)},
        "label2id": {name: i for i, name in enumerate(names)},
        "num_labels": len(names),
        "classifier_dropout": dropout,
        **pooling,
    }


def task_kind(
    hf_config: Mapping, architectures: Mapping[str, str], source: str | os.PathLike
) -> str:
    """The task kind whose HF class (``architectures``: kind → class) ``config.json`` names."""
    named = hf_config.get("architectures") or []
    kinds = [kind for kind, name in architectures.items() if name in named]
    if len(kinds) != 1:
        raise ValueError(
            f"{source}: architectures={named!r} names no task class this family converts "
            f"({' or '.join(architectures.values())})"
        )
    return kinds[0]


def task_labels(hf_config: Mapping, kind: str, source: str | os.PathLike) -> tuple[str, ...]:
    """A classifier's labels in id order (``id2label``); QA has none."""
    if kind == QUESTION_ANSWERING:
        return ()
    id2label = hf_config.get("id2label") or {}
    try:
        return tuple(id2label[str(i)] for i in range(len(id2label)))
    except KeyError:
        raise ValueError(f"{source}: id2label keys {sorted(id2label)} are not 0 … n-1") from None


def check_task_pooling(hf_config: Mapping, kind: str, source: str | os.PathLike) -> None:
    """Refuses a sequence classifier that pools otherwise than ours, on the first token."""
    pooling = hf_config.get("classifier_pooling", "cls")
    if kind == SEQUENCE_CLASSIFICATION and pooling != "cls":
        raise ValueError(
            f"{source}: classifier_pooling={pooling!r}; xlpretrain's sequence classifier reads "
            "the first token's state ('cls')"
        )


def abstract_task_params(config: ModelConfig, kind: str, task_head: str, labels: int) -> Params:
    """Shapes of the task module's params (``backbone/`` and its head), without allocating: the
    module its kind declares (`xlpretrain.tasks`)."""
    from xlpretrain import tasks  # here: reading a pre-trained folder imports no task's loss
    from xlpretrain.tasks.declaration import Head

    config = dataclasses.replace(config, remat="none", attention_impl="xla")
    module = tasks.get(kind).module(Head(config, task_head, labels))
    ids = np.zeros((1, 8), np.int32)
    batch = {"input_ids": ids, "segment_ids": ids + 1, "positions": ids + 2 + np.arange(8)}
    init = lambda rng: module.init(rng, batch)["params"]  # noqa: E731
    return nn.unbox(jax.eval_shape(init, jax.random.key(0)))


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


def safetensors_writer() -> ModuleType:
    """``safetensors.numpy``, which every export writes with."""
    return require("safetensors.numpy", "exporting")


def write_folder(
    path: str | os.PathLike,
    hf_config: Mapping,
    tensors: Mapping[str, np.ndarray],
    tokenizer: Tokenizer | None,
    files: Mapping[str, bytes] | None = None,
) -> None:
    """An HF folder: ``config.json``, ``model.safetensors``, the tokenizer if there is one
    (a SentencePiece model as ``sentencepiece.bpe.model``, a ``tokenizer.json`` as itself, with
    its ``tokenizer_config.json``) and ``files`` (name: content, as ``tokenizer_files`` gives
    them); ``path`` must not exist yet."""
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
    for name, content in (files or {}).items():
        (path / name).write_bytes(content)


def tokenizer_files(tokenizer: Tokenizer | None) -> dict[str, bytes]:
    """The files an export holds besides those ``write_folder`` writes, for a format whose
    tokenizer transformers reads from a ``tokenizer.json`` alone (ModernBERT's, BERT's): for a
    SentencePiece model, what transformers' ``XLMRobertaTokenizerFast`` saves of it
    (``tokenizer.json``, ``tokenizer_config.json``), whose ids are ours (``data.tokenizer``'s
    layout is XLM-R's). An ``xlm-roberta`` folder converts ``sentencepiece.bpe.model`` itself."""
    if not isinstance(tokenizer, SentencePieceTokenizer):
        return {}
    transformers = require("transformers", "exporting a ModernBERT model's SentencePiece model")
    with tempfile.TemporaryDirectory() as scratch:
        model, saved = Path(scratch) / "model", Path(scratch) / "saved"
        tokenizer.save(model / HF_TOKENIZER_FILE)
        # from_pretrained converts the model (the constructor, in transformers 5, does not).
        converted = transformers.XLMRobertaTokenizerFast.from_pretrained(model)
        names = [Path(file).name for file in converted.save_pretrained(saved)]
        return {name: (saved / name).read_bytes() for name in names if name != HF_TOKENIZER_FILE}
