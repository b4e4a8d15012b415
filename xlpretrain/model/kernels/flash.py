"""Flash attention whose mask is a *function* of token metadata (Pallas; Triton on GPU).

The kernel reads only O(L) per-token metadata (segment ids, sides, pair ids, positions,
is_masked) and evaluates the objective's mask function on each ``[block_q, block_k]`` tile in
registers, together with the relative-position score modification; no ``[L, L]`` mask or bias
ever reaches HBM. Tiles the mask excludes entirely are skipped and tiles it allows entirely
skip the mask evaluation (``block_mask.classify_tiles``). Attention dropout is a counter-based
hash of (seed, global row, head, query, key), so the backward pass regenerates it and a
sharded run draws the same mask as an unsharded one.

Forward and backward follow FlashAttention-2: an online softmax over key tiles saves the
row log-sum-exp; the backward recomputes the probabilities in one kernel for dK/dV (looping
over query tiles) and one for dQ and the score modification's parameters (looping over key
tiles). On a CPU the same kernels run in Pallas interpret mode, which is how CI checks them
against the XLA reference.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl

from xlpretrain import masks
from xlpretrain.model import kernels
from xlpretrain.model.kernels.block_mask import EMPTY, FULL, classify_tiles, pad_meta
from xlpretrain.model.kernels.tiles import KERNELS, KernelTiles, Tiles, default_tiles
from xlpretrain.model.relative_position import RelativeBias, relative_position_bucket

META_FIELDS = ("segment_ids", "pair_ids", "side", "positions", "is_masked", "window")


@dataclasses.dataclass(frozen=True)
class _Static:
    """Everything the kernels specialise on (hashable: it is a custom_vjp static argument)."""

    mask_fn: masks.MaskFn
    fields: tuple[str, ...]
    q_len: int
    k_len: int
    tiles: Tiles
    sm_scale: float
    has_bias: bool
    has_scale: bool
    num_buckets: int
    max_distance: int
    dropout_rate: float
    interpret: bool

    @property
    def q_pad(self) -> int:  # a multiple of every kernel's query tile (powers of two)
        block = max(t.block_q for t in (self.tiles.forward, self.tiles.dq, self.tiles.dkv))
        return pl.cdiv(self.q_len, block) * block

    @property
    def k_pad(self) -> int:
        block = max(t.block_k for t in (self.tiles.forward, self.tiles.dq, self.tiles.dkv))
        return pl.cdiv(self.k_len, block) * block


# --- pieces shared by the three kernels ------------------------------------------------------


def _fmix(x: jax.Array) -> jax.Array:
    """MurmurHash3's 32-bit finaliser: a cheap, well-mixed bijection on uint32."""
    x = x ^ (x >> 16)
    x = x * np.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * np.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def dropout_keep(
    seed: jax.Array, row_head: jax.Array, q_idx: jax.Array, k_idx: jax.Array, rate: float
) -> jax.Array:
    """Whether attention weight (query ``q_idx``, key ``k_idx``) of (global row × heads +
    head) ``row_head`` survives dropout: a hash, so kernels and references regenerate it."""
    x = _fmix(seed.astype(jnp.uint32) ^ _fmix(row_head.astype(jnp.uint32) + np.uint32(1)))
    x = _fmix(x ^ (q_idx.astype(jnp.uint32) * np.uint32(0x9E3779B1)))
    x = _fmix(x + k_idx.astype(jnp.uint32) * np.uint32(0x27D4EB2F))
    return x >= np.uint32(min(int(rate * 2.0**32), 2**32 - 1))


def _dot(a: jax.Array, b: jax.Array, contract: tuple[int, int]) -> jax.Array:
    """2-D matmul contracting ``a``'s axis ``contract[0]`` with ``b``'s, float32 accumulation."""
    dims = (((contract[0],), (contract[1],)), ((), ()))
    return lax.dot_general(a, b, dims, preferred_element_type=jnp.float32)


def _bucket_values(st: _Static, table_ref, q_pos: jax.Array, k_pos: jax.Array):
    """(buckets ``[bq, bk]``, d ``[bq, bk]`` = this head's table at each bucket)."""
    buckets = relative_position_bucket(k_pos - q_pos, st.num_buckets, st.max_distance)
    d = jnp.zeros(buckets.shape, jnp.float32)
    for n in range(st.num_buckets):  # a select per bucket: no gathers inside the kernel
        d = jnp.where(buckets == n, table_ref[n], d)
    return buckets, d


@dataclasses.dataclass
class _Tile:
    """One (query tile, key tile) pair's recomputed scores."""

    logits: jax.Array  # [bq, bk] float32, scaled, bias added
    allowed: jax.Array | None  # None: every pair allowed (a FULL tile)
    buckets: jax.Array | None
    d: jax.Array | None
    keep: jax.Array | None  # dropout survivors


def _tile(st: _Static, q, k, q_meta, k_meta, q_start, k_start, table_ref, scale, seed, masked):
    """Logits, mask and dropout of a tile; ``q_meta`` values are ``[bq, 1]``, ``k_meta``
    values ``[1, bk]``."""
    logits = _dot(q, k, (1, 1)) * st.sm_scale
    q_idx = q_start + lax.broadcasted_iota(jnp.int32, (q.shape[0], 1), 0)
    k_idx = k_start + lax.broadcasted_iota(jnp.int32, (1, k.shape[0]), 1)
    buckets = d = None
    if st.has_bias:
        buckets, d = _bucket_values(st, table_ref, q_meta["positions"], k_meta["positions"])
        logits = logits + (d * scale[:, None] if st.has_scale else d)
    allowed = None
    if masked:
        q_info = {**q_meta, "index": q_idx}
        k_info = {**k_meta, "index": k_idx}
        allowed = st.mask_fn(q_info, k_info) & (k_idx < st.k_len)
    keep = None
    if st.dropout_rate > 0.0:
        keep = dropout_keep(seed[0], seed[1], q_idx, k_idx, st.dropout_rate)
    return _Tile(logits, allowed, buckets, d, keep)


def _dropout_seed(seed_ref) -> tuple[jax.Array, jax.Array]:
    """(seed, global row × heads + global head) of this program, from ``seed_ref`` = (seed,
    row offset, head offset, heads in all). Read at the kernel's top level: interpret mode
    cannot lower ``program_id`` inside the tile loop's branches."""
    row = seed_ref[1] + pl.program_id(0)
    return seed_ref[0], row * seed_ref[3] + seed_ref[2] + pl.program_id(1)


def _probs(tile: _Tile, lse: jax.Array) -> jax.Array:
    p = jnp.exp(tile.logits - lse[:, None])
    return p if tile.allowed is None else jnp.where(tile.allowed, p, 0.0)


def _dropped(st: _Static, tile: _Tile, x: jax.Array) -> jax.Array:
    """``x`` with dropped weights zeroed and survivors scaled by 1 / keep probability."""
    if tile.keep is None:
        return x
    return jnp.where(tile.keep, x / (1.0 - st.dropout_rate), 0.0)


def _visit(tile_kind: jax.Array, update, carry):
    """Runs ``update(carry, masked)`` unless the tile is EMPTY; FULL tiles skip the mask."""
    return lax.cond(
        tile_kind == EMPTY,
        lambda c: c,
        lambda c: lax.cond(
            tile_kind == FULL,
            functools.partial(update, masked=False),
            functools.partial(update, masked=True),
            c,
        ),
        carry,
    )


class _Inputs:
    """Names the kernel's refs: fixed ones first, then optional bias refs, then metadata."""

    def __init__(self, st: _Static, refs, fixed: tuple[str, ...]):
        refs = list(refs)
        for name in fixed:
            setattr(self, name, refs.pop(0))
        self.table = refs.pop(0) if st.has_bias else None
        self.scale = refs.pop(0) if st.has_scale else None
        n = len(st.fields)
        self.q_meta, self.k_meta = refs[:n], refs[n : 2 * n]
        self.outputs = refs[2 * n :]

    def q_meta_at(self, st: _Static, sl) -> dict[str, jax.Array]:
        return {f: ref[sl][:, None] for f, ref in zip(st.fields, self.q_meta, strict=True)}

    def k_meta_at(self, st: _Static, sl) -> dict[str, jax.Array]:
        return {f: ref[sl][None, :] for f, ref in zip(st.fields, self.k_meta, strict=True)}


# --- kernels ---------------------------------------------------------------------------------


def _forward_kernel(st: _Static, *refs):
    r = _Inputs(st, refs, ("q", "k", "v", "seed", "tiles"))
    o_ref, lse_ref = r.outputs
    bq, bk = st.tiles.forward.block_q, st.tiles.forward.block_k
    q_start = pl.program_id(2) * bq
    q = r.q[...]
    q_meta = r.q_meta_at(st, slice(None))
    scale = r.scale[...] if st.has_scale else None
    seed = _dropout_seed(r.seed)

    def body(j, carry):
        def update(carry, masked):
            acc, m, total = carry
            keys = pl.ds(j * bk, bk)
            tile = _tile(
                st, q, r.k[keys, :], q_meta, r.k_meta_at(st, keys), q_start, j * bk,
                r.table, scale, seed, masked,
            )  # fmt: skip
            logits = tile.logits
            if tile.allowed is not None:
                logits = jnp.where(tile.allowed, logits, -jnp.inf)
            m_new = jnp.maximum(m, jnp.max(logits, axis=1))
            m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)  # rows with nothing yet
            p = jnp.exp(logits - m_safe[:, None])
            correction = jnp.exp(m - m_safe)
            total = total * correction + jnp.sum(p, axis=1)
            pv = _dot(_dropped(st, tile, p).astype(r.v.dtype), r.v[keys, :], (1, 0))
            return acc * correction[:, None] + pv, m_new, total

        return _visit(r.tiles[j], update, carry)

    init = (
        jnp.zeros(q.shape, jnp.float32),
        jnp.full((bq,), -jnp.inf, jnp.float32),
        jnp.zeros((bq,), jnp.float32),
    )
    acc, m, total = lax.fori_loop(0, r.tiles.shape[0], body, init)
    # A query that may see nothing (only padding does, in no registered mask) outputs 0.
    nothing = total == 0.0
    safe_total = jnp.where(nothing, 1.0, total)
    o_ref[...] = (acc / safe_total[:, None]).astype(o_ref.dtype)
    lse_ref[...] = jnp.where(nothing, jnp.inf, m + jnp.log(safe_total))


def _dq_kernel(st: _Static, *refs):
    r = _Inputs(st, refs, ("q", "k", "v", "do", "lse", "delta", "seed", "tiles"))
    bq, bk = st.tiles.dq.block_q, st.tiles.dq.block_k
    q_start = pl.program_id(2) * bq
    q, do, lse, delta = r.q[...], r.do[...], r.lse[...], r.delta[...]
    q_meta = r.q_meta_at(st, slice(None))
    scale = r.scale[...] if st.has_scale else None
    seed = _dropout_seed(r.seed)
    buckets_iota = lax.broadcasted_iota(jnp.int32, (st.num_buckets,), 0)

    def body(j, carry):
        def update(carry, masked):
            dq, d_scale, d_table = carry
            keys = pl.ds(j * bk, bk)
            k = r.k[keys, :]
            tile = _tile(
                st, q, k, q_meta, r.k_meta_at(st, keys), q_start, j * bk, r.table, scale,
                seed, masked,
            )  # fmt: skip
            p = _probs(tile, lse)
            dp = _dropped(st, tile, _dot(do, r.v[keys, :], (1, 1)))
            ds = p * (dp - delta[:, None])  # d loss / d logits
            dq = dq + _dot(ds.astype(k.dtype), k, (1, 0))
            if st.has_bias:
                if st.has_scale:
                    d_scale = d_scale + jnp.sum(ds * tile.d, axis=1)
                    ds = ds * scale[:, None]

                def add_bucket(n, d_table):
                    total = jnp.sum(jnp.where(tile.buckets == n, ds, 0.0))
                    return d_table + jnp.where(buckets_iota == n, total, 0.0)

                d_table = lax.fori_loop(0, st.num_buckets, add_bucket, d_table)
            return dq, d_scale, d_table

        return _visit(r.tiles[j], update, carry)

    init = (
        jnp.zeros(q.shape, jnp.float32),
        jnp.zeros((bq,), jnp.float32),
        jnp.zeros((st.num_buckets,), jnp.float32),
    )
    dq, d_scale, d_table = lax.fori_loop(0, r.tiles.shape[0], body, init)
    outputs = list(r.outputs)
    outputs.pop(0)[...] = (dq * st.sm_scale).astype(r.q.dtype)
    if st.has_bias:
        outputs.pop(0)[...] = d_table
    if st.has_scale:
        outputs.pop(0)[...] = d_scale


def _dkv_kernel(st: _Static, *refs):
    r = _Inputs(st, refs, ("q", "k", "v", "do", "lse", "delta", "seed", "tiles"))
    dk_ref, dv_ref = r.outputs
    bq, bk = st.tiles.dkv.block_q, st.tiles.dkv.block_k
    k_start = pl.program_id(2) * bk
    k, v = r.k[...], r.v[...]
    k_meta = r.k_meta_at(st, slice(None))
    seed = _dropout_seed(r.seed)

    def body(i, carry):
        def update(carry, masked):
            dk, dv = carry
            rows = pl.ds(i * bq, bq)
            q, do = r.q[rows, :], r.do[rows, :]
            scale = r.scale[rows] if st.has_scale else None
            tile = _tile(
                st, q, k, r.q_meta_at(st, rows), k_meta, i * bq, k_start, r.table, scale,
                seed, masked,
            )  # fmt: skip
            p = _probs(tile, r.lse[rows])
            dv = dv + _dot(_dropped(st, tile, p).astype(do.dtype), do, (0, 0))
            dp = _dropped(st, tile, _dot(do, v, (1, 1)))
            ds = p * (dp - r.delta[rows][:, None])
            return dk + _dot(ds.astype(q.dtype), q, (0, 0)), dv

        return _visit(r.tiles[i], update, carry)

    init = (jnp.zeros(k.shape, jnp.float32), jnp.zeros(v.shape, jnp.float32))
    dk, dv = lax.fori_loop(0, r.tiles.shape[0], body, init)
    dk_ref[...] = (dk * st.sm_scale).astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


# --- pallas_call plumbing --------------------------------------------------------------------


def _compiler_params(st: _Static, kt: KernelTiles):
    if st.interpret:
        return None
    from jax.experimental.pallas import triton as plgpu

    return plgpu.CompilerParams(num_warps=kt.num_warps, num_stages=kt.num_stages)


def _specs(st: _Static, kt: KernelTiles, head_dim: int, over_q: bool, backward: bool):
    """BlockSpecs of a kernel's inputs, in ``_Inputs`` order. The grid is (batch, head, tile
    of the gridded side); the looped-over side is passed whole and sliced in the kernel."""
    bq, bk, q_pad, k_pad = kt.block_q, kt.block_k, st.q_pad, st.k_pad
    q_tile = (bq if over_q else q_pad, lambda b, h, i: (b, h, i if over_q else 0, 0))
    k_tile = (k_pad if over_q else bk, lambda b, h, i: (b, h, 0 if over_q else i, 0))

    def matrix(rows_and_index):
        rows, index = rows_and_index
        return pl.BlockSpec((None, None, rows, head_dim), index)

    def row_vector(rows_and_index):  # [B, H, L] per-query values: lse, delta, gate scale
        rows, index = rows_and_index
        return pl.BlockSpec((None, None, rows), lambda b, h, i: index(b, h, i)[:3])

    specs = [matrix(q_tile), matrix(k_tile), matrix(k_tile)]
    if backward:
        specs += [matrix(q_tile), row_vector(q_tile), row_vector(q_tile)]
    specs.append(pl.BlockSpec((4,), lambda b, h, i: (0,)))  # seed and offsets (_dropout_seed)
    n_other = (k_pad // bk) if over_q else (q_pad // bq)
    specs.append(pl.BlockSpec((None, None, n_other), lambda b, h, i: (b, i, 0)))
    if st.has_bias:
        specs.append(pl.BlockSpec((None, st.num_buckets), lambda b, h, i: (h, 0)))
    if st.has_scale:
        specs.append(row_vector(q_tile))
    n = len(st.fields)
    q_rows = bq if over_q else q_pad
    k_rows = k_pad if over_q else bk
    specs += [pl.BlockSpec((None, q_rows), lambda b, h, i: (b, i if over_q else 0))] * n
    specs += [pl.BlockSpec((None, k_rows), lambda b, h, i: (b, 0 if over_q else i))] * n
    return specs


def _call(st: _Static, kt: KernelTiles, kernel, grid, in_specs, out_specs, out_shape, *args):
    return pl.pallas_call(
        functools.partial(kernel, st),
        grid=grid,
        in_specs=in_specs,
        out_specs=out_specs,
        out_shape=out_shape,
        interpret=st.interpret,
        compiler_params=_compiler_params(st, kt),
    )(*args)


def _optional(st: _Static, table, scale) -> list:
    return ([table] if st.has_bias else []) + ([scale] if st.has_scale else [])


def _forward(st: _Static, q, k, v, table, scale, seed, q_meta, k_meta, tiles):
    batch, heads, _, head_dim = q.shape
    kt = st.tiles.forward
    bq = kt.block_q
    out_specs = [
        pl.BlockSpec((None, None, bq, head_dim), lambda b, h, i: (b, h, i, 0)),
        pl.BlockSpec((None, None, bq), lambda b, h, i: (b, h, i)),
    ]
    out_shape = [
        jax.ShapeDtypeStruct(q.shape, q.dtype),
        jax.ShapeDtypeStruct(q.shape[:3], jnp.float32),
    ]
    return _call(
        st, kt, _forward_kernel, (batch, heads, st.q_pad // bq),
        _specs(st, kt, head_dim, over_q=True, backward=False), out_specs, out_shape,
        q, k, v, seed, tiles["forward"], *_optional(st, table, scale), *q_meta, *k_meta,
    )  # fmt: skip


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(st: _Static, q, k, v, table, scale, seed, q_meta, k_meta, tiles):
    return _forward(st, q, k, v, table, scale, seed, q_meta, k_meta, tiles)[0]


def _flash_fwd(st: _Static, q, k, v, table, scale, seed, q_meta, k_meta, tiles):
    out, lse = _forward(st, q, k, v, table, scale, seed, q_meta, k_meta, tiles)
    return out, (q, k, v, table, scale, seed, q_meta, k_meta, tiles, out, lse)


def _flash_bwd(st: _Static, residuals, do):
    q, k, v, table, scale, seed, q_meta, k_meta, tiles, out, lse = residuals
    batch, heads, _, head_dim = q.shape
    bq, bk = st.tiles.dq.block_q, st.tiles.dkv.block_k
    delta = jnp.sum(do.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)
    common = (q, k, v, do, lse, delta, seed)
    extra = (*_optional(st, table, scale), *q_meta, *k_meta)

    dq_specs = [pl.BlockSpec((None, None, bq, head_dim), lambda b, h, i: (b, h, i, 0))]
    dq_shapes = [jax.ShapeDtypeStruct(q.shape, q.dtype)]
    if st.has_bias:
        dq_specs.append(pl.BlockSpec((None, None, None, st.num_buckets),
                                     lambda b, h, i: (b, h, i, 0)))  # fmt: skip
        dq_shapes.append(
            jax.ShapeDtypeStruct((batch, heads, st.q_pad // bq, st.num_buckets), jnp.float32)
        )
    if st.has_scale:
        dq_specs.append(pl.BlockSpec((None, None, bq), lambda b, h, i: (b, h, i)))
        dq_shapes.append(jax.ShapeDtypeStruct(q.shape[:3], jnp.float32))
    dq_out = _call(
        st, st.tiles.dq, _dq_kernel, (batch, heads, st.q_pad // bq),
        _specs(st, st.tiles.dq, head_dim, over_q=True, backward=True), dq_specs, dq_shapes,
        *common, tiles["dq"], *extra,
    )  # fmt: skip
    dq = dq_out[0]
    d_table = dq_out[1].sum(axis=(0, 2)) if st.has_bias else None
    d_scale = dq_out[-1] if st.has_scale else None

    kv_spec = pl.BlockSpec((None, None, bk, head_dim), lambda b, h, i: (b, h, i, 0))
    dk, dv = _call(
        st, st.tiles.dkv, _dkv_kernel, (batch, heads, st.k_pad // bk),
        _specs(st, st.tiles.dkv, head_dim, over_q=False, backward=True), [kv_spec, kv_spec],
        [jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
        *common, jnp.swapaxes(tiles["dkv"], 1, 2), *extra,
    )  # fmt: skip
    return dq, dk, dv, d_table, d_scale, None, None, None, None


_flash.defvjp(_flash_fwd, _flash_bwd)


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    mask_fn: masks.MaskFn,
    q_meta: masks.Meta,
    k_meta: masks.Meta,
    bias: RelativeBias | None = None,
    dropout_rate: float = 0.0,
    dropout_rng: jax.Array | None = None,
    row_offset: jax.Array | int = 0,
    head_offset: jax.Array | int = 0,
    total_heads: int | None = None,
    tiles: Tiles | None = None,
    platform: str,
) -> jax.Array:
    """Softmax attention over ``[B, L, H, D]`` inputs under ``mask_fn``; returns ``[B, Lq, H, D]``.

    ``q_meta``/``k_meta`` hold the ``[B, L]`` integer metadata of ``META_FIELDS`` the mask
    reads. ``row_offset``/``head_offset`` place this shard's rows and heads among
    ``total_heads`` (under ``shard_map``), so dropout does not depend on the sharding.
    ``tiles``: each kernel's launch shape (default ``default_tiles(q.dtype, head_dim)``),
    shrunk for short rows.
    ``platform``: 'gpu' compiles the kernels with Triton, 'cpu' runs them in Pallas interpret
    mode (the same kernels, executed by XLA: a checker).
    """
    if kernels.check_platform(platform) == "tpu":
        raise ValueError("the fused kernel is Triton (GPU) or interpret mode (CPU); on a TPU use "
                         "attention 'splash' or 'auto'")  # fmt: skip
    if dropout_rate > 0.0 and dropout_rng is None:
        raise ValueError("attention dropout is active but no dropout_rng was given")
    q_len, k_len = q.shape[1], k.shape[1]
    head_dim = q.shape[-1]
    st = _Static(
        mask_fn=mask_fn,
        fields=tuple(f for f in META_FIELDS if f in q_meta),
        q_len=q_len,
        k_len=k_len,
        tiles=(tiles or default_tiles(q.dtype, head_dim)).fitted(q_len, k_len),
        sm_scale=1.0 / math.sqrt(head_dim),
        has_bias=bias is not None,
        has_scale=bias is not None and bias.scale is not None,
        num_buckets=bias.num_buckets if bias is not None else 0,
        max_distance=bias.max_distance if bias is not None else 0,
        dropout_rate=float(dropout_rate),
        interpret=platform == "cpu",
    )
    missing = [f for f in st.fields if f not in k_meta]
    if missing or (st.has_bias and "positions" not in st.fields):
        raise ValueError(
            f"fused attention needs the same metadata for queries and keys ({st.fields}) "
            "and positions for a relative bias"
        )

    def heads_first(x, length):
        x = jnp.swapaxes(x, 1, 2)
        return jnp.pad(x, ((0, 0), (0, 0), (0, length - x.shape[2]), (0, 0)))

    q_meta_p = pad_meta({f: q_meta[f].astype(jnp.int32) for f in st.fields}, st.q_pad)
    k_meta_p = pad_meta({f: k_meta[f].astype(jnp.int32) for f in st.fields}, st.k_pad)
    classified = {}  # kernels with the same tile shape share a classification
    for name in KERNELS:
        kt = getattr(st.tiles, name)
        if (kt.block_q, kt.block_k) not in classified:
            classified[kt.block_q, kt.block_k] = classify_tiles(
                mask_fn, q_meta_p, k_meta_p, q_len=q_len, k_len=k_len,
                block_q=kt.block_q, block_k=kt.block_k,
            )  # fmt: skip
    tiles = {n: classified[getattr(st.tiles, n).block_q, getattr(st.tiles, n).block_k]
             for n in KERNELS}  # fmt: skip
    seed_bits = (
        jax.random.randint(dropout_rng, (), 0, jnp.iinfo(jnp.int32).max)
        if st.dropout_rate > 0.0
        else jnp.zeros((), jnp.int32)
    )
    offsets = (row_offset, head_offset, total_heads or q.shape[2])
    seed = jnp.stack([seed_bits, *(jnp.asarray(x, jnp.int32) for x in offsets)])
    table = scale = None
    if bias is not None:
        table = bias.table.T.astype(jnp.float32)  # [heads, buckets]: a row per head
        if bias.scale is not None:
            scale = jnp.pad(bias.scale.astype(jnp.float32),
                            ((0, 0), (0, 0), (0, st.q_pad - q_len)))  # fmt: skip
    out = _flash(
        st, heads_first(q, st.q_pad), heads_first(k, st.k_pad), heads_first(v, st.k_pad),
        table, scale, seed, [q_meta_p[f] for f in st.fields], [k_meta_p[f] for f in st.fields],
        tiles,
    )  # fmt: skip
    return jnp.swapaxes(out[:, :, :q_len], 1, 2)
