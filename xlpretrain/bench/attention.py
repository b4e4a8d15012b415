"""Attention micro-benchmark: `python -m xlpretrain.bench --attention`.

Each objective's mask on rows laid out as that objective lays them out (packed units of random
length, pairs split into sides, 15% masked, BTMLM placeholders, VECO segment pairs), at each
length, with every requested implementation; forward + backward time and temporary memory, next to
the same implementation with no mask at all (``unmasked``: every key of the row allowed), and
the share of ``[128, 128]`` tiles the fused kernel skips.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from xlpretrain import masks
from xlpretrain.data.pretraining.batch import SIDE_PLACEHOLDER, SIDE_TARGET
from xlpretrain.model import kernels
from xlpretrain.model.attention import dot_product_attention
from xlpretrain.model.kernels.block_mask import classify_tiles, pad_meta, skipped_fraction

OBJECTIVE_MASKS = ("unmasked", "mmlm", "tlm", "camlm", "btmlm_generate", "btmlm", "veco_cross")
SKIP_TILE = 128


def unmasked(q: masks.Meta, k: masks.Meta) -> jax.Array:
    """Every key allowed: the baseline the masked timings are compared with."""
    return (q["segment_ids"] >= 0) & (k["segment_ids"] >= 0)


def row_meta(
    objective: str, rows: int, length: int, rng: np.random.Generator, min_unit: int = 64
) -> dict:
    """``[rows, length]`` metadata as the objective's stream packs it: units of ``min_unit`` to
    length/2 tokens until the row is full (the rest padding)."""
    meta = {name: np.zeros((rows, length), np.int32) for name in
            ("segment_ids", "pair_ids", "side", "positions", "is_masked")}  # fmt: skip
    for row in range(rows):
        start, unit = 0, 0
        while start < length - 16:
            size = min(int(rng.integers(min_unit, max(min_unit + 1, length // 2))), length - start)
            unit += 1
            span = slice(start, start + size)
            meta["segment_ids"][row, span] = unit
            meta["pair_ids"][row, span] = unit
            meta["positions"][row, span] = 2 + np.arange(size)
            meta["is_masked"][row, span] = rng.random(size) < 0.15
            half = start + size // 2
            if objective in ("tlm", "camlm", "btmlm"):
                meta["side"][row, half : start + size] = SIDE_TARGET
            elif objective == "btmlm_generate":
                placeholders = max(1, int(0.15 * size))
                meta["side"][row, start + size - placeholders : start + size] = SIDE_PLACEHOLDER
            elif objective == "veco_cross":  # x and y: two segments of one pair
                meta["segment_ids"][row, half : start + size] = unit + 1000
                meta["positions"][row, half : start + size] = 2 + np.arange(start + size - half)
            start += size
    return {name: jnp.asarray(value) for name, value in meta.items()}


def _mask_fn(name: str) -> masks.MaskFn:
    return unmasked if name == "unmasked" else masks.get(name)


def time_attention(
    impl: str, mask_name: str, meta: dict, shape: tuple[int, int, int, int], dtype, repeats: int
) -> dict:
    """Forward + backward of one implementation on one mask: milliseconds per call and the
    compiled program's temporary memory (XLA's own account, so each row is its program's)."""
    batch, length, heads, head_dim = shape
    keys = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(key, shape, dtype) for key in keys)
    mask_fn = _mask_fn(mask_name)

    def loss(q, k, v):
        out = dot_product_attention(
            q, k, v, mask_fn=mask_fn, q_meta=meta, k_meta=meta, impl=impl,
            platform=kernels.host_platform(),
        )  # fmt: skip
        return jnp.sum(out.astype(jnp.float32))

    try:
        step = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(q, k, v).compile()
        jax.block_until_ready(step(q, k, v))
    except Exception as error:  # noqa: BLE001 - an impl this backend lacks is reported, not fatal
        return {"impl": impl, "mask": mask_name, "error": f"{type(error).__name__}: {error}"}
    start = time.perf_counter()
    for _ in range(repeats):
        grads = step(q, k, v)
    jax.block_until_ready(grads)
    seconds = (time.perf_counter() - start) / repeats
    analysis = step.memory_analysis()
    temp = getattr(analysis, "temp_size_in_bytes", None)
    return {
        "impl": impl,
        "mask": mask_name,
        "fwd_bwd_ms": seconds * 1e3,
        "temp_memory_mib": temp / 2**20 if temp is not None else None,
    }


def attention_benchmark(
    impls: Sequence[str],
    lengths: Sequence[int],
    batch: int,
    heads: int,
    head_dim: int,
    dtype: str = "bfloat16",
    repeats: int = 10,
    objectives: Sequence[str] = OBJECTIVE_MASKS,
) -> dict:
    """Every (length, objective mask, impl); each masked time is also given relative to the
    same impl's ``unmasked`` time at that length."""
    rng = np.random.default_rng(0)
    results = []
    for length in lengths:
        for name in objectives:
            meta = row_meta(name, batch, length, rng)
            padded = pad_meta(meta, -(-length // SKIP_TILE) * SKIP_TILE)
            tiles = classify_tiles(
                _mask_fn(name), padded, padded, q_len=length, k_len=length,
                block_q=SKIP_TILE, block_k=SKIP_TILE,
            )  # fmt: skip
            skipped = float(skipped_fraction(tiles))
            for impl in impls:
                result = time_attention(
                    impl, name, meta, (batch, length, heads, head_dim), jnp.dtype(dtype), repeats
                )
                results.append({"length": length, "tiles_skipped": skipped, **result})
    baseline = {
        (r["length"], r["impl"]): r["fwd_bwd_ms"]
        for r in results
        if r["mask"] == "unmasked" and "fwd_bwd_ms" in r
    }
    for r in results:
        base = baseline.get((r["length"], r["impl"]))
        if base and "fwd_bwd_ms" in r:
            r["vs_unmasked"] = r["fwd_bwd_ms"] / base
    return {
        "device": f"{jax.device_count()} x {jax.devices()[0].device_kind}",
        "jax": jax.__version__,
        "batch": batch,
        "heads": heads,
        "head_dim": head_dim,
        "dtype": dtype,
        "results": results,
    }


def format_attention(report: dict) -> str:
    lines = [
        f"attention fwd+bwd on {report['device']} (jax {report['jax']}), batch {report['batch']},"
        f" {report['heads']} heads × {report['head_dim']}, {report['dtype']}",
        f"{'L':>5} {'mask':<15} {'impl':<7} {'ms':>9} {'vs unmasked':>12} {'tiles skipped':>14}"
        f" {'temp MiB':>9}",
    ]
    for r in report["results"]:
        if "error" in r:
            lines.append(f"{r['length']:>5} {r['mask']:<15} {r['impl']:<7} {r['error'][:80]}")
            continue
        ratio = f"{r['vs_unmasked']:.2f}x" if "vs_unmasked" in r else "-"
        memory = f"{r['temp_memory_mib']:.1f}" if r["temp_memory_mib"] is not None else "n/a"
        lines.append(
            f"{r['length']:>5} {r['mask']:<15} {r['impl']:<7} {r['fwd_bwd_ms']:>9.2f} "
            f"{ratio:>12} {r['tiles_skipped']:>14.0%} {memory:>9}"
        )
    return "\n".join(lines)
