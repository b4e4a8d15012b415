"""The token fields of a fine-tuning batch whose rows are whole, one segment each (a tagged
sentence, a question with a window of its context): what `pairs.Encoded.batch` writes for a
plugged-out pair, plus the BERT token types of a two-segment row.

A row's tokens are continuous, positions from `FIRST_POSITION`, `segment_ids` and `pair_ids` 1
(the MMLM mask confines attention to the row), `side` 0; padding is `pad_id` at `PAD_POSITION`,
segment 0. A row index of -1 is a row of padding, so a step's batch has a static shape.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xlpretrain.data.pretraining.examples import FIRST_POSITION, PAD_POSITION

Batch = dict[str, np.ndarray]


def row_batch(
    rows: Sequence[np.ndarray],
    indices: np.ndarray,
    *,
    max_length: int,
    pad_id: int,
    lang_id: int,
    type_starts: Sequence[int] | None = None,
) -> Batch:
    """`[len(indices), max_length]` token fields of `rows[i]` for each i of `indices` (-1: a
    padding row). `type_starts[i]`: where row i's token type 1 begins (BERT's second segment
    and its last [SEP]); None: token type 0 everywhere."""
    shape = (len(indices), max_length)
    batch = {
        "input_ids": np.full(shape, pad_id, np.int32),
        "positions": np.full(shape, PAD_POSITION, np.int32),
        "segment_ids": np.zeros(shape, np.int32),
        "pair_ids": np.zeros(shape, np.int32),
        "side": np.zeros(shape, np.int32),
        "lang_ids": np.full(shape, lang_id, np.int32),
        "token_types": np.zeros(shape, np.int32),
    }
    for row, index in enumerate(indices):
        if index < 0:
            continue
        ids = rows[index]
        n = len(ids)
        batch["input_ids"][row, :n] = ids
        batch["positions"][row, :n] = FIRST_POSITION + np.arange(n)
        batch["segment_ids"][row, :n] = 1
        batch["pair_ids"][row, :n] = 1
        if type_starts is not None:
            batch["token_types"][row, type_starts[index] : n] = 1
    return batch
