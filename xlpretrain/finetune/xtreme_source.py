"""An XTREME task's examples, as its download script leaves them under XTREME_DIR
(`xlpretrain.data.xtreme`), for each fine-tuning run a protocol makes of it: `zero_shot` (train
on English, select on English dev, test every language present), `translate_train_all` (English
and every translate-train file present) and `in_language` (one run per test language with
training data of its own, selected on its own dev)."""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path
from typing import Any

from xlpretrain.data.corpora.sources import DataError, format_stats
from xlpretrain.data.xtreme import LAYOUTS, TaskFiles, TaskLayout, find_task, read_split
from xlpretrain.data.xtreme.tagging import DEFAULT_LABELS
from xlpretrain.finetune.examples import TaskExamples

log = logging.getLogger("xlpretrain")
PROTOCOLS = ("zero_shot", "translate_train_all", "in_language")
# What each protocol trains on beside English, where XTREME ships it (`TaskLayout`'s field).
PROTOCOL_DATA = {
    "translate_train_all": ("translate_train", "translate-train data"),
    "in_language": ("train_by_language", "training data in the test languages"),
}


@dataclasses.dataclass(frozen=True)
class XtremeSource:
    """Task `layout.name`'s files under XTREME_DIR."""

    layout: TaskLayout

    @property
    def protocols(self) -> tuple[str, ...]:
        """The protocols XTREME ships this task's data for."""
        return tuple(
            name
            for name in PROTOCOLS
            if name not in PROTOCOL_DATA or getattr(self.layout, PROTOCOL_DATA[name][0])
        )

    def files(self, data_dir: str, version: str) -> TaskFiles:
        """The task's files under `data_dir`, for every language whose test file is there."""
        layout, root = self.layout, Path(data_dir)
        languages = languages_on_disk(root, layout.test[0])
        if not languages:
            raise DataError(
                f"{root}: no test file of {layout.name} ({layout.test[0]}; {layout.hint})"
            )
        return find_task(root, layout.name, version=version, languages=languages)

    def runs(self, plan: Any, task: str) -> dict[str, TaskExamples]:
        """The task's fine-tuning runs under the protocol of `plan` (a `plan.FineTunePlan`), by
        workdir under `OUT/<task>/` ("" for that folder itself): one for `zero_shot` and
        `translate_train_all`, one per test language with training data of its own for
        `in_language`."""
        layout, files = self.layout, self.files(plan.data_dir, plan.version)
        protocol = plan.protocol
        if protocol == "in_language":
            return in_language_examples(files)
        train = _read(files, "train")
        if protocol == "translate_train_all":
            if not files.translate_train:
                raise DataError(
                    f"{files.root}: no translate-train file of {layout.name}; the protocol "
                    "translate_train_all trains on them "
                    f"({', '.join(layout.translate_train or ('none shipped',))})"
                )
            for lang in files.translate_train:
                train += _read(files, "translate-train", lang)
        dev = _read(files, "dev") if files.dev else []
        tests = {lang: _read(files, "test", lang) for lang in files.languages}
        devs = dev_sets(files, sorted(files.dev_by_language))
        labels = tagging_labels(layout.name, [train, dev, *tests.values(), *devs.values()])
        return {"": TaskExamples(train, dev, tests, devs=devs, labels=labels)}


def languages_on_disk(root: Path, template: str) -> tuple[str, ...]:
    """The languages whose file of `template` (a path under `root` with `{lang}`) exists."""
    pattern = re.escape(template).replace(re.escape("{lang}"), "(?P<lang>[^/]+?)", 1)
    pattern = pattern.replace(re.escape("{lang}"), "(?P=lang)")
    glob = template.replace("{lang}", "*")
    found = set()
    for path in root.glob(glob):
        match = re.fullmatch(pattern, path.relative_to(root).as_posix())
        if match:
            found.add(match["lang"])
    return tuple(sorted(found))


def _read(files: TaskFiles, split: str, lang: str | None = None) -> list[Any]:
    examples, stats = read_split(files, split, lang)
    for line in format_stats({f"{split} {lang or ''}".strip(): stats}):
        log.info("data: %s: %s", files.layout.name, line)
    return examples


def tagging_labels(task: str, files: list[list[Any]]) -> tuple[str, ...]:
    """A tagging task's label set as XTREME's `preprocess_panx.sh` / `preprocess_udpos.sh`
    build its `labels.txt`, from every file of the task (an unlabelled sentence's words have
    the preprocessing's default label, `DEFAULT_LABELS`), sorted, and `utils_tag.get_labels`
    puts `O` first where it is missing; () for the other tasks (the training set's labels)."""
    if task not in DEFAULT_LABELS:
        return ()
    found: set[str] = set()
    for sentences in files:
        for sentence in sentences:
            found.update(sentence.labels or (DEFAULT_LABELS[task],))
    labels = sorted(found)
    return tuple(labels if "O" in labels else ["O", *labels])


def dev_sets(files: TaskFiles, languages: list[str]) -> dict[str, list[Any]]:
    """The dev set of each of `languages` that has one: what the dev table scores (a real
    download's test files have no labels, its dev files do)."""
    return {lang: _read(files, "dev", lang) for lang in languages if lang in files.dev_by_language}


def in_language_examples(files: TaskFiles) -> dict[str, TaskExamples]:
    """Per test language with training data (English's `train`, the others' where XTREME
    ships them): its own training data, its own dev (where shipped) and its test."""
    task = files.layout.name
    trained = [lang for lang in files.languages if lang == "en" or lang in files.train_by_language]
    if not trained:
        raise DataError(
            f"{files.root}: no test language of {task} has training data of its own, which the "
            f"protocol in_language trains on ({', '.join(files.layout.train_by_language)})"
        )
    if untrained := sorted(set(files.languages) - set(trained)):
        log.warning("%s: no training data in %s: not run (in_language)", task, ", ".join(untrained))
    runs = {}
    for lang in trained:
        own_dev = files.dev if lang == "en" else files.dev_by_language.get(lang)
        runs[lang] = TaskExamples(
            _read(files, "train", lang),
            _read(files, "dev", None if lang == "en" else lang) if own_dev else [],
            {lang: _read(files, "test", lang)},
            train_language=lang,
            dev_language=lang,
            devs=dev_sets(files, [lang]),
        )
    # One label set for every language's run, from all of the task's files, as XTREME's.
    every = [e.train for e in runs.values()] + [e.dev for e in runs.values()]
    every += [t for e in runs.values() for t in e.tests.values()]
    every += list(dev_sets(files, sorted(files.dev_by_language or ())).values())
    labels = tagging_labels(task, every)
    return {lang: dataclasses.replace(e, labels=labels) for lang, e in runs.items()}


def source(task: str) -> XtremeSource:
    """XTREME's files of `task` (`data.xtreme.LAYOUTS`)."""
    return XtremeSource(LAYOUTS[task])
