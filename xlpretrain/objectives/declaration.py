"""An objective's declaration: everything the rest of the framework reads about it, in one place.

Config validation (the known names), the input pipeline (its example stream), the model
builder (its family), the training step (its loss), the masks CLI (its attention masks and
their example layout) and the benchmark (its FLOPs) all read the `Objective`, so adding one
is a module that declares it plus one line in `objectives.REGISTRY`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import ml_collections

from xlpretrain.data.streams import StreamSpec
from xlpretrain.masks import AttentionMask
from xlpretrain.model.config import ModelConfig, ModelFamily
from xlpretrain.objectives.flops import StepShape

# (params, batch, rng, model) -> (loss, metrics)
LossFn = Callable[[Any, dict, jax.Array, Any], tuple[jax.Array, dict[str, jax.Array]]]
FlopsFn = Callable[[ml_collections.ConfigDict, StreamSpec, StepShape], float]


# config key within a section -> (predicate on its value, description of the allowed values)
Ranges = Mapping[str, tuple[Callable[[Any], bool], str]]


@dataclasses.dataclass(frozen=True)
class Settings:
    """The objective's own config section, `cfg.<section>.*`: its keys with their defaults and
    the allowed values of each. Objectives of one paper may share a section (`xlm_e`)."""

    section: str
    defaults: Mapping[str, Any]
    ranges: Ranges = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Requirement:
    """A setting the objective cannot train without: config validation refuses a run that
    enables the objective without it, naming `key` with `message`."""

    key: str
    holds: Callable[[ml_collections.ConfigDict], bool]
    message: str


@dataclasses.dataclass(frozen=True)
class Objective:
    """One pre-training objective. The callables take the validated run config, so an
    objective reads its own settings (`btmlm.ratio`, `xlm_e.disc_weight`, …) itself."""

    name: str
    family: ModelFamily  # the module it trains
    stream_spec: Callable[[ml_collections.ConfigDict], StreamSpec]  # the rows it reads
    loss: Callable[[ml_collections.ConfigDict], LossFn]
    masks: tuple[AttentionMask, ...]  # every attention mask it runs, the main one first
    flops: FlopsFn  # training FLOPs of one step's batch of it
    requires: tuple[Requirement, ...] = ()
    settings: Settings | None = None

    def stream(self, cfg: ml_collections.ConfigDict) -> StreamSpec:
        """The stream at its row length in the run: `data.per_objective.NAME.max_length`, else
        `data.max_length` (the one place a row's length is resolved)."""
        override = cfg.data.per_objective.get(self.name, {})
        return self.stream_spec(cfg).at_length(override.get("max_length", cfg.data.max_length))


def encoder_config(cfg: ml_collections.ConfigDict) -> ModelConfig:
    """The run's encoder shape, as FLOP counts need it (language embeddings cost none)."""
    return ModelConfig.from_run_config(cfg.model, num_languages=0)
