"""SQuAD v1.1 json, the format of every XTREME QA file (SQuAD, XQuAD, MLQA, TyDiQA-GoldP):
`{"data": [{"paragraphs": [{"context", "qas": [{"id", "question", "answers": [{"text",
"answer_start"}]}]}]}], "version"}`, `answer_start` counting the context's characters.

XTREME's test files have their answers removed (utils_preprocess.py's
`remove_qa_test_annotations`: each question in its own article, its answers replaced by the
placeholder `[{"answer_start": 0, "text": ""}]`); such a question reads as unlabelled (no
answers), and `write_squad_file` writes an unlabelled example the same way. Gold files (the
labels of a submission, SQuAD's and MLQA's dev) keep every answer, each checked to stand at its
`answer_start`, as that script asserts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

from xlpretrain.data.corpora.sources import DataError, FileStats
from xlpretrain.data.finetuning.task_examples import Answer, QAExample
from xlpretrain.data.xtreme.lines import BadLines

__all__ = ["read_squad_file", "write_squad_file"]

PLACEHOLDER = [{"answer_start": 0, "text": ""}]  # what XTREME leaves of a test question's answers


def read_squad_file(
    path: str | os.PathLike, *, training: bool
) -> tuple[list[QAExample], FileStats]:
    """The questions of a SQuAD-format file, in file order; `stats` counts questions.

    A training file skips and counts questions without an answer or with a malformed field or
    answer (one not found at its `answer_start`). In a reference (dev, test) such a question is an
    error naming the file and the question's number, as is an id given twice. A file that is not
    SQuAD json is an error either way.
    """
    bad = BadLines(path, training=training, unit="question")
    examples: list[QAExample] = []
    ids: set[str] = set()
    seen = 0
    for context, question in _questions(path, _load(path)):
        seen += 1
        problem = _problem(context, question, training)
        if problem is None and not training and question["id"] in ids:
            problem = f"id {question['id']!r} given twice"
        if problem is not None:
            qid = question.get("id") if isinstance(question, dict) else None
            bad.found(seen, "bad_fields", f"id {qid!r}: {problem}" if qid else problem)
            continue
        ids.add(question["id"])
        answers = () if question["answers"] == PLACEHOLDER else question["answers"]
        examples.append(
            QAExample(
                id=question["id"],
                question=question["question"],
                context=context,
                answers=tuple(Answer(a["text"], a["answer_start"]) for a in answers),
            )
        )
    return examples, bad.stats(seen, len(examples))


def write_squad_file(
    path: str | os.PathLike, examples: Sequence[QAExample], version: str = "1.1"
) -> None:
    """Writes `examples` as SQuAD json, one article per question as XTREME's test files are; an
    example without answers gets XTREME's placeholder answer."""
    data = [
        {
            "paragraphs": [
                {
                    "context": example.context,
                    "qas": [
                        {
                            "answers": [
                                {"answer_start": answer.start, "text": answer.text}
                                for answer in example.answers
                            ]
                            or PLACEHOLDER,
                            "id": example.id,
                            "question": example.question,
                        }
                    ],
                }
            ]
        }
        for example in examples
    ]
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"data": data, "version": version}, f, indent=2)
        f.write("\n")


def _load(path: str | os.PathLike) -> Any:
    if not os.path.isfile(path):
        raise DataError(f"no file {path}")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not valid UTF-8 (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: not valid json ({e.msg})") from None


def _questions(path: str | os.PathLike, content: Any) -> Iterator[tuple[str, dict]]:
    """(context, question) for each question; a file not shaped as SQuAD json is an error."""
    if not isinstance(content, dict) or not isinstance(content.get("data"), list):
        raise DataError(f"{path}: not SQuAD json (expected an object with a 'data' list)")
    for a, article in enumerate(content["data"]):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise DataError(f"{path}: not SQuAD json (article {a} has no 'paragraphs' list)")
        for p, paragraph in enumerate(paragraphs):
            shaped = isinstance(paragraph, dict) and isinstance(paragraph.get("context"), str)
            if not shaped or not isinstance(paragraph.get("qas"), list):
                where = f"article {a} paragraph {p}"
                raise DataError(f"{path}: not SQuAD json ({where} lacks a 'context' or 'qas')")
            for question in paragraph["qas"]:
                yield paragraph["context"], question


def _problem(context: str, question: Any, training: bool) -> str | None:
    """What is wrong with a question, or None."""
    if not isinstance(question, dict):
        return "not a json object"
    for field in ("id", "question"):
        if not isinstance(question.get(field), str) or not question[field]:
            return f"no {field!r} string"
    answers = question.get("answers")
    if not isinstance(answers, list):
        return "no 'answers' list"
    if answers == PLACEHOLDER or not answers:
        return "no answer (a test file's?)" if training else None
    for i, answer in enumerate(answers):
        text = answer.get("text") if isinstance(answer, dict) else None
        start = answer.get("answer_start") if isinstance(answer, dict) else None
        if not isinstance(text, str) or not text:
            return f"answer {i} has no 'text'"
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            return f"answer {i} has no integer 'answer_start'"
        if context[start : start + len(text)] != text:
            return f"answer {i} {text!r} is not at character {start} of the context"
    return None
