"""Extractive QA (SQuAD → XQuAD, MLQA, TyDiQA-GoldP): the answer's start and end in windows of
the context, the best span over every window mapped back to the context's characters, scored
by SQuAD v1.1's F1."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from xlpretrain.core.settings import Section
from xlpretrain.data.finetuning.qa_windows import (
    ANSWER_TEXTS,
    QAWindows,
    decode_answers,
    encode_questions,
)
from xlpretrain.data.finetuning.task_examples import QAExample
from xlpretrain.eval.xtreme import score
from xlpretrain.model.task_heads import SpanExtractor
from xlpretrain.objectives.task_losses import answer_boundaries, span_loss
from xlpretrain.tasks.declaration import Encoding, Head, TaskKind


@dataclasses.dataclass(frozen=True)
class QASettings:
    """`qa.*`: the windows (XTREME's `doc_stride`, `max_query_length`), the loss (`loss_over`:
    "window" or "tokens", `objectives.task_losses`) and the decoding (`n_best_size`,
    `max_answer_length`, `answer_text`: `qa_windows.ANSWER_TEXTS`), XTREME's by default
    (scripts/train_qa.sh, run_squad.py)."""

    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    loss_over: str = "window"
    answer_text: str = "words"


SECTION = Section(
    "qa",
    QASettings,
    {
        "doc_stride": (lambda v: v > 0, "must be > 0"),
        "max_query_length": (lambda v: v > 0, "must be > 0"),
        "n_best_size": (lambda v: v > 0, "must be > 0"),
        "max_answer_length": (lambda v: v > 0, "must be > 0"),
        "loss_over": (lambda v: v in ("window", "tokens"), "must be 'window' or 'tokens'"),
        "answer_text": (lambda v: v in ANSWER_TEXTS, f"must be one of {ANSWER_TEXTS}"),
    },
)


def no_labels(examples: Sequence[QAExample]) -> tuple[str, ...]:
    return ()


def encode(examples: Sequence[QAExample], encoding: Encoding) -> QAWindows:
    settings = encoding.settings
    return encode_questions(
        examples,
        encoding.tokenizer,
        layout=encoding.layout,
        training=encoding.training,
        max_length=encoding.max_length,
        doc_stride=settings.doc_stride,
        max_query_length=settings.max_query_length,
        lang_id=encoding.lang_ids[0],
        loss_over=settings.loss_over,
    )


def module(head: Head) -> SpanExtractor:
    return SpanExtractor(head.config, head.task_head)


def outputs(model: SpanExtractor, params, batch):
    return model.apply({"params": params}, batch)


def decode(logits, windows: QAWindows, examples, encoding: Encoding) -> list[str]:
    start, end = logits
    texts = decode_answers(
        start[: len(windows)],
        end[: len(windows)],
        windows,
        examples,
        n_best_size=encoding.settings.n_best_size,
        max_answer_length=encoding.settings.max_answer_length,
        answer_text=encoding.settings.answer_text,
    )
    return [texts[e.id] for e in examples]


def squad_f1(examples: Sequence[QAExample], predicted: Sequence[str]) -> float:
    questions = [(e.id, [a.text for a in e.answers]) for e in examples]
    predictions = dict(zip((e.id for e in examples), predicted, strict=True))
    return score.squad_em_f1(questions, predictions)["f1"]


KIND = TaskKind(
    name="question_answering",
    label_names=no_labels,
    encode=encode,
    module=module,
    loss=span_loss,
    count=answer_boundaries,
    outputs=outputs,
    decode=decode,
    score=squad_f1,
    section=SECTION,
)
