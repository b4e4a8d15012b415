"""A fine-tuning run's plan: what its config means, resolved once by `resolve` (the only reader
of the raw config) into typed values — the tasks and protocol, where the data is, what every
task shares and each task's own settings — and each task's plan once its training rows are
counted (`FineTunePlan.task_plan`: its steps, warm-up and evaluation cadence set on those typed
values). The suite and a task's run read the plans, never the config.

A task's workdir records its own config (`TaskPlan.record`: the shared sections with the task's
in place, its steps counted), which its resume guard compares (`resume_terms`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import ml_collections

from xlpretrain import tasks as task_kinds
from xlpretrain.core.errors import ConfigError
from xlpretrain.eval.xtreme.retrieval import RetrievalSettings
from xlpretrain.finetune import registry, schema
from xlpretrain.finetune.schema import FineTuneSettings
from xlpretrain.model.config import ModelConfig
from xlpretrain.training.record import ConfigRecord
from xlpretrain.training.sections import (
    LoopSettings,
    MeshSettings,
    OptimizerSettings,
    PipelineSettings,
)
from xlpretrain.training.workdir import ResumeTerms


@dataclasses.dataclass(frozen=True)
class ModelOverrides:
    """`model.*`: what fine-tuning changes of the pre-trained model's config."""

    plug_in: str  # VECO's cross-attention: in | out | auto (in if the model has it)
    dropout_rate: float
    attention_dropout_rate: float
    dtype: str  # compute dtype; parameters stay float32
    attention: str

    def applied_to(self, config: ModelConfig) -> ModelConfig:
        """The pre-trained model's `config` with these settings in place of its own."""
        return dataclasses.replace(
            config,
            dtype=self.dtype,
            dropout_rate=self.dropout_rate,
            attention_dropout_rate=self.attention_dropout_rate,
            attention_impl=self.attention,
        )


@dataclasses.dataclass(frozen=True)
class TaskPlan:
    """Everything one task's run reads, typed and checked."""

    task: str  # its registered name
    init_path: str
    max_length: int  # tokens per row, special tokens included
    batch_size: int  # global rows per step (and per prediction batch)
    settings: object  # its kind's own (`TaskKind.section`'s values: QA's windows), or None
    select: str  # schema.SELECTIONS: best_then_final | none (the final model)
    model: ModelOverrides
    pipeline: PipelineSettings
    optim: OptimizerSettings  # its `layer_decay` scales each layer's rate
    loop: LoopSettings  # its `eval_every`: how often the development set is scored
    mesh: MeshSettings
    record: ConfigRecord  # the task's config as its `config.json` holds it: written, compared

    def check_batch_divides(self, mesh_shape: Mapping[str, int]) -> None:
        """A micro-batch's rows split evenly over the data-parallel devices of a mesh of
        `mesh_shape`: checked once the mesh is known, before compiling."""
        self.mesh.check_rows_divide(
            f"{self.task}.batch_size", self.batch_size, self.loop.grad_accum, mesh_shape
        )


@dataclasses.dataclass(frozen=True)
class AdamSettings:
    """`optim.*`, what every task's AdamW shares (the rest is each task's own)."""

    b1: float
    b2: float
    eps: float
    clip_norm: float  # global-norm clipping; 0 disables


def steps_per_epoch(rows: int, batch_size: int, loader_batch_size: int = 0) -> int:
    """An epoch's steps as XTREME's scripts count them (`len(train_dataloader) //
    gradient_accumulation_steps`: loader batches of `loader_batch_size` rows, the last one
    short, `batch_size / loader_batch_size` of them a step, an incomplete last step not
    counted), at least 1."""
    loader = loader_batch_size or batch_size
    return max(1, math.ceil(rows / loader) // (batch_size // loader))


@dataclasses.dataclass(frozen=True)
class FineTunePlan:
    """Everything a fine-tuning run reads of its config, typed and checked; each task's plan
    once its training rows are counted (`task_plan`)."""

    init_path: str  # the pre-trained model: a training workdir or a checkpoint folder
    data_dir: str  # XTREME's folder or a user's
    labels_dir: str  # what XTREME's predictions are scored against ("": see `suite`)
    tasks: tuple[str, ...]  # in the order they run
    protocol: str  # zero_shot | translate_train_all | in_language
    version: str  # xtreme | xtreme-r: the languages and groups results.json averages
    kind_settings: Mapping[str, object]  # each kind's own section's values, by kind
    model: ModelOverrides
    pipeline: PipelineSettings
    adam: AdamSettings  # `optim.*`
    loop: LoopSettings  # `train.*`; `steps` 0: each task's epochs; seed and cadence per task
    mesh: MeshSettings
    own: Mapping[str, FineTuneSettings | RetrievalSettings]  # each asked task's section
    record: ConfigRecord  # the run's config

    @property
    def retrieval(self) -> dict[str, RetrievalSettings]:
        return {t: s for t, s in self.own.items() if isinstance(s, RetrievalSettings)}

    def task_plan(self, task: str, train_rows: int) -> TaskPlan:
        """Task `task`'s plan: `train.steps`, or (when 0) `epochs` passes over `train_rows`
        rows; the warm-up `warmup_steps`, else `warmup_fraction` of the steps (never capped: a
        warm-up may outlast a task's steps, as in get_linear_schedule_with_warmup); dev scored
        every `eval.every_steps`, else the task's `eval_every_steps` (0: once an epoch, -1: only
        at the end)."""
        own: FineTuneSettings = self.own[task]
        per_epoch = steps_per_epoch(train_rows, own.batch_size, own.loader_batch_size)
        steps = self.loop.steps or max(1, math.ceil(own.epochs * per_epoch))
        warmup = own.warmup_steps or round(own.warmup_fraction * steps)
        cadence = {0: per_epoch, -1: 0}.get(own.eval_every_steps, own.eval_every_steps)
        loop = dataclasses.replace(
            self.loop, steps=steps, seed=own.seed, eval_every=self.loop.eval_every or cadence
        )
        optim = OptimizerSettings(
            learning_rate=own.learning_rate, warmup_steps=warmup, steps=steps,
            **dataclasses.asdict(self.adam),
            weight_decay=own.weight_decay, layer_decay=own.layer_decay, cap_warmup=False,
            scheduler_first=own.scheduler_first,
        )  # fmt: skip
        return TaskPlan(
            task=task,
            init_path=self.init_path,
            max_length=own.max_length,
            batch_size=own.batch_size,
            settings=self.kind_settings.get(registry.get(task).kind),
            select=own.select,
            model=self.model,
            pipeline=self.pipeline,
            optim=optim,
            loop=loop,
            mesh=self.mesh,
            record=ConfigRecord.of(self._task_record(task, loop, warmup)),
        )

    def _task_record(self, task: str, loop: LoopSettings, warmup: int) -> dict[str, Any]:
        """What task `task`'s `config.json` holds: the run's shared sections with the task's
        settings in place, its steps counted (the warm-up as their share)."""
        run, own = self.record.tree(), self.own[task]
        data = {"max_length": own.max_length, "batch_size": own.batch_size, **run["data"]}
        for key in ("dir", "labels_dir"):
            del data[key]
        if registry.get(task).users:
            folder = ("train_language", "languages", "labels")
            data |= {key: list(v) if isinstance(v := getattr(own, key), tuple) else v
                     for key in folder}  # fmt: skip
        optim = {
            "learning_rate": own.learning_rate,
            "layer_decay": own.layer_decay,
            "warmup_fraction": warmup / loop.steps if own.warmup_steps else own.warmup_fraction,
            **run["optim"],
            "weight_decay": own.weight_decay,
            "scheduler_first": own.scheduler_first,
        }
        return {
            "task": task,
            "init": {"path": self.init_path},
            "data": data,
            "model": run["model"],
            "optim": optim,
            "train": {**run["train"], "steps": loop.steps, "seed": own.seed},
            "eval": {"every_steps": loop.eval_every},
            "mesh": run["mesh"],
            "qa": run["qa"],
            "select": own.select,
        }


def tasks_of(cfg: ml_collections.ConfigDict, asked: str = "") -> tuple[str, ...]:
    """The tasks a run runs: `asked` (the `--tasks` flag) or `tasks`, in order."""
    names = tuple(name.strip() for name in (asked or cfg.tasks).split(",") if name.strip())
    unknown = [name for name in names if name not in registry.TASKS]
    if unknown:
        raise ConfigError(
            f"config key 'tasks': unknown task(s) {', '.join(unknown)}; run knows "
            f"{', '.join(registry.TASKS)}"
        )
    if not names:
        raise ConfigError("config key 'tasks': no task to run")
    return names


def check_protocol(protocol: str, tasks: Sequence[str]) -> None:
    """`ConfigError` before anything runs when `protocol` trains a fine-tuned task on data that
    its source does not ship (the retrieval tasks are not fine-tuned: any protocol)."""
    fine_tuned = [registry.get(t) for t in tasks if registry.get(t).fine_tuned]
    lacking = [task.name for task in fine_tuned if protocol not in task.protocols]
    if lacking:
        shipped = [
            t.name for t in registry.TASKS.values() if t.fine_tuned and protocol in t.protocols
        ]
        raise ConfigError(
            f"config key 'protocol': {protocol} trains on data their source ships for "
            f"{', '.join(shipped)}, not for {', '.join(lacking)} (--tasks leaves them out)"
        )


def resolve(cfg: ml_collections.ConfigDict, asked: str = "") -> FineTunePlan:
    """The plan of a fine-tuning config, `asked` (comma-separated) in place of its `tasks` when
    given, or `ConfigError` naming the first key that is unknown, mistyped, out of range or at
    odds with the rest."""
    schema.check(cfg)
    tasks = tasks_of(cfg, asked)
    check_protocol(cfg.protocol, tasks)
    sections = schema.sections()
    own = {task: sections[task].read(cfg[task]) for task in tasks}
    for task, settings in own.items():
        if isinstance(settings, FineTuneSettings) and settings.batch_size % cfg.train.grad_accum:
            raise ConfigError(
                f"config key 'train.grad_accum': {task}.batch_size={settings.batch_size} is not "
                f"divisible by {cfg.train.grad_accum}"
            )
    shared = {"train": {**cfg.train.to_dict(), "seed": 0}, "eval": cfg.eval.to_dict()}
    return FineTunePlan(
        init_path=cfg.init.path,
        data_dir=cfg.data.dir,
        labels_dir=cfg.data.labels_dir,
        tasks=tasks,
        protocol=cfg.protocol,
        version=cfg.version,
        kind_settings={
            name: kind.section.read(cfg[kind.section.name])
            for name, kind in task_kinds.KINDS.items()
            if kind.section
        },
        model=ModelOverrides(**cfg.model.to_dict()),
        pipeline=PipelineSettings.of(cfg),
        adam=AdamSettings(**cfg.optim.to_dict()),
        loop=LoopSettings.of(shared),
        mesh=MeshSettings.of(cfg),
        own=own,
        record=ConfigRecord.of(json.loads(cfg.to_json_best_effort())),
    )


def resume_terms(record: ConfigRecord) -> ResumeTerms:
    """What the resume guard compares of a task's config beside its keys, from its record, the
    new run's or the saved one: its learning-rate schedule."""
    config = record.tree()
    return ResumeTerms(OptimizerSettings.of(config), config["train"]["resume_with_changes"])
