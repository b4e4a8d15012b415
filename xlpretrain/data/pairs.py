"""Labelled sentence pairs (XNLI, PAWS-X): the files, their rows, and the batch of each step.

A file holds one `premise<TAB>hypothesis<TAB>label` per line, no header. Lines that are empty,
not UTF-8 or not three non-blank fields are skipped and counted, as the pre-training sources do.

A pair is one row. Plugged out: one segment as the family's tokenizer lays a pair out (XLM-R's
`<s> x </s></s> y </s>`, BERT's `[CLS] x [SEP] y [SEP]` with token type 1 on `y [SEP]`),
positions continuous from 2. Plugged in (VECO, needs a cross-attention model): two segments
`<s> x </s>` and `<s> y </s>` of one pair (`pair_ids` 1, `side` 0/1), positions from 2 in
each, so each side's s stream reads the other side's h stream. Either way each side's tokens
carry its own language id, as pre-training's TLM rows do (read only by models with language
embeddings).

A training step's rows are a pure function of (seed, step): the pairs are read in a fresh
permutation each epoch, so a resumed run draws exactly what an uninterrupted one would, and
each process builds only its own share of the rows.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import numpy as np

from xlpretrain.data.examples import FIRST_POSITION, PAD_POSITION
from xlpretrain.data.sources import DataError, FileStats
from xlpretrain.data.task_examples import PairLayout
from xlpretrain.data.tokenizer import Tokenizer

Batch = dict[str, np.ndarray]
XLMR_LAYOUT = PairLayout(separators=2, token_types=False)  # what the pair files were made for
TASK = "classify"  # the batches' key: the fine-tuning step's one objective


@dataclasses.dataclass
class PairSet:
    """The usable lines of one `premise<TAB>hypothesis<TAB>label` file."""

    premises: list[str]
    hypotheses: list[str]
    labels: list[str]
    stats: FileStats


def read_pairs(path: str) -> PairSet:
    """Reads a labelled pair file; bad lines are skipped and counted in `stats`."""
    if not os.path.isfile(path):
        raise DataError(f"no file {path}")
    with open(path, "rb") as f:
        raw_lines = f.read().splitlines()
    premises, hypotheses, labels = [], [], []
    problems: dict[str, list[int]] = {"empty": [], "invalid_utf8": [], "bad_fields": []}
    for number, raw in enumerate(raw_lines, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            problems["invalid_utf8"].append(number)
            continue
        fields = line.split("\t")
        if not line.strip():
            problems["empty"].append(number)
        elif len(fields) != 3 or not all(field.strip() for field in fields):
            problems["bad_fields"].append(number)
        else:
            premises.append(fields[0])
            hypotheses.append(fields[1])
            labels.append(fields[2].strip())
    stats = FileStats(
        path=path,
        total=len(raw_lines),
        used=len(labels),
        **{kind: len(lines) for kind, lines in problems.items()},
        examples={kind: lines[:5] for kind, lines in problems.items() if lines},
    )
    if not labels:
        raise DataError(f"{path} has no usable line ({stats.problems() or 'the file is empty'})")
    return PairSet(premises, hypotheses, labels, stats)


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

    def majority_rate(self) -> float:
        """The share of the most frequent label: the accuracy of always answering it, the
        chance level accuracy is read against."""
        return float(np.bincount(self.label_ids).max() / len(self.label_ids))

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


def encode_pairs(
    pairs: PairSet,
    tokenizer: Tokenizer,
    label_ids: dict[str, int],
    *,
    max_length: int,
    plug_in: bool,
    lang_ids: tuple[int, int] = (0, 0),
    layout: PairLayout = XLMR_LAYOUT,
) -> Encoded:
    """Tokenizes every pair of a file (`encode_texts`); a label outside `label_ids` is an error
    naming the file."""
    unknown = sorted(set(pairs.labels) - set(label_ids))
    if unknown:
        raise DataError(
            f"{pairs.stats.path}: label(s) {unknown} are not among the labels {list(label_ids)}"
        )
    labels = np.array([label_ids[label] for label in pairs.labels], np.int32)
    return encode_texts(
        pairs.premises, pairs.hypotheses, labels, tokenizer,
        max_length=max_length, plug_in=plug_in, lang_ids=lang_ids, layout=layout,
    )  # fmt: skip


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


@dataclasses.dataclass
class PairBatches:
    """`step → {TASK: this process's rows of the step's batch}`, for `pipeline.make_dataset`.

    Global row r of step s is pair `permutation_e[(s · batch_size + r) mod n]` with
    e = (s · batch_size + r) div n: every pair once per epoch, in an order drawn from
    (seed, epoch) alone."""

    data: Encoded
    batch_size: int  # global rows per step
    seed: int
    process_index: int = 0
    process_count: int = 1
    _permutations: dict[int, np.ndarray] = dataclasses.field(default_factory=dict, repr=False)

    def __call__(self, step: int) -> dict[str, Batch]:
        rows = self.batch_size // self.process_count
        first = step * self.batch_size + self.process_index * rows
        epochs, offsets = np.divmod(np.arange(first, first + rows), len(self.data))
        indices = np.empty(rows, np.int64)
        for epoch in np.unique(epochs).tolist():
            chosen = epochs == epoch
            indices[chosen] = self._permutation(epoch)[offsets[chosen]]
        return {TASK: self.data.batch(indices)}

    def _permutation(self, epoch: int) -> np.ndarray:
        """Epoch `epoch`'s order, kept for the steps that follow (a step spans at most two
        epochs' orders, and steps arrive in order)."""
        if epoch not in self._permutations:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.data))
            self._permutations = {e: p for e, p in self._permutations.items() if e >= epoch - 1}
            self._permutations[epoch] = order
        return self._permutations[epoch]
