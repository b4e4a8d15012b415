"""A run's stages as its config sets them: from which step which objectives train with which
weights, parameters and global rows. Read by config validation and by the run plan."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import ml_collections

from xlpretrain.objectives import REGISTRY


@dataclasses.dataclass(frozen=True)
class Stage:
    start_step: int
    weights: dict[str, float]  # active objectives (weight > 0)
    trainable: str = ""  # parameter-path pattern; "" = all
    rows: dict[str, int] = dataclasses.field(default_factory=dict)  # global rows per objective


def stages(cfg: ml_collections.ConfigDict) -> list[Stage]:
    """The run's stages; a run without `schedule` is one stage of `objectives`."""
    if not cfg.schedule:
        weights = {n: float(w) for n, w in cfg.objectives.items() if w > 0}
        rows = {n: batch_size(cfg, n, 0)[1] for n in weights}
        return [Stage(0, weights, cfg.train.trainable, rows)]
    result = []
    for i, s in enumerate(cfg.schedule):
        weights = {n: float(w) for n, w in s["objectives"].items() if w > 0}
        result.append(
            Stage(
                start_step(s["start_step"], cfg.train.steps),
                weights,
                s.get("trainable", cfg.train.trainable),
                {n: batch_size(cfg, n, i)[1] for n in weights},
            )
        )
    return result


def batch_size(cfg: ml_collections.ConfigDict, name: str, stage: int) -> tuple[str, int]:
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


def stream_shapes(cfg: ml_collections.ConfigDict) -> Iterator[tuple[str, str, int, str, int]]:
    """(objective, config key of its length, length, config key of its rows, rows) of every
    objective in every stage of the run."""
    for i, stage in enumerate(stages(cfg)):
        for name, rows in stage.rows.items():
            length_key = (
                f"data.per_objective.{name}.max_length"
                if "max_length" in cfg.data.per_objective.get(name, {})
                else "data.max_length"
            )
            rows_key, _ = batch_size(cfg, name, i)
            yield name, length_key, REGISTRY[name].stream(cfg).max_length, rows_key, rows
