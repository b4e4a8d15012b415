"""XTREME's official numbers from prediction files: what google-research/xtreme's evaluate.py
writes, key for key and value for value, for XTREME and XTREME-R.

Both folders hold one sub-folder per task and one file per language, `<task>/test-<lang>.<ext>`
(`tsv`, `json` for QA and Mewsli-X, `jsonl` for XCOPA), read as evaluate.py reads them. Each task
scores every language whose file is in both folders, with its metric (`TASKS`). A task's
averages are over the version's languages among them; the group scores and `all_task` average
the tasks that have all of the version's languages (`VERSIONS`). Where every task has them,
the result is evaluate.py's; where evaluate.py would crash (a language missing, a language it
does not list) this scores what is there and leaves the incomplete task out of the group
scores. Folders of tasks the version does not know are ignored, as evaluate.py ignores them.

Ported from google-research/xtreme's evaluate.py and third_party/utils_mewslix.py (Apache-2.0);
span F1 is seqeval's, as there.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from xlpretrain.core.errors import require
from xlpretrain.data.xtreme.versions import VERSIONS, Version
from xlpretrain.eval.xtreme import answers

Scores = dict[str, float]

# --- Reading, as evaluate.py reads each format. ------------------------------------------------


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 ({error.reason} at byte {error.start})") from None


def _lines(path: Path) -> list[str]:
    """The file's lines as iterating over it yields them (universal newlines; a last line
    without a newline counts, nothing after a last newline does)."""
    lines = _text(path).split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def read_lines(path: Path) -> list[str]:
    """One example per line, stripped; blank lines count (evaluate.py's `read_label`)."""
    return [line.strip() for line in _lines(path)]


def read_tags(path: Path) -> list[list[str]]:
    """One tag per line, a blank line after each sentence (evaluate.py's `read_tag`: every blank
    line ends a sentence, so two in a row make an empty one)."""
    sentences, sentence = [], []
    for line in read_lines(path):
        if line:
            sentence.append(line)
        else:
            sentences.append(sentence)
            sentence = []
    return sentences + ([sentence] if sentence else [])


def read_json(path: Path) -> Any:
    """A JSON file; its "data" if it has one (evaluate.py's `read_squad`)."""
    try:
        value = json.loads(_text(path))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}:{error.lineno}: not JSON ({error.msg})") from None
    return value["data"] if isinstance(value, dict) and "data" in value else value


def read_jsonl_labels(path: Path) -> list[Any]:
    """Each line's "label" (XCOPA: evaluate.py's `read_xcopa`)."""
    labels = []
    for number, line in enumerate(_lines(path), 1):
        try:
            labels.append(json.loads(line)["label"])
        except (json.JSONDecodeError, TypeError, KeyError) as error:
            raise ValueError(f"{path}:{number}: not a JSON object with a label ({error})") from None
    return labels


def _mapping(value: Any, path: Path, of: type, what: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(v, of) for v in value.values()):
        raise ValueError(f"{path}: expected a JSON object of {what}")
    return value


def read_answers(path: Path) -> dict[str, str]:
    """QA predictions: `{question id: answer text}`."""
    return _mapping(read_json(path), path, str, "question id: answer text")


def read_questions(path: Path) -> list[answers.Question]:
    """QA labels in SQuAD's format: each question's id and gold answers' texts."""
    try:
        questions = [
            (qa["id"], [answer["text"] for answer in qa["answers"]])
            for article in read_json(path)
            for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]
        ]
    except (KeyError, TypeError) as error:
        raise ValueError(
            f"{path}: not SQuAD-format labels (data, paragraphs, qas, id, answers, text): "
            f"missing {error}"
        ) from None
    if unanswerable := next((qid for qid, truths in questions if not truths), None):
        raise ValueError(f"{path}: question {unanswerable} has no gold answer")
    return questions


def read_entity_lists(path: Path) -> dict[str, list[str]]:
    """Mewsli-X: `{mention id: [entity id, ...]}` (labels: one gold entity; predictions: ranked
    candidates)."""
    return _mapping(read_json(path), path, list, "mention id: list of entity ids")


# --- Metrics, per file. ------------------------------------------------------------------------


def accuracy(labels: Sequence[Any], predictions: Sequence[Any]) -> Scores:
    """Share of examples whose prediction equals the label, in percent."""
    if not predictions:
        raise ValueError("no examples to score")
    correct = sum(int(p == label) for p, label in zip(predictions, labels, strict=True))
    return {"accuracy": float(correct) / len(predictions) * 100}


def span_f1(labels: Sequence[Sequence[str]], predictions: Sequence[Sequence[str]]) -> Scores:
    """seqeval's span F1, precision and recall (its default, lenient chunking), in percent, as
    XTREME scores both PAN-X and UD-POS. A POS tag like PRON has no B-/I- prefix, so seqeval
    reads its first letter as the chunk tag (P) and the rest as the type (RON): UD-POS's number
    is span F1 over such chunks, not tag accuracy."""
    metrics = require("seqeval.metrics", "Scoring PAN-X and UD-POS (span F1)")
    with warnings.catch_warnings():  # "PRON seems not to be NE tag", once per POS tag
        warnings.filterwarnings("ignore", message=".* seems not to be NE tag", category=UserWarning)
        f1 = metrics.f1_score(labels, predictions)
        precision = metrics.precision_score(labels, predictions)
        recall = metrics.recall_score(labels, predictions)
    return {
        "f1": float(f1) * 100,
        "precision": float(precision) * 100,
        "recall": float(recall) * 100,
    }


def bucc_f1(labels: Sequence[str], predictions: Sequence[str]) -> Scores:
    """F1 of the predicted sentence-id pairs (`src<TAB>trg` lines, as sets) against the gold
    pairs, in percent."""
    gold = {tuple(line.split("\t")) for line in labels}
    mined = {tuple(line.split("\t")) for line in predictions}
    correct = len(gold & mined)
    if correct == 0:
        return {"f1": 0, "precision": 0, "recall": 0}
    precision, recall = correct / len(mined), correct / len(gold)
    f1 = 2 * precision * recall / (precision + recall)
    return {"f1": f1 * 100, "precision": precision * 100, "recall": recall * 100}


def mean_reciprocal_rank_at(
    gold: Mapping[str, Sequence[str]], predictions: Mapping[str, Sequence[str]], k: int = 20
) -> float:
    """Mewsli-X: the mean over gold mentions of 1/rank of the gold entity among the first `k`
    predicted (0 if not there, or the mention has no prediction)."""
    ranks = []
    for mention, entities in gold.items():
        if not entities:
            raise ValueError(f"mention {mention} has no gold entity")
        top = list(predictions.get(mention, []))[:k]
        found = entities[0].strip()
        ranks.append(next((1.0 / rank for rank, e in enumerate(top, 1) if e == found), 0.0))
    return sum(ranks) / len(ranks) if ranks else 0.0


def mewslix_map20(
    gold: Mapping[str, Sequence[str]], predictions: Mapping[str, Sequence[str]]
) -> Scores:
    return {"map@20": mean_reciprocal_rank_at(gold, predictions, k=20) * 100}


def squad_em_f1(questions: Sequence[answers.Question], predictions: Mapping[str, str]) -> Scores:
    return answers.em_f1(questions, predictions, answers.normalize_squad)


def mlqa_em_f1(
    questions: Sequence[answers.Question], predictions: Mapping[str, str], language: str
) -> Scores:
    return answers.em_f1(questions, predictions, answers.mlqa_normalizer(language))


# --- Checks that predictions and labels line up. ------------------------------------------------


def same_length(what: str) -> Callable[[Sequence[Any], Path, Sequence[Any], Path], None]:
    """A check that both files hold as many `what` (evaluate.py asserts it)."""

    def check(predictions: Sequence[Any], at: Path, labels: Sequence[Any], gold: Path) -> None:
        if len(predictions) != len(labels):
            raise ValueError(f"{at} has {len(predictions)} {what}, {gold} has {len(labels)}")

    return check


def same_sentences(
    predictions: Sequence[Sequence[str]], at: Path, labels: Sequence[Sequence[str]], gold: Path
) -> None:
    """As many sentences in both files, each with as many tags."""
    same_length("sentences")(predictions, at, labels, gold)
    line = 1  # where sentence i starts: each sentence is its tags and one blank line
    for index, (predicted, tags) in enumerate(zip(predictions, labels, strict=True)):
        if len(predicted) != len(tags):
            raise ValueError(
                f"{at}:{line}: sentence {index + 1} has {len(predicted)} tags, {gold} has "
                f"{len(tags)}"
            )
        line += len(tags) + 1


# --- The tasks and the versions of the benchmark. ----------------------------------------------


@dataclasses.dataclass(frozen=True)
class Task:
    """How one task's files are read and scored."""

    suffix: str  # of its files: test-<lang>.<suffix>
    read_labels: Callable[[Path], Any]
    read_predictions: Callable[[Path], Any]
    metric: Callable[[Any, Any, str], Scores]  # (labels, predictions, language)
    check: Callable[[Any, Path, Any, Path], None] | None = None  # that the two files line up


def _any_language(metric: Callable[[Any, Any], Scores]) -> Callable[[Any, Any, str], Scores]:
    return lambda labels, predictions, language: metric(labels, predictions)


_CLASSIFICATION = Task("tsv", read_lines, read_lines, _any_language(accuracy), same_length("lines"))
_TAGGING = Task("tsv", read_tags, read_tags, _any_language(span_f1), same_sentences)
_SQUAD = Task("json", read_questions, read_answers, _any_language(squad_em_f1))
TASKS: dict[str, Task] = {
    "pawsx": _CLASSIFICATION,
    "xnli": _CLASSIFICATION,
    "panx": _TAGGING,
    "udpos": _TAGGING,
    "bucc2018": Task("tsv", read_lines, read_lines, _any_language(bucc_f1)),
    "tatoeba": _CLASSIFICATION,
    "xquad": _SQUAD,
    "mlqa": Task("json", read_questions, read_answers, mlqa_em_f1),
    "tydiqa": _SQUAD,
    "mewslix": Task("json", read_entity_lists, read_entity_lists, _any_language(mewslix_map20)),
    "xcopa": Task(
        "jsonl",
        read_jsonl_labels,
        read_jsonl_labels,
        _any_language(accuracy),
        same_length("examples"),
    ),
}  # LAReQA is in XTREME-R's task list but evaluate.py has no metric for it: never scored.


# --- Scoring files, tasks and folders. ---------------------------------------------------------


def score_file(task: str, predictions: Path, labels: Path, language: str) -> Scores:
    """One language of one task: its metric's values, in percent."""
    spec = TASKS[task]
    gold, predicted = spec.read_labels(labels), spec.read_predictions(predictions)
    if spec.check is not None:
        spec.check(predicted, predictions, gold, labels)
    try:
        return spec.metric(gold, predicted, language)
    except ValueError as error:
        raise ValueError(f"{predictions}: {error}") from None


def languages_in(folder: Path, suffix: str) -> set[str]:
    """The languages of the `test-<lang>.<suffix>` files in `folder`."""
    found = (path.name[len("test-") : -len(suffix) - 1] for path in folder.glob(f"test-*.{suffix}"))
    return {language for language in found if language}


def headline(task: str, averages: Scores, version: Version) -> float | None:
    """A task's `avg_metric`: the mean of exact match and F1 for QA, else its F1, accuracy or
    MAP@20, whichever it has (None if it has no score)."""
    if task in version.groups["qa"]:
        return (averages["avg_exact_match"] + averages["avg_f1"]) / 2
    for name in ("avg_f1", "avg_accuracy", "avg_map@20"):
        if name in averages:
            return averages[name]
    return None


def task_scores(
    task: str, languages: Sequence[str], version: Version, predictions: Path, labels: Path
) -> dict[str, Any]:
    """evaluate.py's entry for a task: each metric per language, then `avg_<metric>` over the
    version's languages among `languages`, then `avg_metric`."""
    scores: dict[str, Any] = {}
    for language in languages:
        name = f"test-{language}.{TASKS[task].suffix}"
        values = score_file(task, predictions / task / name, labels / task / name, language)
        for metric, value in values.items():
            scores.setdefault(metric, {})[language] = value
    averaged = [language for language in languages if language in version.languages[task]]
    if averaged:
        averages = {
            f"avg_{metric}": sum(values[lg] for lg in averaged) / len(averaged)
            for metric, values in scores.items()
        }
        scores.update(averages)
        if (metric := headline(task, averages, version)) is not None:
            scores["avg_metric"] = metric
    return scores


@dataclasses.dataclass(frozen=True)
class Report:
    """What `score` found: evaluate.py's JSON and what the JSON does not say."""

    results: dict[str, Any]  # group scores (and all_task), then each task's scores
    missing: dict[str, tuple[str, ...]]  # task: the version's languages it was not scored in
    ignored: tuple[str, ...]  # folders and files not scored, each with why


def _folders(path: Path, what: str) -> set[str]:
    if not path.is_dir():
        raise FileNotFoundError(f"{what} folder {path} does not exist or is not a folder")
    return {child.name for child in path.iterdir() if child.is_dir()}


def _languages(
    task: str, listed: Sequence[str], predictions: Path, labels: Path
) -> tuple[list[str], list[str]]:
    """The languages of `task` to score, those of `listed` (in its order) first, and the files
    left out (in one folder only, or of a task evaluate.py has no metric for)."""
    if task not in TASKS:
        return [], [f"{task}/ (evaluate.py has no metric for it)"]
    suffix = TASKS[task].suffix
    predicted, gold = languages_in(predictions / task, suffix), languages_in(labels / task, suffix)
    both = predicted & gold
    one_sided = [
        f"{task}/test-{language}.{suffix} (only in {side})"
        for side, here, there in (("predictions", predicted, gold), ("labels", gold, predicted))
        for language in sorted(here - there)
    ]
    return [lg for lg in listed if lg in both] + sorted(both - set(listed)), one_sided


def score(predictions: Path, labels: Path, version: str = "xtreme") -> Report:
    """Scores every task of `version` whose folder is in both `predictions` and `labels`."""
    if version not in VERSIONS:
        raise ValueError(f"unknown XTREME version {version!r}: one of {', '.join(VERSIONS)}")
    spec, predictions, labels = VERSIONS[version], Path(predictions), Path(labels)
    predicted, gold = _folders(predictions, "predictions"), _folders(labels, "labels")
    known = set(spec.languages)
    ignored = [f"{name}/ (not an {version} task)" for name in sorted((predicted | gold) - known)]
    ignored += [
        f"{name}/ (only in {'predictions' if name in predicted else 'labels'})"
        for name in sorted((predicted ^ gold) & known)
    ]
    details, missing = {}, {}
    for task, listed in spec.languages.items():
        if task in predicted and task in gold:
            languages, left_out = _languages(task, listed, predictions, labels)
            ignored += left_out
            if absent := tuple(lg for lg in listed if lg not in languages):
                missing[task] = absent
            details[task] = task_scores(task, languages, spec, predictions, labels)
    return Report({**_overall(details, missing, spec), **details}, missing, tuple(ignored))


def _overall(details: dict[str, Any], missing: Mapping[str, Any], version: Version) -> Scores:
    """`all_task` when every task is complete, and each group whose tasks all are: the mean of
    their `avg_metric`s. A complete task has all the version's languages and a score."""
    complete = {t for t, s in details.items() if t not in missing and "avg_metric" in s}

    def mean(tasks: Sequence[str]) -> float:
        return sum(details[task]["avg_metric"] for task in tasks) / len(tasks)

    overall = {}
    if complete == set(version.languages):
        overall["all_task"] = mean(list(version.languages))
    for group, tasks in version.groups.items():
        if set(tasks) <= complete:
            overall[group] = mean(tasks)
    return overall
