"""A run's stages as its config sets them: from which step which objectives train with which
weights, parameters, global rows and row lengths. Resolved once, by the run plan."""

from __future__ import annotations

import dataclasses

import ml_collections


@dataclasses.dataclass(frozen=True)
class Stage:
    start_step: int
    weights: dict[str, float]  # active objectives (weight > 0)
    trainable: str = ""  # parameter-path pattern; "" = all
    rows: dict[str, int] = dataclasses.field(default_factory=dict)  # global rows per objective
    # The config key that sets each objective's rows, for messages about them.
    rows_keys: dict[str, str] = dataclasses.field(default_factory=dict, compare=False)
    lengths: dict[str, int] = dataclasses.field(default_factory=dict)  # tokens per row
    lengths_keys: dict[str, str] = dataclasses.field(default_factory=dict, compare=False)


def stages(cfg: ml_collections.ConfigDict) -> list[Stage]:
    """The run's stages; a run without `schedule` is one stage of `objectives`."""
    if not cfg.schedule:
        weights = {n: float(w) for n, w in cfg.objectives.items() if w > 0}
        return [_stage(cfg, 0, 0, weights, cfg.train.trainable)]
    return [
        _stage(
            cfg,
            i,
            start_step(s["start_step"], cfg.train.steps),
            {n: float(w) for n, w in s["objectives"].items() if w > 0},
            s.get("trainable", cfg.train.trainable),
        )
        for i, s in enumerate(cfg.schedule)
    ]


def _stage(
    cfg: ml_collections.ConfigDict, index: int, start: int, weights: dict[str, float], trainable
) -> Stage:
    rows = {name: _setting(cfg, "batch_size", name, index) for name in weights}
    lengths = {name: _setting(cfg, "max_length", name, index) for name in weights}
    return Stage(
        start,
        weights,
        trainable,
        {name: value for name, (_, value) in rows.items()},
        {name: key for name, (key, _) in rows.items()},
        {name: value for name, (_, value) in lengths.items()},
        {name: key for name, (key, _) in lengths.items()},
    )


def _setting(cfg: ml_collections.ConfigDict, field: str, name: str, stage: int) -> tuple[str, int]:
    """(the config key that sets objective `name`'s `field` — its global rows per step,
    `batch_size`, or its row length, `max_length` — in stage `stage`, the value): the stage's,
    else `data.per_objective.NAME`'s, else `data`'s."""
    staged = cfg.schedule[stage].get(field, {}) if cfg.schedule else {}
    if name in staged:
        return f"schedule[{stage}].{field}.{name}", staged[name]
    override = cfg.data.per_objective.get(name, {})
    if field in override:
        return f"data.per_objective.{name}.{field}", override[field]
    return f"data.{field}", cfg.data[field]


def start_step(value: int | float, steps: int) -> int:
    return int(round(value * steps)) if isinstance(value, float) else value
