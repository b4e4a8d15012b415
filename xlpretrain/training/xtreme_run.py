"""XTREME's fine-tuning tasks end to end, as a library: `python -m xlpretrain.eval.xtreme run`.

For each task asked (`tasks`), in order: read its files as XTREME's download script leaves them
(`xlpretrain.data.xtreme`), fine-tune the pre-trained model on them in `OUT/<task>/` (a workdir
that checkpoints and resumes: `training.task_tuning`), predict every test language present into
XTREME's submission layout, `OUT/predictions/<task>/test-<lang>.{tsv,json}`, and every
language's dev set where XTREME ships one (XNLI, PAWS-X, PAN-X, UD-POS, MLQA) into
`OUT/dev_predictions/` with its gold in `OUT/dev_labels/` (the same layout), and write
`OUT/<task>/results.json` last: a task whose folder has it is done and is not redone when the
run is started again (after a kill, with more tasks). Then the predictions are scored as
google-research/xtreme's evaluate.py scores them (`eval.xtreme.score`): where test labels
are found, the test predictions into `OUT/results.json` (`score`'s JSON, as DESIGN's contract
says); always `OUT/dev_results.json`: `dev` (every language's dev set: the zero-shot dev table
papers print beside test) and `selected` (the dev score each fine-tuning selected its
checkpoint on, by dev language); the tables in `OUT/results.md`, each task per language in
`OUT/results.png`. A real download has no test labels (XTREME's utils_preprocess.py removes
them): the run then reports dev alone, and `OUT/predictions` is what the leaderboard takes.

The retrieval tasks (BUCC, Tatoeba) are not fine-tuned: the pre-trained model's sentence
embeddings predict them (`eval.xtreme.retrieval`), into the same layout, and `OUT/<task>/`
holds only their `results.json` (BUCC's threshold per language, chosen on its dev gold; the
dev pairs mined at it go to the dev table).

Protocols: `zero_shot` (XTREME's cross-lingual transfer: train on English, select on English
dev, test every language), `translate_train_all` (English and every translate-train file
present, XTREME's xtreme_translations placed as `data.xtreme` says) and `in_language` (one
fine-tuning per test language with training data of its own, in `OUT/<task>/<lang>/`, on that
language's training data, selected on its dev, predicting its test: PAN-X, UD-POS and
TyDiQA-GoldP, where XTREME ships such data; languages without it are not run). The test labels
scored against: `data.labels_dir` (`--labels`), else `XTREME_DIR/labels` if it exists, else the
test files' own labels (written to `OUT/labels/`) where they have them; none of these: no test
table.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import jax

from xlpretrain import api
from xlpretrain import tasks as task_kinds
from xlpretrain.core.errors import ConfigError
from xlpretrain.data.sources import DataError, format_stats
from xlpretrain.data.xtreme import (
    LAYOUTS,
    BuccSplit,
    TaskFiles,
    find_task,
    read_bucc,
    read_split,
    read_tatoeba,
    submission_path,
    write_id_pairs,
    write_label_lines,
    write_labels,
    write_qa_predictions,
    write_tag_lines,
)
from xlpretrain.data.xtreme.tagging import DEFAULT_LABELS
from xlpretrain.eval.xtreme import retrieval, score, tables
from xlpretrain.training import task_tuning
from xlpretrain.training.task_plan import XtremePlan

log = logging.getLogger("xlpretrain")
DONE = "results.json"  # in a task's folder, written last
DEV_RESULTS = "dev_results.json"  # in OUT: the dev table and each task's selection
# The task kind of each reader format (`TaskLayout.kind`) that fine-tunes.
KIND_OF_FORMAT = {
    "pairs": "sequence_classification",
    "tagging": "token_classification",
    "qa": "question_answering",
}
# The submission file's writer of each reader format (QA's takes {question id: answer}).
WRITERS = {
    "pairs": write_label_lines,
    "tagging": write_tag_lines,
    "qa": write_qa_predictions,
    "tatoeba": write_label_lines,
    "bucc": write_id_pairs,
}


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


def task_files(plan: XtremePlan, task: str) -> TaskFiles:
    """A task's files under XTREME_DIR, for every language whose test file is there (its
    `languages`)."""
    layout, root = LAYOUTS[task], Path(plan.data_dir)
    languages = languages_on_disk(root, layout.test[0])
    if not languages:
        raise DataError(f"{root}: no test file of {task} ({layout.test[0]}; {layout.hint})")
    return find_task(root, task, version=plan.version, languages=languages)


def task_runs(plan: XtremePlan, task: str) -> dict[str, task_tuning.TaskExamples]:
    """A task's fine-tuning runs under the run's protocol, by workdir under `OUT/<task>/` (""
    for that folder itself): one for `zero_shot` and `translate_train_all`, one per test
    language with training data of its own for `in_language`."""
    layout = LAYOUTS[task]
    files = task_files(plan, task)
    if plan.protocol == "in_language":
        return in_language_examples(files)
    train = _read(files, "train")
    if plan.protocol == "translate_train_all":
        if not files.translate_train:
            raise DataError(
                f"{files.root}: no translate-train file of {task}; the protocol "
                "translate_train_all trains on them "
                f"({', '.join(layout.translate_train or ('none shipped',))})"
            )
        for lang in files.translate_train:
            train += _read(files, "translate-train", lang)
    dev = _read(files, "dev") if files.dev else []
    tests = {lang: _read(files, "test", lang) for lang in files.languages}
    devs = dev_sets(files, sorted(files.dev_by_language))
    labels = tagging_labels(task, [train, dev, *tests.values(), *devs.values()])
    return {"": task_tuning.TaskExamples(train, dev, tests, devs=devs, labels=labels)}


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


def in_language_examples(files: TaskFiles) -> dict[str, task_tuning.TaskExamples]:
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
        runs[lang] = task_tuning.TaskExamples(
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


def write_predictions(
    out: Path, task: str, format: str, predicted: dict[str, Any], folder: str = "predictions"
) -> None:
    for lang, predictions in predicted.items():
        WRITERS[format](submission_path(out, folder, task, lang), predictions)


def write_gold(out: Path, task: str, gold: dict[str, Any], folder: str) -> None:
    """Each language's gold under `out/folder/` where it has one: a real download's test files
    have none, so nothing is written for them."""
    for lang, examples in gold.items():
        if isinstance(examples, BuccSplit) or all(_labelled(e) for e in examples):
            write_labels(out, task, lang, examples, folder)


@dataclasses.dataclass(frozen=True)
class Retrieved:
    """A retrieval task's predictions per test language on disk (BUCC: mined id pairs,
    Tatoeba: indices); BUCC's dev pairs mined at its threshold, their gold, and per language
    what chose the threshold (its dev scores)."""

    test: dict[str, Any]
    dev: dict[str, Any]
    dev_gold: dict[str, Any]
    chosen: dict[str, Any]


def retrieval_predictions(plan: XtremePlan, task: str, model: api.Model) -> Retrieved:
    """A retrieval task's predictions (`Retrieved`), language by language."""
    layout = LAYOUTS[task]
    files = task_files(plan, task)
    settings = plan.retrieval[task]
    found = Retrieved({}, {}, {}, {})
    for number, lang in enumerate(files.languages, 1):
        log.info("%s: %s (%d/%d)", task, lang, number, len(files.languages))
        if layout.kind == "tatoeba":
            split = read_tatoeba(*files.test[lang])
            found.test[lang] = retrieval.tatoeba_indices(model, split, lang, settings)
            continue
        dev_files = files.dev_by_language.get(lang)
        if dev_files is None:
            raise DataError(
                f"{files.root}: {task} {lang} has no dev split "
                f"({', '.join(layout.dev_by_language)}): its gold pairs choose the threshold "
                "the test split is mined at"
            )
        dev, test = read_bucc(*dev_files), read_bucc(*files.test[lang])
        found.test[lang], found.dev[lang], chosen = retrieval.bucc_pairs(
            model, dev, test, lang, settings
        )
        found.dev_gold[lang], found.chosen[lang] = dev, chosen
        log.info(
            "%s: %s: threshold %s, dev F1 %.4f, %d test pairs mined",
            task,
            lang,
            chosen["threshold"],
            chosen["f1"],
            len(found.test[lang]),
        )
    return found


def run_retrieval_task(plan: XtremePlan, task: str, out: Path) -> dict[str, Any]:
    """Predicts and records one retrieval task (see the module docstring); its results."""
    settings = plan.retrieval[task]
    model = api.load(plan.init_path, batch_size=settings.batch_size)
    if not 0 <= settings.layer <= model.config.num_layers:
        raise ConfigError(
            f"config key '{task}.layer': {settings.layer}, but the model at {plan.init_path} has "
            f"states 0 to {model.config.num_layers} (0: the embeddings' output)"
        )
    found = retrieval_predictions(plan, task, model)
    result = {"layer": settings.layer, "pooling": settings.pooling, "dev": found.chosen}
    if jax.process_index() == 0:
        write_predictions(out, task, LAYOUTS[task].kind, found.test)
        write_predictions(out, task, LAYOUTS[task].kind, found.dev, "dev_predictions")
        write_gold(out, task, found.dev_gold, "dev_labels")
        _write_done(out / task, result)
    return result


def _write_done(folder: Path, result: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (DONE + ".tmp")
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(tmp, folder / DONE)


def _labelled(example: Any) -> bool:
    return bool(getattr(example, "answers", None) or getattr(example, "labels", None)) or (
        getattr(example, "label", None) is not None
    )


def run_task(plan: XtremePlan, task: str, out: Path, devices=None) -> dict[str, Any] | None:
    """Fine-tunes, predicts and records one task (see the module docstring); its results, or
    None when a preemption notice stopped it (run again to resume)."""
    folder = out / task
    if (folder / DONE).is_file():
        log.info("%s: done already (%s); not redone", task, folder / DONE)
        return json.loads((folder / DONE).read_text())
    if task in plan.retrieval:
        return run_retrieval_task(plan, task, out)
    log.info("%s: reading %s", task, plan.data_dir)
    runs, format = task_runs(plan, task), LAYOUTS[task].kind
    results, predicted, dev_predicted, tests, devs = {}, {}, {}, {}, {}
    for number, (name, examples) in enumerate(runs.items(), 1):
        if name:
            log.info("%s: %s (%d/%d)", task, name, number, len(runs))
        result = fine_tune(plan, task, folder / name, examples, devices)
        if result is None:
            return None
        predicted |= result.pop("predictions")
        dev_predicted |= result.pop("dev_predictions")
        results[name], tests = result, tests | dict(examples.tests)
        devs |= examples.devs
    result = results.pop("") if "" in results else {"languages": results}
    if jax.process_index() == 0:
        write_predictions(out, task, format, predicted)
        write_gold(out, task, tests, "labels")
        write_predictions(out, task, format, dev_predicted, "dev_predictions")
        write_gold(out, task, devs, "dev_labels")
        _write_done(folder, result)
    return result


def fine_tune(
    plan: XtremePlan,
    task: str,
    workdir: Path,
    examples: task_tuning.TaskExamples,
    devices=None,
) -> dict[str, Any] | None:
    """One fine-tuning run of `task` in `workdir`: its results with each test language's
    predictions (`"predictions"`; QA's by question id), or None when it stopped short."""
    format = LAYOUTS[task].kind
    kind = task_kinds.get(KIND_OF_FORMAT[format])
    prepared = task_tuning.prepare(
        plan.init_path,
        kind,
        examples,
        max_length=plan.max_lengths[task],
        settings=plan.settings,
        plug_in=plan.plug_in,
    )
    own = plan.task_plan(task, len(prepared.train_rows))
    result = task_tuning.run(
        task_tuning.build(own, str(workdir), kind, examples, prepared, devices)
    )
    if result is not None and format == "qa":
        for key, sets in (("predictions", examples.tests), ("dev_predictions", examples.devs)):
            result[key] = {
                lang: {e.id: p for e, p in zip(sets[lang], answers, strict=True)}
                for lang, answers in result[key].items()
            }
    return result


def labels_folder(plan: XtremePlan, out: Path) -> Path | None:
    """What the test predictions are scored against (see the module docstring); None where no
    test labels are found (a real download)."""
    if plan.labels_dir:
        return Path(plan.labels_dir)
    for folder in (Path(plan.data_dir) / "labels", out / "labels"):
        if folder.is_dir():
            return folder
    return None


def check_labels(plan: XtremePlan) -> None:
    """`DataError` before any task runs when `data.labels_dir` (`--labels`) is not a folder."""
    if plan.labels_dir and not Path(plan.labels_dir).is_dir():
        raise DataError(
            f"labels folder {plan.labels_dir} (data.labels_dir, --labels) does not exist or is "
            "not a folder: expected <task>/test-<lang>.<tsv|json>, as evaluate.py's --label_folder"
        )


def selection(tasks: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each fine-tuned task's checkpoint selection by dev language: the step kept and its dev
    score (None: no dev set, the last step). A run's dev language is its training language:
    English but for in_language, which selects on each language's own dev."""
    selected = {}
    for task, result in tasks.items():
        runs = result.get("languages", {"": result})
        chosen = {
            run["train_language"]: {"step": run["selected_step"], "score": run["dev"]}
            for run in runs.values()
            if "selected_step" in run
        }
        if chosen:
            selected[task] = chosen
    return selected


@dataclasses.dataclass(frozen=True)
class RunResults:
    """A finished run: each task's fine-tuning results, evaluate.py's report on every
    language's dev set (None if no task has one) and on test (None without test labels), the
    test labels' folder, and each task's selection (`selection`)."""

    tasks: dict[str, dict[str, Any]]
    dev: score.Report | None
    test: score.Report | None
    labels: Path | None
    selected: dict[str, dict[str, Any]]

    def json(self) -> dict[str, Any]:
        """Every table of the run: `selected`, `dev` and, where test labels were found, `test`
        (what `results.md` and `results.png` draw)."""
        tables = {"dev": self.dev, "test": self.test}
        found = {name: report.results for name, report in tables.items() if report is not None}
        return {"selected": self.selected, **found}


def run(plan: XtremePlan, out: str | os.PathLike, devices=None) -> RunResults | None:
    """Runs every task of the plan, then scores every language's dev set and, where test
    labels are found, `OUT/predictions`; None when a task stopped short of its steps (a
    preemption notice, `train.stop_at`)."""
    check_labels(plan)
    out = Path(out)
    results = {}
    for number, task in enumerate(plan.tasks, 1):
        log.info("task %d/%d: %s", number, len(plan.tasks), task)
        result = run_task(plan, task, out, devices)
        if result is None:
            return None
        results[task] = result
    dev, dev_gold = out / "dev_predictions", out / "dev_labels"
    has_dev = dev.is_dir() and dev_gold.is_dir()
    dev_report = score.score(dev, dev_gold, plan.version) if has_dev else None
    labels = labels_folder(plan, out)
    test = score.score(out / "predictions", labels, plan.version) if labels else None
    finished = RunResults(results, dev_report, test, labels, selection(results))
    if jax.process_index() == 0:
        written = finished.json()
        if test is not None:
            (out / "results.json").write_text(json.dumps(written.pop("test"), indent=2))
        (out / DEV_RESULTS).write_text(json.dumps(written, indent=2))
    return finished


def write_tables(finished: RunResults, out: str | os.PathLike, model: str) -> None:
    """`OUT/results.md` and `OUT/results.png` from the run's results."""
    if jax.process_index() != 0:
        return
    out = Path(out)
    (out / "results.md").write_text(tables.report_markdown(finished.json(), model))
    tables.plot(finished.json(), str(out / "results.png"), title=model)
