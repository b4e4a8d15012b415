"""Data settings that change with the step: language-sampling temperature and mask rates.

mmBERT anneals its data over training (mask rate 30% → 15% → 5%, sampling α 0.7 → 0.5 → 0.3),
in three separate runs. Here one run does it: `data.anneal` is a sequence of points
`{"step": S, "mono_alpha": a, ...}`, each giving some of `KEYS` at step S (a logged step, or a
float in (0, 1): that fraction of `train.steps`); between two points a value moves linearly,
before the first and after the last it stays; two points at one step are a jump (the first's
value up to it, the second's from it: mmBERT's phases). A value no point gives is the config's
constant.

Languages can join as training goes (mmBERT: 60 → 110 → 1833 languages): `mono_languages`
(`parallel_pairs`) N draws monolingual rows (pairs) from the N languages (pairs) with the most
lines only, from that point's step until the next point that gives it; before its first point,
that point's N.

A row's settings depend only on its step, as the row itself does, so a run resumed in the
middle of a schedule builds exactly the rows an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# The annealable settings: α of the language sampling per corpus kind, and the mask rate of the
# rows drawn from each kind of corpus (replacing the objectives' own rates for those rows).
KEYS = ("mono_alpha", "parallel_alpha", "mono_mask_rate", "parallel_mask_rate")
# How many of the largest languages (pairs) rows are drawn from: a step function, not linear.
COUNTS = ("mono_languages", "parallel_pairs")


@dataclasses.dataclass(frozen=True)
class Anneal:
    """Per annealed key, its points as (steps, values), steps increasing."""

    points: Mapping[str, tuple[tuple[int, ...], tuple[float, ...]]]

    @classmethod
    def from_config(cls, points: Sequence[Mapping[str, Any]], total_steps: int) -> Anneal:
        """The schedule of `data.anneal`; `ValueError` names what is wrong with it."""
        by_key: dict[str, tuple[list[int], list[float]]] = {}
        last = None
        for n, point in enumerate(points):
            point = dict(point)
            if "step" not in point:
                raise ValueError(f"point {n} has no 'step'")
            unknown = sorted(set(point) - {"step", *KEYS, *COUNTS})
            if unknown:
                known = [*KEYS, *COUNTS]
                raise ValueError(f"point {n}: unknown keys {unknown}; annealable: {known}")
            step = _step(point.pop("step"), total_steps, n)
            if last is not None and step < last:
                raise ValueError(f"point {n}: step {step} is before the previous point's")
            last = step
            if not point:
                raise ValueError(f"point {n} gives no setting (one of {[*KEYS, *COUNTS]})")
            for key, value in point.items():
                high = 1.0 if key.endswith("mask_rate") else float("inf")
                if key in COUNTS:
                    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                        raise ValueError(f"point {n}: {key}={value!r} must be an int >= 1")
                elif not isinstance(value, int | float) or not 0 < value <= high:
                    raise ValueError(f"point {n}: {key}={value!r} must be in (0, {high:g}]")
                steps, values = by_key.setdefault(key, ([], []))
                steps.append(step)
                values.append(float(value))
        return cls({k: (tuple(s), tuple(v)) for k, (s, v) in by_key.items()})

    def __contains__(self, key: str) -> bool:
        return key in self.points

    def value(self, key: str, step: int) -> float:
        """`key` at logged step `step` (linear between points, constant outside them, from the
        later of two points at one step; a count holds from its point to the next)."""
        steps, values = self.points[key]
        after = int(np.searchsorted(steps, step, side="right"))  # the first point past `step`
        if key in COUNTS or after in (0, len(steps)):
            return values[max(after - 1, 0)] if after else values[0]
        (s0, s1), (v0, v1) = steps[after - 1 : after + 1], values[after - 1 : after + 1]
        return v0 + (v1 - v0) * (step - s0) / (s1 - s0)

    def maximum(self, key: str, first: int = 0, last: int | None = None) -> float:
        """The highest value of `key` from logged step `first` to `last` (default: any
        step): at either end or at a point between them (a jump's earlier value too, which
        only bounds what the steps before it reach)."""
        steps, values = self.points[key]
        last = steps[-1] if last is None else last
        inside = [v for s, v in zip(steps, values, strict=True) if first < s <= last]
        return max([self.value(key, first), self.value(key, last), *inside])

    def settled(self) -> Anneal:
        """The schedule held at its last values (held-out rows are built with these)."""
        return Anneal({key: ((0,), (values[-1],)) for key, (_, values) in self.points.items()})

    def at(self, step: int) -> dict[str, float]:
        """Every annealed setting at `step`, for the log (`data/<key>`)."""
        return {f"data/{key}": self.value(key, step) for key in self.points}


def _step(value: Any, total_steps: int, n: int) -> int:
    if isinstance(value, float) and 0 < value < 1:
        return round(value * total_steps)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value:
        return value
    raise ValueError(f"point {n}: step {value!r} must be a step >= 0 or a fraction in (0, 1)")
