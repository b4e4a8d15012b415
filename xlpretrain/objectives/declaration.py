"""An objective's declaration: everything the rest of the framework reads about it, in one place.

The run plan (the known names, the requirements it checks, each objective's stream), the model
builder (its family), the training step (its loss), the masks CLI (its attention masks and
their example layout) and the benchmark (its FLOPs) all read the `Objective`, so adding one
is a module that declares it plus one line in `objectives.REGISTRY`. An objective never sees
the raw config: the plan hands each one a `Context` of typed settings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax

from xlpretrain.core.settings import Section
from xlpretrain.data.pretraining.streams import StreamSpec
from xlpretrain.data.tokenizer import SpecialIds
from xlpretrain.masks import AttentionMask
from xlpretrain.model.config import ModelConfig, ModelFamily
from xlpretrain.objectives.flops import StepShape

# (params, batch, rng, model) -> (loss, metrics)
LossFn = Callable[[Any, dict, jax.Array, Any], tuple[jax.Array, dict[str, jax.Array]]]
# batch -> what the objective's loss is a mean over in it (its metrics' "count")
CountFn = Callable[[Mapping[str, jax.Array]], jax.Array]


def predictions(batch: Mapping[str, jax.Array]) -> jax.Array:
    """A masked-LM batch's weighted prediction slots: what its loss is a mean over."""
    return batch["pred_weights"].sum()


@dataclasses.dataclass(frozen=True)
class MaskRates:
    """The share of tokens masked in rows of each kind (`data.*_mask_rate`)."""

    mono: float
    parallel: float
    camlm: float


@dataclasses.dataclass(frozen=True)
class Context:
    """What an objective reads of a run, resolved by the plan: the mask rates, the model's
    shape (its language-embedding table aside: `language_embeddings` says whether it has one),
    the values of its own section and the special ids of the run's tokenizer."""

    mask_rates: MaskRates
    model: ModelConfig
    language_embeddings: bool = False
    own: Any = None  # `Section.values` of the objective's section; None without one
    # Set once the run's tokenizer is loaded (`RunPlan.with_special_ids`); None in programs
    # that compile steps with no tokenizer (aot, bench), whose losses leave out what needs it.
    special: SpecialIds | None = None


@dataclasses.dataclass(frozen=True)
class Requirement:
    """A setting the objective cannot train without: the plan refuses a run that enables the
    objective without it, naming `key` with `message`."""

    key: str
    holds: Callable[[Context], bool]
    message: str


@dataclasses.dataclass(frozen=True)
class Objective:
    """One pre-training objective; its callables take the run's `Context`."""

    name: str
    family: ModelFamily  # the module it trains
    stream_spec: Callable[[Context], StreamSpec]  # the rows it reads (at the default length)
    loss: Callable[[Context], LossFn]
    masks: tuple[AttentionMask, ...]  # every attention mask it runs, the main one first
    flops: Callable[[Context, StreamSpec, StepShape], float]  # one step's batch of it, trained
    requires: tuple[Requirement, ...] = ()
    section: Section | None = None  # its own config section, `cfg.<section.name>.*`
    # What its loss is a mean over in a batch, which weights micro-batches under gradient
    # accumulation (the loss's metrics report it as "count").
    count: Callable[[Context], CountFn] = lambda context: predictions
    # Its loss compares every row with every other (a contrastive loss): not a sum over rows,
    # so micro-batches (train.grad_accum > 1) would change it, and the run refuses them.
    whole_batch: bool = False
