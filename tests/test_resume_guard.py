"""The resume guard (`workdir.check_resume`) refuses every config change that alters what a
checkpoint's run trains, and lets through only the keys listed here as neutral.

The keys come from each task's `default_config()`, so a new key is covered as soon as it
exists: it is refused unless it is added to the neutral list below, on purpose. The end-to-end
refusal (a run stopping at start-up) is tests/test_cli.py's (`train.steps`) and
tests/test_train.py's (`model.mlp_dim`); here `check_resume` is called directly on a saved
`config.json` and the new config's record, with each task's `resume_terms`, and no training.
"""

import dataclasses
import json
from collections.abc import Callable

import ml_collections
import pytest

from xlpretrain.core.errors import ConfigError
from xlpretrain.data.pretraining.streams import MONO, PARALLEL
from xlpretrain.finetune import plan as finetune_plan
from xlpretrain.finetune import schema as finetune_schema
from xlpretrain.training import config as pretraining
from xlpretrain.training.plan import resume_terms
from xlpretrain.training.record import ConfigRecord
from xlpretrain.training.workdir import check_resume

# How a run is stopped, logged, saved, placed on devices, computed and evaluated: none of it
# changes the parameters a step produces. "x." is the whole section x.
LOOP_NEUTRAL = (
    "train.stop_at",
    "train.log_every",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.async_checkpointing",
    "train.grad_accum",  # the global batch stays; accumulation is exact (tests/test_train.py)
    "train.max_bad_steps",
    "train.allow_fresh_start",
    "train.resume_with_changes",
    "train.wandb_project",
    "mesh.",
    "eval.",  # the share of training data it holds out is compared apart (`derived`)
    "data.num_workers",
    "data.prefetch",
    "model.attention",
)


@dataclasses.dataclass(frozen=True)
class Task:
    """A task's config and how it calls `check_resume`, and the keys this test holds neutral."""

    default_config: Callable
    neutral: tuple[str, ...]
    terms: Callable


TASKS = {
    "pretraining": Task(
        pretraining.default_config,
        (
            *LOOP_NEUTRAL,
            "train.profile_steps",
            "data.strict",  # stops at a bad line instead of skipping it: the rows are the same
            "model.flash_tiles",
            "model.remat",
            "model.loss_chunk",
            "init.checkpoint",  # read by a run's first start only
            "init.changes",
        ),
        # As the trainer calls it: eval.* decide the lines training reads of each kind.
        lambda record: resume_terms(record, (MONO, PARALLEL)),
    ),
    "finetuning": Task(lambda: task_record(), LOOP_NEUTRAL, finetune_plan.resume_terms),
}


def task_record() -> ml_collections.ConfigDict:
    """A fine-tuning task's config as its workdir records it (a user's `pairs` task, whose
    record also names its folders and labels)."""
    cfg = finetune_schema.default_config()
    cfg.init.path, cfg.data.dir, cfg.tasks = "model", "pairs", "pairs"
    return ml_collections.ConfigDict(
        finetune_plan.resolve(cfg).task_plan("pairs", 1000).record.tree()
    )


# Keys no default has (an empty section) that a run may add.
ADDED = {"pretraining": {"data.per_objective.tlm.max_length": 256}, "finetuning": {}}


def leaves(tree: dict, prefix: str = ""):
    """(dotted key, value) of every leaf of a config as `config.json` holds it."""
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def saved_json(task: str) -> dict:
    return json.loads(TASKS[task].default_config().to_json_best_effort())


def other(value):
    """A value of a config.json leaf that differs from `value`."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, "x"]
    return "x"  # None


def is_neutral(task: str, key: str) -> bool:
    return any(key == n or (n.endswith(".") and key.startswith(n)) for n in TASKS[task].neutral)


CHANGES = [
    (task, key, value)
    for task in TASKS
    for key, value in [
        *((key, other(value)) for key, value in leaves(saved_json(task))),
        *ADDED[task].items(),
    ]
]


def check(task: str, key: str, value, tmp_path) -> None:
    """`check_resume` of the default config in a workdir whose config.json has `key` = `value`."""
    saved = saved_json(task)
    *sections, name = key.split(".")
    section = saved
    for part in sections:
        section = section.setdefault(part, {})
    section[name] = value
    (tmp_path / "config.json").write_text(json.dumps(saved))
    t = TASKS[task]
    new = ConfigRecord.of(saved_json(task))  # the default config as its plan records it
    check_resume(str(tmp_path), new, 10, t.terms)


@pytest.mark.parametrize("task, key, value", CHANGES, ids=[f"{t}:{k}" for t, k, _ in CHANGES])
def test_a_change_is_refused_unless_its_key_is_neutral(task, key, value, tmp_path):
    if is_neutral(task, key):
        check(task, key, value, tmp_path)
        return
    with pytest.raises(ConfigError, match="resume_with_changes=True") as refused:
        check(task, key, value, tmp_path)
    assert f"; {key} change the training the checkpoint is part of" in str(refused.value)


def test_what_trains_is_among_the_refused_keys():
    """The keys are read from the configs: those that decide the training are there to check."""
    refused = {key for task, key, _ in CHANGES if task == "pretraining" and not is_neutral(
        task, key)}  # fmt: skip
    for key in (
        "model.hidden_size", "model.num_layers", "model.num_heads", "model.mlp_dim",
        "model.dropout_rate", "model.attention_dropout_rate", "model.dtype",
        "data.mono_mask_rate", "data.parallel_mask_rate", "data.camlm_mask_rate", "data.anneal",
        "data.mono_alpha", "data.max_length", "data.batch_size", "objectives.mmlm",
        "objectives.tlm", "schedule", "train.steps", "train.seed", "train.trainable",
        "optim.learning_rate", "optim.warmup_steps", "optim.weight_decay", "optim.clip_norm",
        "data.per_objective.tlm.max_length",
    ):  # fmt: skip
        assert key in refused, key
    tuned = {key for task, key, _ in CHANGES if task == "finetuning" and not is_neutral(task, key)}
    assert {"model.dropout_rate", "optim.layer_decay", "data.labels", "train.steps"} <= tuned


@pytest.mark.parametrize(
    "schedule, step, anneal_step, accepted",
    [
        ("wsd", 5, 0, True),  # still stable: the first 5 steps' rates are the longer run's
        ("wsd", 9, 0, False),  # already decaying: the longer run would not have decayed yet
        ("linear", 5, 0, False),  # a linear decay is set by the run's length from the start
        ("wsd", 5, 0.5, False),  # an anneal point at half the run moves with its length
    ],
)
def test_a_longer_run_is_accepted_where_it_only_lengthens_the_stable_part(
    schedule, step, anneal_step, accepted, tmp_path
):
    """mmBERT's warm-up–stable–decay: train.steps 12 → 20 with a 4-step decay, resumed at
    `step`."""

    def config(steps: int) -> ConfigRecord:
        cfg = pretraining.default_config()
        cfg.train.steps = steps
        cfg.optim.update(schedule=schedule, warmup_steps=2, decay_steps=4)
        cfg.data.anneal = ({"step": anneal_step, "mono_mask_rate": 0.3},)
        return ConfigRecord.of(json.loads(cfg.to_json_best_effort()))

    (tmp_path / "config.json").write_text(config(12).text)
    terms = TASKS["pretraining"].terms
    if accepted:
        check_resume(str(tmp_path), config(20), step, terms)
        return
    with pytest.raises(ConfigError, match="; train.steps change the training"):
        check_resume(str(tmp_path), config(20), step, terms)
