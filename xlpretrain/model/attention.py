"""Multi-head attention whose mask is a function of token metadata (see ``xlpretrain.masks``).

The mask function is a static Python callable: it is closed over under ``jit`` and never
traced as a value, so each distinct mask compiles its own program and a fused kernel can later
evaluate it tile by tile instead of reading an ``[L, L]`` tensor.
"""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from xlpretrain import masks
from xlpretrain.model import relative_position
from xlpretrain.model.config import ModelConfig


def dot_product_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    mask_fn: masks.MaskFn,
    q_meta: masks.Meta,
    k_meta: masks.Meta,
    bias: jax.Array | None = None,
    dropout_rng: jax.Array | None = None,
    dropout_rate: float = 0.0,
    deterministic: bool = True,
    impl: str = "xla",
) -> jax.Array:
    """Softmax attention over ``[B, L, H, D]`` inputs; returns ``[B, Lq, H, D]``.

    ``bias`` (``[B or 1, H, Lq, Lk]``, e.g. from a ``masks.ScoreMod``) is added to the logits.
    Logits and softmax are float32 whatever the input dtype. ``impl='cudnn'`` needs a GPU and
    no attention dropout; it is not exercised by the CPU test suite.
    """
    mask = masks.materialize(mask_fn, q_meta, k_meta)
    dropout = not deterministic and dropout_rate > 0.0
    if impl == "cudnn":
        if jax.default_backend() != "gpu":
            raise ValueError("attention_impl='cudnn' needs a GPU; use attention_impl='xla'")
        if q.dtype not in (jnp.bfloat16, jnp.float16):
            raise ValueError(f"attention_impl='cudnn' needs bfloat16/float16 inputs, got {q.dtype}")
        if dropout:
            raise ValueError(
                "attention_impl='cudnn' has no attention dropout; "
                "set attention_dropout_rate=0 or use attention_impl='xla'"
            )
        return jax.nn.dot_product_attention(q, k, v, bias, mask, implementation="cudnn")
    if impl != "xla":
        raise ValueError(f"unknown attention impl {impl!r}; expected 'xla' or 'cudnn'")
    if not dropout:
        return jax.nn.dot_product_attention(q, k, v, bias, mask, implementation="xla")
    if dropout_rng is None:
        raise ValueError("attention dropout is active but no dropout_rng was given")
    return _attention_with_dropout(q, k, v, mask, bias, dropout_rng, dropout_rate)


def _attention_with_dropout(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array,
    bias: jax.Array | None,
    dropout_rng: jax.Array,
    dropout_rate: float,
) -> jax.Array:
    """Explicit softmax path, because ``jax.nn.dot_product_attention`` has no dropout."""
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
    logits = logits / math.sqrt(q.shape[-1])
    if bias is not None:
        logits = logits + bias.astype(jnp.float32)
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1)
    keep_prob = 1.0 - dropout_rate
    keep = jax.random.bernoulli(dropout_rng, keep_prob, probs.shape)
    probs = jnp.where(keep, probs / keep_prob, 0.0)
    return jnp.einsum("bhqk,bkhd->bqhd", probs.astype(v.dtype), v)


def relative_table_param(module: nn.Module, config: ModelConfig) -> jax.Array:
    """The `[num_buckets, heads]` table d of the bucketed relative position bias."""
    return module.param(
        "relative_position_table",
        nn.with_logical_partitioning(
            nn.initializers.normal(config.initializer_range), (None, "heads")
        ),
        (config.num_buckets, config.num_heads),
        jnp.float32,
    )


class MultiHeadAttention(nn.Module):
    """Q/K/V/O projections around ``dot_product_attention`` (HF ``XLMRobertaAttention``).

    Params: ``{query,key,value}/kernel [embed, heads, kv]``, ``.../bias [heads, kv]``,
    ``out/kernel [heads, kv, embed]``, ``out/bias [embed]``.
    """

    config: ModelConfig
    relative: bool = False  # self-attention: add the configured relative position bias

    @nn.compact
    def __call__(
        self,
        inputs_q: jax.Array,
        inputs_kv: jax.Array,
        *,
        mask_fn: masks.MaskFn,
        q_meta: masks.Meta,
        k_meta: masks.Meta,
        deterministic: bool,
        relative_table: jax.Array | None = None,
    ) -> jax.Array:
        cfg = self.config
        init = nn.initializers.normal(cfg.initializer_range)

        def projection(name: str) -> nn.DenseGeneral:
            return nn.DenseGeneral(
                features=(cfg.num_heads, cfg.head_dim),
                dtype=cfg.compute_dtype,
                kernel_init=nn.with_logical_partitioning(init, ("embed", "heads", "kv")),
                bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("heads", "kv")),
                name=name,
            )

        q = projection("query")(inputs_q)
        k = projection("key")(inputs_kv)
        v = projection("value")(inputs_kv)
        rate = cfg.attention_dropout_rate
        dropout_rng = None if deterministic or rate == 0.0 else self.make_rng("dropout")
        bias = None
        if self.relative and cfg.relative_position != "none":
            bias = self._relative_bias(q, q_meta, k_meta, relative_table)
        out = dot_product_attention(
            q,
            k,
            v,
            mask_fn=mask_fn,
            q_meta=q_meta,
            k_meta=k_meta,
            bias=bias,
            dropout_rng=dropout_rng,
            dropout_rate=rate,
            deterministic=deterministic,
            impl=cfg.attention_impl,
        )
        return nn.DenseGeneral(
            features=cfg.hidden_size,
            axis=(-2, -1),
            dtype=cfg.compute_dtype,
            kernel_init=nn.with_logical_partitioning(init, ("heads", "kv", "embed")),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            name="out",
        )(out)

    def _relative_bias(self, q, q_meta, k_meta, table: jax.Array | None) -> jax.Array:
        """d (bucketed), or XLM-E's gated r: per layer `u`, `v` `[heads, kv]` and scalar `w`."""
        cfg = self.config
        if table is None:  # not shared: this layer's own table
            table = relative_table_param(self, cfg)
        d = relative_position.bucketed_bias(
            q_meta["positions"],
            k_meta["positions"],
            table,
            num_buckets=cfg.num_buckets,
            max_distance=cfg.max_distance,
        )
        if cfg.relative_position == "bucketed":
            return d
        init = nn.initializers.normal(cfg.initializer_range)
        gate = nn.with_logical_partitioning(init, ("heads", "kv"))
        u = self.param("gate_u", gate, (cfg.num_heads, cfg.head_dim), jnp.float32)
        v = self.param("gate_v", gate, (cfg.num_heads, cfg.head_dim), jnp.float32)
        w = self.param(
            "gate_w", nn.with_logical_partitioning(nn.initializers.zeros, ()), (), jnp.float32
        )
        return relative_position.gated_bias(q, d, u, v, w)
