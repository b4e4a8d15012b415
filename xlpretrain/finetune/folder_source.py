"""A user's own task in a folder, for any kind: `DIR/<lang>/{train,dev,test}.<tsv|json>`.

Pairs: `sentence1<TAB>sentence2<TAB>label` a line (test lines may leave the label out);
tagging: XTREME's one `word<TAB>tag` a line, a blank line between sentences; QA: SQuAD JSON.
A folder is named by its language, or for pairs `<l1>-<l2>` (each side's language). One run
trains on `<train_language>/train`, selects on `<train_language>/dev` where there is one and
predicts the test of each language asked (default: every folder with a test file). Training
files skip and count bad lines, dev and test files are references where a bad line is an error
naming file:line (the readers of `xlpretrain.data.xtreme`)."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from xlpretrain.data.corpora.sources import DataError, FileStats, format_stats
from xlpretrain.data.xtreme import read_pair_file, read_squad_file, read_tagged_file
from xlpretrain.finetune.examples import TaskExamples

log = logging.getLogger("xlpretrain")
Reader = Callable[..., tuple[list[Any], FileStats]]  # (path, *, training) -> examples, stats


@dataclasses.dataclass(frozen=True)
class FolderSettings:
    """A folder task's own keys beside the fine-tuning ones."""

    train_language: str = "en"  # the folder trained on (and selected on, where it has dev)
    languages: tuple[str, ...] = ()  # the folders predicted; empty: every one with a test file
    labels: tuple[str, ...] = ()  # label strings in id order; empty: the training labels, sorted


@dataclasses.dataclass(frozen=True)
class FolderSource:
    """A user's folder of one file format (`suffix`), read by `read`."""

    suffix: str  # "tsv" | "json"
    read: Reader
    what: str  # the line format, for error messages

    @property
    def protocols(self) -> tuple[str, ...]:
        return ("zero_shot",)

    def runs(self, plan: Any, task: str) -> dict[str, TaskExamples]:
        """The one run of task `task` on the folder `plan.data_dir` (workdir `OUT/<task>/`),
        by its section's `FolderSettings` (`plan` a `plan.FineTunePlan`)."""
        data_dir, settings = plan.data_dir, plan.own[task]
        if not os.path.isdir(data_dir):
            raise DataError(f"config key 'data.dir': no folder {data_dir}")
        languages = list(settings.languages) or sorted(
            name
            for name in os.listdir(data_dir)
            if os.path.isfile(self.path(data_dir, name, "test"))
        )
        if not languages:
            raise DataError(f"no <lang>/test.{self.suffix} file in {data_dir} ({self.what})")
        language = settings.train_language
        train = self._read(data_dir, language, "train", training=True)
        has_dev = os.path.isfile(self.path(data_dir, language, "dev"))
        dev = self._read(data_dir, language, "dev", training=False) if has_dev else []
        tests = {lang: self._read(data_dir, lang, "test", training=False) for lang in languages}
        examples = TaskExamples(
            train, dev, tests, train_language=language, dev_language=language,
            labels=settings.labels, named_languages=True, predict_train=True,
        )  # fmt: skip
        return {"": examples}

    def path(self, data_dir: str, language: str, split: str) -> str:
        return os.path.join(data_dir, language, f"{split}.{self.suffix}")

    def _read(self, data_dir: str, language: str, split: str, *, training: bool) -> Sequence[Any]:
        path = self.path(data_dir, language, split)
        if not os.path.isfile(path):
            raise DataError(f"no file {path} ({self.what})")
        examples, stats = self.read(path, training=training)
        for line in format_stats({path: stats}):
            log.info("data: %s", line)
        if not examples:
            raise DataError(f"{path} has no usable example ({self.what})")
        return examples


PAIRS = FolderSource("tsv", read_pair_file, "sentence1<TAB>sentence2<TAB>label a line")
TAGGING = FolderSource(
    "tsv", read_tagged_file, "word<TAB>tag a line, a blank line between sentences"
)
QUESTIONS = FolderSource("json", read_squad_file, "SQuAD JSON")
