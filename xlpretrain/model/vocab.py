"""The vocabulary axis padded for sharding, and back.

XLM-R's 250,002 ids divide by no tensor-parallel size, so a table of exactly that many rows
would be copied whole onto every device. The model's vocabulary-indexed parameters therefore
hold ``padded_size`` rows (a multiple of ``model.vocab_multiple``); the rows past
``vocab_size`` are never a label, never predicted nor sampled (their logits are cut off or
excluded) and are dropped on export, so Hugging Face round trips stay exact.
"""

from __future__ import annotations

import jax
import numpy as np

# Parameters whose leading axis is the vocabulary: the (tied) word embeddings and the LM
# heads' output biases (the masked LM's, and XLM-E's generator's).
VOCAB_ROWS = ("word_embeddings/embedding", "lm_head/bias", "generator_head/bias")


def padded_size(vocab_size: int, multiple: int) -> int:
    """``vocab_size`` rounded up to a multiple of ``multiple``."""
    return -(-vocab_size // multiple) * multiple


def with_rows(params, rows: int):
    """``params`` with every vocabulary-indexed parameter cut to, or zero-padded to, ``rows``
    rows (host arrays)."""

    def resize(path, value):
        name = "/".join(str(getattr(key, "key", key)) for key in path)
        if not name.endswith(VOCAB_ROWS) or value.shape[0] == rows:
            return value
        value = np.asarray(value)
        extra = rows - value.shape[0]
        if extra < 0:
            return value[:rows]
        return np.pad(value, [(0, extra)] + [(0, 0)] * (value.ndim - 1))

    return jax.tree_util.tree_map_with_path(resize, params)
