"""Sentence pairs as rows (XNLI, PAWS-X, a user's pair folder): how a classified pair is
tokenized and laid out for the encoder, whatever file it came from (`data.xtreme` reads them).

A pair is one row. Plugged out: one segment as the family's tokenizer lays a pair out (XLM-R's
`<s> x </s></s> y </s>`, BERT's `[CLS] x [SEP] y [SEP]` with token type 1 on `y [SEP]`),
positions continuous from 2. Plugged in (VECO, needs a cross-attention model): two segments
`<s> x </s>` and `<s> y </s>` of one pair (`pair_ids` 1, `side` 0/1), positions from 2 in
each, so each side's s stream reads the other side's h stream. Either way each side's tokens
carry its own language id, as pre-training's TLM rows do (read only by models with language
embeddings).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from xlpretrain.data.finetuning.task_examples import PairLayout
from xlpretrain.data.pretraining.examples import FIRST_POSITION, PAD_POSITION
from xlpretrain.data.tokenizer import Tokenizer

Batch = dict[str, np.ndarray]
XLMR_LAYOUT = PairLayout(separators=2, token_types=False)  # what the pair files were made for


def _truncate(a: int, b: int, budget: int) -> tuple[int, int]:
    """Lengths to keep: the longer side loses tokens first, neither goes below half."""
    if a + b <= budget:
        return a, b
    half = budget // 2
    if a <= half:
        return a, budget - a
    if b <= half:
        return budget - b, b
    return budget - half, half


@dataclasses.dataclass
class Encoded:
    """Tokenized pairs: `rows[i]` is a whole row, its second side starting at `splits[i]`."""

    rows: list[np.ndarray]
    splits: np.ndarray
    label_ids: np.ndarray
    lang_ids: tuple[int, int]  # of the first and the second side
    max_length: int
    plug_in: bool
    pad_id: int  # the tokenizer's
    token_types: bool = False  # the second side carries token type 1 (BERT)

    def __len__(self) -> int:
        return len(self.rows)

    def batch(self, indices: np.ndarray) -> Batch:
        """A `[len(indices), max_length]` batch; index -1 is a padding row. `pred_weights` is 1
        for a real row, 0 for padding: one prediction per row, as the step counts them."""
        shape = (len(indices), self.max_length)
        first_lang, second_lang = self.lang_ids
        batch = {
            "input_ids": np.full(shape, self.pad_id, np.int32),
            "positions": np.full(shape, PAD_POSITION, np.int32),
            "segment_ids": np.zeros(shape, np.int32),
            "pair_ids": np.zeros(shape, np.int32),
            "side": np.zeros(shape, np.int32),
            "lang_ids": np.full(shape, first_lang, np.int32),
            "token_types": np.zeros(shape, np.int32),
            "labels": np.zeros(len(indices), np.int32),
            "pred_weights": np.zeros(len(indices), np.float32),
        }
        for row, index in enumerate(indices):
            if index < 0:
                continue
            ids, split = self.rows[index], self.splits[index]
            steps = np.arange(len(ids))
            second = steps >= split
            batch["input_ids"][row, : len(ids)] = ids
            batch["pair_ids"][row, : len(ids)] = 1
            batch["side"][row, : len(ids)] = second
            batch["lang_ids"][row, : len(ids)] = np.where(second, second_lang, first_lang)
            if self.token_types:
                batch["token_types"][row, : len(ids)] = second
            if self.plug_in:  # two segments, positions restarting in each
                batch["segment_ids"][row, : len(ids)] = 1 + second
                restarted = np.where(second, steps - split, steps)
                batch["positions"][row, : len(ids)] = FIRST_POSITION + restarted
            else:
                batch["segment_ids"][row, : len(ids)] = 1
                batch["positions"][row, : len(ids)] = FIRST_POSITION + steps
            batch["labels"][row] = self.label_ids[index]
            batch["pred_weights"][row] = 1.0
        return batch


def encode_texts(
    firsts: Sequence[str],
    seconds: Sequence[str],
    label_ids: np.ndarray,
    tokenizer: Tokenizer,
    *,
    max_length: int,
    plug_in: bool,
    lang_ids: tuple[int, int] = (0, 0),
    layout: PairLayout = XLMR_LAYOUT,
) -> Encoded:
    """Tokenizes every pair, truncated to `max_length` tokens with the special ones: plugged
    out, one row as the family's `layout` has it (`<s> x </s></s> y </s>`; `[CLS] x [SEP] y
    [SEP]`, y's part of token type 1 where the family has token types); plugged in (VECO),
    `<s> x </s>` + `<s> y </s>`."""
    bos, eos = tokenizer.bos_id, tokenizer.eos_id
    opening = [bos] if plug_in else [eos] * (layout.separators - 1)  # the second side's
    rows, splits = [], []
    xs = tokenizer.encode_batch(list(firsts))
    ys = tokenizer.encode_batch(list(seconds))
    for x, y in zip(xs, ys, strict=True):
        keep_x, keep_y = _truncate(len(x), len(y), max_length - 3 - len(opening))
        first = [bos, *x[:keep_x], eos]
        second = [*opening, *y[:keep_y], eos]
        rows.append(np.array(first + second, np.int32))
        splits.append(len(first))
    labels = np.asarray(label_ids, np.int32)
    return Encoded(
        rows, np.array(splits), labels, lang_ids, max_length, plug_in, tokenizer.pad_id,
        token_types=layout.token_types and not plug_in,
    )  # fmt: skip
