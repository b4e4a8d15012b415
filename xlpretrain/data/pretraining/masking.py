"""BERT-style masking: predict `rate` of the real tokens, each shown to the model as `<mask>`,
a random token or itself by the stream's (mask, random, keep) split — 80/10/10 for the masked-LM
objectives (XLM, XLM-R, ERNIE-M, VECO); all `<mask>` for XLM-E's generator, whose input x^masked
replaces every token of M with `[MASK]`. Special tokens and padding are never predicted, and
random replacements are never special tokens, so the model cannot learn that `</s>` appears at
random places.
"""

from __future__ import annotations

import numpy as np

from xlpretrain.data.pretraining.batch import Batch

Corruption = tuple[float, float, float]  # shares of predicted tokens: (mask, random, keep)
BERT_CORRUPTION: Corruption = (0.8, 0.1, 0.1)
MASK_ONLY: Corruption = (1.0, 0.0, 0.0)


def check_corruption(corruption: Corruption) -> None:
    """Rejects a split that is not three shares summing to 1, which would silently bias how
    often the model sees `<mask>`, a random token or the original."""
    if len(corruption) != 3 or min(corruption) < 0 or abs(sum(corruption) - 1.0) > 1e-6:
        raise ValueError(
            f"corruption={corruption}: expected (mask, random, keep) shares ≥ 0 summing to 1"
        )


def mask_row(
    row: Batch,
    rng: np.random.Generator,
    *,
    rate: float,
    num_slots: int,
    special_ids: np.ndarray,
    mask_id: int,
    vocab_size: int,
    corruption: Corruption = BERT_CORRUPTION,
    stream: str = "",
) -> Batch:
    """Masks one packed row in place-free fashion and adds its prediction slots.

    Exactly `round(rate · n)` of the row's n maskable tokens are predicted (at least one when
    n > 0), chosen uniformly without replacement; each becomes `<mask>`, a random regular token
    or stays, with the probabilities of `corruption`. More predictions than `num_slots` are an
    error naming `stream`: dropping them would silently lose training signal.
    """
    ids = row["input_ids"]
    maskable = (row["segment_ids"] > 0) & ~np.isin(ids, special_ids)
    candidates = np.flatnonzero(maskable)
    n_predict = min(len(candidates), max(1, int(round(rate * len(candidates)))))
    if n_predict > num_slots:  # a stream sized wrong: a bug, not a user's mistake
        raise RuntimeError(
            f"{stream or 'a'} row: {n_predict} of its {len(candidates)} maskable tokens are "
            f"predicted at mask rate {rate:g}, but it has {num_slots} prediction slots"
        )
    chosen = np.sort(rng.choice(candidates, size=n_predict, replace=False))

    mask_share, random_share, _ = corruption
    action = rng.random(n_predict)
    replacements = ids[chosen].copy()
    to_mask = action < mask_share
    to_random = (action >= mask_share) & (action < mask_share + random_share)
    replacements[to_mask] = mask_id
    specials = np.unique(special_ids)
    draws = rng.integers(0, vocab_size - len(specials), size=to_random.sum())
    replacements[to_random] = regular_ids(draws, specials)

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


def unmasked_row(row: Batch, num_slots: int) -> Batch:
    """`row` as `mask_row` lays it out with nothing masked: its empty prediction slots (a
    contrastive objective reads clean sentences)."""
    out = dict(row)
    for name in ("is_masked", "labels"):
        out[name] = np.zeros_like(row["input_ids"])
    out["label_weights"] = np.zeros(row["input_ids"].shape, np.float32)
    out["pred_positions"] = np.zeros(num_slots, np.int32)
    out["pred_labels"] = np.zeros(num_slots, np.int32)
    out["pred_weights"] = np.zeros(num_slots, np.float32)
    return out


def regular_ids(draws: np.ndarray, specials: np.ndarray) -> np.ndarray:
    """The `draws`-th regular ids (0 the first id that is not special): uniform draws from
    `[0, vocab_size - len(specials))` become uniform regular ids, wherever a tokenizer keeps its
    special ids (XLM-R's at both ends, ModernBERT's after its pieces). `specials`: sorted,
    distinct."""
    ids = np.array(draws, np.int64)
    for special in specials:  # in increasing order, each step past one more special id
        ids += ids >= special
    return ids
