"""A GPU session's one command: `python -m xlpretrain.bench --suite gpu --out DIR`.

Without a GPU the fused kernel is checked only in interpret mode and compiled for sm_90a
(docs/performance.md), and its tiles are the smallest that never spill rather than the fastest.
A session lent a GPU has minutes, so one command does what it can, each unit in a child
process: a hung compile or an out-of-memory is that unit's recorded result and the next unit
still runs, and each unit's peak memory is its own. `--units` names the units an earlier call
did not reach.

The units, in the order they run (`BUDGETS`), which is their priority:

1. ``profile`` (`bench.gpu_timings.profile`, `bench.profile`): three steps of
   `configs/xlmr.py:base` and `configs/mmbert.py:base` at their measured shapes with cuDNN's
   attention under `jax.profiler` (the trace in ``DIR/profile/<model>``), read into the 25
   HLO ops of most device time with their shares and sources (``op_name``). First: it needs
   neither the kernel nor its tiles, and it says where every later unit's time goes.
2. ``kernel_check`` (`bench.kernel_check`): the kernel on this GPU against a plain-XLA
   reference with the mask, bias and dropout materialised: every mask, no bias, the bucketed
   and the gated bias, dropout; float32, packed rows with padding, a length no tile divides;
   forward and every gradient. First of the kernel's: were it wrong, its timings would mean
   nothing.
3. ``tile_sweep`` (`bench.tile_sweep`): candidate tiles per kernel compiled on the heaviest
   bf16 case (those that spill dropped), the rest timed at XLM-R base's attention shape; the
   fastest per kernel wins, and both models' ``pallas`` steps run it (skipped or failed: the
   default tiles).
4. ``step_{xlmr,mmbert}_pallas`` (`bench.gpu_timings`, as are 5 to 10): `configs/xlmr.py:base`
   (32 × 512) and `configs/mmbert.py:base` (16 × 1,024, its pre-training phase), bf16, with
   the fused kernel at the swept tiles (`attention=auto`'s choice on a GPU): the headline
   rows.
5. ``peer_{xlmr,mmbert}_eager``: Hugging Face's step (`XLMRobertaForMaskedLM`,
   `ModernBertForMaskedLM`), eager, which gives the ratio ours / peer; eager before
   `torch.compile` because it is cheaper and seldom fails.
6. ``step_{xlmr,mmbert}_xla``, then ``step_{xlmr,mmbert}_cudnn``: the other attentions, XLA's
   first as the baseline the kernel is to beat.
7. ``step_xlmr_cudnn_<variant>`` (`gpu_timings.STEP_VARIANTS`): XLM-R's cuDNN step with one
   setting changed: hidden dropout 0 (``dropout0``), each other `train.prng_impl`
   (``threefry4x32``, ``rbg``, ``unsafe_rbg``), the head's loss unchunked
   (``loss_chunk0``); right after ``step_xlmr_cudnn``, the row each is read against.
8. ``attention_512``, ``attention_2048``: the attention micro-benchmark; the steps already hold
   attention, so the per-mask ratios come after them.
9. ``peer_{xlmr,mmbert}_compile``: HF under `torch.compile`, the stronger peer but the longest
   units (Inductor compiles the model: over 60 s on the first H100 run) and the likeliest to
   fail.
10. ``pipeline_workers``: the input pipeline on the host's CPUs, from a synthetic prepared
    store, with 0, 4 and 8 grain workers: whether one host feeds 8 GPUs (5.6 M tokens/s). Last:
    it needs no GPU, and any host with as many cores can measure it.

The budgets are the first H100 run's times where it finished a unit and guesses where not
(`BUDGETS`). The suite keeps one deadline, ``SUITE_S`` from its start, and each unit runs
under its budget cut to the time left (`unit_cap`); a unit with less than ``START_SHARE`` of
its budget left (or under ``MIN_START_S``) is not started but recorded as skipped, so a later,
shorter unit can still use the time. Units that finish under their budgets leave it to the
later ones; units that overrun cost the lowest priorities, never the deadline.

DIR gets ``suite.json`` (everything), ``performance.md`` (rows for docs/performance.md and
the profile's tables; `bench.gpu_report`), ``suite.log`` (the units' output) and
``profile/<model>/`` (the profile's traces, for Perfetto or TensorBoard). This module runs the
units, each in a child process that calls ``child(UNIT, PARAMS, RESULTS)`` (``CHILD``; a name
in ``UNITS``).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import math
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Mapping

import jax

from xlpretrain.bench.gpu_report import peer_ratios, performance_markdown, summary
from xlpretrain.bench.gpu_timings import (
    ATTENTION_LENGTHS,
    PIPELINE_GB,
    PIPELINE_STEPS,
    PIPELINE_WORKERS,
    PROFILE_ATTENTION,
    PROFILE_STEPS,
    SHAPES,
    STEP_VARIANTS,
    VARIANT_ATTENTION,
    VARIANT_MODEL,
    attention_timings,
    peer,
    peer_unit,
    pipeline_workers,
    profile,
    step_throughput,
    step_unit,
    variant_unit,
)
from xlpretrain.bench.kernel_check import error_text, kernel_check
from xlpretrain.bench.tile_sweep import pick_tiles, sweep_default, tile_sweep
from xlpretrain.model import kernels
from xlpretrain.parallel import gpu_targets

# The suite's deadline: 520 s from its start leaves the parent's own start-up and reports
# inside 9 minutes on one H100 (a device call may run 10).
SUITE_S = 520
# A unit starts only with at least this share of its budget left, and at least MIN_START_S
# (a child's Python, JAX and GPU client alone take about 10 s): cut shorter, it would most
# likely be killed before its one record, and a later, shorter unit can use the time instead.
START_SHARE, MIN_START_S = 0.5, 15
# Seconds per unit, the child's start-up included, in the order the suite runs them (its
# priority, the module's docstring says why). From the first run, on an H100 on 2026-11-27
# (docs/performance.md): the kernel check took about 5 s a case (24 cases), each step 20 to
# 29 s, each eager peer 29 to 31 s; the tile sweep (85 s), the compiled peers (60 and 70 s) and
# attention at L = 512 (25 s) were cut at their budgets then, so theirs are larger guesses.
# The profile and the step's variants have never run: the profile is two compiles and three
# steps each in one process (a guess from the steps' 20 to 29 s), the variants are steps.
# Together more than SUITE_S: one call measures the first units, and `--units` the rest.
BUDGETS = {
    "profile": 90,
    "kernel_check": 160,
    "tile_sweep": 150,
    "step_xlmr_pallas": 40,
    "step_mmbert_pallas": 40,
    "peer_xlmr_eager": 45,
    "peer_mmbert_eager": 45,
    "step_xlmr_xla": 40,
    "step_mmbert_xla": 40,
    "step_xlmr_cudnn": 40,
    "step_mmbert_cudnn": 40,
    **{variant_unit(variant): 40 for variant in STEP_VARIANTS},
    "attention_512": 50,
    "attention_2048": 70,
    "peer_xlmr_compile": 150,
    "peer_mmbert_compile": 150,
    "pipeline_workers": 60,
}
# A unit's process: `child` on its arguments (`python -c`: a library module is no program).
CHILD = "import sys; from xlpretrain.bench.gpu_suite import child; child(*sys.argv[1:])"
# The units' functions by name: the child process (`child`) looks its unit up here.
UNITS: dict[str, Callable[..., Iterator[dict]]] = {
    "profile": profile,
    "kernel_check": kernel_check,
    "tile_sweep": tile_sweep,
    "step": step_throughput,
    "peer": peer,
    "attention": attention_timings,
    "pipeline_workers": pipeline_workers,
}

# --- running units in child processes ---------------------------------------------------------


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
        command = [sys.executable, "-c", CHILD, unit, json.dumps(params), str(results)]
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


def child(unit: str, params: str, results: str) -> None:
    """One unit in this process: each record appended to ``results`` as it comes (a unit killed
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


def unit_cap(budget_s: int, left_s: float) -> int | None:
    """The whole seconds a unit of ``budget_s`` may run with ``left_s`` left before the suite's
    deadline: its budget cut to what is left, or None (not started) when less than
    ``START_SHARE`` of its budget or ``MIN_START_S`` is left."""
    if left_s < max(MIN_START_S, START_SHARE * budget_s):
        return None
    return min(budget_s, math.floor(left_s))


def skipped(budget_s: int, left_s: float) -> dict:
    """The result of a unit not started for want of time (`unit_cap`)."""
    return {
        "status": "skipped",
        "seconds": 0.0,
        "budget_s": budget_s,
        "records": [],
        "error": f"{max(math.floor(left_s), 0)} s left of the suite's {SUITE_S} s; "
        f"its budget is {budget_s} s",
    }


def measurement_units(flash_tiles: str, steps: int, warmup: int) -> list[tuple[str, str, dict]]:
    """``(name, unit, params)`` of each unit after the kernel check and the tile sweep, in
    `BUDGETS`' order: the steps with ``pallas`` (``flash_tiles``), the eager peers, the steps
    with ``xla`` and ``cudnn``, XLM-R's cuDNN step's variants, the attention lengths, the
    compiled peers, the input pipeline."""
    timing = {"steps": steps, "warmup": warmup}

    def steps_with(attention: str) -> list[tuple[str, str, dict]]:
        tiles = flash_tiles if attention == "pallas" else ""
        params = {"attention": attention, "flash_tiles": tiles, **timing}
        return [(step_unit(m, attention), "step", {"model": m, **params}) for m in SHAPES]

    def peers(mode: str) -> list[tuple[str, str, dict]]:
        return [(peer_unit(m, mode), "peer", {"model": m, "mode": mode, **timing}) for m in SHAPES]

    pipeline = {
        "gigabytes": PIPELINE_GB,
        "workers": list(PIPELINE_WORKERS),
        "steps": PIPELINE_STEPS,
    }
    return [
        *steps_with("pallas"),
        *peers("eager"),
        *steps_with("xla"),
        *steps_with("cudnn"),
        *(
            (
                variant_unit(variant),
                "step",
                {
                    "model": VARIANT_MODEL,
                    "attention": VARIANT_ATTENTION,
                    "flash_tiles": "",
                    **timing,
                    "overrides": overrides,
                },
            )
            for variant, overrides in STEP_VARIANTS.items()
        ),
        *((f"attention_{length}", "attention", {"length": length}) for length in ATTENTION_LENGTHS),
        *peers("compile"),
        ("pipeline_workers", "pipeline_workers", pipeline),
    ]


def profile_params(models: list[str], trace_dir: str) -> dict:
    """The profile unit's parameters: ``models``' steps, traced under ``trace_dir``."""
    return {
        "models": models,
        "attention": PROFILE_ATTENTION,
        "steps": PROFILE_STEPS,
        "trace_dir": trace_dir,
    }


def run_suite(
    out_dir: pathlib.Path,
    steps: int = 10,
    warmup: int = 2,
    env: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    units: Collection[str] = (),
) -> dict:
    """Every unit in `BUDGETS`' order (only ``units``, when given: what an earlier call did not
    reach), each under its budget cut to the time left before the deadline, ``SUITE_S`` of
    ``clock`` from now (`unit_cap`); writes ``suite.json`` and ``performance.md``."""
    if unknown := sorted(set(units) - set(BUDGETS)):
        raise ValueError(f"--units: no unit {', '.join(unknown)}; the units: {', '.join(BUDGETS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    suite = {**environment(), "steps": {}}
    results, log = suite["steps"], out_dir / "suite.log"
    deadline = clock() + SUITE_S

    def run(name: str, unit: str, params: Mapping) -> dict:
        if units and name not in units:
            return {"records": []}  # not asked for: no result (the tiles stay the default)
        budget, left = BUDGETS[name], deadline - clock()
        cap = unit_cap(budget, left)
        if cap is None:
            results[name] = skipped(budget, left)
            with log.open("a") as log_file:
                log_file.write(f"== {name} skipped: {results[name]['error']}\n")
            print(f"{name}: skipped ({results[name]['error']})", flush=True)
            return results[name]
        results[name] = run_unit(unit, params, cap, log, env)
        cut = f", cut to {cap} s" if cap < budget else ""
        print(
            f"{name}: {results[name]['status']} in {results[name]['seconds']:.0f} s "
            f"(budget {budget} s{cut})",
            flush=True,
        )
        return results[name]

    trace_dir = str(out_dir / "profile")
    models = list(SHAPES)
    run("profile", "profile", profile_params(models, trace_dir))
    run("kernel_check", "kernel_check", {"platform": "gpu"})
    sweep = run("tile_sweep", "tile_sweep", {"gpu": target_gpu(suite["device"])})
    suite["flash_tiles"] = str(pick_tiles(sweep["records"], sweep_default()))
    for name, unit, params in measurement_units(suite["flash_tiles"], steps, warmup):
        run(name, unit, params)
    suite["peer_ratio"] = peer_ratios(results)
    (out_dir / "suite.json").write_text(json.dumps(suite, indent=1))
    (out_dir / "performance.md").write_text(performance_markdown(suite))
    return suite


def suite_passed(suite: Mapping) -> bool:
    """Every unit ran to its end (none failed, timed out or was skipped) and the kernel matched
    the reference in every case."""
    steps = suite["steps"].values()
    check = suite["steps"].get("kernel_check", {"records": []})["records"]
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


def main(out_dir: str, steps: int, warmup: int, units: Collection[str] = ()) -> int:
    """``bench --suite gpu``: a ValueError where JAX has no GPU (the program's one-line
    refusal), else the suite and its summary; exit status 1 when a unit did not finish or the
    kernel missed the reference."""
    child_env = dict(os.environ)
    # This process only looks at the device: the units' processes get its memory, which JAX
    # would otherwise preallocate here.
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    if missing := gpu_missing():
        raise ValueError(missing)
    out = pathlib.Path(out_dir)
    suite = run_suite(out, steps, warmup, child_env, units=units)
    print(summary(suite, out))
    return 0 if suite_passed(suite) else 1
