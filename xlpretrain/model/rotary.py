"""Rotary position embeddings (RoFormer; ModernBERT's, in HF's ``rotate_half`` layout): queries
and keys turned by their position, so that their dot product depends on the distance alone."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from xlpretrain.model.config import ModelConfig


def rotate(x: jax.Array, positions: jax.Array, theta: jax.Array) -> jax.Array:
    """Rotary position embedding of ``x`` ``[B, L, heads, D]`` at ``positions`` ``[B, L]``
    (0 for a row's first token), base ``theta``: each pair (i, i + D/2) of features turns by
    ``position · theta^(-2i/D)``, computed in float32 (HF's ``rotate_half`` layout)."""
    half = x.shape[-1] // 2
    inverse = 1.0 / theta ** (jnp.arange(0, x.shape[-1], 2, dtype=jnp.float32) / x.shape[-1])
    angles = positions[..., None].astype(jnp.float32) * inverse  # [B, L, D/2]
    cos = jnp.concatenate([jnp.cos(angles)] * 2, axis=-1)[:, :, None, :]
    sin = jnp.concatenate([jnp.sin(angles)] * 2, axis=-1)[:, :, None, :]
    y = x.astype(jnp.float32)
    turned = jnp.concatenate([-y[..., half:], y[..., :half]], axis=-1)
    return (y * cos + turned * sin).astype(x.dtype)


def rotary_positions(config: ModelConfig, positions: jax.Array) -> jax.Array:
    """The batch's positions (first real token ``pad_token_id + 1``, as XLM-R numbers them) from
    ``positions_from`` (0, as HF's ModernBERT numbers them); padding at 0."""
    return jnp.maximum(positions - (config.pad_token_id + 1) + config.positions_from, 0)
