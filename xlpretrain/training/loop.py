"""The training loop every task runs on: pre-training (`xlpretrain.training.trainer`) and
fine-tuning (`xlpretrain.finetune.task_run`) alike.

It owns what a long run needs whatever the model: resuming from the newest readable checkpoint
(state and input iterator, so the stream continues exactly), checkpoints on schedule, at the end
and on a preemption notice (SIGTERM), metrics to `metrics.jsonl` and TensorBoard, stopping on
repeated non-finite steps with the last checkpoint named, an optional profile window, the
task's evaluation every `eval_every` steps, and a picture of the run however it ends
(`curves.png`). The task supplies the compiled steps (`Training`), the dataset of step batches
and, for staged runs, which stage a step belongs to.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grain
import jax
import numpy as np

from xlpretrain.data.pretraining.pipeline import iterators
from xlpretrain.parallel.sharding import global_batch
from xlpretrain.training.checkpoint import Checkpointer, abstract_with_shardings
from xlpretrain.training.curves import write_curves
from xlpretrain.training.divergence import BadStepGuard, DivergenceError
from xlpretrain.training.metrics import (
    MetricsWriter,
    Progress,
    best_held_out,
    how_to_continue,
    progress_line,
    summary_lines,
)
from xlpretrain.training.preemption import Interrupted, PreemptionWatch
from xlpretrain.training.sections import LoopSettings
from xlpretrain.training.step import Training, TrainState

log = logging.getLogger("xlpretrain")


def real_tokens(local: Mapping[str, Mapping[str, np.ndarray]]) -> int:
    """Non-padding tokens of this process's batches."""
    return sum(int(np.count_nonzero(batch["segment_ids"])) for batch in local.values())


@dataclasses.dataclass
class Loop:
    """One task's training, as `run` drives it."""

    workdir: str
    training: Training
    dataset: grain.IterDataset  # step k-1 → this process's batches of logged step k
    checkpointer: Checkpointer
    end_step: int  # the last step this invocation runs (train.stop_at, else train.steps)
    total_steps: int  # train.steps: the run's length, which a train.stop_at run stops short of
    log_every: int
    checkpoint_every: int
    max_bad_steps: int
    allow_fresh_start: bool
    stage_of: Callable[[int], int] = lambda step: 0
    # Whether a step starts a stage that trains other parameters (Adam's moments restart).
    restarts_moments: Callable[[int], bool] = lambda step: False
    staged: bool = False  # log each step's stage
    describe_stage: Callable[[int], str] = lambda stage: f"stage {stage}"  # announced at its start
    evaluate: Callable[[Any, int], dict[str, float]] | None = None  # (params, stage) → scalars
    # (params, step, the evaluation's scalars): what a run keeps of an evaluated state, e.g. the
    # parameters that score best on a development set (fine-tuning's checkpoint selection).
    after_evaluate: Callable[[Any, int, Mapping[str, float]], None] | None = None
    eval_every: int = 0  # and at the last step
    # An `eval/*` key → references by name that need no training, set beside it in the summary.
    baselines: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    profile: tuple[int, int] | None = None  # [start, end) steps traced to WORKDIR/profile
    next_steps: Sequence[str] = ()  # commands the final summary suggests
    # Host-side settings of a logged step (the annealed data settings), logged with it.
    data_scalars: Callable[[int], dict[str, float]] | None = None
    wandb_project: str = ""  # also log to this Weights & Biases project ("": off)
    curves: bool = False  # draw WORKDIR/curves.png when the run ends, however it ends
    run_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # for W&B


def checkpointer(workdir: str, train: LoopSettings) -> Checkpointer:
    """`WORKDIR/checkpoints/` as the loop's settings keep them."""
    return Checkpointer(
        os.path.join(workdir, "checkpoints"),
        keep=train.keep_checkpoints,
        async_save=train.async_checkpointing,
    )


def settings(train: LoopSettings) -> dict[str, Any]:
    """The `Loop` fields the loop's settings set, for every task."""
    return {
        "end_step": train.end_step,
        "total_steps": train.steps,
        "log_every": train.log_every,
        "checkpoint_every": train.checkpoint_every,
        "max_bad_steps": train.max_bad_steps,
        "allow_fresh_start": train.allow_fresh_start,
        "wandb_project": train.wandb_project,
        "eval_every": train.eval_every,
    }


def finished(workdir: str, step: int | None, train: LoopSettings) -> str | None:
    """What a run whose newest checkpoint is at `step` has left to do under `train`: None if
    it has steps to run, else the one line that says so and how to go on (read before any
    data is scanned or anything compiled, so re-running a finished run answers at once)."""
    if step is None or step < train.end_step:
        return None
    where = os.path.join(workdir, "checkpoints", str(step))
    if step < train.steps:
        how = f"train.stop_at={train.stop_at}; {how_to_continue(train.steps)}"
    else:
        how = (
            f"{'the last' if step == train.steps else 'past the end'} of train.steps="
            f"{train.steps}: raise it (with --config.train.resume_with_changes=True) to train "
            "further"
        )
    return f"nothing to do: the latest checkpoint, {where}, is at step {step}, {how}"


def run(loop: Loop) -> TrainState:
    """Trains from the newest readable checkpoint (or step 0) to `loop.end_step`; stops early,
    with a checkpoint, on a preemption notice (SIGTERM) or Ctrl-C (then raises `Interrupted`),
    and ends with a summary of the run. However it ends, the data iterator is closed on the way
    out: grain's worker processes and threads stopped, their batches' shared memory freed."""
    with iterators(loop.dataset) as new_iterator:
        return _run(loop, new_iterator)


def _run(loop: Loop, new_iterator: Callable[[], grain.DatasetIterator]) -> TrainState:
    training, checkpointer, end_step = loop.training, loop.checkpointer, loop.end_step
    iterator = new_iterator()
    state, start_step = training.state, 0
    if checkpointer.latest_step() is not None:
        abstract = abstract_with_shardings(state, training.state_shardings)
        restored = checkpointer.restore_latest(
            abstract, iterator, allow_fresh_start=loop.allow_fresh_start
        )
        if restored is None:  # every checkpoint failed; the iterator may be half-restored
            iterator = new_iterator()  # (and is closed)
        else:
            state, start_step = restored
            log.info("resumed from %s/%d", checkpointer.directory, start_step)
    if start_step >= end_step:
        log.info("nothing to do: the latest checkpoint is at step %d", start_step)
        return state

    writer = MetricsWriter(
        loop.workdir,
        resume_step=start_step,
        wandb_project=loop.wandb_project,
        run_config=loop.run_config,
    )
    profile = loop.profile
    guard = BadStepGuard(loop.max_bad_steps)
    progress = Progress(start_step, end_step)
    history: list[dict[str, float]] = []
    last_saved, step, stage, ended = start_step, start_step, None, False
    log.info(
        "compiling the train step; then steps %d-%d (logged every %d)",
        start_step + 1,
        end_step,
        loop.log_every,
    )
    try:
        with PreemptionWatch(checkpointer.manager) as preemption:
            for step in range(start_step + 1, end_step + 1):
                if profile and step == profile[0]:
                    jax.profiler.start_trace(os.path.join(loop.workdir, "profile"))
                local = next(iterator)
                stage_starts = loop.stage_of(step) != stage
                if stage_starts:
                    stage = loop.stage_of(step)
                    if loop.staged:
                        log.info("step %d: %s", step, loop.describe_stage(stage))
                if step > 1 and loop.restarts_moments(step):
                    log.info("stage %d trains other parameters: Adam's moments restart", stage)
                    state = training.restart_moments(state)
                step_fn = training.step_fns[stage]
                started, tokens = time.perf_counter(), jax.process_count() * real_tokens(local)
                state, metrics = step_fn(state, global_batch(local, training.batch_sharding))
                progress.step_done(step, tokens, metrics)
                if stage_starts and step > start_step + 1:  # a stage's step compiles first
                    jax.block_until_ready(metrics)
                    seconds = time.perf_counter() - started
                    log.info(
                        "step %d: stage %d's step compiled and ran in %.1f s",
                        step,
                        stage + 1,
                        seconds,
                    )
                    progress.exclude(seconds, tokens)
                del local  # its shared memory goes now, not with a traceback that holds this frame
                guard.observe(step, metrics)
                if profile and step == profile[1] - 1:
                    jax.block_until_ready(state)
                    jax.profiler.stop_trace()
                preempted = preemption.reached(step)
                evaluate = loop.evaluate is not None and (
                    step % loop.eval_every == 0 or step == end_step
                )
                if step % loop.log_every == 0 or step == end_step or preempted or evaluate:
                    guard.flush()
                    scalars = {k: float(v) for k, v in jax.device_get(metrics).items()}
                    scalars["skipped_steps"] = guard.total
                    scalars["tokens_per_s"] = progress.tokens_per_s()
                    scalars.pop("finite")
                    if loop.staged:
                        scalars["stage"] = stage
                    if loop.data_scalars is not None:
                        scalars.update(loop.data_scalars(step))
                    if evaluate:  # its time is not the step's: the next interval starts after
                        evaluated = loop.evaluate(state.params, stage)
                        if loop.after_evaluate is not None:
                            loop.after_evaluate(state.params, step, evaluated)
                        scalars.update(evaluated)
                        progress.restart_window()
                    writer.write(step, scalars)
                    history.append({"step": step, **scalars})
                    left = progress.seconds_left(step)  # to end_step
                    log.info("%s", progress_line(step, loop.total_steps, scalars, left, end_step))
                if step % loop.checkpoint_every == 0 or step == end_step or preempted:
                    guard.flush()  # never checkpoint past the step that ends the run
                    checkpointer.save(step, state, iterator)
                    last_saved = step
                if preempted:
                    how = "Ctrl-C" if preemption.interrupted else "preempted"
                    message = (
                        f"{how}: stopped after step {step} with a checkpoint in "
                        f"{checkpointer.directory}; run the same command to resume"
                    )
                    if preemption.interrupted:  # `finally` waits for the save first
                        raise Interrupted(message)
                    log.warning("%s", message)
                    break
            guard.flush()
        ended = True
    except DivergenceError as error:
        raise DivergenceError(
            f"{error}. The last checkpoint is step {last_saved} in {checkpointer.directory}"
        ) from None
    finally:
        checkpointer.wait()
        writer.close()
        curves = draw_curves(loop)
        if curves and not ended:  # no summary follows (Ctrl-C, divergence): name it here
            log.info("curves: %s", curves)
    for line in summary_lines(
        first_step=start_step + 1,
        last_step=step,
        total_steps=loop.total_steps,
        seconds=progress.elapsed(),
        tokens=progress.tokens,
        last=history[-1] if history else {},
        best=best_held_out(history),
        baselines=loop.baselines,
        checkpoint=os.path.join(checkpointer.directory, str(last_saved)),
        curves=curves,
        next_steps=loop.next_steps if step == loop.total_steps else (),
    ):
        log.info("%s", line)
    return state


def draw_curves(loop: Loop) -> str | None:
    """`WORKDIR/curves.png` from the whole `metrics.jsonl` (process 0, which writes it), or
    None. A picture that cannot be drawn is a warning: it must neither cost a run its exit
    status nor hide, from a `finally`, why the run stopped."""
    if not loop.curves or jax.process_index() != 0:
        return None
    try:
        return write_curves(loop.workdir, loop.baselines)
    except Exception as error:  # a convenience, drawn after the checkpoint is safe
        log.warning("curves: not drawn: %s: %s", type(error).__name__, error)
        return None
