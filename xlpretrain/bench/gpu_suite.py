"""The first GPU session's one command: `python -m xlpretrain.bench --suite gpu --out DIR`.

Until a GPU runs it, the fused kernel is checked only in interpret mode and compiled for sm_90a
(docs/performance.md), its tiles are the smallest that never spill rather than the fastest, and
the "Measured → H100" table is empty. A session lent a GPU has minutes, so one command does all
of it, each step in a child process under its own time budget (together under 9 minutes on
one H100): a hung compile or an out-of-memory is that step's recorded result and the next step
still runs, and each step's peak memory is its own.

1. ``kernel_check``: the kernel on this GPU against a plain-XLA reference with the mask, bias
   and dropout materialised: every mask, no bias, the bucketed and the gated bias, dropout;
   float32, packed rows with padding, a length no tile divides; forward and every gradient.
2. ``tile_sweep``: candidate tiles per kernel compiled on the heaviest bf16 case (those that
   spill dropped), the rest timed at XLM-R base's attention shape; the fastest per kernel wins.
3. ``step_*``, ``peer_*``: `configs/xlmr.py:base` (batch 32 × 512, bf16) with
   ``attention=pallas`` (the winning tiles), ``cudnn`` and ``xla``; Hugging Face's step per mode.
4. ``attention_*``: the attention micro-benchmark at L = 512 and 2048.
5. ``pipeline_workers``: the input pipeline on the host's CPUs, from a synthetic prepared
   store, with 0, 4 and 8 grain workers: whether one host feeds 8 GPUs (5.6 M tokens/s).

DIR gets ``suite.json`` (everything), ``performance.md`` (rows for docs/performance.md) and
``suite.log`` (the steps' output). ``python -m xlpretrain.bench.gpu UNIT PARAMS RESULTS`` runs
one step; the suite starts it so.
"""

from __future__ import annotations

import dataclasses
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
from collections.abc import Callable, Iterator, Mapping, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from xlpretrain import masks
from xlpretrain.bench import attention as bench_attention
from xlpretrain.bench import peer as bench_peer
from xlpretrain.bench import step as bench
from xlpretrain.model import kernels, relative_position
from xlpretrain.model.kernels import flash, gpu_compile
from xlpretrain.model.kernels.block_mask import pad_meta
from xlpretrain.model.kernels.gpu_compile import FlashCase
from xlpretrain.model.relative_position import RelativeBias
from xlpretrain.parallel import gpu_targets
from xlpretrain.training import cli

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
# The input pipeline on this host's CPUs: a synthetic store of PIPELINE_GB GB, MMLM rows of
# 512 tokens, 32 a step, PIPELINE_STEPS steps per `data.num_workers` in PIPELINE_WORKERS. The
# goal is 8 GPUs fed at 700 k tokens/s each: 5.6 M row tokens/s per host.
PIPELINE_GB, PIPELINE_STEPS, PIPELINE_WORKERS = 0.1, 200, (0, 4, 8)
PIPELINE_GOAL = 5.6e6
ATTENTION_IMPLS = ("pallas", "cudnn", "xla")
ATTENTION_LENGTHS = (512, 2048)
ATTENTION_MASKS = ("unmasked", "mmlm", "tlm", "camlm")

# --- 1. kernel check --------------------------------------------------------------------------

PARAMS = ("q", "k", "v", "table", "gate_u", "gate_v", "gate_w")  # FlashCase.abstract_args order
USED_PARAMS = {"none": 3, "bucketed": 4, "gated": 7}  # per bias: the leading PARAMS it reads
# |fused − reference| ≤ ATOL + RTOL · max |reference|, per tensor: float32 with float32 matmuls
# differs only in summation order; a wrong mask or bias is off by 1e-2 and more.
ATOL, RTOL = 1e-4, 1e-4


def check_cases(
    batch: int = 2, length: int = 300, heads: int = 4, head_dim: int = 64
) -> list[FlashCase]:
    """Every mask with no bias, the gated and the bucketed bias, and dropout on two of them; the
    plain kernel and dropout first, so a check stopped at its budget has checked those."""
    shape = dict(dtype="float32", length=length, batch=batch, heads=heads, head_dim=head_dim)
    return [
        *(FlashCase(mask, "none", **shape) for mask in masks.MASKS),
        FlashCase("tlm", "none", dropout=0.1, **shape),
        FlashCase("camlm", "gated", dropout=0.1, **shape),
        *(FlashCase(mask, bias, **shape) for bias in ("gated", "bucketed") for mask in masks.MASKS),
    ]


def packed_meta(mask: str, rows: int, length: int, rng: np.random.Generator) -> dict:
    """Rows packed as the mask's objective packs them (``bench_attention.row_meta``) in units
    of length/8 and more, then at least length/16 tokens of padding."""
    padding = max(4, length // 16)
    meta = bench_attention.row_meta(mask, rows, length - padding, rng, min_unit=length // 8)
    return pad_meta(meta, length)


def case_inputs(case: FlashCase, rng: np.random.Generator) -> list[jax.Array]:
    """Random values of the case's differentiable inputs (``PARAMS``); the gate's small."""
    scales = (1.0, 1.0, 1.0, 1.0, 0.3, 0.3, 0.3)
    return [
        jnp.asarray(scale * rng.normal(size=arg.shape), arg.dtype)
        for scale, arg in zip(scales, case.abstract_args()[: len(PARAMS)], strict=True)
    ]


def dense_dropout_keep(
    rng: jax.Array, rate: float, batch: int, heads: int, length: int
) -> jax.Array:
    """The kernel's dropout decisions ``[B, H, L, L]`` for ``rng`` (rows and heads unsharded),
    from the same hash: the reference drops what the kernel drops."""
    seed = jax.random.randint(rng, (), 0, jnp.iinfo(jnp.int32).max)
    row_head = jnp.arange(batch)[:, None, None, None] * heads + jnp.arange(heads)[:, None, None]
    index = jnp.arange(length)
    return flash.dropout_keep(seed, row_head, index[:, None], index[None, :], rate)


def reference_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask_fn: masks.MaskFn,
    meta: masks.Meta,
    bias: RelativeBias | None = None,
    keep: jax.Array | None = None,
    rate: float = 0.0,
) -> jax.Array:
    """Plain XLA with the mask, the bias and the dropout decisions materialised: what the
    fused kernel must equal."""
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    if bias is not None:
        logits = logits + bias.materialize(meta["positions"], meta["positions"])
    allowed = masks.materialize(mask_fn, meta)
    probs = jax.nn.softmax(jnp.where(allowed, logits, -1e30), axis=-1)
    if keep is not None:
        probs = jnp.where(keep, probs / (1.0 - rate), 0.0)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


def _with_bias(case: FlashCase, attend: Callable) -> Callable:
    """``attend(q, k, v, bias)`` as a function of every ``PARAMS`` (``FlashCase.loss``'s bias)."""

    def f(q, k, v, table, gate_u, gate_v, gate_w):
        if case.bias == "none":
            return attend(q, k, v, None)
        gated = case.bias == "gated"
        scale = relative_position.gate_scale(q, gate_u, gate_v, gate_w) if gated else None
        return attend(q, k, v, RelativeBias(table, scale, case.num_buckets, case.max_distance))

    return f


def _value_and_grads(f: Callable, args: Sequence[jax.Array], cotangent: jax.Array) -> tuple:
    @jax.jit
    def run(*args):
        out, pullback = jax.vjp(f, *args)
        return (out, *pullback(cotangent))

    return run(*args)


def check_case(case: FlashCase, platform: str, seed: int = 0) -> dict:
    """The fused kernel on ``platform`` against ``reference_attention``: the output and the
    gradients of a random projection of it, max abs error per tensor, within tolerance or not."""
    rng = np.random.default_rng(seed)
    meta = packed_meta(case.mask, case.batch, case.length, rng)
    mask_fn = masks.get(case.mask)
    dropout_rng = jax.random.key(seed) if case.dropout else None
    keep = None
    if case.dropout:
        keep = dense_dropout_keep(dropout_rng, case.dropout, case.batch, case.heads, case.length)

    def fused(q, k, v, bias):
        return flash.attention(
            q,
            k,
            v,
            mask_fn=mask_fn,
            q_meta=meta,
            k_meta=meta,
            bias=bias,
            dropout_rate=case.dropout,
            dropout_rng=dropout_rng,
            platform=platform,
        )

    def reference(q, k, v, bias):
        return reference_attention(q, k, v, mask_fn, meta, bias, keep, case.dropout)

    args = case_inputs(case, rng)
    cotangent = jnp.asarray(rng.normal(size=args[0].shape), args[0].dtype)
    with jax.default_matmul_precision("float32"):
        got = _value_and_grads(_with_bias(case, fused), args, cotangent)
        want = _value_and_grads(_with_bias(case, reference), args, cotangent)
    errors, passed = {}, True
    for name, g, w in zip(("out", *PARAMS[: USED_PARAMS[case.bias]]), got, want, strict=False):
        errors[name] = float(jnp.max(jnp.abs(g - w)))
        passed &= errors[name] <= ATOL + RTOL * float(jnp.max(jnp.abs(w)))
    return {
        "case": str(case),
        "max_abs_error": max(errors.values()),
        "errors": errors,
        "passed": bool(passed),
    }


def kernel_check(platform: str, cases: Sequence[FlashCase] | None = None) -> Iterator[dict]:
    """``check_case`` for each of ``cases`` (default ``check_cases()``); a case that raises is
    that case's result."""
    for case in cases or check_cases():
        try:
            yield check_case(case, platform)
        except Exception as error:  # noqa: BLE001 - recorded, and the other cases still run
            yield {"case": str(case), "passed": False, "error": _error_text(error)}


# --- 2. tile sweep ----------------------------------------------------------------------------

# Candidates per kernel besides the default: each kernel's registers depend on its own tile only.
SWEEP = {
    "forward": ("64x64:w4:s3", "128x64:w8:s2", "64x128:w4:s2", "128x128:w8:s2"),
    "dq": ("32x64:w4:s2", "64x32:w4:s2", "64x64:w4:s2", "64x64:w8:s2"),
    "dkv": ("32x32:w4:s2", "64x64:w4:s2", "64x64:w8:s2", "128x32:w8:s2"),
}
# Compiled for registers and spills: the heaviest bf16 case (docs/performance.md's table).
SPILL_CASE = FlashCase("camlm", "gated", "bfloat16", 512, 0.1, batch=2, heads=12, head_dim=64)
# Timed: XLM-R base's attention (its attention dropout included) on rows packed for MMLM.
TIMED_CASE = FlashCase("mmlm", "none", "bfloat16", 512, 0.1, batch=32, heads=12, head_dim=64)


def sweep_default() -> flash.Tiles:
    return flash.default_tiles(TIMED_CASE.dtype, TIMED_CASE.head_dim)


def sweep_candidates() -> dict[str, list[str]]:
    """Each kernel's candidate tiles, its default first."""
    default = sweep_default()
    return {kernel: [str(getattr(default, kernel)), *SWEEP[kernel]] for kernel in flash.KERNELS}


def kernel_reports(tiles: flash.Tiles, gpu: str) -> list[dict]:
    """Registers, spills and shared memory of each kernel at ``tiles`` on ``SPILL_CASE``,
    compiled for ``gpu`` (``gpu_targets.GPUS``) by XLA:GPU and ptxas."""
    _, reports = gpu_compile.compile_for_gpu(
        SPILL_CASE.gradient(tiles, "gpu"), SPILL_CASE.abstract_args(), gpu
    )
    records = {}
    for report in reports:
        kernel = report.name.strip("_").removesuffix("_kernel")
        records[kernel] = {
            "stage": "compile",
            "kernel": kernel,
            "tiles": str(getattr(tiles, kernel)),
            "registers": report.registers,
            "spill_stores": report.spill_stores,
            "spill_loads": report.spill_loads,
            "shared_memory": report.shared_memory,
        }
    if set(records) != set(flash.KERNELS):
        raise ValueError(f"compiled kernels {sorted(records)}, expected {list(flash.KERNELS)}")
    return [records[kernel] for kernel in flash.KERNELS]


def _compile_stage(gpu: str) -> Iterator[dict]:
    """The candidates compiled a set at a time (one per kernel); when a set fails, each of its
    kernels alone beside the default's others, so one refused tile hides nothing else."""
    default = sweep_default()
    for combo in zip(*sweep_candidates().values(), strict=True):
        try:
            yield from kernel_reports(flash.Tiles(*map(flash.KernelTiles.parse, combo)), gpu)
            continue
        except Exception:  # noqa: BLE001 - retried kernel by kernel below
            pass
        for kernel, text in zip(flash.KERNELS, combo, strict=True):
            alone = dataclasses.replace(default, **{kernel: flash.KernelTiles.parse(text)})
            try:
                yield next(r for r in kernel_reports(alone, gpu) if r["kernel"] == kernel)
            except Exception as error:  # noqa: BLE001 - this candidate's result
                yield {
                    "stage": "compile",
                    "kernel": kernel,
                    "tiles": text,
                    "error": _error_text(error),
                }


def spill_free(records: Sequence[dict]) -> dict[str, list[str]]:
    """Per kernel, the candidate tiles that compiled without a byte of spill."""
    return {
        kernel: [
            r["tiles"]
            for r in records
            if r.get("stage") == "compile"
            and r["kernel"] == kernel
            and "error" not in r
            and r["spill_stores"] == 0
        ]
        for kernel in flash.KERNELS
    }


def pick_tiles(records: Sequence[dict], default: flash.Tiles) -> flash.Tiles:
    """Per kernel, the fastest timed candidate among those compiled spill-free; the default's
    tile where none was (kernels run one after another, so the fastest of each is fastest)."""
    eligible = spill_free(records)
    picked = {}
    for kernel in flash.KERNELS:
        timed = [
            r
            for r in records
            if r.get("stage") == "time"
            and r["kernel"] == kernel
            and "fwd_bwd_ms" in r
            and r["tiles"] in eligible[kernel]
        ]
        best = min(timed, key=lambda r: r["fwd_bwd_ms"], default=None)
        picked[kernel] = (
            flash.KernelTiles.parse(best["tiles"]) if best else getattr(default, kernel)
        )
    return flash.Tiles(**picked)


def time_tiles(tiles: flash.Tiles, args: Sequence, repeats: int) -> float:
    """Milliseconds per forward + backward of ``TIMED_CASE`` at ``tiles`` on this GPU."""
    step = jax.jit(TIMED_CASE.gradient(tiles, "gpu")).lower(*args).compile()
    jax.block_until_ready(step(*args))
    start = time.perf_counter()
    for _ in range(repeats):
        grads = step(*args)
    jax.block_until_ready(grads)
    return (time.perf_counter() - start) / repeats * 1e3


def tile_sweep(gpu: str, repeats: int = 20) -> Iterator[dict]:
    """Compiles every candidate (``_compile_stage``), times the spill-free ones each beside the
    default's other kernels, then the pick."""
    records = list(_compile_stage(gpu))
    yield from records
    rng = np.random.default_rng(0)
    meta = bench_attention.row_meta(TIMED_CASE.mask, TIMED_CASE.batch, TIMED_CASE.length, rng)
    args = (*case_inputs(TIMED_CASE, rng), meta)
    default, times = sweep_default(), {}  # fwd+bwd by tiles string: the default timed once

    def timed(tiles: flash.Tiles) -> dict:
        if str(tiles) not in times:
            try:
                times[str(tiles)] = {"fwd_bwd_ms": time_tiles(tiles, args, repeats)}
            except Exception as error:  # noqa: BLE001 - this candidate's result
                times[str(tiles)] = {"error": _error_text(error)}
        return times[str(tiles)]

    for kernel, candidates in spill_free(records).items():
        for text in candidates:
            tiles = dataclasses.replace(default, **{kernel: flash.KernelTiles.parse(text)})
            record = {"stage": "time", "kernel": kernel, "tiles": text, **timed(tiles)}
            records.append(record)
            yield record
    picked = pick_tiles(records, default)
    yield {
        "stage": "picked",
        "flash_tiles": str(picked),
        **timed(picked),
        "default_ms": times.get(str(default), {}).get("fwd_bwd_ms"),
    }


# --- 3, 4. step throughput, the peer, attention -----------------------------------------------


def xlmr_base(attention: str, flash_tiles: str = "") -> ml_collections.ConfigDict:
    """``configs/xlmr.py:base`` at the measured shape (32 × 512, bf16) with ``attention``
    (cuDNN's has no dropout, so its run has no attention dropout)."""
    cfg = cli.load_config("xlmr:base")
    cfg.model.dtype = "bfloat16"
    cfg.data.batch_size, cfg.data.max_length = 32, 512
    cfg.model.attention, cfg.model.flash_tiles = attention, flash_tiles
    if attention == "cudnn":
        cfg.model.attention_dropout_rate = 0.0
    return cfg


def step_throughput(attention: str, flash_tiles: str, steps: int, warmup: int) -> Iterator[dict]:
    cfg = xlmr_base(attention, flash_tiles)
    result = bench.benchmark(cfg, steps, warmup)
    yield {
        "attention": attention,
        "flash_tiles": flash_tiles,
        "attention_dropout_rate": cfg.model.attention_dropout_rate,
        **result,
    }


def peer(mode: str, steps: int, warmup: int) -> Iterator[dict]:
    yield bench_peer.peer_benchmark(xlmr_base("xla"), steps, warmup, [mode])


def attention_timings(length: int) -> Iterator[dict]:
    model = xlmr_base("xla").model
    yield bench_attention.attention_benchmark(
        ATTENTION_IMPLS,
        [length],
        8,
        model.num_heads,
        model.hidden_size // model.num_heads,
        model.dtype,
        10,
        ATTENTION_MASKS,
    )


def pipeline_config(tokenizer: str) -> ml_collections.ConfigDict:
    """`configs/demo.py` at the shape of docs/performance.md's store benchmark: MMLM only,
    32 rows of 512 tokens, no evaluation."""
    cfg = cli.load_config("demo")
    cfg.tokenizer.path = tokenizer
    cfg.data.batch_size, cfg.data.max_length = 32, 512
    cfg.objectives.tlm, cfg.eval.every_steps = 0.0, 0
    return cfg


def pipeline_workers(gigabytes: float, workers: Sequence[int], steps: int) -> Iterator[dict]:
    """Row tokens/s of the input pipeline on a synthetic prepared store, per number of grain
    worker processes: whether this host's CPUs feed its GPUs (a 2-core CI machine cannot say)."""
    from xlpretrain.bench import store as bench_store

    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = bench_store.synthetic_tokenizer(os.path.join(scratch, "tokenizer.model"))
        store = bench_store.synthetic_store(os.path.join(scratch, "store"), gigabytes, tokenizer)
        cfg = pipeline_config(tokenizer)
        for count in workers:
            cfg.data.num_workers = count
            figures = bench_store.measure_in_new_process(json.dumps(cfg.to_dict()), store, steps)
            yield {"num_workers": count, "cpus": os.cpu_count(), "store_gb": gigabytes, **figures}


UNITS: dict[str, Callable[..., Iterator[dict]]] = {
    "kernel_check": kernel_check,
    "tile_sweep": tile_sweep,
    "step": step_throughput,
    "peer": peer,
    "attention": attention_timings,
    "pipeline_workers": pipeline_workers,
}


# --- running steps in child processes ---------------------------------------------------------


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:4000]


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
            "xlpretrain.bench.gpu",
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
            out.write(json.dumps({"unit_error": _error_text(error)}) + "\n")
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


def first_record(step: Mapping | None) -> dict | None:
    return step["records"][0] if step and step["records"] else None


def peer_ratios(steps: Mapping[str, dict]) -> dict[str, dict[str, float]]:
    """Our tokens/s over the peer's, per attention and peer mode."""
    ratios = {}
    for impl in ATTENTION_IMPLS:
        ours = first_record(steps.get(f"step_{impl}"))
        for mode in bench_peer.MODES:
            theirs = first_record(steps.get(f"peer_{mode}"))
            run = theirs["modes"].get(mode, {}) if theirs else {}
            if ours and "tokens_per_s" in run:
                ratios.setdefault(impl, {})[mode] = ours["tokens_per_s"] / run["tokens_per_s"]
    return ratios


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


# --- reports ----------------------------------------------------------------------------------


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:160] if text.strip() else "?"


def _failed(step: Mapping | None) -> str:
    return f"{step['status']}: {_first_line(step.get('error', ''))}" if step else "not run"


def _gib(value: float | None) -> str:
    return f"{value:.1f} GiB" if value else "n/a"


def _peer_run(suite: Mapping, mode: str) -> dict:
    """The peer's result in ``mode``, or ``{"failed": why not}``."""
    step = suite["steps"].get(f"peer_{mode}")
    record = first_record(step)
    if record is None:
        return {"failed": _failed(step)}
    run = record["modes"][mode]
    return {"failed": f"failed: {_first_line(run['error'])}"} if "error" in run else run


def _ratios(suite: Mapping, mode: str) -> str:
    """Ours / the peer in ``mode``, per attention: "pallas 1.52x, xla 1.20x"."""
    by_impl = suite["peer_ratio"].items()
    return ", ".join(f"{impl} {by_mode[mode]:.2f}x" for impl, by_mode in by_impl if mode in by_mode)


def _attention_results(suite: Mapping) -> list[dict]:
    return [
        r
        for length in ATTENTION_LENGTHS
        for r in (first_record(suite["steps"].get(f"attention_{length}")) or {}).get("results", [])
    ]


def measured_rows(suite: Mapping) -> list[str]:
    """Rows for docs/performance.md's "Measured → H100" table
    (``| what | tokens/s | peak memory | date, versions |``)."""
    v, date = suite["versions"], suite["date"][:10]
    ours = f"{date}, {suite['device']}, JAX {v['jax']}, Flax {v['flax']}"
    theirs = f"{date}, {suite['device']}, PyTorch {v['torch']}, transformers {v['transformers']}"
    rows = []
    for impl in ATTENTION_IMPLS:
        what = f"xlpretrain `xlmr.py:base`, `attention={impl}`"
        if impl == "pallas":
            what += f', `model.flash_tiles="{suite["flash_tiles"]}"`'
        if impl == "cudnn":
            what += " (attention dropout 0: cuDNN has none)"
        step = suite["steps"].get(f"step_{impl}")
        result = first_record(step)
        if result is None:
            rows.append(f"| {what} | {_failed(step)} | — | {ours} |")
            continue
        mfu = f" (MFU {result['mfu']:.1%})" if result["mfu"] is not None else ""
        rows.append(
            f"| {what} | {result['tokens_per_s']:,.0f}{mfu} | "
            f"{_gib(result['peak_memory_gib'])} | {ours} |"
        )
    for mode, name in (("eager", "eager"), ("compile", "`torch.compile`")):
        what = f"HF `XLMRobertaForMaskedLM`, {name}"
        run = _peer_run(suite, mode)
        if "failed" in run:
            rows.append(f"| {what} | {run['failed']} | — | {theirs} |")
            continue
        ratios = _ratios(suite, mode)
        ratios = f"; ours / peer: {ratios}" if ratios else ""
        rows.append(
            f"| {what} | {run['tokens_per_s']:,.0f}{ratios} | "
            f"{_gib(run['peak_memory_gib'])} | {theirs} |"
        )
    results = _attention_results(suite)
    for impl in ATTENTION_IMPLS:
        ratios = "; ".join(
            f"L = {r['length']}: {r['mask']} {r['vs_unmasked']:.2f}x"
            for r in results
            if r["impl"] == impl and r["mask"] in ("camlm", "tlm") and "vs_unmasked" in r
        )
        rows.append(
            f"| attention `camlm` / `tlm` vs unmasked, L = 512 and 2048, `{impl}` | "
            f"{ratios or 'not measured'} | — | {ours} |"
        )
    return rows


def _check_lines(step: Mapping | None) -> list[str]:
    if not step or not step["records"]:
        return [_failed(step)]
    lines = ["| case | max abs error | within tolerance |", "| --- | --- | --- |"]
    for r in step["records"]:
        error = f"{r['max_abs_error']:.2e}" if "max_abs_error" in r else _first_line(r["error"])
        lines.append(f"| {r['case']} | {error} | {'yes' if r['passed'] else '**no**'} |")
    if step["status"] != "ok":
        lines.append(f"\nThe check did not finish: {_failed(step)}.")
    return lines


def sweep_rows(records: Sequence[dict], picked: flash.Tiles) -> list[str]:
    """The register / spill table: each compiled candidate, its time, whether it won."""
    times = {(r["kernel"], r["tiles"]): r for r in records if r["stage"] == "time"}
    rows = [
        "| kernel | tile | registers | spill stores | shared memory | fwd+bwd ms | picked |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    compiled = [r for r in records if r["stage"] == "compile"]
    for r in sorted(compiled, key=lambda r: flash.KERNELS.index(r["kernel"])):
        if "error" in r:
            rows.append(f"| {r['kernel']} | {r['tiles']} | {_first_line(r['error'])} | | | | |")
            continue
        won = "yes" if str(getattr(picked, r["kernel"])) == r["tiles"] else ""
        rows.append(
            f"| {r['kernel']} | {r['tiles']} | {r['registers']} | {r['spill_stores']} B "
            f"| {r['shared_memory'] // 1024} KiB | "
            f"{_sweep_time(r, times.get((r['kernel'], r['tiles'])))} | {won} |"
        )
    return rows


def _sweep_time(compiled: Mapping, timed: Mapping | None) -> str:
    if timed is None:
        return "spills: not timed" if compiled["spill_stores"] else "not timed"
    return f"{timed['fwd_bwd_ms']:.2f}" if "fwd_bwd_ms" in timed else _first_line(timed["error"])


def _sweep_lines(suite: Mapping) -> list[str]:
    step = suite["steps"].get("tile_sweep")
    records = step["records"] if step else []
    picked = next((r for r in records if r["stage"] == "picked"), {})
    timing = ""
    if picked.get("fwd_bwd_ms") and picked.get("default_ms"):
        timing = (
            f": {picked['fwd_bwd_ms']:.2f} ms forward + backward, the default "
            f"{picked['default_ms']:.2f} ms"
        )
    unfinished = "" if step and step["status"] == "ok" else f" The sweep {_failed(step)}."
    return [
        f'Picked `model.flash_tiles="{suite["flash_tiles"]}"`{timing} (default '
        f"`{sweep_default()}`). Registers and spills compiled for {SPILL_CASE}; times at "
        f"{TIMED_CASE}, each candidate beside the default's other kernels.{unfinished}",
        "",
        *sweep_rows(records, flash.Tiles.parse(suite["flash_tiles"])),
    ]


def _attention_lines(suite: Mapping) -> list[str]:
    lines = [
        "| L | mask | impl | ms | vs unmasked | tiles skipped | temp MiB |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for length in ATTENTION_LENGTHS:
        step = suite["steps"].get(f"attention_{length}")
        if first_record(step) is None:
            lines.append(f"| {length} | {_failed(step)} | | | | | |")
    for r in _attention_results(suite):
        if "error" in r:
            lines.append(
                f"| {r['length']} | {r['mask']} | {r['impl']} | {_first_line(r['error'])} | | | |"
            )
            continue
        ratio = f"{r['vs_unmasked']:.2f}x" if "vs_unmasked" in r else "—"
        memory = f"{r['temp_memory_mib']:.0f}" if r["temp_memory_mib"] is not None else "n/a"
        lines.append(
            f"| {r['length']} | {r['mask']} | {r['impl']} | {r['fwd_bwd_ms']:.2f} | "
            f"{ratio} | {r['tiles_skipped']:.0%} | {memory} |"
        )
    return lines


def performance_markdown(suite: Mapping) -> str:
    """``performance.md``: the measured rows, then the kernel check, the tile sweep's
    registers, spills and times, the attention table, and every step that did not finish."""
    failed = [
        f"- `{name}` {_failed(s)}" for name, s in suite["steps"].items() if s["status"] != "ok"
    ]
    lines = [
        f"# GPU suite: {suite['device']}, {suite['date']}",
        "",
        "`python -m xlpretrain.bench --suite gpu`. Rows for docs/performance.md's "
        '"Measured → H100" table (batch 32 × 512, bf16, AdamW):',
        "",
        "| what | tokens/s | peak memory | date, versions |",
        "| --- | --- | --- | --- |",
        *measured_rows(suite),
        "",
        f"## Kernel check: float32 on the GPU against the XLA reference (within {ATOL:g} + "
        f"{RTOL:g} · max |reference| per tensor)",
        "",
        *_check_lines(suite["steps"].get("kernel_check")),
        "",
        "## Tile sweep",
        "",
        *_sweep_lines(suite),
        "",
        "## Attention: forward + backward, batch 8, 12 heads × 64, bf16",
        "",
        *_attention_lines(suite),
        "",
        "## Input pipeline on this host's CPUs",
        "",
        *_pipeline_lines(suite),
        *(["", "## Steps that did not finish", "", *failed] if failed else []),
    ]
    return "\n".join(lines) + "\n"


def _pipeline_lines(suite: Mapping) -> list[str]:
    step = suite["steps"].get("pipeline_workers")
    records = step["records"] if step else []
    if not records:
        return [_failed(step) if step else "not run"]
    lines = [
        f"`pipeline_workers`: a {records[0]['store_gb']:g} GB synthetic prepared store, MMLM "
        f"rows of 512 tokens, 32 a step, {PIPELINE_STEPS} steps, on {records[0]['cpus']} CPUs; "
        f"the goal is {PIPELINE_GOAL / 1e6:.1f} M row tokens/s a host (8 GPUs at 700 k each).",
        "",
        "| `data.num_workers` | start-up | row tokens/s | goal |",
        "| --- | --- | --- | --- |",
    ]
    for r in records:
        goal = "met" if r["tokens_per_s"] >= PIPELINE_GOAL else "not met"
        lines.append(
            f"| {r['num_workers']} | {r['startup_s']:.2f} s | {r['tokens_per_s']:,.0f} | {goal} |"
        )
    return lines


def summary(suite: Mapping, out_dir: pathlib.Path) -> str:
    """A few lines for the terminal; the files hold the rest."""
    steps = suite["steps"]
    check = steps["kernel_check"]["records"]
    errors = [r["max_abs_error"] for r in check if "max_abs_error" in r]
    lines = [
        f"GPU suite on {suite['device']} ({suite['date']}): {out_dir / 'performance.md'}, "
        f"{out_dir / 'suite.json'}, {out_dir / 'suite.log'}",
        f"kernel check: {sum(r['passed'] for r in check)}/{len(check)} cases within tolerance"
        + (f", max abs error {max(errors):.1e}" if errors else ""),
        f'tile sweep: model.flash_tiles="{suite["flash_tiles"]}"',
    ]
    for impl in ATTENTION_IMPLS:
        result = first_record(steps[f"step_{impl}"])
        tokens = f"{result['tokens_per_s']:,.0f} tokens/s" if result else None
        lines.append(f"step, attention={impl}: {tokens or _failed(steps[f'step_{impl}'])}")
    for mode in bench_peer.MODES:
        run = _peer_run(suite, mode)
        if "failed" in run:
            lines.append(f"peer ({mode}): {run['failed']}")
            continue
        ratios = _ratios(suite, mode)
        lines.append(f"peer ({mode}): {run['tokens_per_s']:,.0f} tokens/s, ours / peer: {ratios}")
    pipeline = steps.get("pipeline_workers", {}).get("records", [])
    if pipeline:
        rates = ", ".join(f"{r['num_workers']}: {r['tokens_per_s'] / 1e6:.2f} M" for r in pipeline)
        goal = f"goal {PIPELINE_GOAL / 1e6:.1f} M"
        lines.append(f"input pipeline, row tokens/s by data.num_workers: {rates} ({goal})")
    unfinished = [f"{name} ({s['status']})" for name, s in steps.items() if s["status"] != "ok"]
    if unfinished:
        lines.append(f"did not finish: {', '.join(unfinished)} (performance.md says why)")
    return "\n".join(lines)


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
