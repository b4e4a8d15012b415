"""Preemption notices: stop at a step boundary with a checkpoint instead of losing the steps
since the last one.

SLURM, Kubernetes (GKE) and Compute Engine send SIGTERM some seconds before they take a machine.
One process catches it itself. A multi-process run relies on JAX's preemption service
(started by ``jax.distributed.initialize``), which hears the notice on any host — including
Cloud TPU maintenance events — and makes every process agree on the step at which to stop;
installing our own handler there would hide the signal from it.
"""

from __future__ import annotations

import logging
import signal

import jax
import orbax.checkpoint as ocp

log = logging.getLogger("xlpretrain")


class PreemptionWatch:
    """``reached(step)``: stop after this step. A context manager, so the previous SIGTERM
    handler is back once training ends."""

    def __init__(self, manager: ocp.CheckpointManager):
        self._manager = manager
        self._signal: int | None = None
        self._previous = None

    def __enter__(self) -> PreemptionWatch:
        if jax.process_count() == 1:
            self._previous = signal.signal(signal.SIGTERM, self._note)
        return self

    def __exit__(self, *exc_info) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)

    def _note(self, signum: int, frame) -> None:
        del frame
        self._signal = signum
        log.warning(
            "received %s: stopping after this step with a checkpoint", signal.Signals(signum).name
        )

    def reached(self, step: int) -> bool:
        if jax.process_count() == 1:
            return self._signal is not None
        return self._manager.reached_preemption(step)
