"""A fine-tuning task kind's declaration: what the rest of the framework reads about a kind of
task (sentence(-pair) classification, token classification, extractive QA), in one place, as an
objective's declaration is for pre-training.

The fine-tuning run (`finetune.task_run`) reads only the `TaskKind`: how examples become
rows, the module that scores them (the pre-trained encoder and the kind's head), the loss and
what it is a mean over, the outputs an evaluation keeps, how they become one prediction per
example and the score the run selects its checkpoint by. A new kind is a module declaring one
and a line in `tasks.KINDS`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import flax.linen as nn
import jax
import numpy as np

from xlpretrain.core.settings import Section
from xlpretrain.data.finetuning.task_examples import PairLayout
from xlpretrain.data.tokenizer import Tokenizer
from xlpretrain.model.config import ModelConfig
from xlpretrain.objectives.declaration import CountFn, LossFn


class Rows(Protocol):
    """Encoded examples: `len` rows, and any of them as a batch (index -1: a padding row)."""

    def __len__(self) -> int: ...

    def batch(self, indices: np.ndarray) -> dict[str, np.ndarray]: ...


@dataclasses.dataclass(frozen=True)
class Encoding:
    """What encoding a file's examples needs besides them: the tokenizer, the label names in id
    order (empty for QA), the family's pair layout, the row length, the kind's own settings
    (its `TaskKind.section`'s values; None for a kind without one), whether VECO's
    cross-attention is plugged in (sentence pairs), the language ids its tokens carry (a pair's
    second sentence the second's, every other token the first's), and whether the rows are
    trained on."""

    tokenizer: Tokenizer
    labels: tuple[str, ...]
    layout: PairLayout
    max_length: int
    settings: object = None
    plug_in: bool = False
    lang_ids: tuple[int, int] = (0, 0)
    training: bool = False


@dataclasses.dataclass(frozen=True)
class Head:
    """What builds a kind's module: the model's config, its family's head style
    (`Family.task_head`), the number of labels and whether VECO's cross-attention is plugged
    in."""

    config: ModelConfig
    task_head: str
    num_labels: int
    plug_in: bool = False


@dataclasses.dataclass(frozen=True)
class TaskKind:
    """One kind of fine-tuning task.

    - ``name``: its name in configs and in the HF converters' `TASK_ARCHITECTURES`.
    - ``label_names``: the label set of training examples (sorted; () where a kind has none).
    - ``encode``: examples → `Rows`.
    - ``module``: the `nn.Module` of a `Head`; its parameters are `backbone/…` (the pre-trained
      encoder's tree) and the head's.
    - ``loss``, ``count``: the training step's loss and what it is a mean over.
    - ``outputs``: (module, params, batch) → the arrays an evaluation keeps per row (jitted).
    - ``decode``: (outputs of every row, the rows, the examples, the encoding) → one
      prediction per example, as the submission file holds it.
    - ``score``: (gold examples, predictions) → the figure a run selects its checkpoint by,
      the benchmark's own metric, in percent.
    - ``chance``: (gold examples) → what `score` gives a constant answer, the baseline a
      user's task is read against (classification: the majority label's share), where a kind
      has one.
    - ``section``: the kind's own config section (`cfg.<section.name>.*`, QA's windows), whose
      values its encoding carries (`Encoding.settings`), where a kind has settings of its own.
    """

    name: str
    label_names: Callable[[Sequence[Any]], tuple[str, ...]]
    encode: Callable[[Sequence[Any], Encoding], Rows]
    module: Callable[[Head], nn.Module]
    loss: LossFn
    count: CountFn
    outputs: Callable[[nn.Module, Any, Mapping[str, jax.Array]], Any]
    decode: Callable[[Any, Rows, Sequence[Any], Encoding], list[Any]]
    score: Callable[[Sequence[Any], Sequence[Any]], float]
    chance: Callable[[Sequence[Any]], float] | None = None
    section: Section | None = None
