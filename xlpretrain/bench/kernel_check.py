"""The GPU suite's first step: the fused attention kernel against a plain-XLA reference.

The kernel (`model.kernels.flash`) is tested in interpret mode on a CPU and compiled for sm_90a,
but only a GPU runs what Triton made of it; a wrong mask, bias or dropout there would show as a
worse model, not as an error. So the suite compares it, on the GPU, with plain XLA that has the
mask, the bias and the dropout decisions materialised (`reference_attention`, which
tests/test_flash_attention.py checks the kernel against too): every mask, no bias, the bucketed
and the gated bias, dropout; float32, packed rows with padding, a length no tile divides;
forward and every gradient. tests/test_bench_gpu.py runs the same check in interpret mode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from xlpretrain import masks
from xlpretrain.bench import attention as bench_attention
from xlpretrain.model import relative_position
from xlpretrain.model.kernels import flash
from xlpretrain.model.kernels.block_mask import pad_meta
from xlpretrain.model.kernels.gpu_compile import FlashCase
from xlpretrain.model.relative_position import RelativeBias

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
        FlashCase("tlm", "none", window=16, **shape),  # a ModernBERT local layer
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
    if case.window:
        meta["window"] = jnp.full_like(meta["positions"], case.window)
    mask_fn = case.mask_fn()
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
            yield {"case": str(case), "passed": False, "error": error_text(error)}


def error_text(error: BaseException) -> str:
    """A failure as the suite's records hold it (each case's, candidate's and step's)."""
    return f"{type(error).__name__}: {error}"[:4000]
