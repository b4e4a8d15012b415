"""The XTREME run's plan and each of its tasks': what `configs/xtreme.py` means for a run,
resolved once by `resolve_xtreme` (the tasks, the protocol, where the data is), and what each
task's own config (`task_config.task_config`, derived once the task's training rows are counted)
means for its fine-tuning, by `XtremePlan.task_plan`. These are the only readers of the raw
config; `xtreme_run` and `task_tuning` read the plans. A task's plan has fine-tuning's shape
(`finetune_plan.FineTunePlan`)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence

import ml_collections

from xlpretrain.core.errors import ConfigError
from xlpretrain.data.xtreme import LAYOUTS
from xlpretrain.eval.xtreme.retrieval import RetrievalSettings
from xlpretrain.tasks.declaration import TaskSettings
from xlpretrain.training.finetune_plan import (
    ModelOverrides,
    check_fine_tuning,
    model_overrides,
    resume_terms,
)
from xlpretrain.training.record import ConfigRecord
from xlpretrain.training.sections import (
    LoopSettings,
    MeshSettings,
    OptimizerSettings,
    PipelineSettings,
)
from xlpretrain.training.task_config import (
    RETRIEVAL,
    TASK_RANGES,
    TASKS,
    check_run_config,
    task_config,
    task_default_config,
)

__all__ = ["TaskPlan", "XtremePlan", "resolve_task", "resolve_xtreme", "resume_terms"]


@dataclasses.dataclass(frozen=True)
class TaskPlan:
    """Everything a task's run reads of its config, typed and checked."""

    task: str  # its XTREME name
    init_path: str
    max_length: int  # tokens per row, special tokens included
    batch_size: int  # global rows per step (and per prediction batch)
    settings: TaskSettings  # QA's windows and decoding
    select: str  # task_config.SELECTIONS: best_then_final | none (the final model)
    model: ModelOverrides
    pipeline: PipelineSettings
    optim: OptimizerSettings
    loop: LoopSettings  # its `eval_every`: how often the development set is scored
    mesh: MeshSettings
    record: ConfigRecord

    def check_batch_divides(self, mesh_shape: Mapping[str, int]) -> None:
        self.mesh.check_rows_divide(
            "data.batch_size", self.batch_size, self.loop.grad_accum, mesh_shape
        )


def resolve_task(cfg: ml_collections.ConfigDict) -> TaskPlan:
    """The plan of a task's config, or `ConfigError` naming the first key that is unknown,
    mistyped, out of range or at odds with the rest."""
    check_fine_tuning(cfg, task_default_config(), TASK_RANGES)
    return TaskPlan(
        task=cfg.task,
        init_path=cfg.init.path,
        max_length=cfg.data.max_length,
        batch_size=cfg.data.batch_size,
        settings=TaskSettings(**cfg.qa.to_dict()),
        select=cfg.select,
        model=model_overrides(cfg.model),
        pipeline=PipelineSettings.of(cfg),
        # XTREME's run_*.py: get_linear_schedule_with_warmup, a warm-up longer than the run kept
        optim=dataclasses.replace(
            OptimizerSettings.of(cfg),
            cap_warmup=False,
            scheduler_first=cfg.optim.scheduler_first,
        ),
        loop=LoopSettings.of(cfg),
        mesh=MeshSettings.of(cfg),
        record=ConfigRecord.of(json.loads(cfg.to_json_best_effort())),
    )


@dataclasses.dataclass(frozen=True)
class XtremePlan:
    """Everything an XTREME run reads of its config, typed and checked; each task's plan once
    its training rows are counted (`task_plan`)."""

    init_path: str  # the pre-trained model: a training workdir or a checkpoint folder
    data_dir: str  # XTREME's folder
    labels_dir: str  # what the predictions are scored against ("": see `xtreme_run`)
    tasks: tuple[str, ...]  # in the order they run
    protocol: str  # zero_shot | translate_train_all
    version: str  # xtreme | xtreme-r: the languages and groups results.json averages
    settings: TaskSettings  # QA's windows and decoding
    plug_in: str  # `model.plug_in`
    max_lengths: Mapping[str, int]  # each fine-tuned task's tokens per row
    retrieval: Mapping[str, RetrievalSettings]  # each retrieval task's embedding
    record: ConfigRecord  # the run's config, from which each task's own is derived

    def task_plan(self, task: str, train_rows: int) -> TaskPlan:
        """Task `task`'s plan, its steps `epochs` passes over `train_rows` rows."""
        config = ml_collections.ConfigDict(self.record.tree())
        return resolve_task(task_config(config, task, train_rows))


def tasks_of(cfg: ml_collections.ConfigDict, asked: str = "") -> tuple[str, ...]:
    """The tasks a run fine-tunes: `asked` (the `--tasks` flag) or `tasks`, in order."""
    names = tuple(name.strip() for name in (asked or cfg.tasks).split(",") if name.strip())
    known = (*TASKS, *RETRIEVAL)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ConfigError(
            f"config key 'tasks': unknown task(s) {', '.join(unknown)}; run knows "
            f"{', '.join(known)}"
        )
    if not names:
        raise ConfigError("config key 'tasks': no task to run")
    return names


# What each protocol trains on beside English, where XTREME ships it (`data.xtreme.LAYOUTS`).
PROTOCOL_DATA = {
    "translate_train_all": ("translate_train", "translate-train data"),
    "in_language": ("train_by_language", "training data in the test languages"),
}


def check_protocol(protocol: str, tasks: Sequence[str]) -> None:
    """`ConfigError` before anything runs when `protocol` trains a fine-tuned task on data that
    XTREME does not ship for it (the retrieval tasks are not fine-tuned: any protocol)."""
    if protocol not in PROTOCOL_DATA:
        return
    field, what = PROTOCOL_DATA[protocol]
    lacking = [t for t in tasks if t in TASKS and getattr(LAYOUTS[t], field) is None]
    if lacking:
        shipped = [name for name in TASKS if getattr(LAYOUTS[name], field)]
        raise ConfigError(
            f"config key 'protocol': {protocol} trains on {what}, which XTREME ships for "
            f"{', '.join(shipped)}, not for {', '.join(lacking)} (--tasks leaves them out)"
        )


def resolve_xtreme(cfg: ml_collections.ConfigDict, asked: str = "") -> XtremePlan:
    """The plan of an XTREME run's config, `asked` (comma-separated) in place of its `tasks`
    when given, or `ConfigError` naming the first key that is unknown, mistyped or out of
    range (a task's own keys are checked again when its plan is resolved)."""
    check_run_config(cfg)
    tasks = tasks_of(cfg, asked)
    check_protocol(cfg.protocol, tasks)
    return XtremePlan(
        init_path=cfg.init.path,
        data_dir=cfg.data.dir,
        labels_dir=cfg.data.labels_dir,
        tasks=tasks,
        protocol=cfg.protocol,
        version=cfg.version,
        settings=TaskSettings(**cfg.qa.to_dict()),
        plug_in=cfg.model.plug_in,
        max_lengths={task: cfg[task].max_length for task in tasks if task in TASKS},
        retrieval={
            task: RetrievalSettings(cfg[task].layer, cfg[task].pooling, cfg[task].batch_size)
            for task in tasks
            if task in RETRIEVAL
        },
        record=ConfigRecord.of(json.loads(cfg.to_json_best_effort())),
    )
