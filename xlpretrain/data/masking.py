"""BERT-style masking (XLM, XLM-R): predict `rate` of the real tokens, 80% `<mask>` / 10%
random / 10% kept. Special tokens and padding are never predicted, and random replacements are
never special tokens, so the model cannot learn that `</s>` appears at random places.
"""

from __future__ import annotations

import numpy as np

from xlpretrain.data.batch import Batch

MASK_PROB = 0.8
RANDOM_PROB = 0.1


def mask_row(
    row: Batch,
    rng: np.random.Generator,
    *,
    rate: float,
    num_slots: int,
    special_ids: np.ndarray,
    mask_id: int,
    first_regular_id: int,
    vocab_size: int,
) -> Batch:
    """Masks one packed row in place-free fashion and adds its prediction slots.

    Exactly `round(rate · n)` of the row's n maskable tokens are predicted (at least one when
    n > 0, at most `num_slots`), chosen uniformly without replacement.
    """
    ids = row["input_ids"]
    maskable = (row["segment_ids"] > 0) & ~np.isin(ids, special_ids)
    candidates = np.flatnonzero(maskable)
    n_predict = min(num_slots, len(candidates), max(1, int(round(rate * len(candidates)))))
    chosen = np.sort(rng.choice(candidates, size=n_predict, replace=False))

    action = rng.random(n_predict)
    replacements = ids[chosen].copy()
    to_mask = action < MASK_PROB
    to_random = (action >= MASK_PROB) & (action < MASK_PROB + RANDOM_PROB)
    replacements[to_mask] = mask_id
    # Regular pieces occupy [first_regular_id, mask_id); mask_id is the last id.
    replacements[to_random] = rng.integers(first_regular_id, vocab_size - 1, size=to_random.sum())

    out = dict(row)
    out["input_ids"] = ids.copy()
    out["input_ids"][chosen] = replacements
    out["is_masked"] = np.zeros_like(ids)
    out["is_masked"][chosen] = 1
    out["labels"] = np.zeros_like(ids)
    out["labels"][chosen] = ids[chosen]
    out["label_weights"] = out["is_masked"].astype(np.float32)
    out["pred_positions"] = np.zeros(num_slots, np.int32)
    out["pred_positions"][:n_predict] = chosen
    out["pred_labels"] = np.zeros(num_slots, np.int32)
    out["pred_labels"][:n_predict] = ids[chosen]
    out["pred_weights"] = np.zeros(num_slots, np.float32)
    out["pred_weights"][:n_predict] = 1.0
    return out
