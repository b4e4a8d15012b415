"""What one fine-tuning run of a task reads, whatever its source (XTREME's layout, a user's
folder): the training examples, the development ones it selects on, each test language's."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class TaskExamples:
    """A task's examples: the training ones (one language, or translate-train's several), the
    development ones selection reads, each test language's, and each language's dev set
    (`devs`), predicted like a test for the dev table a run reports beside (or without) test."""

    train: Sequence[Any]
    dev: Sequence[Any]
    tests: Mapping[str, Sequence[Any]]
    train_language: str = "en"
    dev_language: str = "en"
    devs: Mapping[str, Sequence[Any]] = dataclasses.field(default_factory=dict)
    # The label set, in id order; () for the training examples' (`TaskKind.label_names`).
    labels: tuple[str, ...] = ()
    # A user's folders are named by the model's language codes (`<lang>`, or `<l1>-<l2>` for
    # pairs): one the model's language embeddings lack is an error, not language 0.
    named_languages: bool = False
    # Predict the training examples too (a user's task reports its training score).
    predict_train: bool = False
