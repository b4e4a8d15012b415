"""Bitext mining, BUCC style: which sentences of two comparable corpora are translations of
each other, with only a few of them having one. The library half of
`python -m xlpretrain.eval.retrieval --format bucc`.

Candidates come from margin-based scoring (Artetxe & Schwenk 2019, "Margin-based parallel
corpus mining", the ratio margin LASER's and XTREME's BUCC evaluations use, k = 4):

    score(x, y) = 2 cos(x, y) / (mean_{z in NN_k(x)} cos(x, z) + mean_{z in NN_k(y)} cos(y, z))

where NN_k(x) are the k nearest neighbours of x on the other side. Dividing by how close the
two sentences are to their neighbourhoods counters hubness: a sentence near everything (short,
generic, or in a dense region of the space) no longer wins every query. Extraction is theirs
too ("max" retrieval): every sentence of either side proposes its best-scoring neighbour among
its k nearest, and the proposals are taken best score first, a pair only if neither sentence is
in one already. A pair is then mined if its score reaches a threshold; `best_threshold`
chooses the one that maximises F1 against the gold pairs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from xlpretrain.eval.alignment import default_layer, embed, normalise

if TYPE_CHECKING:
    from xlpretrain.api import Model
    from xlpretrain.eval.benchmarks import MiningSet

MARGIN_NEIGHBOURS = 4  # k of the ratio margin, as LASER and XTREME mine BUCC
_SIMILARITY_ELEMENTS = 1 << 24  # entries of the similarity matrix held at once (64 MiB)


@dataclasses.dataclass(frozen=True)
class Candidates:
    """Candidate pairs: rows of the l1 and of the l2 embeddings, and their margin scores."""

    l1_rows: np.ndarray
    l2_rows: np.ndarray
    scores: np.ndarray


def nearest_neighbours(
    queries: np.ndarray, keys: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each query row's `k` most similar key rows (dot products, so cosines of unit rows):
    similarities `[n, k]` in descending order, and the key rows.

    The similarity matrix is built a band of query rows at a time, under
    `_SIMILARITY_ELEMENTS` entries: BUCC's training sets have ~400,000 sentences a side.
    """
    band = max(1, _SIMILARITY_ELEMENTS // len(keys))
    similarities, rows = [], []
    for start in range(0, len(queries), band):
        block = queries[start : start + band] @ keys.T
        top = np.argpartition(block, -k, axis=1)[:, -k:]
        top_similarities = np.take_along_axis(block, top, axis=1)
        order = np.argsort(-top_similarities, axis=1, kind="stable")
        similarities.append(np.take_along_axis(top_similarities, order, axis=1))
        rows.append(np.take_along_axis(top, order, axis=1))
    return np.concatenate(similarities), np.concatenate(rows)


def margin_candidates(x: np.ndarray, y: np.ndarray, k: int = MARGIN_NEIGHBOURS) -> Candidates:
    """One-to-one candidate pairs of the rows of `x` (l1) and `y` (l2), ratio-margin scored.

    float32: the two sides of a BUCC training set are ~1 GiB each at XLM-R large's width.
    """
    x, y = normalise(x, np.float32), normalise(y, np.float32)
    forward, forward_rows = nearest_neighbours(x, y, min(k, len(y)))
    backward, backward_rows = nearest_neighbours(y, x, min(k, len(x)))
    forward_mean, backward_mean = forward.mean(axis=1), backward.mean(axis=1)
    forward_scores = forward / ((forward_mean[:, None] + backward_mean[forward_rows]) / 2)
    backward_scores = backward / ((backward_mean[:, None] + forward_mean[backward_rows]) / 2)
    best_forward = forward_scores.argmax(axis=1)
    best_backward = backward_scores.argmax(axis=1)
    l1_rows = np.concatenate([np.arange(len(x)), backward_rows[np.arange(len(y)), best_backward]])
    l2_rows = np.concatenate([forward_rows[np.arange(len(x)), best_forward], np.arange(len(y))])
    scores = np.concatenate([forward_scores.max(axis=1), backward_scores.max(axis=1)])
    return one_to_one(Candidates(l1_rows, l2_rows, scores))


def one_to_one(proposals: Candidates) -> Candidates:
    """The proposals taken best score first, each only if neither of its sentences is taken:
    a sentence proposed by both sides (the usual case for a true pair) counts once."""
    taken_l1, taken_l2, kept = set(), set(), []
    for i in np.argsort(-proposals.scores, kind="stable").tolist():
        l1, l2 = int(proposals.l1_rows[i]), int(proposals.l2_rows[i])
        if l1 not in taken_l1 and l2 not in taken_l2:
            taken_l1.add(l1)
            taken_l2.add(l2)
            kept.append(i)
    return Candidates(proposals.l1_rows[kept], proposals.l2_rows[kept], proposals.scores[kept])


def at_threshold(
    scores: np.ndarray, correct: np.ndarray, gold_count: int, threshold: float
) -> dict:
    """Precision, recall and F1 of mining the candidates scoring at least `threshold`.

    `correct[i]`: candidate i is a gold pair; `gold_count`: all gold pairs, mined or not.
    """
    mined = scores >= threshold
    hits = int(correct[mined].sum())
    count = int(mined.sum())
    return {
        "threshold": float(threshold),
        "precision": hits / count if count else 0.0,
        "recall": hits / gold_count,
        "f1": 2 * hits / (count + gold_count),
        "mined": count,
    }


def best_threshold(scores: np.ndarray, correct: np.ndarray, gold_count: int) -> dict:
    """`at_threshold` at the threshold of highest F1 (the highest such threshold on a tie).

    A threshold mines a prefix of the candidates by descending score, but never part of a
    run of equal scores: only cuts between two distinct scores are considered. The threshold
    is the midpoint between the last mined score and the next one, as LASER and XTREME
    report it; when every candidate is mined, the lowest score. With no gold pair among the
    candidates, no threshold helps: None, and zeros.
    """
    order = np.argsort(-scores, kind="stable")
    sorted_scores = scores[order]
    hits = np.cumsum(correct[order])
    if hits[-1] == 0:
        return {"threshold": None, "precision": 0.0, "recall": 0.0, "f1": 0.0, "mined": 0}
    mined = np.arange(1, len(hits) + 1)
    cut = np.append(sorted_scores[1:] < sorted_scores[:-1], True)
    f1 = np.where(cut, 2 * hits / (mined + gold_count), -1.0)
    last = int(f1.argmax())
    following = sorted_scores[last + 1] if last + 1 < len(sorted_scores) else sorted_scores[last]
    return at_threshold(scores, correct, gold_count, (sorted_scores[last] + following) / 2)


def mining_f1(
    model: Model,
    sets: list[MiningSet],
    *,
    layer: int | None = None,
    pooling: str = "mean",
    threshold: float | None = None,
    max_lines: int | None = None,
) -> dict:
    """Precision, recall and F1 of mining each BUCC-style set, for an `xlpretrain.api.Model`.

    With `threshold=None` each set is scored at its own best threshold on its own gold
    (`best_threshold`): optimistic, as the threshold is tuned on what it is scored against.
    A given `threshold` (e.g. the best one of another split) is applied as is.

    `max_lines` keeps the first lines of each side and the gold pairs among them
    (`MiningSet.head`).

    A sentence that occurs more than once on a side is mined once, under its first ID
    (`text_candidates`).

    Returns `{"sets": {name: {"precision", "recall", "f1", "threshold", "mined",
    "candidates", "gold", "n_l1", "n_l2"}}, "layer", "pooling", "margin_neighbours",
    "threshold_from"}`; `threshold_from` is "gold" (best per set) or "given".
    """
    if max_lines is not None and max_lines < 1:
        raise ValueError(f"max_lines must be >= 1, got {max_lines}")
    layer = default_layer(model.config.num_layers) if layer is None else layer
    results = {}
    for mining_set in sets:
        if max_lines is not None:
            mining_set = mining_set.head(max_lines)
        candidates = text_candidates(
            model, mining_set.texts, mining_set.pair, layer=layer, pooling=pooling
        )
        correct = np.array(
            [
                (a, b) in mining_set.gold
                for a, b in zip(
                    candidates.l1_rows.tolist(), candidates.l2_rows.tolist(), strict=True
                )
            ],
            bool,
        )
        gold_count = len(mining_set.gold)
        if threshold is None:
            scores = best_threshold(candidates.scores, correct, gold_count)
        else:
            scores = at_threshold(candidates.scores, correct, gold_count, threshold)
        results[mining_set.name] = {
            **scores,
            "candidates": len(candidates.scores),
            "gold": gold_count,
            "n_l1": len(mining_set.ids[0]),
            "n_l2": len(mining_set.ids[1]),
        }
    return {
        "sets": results,
        "layer": layer,
        "pooling": pooling,
        "margin_neighbours": MARGIN_NEIGHBOURS,
        "threshold_from": "gold" if threshold is None else "given",
    }


def text_candidates(
    model: Model,
    texts: tuple[Sequence[str], Sequence[str]],
    langs: tuple[str, str],
    *,
    layer: int,
    pooling: str,
) -> Candidates:
    """`margin_candidates` of two sides' texts embedded by `model` at `layer`, rows indexing
    `texts`. A sentence that occurs more than once on a side is embedded and mined once, at its
    first row (LASER and XTREME likewise mine unique sentences), so that its copies do not fill
    each other's neighbourhoods."""
    unique = [first_rows(side) for side in texts]
    embeddings = [
        embed(model, [side[row] for row in rows], lang, layer=layer, pooling=pooling)
        for side, rows, lang in zip(texts, unique, langs, strict=True)
    ]
    candidates = margin_candidates(*embeddings)
    return Candidates(
        unique[0][candidates.l1_rows], unique[1][candidates.l2_rows], candidates.scores
    )


def first_rows(texts: Sequence[str]) -> np.ndarray:
    """The row of each distinct text's first occurrence, in order."""
    first: dict[str, int] = {}
    for row, text in enumerate(texts):
        first.setdefault(text, row)
    return np.fromiter(first.values(), np.int64, len(first))
