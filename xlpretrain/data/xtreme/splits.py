"""One call for a fine-tuning task's examples of one split, so a caller need not know each
task's format or which of its files are training data (bad lines counted) and which are
references (a bad line is an error): `read_split(find_task(...), "test", "de")`.
"""

from __future__ import annotations

from xlpretrain.data.corpora.sources import DataError, FileStats
from xlpretrain.data.finetuning.task_examples import PairExample, QAExample, TaggedSentence
from xlpretrain.data.xtreme.layout import TaskFiles
from xlpretrain.data.xtreme.sentence_pairs import read_pair_file, read_translated_pairs
from xlpretrain.data.xtreme.squad_json import read_squad_file
from xlpretrain.data.xtreme.tagging import DEFAULT_LABELS, read_tagged_file

__all__ = ["SPLITS", "read_split"]

SPLITS = ("train", "translate-train", "dev", "test")
Examples = list[PairExample] | list[TaggedSentence] | list[QAExample]


def read_split(files: TaskFiles, split: str, lang: str | None = None) -> tuple[Examples, FileStats]:
    """The examples of `split` ('train', 'translate-train', 'dev', 'test') of a pair, tagging or
    QA task; `lang` is required for translate-train and test, and picks a language's dev
    (without it, 'dev' is the English dev a checkpoint is selected on) or training data (where
    XTREME ships it in other languages: PAN-X, UD-POS, TyDiQA-GoldP)."""
    layout = files.layout
    if layout.kind not in ("pairs", "tagging", "qa"):
        raise ValueError(f"{layout.name} has no fine-tuning splits (read_bucc, read_tatoeba)")
    paths = _paths(files, split, lang)
    if paths is None:
        where = f" for {lang}" if lang else ""
        raise DataError(f"{files.root}: {layout.name} has no {split} files{where}")
    training = split in ("train", "translate-train")
    if layout.kind == "pairs" and split == "translate-train":
        return read_translated_pairs(paths[0], labels=layout.labels)
    if layout.kind == "pairs":
        return read_pair_file(paths[0], training=training, labels=layout.labels)
    if layout.kind == "tagging":
        default = DEFAULT_LABELS.get(layout.name, "O")
        return read_tagged_file(paths[0], training=training, default_label=default)
    return read_squad_file(paths[0], training=training)


def _paths(files: TaskFiles, split: str, lang: str | None) -> tuple | None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}: expected one of {SPLITS}")
    if split == "train":
        if lang in (None, "en"):
            return files.train
        if files.layout.train_by_language is None:
            raise ValueError(
                f"XTREME's {files.layout.name} training data is English, not {lang!r} "
                "(translate-train?)"
            )
        return files.train_by_language.get(lang)
    if split == "dev" and lang is None:
        return files.dev
    if lang is None:
        raise ValueError(f"{split} needs a language")
    by_language = {"translate-train": files.translate_train, "test": files.test}
    return by_language.get(split, files.dev_by_language).get(lang)
