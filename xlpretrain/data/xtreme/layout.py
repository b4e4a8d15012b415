"""Where each XTREME task's files lie under XTREME_DIR (the `download/` folder that
google-research/xtreme's `scripts/download_data.sh` fills), which of them a run trains on,
selects on and tests on, in which languages, and `find_task`, which checks they are there.

Paths are templates relative to XTREME_DIR, `{lang}` standing for a language code. A split is a
tuple of files because the retrieval tasks keep one split in two or three files (BUCC: source,
English, gold; Tatoeba: source, English); every other task keeps one.

The test languages are each version's (`versions.VERSIONS`, evaluate.py's lists); the label
lists are XTREME's processors' (`get_labels`) and its tagging data's.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

from xlpretrain.data.corpora.sources import DataError
from xlpretrain.data.xtreme.versions import VERSIONS

__all__ = ["LAYOUTS", "VERSIONS", "TaskFiles", "TaskLayout", "find_task", "task_languages"]

Files = tuple[Path, ...]

# Universal POS tags, UD-POS's labels.
_UPOS = tuple(
    "ADJ ADP ADV AUX CCONJ DET INTJ NOUN NUM PART PRON PROPN PUNCT SCONJ SYM VERB X".split()
)

_DOWNLOAD = "XTREME's scripts/download_data.sh leaves them there"
_PANX_STEP = (
    "PAN-X needs a manual step: save AmazonPhotos.zip (https://www.amazon.com/clouddrive/share/"
    "d3KGCRCIYwhKJF0H3eWA26hjg2ZCRhjpEQtDL70FSBN) as download/AmazonPhotos.zip, then run "
    "XTREME's scripts/download_data.sh (its download_panx step)"
)


@dataclasses.dataclass(frozen=True)
class TaskLayout:
    """One task's files as XTREME's download script leaves them (templates under XTREME_DIR)."""

    name: str
    kind: str  # the reader's format: "pairs", "tagging", "qa", "bucc", "tatoeba"
    folder: str  # the task's folder under XTREME_DIR, checked first
    train: tuple[str, ...] | None  # English training data
    dev: tuple[str, ...] | None  # English dev: the data XTREME selects a checkpoint on
    test: tuple[str, ...] | None  # per language, `{lang}`: the data a submission predicts
    dev_by_language: tuple[str, ...] | None  # per language where XTREME ships it
    translate_train: tuple[str, ...] | None  # per language; never made by the download script
    labels: tuple[str, ...] | None = None  # the classes or tags, where fixed
    hint: str = _DOWNLOAD  # what to do when a file is missing
    # per language where XTREME ships training data in the test languages (in_language)
    train_by_language: tuple[str, ...] | None = None


LAYOUTS: dict[str, TaskLayout] = {
    layout.name: layout
    for layout in (
        TaskLayout(
            name="xnli",
            kind="pairs",
            folder="xnli",
            train=("xnli/train-en.tsv",),
            dev=("xnli/dev-en.tsv",),
            test=("xnli/test-{lang}.tsv",),
            dev_by_language=("xnli/dev-{lang}.tsv",),
            translate_train=("xnli/translate-train/en-{lang}-translated.tsv",),
            labels=("contradiction", "entailment", "neutral"),
        ),
        TaskLayout(
            name="pawsx",
            kind="pairs",
            folder="pawsx",
            train=("pawsx/train-en.tsv",),
            dev=("pawsx/dev-en.tsv",),
            test=("pawsx/test-{lang}.tsv",),
            dev_by_language=("pawsx/dev-{lang}.tsv",),
            translate_train=("pawsx/translate-train/en-{lang}-translated.tsv",),
            labels=("0", "1"),
        ),
        TaskLayout(
            name="panx",
            kind="tagging",
            folder="panx",
            train=("panx/train-en.tsv",),
            dev=("panx/dev-en.tsv",),
            test=("panx/test-{lang}.tsv",),
            dev_by_language=("panx/dev-{lang}.tsv",),
            translate_train=None,
            labels=("B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG", "I-PER", "O"),
            hint=_PANX_STEP,
            train_by_language=("panx/train-{lang}.tsv",),
        ),
        TaskLayout(
            name="udpos",
            kind="tagging",
            folder="udpos",
            train=("udpos/train-en.tsv",),
            dev=("udpos/dev-en.tsv",),
            test=("udpos/test-{lang}.tsv",),
            dev_by_language=("udpos/dev-{lang}.tsv",),
            translate_train=None,
            labels=_UPOS,
            train_by_language=("udpos/train-{lang}.tsv",),
        ),
        TaskLayout(
            name="squad",
            kind="qa",
            folder="squad",
            train=("squad/train-v1.1.json",),
            dev=("squad/dev-v1.1.json",),
            test=None,
            dev_by_language=None,
            translate_train=("squad/translate-train/squad.translate.train.en-{lang}.json",),
        ),
        TaskLayout(
            name="xquad",
            kind="qa",
            folder="xquad",
            train=("squad/train-v1.1.json",),
            dev=("squad/dev-v1.1.json",),
            test=("xquad/xquad.{lang}.json",),
            dev_by_language=None,
            translate_train=("squad/translate-train/squad.translate.train.en-{lang}.json",),
        ),
        TaskLayout(
            name="mlqa",
            kind="qa",
            folder="mlqa",
            train=("squad/train-v1.1.json",),
            dev=("squad/dev-v1.1.json",),
            test=("mlqa/MLQA_V1/test/test-context-{lang}-question-{lang}.json",),
            dev_by_language=("mlqa/MLQA_V1/dev/dev-context-{lang}-question-{lang}.json",),
            translate_train=("squad/translate-train/squad.translate.train.en-{lang}.json",),
        ),
        TaskLayout(
            name="tydiqa",
            kind="qa",
            folder="tydiqa",
            train=("tydiqa/tydiqa-goldp-v1.1-train/tydiqa.goldp.en.train.json",),
            dev=None,
            test=("tydiqa/tydiqa-goldp-v1.1-dev/tydiqa.goldp.{lang}.dev.json",),
            dev_by_language=None,
            translate_train=("tydiqa/translate-train/tydiqa.translate.train.en-{lang}.json",),
            train_by_language=("tydiqa/tydiqa-goldp-v1.1-train/tydiqa.goldp.{lang}.train.json",),
        ),
        TaskLayout(
            name="bucc2018",
            kind="bucc",
            folder="bucc2018",
            train=None,
            dev=None,
            test=("bucc2018/{lang}-en.test.{lang}", "bucc2018/{lang}-en.test.en"),
            dev_by_language=(
                "bucc2018/{lang}-en.dev.{lang}",
                "bucc2018/{lang}-en.dev.en",
                "bucc2018/{lang}-en.dev.gold",
            ),
            translate_train=None,
        ),
        TaskLayout(
            name="tatoeba",
            kind="tatoeba",
            folder="tatoeba",
            train=None,
            dev=None,
            test=("tatoeba/{lang}-en.{lang}", "tatoeba/{lang}-en.en"),
            dev_by_language=None,
            translate_train=None,
        ),
    )
}


# Every language an XTREME or XTREME-R task tests: where optional files are looked for.
ALL_LANGUAGES = tuple(
    sorted(
        {
            lang
            for version in VERSIONS.values()
            for task, languages in version.languages.items()
            if task in LAYOUTS
            for lang in languages
        }
    )
)


@dataclasses.dataclass(frozen=True)
class TaskFiles:
    """The files of one task found under XTREME_DIR: every required one (English train and dev
    where the task has them, test in each asked language) and the optional ones present."""

    layout: TaskLayout
    root: Path  # XTREME_DIR
    languages: tuple[str, ...]  # the test languages asked for
    train: Files | None
    dev: Files | None
    test: dict[str, Files]
    dev_by_language: dict[str, Files]  # only the languages whose dev files are all present
    translate_train: dict[str, Files]  # only the languages whose files are present
    train_by_language: dict[str, Files]  # likewise (English's is `train`)


def task_languages(task: str, version: str = "xtreme") -> tuple[str, ...]:
    """XTREME's (or XTREME-R's) test languages of `task`."""
    _layout(task)
    if version not in VERSIONS:
        raise ValueError(f"unknown XTREME version {version!r}: expected one of {tuple(VERSIONS)}")
    if not any(task in known.languages for known in VERSIONS.values()):
        return ()  # a source of training data alone (SQuAD): nothing tested
    languages = VERSIONS[version].languages.get(task)
    if languages is None:
        raise ValueError(f"{task} is not an XTREME-R task (XTREME-R drops PAWS-X and BUCC)")
    return languages


def find_task(
    xtreme_dir: str | os.PathLike,
    task: str,
    *,
    version: str = "xtreme",
    languages: Sequence[str] | None = None,
) -> TaskFiles:
    """The files of `task` under `xtreme_dir`, for `languages` (default: the version's list).

    Raises `DataError`, one line naming the folder and the missing files, when the task's folder,
    its English train or dev file, or a test file of an asked language is missing.
    """
    layout = _layout(task)
    if isinstance(languages, str):
        raise TypeError(f"languages must be a sequence, not the string {languages!r}")
    langs = tuple(languages) if languages is not None else task_languages(task, version)
    root = Path(xtreme_dir)
    if not (root / layout.folder).is_dir():
        expected = ", ".join((layout.train or ()) + (layout.dev or ()) + (layout.test or ()))
        raise DataError(
            f"no folder {root / layout.folder} for {task}: expected {expected} ({layout.hint})"
        )
    required = {"train": _fill(root, layout.train), "dev": _fill(root, layout.dev)}
    required |= {f"test-{lang}": _fill(root, layout.test, lang) for lang in langs}
    missing = [path for paths in required.values() for path in paths or () if not path.is_file()]
    if missing:
        names = ", ".join(str(path.relative_to(root)) for path in missing)
        raise DataError(f"{root}: {task} is missing {names} ({layout.hint})")
    return TaskFiles(
        layout=layout,
        root=root,
        languages=langs,
        train=required["train"],
        dev=required["dev"],
        test={lang: required[f"test-{lang}"] for lang in langs},
        dev_by_language=_present(root, layout.dev_by_language),
        translate_train=_present(root, layout.translate_train),
        train_by_language=_present(root, layout.train_by_language),
    )


def _layout(task: str) -> TaskLayout:
    try:
        return LAYOUTS[task]
    except KeyError:
        raise ValueError(
            f"unknown XTREME task {task!r}: expected one of {sorted(LAYOUTS)}"
        ) from None


def _fill(root: Path, templates: tuple[str, ...] | None, lang: str = "") -> Files | None:
    if templates is None:
        return None
    return tuple(root / template.format(lang=lang) for template in templates)


def _present(root: Path, templates: tuple[str, ...] | None) -> dict[str, Files]:
    """The languages (of any XTREME task) whose files of `templates` are all present."""
    found = {}
    for lang in ALL_LANGUAGES:
        paths = _fill(root, templates, lang)
        if paths and all(path.is_file() for path in paths):
            found[lang] = paths
    return found
