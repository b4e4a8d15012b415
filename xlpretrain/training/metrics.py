"""Where metrics go: `metrics.jsonl` (the contract), TensorBoard, optionally Weights & Biases,
and a progress line."""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Mapping, Sequence

import jax
import numpy as np

from xlpretrain.core.errors import require
from xlpretrain.eval.scripts import group_label

log = logging.getLogger("xlpretrain")


class MetricsWriter:
    """Appends one JSON object per logged step and mirrors scalars to TensorBoard.

    Only process 0 writes, so a multi-host run produces one file. A run starting at
    ``resume_step`` (0 when there is no checkpoint) first drops the records of later steps —
    written by a run that was killed before it checkpointed them, and about to be written
    again — and a line torn by the kill, so ``metrics.jsonl`` holds each step once;
    TensorBoard purges them likewise.

    With ``wandb_project``, the records also go to a Weights & Biases run named after the
    workdir, whose id is kept in ``WORKDIR/wandb_run_id`` so that a resumed run continues it
    (W&B ignores a step it already has, so redone steps keep their first values there).
    """

    def __init__(
        self,
        workdir: str | os.PathLike,
        resume_step: int = 0,
        *,
        wandb_project: str = "",
        run_config: Mapping | None = None,
    ):
        self.enabled = jax.process_index() == 0
        self._wandb = None
        if self.enabled:
            path = os.path.join(workdir, "metrics.jsonl")
            if os.path.exists(path):
                _truncate_after(path, resume_step)
            self._jsonl = open(path, "a")  # noqa: SIM115
            self._tb = _summary_writer(os.path.join(workdir, "tb"), purge_step=resume_step + 1)
            if wandb_project:
                self._wandb = _wandb_run(workdir, wandb_project, run_config or {})

    def write(self, step: int, scalars: Mapping[str, float]) -> None:
        if not self.enabled:
            return
        record = {"step": step, **{k: _plain(v) for k, v in scalars.items()}}
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        for key, value in record.items():
            if key != "step":
                self._tb.add_scalar(key, value, step)
        self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(dict(scalars), step=step)

    def close(self) -> None:
        if self.enabled:
            self._jsonl.close()
            self._tb.close()
            if self._wandb is not None:
                self._wandb.finish()


def _summary_writer(logdir: str, purge_step: int):
    """tensorboardX's `SummaryWriter`, imported without torch: tensorboardX imports torch when
    it is installed (about 2 s of every run's start-up, 1.8 s of a `train` command's 3.5 s of
    imports) only to accept torch tensors, and the scalars written here are floats. A process
    that has imported torch already keeps it."""
    if "torch" in sys.modules:
        from tensorboardX import SummaryWriter
    else:
        sys.modules["torch"] = None  # `import torch` raises ImportError while this is set
        try:
            from tensorboardX import SummaryWriter
        finally:
            del sys.modules["torch"]
    return SummaryWriter(logdir, purge_step=purge_step)


def _wandb_run(workdir: str | os.PathLike, project: str, run_config: Mapping):
    """The workdir's W&B run: started, or resumed by the id its first start saved (config
    validation has checked that wandb is installed)."""
    wandb = require("wandb", "train.wandb_project")

    id_path = os.path.join(workdir, "wandb_run_id")
    if os.path.exists(id_path):
        with open(id_path) as f:
            run_id = f.read().strip()
    else:
        run_id = uuid.uuid4().hex[:12]  # letters and digits, as W&B ids must be
        with open(id_path, "w") as f:
            f.write(run_id + "\n")
    return wandb.init(
        project=project,
        id=run_id,
        resume="allow",
        name=os.path.basename(os.path.abspath(workdir)),
        dir=workdir,
        config=dict(run_config),
    )


def _truncate_after(path: str, step: int) -> None:
    """Rewrites ``path`` without records after ``step`` or lines that do not parse."""
    kept, dropped = [], 0
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                dropped += 1
                continue
            if record["step"] <= step:
                kept.append(line)
            else:
                dropped += 1
    if dropped:
        log.info(
            "metrics.jsonl: dropped %d record(s) after step %d, from an interrupted run",
            dropped,
            step,
        )
        with open(path + ".tmp", "w") as f:
            f.writelines(kept)
        os.replace(path + ".tmp", path)


def _plain(value) -> float:
    return float(np.asarray(value))


def _per_objective(scalars: Mapping[str, float], prefix: str) -> str:
    return " ".join(
        f"{k.removeprefix(prefix)} {v:.3f}"
        for k, v in sorted(scalars.items())
        if k.startswith(prefix) and "/" not in k.removeprefix(prefix)
    )


def progress_line(
    step: int,
    total: int,
    scalars: Mapping[str, float],
    seconds_left: float,
    stop_at: int | None = None,
) -> str:
    """`step 30/60 | loss 5.1234 (mmlm 5.100 tlm 5.150) | acc mmlm 0.120 tlm 0.100 |
    lr 4.80e-04 | grad 1.23 | 12.3k tok/s | ETA 0:01:23 | eval mmlm 5.300 retrieval@1 0.125`.
    A run that stops short of its `total` steps (`train.stop_at`) shows both, so that its
    steps still read against the run's length (and its schedule): `step 30/60 (stopping at
    40)`, and the ETA, which counts to the stop, says so: `ETA 0:00:12 to step 40`."""
    stops_early = stop_at is not None and stop_at < total
    losses = _per_objective(scalars, "loss/")
    parts = [
        f"step {step}/{total}" + (f" (stopping at {stop_at})" if stops_early else ""),
        f"loss {scalars['loss']:.4f} ({losses})",
    ]
    if accuracy := _per_objective(scalars, "accuracy/"):
        parts.append(f"acc {accuracy}")
    if "learning_rate" in scalars:
        parts.append(f"lr {scalars['learning_rate']:.2e}")
    if "grad_norm" in scalars:
        parts.append(f"grad {scalars['grad_norm']:.3g}")
    parts.append(f"{scalars.get('tokens_per_s', 0.0) / 1e3:.1f}k tok/s")
    eta = f"ETA {datetime.timedelta(seconds=int(max(seconds_left, 0)))}"
    parts.append(eta + (f" to step {stop_at}" if stops_early else ""))
    # Held-out losses per objective (pre-training), else accuracies per language (fine-tuning).
    held_out = [_per_objective(scalars, "eval/loss/")]
    if not held_out[0] and (accuracy := _per_objective(scalars, "eval/accuracy/")):
        held_out = [f"accuracy {accuracy}"]
    if "eval/retrieval" in scalars:
        held_out.append(f"retrieval@1 {scalars['eval/retrieval']:.3f}")
    if held_out := [part for part in held_out if part]:
        parts.append("eval " + " ".join(held_out))
    return " | ".join(parts)


class Progress:
    """Tokens, time and the ETA of a run. The first step (which compiles) is timed on its own,
    so the ETA on the first line after it reflects steps, not compilation."""

    def __init__(self, start_step: int, end_step: int):
        self.start_step, self.end_step = start_step, end_step
        self.started = time.perf_counter()
        self.first_done: float | None = None  # when the first step finished
        self.tokens = 0
        self._window_tokens, self._window_start = 0, self.started

    def step_done(self, step: int, tokens: int, block_on) -> None:
        self.tokens += tokens
        self._window_tokens += tokens
        if step == self.start_step + 1:
            jax.block_until_ready(block_on)
            self.first_done = time.perf_counter()

    def tokens_per_s(self) -> float:
        """Tokens per second since the last call (the logged interval), then restarts it."""
        now = time.perf_counter()
        rate = self._window_tokens / max(now - self._window_start, 1e-9)
        self._window_tokens, self._window_start = 0, now
        return rate

    def restart_window(self) -> None:
        """Excludes what follows (an evaluation) from the next interval."""
        self._window_start = time.perf_counter()

    def exclude(self, seconds: float, tokens: int) -> None:
        """Leaves a step that compiled (a new stage's first) out of the logged interval."""
        self._window_start += seconds
        self._window_tokens -= tokens

    def seconds_left(self, step: int) -> float:
        """From the steps after the first; the first step's time alone when it is all there is."""
        now = time.perf_counter()
        if step > self.start_step + 1 and self.first_done is not None:
            per_step = (now - self.first_done) / (step - self.start_step - 1)
        else:
            per_step = now - self.started
        return per_step * (self.end_step - step)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


def best_held_out(history: Sequence[Mapping[str, float]]) -> dict[str, tuple[float, int]]:
    """`eval/*` key → (best value, its step) over logged records: the lowest loss, the highest
    accuracy or retrieval."""
    best: dict[str, tuple[float, int]] = {}
    for record in history:
        for key, value in record.items():
            if not key.startswith("eval/"):
                continue
            lower = "/loss" in key
            if key not in best or (value < best[key][0] if lower else value > best[key][0]):
                best[key] = (value, record["step"])
    return best


def summary_lines(
    *,
    first_step: int,
    last_step: int,
    total_steps: int,
    seconds: float,
    tokens: int,
    last: Mapping[str, float],
    best: Mapping[str, tuple[float, int]],
    checkpoint: str | None,
    next_steps: Sequence[str],
    baselines: Mapping[str, Mapping[str, float]] | None = None,
    curves: str | None = None,
) -> list[str]:
    """What a finished run says: steps, time and tokens, the last losses and accuracies per
    objective, the last held-out figures beside references that need no training (`baselines`:
    an `eval/*` key → {name: value}), the
    best ones, where the checkpoint and the picture of the run (`curves`) are and what to run
    next."""
    took = datetime.timedelta(seconds=int(seconds))
    done = "finished" if last_step == total_steps else "stopped after"
    lines = [
        f"{done} steps {first_step}-{last_step} of {total_steps} in {took}: {tokens:,} tokens "
        f"({tokens / max(seconds, 1e-9) / 1e3:.1f}k tokens/s)"
    ]
    objectives = sorted(k.removeprefix("loss/") for k in last if k.startswith("loss/"))
    finals = [
        f"{name} loss {last[f'loss/{name}']:.4f}"
        + (f" accuracy {last[f'accuracy/{name}']:.3f}" if f"accuracy/{name}" in last else "")
        for name in objectives
    ]
    if "loss" in last:
        per_objective = f" ({', '.join(finals)})" if finals else ""
        lines.append(f"final loss {last['loss']:.4f}{per_objective}")
    if baselines and (compared := _beside_baselines(last, baselines)):
        lines.append(f"held-out at step {last['step']}: {compared}")
    if best := {k: v for k, v in best.items() if not k.startswith("eval/retrieval/")}:
        figures = (f"{k.removeprefix('eval/')} {v:.4f} (step {s})" for k, (v, s) in best.items())
        lines.append("best held-out: " + ", ".join(sorted(figures)))
    if checkpoint:
        lines.append(f"checkpoint: {checkpoint}")
    if curves:
        lines.append(f"curves: {curves}")
    if last_step < total_steps:
        lines.append(how_to_continue(total_steps))
    lines += [f"next: {command}" for command in next_steps]
    return lines


def how_to_continue(total_steps: int) -> str:
    """What a run stopped short of its `total_steps` (train.stop_at) says about going on."""
    return (
        f"to continue to step {total_steps}: run the same command again, without "
        "train.stop_at or with a later one"
    )


def _beside_baselines(
    last: Mapping[str, float], baselines: Mapping[str, Mapping[str, float]]
) -> str:
    """ "mmlm loss 3.2100 (unigram 5.9000) accuracy 0.352 (unigram 0.081); retrieval@1 0.420
    (step 0 0.380, chance 0.009): across scripts 0.050 (step 0 0.030, chance 0.009), within
    Latin 0.700 (step 0 0.650, chance 0.009)" for the figures of `last` that have references."""

    def figure(what: str, key: str, digits: int) -> str:
        references = ", ".join(f"{n} {v:.{digits}f}" for n, v in baselines[key].items())
        return f"{what} {last[key]:.{digits}f} ({references})"

    parts = []
    for name in sorted(k.removeprefix("eval/loss/") for k in last if k.startswith("eval/loss/")):
        figures = [
            figure(what, key, digits)
            for what, digits in (("loss", 4), ("accuracy", 3))
            if (key := f"eval/{what}/{name}") in baselines and key in last
        ]
        if figures:
            parts.append(f"{name} {' '.join(figures)}")
    if "eval/retrieval" in baselines and "eval/retrieval" in last:
        groups = [
            figure(group_label(key.removeprefix("eval/retrieval/")), key, 3)
            for key in baselines
            if key.startswith("eval/retrieval/") and key in last
        ]
        breakdown = f": {', '.join(groups)}" if groups else ""
        parts.append(figure("retrieval@1", "eval/retrieval", 3) + breakdown)
    return "; ".join(parts)


def read_metrics(workdir: str | os.PathLike) -> list[dict]:
    """The records of `metrics.jsonl`, in order (for tests and analysis)."""
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]
