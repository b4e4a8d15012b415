"""The ModernBERT / mmBERT layer: pre-norm, no biases, rotary positions, GeGLU, and attention that
alternates between global layers and local ones confined to a sliding window.

A layer is ``x + attn(norm(x))`` then ``x + wo(gelu(wi_0(x')) · wi_1(x'))`` with
``x' = norm(x)``; the first layer has no attention norm (the embeddings end in one). The
window is not a different program per layer: it is per-token metadata (``meta["window"]``,
the largest distance a query may attend over, for every token of a local layer; "unbounded"
for a global one) that ``masks.windowed`` adds to any objective's mask function, so one scanned
layer body serves every layer and the fused kernel skips the tiles outside the window like
any masked-out tile. The rotary base differs per layer in the same way (``layer_schedule``).

Parameters (``scan_layers``: one leading ``layers`` axis)::

    encoder/layers/
      attention_norm/scale                 [H]              (embed,)   unused by layer 0
      attention/{query,key,value}/kernel   [H, heads, kv]   (embed, heads, kv)
      attention/out/kernel                 [heads, kv, H]   (heads, kv, embed)
      mlp_norm/scale                       [H]              (embed,)
      mlp/{wi_0,wi_1}/kernel               [H, mlp_dim]     (embed, mlp)   GeGLU input, gate
      mlp/wo/kernel                        [mlp_dim, H]     (mlp, embed)
      cross_attention/…, cross_attention_norm/scale         only with cross_attention (VECO)
    encoder/final_norm/scale               [H]              (embed,)

Hugging Face ``ModernBertForMaskedLM`` names: ``model.layers.i.attn.Wqkv`` (query, key, value
stacked on the output axis), ``attn.Wo``, ``attn_norm``, ``mlp_norm``, ``mlp.Wi`` (input then
gate on the output axis), ``mlp.Wo``, ``model.final_norm``.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from xlpretrain import masks
from xlpretrain.model.attention import MultiHeadAttention
from xlpretrain.model.config import ModelConfig
from xlpretrain.model.layers import StackedLayer, dense, gelu, layer_norm
from xlpretrain.model.rotary import rotary_positions
from xlpretrain.parallel import sharding

GLOBAL = np.iinfo(np.int32).max  # a global layer's window: every distance


def layer_schedule(config: ModelConfig) -> dict[str, jax.Array]:
    """Per layer (leading axis ``num_layers``): ``window``, the largest query-key distance
    in the row a token may attend over (half the local window; ``GLOBAL`` for every
    ``global_every``-th layer from the first), ``theta``, the rotary base, and ``first``."""
    layers = np.arange(config.num_layers)
    is_global = layers % config.global_every == 0
    return {
        "window": jnp.asarray(np.where(is_global, GLOBAL, config.local_window // 2), jnp.int32),
        "theta": jnp.asarray(
            np.where(is_global, config.rope_theta, config.local_rope_theta), jnp.float32
        ),
        "first": jnp.asarray(layers == 0),
    }


class GatedMlp(nn.Module):
    """GeGLU: ``wo(gelu(wi_0(x)) · wi_1(x))`` (HF ``mlp.Wi`` is ``[wi_0; wi_1]``)."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cfg = self.config
        gate = dense(cfg, cfg.mlp_dim, ("embed", "mlp"), "wi_1")(x)
        h = gelu(dense(cfg, cfg.mlp_dim, ("embed", "mlp"), "wi_0")(x)) * gate
        h = sharding.constrain(h, ("batch", "length", "mlp"))
        return dense(cfg, cfg.hidden_size, ("mlp", "embed"), "wo")(h)


class ModernLayer(StackedLayer):
    """One pre-norm layer; ``layer`` holds its slice of ``layer_schedule``. With a ``memory``
    (VECO's plug-in) a cross-attention sub-layer, ``x + cross_attn(norm(x), memory)``, runs
    between attention and MLP, rotary on both sides at the row's positions."""

    @nn.compact
    def __call__(
        self,
        x: jax.Array,
        meta: masks.Meta,
        memory: jax.Array | None,
        layer: dict[str, jax.Array],
    ) -> tuple[jax.Array, None]:
        cfg = self.config
        drop = nn.Dropout(cfg.dropout_rate)
        positions = rotary_positions(cfg, meta["positions"])
        rotary = (positions, layer["theta"])
        local = {**meta, "window": jnp.broadcast_to(layer["window"], meta["positions"].shape)}
        normed = layer_norm(cfg, "attention_norm")(x)
        inputs = jnp.where(layer["first"], x.astype(normed.dtype), normed)
        h = MultiHeadAttention(cfg, name="attention")(
            inputs,
            inputs,
            mask_fn=masks.windowed(self.mask_fn, cfg.local_window // 2),
            q_meta=local,
            k_meta=local,
            deterministic=self.deterministic,
            rotary=rotary,
        )
        x = x + drop(h, deterministic=self.deterministic)
        if memory is not None:
            h = MultiHeadAttention(cfg, name="cross_attention")(
                layer_norm(cfg, "cross_attention_norm")(x),
                memory.astype(x.dtype),
                mask_fn=self.cross_mask_fn,
                q_meta=meta,
                k_meta=meta,
                deterministic=self.deterministic,
                rotary=rotary,
            )
            x = x + drop(h, deterministic=self.deterministic)
        h = GatedMlp(cfg, name="mlp")(layer_norm(cfg, "mlp_norm")(x))
        x = x + drop(h, deterministic=self.deterministic)
        return sharding.constrain(x, ("batch", "length", "activation_embed")), None
