"""The XTREME run's config, and the config of each task it fine-tunes, with their defaults and
the values each key may take.

`configs/xtreme.py` starts from `default_config()`: the pre-trained model, XTREME's folder, the
tasks and protocol, what every task shares (model dropout, the optimizer's betas, epsilon and
clipping, the loop, the mesh, QA's windows) and one section per task (`<task>.epochs`,
`learning_rate`, `batch_size`, `max_length`, `warmup_fraction` or `warmup_steps`,
`weight_decay`, `layer_decay`, `eval_every_steps`, `select`, `seed`; the retrieval tasks,
which are not fine-tuned, `<task>.layer`, `pooling`, `batch_size`). For each task the run
derives that task's own config (`task_config`: its section in place, `train.steps` from its
epochs over its training rows), which its workdir records and resumes by, as a fine-tuning
run's.
"""

from __future__ import annotations

import dataclasses
import math

import ml_collections

from xlpretrain.core.errors import ConfigError
from xlpretrain.data.qa_windows import ANSWER_TEXTS
from xlpretrain.data.xtreme import VERSIONS
from xlpretrain.tasks.declaration import TaskSettings
from xlpretrain.training.config import LOOP_RANGES, MESH_RANGES, check_stop_at, loop_section
from xlpretrain.training.config_keys import Ranges, check_keys
from xlpretrain.training.finetune_config import RANGES as FINETUNE_RANGES
from xlpretrain.training.finetune_config import default_config as finetune_defaults

PROTOCOLS = ("zero_shot", "translate_train_all", "in_language")
# Each task XTREME fine-tunes, and its default settings: XTREME's own baselines for XLM-R base
# (google-research/xtreme scripts/train_*.sh: 8 rows × 4 accumulated = 32 per step, QA 4 × 8; no
# warm-up and no weight decay but for QA: 500 warm-up steps, weight decay 1e-4; run_tag.py steps
# its scheduler before the optimizer, `scheduler_first`). English dev is scored
# every `--save_steps` (XNLI 100, PAWS-X 200, PAN-X 1,000, UD-POS 500) and the best kept
# (`--save_only_best_checkpoint`), then compared with the final model (`--eval_all_checkpoints`);
# train_qa.sh's `--save_steps -1` scores nothing during training and predicts with the final
# model. Seeds: run_tag.py gets `--seed 1`, run_classify.py and run_squad.py their default 42.
_SENTENCES = dict(
    epochs=5.0, learning_rate=2e-5, batch_size=32, loader_batch_size=8, max_length=128, seed=42
)
_TAGS = dict(
    epochs=10.0, learning_rate=2e-5, batch_size=32, loader_batch_size=8, max_length=128, seed=1,
    scheduler_first=True,
)  # fmt: skip
_QA = dict(
    eval_every_steps=-1,
    select="none",
    seed=42,
    epochs=3.0,
    learning_rate=3e-5,
    batch_size=32,
    loader_batch_size=4,
    max_length=384,
    warmup_steps=500,
    weight_decay=1e-4,
)
TASKS = {
    "xnli": dict(_SENTENCES, eval_every_steps=100),
    "pawsx": dict(_SENTENCES, eval_every_steps=200),
    "panx": dict(_TAGS, eval_every_steps=1000),
    "udpos": dict(_TAGS, eval_every_steps=500),
    "xquad": _QA,
    "mlqa": _QA,
    "tydiqa": _QA,
}
# The tasks XTREME scores on the pre-trained encoder's sentence embeddings, without fine-tuning
# (`eval.xtreme.retrieval`), and their defaults: XTREME's scripts for a 12-layer model
# (run_bucc2018.sh: the `<s>` state, run_tatoeba.sh: the mean over the row's tokens, both after
# the 8th layer; batches of 100).
RETRIEVAL = {
    "bucc2018": dict(layer=8, pooling="cls", batch_size=100),
    "tatoeba": dict(layer=8, pooling="mean", batch_size=100),
}
POOLINGS = ("mean", "cls")
# Which parameters predict: `best_then_final`, the best on dev among the evaluations, replaced by
# the final model only where that scores strictly higher (a tie keeps the earlier, as XTREME's
# `>`); `none`: the final model.
SELECTIONS = ("best_then_final", "none")
# The optimizer's settings each task sets for itself.
_OWN_OPTIM = ("learning_rate", "warmup_fraction", "weight_decay", "layer_decay")
# Fine-tuning's sections every task shares as they are.
_SHARED = ("model", "mesh")


def task_section(
    *,
    epochs: float,
    learning_rate: float,
    batch_size: int,
    max_length: int,
    warmup_fraction: float = 0.0,
    warmup_steps: int = 0,
    weight_decay: float = 0.0,
    layer_decay: float = 1.0,
    eval_every_steps: int = 0,
    select: str = "best_then_final",
    seed: int = 0,
    loader_batch_size: int = 0,
    scheduler_first: bool = False,
) -> ml_collections.ConfigDict:
    """One task's settings."""
    section = ml_collections.ConfigDict()
    section.epochs = float(epochs)  # passes over its training rows (`train.steps` 0)
    section.learning_rate = float(learning_rate)
    section.warmup_fraction = float(warmup_fraction)  # of its steps
    section.warmup_steps = warmup_steps  # > 0: this many steps instead of warmup_fraction
    section.weight_decay = float(weight_decay)
    section.layer_decay = float(layer_decay)  # layer-wise rate decay; 1: every layer alike
    section.batch_size = batch_size  # global rows per step (and per prediction batch)
    # The script's data-loader batch, which its step count is of: an epoch is
    # ⌊⌈rows / loader_batch_size⌉ / (batch_size / loader_batch_size)⌋ steps, as
    # `len(train_dataloader) // gradient_accumulation_steps`; 0: batch_size (⌈rows / batch_size⌉)
    section.loader_batch_size = loader_batch_size
    # Update k trains at the schedule's rate of step k, not k - 1 (run_tag.py's scheduler.step()
    # before optimizer.step(): the first update already decays, the last is at 0)
    section.scheduler_first = scheduler_first
    section.max_length = max_length  # tokens per row, special tokens included
    # English dev scored each this many steps and at the end; 0: once an epoch; -1: at the end
    section.eval_every_steps = eval_every_steps
    section.select = select  # SELECTIONS
    section.seed = seed  # the task's `train.seed`: its head's initialisation, dropout, order
    return section


def retrieval_section(*, layer: int, pooling: str, batch_size: int) -> ml_collections.ConfigDict:
    """One retrieval task's settings."""
    section = ml_collections.ConfigDict()
    section.layer = layer  # the hidden state compared (0: the embeddings' output)
    section.pooling = pooling  # mean over the row's tokens (specials included) | cls: its first
    section.batch_size = batch_size  # sentences embedded at once
    return section


def qa_section() -> ml_collections.ConfigDict:
    """QA's windows, loss and decoding (`qa.*`): `TaskSettings`' defaults, XTREME's
    (scripts/train_qa.sh, run_squad.py); `plug_in` is the model's (`model.plug_in`)."""
    qa = ml_collections.ConfigDict(dataclasses.asdict(TaskSettings()))
    del qa.plug_in
    return qa


def default_config() -> ml_collections.ConfigDict:
    """Every key an XTREME run may set; `configs/xtreme.py` starts from this."""
    base = finetune_defaults()
    cfg = ml_collections.ConfigDict()
    cfg.init = base.init  # init.path: a pre-training workdir or checkpoint folder (required)
    cfg.data = ml_collections.ConfigDict()
    cfg.data.dir = ""  # XTREME's folder, as its download script leaves it (required)
    # Folder of labels/<task>/test-<lang>.* scoring the predictions; empty: <data.dir>/labels.
    cfg.data.labels_dir = ""
    cfg.data.num_workers = 0
    cfg.data.prefetch = 2
    cfg.tasks = ",".join([*TASKS, *RETRIEVAL])  # the tasks run, in this order
    cfg.protocol = "zero_shot"  # train on English, select on English dev, test every language
    cfg.version = "xtreme"  # which languages and groups results.json averages (evaluate.py's)
    for name in _SHARED:
        cfg[name] = base[name]
    cfg.optim = base.optim
    for key in _OWN_OPTIM:  # each task's own
        del cfg.optim[key]
    cfg.train = loop_section(steps=0, log_every=100, checkpoint_every=1000, keep=1)
    del cfg.train.seed  # each task's own (`<task>.seed`)
    cfg.eval = ml_collections.ConfigDict()
    # > 0: every task's dev scored each this many steps; 0: each task's `eval_every_steps`
    cfg.eval.every_steps = 0
    cfg.qa = qa_section()
    for task, settings in TASKS.items():
        cfg[task] = task_section(**settings)
    for task, settings in RETRIEVAL.items():
        cfg[task] = retrieval_section(**settings)
    return cfg


def _task_ranges(task: str) -> Ranges:
    return {
        f"{task}.epochs": (lambda v: v > 0, "must be > 0"),
        f"{task}.learning_rate": (lambda v: v > 0, "must be > 0"),
        f"{task}.batch_size": (lambda v: v > 0, "must be > 0"),
        f"{task}.loader_batch_size": (lambda v: v >= 0, "must be >= 0 (0: batch_size)"),
        f"{task}.max_length": (lambda v: v >= 8, "must be >= 8"),
        f"{task}.warmup_fraction": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
        f"{task}.warmup_steps": (lambda v: v >= 0, "must be >= 0 (0: warmup_fraction)"),
        f"{task}.weight_decay": (lambda v: v >= 0, "must be >= 0"),
        f"{task}.layer_decay": (lambda v: 0.0 < v <= 1.0, "must be in (0, 1]"),
        f"{task}.eval_every_steps": (lambda v: v >= -1, "must be >= -1 (0: each epoch, -1: end)"),
        f"{task}.select": (lambda v: v in SELECTIONS, f"must be one of {SELECTIONS}"),
        f"{task}.seed": (lambda v: v >= 0, "must be >= 0"),
    }


def _retrieval_ranges(task: str) -> Ranges:
    return {
        f"{task}.layer": (lambda v: v >= 0, "must be >= 0 (0: the embeddings' output)"),
        f"{task}.pooling": (lambda v: v in POOLINGS, f"must be one of {POOLINGS}"),
        f"{task}.batch_size": (lambda v: v > 0, "must be > 0"),
    }


_QA_RANGES: Ranges = {
    "qa.doc_stride": (lambda v: v > 0, "must be > 0"),
    "qa.max_query_length": (lambda v: v > 0, "must be > 0"),
    "qa.n_best_size": (lambda v: v > 0, "must be > 0"),
    "qa.max_answer_length": (lambda v: v > 0, "must be > 0"),
    "qa.loss_over": (lambda v: v in ("window", "tokens"), "must be 'window' or 'tokens'"),
    "qa.answer_text": (lambda v: v in ANSWER_TEXTS, f"must be one of {ANSWER_TEXTS}"),
}
_SHARED_RANGES: Ranges = {
    key: value
    for key, value in FINETUNE_RANGES.items()
    if key.split(".")[0] in ("model", "optim", "train", "mesh", "init")
    and key.removeprefix("optim.") not in _OWN_OPTIM
}
RANGES: Ranges = {
    **_SHARED_RANGES,
    "data.dir": (bool, "required: XTREME's folder, as its download script leaves it"),
    "data.num_workers": (lambda v: v >= 0, "must be >= 0"),
    "data.prefetch": (lambda v: v >= 0, "must be >= 0"),
    "tasks": (bool, f"required: comma-separated, of {', '.join([*TASKS, *RETRIEVAL])}"),
    "protocol": (lambda v: v in PROTOCOLS, f"must be one of {PROTOCOLS}"),
    "version": (lambda v: v in VERSIONS, f"must be one of {tuple(VERSIONS)}"),
    "eval.every_steps": (lambda v: v >= 0, "must be >= 0 (0: each task's eval_every_steps)"),
    **_QA_RANGES,
    **{key: value for task in TASKS for key, value in _task_ranges(task).items()},
    **{key: value for task in RETRIEVAL for key, value in _retrieval_ranges(task).items()},
    **LOOP_RANGES,
    "train.steps": (lambda v: v >= 0, "must be >= 0 (0: each task's epochs)"),
    **MESH_RANGES,
}


def task_default_config() -> ml_collections.ConfigDict:
    """Every key of one task's config (what its workdir records)."""
    cfg = ml_collections.ConfigDict()
    cfg.task = ""  # its XTREME name
    cfg.init = ml_collections.ConfigDict({"path": ""})
    cfg.data = ml_collections.ConfigDict()
    cfg.data.max_length = 128
    cfg.data.batch_size = 32
    cfg.data.num_workers = 0
    cfg.data.prefetch = 2
    base = finetune_defaults()
    cfg.model = base.model
    cfg.optim = base.optim
    cfg.train = base.train
    cfg.eval = base.eval
    cfg.mesh = base.mesh
    cfg.qa = qa_section()
    cfg.select = "best_then_final"  # SELECTIONS
    cfg.optim.scheduler_first = False  # `<task>.scheduler_first`
    return cfg


TASK_RANGES: Ranges = {
    **{key: value for key, value in FINETUNE_RANGES.items() if not key.startswith("data.dir")},
    "task": (bool, "required"),
    "select": (lambda v: v in SELECTIONS, f"must be one of {SELECTIONS}"),
    **_QA_RANGES,
}
del TASK_RANGES["data.train_language"]
# A warm-up may outlast a task's steps (`<task>.warmup_steps` 500 on TyDiQA's ~350), as in
# get_linear_schedule_with_warmup; `task_plan` leaves it uncapped.
TASK_RANGES["optim.warmup_fraction"] = (lambda v: v >= 0.0, "must be >= 0")


def steps_per_epoch(rows: int, batch_size: int, loader_batch_size: int = 0) -> int:
    """An epoch's steps as XTREME's scripts count them (`len(train_dataloader) //
    gradient_accumulation_steps`: loader batches of `loader_batch_size` rows, the last one
    short, `batch_size / loader_batch_size` of them a step, an incomplete last step not
    counted), at least 1."""
    loader = loader_batch_size or batch_size
    return max(1, math.ceil(rows / loader) // (batch_size // loader))


def task_config(
    cfg: ml_collections.ConfigDict, task: str, train_rows: int
) -> ml_collections.ConfigDict:
    """Task `task`'s own config in the run `cfg`: its section's settings, the shared sections,
    `train.steps` (when 0) `epochs` passes over its `train_rows` rows, its seed, selection, and
    the development set's evaluation (`eval.every_steps`, else its `eval_every_steps`: 0 once
    per epoch, -1 only at the end)."""
    own = cfg[task]
    out = task_default_config()
    out.task = task
    out.init.path = cfg.init.path
    out.data.update(
        max_length=own.max_length,
        batch_size=own.batch_size,
        num_workers=cfg.data.num_workers,
        prefetch=cfg.data.prefetch,
    )
    out.model = cfg.model
    out.mesh = cfg.mesh
    out.qa = cfg.qa
    out.select = own.select
    out.optim.update(cfg.optim.to_dict())
    out.optim.update({key: own[key] for key in _OWN_OPTIM})
    out.train = ml_collections.ConfigDict(cfg.train.to_dict())
    out.train.seed = own.seed
    out.optim.scheduler_first = own.scheduler_first
    per_epoch = steps_per_epoch(train_rows, own.batch_size, own.loader_batch_size)
    if out.train.steps == 0:
        out.train.steps = max(1, math.ceil(own.epochs * per_epoch))
    if own.warmup_steps:  # as a share of the steps, which rounds back to them; never capped:
        out.optim.warmup_fraction = own.warmup_steps / out.train.steps  # may be >= 1
    cadence = {0: per_epoch, -1: 0}.get(own.eval_every_steps, own.eval_every_steps)
    out.eval.every_steps = cfg.eval.every_steps or cadence  # 0: the final model's score alone
    return out


def check_run_config(cfg: ml_collections.ConfigDict) -> None:
    """`ConfigError` naming the first key of an XTREME run's config that is unknown, mistyped
    or out of range."""
    check_keys(cfg, default_config(), RANGES)
    check_stop_at(cfg.train)
    for task in TASKS:
        loader, batch = cfg[task].loader_batch_size, cfg[task].batch_size
        if loader and batch % loader:
            raise ConfigError(
                f"config key '{task}.loader_batch_size' ({loader}) must divide "
                f"'{task}.batch_size' ({batch}): a step accumulates whole loader batches"
            )
        if cfg[task].warmup_fraction and cfg[task].warmup_steps:
            raise ConfigError(
                f"config keys '{task}.warmup_fraction' ({cfg[task].warmup_fraction}) and "
                f"'{task}.warmup_steps' ({cfg[task].warmup_steps}) are both set; set one, the "
                "other 0"
            )
