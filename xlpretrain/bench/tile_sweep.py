"""The GPU suite's second step: the fused kernel's tiles, picked by measuring them.

Without a GPU the default tiles (`flash.default_tiles`) are the smallest that never spill on
sm_90a, not the fastest. Here each kernel's candidates (forward, dQ, dK/dV) are compiled on the
heaviest bf16 case for registers and spills, those that spill are dropped, the rest are timed at
XLM-R base's attention shape, and the fastest per kernel becomes the suite's
`model.flash_tiles`. `pick_tiles` and `spill_free` read the records, so the pick is checked on
a CPU (tests/test_bench_gpu.py).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence

import jax
import numpy as np

from xlpretrain.bench import attention as bench_attention
from xlpretrain.bench.kernel_check import case_inputs, error_text
from xlpretrain.model.kernels import flash, gpu_compile
from xlpretrain.model.kernels.gpu_compile import FlashCase

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
                    "error": error_text(error),
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
    records = []
    for record in _compile_stage(gpu):  # each as it comes: a sweep cut at its budget keeps them
        records.append(record)
        yield record
    rng = np.random.default_rng(0)
    meta = bench_attention.row_meta(TIMED_CASE.mask, TIMED_CASE.batch, TIMED_CASE.length, rng)
    args = (*case_inputs(TIMED_CASE, rng), meta)
    default, times = sweep_default(), {}  # fwd+bwd by tiles string: the default timed once

    def timed(tiles: flash.Tiles) -> dict:
        if str(tiles) not in times:
            try:
                times[str(tiles)] = {"fwd_bwd_ms": time_tiles(tiles, args, repeats)}
            except Exception as error:  # noqa: BLE001 - this candidate's result
                times[str(tiles)] = {"error": error_text(error)}
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
