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


class Interrupted(Exception):
    """Ctrl-C stopped the run after a step, with a checkpoint of it."""


class PreemptionWatch:
    """``reached(step)``: stop after this step. A context manager, so the previous SIGTERM and
    SIGINT handlers are back once training ends.

    Ctrl-C (SIGINT) in a one-process run is a preemption the user asked for: the first one
    finishes the step and saves it (``interrupted`` is then True), a second one aborts at once
    (``KeyboardInterrupt``)."""

    def __init__(self, manager: ocp.CheckpointManager):
        self._manager = manager
        self._signal: int | None = None
        self._announced = False
        self._previous: dict[int, object] = {}

    @property
    def interrupted(self) -> bool:
        return self._signal == signal.SIGINT

    def __enter__(self) -> PreemptionWatch:
        if jax.process_count() == 1:
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self._note)
        return self

    def __exit__(self, *exc_info) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    def _note(self, signum: int, frame) -> None:
        """The handler only notes the signal: it interrupts the main thread anywhere, and a
        log line written from it inside the main thread's own write to the console fails
        ("reentrant call"); `reached` says it at the step boundary."""
        del frame
        self._signal = signum
        if signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def reached(self, step: int) -> bool:
        if jax.process_count() > 1:
            return self._manager.reached_preemption(step)
        if self._signal is not None and not self._announced:
            self._announced = True
            if self.interrupted:
                log.warning(
                    "Ctrl-C: stopping after step %d with a checkpoint (Ctrl-C again aborts now, "
                    "losing the steps since the last checkpoint)",
                    step,
                )
            else:
                log.warning(
                    "received %s: stopping after step %d with a checkpoint",
                    signal.Signals(self._signal).name,
                    step,
                )
        return self._signal is not None
