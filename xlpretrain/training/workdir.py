"""What a run's workdir holds besides checkpoints: a folder it can write, and the configs it was
run with.

A resumed run compares its config with the one the workdir was last run with. Changes that only
affect how the run is logged, saved, sharded, computed or evaluated are logged and accepted;
any other change alters the training the checkpoint is part of (the learning-rate schedule, the
objectives, the data, the model), so it needs `train.resume_with_changes=True`, and the effect
of a new `train.steps` on the learning rate is stated. Every config a workdir ran with is kept:
`config.json` is the current one, earlier ones are `config.step-N.json` (N: the step the run had
reached when its config changed).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from xlpretrain.core.errors import ConfigError
from xlpretrain.training.record import ABSENT, ConfigRecord
from xlpretrain.training.sections import OptimizerSettings

log = logging.getLogger("xlpretrain")
CONFIG = "config.json"


# Keys a resumed run may change without changing the training its checkpoint is part of: how
# the run is stopped, logged, saved, sharded, computed and evaluated ("x." covers a section).
# One list for every task (a fine-tuning config has a subset of these keys).
RESUME_NEUTRAL = (
    "train.stop_at",
    "train.log_every",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.async_checkpointing",
    "train.grad_accum",
    "train.max_bad_steps",
    "train.allow_fresh_start",
    "train.resume_with_changes",
    "train.wandb_project",
    "mesh.",
    "train.profile_steps",
    "data.num_workers",
    "data.prefetch",
    "data.strict",
    "eval.",
    "model.attention",
    "model.flash_tiles",
    "model.remat",
    "model.loss_chunk",
    "init.checkpoint",  # read only by a run's first start
    "init.changes",
)


class WorkdirError(OSError):
    """The workdir cannot hold the run's outputs."""


def check_workdir(workdir: str) -> None:
    """Creates ``workdir`` and writes a file there, so a read-only or missing disk stops the
    run now, not at its first checkpoint."""
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise WorkdirError(f"workdir {workdir} is a file, not a folder (a run writes a folder)")
    probe = os.path.join(workdir, f".write-test-{jax.process_index()}")
    try:
        os.makedirs(workdir, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(b"\0" * 4096)
            f.flush()
            os.fsync(f.fileno())
        os.remove(probe)
    except OSError as error:
        raise WorkdirError(
            f"workdir {workdir} is not writable: {error.strerror or error}; checkpoints, "
            "metrics and logs go there"
        ) from error


@dataclasses.dataclass(frozen=True)
class ResumeTerms:
    """What the resume guard reads of a config beside its keys, resolved from its record by the
    task's plan module (`plan.resume_terms`, `finetune.plan.resume_terms`): the same function
    for the new config and the saved one, so a difference is the configs', not two readings'."""

    optim: OptimizerSettings  # the learning-rate schedule
    resume_with_changes: bool  # `train.resume_with_changes`
    # A stage or a `data.anneal` point starts at a fraction of `train.steps`, which a new
    # `train.steps` moves.
    moves_with_steps: bool = False
    # What neutral keys decide together that alters the training (which lines evaluation holds
    # out of it), compared as keys of their own.
    derived: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def _value(value: Any) -> str:
    return "(absent)" if value is ABSENT else json.dumps(value)


def _neutral(key: str) -> bool:
    """`key` is one of `RESUME_NEUTRAL`, or under one of its sections (`"eval."`)."""
    return any(key == n or (n.endswith(".") and key.startswith(n)) for n in RESUME_NEUTRAL)


def only_lengthened(saved: ResumeTerms, new: ResumeTerms, step: int) -> bool:
    """A new `train.steps` of a warm-up–stable–decay run that changes nothing a checkpoint at
    `step` was trained with: both schedules are `wsd`, every step so far has the same learning
    rate under both (the run is still in its stable part), and no stage or anneal point sits
    at a fraction of the run. (A linear decay is refused: the run's length sets it from the
    first step, so a longer run is another schedule.)"""
    if {saved.optim.schedule, new.optim.schedule} != {"wsd"}:
        return False
    if saved.moves_with_steps or new.moves_with_steps:
        return False
    steps = np.arange(step + 1)
    rates = saved.optim.learning_rates(), new.optim.learning_rates()
    return bool(np.array_equal(rates[0](steps), rates[1](steps)))


def check_resume(
    workdir: str,
    record: ConfigRecord,
    step: int,
    terms: Callable[[ConfigRecord], ResumeTerms],
) -> None:
    """Logs how `record` (the run plan's) differs from the workdir's `config.json` for a run
    resuming at `step`; raises `ConfigError` when a change outside `RESUME_NEUTRAL` is not
    accepted by `train.resume_with_changes` (a longer `train.steps` that `only_lengthened` the
    run is accepted), and states what a changed schedule means for the next step's learning
    rate. `terms` resolves what else the guard compares, of either record."""
    path = os.path.join(workdir, CONFIG)
    if not os.path.isfile(path):
        return
    saved_record = ConfigRecord.read(path)
    saved, new = terms(saved_record), terms(record)
    found = [c for c in saved_record.changes(record) if c[0] != "train.resume_with_changes"]
    found += [
        (key, saved.derived[key], new.derived[key])
        for key in sorted(saved.derived)
        if saved.derived[key] != new.derived[key]
    ]
    lengthened = any(c[0] == "train.steps" for c in found) and only_lengthened(saved, new, step)
    altering = [c for c in found if not (_neutral(c[0]) or (c[0] == "train.steps" and lengthened))]
    listed = ", ".join(f"{key} {_value(old)} → {_value(now)}" for key, old, now in found)
    if altering and not new.resume_with_changes:
        keys = ", ".join(key for key, _, _ in altering)
        raise ConfigError(
            f"the config differs from {path}, whose run is at step {step}: {listed}; {keys} "
            "change the training the checkpoint is part of: add "
            "--config.train.resume_with_changes=True to continue with them, or use a new workdir"
        )
    if found:
        log.info("resuming at step %d with a changed config: %s", step, listed)
    if step and any(key.startswith(("train.steps", "optim.")) for key, *_ in found):
        log.info(
            "the learning-rate schedule is rebuilt from the new config: step %d trains at %.3g "
            "(step %d trained at %.3g under the old one)",
            step + 1,
            float(new.optim.learning_rates()(step)),
            step,
            float(saved.optim.learning_rates()(step - 1)),
        )


def save_config(workdir: str, record: ConfigRecord, step: int) -> None:
    """Writes `record` as `config.json`; a different one already there is kept as
    `config.step-N.json` (N: `step`, where the run it describes had got to)."""
    if jax.process_index() != 0:
        return
    path = os.path.join(workdir, CONFIG)
    if os.path.isfile(path):
        if not ConfigRecord.read(path).changes(record):
            return
        kept, number = os.path.join(workdir, f"config.step-{step}.json"), 1
        while os.path.exists(kept):
            number += 1
            kept = os.path.join(workdir, f"config.step-{step}-{number}.json")
        os.replace(path, kept)
        log.info("the previous config is kept as %s", kept)
    with open(path + ".tmp", "w") as f:
        json.dump(record.tree(), f, indent=2)
    os.replace(path + ".tmp", path)
