"""Fine-tuning's run plan: what a fine-tuning config means for a run, resolved once by
`resolve_finetuning`, the only reader of the raw config.

It has pre-training's plan's shape (`xlpretrain.training.plan.RunPlan`): the shared sections the
loop, the optimizer, the mesh and the input pipeline read (`xlpretrain.training.sections`), the
task's own (the pair files, what changes of the pre-trained model, where it is) and the config's
record (`config.json`'s content, which the resume guard compares through `resume_terms`).
`finetuning.build` and `run` read the plan and never the config.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

import ml_collections

from xlpretrain.core.errors import check
from xlpretrain.model.config import ModelConfig
from xlpretrain.training.config import check_stop_at
from xlpretrain.training.config_keys import Ranges, check_keys
from xlpretrain.training.finetune_config import RANGES, default_config
from xlpretrain.training.record import ConfigRecord
from xlpretrain.training.sections import (
    LoopSettings,
    MeshSettings,
    OptimizerSettings,
    PipelineSettings,
)
from xlpretrain.training.workdir import ResumeTerms


@dataclasses.dataclass(frozen=True)
class TaskData:
    """`data.*` but the pipeline's workers: which pair files the run reads and how it encodes
    them (`data.dir/<lang>/<split>.tsv`)."""

    dir: str
    train_language: str
    train_split: str
    eval_split: str
    eval_languages: tuple[str, ...]  # empty: every <lang> folder with an <eval_split>.tsv
    labels: tuple[str, ...]  # label strings in id order; empty: the training labels, sorted
    max_length: int  # tokens per pair, special tokens included
    batch_size: int  # global rows per step (and per evaluation batch)


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
class FineTunePlan:
    """Everything a fine-tuning run reads of its config, typed and checked."""

    init_path: str  # `init.path`: a pre-training workdir or a checkpoint folder
    data: TaskData
    model: ModelOverrides
    pipeline: PipelineSettings
    optim: OptimizerSettings  # its `layer_decay` scales each layer's rate
    loop: LoopSettings  # its `eval_every`: 0 evaluates only at the end
    mesh: MeshSettings
    record: ConfigRecord  # the config as `config.json` records it: written, compared, not read

    def check_batch_divides(self, mesh_shape: Mapping[str, int]) -> None:
        """A micro-batch's rows split evenly over the data-parallel devices of a mesh of
        `mesh_shape`: checked once the mesh is known, before compiling."""
        self.mesh.check_rows_divide(
            "data.batch_size", self.data.batch_size, self.loop.grad_accum, mesh_shape
        )


def _task_data(data: ml_collections.ConfigDict) -> TaskData:
    return TaskData(
        dir=data.dir,
        train_language=data.train_language,
        train_split=data.train_split,
        eval_split=data.eval_split,
        eval_languages=tuple(data.eval_languages),
        labels=tuple(data.labels),
        max_length=data.max_length,
        batch_size=data.batch_size,
    )


def model_overrides(model: ml_collections.ConfigDict) -> ModelOverrides:
    return ModelOverrides(
        plug_in=model.plug_in,
        dropout_rate=model.dropout_rate,
        attention_dropout_rate=model.attention_dropout_rate,
        dtype=model.dtype,
        attention=model.attention,
    )


def check_fine_tuning(
    cfg: ml_collections.ConfigDict, defaults: ml_collections.ConfigDict, ranges: Ranges
) -> None:
    """A fine-tuning config's keys against `defaults` and `ranges` (pre-training's
    `check_keys`), its `train.stop_at`, and its batch against its accumulation: what every
    fine-tuning plan checks before it reads a key."""
    check_keys(cfg, defaults, ranges)
    check_stop_at(cfg.train)
    check(
        cfg.data.batch_size % cfg.train.grad_accum == 0,
        "train.grad_accum",
        f"data.batch_size={cfg.data.batch_size} is not divisible by {cfg.train.grad_accum}",
    )


def resolve_finetuning(cfg: ml_collections.ConfigDict) -> FineTunePlan:
    """The plan of a fine-tuning config, or `ConfigError` naming the first key that is unknown,
    mistyped, out of range (through pre-training's `check_keys`) or at odds with the rest."""
    check_fine_tuning(cfg, default_config(), RANGES)
    return FineTunePlan(
        init_path=cfg.init.path,
        data=_task_data(cfg.data),
        model=model_overrides(cfg.model),
        pipeline=PipelineSettings.of(cfg),
        optim=OptimizerSettings.of(cfg),
        loop=LoopSettings.of(cfg),
        mesh=MeshSettings.of(cfg),
        record=ConfigRecord.of(json.loads(cfg.to_json_best_effort())),
    )


def resume_terms(record: ConfigRecord) -> ResumeTerms:
    """What the resume guard compares of a fine-tuning config beside its keys, from its record,
    the new run's or the saved one: its learning-rate schedule as `resolve_finetuning` builds
    it."""
    config = record.tree()
    return ResumeTerms(OptimizerSettings.of(config), config["train"]["resume_with_changes"])
