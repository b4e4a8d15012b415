"""Joining a multi-process JAX run: explicit environment first, then the cluster's own.

``JAX_COORDINATOR_ADDRESS`` (host:port), ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID`` name the
run explicitly (``python -m xlpretrain.launch local`` sets them; so can any scheduler). Without
them, ``jax.distributed.initialize()`` detects TPU pods, SLURM and GKE by itself. On CPUs the
processes exchange data through Gloo, which JAX needs to be told to use.
"""

from __future__ import annotations

import os

import jax

ENV_VARS = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")
TIMEOUT_VAR = "XLPRETRAIN_DISTRIBUTED_TIMEOUT"  # seconds to wait for every process to join


def initialize(environ: dict[str, str] | None = None) -> None:
    """Calls ``jax.distributed.initialize`` from the environment; a partial explicit setting is
    an error naming the missing variables (a silent auto-detection would hang instead)."""
    environ = os.environ if environ is None else environ
    given = [name for name in ENV_VARS if environ.get(name)]
    missing = [name for name in ENV_VARS if name not in given]
    if given and missing:
        raise ValueError(
            f"distributed start: {', '.join(given)} set but {', '.join(missing)} missing; "
            f"set all of {', '.join(ENV_VARS)} or none (to auto-detect TPU, SLURM or GKE)"
        )
    timeout = int(environ.get(TIMEOUT_VAR, "300"))
    if jax.config.jax_platforms == "cpu" or environ.get("JAX_PLATFORMS") == "cpu":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if not given:
        jax.distributed.initialize(initialization_timeout=timeout)
        return
    jax.distributed.initialize(
        coordinator_address=environ["JAX_COORDINATOR_ADDRESS"],
        num_processes=int(environ["JAX_NUM_PROCESSES"]),
        process_id=int(environ["JAX_PROCESS_ID"]),
        initialization_timeout=timeout,
    )
