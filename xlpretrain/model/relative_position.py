"""Relative position biases as score modifications: bucketed (T5) and XLM-E's gated form.

The bias is a function of per-token metadata (positions) plus small parameter tables, added to
the attention logits — a `score_mod` in FlexAttention's terms — so a fused kernel can compute it
tile by tile. The XLA reference path materialises it as `[B, H, Lq, Lk]`.

XLM-E (Chi et al., 2022) gates the bucketed bias d with the query:
    r_{i−j} = d_{i−j} + g_u·d_{i−j} + (1 − g_u)·w·g_r·d_{i−j},  g_u = σ(q_i·u), g_r = σ(q_i·v)
with per-head vectors u, v and a learnable scalar w; equivalently d·(1 + g_u + (1 − g_u)·w·g_r),
a per-query factor on d, which is the form `RelativeBias` carries.
"""

import math

import flax.struct
import jax
import jax.numpy as jnp


def relative_position_bucket(
    relative_position: jax.Array, num_buckets: int, max_distance: int
) -> jax.Array:
    """T5's bidirectional buckets of `key_position − query_position`: half the buckets per
    direction, exact below `num_buckets // 4`, logarithmic up to `max_distance`."""
    half = num_buckets // 2
    bucket = jnp.where(relative_position > 0, half, 0)
    distance = jnp.abs(relative_position)
    max_exact = half // 2
    scaled = jnp.log(jnp.maximum(distance, 1) / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (scaled * (half - max_exact)).astype(jnp.int32)
    large = jnp.minimum(large, half - 1)
    return bucket + jnp.where(distance < max_exact, distance, large)


def bucketed_bias(
    q_positions: jax.Array,
    k_positions: jax.Array,
    table: jax.Array,
    *,
    num_buckets: int,
    max_distance: int,
) -> jax.Array:
    """d_{i−j}: `table` `[num_buckets, heads]` looked up per (query, key) → `[B, H, Lq, Lk]`."""
    relative = k_positions[:, None, :] - q_positions[:, :, None]
    buckets = relative_position_bucket(relative, num_buckets, max_distance)
    return jnp.moveaxis(table[buckets], -1, 1).astype(jnp.float32)


def gate_scale(q: jax.Array, u: jax.Array, v: jax.Array, w: jax.Array) -> jax.Array:
    """XLM-E's gate as a per-query factor on d: r = d·(1 + g_u + (1 − g_u)·w·g_r), so
    `[B, H, Lq]` (from queries `q` `[B, Lq, H, D]`, gate vectors `u`, `v` `[H, D]`, scalar
    `w`) is all a fused kernel needs besides the bucket table."""
    q = q.astype(jnp.float32)
    g_u = jax.nn.sigmoid(jnp.einsum("bqhd,hd->bhq", q, u))
    g_r = jax.nn.sigmoid(jnp.einsum("bqhd,hd->bhq", q, v))
    return 1.0 + g_u + (1.0 - g_u) * w * g_r


def gated_bias(
    q: jax.Array,
    d: jax.Array,
    u: jax.Array,
    v: jax.Array,
    w: jax.Array,
) -> jax.Array:
    """XLM-E's gate applied to the bucketed bias `d` `[B, H, Lq, Lk]`."""
    return d * gate_scale(q, u, v, w)[..., None]


@flax.struct.dataclass
class RelativeBias:
    """The relative-position score modification as a function of positions plus tables:
    `bias[b, h, i, j] = table[bucket(pos_j − pos_i), h] · scale[b, h, i]`.

    `scale` is XLM-E's `gate_scale` (`None`: the plain bucketed bias). The XLA path
    materialises it (`materialize`); fused kernels evaluate it tile by tile.
    """

    table: jax.Array  # [num_buckets, heads]
    scale: jax.Array | None  # [B, heads, Lq]
    num_buckets: int = flax.struct.field(pytree_node=False)
    max_distance: int = flax.struct.field(pytree_node=False)

    def materialize(self, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
        """float32 `[B, H, Lq, Lk]`."""
        d = bucketed_bias(
            q_positions,
            k_positions,
            self.table,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )
        return d if self.scale is None else d * self.scale[..., None]
