"""Where metrics go: `metrics.jsonl` (the contract), TensorBoard, and a progress line."""

from __future__ import annotations

import datetime
import json
import logging
import os
from collections.abc import Mapping

import jax
import numpy as np
from tensorboardX import SummaryWriter

log = logging.getLogger("xlpretrain")


class MetricsWriter:
    """Appends one JSON object per logged step and mirrors scalars to TensorBoard.

    Only process 0 writes, so a multi-host run produces one file. A run starting at
    ``resume_step`` (0 when there is no checkpoint) first drops the records of later steps —
    written by a run that was killed before it checkpointed them, and about to be written
    again — and a line torn by the kill, so ``metrics.jsonl`` holds each step once;
    TensorBoard purges them likewise.
    """

    def __init__(self, workdir: str | os.PathLike, resume_step: int = 0):
        self.enabled = jax.process_index() == 0
        if self.enabled:
            path = os.path.join(workdir, "metrics.jsonl")
            if os.path.exists(path):
                _truncate_after(path, resume_step)
            self._jsonl = open(path, "a")  # noqa: SIM115
            self._tb = SummaryWriter(os.path.join(workdir, "tb"), purge_step=resume_step + 1)

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

    def close(self) -> None:
        if self.enabled:
            self._jsonl.close()
            self._tb.close()


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


def progress_line(step: int, total: int, scalars: Mapping[str, float], seconds_left: float) -> str:
    """`step 30/60 | loss 5.12 (mmlm 5.10 tlm 5.15) | 12.3k tok/s | ETA 0:01:23`"""
    parts = [
        f"{k.split('/', 1)[1]} {v:.3f}" for k, v in sorted(scalars.items()) if k.startswith("loss/")
    ]
    eta = datetime.timedelta(seconds=int(max(seconds_left, 0)))
    line = (
        f"step {step}/{total} | loss {scalars['loss']:.4f} ({' '.join(parts)}) | "
        f"{scalars.get('tokens_per_s', 0.0) / 1e3:.1f}k tok/s | ETA {eta}"
    )
    held_out = [
        f"{k.removeprefix('eval/loss/')} {v:.3f}"
        for k, v in sorted(scalars.items())
        if k.startswith("eval/loss/")
    ]
    if "eval/retrieval" in scalars:
        held_out.append(f"retrieval@1 {scalars['eval/retrieval']:.3f}")
    return line + (f" | eval {' '.join(held_out)}" if held_out else "")


def read_metrics(workdir: str | os.PathLike) -> list[dict]:
    """The records of `metrics.jsonl`, in order (for tests and analysis)."""
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]
