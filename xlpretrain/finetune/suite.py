"""A suite of fine-tuning tasks end to end, as a library: `python -m xlpretrain.finetune run`.

For each task asked (`tasks`, of the `registry`), in order: read its examples from its source
(XTREME's files as its download script leaves them, or a user's folder), fine-tune the
pre-trained model on them in `OUT/<task>/` (a workdir that checkpoints and resumes:
`finetune.task_run`), predict every test language present into
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

A user's task (a folder source: `pairs`, `tagging`, `extractive_qa`) runs zero-shot from its
`train_language`, selects on that folder's dev file where there is one, and is scored here, by
its kind's metric beside chance where the kind has one (`user_scores`), into
`OUT/<task>/results.json`: evaluate.py knows only XTREME's tasks, so no gold of it is written.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np

from xlpretrain import api
from xlpretrain import tasks as task_kinds
from xlpretrain.core.errors import ConfigError
from xlpretrain.data.corpora.sources import DataError
from xlpretrain.data.xtreme import BuccSplit, read_bucc, read_tatoeba, write_labels
from xlpretrain.eval.xtreme import retrieval, score, tables
from xlpretrain.finetune import registry, task_run
from xlpretrain.finetune.examples import TaskExamples
from xlpretrain.finetune.plan import FineTunePlan

log = logging.getLogger("xlpretrain")
DONE = "results.json"  # in a task's folder, written last
DEV_RESULTS = "dev_results.json"  # in OUT: the dev table and each task's selection


def write_predictions(
    out: Path, task: str, predicted: dict[str, Any], folder: str = "predictions"
) -> None:
    """Each language's predictions in `out/folder/<task>/test-<lang>.<tsv|json>`, XTREME's
    submission layout, by the task's writer."""
    entry = registry.get(task)
    for lang, predictions in predicted.items():
        entry.writer(out / folder / task / f"test-{lang}.{entry.suffix}", predictions)


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


def retrieval_predictions(plan: FineTunePlan, task: str, model: api.Model) -> Retrieved:
    """A retrieval task's predictions (`Retrieved`), language by language."""
    files = registry.get(task).source.files(plan.data_dir, plan.version)
    layout = files.layout
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


def run_retrieval_task(plan: FineTunePlan, task: str, out: Path) -> dict[str, Any]:
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
        write_predictions(out, task, found.test)
        write_predictions(out, task, found.dev, "dev_predictions")
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


def run_task(plan: FineTunePlan, task: str, out: Path, devices=None) -> dict[str, Any] | None:
    """Fine-tunes, predicts and records one task (see the module docstring); its results, or
    None when a preemption notice stopped it (run again to resume)."""
    folder = out / task
    if (folder / DONE).is_file():
        log.info("%s: done already (%s); not redone", task, folder / DONE)
        return json.loads((folder / DONE).read_text())
    if task in plan.retrieval:
        return run_retrieval_task(plan, task, out)
    log.info("%s: reading %s", task, plan.data_dir)
    runs = registry.get(task).source.runs(plan, task)
    results, predicted, dev_predicted, tests, devs = {}, {}, {}, {}, {}
    for number, (name, examples) in enumerate(runs.items(), 1):
        if name:
            log.info("%s: %s (%d/%d)", task, name, number, len(runs))
        result = fine_tune(plan, task, folder / name, examples, devices)
        if result is None:
            return None
        predicted |= result.pop("predictions")
        dev_predicted |= result.pop("dev_predictions")
        if examples.predict_train:
            scores = user_scores(task, examples, predicted, result.pop("train_predictions"))
            result = {**result, **scores}
        results[name], tests = result, tests | dict(examples.tests)
        devs |= examples.devs
    result = results.pop("") if "" in results else {"languages": results}
    if jax.process_index() == 0:
        write_predictions(out, task, predicted)
        write_predictions(out, task, dev_predicted, "dev_predictions")
        if not registry.get(task).users:  # scored by evaluate.py's
            write_gold(out, task, tests, "labels")
            write_gold(out, task, devs, "dev_labels")
        _write_done(folder, result)
    return result


def user_scores(
    task: str, examples: TaskExamples, predicted: dict[str, Any], train_predicted: list[Any]
) -> dict[str, Any]:
    """A user's task's scores, in percent, each beside chance where its kind has one: the
    training examples' (`train`) and every labelled test language's (`languages`), and their
    average; logged as they are."""
    kind = task_kinds.get(registry.get(task).kind)

    def scored(gold, predictions) -> dict[str, Any]:
        figures = {"metric": kind.score(gold, predictions), "n": len(gold)}
        return figures | ({"chance": kind.chance(gold)} if kind.chance else {})

    train = scored(examples.train, train_predicted)
    languages = {
        lang: scored(gold, predicted[lang])
        for lang, gold in examples.tests.items()
        if all(_labelled(e) for e in gold)
    }
    found = {"train": train, "languages": languages}
    if languages:
        found["average"] = float(np.mean([r["metric"] for r in languages.values()]))
        if kind.chance:
            found["average_chance"] = float(np.mean([r["chance"] for r in languages.values()]))
    for name, figures in {"training set": train, **languages}.items():
        own = "; the training language" if name == examples.train_language else ""
        chance = f"chance {figures['chance']:.2f}, " if "chance" in figures else ""
        log.info("%s %s: %.2f (%s%d examples%s)", task, name, figures["metric"], chance,
                 figures["n"], own)  # fmt: skip
    if languages:
        chance = f" (chance {found['average_chance']:.2f})" if kind.chance else ""
        log.info("%s: average over %d languages %.2f%s", task, len(languages), found["average"],
                 chance)  # fmt: skip
    return found


def fine_tune(
    plan: FineTunePlan,
    task: str,
    workdir: Path,
    examples: TaskExamples,
    devices=None,
) -> dict[str, Any] | None:
    """One fine-tuning run of `task` in `workdir`: its results with each test language's
    predictions (`"predictions"`; QA's by question id), or None when it stopped short."""
    kind = task_kinds.get(registry.get(task).kind)
    prepared = task_run.prepare(
        plan.init_path,
        kind,
        examples,
        max_length=plan.own[task].max_length,
        settings=plan.kind_settings.get(kind.name),
        plug_in=plan.model.plug_in,
    )
    own = plan.task_plan(task, len(prepared.train_rows))
    result = task_run.run(task_run.build(own, str(workdir), kind, examples, prepared, devices))
    if result is not None and kind is task_kinds.qa.KIND:
        for key, sets in (("predictions", examples.tests), ("dev_predictions", examples.devs)):
            result[key] = {
                lang: {e.id: p for e, p in zip(sets[lang], answers, strict=True)}
                for lang, answers in result[key].items()
            }
    return result


def labels_folder(plan: FineTunePlan, out: Path) -> Path | None:
    """What the test predictions are scored against (see the module docstring); None where no
    test labels are found (a real download)."""
    if plan.labels_dir:
        return Path(plan.labels_dir)
    for folder in (Path(plan.data_dir) / "labels", out / "labels"):
        if folder.is_dir():
            return folder
    return None


def check_labels(plan: FineTunePlan) -> None:
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

    @property
    def xtreme(self) -> bool:
        """Whether any task was XTREME's (scored by evaluate.py, drawn in `results.md`)."""
        return any(not registry.get(task).users for task in self.tasks)

    def json(self) -> dict[str, Any]:
        """Every table of the run: `selected`, `dev` and, where test labels were found, `test`
        (what `results.md` and `results.png` draw)."""
        tables = {"dev": self.dev, "test": self.test}
        found = {name: report.results for name, report in tables.items() if report is not None}
        return {"selected": self.selected, **found}


def run(plan: FineTunePlan, out: str | os.PathLike, devices=None) -> RunResults | None:
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


def user_lines(finished: RunResults) -> list[str]:
    """Each user task's scores beside chance, a line a language (its kind's metric, in
    percent), then the average: what `run` prints of them."""
    lines = []
    for task, result in finished.tasks.items():
        if not registry.get(task).users:
            continue
        lines.append(f"{task} ({registry.get(task).kind}), trained on {result['train_language']}:")
        for name, figures in {"train": result["train"], **result["languages"]}.items():
            chance = f"  chance {figures['chance']:6.2f}" if "chance" in figures else ""
            lines.append(f"  {name:<12} {figures['metric']:6.2f}{chance}  ({figures['n']})")
        if "average" in result:
            chance = (
                f"  chance {result['average_chance']:6.2f}" if "average_chance" in result else ""
            )
            lines.append(f"  {'average':<12} {result['average']:6.2f}{chance}")
        lines.append(f"  (scores of every language: {task}/results.json)")
        lines.append("")
    return lines


def write_tables(finished: RunResults, out: str | os.PathLike, model: str) -> None:
    """`OUT/results.md` and `OUT/results.png` from the run's results, where XTREME's tasks
    ran."""
    if jax.process_index() != 0 or not finished.xtreme:
        return
    out = Path(out)
    (out / "results.md").write_text(tables.report_markdown(finished.json(), model))
    tables.plot(finished.json(), str(out / "results.png"), title=model)
