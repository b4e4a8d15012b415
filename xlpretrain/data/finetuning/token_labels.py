"""Tagged sentences (PAN-X, UD-POS) as rows of word-labelled tokens, and the rows' predictions
back as one label per word: XTREME's `utils_preprocess.py` (`panx_tokenize_preprocess`,
`udpos_tokenize_preprocess`), `third_party/utils_tag.py` and `third_party/run_tag.py`
(google-research/xtreme, Apache-2.0), ported.

Each word is tokenized on its own; its label sits on its first sub-token, the others carry no
label (weight 0), as do the special tokens. A row is `<s> tokens </s>`, and `<s> tokens </s></s>`
for a family whose pairs take two separators (XLM-R): XTREME's `sep_token_extra`, which run_tag
sets for roberta and xlmr, ends even a single sentence with two `</s>` (kept, odd as it is).

No word is ever cut off. XTREME splits a sentence whose sub-tokens exceed `max_length` less the
special tokens *before* tokenizing it into rows: greedily, a word that would overflow the current
piece starts the next one, and its `.idx` file lets `save_predictions` join the pieces' labels
back into the sentence. So `utils_tag`'s own truncation never fires and every word gets a
prediction; here a sentence likewise becomes one or more rows, and `decode_tags` joins them.
A word that tokenizes to nothing, or to more sub-tokens than a row holds, becomes one `<unk>`,
as XTREME's preprocessing writes it (XTREME's files never hold an empty word; here an empty
word is an `<unk>` too, so it keeps its label).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from xlpretrain.data.finetuning.task_examples import PairLayout, TaggedSentence
from xlpretrain.data.finetuning.task_rows import Batch, row_batch
from xlpretrain.data.tokenizer import Tokenizer


@dataclasses.dataclass(frozen=True)
class TaggedRows:
    """Sentences as rows. Row r holds piece of sentence `sentence_ids[r]`; `word_ids[r][t]` is
    the index (in its sentence) of the word whose first sub-token is token t, -1 for every
    other token; `label_ids[r][t]` that word's label id (0 elsewhere, and in unlabelled rows)."""

    rows: list[np.ndarray]
    word_ids: list[np.ndarray]
    label_ids: list[np.ndarray]
    sentence_ids: np.ndarray
    labelled: np.ndarray  # per row: whether its sentence came with labels
    num_words: np.ndarray  # per sentence
    max_length: int
    pad_id: int
    lang_id: int

    def __len__(self) -> int:
        return len(self.rows)

    def batch(self, indices: np.ndarray) -> Batch:
        """`[len(indices), max_length]` rows (index -1: padding) with `labels` and
        `label_weights`, 1 on each labelled word's first sub-token (what the token
        classification loss averages over)."""
        batch = row_batch(
            self.rows, indices, max_length=self.max_length, pad_id=self.pad_id,
            lang_id=self.lang_id,
        )  # fmt: skip
        shape = batch["input_ids"].shape
        batch["labels"] = np.zeros(shape, np.int32)
        batch["label_weights"] = np.zeros(shape, np.float32)
        for row, index in enumerate(indices):
            if index < 0:
                continue
            n = len(self.rows[index])
            batch["labels"][row, :n] = self.label_ids[index]
            batch["label_weights"][row, :n] = (self.word_ids[index] >= 0) & self.labelled[index]
        return batch


def special_count(layout: PairLayout) -> int:
    """Special tokens of a tagged row: `<s>`, `</s>`, and XTREME's extra `</s>` for a family of
    two separators (`sep_token_extra`)."""
    return 3 if layout.separators == 2 else 2


def word_pieces(sentence: TaggedSentence, tokenizer: Tokenizer, budget: int) -> list[np.ndarray]:
    """Each word's sub-token ids, a word of none or of more than `budget` being one `<unk>`."""
    unknown = np.array([tokenizer.unk_id], np.int32)
    pieces = tokenizer.encode_batch(list(sentence.words), num_threads=1)
    return [ids if 0 < len(ids) <= budget else unknown for ids in pieces]


def split_sentence(pieces: Sequence[np.ndarray], budget: int) -> list[range]:
    """The words of each row: XTREME's greedy split, a word whose sub-tokens would overflow the
    current row starting the next."""
    spans, start, used = [], 0, 0
    for i, ids in enumerate(pieces):
        if used + len(ids) > budget:
            spans.append(range(start, i))
            start, used = i, 0
        used += len(ids)
    spans.append(range(start, len(pieces)))
    return spans


def encode_tagged(
    sentences: Sequence[TaggedSentence],
    tokenizer: Tokenizer,
    label_ids: dict[str, int],
    *,
    max_length: int,
    layout: PairLayout,
    lang_id: int = 0,
) -> TaggedRows:
    """Every sentence as one row or more (see the module docstring). A label outside
    `label_ids` is a `ValueError` naming the sentence."""
    extra = special_count(layout) - 2
    budget = max_length - special_count(layout)
    if budget < 1:
        raise ValueError(f"max_length={max_length} leaves no room for a word")
    bos, eos = tokenizer.bos_id, tokenizer.eos_id
    rows, word_ids, labels, sentence_ids, labelled = [], [], [], [], []
    for s, sentence in enumerate(sentences):
        unknown = set(sentence.labels or ()) - set(label_ids)
        if unknown:
            raise ValueError(
                f"sentence {s}: label(s) {sorted(unknown)} not among {list(label_ids)}"
            )
        pieces = word_pieces(sentence, tokenizer, budget)
        for span in split_sentence(pieces, budget):
            ids, words, row_labels = [bos], [-1], [0]
            for w in span:
                n = len(pieces[w])
                ids.extend(pieces[w])
                words.extend([w] + [-1] * (n - 1))
                label = label_ids[sentence.labels[w]] if sentence.labels is not None else 0
                row_labels.extend([label] + [0] * (n - 1))
            tail = 1 + extra
            rows.append(np.array(ids + [eos] * tail, np.int32))
            word_ids.append(np.array(words + [-1] * tail, np.int32))
            labels.append(np.array(row_labels + [0] * tail, np.int32))
            sentence_ids.append(s)
            labelled.append(sentence.labels is not None)
    return TaggedRows(
        rows, word_ids, labels, np.array(sentence_ids, np.int64), np.array(labelled, bool),
        np.array([len(s.words) for s in sentences], np.int64), max_length, tokenizer.pad_id,
        lang_id,
    )  # fmt: skip


def decode_tags(
    predictions: np.ndarray, rows: TaggedRows, label_names: Sequence[str]
) -> list[list[str]]:
    """One label per word of each sentence, the prediction at the word's first sub-token, the
    rows of a sentence joined (run_tag's `preds_list` through `save_predictions`).
    `predictions`: logits `[len(rows), L, C]` or label ids `[len(rows), L]`, L ≥ every row."""
    predictions = np.asarray(predictions)
    if predictions.ndim == 3:
        predictions = predictions.argmax(-1)
    if predictions.shape[0] != len(rows):
        raise ValueError(f"{predictions.shape[0]} rows of predictions for {len(rows)} rows")
    tags: list[list[str | None]] = [[None] * int(n) for n in rows.num_words]
    for r, words in enumerate(rows.word_ids):
        first = np.flatnonzero(words >= 0)
        sentence = tags[rows.sentence_ids[r]]
        for t, w in zip(first.tolist(), words[first].tolist(), strict=True):
            sentence[w] = label_names[int(predictions[r, t])]
    return tags  # type: ignore[return-value]  # every word is some row's (encode_tagged)
