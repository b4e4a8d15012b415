"""The examples of the fine-tuning tasks, as the readers of XTREME's files give them and as the
task kinds encode, decode and score them: one type per kind of task, plain data.

A sentence(-pair) example is classified; a tagged sentence gets one label per word (XTREME's
words, as its files split them); a question is answered by a span of its context's characters.
Test files may carry no labels (a submission's inputs): `labels` / `answers` are then None / ().
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class PairExample:
    """One classified sentence pair (XNLI, PAWS-X); `text_b` is empty for a single sentence."""

    text_a: str
    text_b: str
    label: str | None


@dataclasses.dataclass(frozen=True)
class TaggedSentence:
    """One sentence of a tagging task (PAN-X, UD-POS): its words and, in a labelled file, one
    label per word."""

    words: tuple[str, ...]
    labels: tuple[str, ...] | None

    def __post_init__(self) -> None:
        if self.labels is not None and len(self.labels) != len(self.words):
            raise ValueError(f"{len(self.words)} words but {len(self.labels)} labels")


@dataclasses.dataclass(frozen=True)
class Answer:
    """An answer span: its text and the index of its first character in the context."""

    text: str
    start: int


@dataclasses.dataclass(frozen=True)
class QAExample:
    """One extractive question (SQuAD, XQuAD, MLQA, TyDiQA-GoldP) with its gold answers (the
    first is trained on; all count when scoring)."""

    id: str
    question: str
    context: str
    answers: tuple[Answer, ...] = ()


@dataclasses.dataclass(frozen=True)
class PairLayout:
    """How a family lays two segments into one row, as its Hugging Face tokenizer does:
    XLM-R `<s> A </s></s> B </s>` (two separators, no token types), BERT `[CLS] A [SEP] B [SEP]`
    with token type 1 on B's part and its [SEP], ModernBERT the same without token types.
    A backbone declaration states its own."""

    separators: int  # eos tokens between the segments: 2 (XLM-R) or 1 (BERT, ModernBERT)
    token_types: bool  # whether the second segment's tokens carry token type 1
