"""What a backbone (a model family: XLM-R, ModernBERT, …) declares, in one place per family.

A run names its family as a value (`model.architecture`); everything that differs between
families is found through its declaration in the registry (`xlpretrain.backbones`), never by
comparing the name: its name and layers (`families.Family`, which its converter reads too), the
`model.*` keys its layers alone read (its typed settings section, from which the config's
defaults and key checks are generated), the checks its settings need, which settings a warm
start must share with its checkpoint, its Hugging Face converter and its PyTorch peer for
`bench`.

A declaration names its converter module and imports it only when a conversion or the peer
runs: converters import Flax, and checking a config must not.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from xlpretrain.backbones.settings import ModelSettings
from xlpretrain.core.settings import Section
from xlpretrain.data.finetuning.task_examples import PairLayout
from xlpretrain.families import Family
from xlpretrain.model.config import ModelConfig

if TYPE_CHECKING:  # the converters import Flax; checking a config needs none of it
    from xlpretrain.convert.converter import Converter
    from xlpretrain.convert.folder import Params, Pretrained
    from xlpretrain.convert.hf import TaskModel


@dataclasses.dataclass(frozen=True)
class Backbone:
    """One model family.

    - ``family``: its name, title, layer features and HF `model_type`s.
    - ``section``: the `model.*` keys its layers alone read, as typed settings with defaults
      and ranges (families with the same layers share one: BERT has XLM-R's); the keys every
      backbone reads are `settings.SHARED`.
    - ``check``: raises `ConfigError` naming the key where a run's `model` section (a mapping of
      validated keys) asks for what its layers cannot do.
    - ``function_settings``: the `ModelConfig` fields in which the same weights compute another
      function without a parameter changing shape; a warm start shares them with its
      checkpoint or names them in `init.changes` (`training.warm_start`).
    - ``converter``: the module converting its Hugging Face folders both ways (its `CONVERTER`,
      a `convert.converter.Converter`: `read_hf(path, allow_missing_head=…)`,
      `write_hf(model, path)`, and its fine-tuned models as the HF class of each task kind:
      `task_architectures`, `write_hf_task`, `read_hf_task`) and writing their `config.json`
      (`config_to_hf(config)`).
    - ``peer_name``: how `bench --peer` names its peer (`hf_peer`).
    """

    family: Family
    section: Section
    check: Callable[[Mapping[str, Any]], None]
    function_settings: tuple[str, ...]
    converter: str
    peer_name: str

    @property
    def name(self) -> str:
        return self.family.name

    @property
    def title(self) -> str:
        return self.family.title

    @property
    def features(self) -> Mapping[str, Any]:
        return self.family.features

    @property
    def hf_model_types(self) -> tuple[str, ...]:
        return self.family.hf_model_types

    @property
    def pair_layout(self) -> PairLayout:
        """How its rows hold two segments (a question and its context, a sentence pair)."""
        return self.family.pair_layout

    @property
    def task_head(self) -> str:
        """How its fine-tuning heads read the hidden states (`model.task_heads`)."""
        return self.family.task_head

    def converter_module(self) -> ModuleType:
        """Its converter, imported now (with Flax)."""
        return importlib.import_module(self.converter)

    def hf_converter(self) -> Converter:
        """Its converter's entry points (its module's `CONVERTER`), imported now (with Flax)."""
        return self.converter_module().CONVERTER

    def read_hf(self, path: str | os.PathLike, allow_missing_head: bool = False) -> Pretrained:
        """The model of an HF folder of this family."""
        return self.hf_converter().read_hf(path, allow_missing_head=allow_missing_head)

    def write_hf(self, model: Pretrained, path: str | os.PathLike) -> None:
        """Writes `model` as an HF folder of this family; `path` must not exist yet."""
        self.hf_converter().write_hf(model, path)

    def hf_task_architecture(self, kind: str) -> str:
        """The transformers class of fine-tuning task `kind` (`xlpretrain.tasks.KINDS`)."""
        return self.hf_converter().task_architectures[kind]

    def write_hf_task(
        self,
        model: Pretrained,
        head: Params,
        kind: str,
        labels: list[str],
        path: str | os.PathLike,
    ) -> None:
        """Writes a fine-tuned model (encoder `model`, `head`) as this family's HF class of task
        `kind`; `path` must not exist yet."""
        self.hf_converter().write_hf_task(model, head, kind, labels, path)

    def read_hf_task(self, path: str | os.PathLike) -> TaskModel:
        """The fine-tuned model of an HF task folder of this family."""
        return self.hf_converter().read_hf_task(path)

    def hf_peer(self, config: ModelConfig) -> Any:
        """A fresh HF masked LM of `config`, built from the `config.json` `convert to-hf`
        writes, with PyTorch's fused (SDPA) attention: `bench --peer`'s. Options no HF class
        has (VECO's plug-in, relative positions, language embeddings) are left out: the peer
        is the model a Hugging Face user would run instead."""
        import transformers

        plain = dataclasses.replace(
            config,
            cross_attention=False,
            num_languages=0,
            relative_position="none",
            absolute_positions=not config.rotary,
        )
        settings = self.converter_module().config_to_hf(plain)
        (architecture,) = settings.pop("architectures")
        hf_config = transformers.AutoConfig.for_model(**settings, attn_implementation="sdpa")
        return getattr(transformers, architecture)(hf_config)

    def model_config(self, shared: ModelSettings, own: Any) -> ModelConfig:
        """The `ModelConfig` of a run's typed model settings: the keys every backbone reads
        and the values of its own `section`. Without a language table (the data sizes it:
        `RunPlan.model_config`)."""
        return self.config(**shared.model_fields(), **dataclasses.asdict(own))

    def config(self, **fields: Any) -> ModelConfig:
        """A `ModelConfig` of this family with `fields` (the others at their defaults)."""
        return self.family.config(**fields)
