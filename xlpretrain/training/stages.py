"""A run's stages as its config sets them: from which step which objectives train with which
weights, parameters and global rows. Resolved once, by the run plan."""

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
    sized = {name: _batch_size(cfg, name, index) for name in weights}
    rows = {name: rows for name, (_, rows) in sized.items()}
    return Stage(start, weights, trainable, rows, {name: key for name, (key, _) in sized.items()})


def _batch_size(cfg: ml_collections.ConfigDict, name: str, stage: int) -> tuple[str, int]:
    """(the config key that sets objective `name`'s global rows per step in stage `stage`, the
    rows): the stage's `batch_size`, else `data.per_objective.NAME.batch_size`, else
    `data.batch_size`."""
    stage_rows = cfg.schedule[stage].get("batch_size", {}) if cfg.schedule else {}
    if name in stage_rows:
        return f"schedule[{stage}].batch_size.{name}", stage_rows[name]
    override = cfg.data.per_objective.get(name, {})
    if "batch_size" in override:
        return f"data.per_objective.{name}.batch_size", override["batch_size"]
    return "data.batch_size", cfg.data.batch_size


def start_step(value: int | float, steps: int) -> int:
    return int(round(value * steps)) if isinstance(value, float) else value
