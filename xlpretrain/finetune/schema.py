"""Fine-tuning's config: every key a run may set, with its default and the values it may take,
for every task in the registry and any data layout.

`configs/xtreme.py` and `configs/finetune_pairs.py` start from `default_config()`: the
pre-trained model, the data folder (XTREME's or a user's), the tasks and protocol, what every
task shares (the model's dropout and attention, the optimizer's betas, epsilon and clipping, the
loop, the mesh), each kind's own section (`TaskKind.section`: QA's windows, `qa.*`) and one
section per registered task, generated from its defaults
(`registry`): a fine-tuned task's `FineTuneSettings` (a user's folder task adds
`FolderSettings`), a retrieval task's `RetrievalSettings`. `check` refuses a config whose key is
unknown, mistyped or out of range, naming it; `plan.resolve` reads it once, checked.
"""

from __future__ import annotations

import dataclasses
import functools

import ml_collections

from xlpretrain import tasks
from xlpretrain.core.errors import ConfigError
from xlpretrain.core.settings import Ranges, Section
from xlpretrain.data.xtreme import VERSIONS
from xlpretrain.eval.xtreme.retrieval import RetrievalSettings
from xlpretrain.finetune import registry
from xlpretrain.finetune.folder_source import FolderSettings
from xlpretrain.finetune.xtreme_source import PROTOCOLS
from xlpretrain.model.config import ATTENTION_IMPLS
from xlpretrain.training.config import (
    LOOP_RANGES,
    MESH_RANGES,
    check_stop_at,
    loop_section,
    mesh_section,
)
from xlpretrain.training.config_keys import check_keys

PLUG_IN = ("auto", "in", "out")
POOLINGS = ("mean", "cls")
# Which parameters predict: `best_then_final`, the best on dev among the evaluations, replaced by
# the final model only where that scores strictly higher (a tie keeps the earlier, as XTREME's
# `>`); `none`: the final model.
SELECTIONS = ("best_then_final", "none")


@dataclasses.dataclass(frozen=True)
class FineTuneSettings:
    """A fine-tuned task's own keys (`<task>.*`)."""

    epochs: float = 3.0  # passes over its training rows (when `train.steps` is 0)
    learning_rate: float = 2e-5
    warmup_fraction: float = 0.0  # of its steps
    warmup_steps: int = 0  # > 0: this many steps instead of warmup_fraction (never capped)
    weight_decay: float = 0.0
    layer_decay: float = 1.0  # layer-wise rate decay (`layer_decay`); 1: every layer alike
    batch_size: int = 32  # global rows per step (and per prediction batch)
    # The script's data-loader batch, which its step count is of: an epoch is
    # ⌊⌈rows / loader_batch_size⌉ / (batch_size / loader_batch_size)⌋ steps, as
    # `len(train_dataloader) // gradient_accumulation_steps`; 0: batch_size (⌈rows / batch_size⌉)
    loader_batch_size: int = 0
    # Update k trains at the schedule's rate of step k, not k - 1 (run_tag.py's scheduler.step()
    # before optimizer.step(): the first update already decays, the last is at 0)
    scheduler_first: bool = False
    max_length: int = 128  # tokens per row, special tokens included
    # Dev scored each this many steps and at the end; 0: once an epoch; -1: at the end
    eval_every_steps: int = 0
    select: str = "best_then_final"  # SELECTIONS
    seed: int = 0  # the task's `train.seed`: its head's initialisation, dropout, order


@dataclasses.dataclass(frozen=True)
class FolderTaskSettings(FineTuneSettings, FolderSettings):
    """A user's folder task's keys: the fine-tuning ones and the folder's."""


FINE_TUNE_RANGES: Ranges = {
    "epochs": (lambda v: v > 0, "must be > 0"),
    "learning_rate": (lambda v: v > 0, "must be > 0"),
    "batch_size": (lambda v: v > 0, "must be > 0"),
    "loader_batch_size": (lambda v: v >= 0, "must be >= 0 (0: batch_size)"),
    "max_length": (lambda v: v >= 8, "must be >= 8"),
    "warmup_fraction": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
    "warmup_steps": (lambda v: v >= 0, "must be >= 0 (0: warmup_fraction)"),
    "weight_decay": (lambda v: v >= 0, "must be >= 0"),
    "layer_decay": (lambda v: 0.0 < v <= 1.0, "must be in (0, 1]"),
    "eval_every_steps": (lambda v: v >= -1, "must be >= -1 (0: each epoch, -1: at the end)"),
    "select": (lambda v: v in SELECTIONS, f"must be one of {SELECTIONS}"),
    "seed": (lambda v: v >= 0, "must be >= 0"),
}
FOLDER_RANGES: Ranges = {
    **FINE_TUNE_RANGES,
    "train_language": (bool, "required: the folder trained on"),
}
RETRIEVAL_RANGES: Ranges = {
    "layer": (lambda v: v >= 0, "must be >= 0 (0: the embeddings' output)"),
    "pooling": (lambda v: v in POOLINGS, f"must be one of {POOLINGS}"),
    "batch_size": (lambda v: v > 0, "must be > 0"),
}


def task_section(task: registry.Task) -> Section:
    """`task`'s config section, its values' defaults the registry's."""
    if not task.fine_tuned:
        values, ranges = RetrievalSettings, RETRIEVAL_RANGES
    elif task.users:
        values, ranges = FolderTaskSettings, FOLDER_RANGES
    else:
        values, ranges = FineTuneSettings, FINE_TUNE_RANGES
    return Section(task.name, functools.partial(values, **task.defaults), ranges)


def sections() -> dict[str, Section]:
    """Every registered task's section, by task."""
    return {name: task_section(task) for name, task in registry.TASKS.items()}


def xtreme_tasks() -> tuple[str, ...]:
    """The registered tasks of XTREME's layout: what a run runs unless `tasks` says."""
    return tuple(name for name, task in registry.TASKS.items() if not task.users)


def kind_sections() -> dict[str, Section]:
    """The kinds' own sections (`TaskKind.section`: QA's windows, `qa.*`), by name."""
    return {kind.section.name: kind.section for kind in tasks.KINDS.values() if kind.section}


def default_config() -> ml_collections.ConfigDict:
    """Every key a fine-tuning run may set; the configs start from this."""
    cfg = ml_collections.ConfigDict()
    cfg.init = ml_collections.ConfigDict()
    cfg.init.path = ""  # a pre-training workdir or an xlpretrain checkpoint folder (required)
    cfg.data = ml_collections.ConfigDict()
    cfg.data.dir = ""  # XTREME's folder as its download script leaves it, or a user's (required)
    # Folder of labels/<task>/test-<lang>.* scoring XTREME's predictions; empty: <data.dir>/labels.
    cfg.data.labels_dir = ""
    cfg.data.num_workers = 0  # grain worker processes (0: build batches in the main process)
    cfg.data.prefetch = 2  # batches built ahead of the step
    cfg.tasks = ",".join(xtreme_tasks())  # the tasks run, in this order
    cfg.protocol = "zero_shot"  # train on English, select on English dev, test every language
    cfg.version = "xtreme"  # which languages and groups results.json averages (evaluate.py's)

    cfg.model = ml_collections.ConfigDict()
    cfg.model.plug_in = "auto"  # VECO's cross-attention: in | out | auto (in if the model has it)
    cfg.model.dropout_rate = 0.1
    cfg.model.attention_dropout_rate = 0.1
    cfg.model.dtype = "float32"  # compute dtype; parameters stay float32
    cfg.model.attention = "xla"  # as pre-training's model.attention

    cfg.optim = ml_collections.ConfigDict()  # the rest of the optimizer is each task's own
    cfg.optim.b1 = 0.9
    cfg.optim.b2 = 0.999
    cfg.optim.eps = 1e-8
    cfg.optim.clip_norm = 1.0  # global-norm clipping; 0 disables

    cfg.train = loop_section(steps=0, log_every=100, checkpoint_every=1000, keep=1)
    del cfg.train.seed  # each task's own (`<task>.seed`)
    cfg.eval = ml_collections.ConfigDict()
    # > 0: every task's dev scored each this many steps; 0: each task's `eval_every_steps`
    cfg.eval.every_steps = 0
    cfg.mesh = mesh_section()
    for name, section in {**kind_sections(), **sections()}.items():
        cfg[name] = ml_collections.ConfigDict(section.defaults)
    return cfg


def ranges() -> Ranges:
    """The allowed values of every key that has a rule."""
    return {
        "init.path": (bool, "required: a pre-training workdir or checkpoint folder"),
        "data.dir": (bool, "required: XTREME's folder, or a folder of <lang>/ task files"),
        "data.num_workers": (lambda v: v >= 0, "must be >= 0"),
        "data.prefetch": (lambda v: v >= 0, "must be >= 0"),
        "tasks": (bool, f"required: comma-separated, of {', '.join(registry.TASKS)}"),
        "protocol": (lambda v: v in PROTOCOLS, f"must be one of {PROTOCOLS}"),
        "version": (lambda v: v in VERSIONS, f"must be one of {tuple(VERSIONS)}"),
        "model.plug_in": (lambda v: v in PLUG_IN, f"must be one of {PLUG_IN}"),
        "model.dropout_rate": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
        "model.attention_dropout_rate": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
        "model.dtype": (lambda v: v in ("float32", "bfloat16"), "must be 'float32' or 'bfloat16'"),
        "model.attention": (lambda v: v in ATTENTION_IMPLS, f"must be one of {ATTENTION_IMPLS}"),
        "optim.clip_norm": (lambda v: v >= 0, "must be >= 0 (0 disables clipping)"),
        "eval.every_steps": (lambda v: v >= 0, "must be >= 0 (0: each task's eval_every_steps)"),
        **{
            key: allowed
            for section in {**kind_sections(), **sections()}.values()
            for key, allowed in section.qualified_ranges().items()
        },
        **LOOP_RANGES,
        "train.steps": (lambda v: v >= 0, "must be >= 0 (0: each task's epochs)"),
        **MESH_RANGES,
    }


def check(cfg: ml_collections.ConfigDict) -> None:
    """`ConfigError` naming the first key of a fine-tuning config that is unknown, mistyped, out
    of range or at odds with another."""
    check_keys(cfg, default_config(), ranges())
    check_stop_at(cfg.train)
    for name, task in registry.TASKS.items():
        if not task.fine_tuned:
            continue
        own = cfg[name]
        if own.loader_batch_size and own.batch_size % own.loader_batch_size:
            raise ConfigError(
                f"config key '{name}.loader_batch_size' ({own.loader_batch_size}) must divide "
                f"'{name}.batch_size' ({own.batch_size}): a step accumulates whole loader batches"
            )
        if own.warmup_fraction and own.warmup_steps:
            raise ConfigError(
                f"config keys '{name}.warmup_fraction' ({own.warmup_fraction}) and "
                f"'{name}.warmup_steps' ({own.warmup_steps}) are both set; set one, the other 0"
            )
