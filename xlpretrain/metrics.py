"""Where metrics go: `metrics.jsonl` (the contract), TensorBoard, and a progress line."""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Mapping

import jax
import numpy as np
from tensorboardX import SummaryWriter


class MetricsWriter:
    """Appends one JSON object per logged step and mirrors scalars to TensorBoard.

    Only process 0 writes, so a multi-host run produces one file.
    """

    def __init__(self, workdir: str | os.PathLike):
        self.enabled = jax.process_index() == 0
        if self.enabled:
            self._jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a")  # noqa: SIM115
            self._tb = SummaryWriter(os.path.join(workdir, "tb"))

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


def _plain(value) -> float:
    return float(np.asarray(value))


def progress_line(step: int, total: int, scalars: Mapping[str, float], seconds_left: float) -> str:
    """`step 30/60 | loss 5.12 (mmlm 5.10 tlm 5.15) | 12.3k tok/s | ETA 0:01:23`"""
    parts = [
        f"{k.split('/', 1)[1]} {v:.3f}" for k, v in sorted(scalars.items()) if k.startswith("loss/")
    ]
    eta = datetime.timedelta(seconds=int(max(seconds_left, 0)))
    return (
        f"step {step}/{total} | loss {scalars['loss']:.4f} ({' '.join(parts)}) | "
        f"{scalars.get('tokens_per_s', 0.0) / 1e3:.1f}k tok/s | ETA {eta}"
    )


def read_metrics(workdir: str | os.PathLike) -> list[dict]:
    """The records of `metrics.jsonl`, in order (for tests and analysis)."""
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]
