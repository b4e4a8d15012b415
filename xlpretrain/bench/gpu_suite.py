"""The first GPU session's one command: `python -m xlpretrain.bench --suite gpu --out DIR`.

Until a GPU runs it, the fused kernel is checked only in interpret mode and compiled for sm_90a
(docs/performance.md), its tiles are the smallest that never spill rather than the fastest, and
the "Measured → H100" table is empty. A session lent a GPU has minutes, so one command does all
of it, each step in a child process under its own time budget (together under 9 minutes on
one H100): a hung compile or an out-of-memory is that step's recorded result and the next step
still runs, and each step's peak memory is its own.

1. ``kernel_check`` (`bench.kernel_check`): the kernel on this GPU against a plain-XLA
   reference with the mask, bias and dropout materialised: every mask, no bias, the bucketed
   and the gated bias, dropout; float32, packed rows with padding, a length no tile divides;
   forward and every gradient.
2. ``tile_sweep`` (`bench.tile_sweep`): candidate tiles per kernel compiled on the heaviest
   bf16 case (those that spill dropped), the rest timed at XLM-R base's attention shape; the
   fastest per kernel wins.
3. ``step_*``, ``peer_*`` (`bench.gpu_timings`, as are 4 and 5): `configs/xlmr.py:base`
   (batch 32 × 512, bf16) with ``attention=pallas`` (the winning tiles), ``cudnn`` and
   ``xla``; Hugging Face's step per mode.
4. ``attention_*``: the attention micro-benchmark at L = 512 and 2048.
5. ``pipeline_workers``: the input pipeline on the host's CPUs, from a synthetic prepared
   store, with 0, 4 and 8 grain workers: whether one host feeds 8 GPUs (5.6 M tokens/s).

DIR gets ``suite.json`` (everything), ``performance.md`` (rows for docs/performance.md;
`bench.gpu_report`) and ``suite.log`` (the steps' output). This module runs the steps: ``python
-m xlpretrain.bench.gpu_suite UNIT PARAMS RESULTS`` runs one (a name in ``UNITS``); the suite
starts each so.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping

import jax

from xlpretrain.bench import peer as bench_peer
from xlpretrain.bench.gpu_report import peer_ratios, performance_markdown, summary
from xlpretrain.bench.gpu_timings import (
    ATTENTION_IMPLS,
    ATTENTION_LENGTHS,
    PIPELINE_GB,
    PIPELINE_STEPS,
    PIPELINE_WORKERS,
    attention_timings,
    peer,
    pipeline_workers,
    step_throughput,
)
from xlpretrain.bench.kernel_check import error_text, kernel_check
from xlpretrain.bench.tile_sweep import pick_tiles, sweep_default, tile_sweep
from xlpretrain.model import kernels
from xlpretrain.parallel import gpu_targets

# Seconds per step, the child's start-up included; 515 in all leaves the parent's own start-up
# and reports inside 9 minutes on one H100 (a device call may run 10).
BUDGETS = {
    "kernel_check": 70,
    "tile_sweep": 85,
    "step_pallas": 55,
    "step_cudnn": 55,
    "step_xla": 55,
    "peer_eager": 25,
    "peer_compile": 55,
    "attention_512": 25,
    "attention_2048": 30,
    "pipeline_workers": 60,
}
# The steps' functions by name: the child process (`_child`) looks its unit up here.
UNITS: dict[str, Callable[..., Iterator[dict]]] = {
    "kernel_check": kernel_check,
    "tile_sweep": tile_sweep,
    "step": step_throughput,
    "peer": peer,
    "attention": attention_timings,
    "pipeline_workers": pipeline_workers,
}

# --- running steps in child processes ---------------------------------------------------------


def run_unit(
    unit: str,
    params: Mapping,
    budget_s: float,
    log: pathlib.Path,
    env: Mapping[str, str] | None = None,
) -> dict:
    """``UNITS[unit](**params)`` in a child process (output appended to ``log``), killed with
    its own children after ``budget_s``. Its records so far, status ('ok', 'failed', 'timed
    out'), seconds, and the error text of a failure."""
    with tempfile.TemporaryDirectory() as scratch, log.open("a") as log_file:
        results = pathlib.Path(scratch) / "records.jsonl"
        log_file.write(f"== {unit} {json.dumps(params)}\n")
        log_file.flush()
        offset = log_file.tell()
        command = [
            sys.executable,
            "-m",
            "xlpretrain.bench.gpu_suite",
            unit,
            json.dumps(params),
            str(results),
        ]
        start = time.perf_counter()
        child = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            code = child.wait(timeout=budget_s)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)  # its own session: torch.compile's workers too
            code = None
            child.wait()
        seconds = time.perf_counter() - start
        lines = results.read_text().split("\n")[:-1] if results.exists() else []
    records = [json.loads(line) for line in lines]
    result = {
        "status": "ok",
        "seconds": round(seconds, 1),
        "budget_s": budget_s,
        "records": [r for r in records if "unit_error" not in r],
    }
    if code is None:
        result.update(status="timed out", error=f"timed out after {budget_s} s")
    elif code != 0:
        failure = [r["unit_error"] for r in records if "unit_error" in r]
        with log.open() as log_file:  # a crash records nothing: the end of its output instead
            log_file.seek(offset)
            tail = "\n".join(log_file.read().splitlines()[-20:])
        result.update(status="failed", error=failure[0] if failure else tail)
    return result


def _child(unit: str, params: str, results: str) -> None:
    """One step in this process: each record appended to ``results`` as it comes (a step killed
    at its budget keeps what it had); an exception is recorded, then raised into the log."""
    with open(results, "a") as out:
        try:
            for record in UNITS[unit](**json.loads(params)):
                out.write(json.dumps(record) + "\n")
                out.flush()
        except Exception as error:
            out.write(json.dumps({"unit_error": error_text(error)}) + "\n")
            raise


# --- the suite --------------------------------------------------------------------------------


def environment() -> dict:
    """Device, versions and UTC time: what every measured row is dated with."""
    versions = {}
    for name in ("jax", "jaxlib", "flax", "torch", "transformers"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "device": jax.devices()[0].device_kind,
        "versions": versions,
        "date": now.isoformat(timespec="seconds"),
    }


def target_gpu(device_kind: str) -> str:
    """The ``gpu_targets.GPUS`` entry this device is (an H100 when none matches)."""
    return next((name for name in gpu_targets.GPUS if name in device_kind.lower()), "h100")


def run_suite(
    out_dir: pathlib.Path, steps: int = 10, warmup: int = 2, env: Mapping[str, str] | None = None
) -> dict:
    """Every step in order under ``BUDGETS``; writes ``suite.json`` and ``performance.md``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    suite = {**environment(), "steps": {}}
    results = suite["steps"]

    def run(name: str, unit: str, **params) -> dict:
        results[name] = run_unit(unit, params, BUDGETS[name], out_dir / "suite.log", env)
        print(
            f"{name}: {results[name]['status']} in {results[name]['seconds']:.0f} s "
            f"(budget {BUDGETS[name]} s)",
            flush=True,
        )
        return results[name]

    run("kernel_check", "kernel_check", platform="gpu")
    sweep = run("tile_sweep", "tile_sweep", gpu=target_gpu(suite["device"]))
    suite["flash_tiles"] = str(pick_tiles(sweep["records"], sweep_default()))
    for impl in ATTENTION_IMPLS:
        tiles = suite["flash_tiles"] if impl == "pallas" else ""
        run(f"step_{impl}", "step", attention=impl, flash_tiles=tiles, steps=steps, warmup=warmup)
    for mode in bench_peer.MODES:
        run(f"peer_{mode}", "peer", mode=mode, steps=steps, warmup=warmup)
    for length in ATTENTION_LENGTHS:
        run(f"attention_{length}", "attention", length=length)
    run(
        "pipeline_workers",
        "pipeline_workers",
        gigabytes=PIPELINE_GB,
        workers=list(PIPELINE_WORKERS),
        steps=PIPELINE_STEPS,
    )
    suite["peer_ratio"] = peer_ratios(results)
    (out_dir / "suite.json").write_text(json.dumps(suite, indent=1))
    (out_dir / "performance.md").write_text(performance_markdown(suite))
    return suite


def suite_passed(suite: Mapping) -> bool:
    """Every step ran and the kernel matched the reference in every case."""
    steps = suite["steps"].values()
    check = suite["steps"]["kernel_check"]["records"]
    return all(s["status"] == "ok" for s in steps) and all(r["passed"] for r in check)


def gpu_missing() -> str | None:
    """Why the suite cannot run here (one line), or None on a GPU. (JAX's log of a CUDA plugin
    that finds no driver is `xlpretrain.core.quiet`'s: the line says what it would, and how to see
    it.)"""
    if kernels.host_platform() == "gpu":
        return None
    return (
        f"--suite gpu needs a GPU: JAX's default backend here is {jax.default_backend()!r} "
        "(python -c 'import jax; print(jax.devices())' shows why)"
    )


def main(out_dir: str, steps: int, warmup: int) -> int:
    """``bench --suite gpu``: a ValueError where JAX has no GPU (the program's one-line
    refusal), else the suite and its summary; exit status 1 when a step did not finish or the
    kernel missed the reference."""
    child_env = dict(os.environ)
    # This process only looks at the device: the steps' processes get its memory, which JAX
    # would otherwise preallocate here.
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    if missing := gpu_missing():
        raise ValueError(missing)
    out = pathlib.Path(out_dir)
    suite = run_suite(out, steps, warmup, child_env)
    print(summary(suite, out))
    return 0 if suite_passed(suite) else 1


if __name__ == "__main__":
    _child(*sys.argv[1:])
