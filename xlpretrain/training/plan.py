"""The run plan: what a validated config means for training, resolved once.

The stages (objectives, weights, trainable parameters, global rows per objective), every
objective's stream at its row length, hence its prediction and placeholder slots and every
batch's shapes, and the data settings that anneal with the step. The trainer, the step, the
input pipeline, `bench` and `aot` read the plan and never re-derive these from the raw config,
so the batch `aot` sizes is the batch training feeds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import jax
import ml_collections

from xlpretrain import objectives as objectives_lib
from xlpretrain.data.anneal import Anneal
from xlpretrain.data.streams import MONO, SEGMENT_PAIRS, Phase, StreamSpec, phase_index
from xlpretrain.objectives.declaration import Objective
from xlpretrain.training.stages import Stage, stages

FieldShapes = dict[str, tuple[tuple[int, ...], type]]


def _sized_for(spec: StreamSpec, anneal: Anneal) -> StreamSpec:
    """`spec` with the highest mask rate its rows reach, so its prediction slots hold any
    step's (a row's rate at its step comes from the schedule, not from these fields)."""
    mono, parallel = "mono_mask_rate" in anneal, "parallel_mask_rate" in anneal
    rate, mono_rate = spec.mask_rate, spec.mono_mask_rate
    if (spec.kind == MONO and mono) or (spec.kind != MONO and parallel):
        key = "mono_mask_rate" if spec.kind == MONO else "parallel_mask_rate"
        rate = max(rate, anneal.maximum(key))
    if spec.kind == SEGMENT_PAIRS and mono:
        mono_rate = max(mono_rate, anneal.maximum("mono_mask_rate"))
    return dataclasses.replace(spec, mask_rate=rate, mono_mask_rate=mono_rate)


@dataclasses.dataclass(frozen=True)
class RunPlan:
    stages: tuple[Stage, ...]
    objectives: Mapping[str, Objective]  # every objective some stage trains
    streams: Mapping[str, StreamSpec]  # each one's stream, its row length resolved
    anneal: Anneal | None = None  # `data.anneal`; streams are sized for its highest mask rates

    @classmethod
    def from_config(cls, cfg: ml_collections.ConfigDict) -> RunPlan:
        """The plan of a validated config."""
        run_stages = tuple(stages(cfg))
        active = {name: objectives_lib.get(name) for s in run_stages for name in s.weights}
        streams = {name: o.stream(cfg) for name, o in active.items()}
        anneal = Anneal.from_config(cfg.data.anneal, cfg.train.steps) if cfg.data.anneal else None
        if anneal is not None:
            streams = {name: _sized_for(spec, anneal) for name, spec in streams.items()}
        return cls(run_stages, active, streams, anneal)

    @property
    def phases(self) -> list[Phase]:
        """The stages as the input pipeline sees them: from which step on which rows are drawn."""
        return [Phase(stage.start_step, stage.rows) for stage in self.stages]

    def stage_index(self, step: int) -> int:
        """The stage that logged step `step` (1-based) belongs to."""
        return phase_index(self.phases, step)

    def describe_stage(self, stage: int) -> str:
        """`stage 2/2: mmlm 1, tlm 1, camlm 1, btmlm 1 (new: btmlm)`, announced as it starts:
        the logged `loss` is the weighted sum over exactly these objectives."""
        weights = self.stages[stage].weights
        named = ", ".join(f"{name} {weight:g}" for name, weight in weights.items())
        previous = self.stages[stage - 1].weights if stage else weights
        changed = "".join(
            f"; {what}: {', '.join(names)}"
            for what, names in (
                ("new", [n for n in weights if n not in previous]),
                ("dropped", [n for n in previous if n not in weights]),
            )
            if names
        )
        return f"stage {stage + 1}/{len(self.stages)}: {named}{changed}; `loss` sums these"

    def starts_training_others(self, step: int) -> bool:
        """Whether `step` is the first of a stage that trains other parameters than the last."""
        stage, before = self.stage_index(step), self.stage_index(step - 1)
        return stage != before and self.stages[stage].trainable != self.stages[before].trainable

    def stage_objectives(self, stage: int) -> dict[str, Objective]:
        return {name: self.objectives[name] for name in self.stages[stage].weights}

    def sources(self) -> dict[str, list[str]]:
        """The corpus kinds (monolingual, parallel) the run's streams read, each with the
        objectives that read it."""
        readers: dict[str, list[str]] = {}
        for name, stream in sorted(self.streams.items()):
            for kind in sorted(stream.sources()):
                readers.setdefault(kind, []).append(name)
        return readers

    def batch_shapes(self, stage: int) -> dict[str, FieldShapes]:
        """(shape, dtype) of every field of a step's global batch in `stage`, per objective."""
        return {
            name: self.streams[name].batch_shapes(rows)
            for name, rows in self.stages[stage].rows.items()
        }

    def abstract_batches(
        self, stage: int, sharding: jax.sharding.Sharding
    ) -> dict[str, dict[str, jax.ShapeDtypeStruct]]:
        """`batch_shapes(stage)` as placed arrays' stand-ins, for compiling ahead of time."""
        return {
            name: {
                field: jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
                for field, (shape, dtype) in fields.items()
            }
            for name, fields in self.batch_shapes(stage).items()
        }
