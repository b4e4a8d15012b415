"""Synthetic rows for the benchmark: full rows of regular ids laid out as the pipeline lays
out a row kind's, with the shapes of its fields (`StreamSpec.batch_shapes`).

A row kind fakes its batch (`RowKind.synthesise`) from these pieces, so the benchmark times a
step of any kind without a corpus. A step's time does not depend on which ids it reads, so the
special ids are those of a SentencePiece vocabulary of `vocab_size` ids, whatever tokenizer
the run has.
"""

from __future__ import annotations

import numpy as np

from xlpretrain.data.pretraining.batch import (
    PREDICTION_FIELDS,
    SIDE_PLACEHOLDER,
    SIDE_TARGET,
    TOKEN_FIELDS,
    Batch,
)
from xlpretrain.data.pretraining.examples import FIRST_POSITION, PAD_POSITION
from xlpretrain.data.pretraining.masking import regular_ids
from xlpretrain.data.tokenizer import SentencePieceTokenizer


def one_segment(rows: int, length: int, vocab_size: int, rng: np.random.Generator) -> Batch:
    """Token fields of `rows` full rows `<s> … </s>` of `length` regular ids, one segment each."""
    special = SentencePieceTokenizer.layout(vocab_size)
    batch = {name: np.zeros((rows, length), dtype) for name, dtype in TOKEN_FIELDS.items()}
    specials = np.unique(special.all())
    draws = rng.integers(0, vocab_size - len(specials), (rows, length))
    batch["input_ids"] = regular_ids(draws, specials).astype(np.int32)
    batch["input_ids"][:, 0], batch["input_ids"][:, -1] = special.bos, special.eos
    batch["positions"][:] = FIRST_POSITION + np.arange(length)
    batch["segment_ids"][:] = batch["pair_ids"][:] = 1
    return batch


def two_segments(batch: Batch, vocab_size: int) -> Batch:
    """`one_segment`'s rows split into x and y, two segments of one pair (VECO's layout)."""
    special = SentencePieceTokenizer.layout(vocab_size)
    length = batch["input_ids"].shape[1]
    half = length // 2
    batch["input_ids"][:, half - 1], batch["input_ids"][:, half] = special.eos, special.bos
    batch["positions"][:, half:] = FIRST_POSITION + np.arange(length - half)
    batch["segment_ids"][:, half:] = 2
    batch["side"][:, half:] = SIDE_TARGET
    return batch


def predicted(
    batch: Batch, count: int, slots: int, vocab_size: int, rng: np.random.Generator
) -> Batch:
    """`batch` with `count` regular tokens of each row predicted (at random places), gathered
    in `slots` prediction slots."""
    special = SentencePieceTokenizer.layout(vocab_size)
    rows = batch["input_ids"].shape[0]
    regular = np.flatnonzero(~np.isin(batch["input_ids"][0], [special.bos, special.eos]))
    chosen = rng.permuted(np.tile(regular, (rows, 1)), axis=1)
    chosen = np.sort(chosen[:, :count], axis=1).astype(np.int32)
    np.put_along_axis(batch["is_masked"], chosen, 1, axis=1)
    labels = np.take_along_axis(batch["input_ids"], chosen, axis=1)
    np.put_along_axis(batch["labels"], chosen, labels, axis=1)
    batch["label_weights"] = batch["is_masked"].astype(np.float32)
    for name, value in (("pred_positions", chosen), ("pred_labels", labels), ("pred_weights", 1)):
        batch[name] = np.zeros((rows, slots), PREDICTION_FIELDS[name])
        batch[name][:, :count] = value
    return batch


def with_placeholders(batch: Batch, length: int, count: int, slots: int, vocab_size: int) -> Batch:
    """`batch`'s rows padded to `length` tokens, `count` BTMLM placeholders right after each
    row's segment, and the fields BTMLM's passes read: the unmasked source and `slots`
    placeholder slots."""
    special = SentencePieceTokenizer.layout(vocab_size)
    rows, used = batch["input_ids"].shape
    for name in TOKEN_FIELDS:
        batch[name] = np.pad(batch[name], ((0, 0), (0, length - used)))
    tail = slice(used, used + count)
    batch["input_ids"][:, used:] = special.pad
    batch["input_ids"][:, tail] = special.mask
    batch["positions"][:, used:] = PAD_POSITION
    batch["positions"][:, tail] = FIRST_POSITION + np.arange(used, used + count)
    batch["segment_ids"][:, tail] = batch["pair_ids"][:, tail] = 1
    batch["side"][:, tail] = SIDE_PLACEHOLDER
    batch["source_ids"] = batch["input_ids"].copy()
    batch["placeholder_positions"] = np.zeros((rows, slots), np.int32)
    batch["placeholder_positions"][:, :count] = np.arange(used, used + count)
    batch["placeholder_weights"] = np.zeros((rows, slots), np.float32)
    batch["placeholder_weights"][:, :count] = 1.0
    return batch
