"""XTREME's submission layout: `OUT/predictions/<task>/test-<lang>.{tsv,json}`, and the gold in
the same layout under `OUT/labels/`, each file as google-research/xtreme's evaluate.py reads it
(`read_label`, `read_tag`, `read_squad`; see its mock_test_data/):

  xnli, pawsx   one label per line, in the test file's order (both folders)
  tatoeba       one 0-based index per line (both folders): for line i of `{lang}-en.en`, the
                line of `{lang}-en.{lang}` holding its translation (evaluate_retrieval.py
                searches the source sentences with each English one)
  panx, udpos   one tag per line, a blank line between sentences (both folders)
  bucc2018      one `source id<TAB>English id` pair per line (both folders)
  xquad, mlqa,  predictions: a json object mapping each question id to the answer text;
  tydiqa        labels: the SQuAD json of the test questions with their answers

evaluate.py compares the line-per-example files line by line, so a prediction file must follow
its test file's order and hold exactly its number of examples.

`OUT/dev_predictions/` and `OUT/dev_labels/` hold each language's dev set in the same layout
(file names included, `test-<lang>`), so that the same scorer scores the dev table.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xlpretrain.data.finetuning.task_examples import PairExample, QAExample, TaggedSentence
from xlpretrain.data.xtreme.layout import LAYOUTS
from xlpretrain.data.xtreme.retrieval import BuccSplit
from xlpretrain.data.xtreme.squad_json import write_squad_file

__all__ = [
    "submission_path",
    "write_id_pairs",
    "write_label_lines",
    "write_labels",
    "write_qa_predictions",
    "write_tag_lines",
]

FOLDERS = ("predictions", "labels", "dev_predictions", "dev_labels")


def submission_path(out: str | os.PathLike, folder: str, task: str, lang: str) -> Path:
    """`out/<folder>/<task>/test-<lang>.<json for QA, else tsv>`; `folder` is one of
    `FOLDERS`."""
    if folder not in FOLDERS:
        raise ValueError(f"folder must be one of {FOLDERS}, not {folder!r}")
    suffix = "json" if LAYOUTS[task].kind == "qa" else "tsv"
    return Path(out) / folder / task / f"test-{lang}.{suffix}"


def write_label_lines(path: str | os.PathLike, labels: Sequence[str | int]) -> None:
    """One label (class, or Tatoeba's index) per line."""
    _write_lines(path, [_field(label, "label") for label in labels])


def write_tag_lines(path: str | os.PathLike, sentences: Sequence[Sequence[str]]) -> None:
    """One tag per line, a blank line between sentences (none after the last)."""
    blocks = []
    for i, tags in enumerate(sentences):
        if not tags:
            raise ValueError(f"sentence {i} has no tags: evaluate.py's read_tag cannot hold it")
        blocks.append("\n".join(_field(tag, "tag") for tag in tags))
    _write_lines(path, ["\n\n".join(blocks)] if blocks else [])


def write_id_pairs(path: str | os.PathLike, pairs: Sequence[tuple[str, str]]) -> None:
    """One `source id<TAB>English id` per line (BUCC)."""
    _write_lines(path, [f"{_field(a, 'id')}\t{_field(b, 'id')}" for a, b in pairs])


def write_qa_predictions(path: str | os.PathLike, answers: Mapping[str, str]) -> None:
    """The answer text of each question id, as json (as XTREME's run_squad.py writes it)."""
    _parent(path)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(dict(answers), f, indent=4)
        f.write("\n")


def write_labels(
    out: str | os.PathLike,
    task: str,
    lang: str,
    gold: Sequence[PairExample | TaggedSentence | QAExample | int] | BuccSplit,
    folder: str = "labels",
) -> Path:
    """Writes one language's gold into `out/<folder>/<task>/` (`dev_labels` for a dev set):
    `gold` is the labelled examples (pairs, tagged sentences, answered questions), the
    `BuccSplit` with its gold pairs, or Tatoeba's gold indices. Returns the file's path."""
    path = submission_path(out, folder, task, lang)
    kind = LAYOUTS[task].kind
    if kind == "bucc":
        if not isinstance(gold, BuccSplit) or gold.gold is None:
            raise ValueError(f"{task} labels need a BuccSplit with its gold pairs")
        write_id_pairs(path, gold.gold)
    elif isinstance(gold, BuccSplit):
        raise ValueError(f"{task} labels are not a BuccSplit")
    elif kind == "tatoeba":
        write_label_lines(path, [_gold(index, int) for index in gold])
    elif kind == "pairs":
        write_label_lines(path, [_gold(example, PairExample) for example in gold])
    elif kind == "tagging":
        write_tag_lines(path, [_gold(example, TaggedSentence) for example in gold])
    else:
        _parent(path)
        write_squad_file(path, [_gold(example, QAExample) for example in gold])
    return path


def _gold(example: object, kind: type) -> Any:
    """What one gold example gives its labels file: a pair's label, a sentence's tags, an
    answered question, an index."""
    if isinstance(example, kind):
        if isinstance(example, int):
            return example
        if isinstance(example, PairExample) and example.label is not None:
            return example.label
        if isinstance(example, TaggedSentence) and example.labels is not None:
            return example.labels
        if isinstance(example, QAExample) and example.answers:
            return example
    raise ValueError(f"labels need labelled {kind.__name__}s, not {example!r}")


def _field(value: str | int, what: str) -> str:
    """A value as one tab- and line-free field (evaluate.py strips each line)."""
    text = str(value)
    if not text.strip() or text != text.strip() or any(c in text for c in "\t\n\r"):
        raise ValueError(f"{what} {value!r} cannot be written as one field of a line")
    return text


def _parent(path: str | os.PathLike) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)


def _write_lines(path: str | os.PathLike, lines: Sequence[str]) -> None:
    _parent(path)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(line + "\n" for line in lines)
