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

import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax
import numpy as np
import optax

from xlpretrain.core.errors import ConfigError
from xlpretrain.training.sections import OptimizerSettings

log = logging.getLogger("xlpretrain")
CONFIG = "config.json"
_ABSENT = object()  # a key one of two configs lacks


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


def _flat(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            yield from _flat(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1], tree


def changes(saved: Mapping, config: Mapping) -> list[tuple[str, Any, Any]]:
    """(key, saved value, new value) of every key whose value differs, in key order (`config`
    as `config.json` holds it: JSON values, tuples as lists)."""
    old, new = dict(_flat(saved)), dict(_flat(config))
    return [
        (key, old.get(key, _ABSENT), new.get(key, _ABSENT))
        for key in sorted(old.keys() | new.keys())
        if old.get(key, _ABSENT) != new.get(key, _ABSENT)
    ]


def _value(value: Any) -> str:
    return "(absent)" if value is _ABSENT else json.dumps(value)


def _neutral(key: str) -> bool:
    """`key` is one of `RESUME_NEUTRAL`, or under one of its sections (`"eval."`)."""
    return any(key == n or (n.endswith(".") and key.startswith(n)) for n in RESUME_NEUTRAL)


def _fractions_of_the_run(config: Mapping) -> bool:
    """Whether a stage or a `data.anneal` point starts at a fraction of `train.steps` (a float),
    so that a new `train.steps` moves it."""
    points = [*config.get("schedule", ()), *config.get("data", {}).get("anneal", ())]
    return any(isinstance(point.get("start_step", point.get("step")), float) for point in points)


def only_lengthened(saved: Mapping, config: Mapping, step: int) -> bool:
    """A new `train.steps` of a warm-up–stable–decay run that changes nothing a checkpoint at
    `step` was trained with: both configs' schedules are `wsd`, every step so far has the same
    learning rate under both (the run is still in its stable part), and no stage or anneal
    point sits at a fraction of the run. (A linear decay is refused: the run's length sets it
    from the first step, so a longer run is another schedule.)"""
    schedules = {c.get("optim", {}).get("schedule", "linear") for c in (saved, config)}
    if schedules != {"wsd"} or _fractions_of_the_run(saved) or _fractions_of_the_run(config):
        return False
    steps = np.arange(step + 1)
    return bool(np.array_equal(_schedule(saved)(steps), _schedule(config)(steps)))


def check_resume(
    workdir: str,
    config: Mapping,
    step: int,
    derived: Callable[[Mapping], Mapping[str, Any]] | None = None,
) -> None:
    """Logs how `config` (the run plan's record of its config) differs from the workdir's
    `config.json` for a run resuming at `step`; raises `ConfigError` when a change outside
    `RESUME_NEUTRAL` is not accepted by `train.resume_with_changes` (a longer `train.steps` that
    `only_lengthened` the run is accepted), and states what a changed schedule means for the
    next step's learning rate. `derived` resolves what neutral keys
    decide together that alters the training (which lines evaluation holds out of it) from a
    config read as a mapping, the new one or the saved one: compared as keys of its own."""
    path = os.path.join(workdir, CONFIG)
    if not os.path.isfile(path):
        return
    with open(path) as f:
        saved = json.load(f)
    found = [c for c in changes(saved, config) if c[0] != "train.resume_with_changes"]
    if derived is not None:
        old, new = derived(saved), derived(config)
        found += [(key, old[key], new[key]) for key in sorted(old) if old[key] != new[key]]
    lengthened = any(c[0] == "train.steps" for c in found) and only_lengthened(saved, config, step)
    altering = [c for c in found if not (_neutral(c[0]) or (c[0] == "train.steps" and lengthened))]
    listed = ", ".join(f"{key} {_value(old)} → {_value(new)}" for key, old, new in found)
    if altering and not config["train"]["resume_with_changes"]:
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
            float(_schedule(config)(step)),
            step,
            float(_schedule(saved)(step - 1)),
        )


def _schedule(config: Mapping) -> optax.Schedule:
    return OptimizerSettings.of(config).learning_rates()


def save_config(workdir: str, config: Mapping, step: int) -> None:
    """Writes `config.json`; a different one already there is kept as `config.step-N.json`
    (N: `step`, where the run it describes had got to)."""
    if jax.process_index() != 0:
        return
    path = os.path.join(workdir, CONFIG)
    if os.path.isfile(path):
        with open(path) as f:
            saved = json.load(f)
        if not changes(saved, config):
            return
        kept, number = os.path.join(workdir, f"config.step-{step}.json"), 1
        while os.path.exists(kept):
            number += 1
            kept = os.path.join(workdir, f"config.step-{step}-{number}.json")
        os.replace(path, kept)
        log.info("the previous config is kept as %s", kept)
    with open(path + ".tmp", "w") as f:
        json.dump(config, f, indent=2)
    os.replace(path + ".tmp", path)
