"""A family's converter, declared once in its module as a ``Converter`` (``CONVERTER``): the
entry points every family shares — masked LM and task classes, read and written — on the
machinery of ``convert.hf``."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from xlpretrain.convert.folder import DISCRIMINATOR, Params, Pretrained, unpadded
from xlpretrain.convert.hf import (
    Part,
    Rule,
    TaskModel,
    Tensors,
    abstract_task_params,
    check_task_pooling,
    export_ids,
    export_tensors,
    fresh_pooler,
    import_tensors,
    prefixed,
    read_config,
    read_tensors,
    read_tokenizer,
    task_config,
    task_kind,
    task_labels,
    task_tree,
    tokenizer_files,
    untie,
    write_folder,
)
from xlpretrain.data.tokenizer import Tokenizer
from xlpretrain.families import Family
from xlpretrain.model import vocab
from xlpretrain.model.config import ModelConfig

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Converter:
    """A family's converter, declared once in its module (``CONVERTER``): its HF classes, its
    rules and config functions. Its methods are the entry points every family shares: masked LM
    (``read_hf``, ``write_hf``) and task classes (``read_hf_task``, ``write_hf_task``) both ways.
    A family whose tensors differ from its rules' names, or whose exports need more checks,
    subclasses it and overrides the hooks (``renamed``, ``exported``, ``check_tokenizer``,
    ``check_architectures``, ``params_from_hf``).

    - ``title``: how errors name the family's masked LM (``a {title} masked LM``).
    - ``masked_lm``, ``encoder``: the HF classes of a masked LM and of a bare encoder (an XLM-E
      discriminator's export); ``read_architectures``: those whose tensors hold a masked LM.
    - ``prefix``: what the encoder's names start with in the masked LM and the task classes
      (``roberta.``);
      ``encoder_rules``: the bare encoder's, ``rules``: the masked LM's, ``tied``: the tied
      copies a masked LM may also store (alias → original), ``ignored``: the prefixes of the
      tensors an import drops.
    - ``task_architectures``: the HF class of each task kind, ``task_head_rules``: its head's.
    - ``pooler``: the bare encoder class has a pooler (written freshly initialised,
      ``fresh_pooler``); ``tokenizer_json``: a SentencePiece model is also written as the
      ``tokenizer.json`` transformers converts it to (``tokenizer_files``).
    """

    family: Family
    title: str
    config_from_hf: Callable[[Mapping, str | os.PathLike], ModelConfig]
    config_to_hf: Callable[..., dict]  # (config, architecture, *, special)
    masked_lm: str
    encoder: str
    read_architectures: tuple[str, ...]
    prefix: str
    encoder_rules: tuple[Rule, ...]
    rules: tuple[Rule, ...]
    tied: Mapping[str, str]
    task_architectures: Mapping[str, str]
    task_head_rules: Mapping[str, tuple[Rule, ...]]
    ignored: tuple[str, ...] = ()
    pooler: bool = True
    tokenizer_json: bool = True

    # What a family's subclass may override:

    def renamed(self, tensors: Tensors, config: ModelConfig) -> dict[str, np.ndarray]:
        """An HF state dict under the rules' names: as it is, unless the family's names differ."""
        return dict(tensors)

    def exported(self, tensors: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
        """Exported tensors (the encoder's under ``prefix``) under HF's names: ``renamed``'s
        inverse."""
        return tensors

    def check_tokenizer(self, config: ModelConfig, tokenizer: Tokenizer | None) -> None:
        """Raises if the HF classes cannot use ``tokenizer``; they can, unless the family says."""

    def check_architectures(self, named: list[str], source: Path, allow_missing_head: bool) -> None:
        """Refuses a ``config.json`` whose ``architectures`` (if any) names none of
        ``read_architectures``. ``allow_missing_head`` (every converter's option) changes
        nothing unless the family reads bare encoders."""
        if named and not set(named) & set(self.read_architectures):
            raise ValueError(
                f"{source}: unsupported architecture {named}: from-hf converts "
                f"{self.title} masked LMs ({' or '.join(self.read_architectures)})"
            )

    def params_from_hf(
        self, tensors: Tensors, config: ModelConfig, *, allow_missing_head: bool = False
    ) -> Params:
        """Our float32 params (layers stacked) from the HF masked LM's state dict;
        ``allow_missing_head`` as in ``check_architectures``."""
        tensors = untie(self.renamed(tensors, config), self.tied)
        return import_tensors(
            tensors, self.rules, config, model=f"a {self.title} masked LM", ignored=self.ignored
        )

    # Masked LMs:

    def export(
        self, params: Params, config: ModelConfig, rules: Sequence[Rule], prefix: str
    ) -> dict[str, np.ndarray]:
        """HF tensors of ``params`` by ``rules`` (the encoder's under ``prefix``), without the
        vocabulary rows padded for sharding."""
        params = vocab.with_rows(params, config.vocab_size)
        tensors = export_tensors(params, [Part("", rules, range(config.num_layers))])
        return self.exported(tensors, prefix)

    def params_to_hf(self, params: Params, config: ModelConfig) -> dict[str, np.ndarray]:
        """The HF masked LM's state dict (as ``save_pretrained`` writes it: no tied copies)."""
        return self.export(params, config, self.rules, self.prefix)

    def read_hf(self, path: str | os.PathLike, *, allow_missing_head: bool = False) -> Pretrained:
        """Reads an HF masked LM folder: config, weights, and its tokenizer (a SentencePiece
        model or a ``tokenizer.json``), if it has one."""
        path, hf_config = read_config(path)
        source = path / "config.json"
        config = self.config_from_hf(hf_config, source)
        named = hf_config.get("architectures") or []
        self.check_architectures(named, source, allow_missing_head)
        tensors = read_tensors(path)
        params = self.params_from_hf(tensors, config, allow_missing_head=allow_missing_head)
        tokenizer = read_tokenizer(path, config)
        if tokenizer is None:
            log.info("%s: no tokenizer, so the model has none", path)
        return Pretrained(config, params, tokenizer)

    def write_hf(self, model: Pretrained, path: str | os.PathLike) -> None:
        """Writes an HF masked LM folder, or for an XLM-E discriminator (no MLM head) a bare
        encoder one; ``path`` must not exist yet."""
        model = unpadded(model)
        config = model.config
        self.check_tokenizer(config, model.tokenizer)
        special = export_ids(config, model.tokenizer)
        if model.kind == DISCRIMINATOR:
            hf_config = self.config_to_hf(config, self.encoder, special=special)
            tensors = self.export(model.params, config, self.encoder_rules, "")
            if self.pooler:
                tensors.update(fresh_pooler(config))
        else:
            hf_config = self.config_to_hf(config, self.masked_lm, special=special)
            tensors = self.params_to_hf(model.params, config)
        self._write(path, hf_config, tensors, model.tokenizer)

    def _write(
        self,
        path: str | os.PathLike,
        hf_config: Mapping,
        tensors: Tensors,
        tokenizer: Tokenizer | None,
    ) -> None:
        """``write_folder``, with the tokenizer files the family needs; they are made before
        writing, so that a failure leaves no folder."""
        files = tokenizer_files(tokenizer) if self.tokenizer_json else None
        write_folder(path, hf_config, tensors, tokenizer, files)

    # Fine-tuning tasks:

    def task_rules(self, kind: str) -> tuple[Rule, ...]:
        """The tensors of the HF task class of ``kind``: the encoder under ``prefix`` (ours
        under ``backbone/``), then the head."""
        encoder = prefixed(self.encoder_rules, self.prefix, "backbone/")
        return (*encoder, *self.task_head_rules[kind])

    def task_params_to_hf(
        self, params: Params, config: ModelConfig, kind: str
    ) -> dict[str, np.ndarray]:
        """The HF state dict of a task module's params (``backbone/``, ``head/``)."""
        return self.export(params, config, self.task_rules(kind), self.prefix)

    def task_params_from_hf(
        self, tensors: Tensors, config: ModelConfig, kind: str, labels: int
    ) -> Params:
        """A task module's float32 params from the HF task class's state dict."""
        return import_tensors(
            self.renamed(tensors, config),
            self.task_rules(kind),
            config,
            model=f"an HF {self.task_architectures[kind]}",
            ignored=self.ignored,
            abstract=abstract_task_params(config, kind, self.family.task_head, labels),
        )

    def read_hf_task(self, path: str | os.PathLike) -> TaskModel:
        """Reads an HF folder of one of the family's task classes (``task_architectures``)."""
        path, hf_config = read_config(path)
        source = path / "config.json"
        config = self.config_from_hf(hf_config, source)
        kind = task_kind(hf_config, self.task_architectures, source)
        check_task_pooling(hf_config, kind, source)
        labels = task_labels(hf_config, kind, source)
        params = self.task_params_from_hf(read_tensors(path), config, kind, len(labels))
        return TaskModel(config, params, kind, labels, read_tokenizer(path, config))

    def write_hf_task(
        self,
        model: Pretrained,
        head: Params,
        kind: str,
        labels: Sequence[str],
        path: str | os.PathLike,
    ) -> None:
        """Writes a fine-tuned model (its encoder in ``model``, its ``head``) as the HF task
        class of ``kind`` with ``labels`` (a classifier's), ``read_hf_task``'s inverse;
        ``path`` must not exist yet."""
        self.check_tokenizer(model.config, model.tokenizer)
        model = unpadded(model)
        config = model.config
        special = export_ids(config, model.tokenizer)
        hf_config = {
            **self.config_to_hf(config, self.task_architectures[kind], special=special),
            **task_config(kind, labels, config.dropout_rate),
        }
        tensors = self.task_params_to_hf(task_tree(model.params, head), config, kind)
        self._write(path, hf_config, tensors, model.tokenizer)
