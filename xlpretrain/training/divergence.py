"""Divergence: a step whose loss or gradient norm is not finite skips its update (in the
jitted step); ``train.max_bad_steps`` of them in a row stop the run, since the state is then
not going to recover by itself."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import jax

log = logging.getLogger("xlpretrain")


class DivergenceError(FloatingPointError):
    """Too many consecutive non-finite steps."""


class BadStepGuard:
    """Counts skipped steps. Each step's flag is read when the next step has been dispatched,
    so the host never waits for the device on a step it has just queued."""

    def __init__(self, max_bad_steps: int):
        self.max_bad_steps = max_bad_steps
        self.total = 0  # skipped steps in this process's part of the run
        self.in_a_row = 0
        self._first_in_a_row = 0
        self._pending: tuple[int, Mapping[str, jax.Array]] | None = None

    def observe(self, step: int, metrics: Mapping[str, jax.Array]) -> None:
        """Takes step ``step``'s device metrics; checks the previous step's."""
        self.flush()
        self._pending = step, {k: metrics[k] for k in ("finite", "loss", "grad_norm")}

    def flush(self) -> None:
        """Checks the last observed step; raises ``DivergenceError`` at the limit."""
        if self._pending is None:
            return
        step, metrics = self._pending
        self._pending = None
        values = jax.device_get(metrics)
        if values["finite"]:
            self.in_a_row = 0
            return
        self.total += 1
        self.in_a_row += 1
        if self.in_a_row == 1:
            self._first_in_a_row = step
        what = f"loss={float(values['loss'])}, grad_norm={float(values['grad_norm'])}"
        log.warning(
            "step %d: %s is not finite; its update was skipped (%d in a row; train.max_bad_steps"
            "=%d)",
            step,
            what,
            self.in_a_row,
            self.max_bad_steps,
        )
        if self.max_bad_steps and self.in_a_row >= self.max_bad_steps:
            raise DivergenceError(
                f"the run diverged: the loss or gradient norm was not finite in {self.in_a_row} "
                f"consecutive steps ({self._first_in_a_row}-{step}; at step {step}: {what}), "
                f"train.max_bad_steps={self.max_bad_steps}. Their updates were skipped; lower "
                "optim.learning_rate, add warm-up or gradient clipping, or check the data"
            )
