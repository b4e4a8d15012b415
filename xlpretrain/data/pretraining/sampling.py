"""Language sampling p_l ∝ n_l^α (XLM, XLM-R): α < 1 up-samples low-resource languages."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def language_probabilities(counts: Mapping[str, int], alpha: float) -> dict[str, float]:
    """p_l = n_l^α / Σ_k n_k^α over languages (or pairs) with their example counts."""
    if not counts:
        raise ValueError("no languages to sample from")
    keys = list(counts)
    n = np.array([counts[k] for k in keys], dtype=np.float64)
    if np.any(n <= 0):
        empty = [k for k in keys if counts[k] <= 0]
        raise ValueError(f"languages with no examples cannot be sampled: {empty}")
    weights = n**alpha
    p = weights / weights.sum()
    return dict(zip(keys, p.tolist(), strict=True))


def format_sampling_table(
    counts: Mapping[str, int], probabilities: Mapping[str, float], title: str, limit: int = 12
) -> list[str]:
    """Log lines: totals, then the most and least sampled languages with counts and shares."""
    order: Sequence[str] = sorted(probabilities, key=lambda k: -probabilities[k])
    total = sum(counts.values())
    lines = [f"{title}: {len(order)} streams, {total} examples"]
    shown = order if len(order) <= limit else [*order[: limit // 2], *order[-limit // 2 :]]
    for i, key in enumerate(shown):
        if len(order) > limit and i == limit // 2:
            lines.append(f"  ... {len(order) - limit} more ...")
        share, sampled = counts[key] / total, probabilities[key]
        lines.append(f"  {key!s:>16}: {counts[key]:>9} ({share:6.2%}) sampled {sampled:6.2%}")
    return lines
