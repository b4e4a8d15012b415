"""Cross-lingual alignment of an encoder's sentence embeddings: retrieval accuracy@1 (Tatoeba
style), both directions, per pair file. The library half of
`python -m xlpretrain.eval.retrieval`; evaluation during pre-training uses it too.

Both columns of a pair file are embedded with `Model.encode`, L2-normalised, and every sentence
retrieves its cosine nearest neighbour in the other column; accuracy@1 is the share that
retrieve their own translation (l1→l2 and l2→l1). The default layer is the middle one
(`num_layers // 2`), mean-pooled, as VECO and ERNIE-M evaluate: without fine-tuning the middle
layers align languages best, the top ones are specialised for the MLM head.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from xlpretrain.api import Model
    from xlpretrain.data.corpora.protocols import ParallelCorpus

_SIMILARITY_ROWS = 1024  # rows of the similarity matrix held at once


def default_layer(num_layers: int) -> int:
    """The middle layer's output (state index; 0 is the embeddings)."""
    return num_layers // 2


def nearest_neighbour_accuracy(queries: np.ndarray, keys: np.ndarray) -> float:
    """Share of rows i whose cosine nearest neighbour among `keys` is row i (ties: first)."""
    # float64: identical sentences must win over merely close ones, whatever the rounding.
    queries = normalise(queries, np.float64)
    keys = normalise(keys, np.float64)
    hits = 0
    for start in range(0, len(queries), _SIMILARITY_ROWS):
        similarity = queries[start : start + _SIMILARITY_ROWS] @ keys.T
        nearest = similarity.argmax(axis=1)
        hits += int((nearest == np.arange(start, start + len(nearest))).sum())
    return hits / len(queries)


def normalise(x: np.ndarray, dtype: type[np.floating]) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero), as `dtype`."""
    x = np.asarray(x, dtype)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def embed(model: Model, texts: Sequence[str], lang: str, *, layer: int, pooling: str) -> np.ndarray:
    """`model.encode` of one language's texts. The language code goes only to models with
    language embeddings, which need it; others may not know the code."""
    return model.encode(
        list(texts),
        langs=lang if model.config.num_languages else None,
        layer=layer,
        pooling=pooling,
    )


def retrieval_accuracy(
    model: Model,
    source: ParallelCorpus,
    *,
    layer: int | None = None,
    pooling: str = "mean",
    max_lines: int | None = None,
) -> dict:
    """Accuracy@1 per pair file of `source` and averaged, for an `xlpretrain.api.Model`.

    Returns `{"pairs": {stem: {"l1_to_l2", "l2_to_l1", "mean", "n", "skipped"}}, "average":
    {"l1_to_l2", "l2_to_l1", "mean"}, "layer", "pooling"}`, the average taken over pairs.
    Language codes go to `encode` only for models with language embeddings, which need them.
    """
    if max_lines is not None and max_lines < 1:
        raise ValueError(f"max_lines must be >= 1, got {max_lines}")
    layer = default_layer(model.config.num_layers) if layer is None else layer
    pairs = {}
    for pair in source.pairs:
        count = source.num_lines(pair)
        count = count if max_lines is None else min(count, max_lines)
        columns = list(zip(*(source.line(pair, i) for i in range(count)), strict=True))
        embeddings = [
            embed(model, texts, lang, layer=layer, pooling=pooling)
            for texts, lang in zip(columns, pair, strict=True)
        ]
        forward = nearest_neighbour_accuracy(*embeddings)
        backward = nearest_neighbour_accuracy(*embeddings[::-1])
        pairs[f"{pair[0]}-{pair[1]}"] = {
            "l1_to_l2": forward,
            "l2_to_l1": backward,
            "mean": (forward + backward) / 2,
            "n": count,
            "skipped": source.stats[pair].skipped,
        }
    average = {
        key: float(np.mean([scores[key] for scores in pairs.values()]))
        for key in ("l1_to_l2", "l2_to_l1", "mean")
    }
    return {"pairs": pairs, "average": average, "layer": layer, "pooling": pooling}
