"""The Batch contract: a flat dict of `[batch, length]` arrays (DESIGN.md).

Everything an attention mask needs is one of these O(L) vectors, so masks stay functions of
per-token metadata. Objectives that predict masked tokens also get `pred_*` arrays of a static
width `P` (the gathered prediction slots), so the LM head only ever sees labelled positions.
"""

from __future__ import annotations

import numpy as np

Batch = dict[str, np.ndarray]

# Token-level fields, each [batch, length].
TOKEN_FIELDS: dict[str, type] = {
    "input_ids": np.int32,
    "positions": np.int32,
    "lang_ids": np.int32,
    "segment_ids": np.int32,  # which sequence of a packed row; 0 = padding
    "pair_ids": np.int32,  # which (parallel) example; both sides of a pair share it
    "side": np.int32,  # SIDE_* below
    "is_masked": np.int32,  # 1 where the token carries an MLM label
    "labels": np.int32,  # original token where is_masked, else 0
    "label_weights": np.float32,
}

# Prediction-slot fields, each [batch, P]: positions of the labelled tokens, gathered.
PREDICTION_FIELDS: dict[str, type] = {
    "pred_positions": np.int32,
    "pred_labels": np.int32,
    "pred_weights": np.float32,
}

# BTMLM's fields: the unmasked source ids [batch, length], the placeholder slots [batch, S].
PLACEHOLDER_FIELDS: dict[str, type] = {
    "placeholder_positions": np.int32,
    "placeholder_weights": np.float32,
}


def field_shapes(
    rows: int, length: int, prediction_slots: int
) -> dict[str, tuple[tuple[int, ...], type]]:
    """(shape, dtype) of each field every batch has: the contract in numbers (a row kind adds
    its own fields', `RowKind.extra_shapes`)."""
    shapes = {name: ((rows, length), dtype) for name, dtype in TOKEN_FIELDS.items()}
    shapes.update({n: ((rows, prediction_slots), d) for n, d in PREDICTION_FIELDS.items()})
    return shapes


SIDE_SOURCE = 0  # source side of a pair, or monolingual text
SIDE_TARGET = 1
SIDE_PLACEHOLDER = 2
SIDE_PSEUDO = 3
SIDE_TAG = 4  # a target-language tag before BTMLM placeholders


def stack_rows(rows: list[Batch]) -> Batch:
    """Stacks per-row dicts into one batch dict with a leading batch axis."""
    return {key: np.stack([row[key] for row in rows]) for key in rows[0]}
