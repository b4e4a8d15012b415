"""Multi-head attention whose mask is a function of token metadata (see ``xlpretrain.masks``).

The mask function is a static Python callable: it is closed over under ``jit`` and never
traced as a value, so each distinct mask compiles its own program. Implementations
(``model.attention``):

- ``xla``: the reference. Materialises the ``[B, 1, L, L]`` mask and bias; any backend.
- ``cudnn``: cuDNN's fused attention on a materialised mask (GPU, bf16/fp16, no dropout).
- ``pallas``: ``kernels.flash``, which evaluates the mask function and the relative-position
  score tile by tile and skips excluded tiles (Triton on GPU; interpret mode on CPU, for tests).
- ``splash``: JAX's TPU splash kernel (``kernels.splash``) for the segment masks it expresses
  exactly; other calls fall back to ``xla`` (logged once, with the reason).
- ``auto``: ``pallas`` on GPUs, ``splash`` on TPUs, ``xla`` on CPUs.

Under a mesh and logical axis rules (``sharding.under_mesh``, set by the train step) the fused
kernels run under ``jax.shard_map`` over the mesh axes the rules give ``batch`` (and ``heads``):
a kernel is a per-device program, so each device attends over its own rows and heads with no
communication. The projections are placed as ``(batch, length, heads, kv)``.
"""

import functools
import logging
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from xlpretrain import masks
from xlpretrain.model import kernels, relative_position
from xlpretrain.model import rotary as rotary_lib
from xlpretrain.model.config import ModelConfig
from xlpretrain.model.kernels import flash, splash
from xlpretrain.model.relative_position import RelativeBias
from xlpretrain.parallel import sharding

log = logging.getLogger("xlpretrain")


def resolve_impl(impl: str, platform: str) -> str:
    """``auto`` → our kernel on GPUs, splash on TPUs, XLA on CPUs (where both kernels run only
    in interpret mode: a checker, not a fast path)."""
    if impl != "auto":
        return impl
    return {"gpu": "pallas", "tpu": "splash"}.get(kernels.check_platform(platform), "xla")


@functools.cache
def _log_fallback(mask_name: str, reason: str) -> None:
    log.info("attention_impl='splash' runs %s on XLA: %s", mask_name, reason)


def dot_product_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    mask_fn: masks.MaskFn,
    q_meta: masks.Meta,
    k_meta: masks.Meta,
    bias: RelativeBias | None = None,
    dropout_rng: jax.Array | None = None,
    dropout_rate: float = 0.0,
    deterministic: bool = True,
    impl: str = "xla",
    platform: str,
    flash_tiles: str = "",
) -> jax.Array:
    """Softmax attention over ``[B, L, H, D]`` inputs; returns ``[B, Lq, H, D]``.

    ``bias`` (a relative-position score modification) is added to the logits. Logits and
    softmax are float32 whatever the input dtype. ``platform`` ('cpu', 'gpu', 'tpu') is what
    the program is compiled for: it picks ``auto`` and builds the kernels for it.
    ``flash_tiles``: the fused kernel's launch shapes (``flash.Tiles.parse``), if not the default.
    """
    impl = resolve_impl(impl, platform)
    dropout = not deterministic and dropout_rate > 0.0
    if dropout and dropout_rng is None:
        raise ValueError("attention dropout is active but no dropout_rng was given")
    if impl == "splash":
        reason = splash.unsupported(mask_fn, q.shape[1], k.shape[1], bias is not None, dropout)
        if reason is None:
            kernel = _splash_kernel(mask_fn, platform)
            return _per_device(kernel, q, k, v, q_meta, k_meta, None, None)
        _log_fallback(getattr(mask_fn, "__name__", repr(mask_fn)), reason)
        impl = "xla"
    if impl == "pallas":
        if platform == "tpu":
            raise ValueError(
                "attention_impl='pallas' is the Triton kernel (GPU, or interpret mode on CPU); "
                "on TPU use attention_impl='splash' or 'auto'"
            )
        tiles = None
        if flash_tiles:
            base = flash.default_tiles(q.dtype, q.shape[-1])
            tiles = flash.Tiles.parse(flash_tiles, base=base)
        kernel = _flash_kernel(mask_fn, dropout_rate if dropout else 0.0, q.shape[2], platform,
                               tiles)  # fmt: skip
        return _per_device(kernel, q, k, v, q_meta, k_meta, bias, dropout_rng)
    mask = masks.materialize(mask_fn, q_meta, k_meta)
    dense_bias = None
    if bias is not None:
        dense_bias = bias.materialize(q_meta["positions"], k_meta["positions"])
    if impl == "cudnn":
        if platform != "gpu":
            raise ValueError("attention_impl='cudnn' needs a GPU; use attention_impl='xla'")
        if q.dtype not in (jnp.bfloat16, jnp.float16):
            raise ValueError(f"attention_impl='cudnn' needs bfloat16/float16 inputs, got {q.dtype}")
        if dropout:
            raise ValueError(
                "attention_impl='cudnn' has no attention dropout; "
                "set attention_dropout_rate=0 or use attention_impl='pallas'"
            )
        return jax.nn.dot_product_attention(q, k, v, dense_bias, mask, implementation="cudnn")
    if impl != "xla":
        raise ValueError(
            f"unknown attention impl {impl!r}; expected 'xla', 'cudnn', 'pallas', 'splash' "
            "or 'auto'"
        )
    if not dropout:
        return jax.nn.dot_product_attention(q, k, v, dense_bias, mask, implementation="xla")
    return _attention_with_dropout(q, k, v, mask, dense_bias, dropout_rng, dropout_rate)


def _flash_kernel(mask_fn, dropout_rate: float, total_heads: int, platform: str, tiles):
    def run(q, k, v, q_meta, k_meta, bias, dropout_rng, offsets):
        return flash.attention(
            q, k, v, mask_fn=mask_fn, q_meta=q_meta, k_meta=k_meta, bias=bias,
            dropout_rate=dropout_rate, dropout_rng=dropout_rng, row_offset=offsets[0],
            head_offset=offsets[1], total_heads=total_heads, tiles=tiles, platform=platform,
        )  # fmt: skip

    return run


def _splash_kernel(mask_fn: masks.MaskFn, platform: str):
    def run(q, k, v, q_meta, k_meta, bias, dropout_rng, offsets):
        del k_meta, bias, dropout_rng, offsets  # a segment mask; no bias, no dropout
        return splash.attention(
            q,
            k,
            v,
            mask_fn=mask_fn,
            segment_ids=q_meta["segment_ids"],
            platform=platform,
            window=q_meta.get("window"),
        )

    return run


def _per_device(kernel, q, k, v, q_meta, k_meta, bias, dropout_rng) -> jax.Array:
    """``kernel(q, k, v, q_meta, k_meta, bias, dropout_rng, (row offset, head offset))``
    under ``shard_map`` over the mesh axes of ``batch`` (and ``heads``) when the rules shard
    them and they divide; otherwise as is (GSPMD then handles any sharding)."""
    fields = [f for f in flash.META_FIELDS if f in q_meta]
    q_meta = {f: q_meta[f] for f in fields}
    k_meta = {f: k_meta[f] for f in fields}
    batch = sharding.mesh_axes("batch")
    if not batch or sharding.axes_size(batch) == 1 or q.shape[0] % sharding.axes_size(batch):
        return kernel(q, k, v, q_meta, k_meta, bias, dropout_rng, (0, 0))
    heads = sharding.mesh_axes("heads")
    heads = heads if heads and q.shape[2] % sharding.axes_size(heads) == 0 else None
    rows = PartitionSpec(batch)
    qkv = PartitionSpec(batch, None, heads, None)
    bias_spec = None
    if bias is not None:
        bias_spec = RelativeBias(
            PartitionSpec(None, heads),  # replicated over rows: its gradient is psum-med
            None if bias.scale is None else PartitionSpec(batch, heads, None),
            bias.num_buckets,
            bias.max_distance,
        )

    def per_device(q, k, v, q_meta, k_meta, bias, dropout_rng):
        row_offset = jax.lax.axis_index(batch) * q.shape[0]
        head_offset = 0 if heads is None else jax.lax.axis_index(heads) * q.shape[2]
        return kernel(q, k, v, q_meta, k_meta, bias, dropout_rng, (row_offset, head_offset))

    return jax.shard_map(
        per_device,
        mesh=jax.sharding.get_abstract_mesh(),
        in_specs=(qkv, qkv, qkv, rows, rows, bias_spec, PartitionSpec()),
        out_specs=qkv,
        check_vma=False,
    )(q, k, v, q_meta, k_meta, bias, dropout_rng)


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


class ProjectionParams(nn.Module):
    """One of Q/K/V's kernel ``[embed, heads, kv]`` and bias ``[heads, kv]``, created and
    initialised as ``nn.DenseGeneral`` creates them (the same names, values and logical axes),
    but returned rather than applied: self-attention applies all three in one matmul."""

    config: ModelConfig

    @nn.compact
    def __call__(self, in_features: int) -> tuple[jax.Array, jax.Array | None]:
        cfg = self.config
        shape = (in_features, cfg.num_heads, cfg.head_dim)
        normal = nn.initializers.normal(cfg.initializer_range)

        def kernel_init(rng, shape, dtype=jnp.float32):  # DenseGeneral draws it flat
            return normal(rng, (shape[0], shape[1] * shape[2]), dtype).reshape(shape)

        kernel = self.param(
            "kernel",
            nn.with_logical_partitioning(kernel_init, ("embed", "heads", "kv")),
            shape,
            jnp.float32,
        )
        if not cfg.biased:
            return kernel, None
        bias = self.param(
            "bias",
            nn.with_logical_partitioning(nn.initializers.zeros, ("heads", "kv")),
            shape[1:],
            jnp.float32,
        )
        return kernel, bias


def fused_qkv(
    x: jax.Array, params: list[tuple[jax.Array, jax.Array | None]], dtype: jnp.dtype
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Queries, keys and values ``[B, L, heads, kv]`` of ``x`` in one matmul: the three kernels
    stacked on a new axis (heads stay their own axis, so a head-sharded kernel stacks without
    moving), one GEMM forward and one per gradient instead of three, one residual saved."""
    kernel = jnp.stack([k for k, _ in params], axis=1).astype(dtype)  # [embed, 3, heads, kv]
    y = jax.lax.dot_general(x.astype(dtype), kernel, (((x.ndim - 1,), (0,)), ((), ())))
    if params[0][1] is not None:
        y = y + jnp.stack([b for _, b in params]).astype(dtype)
    y = sharding.constrain(y, ("batch", "length", None, "heads", "kv"))
    return y[:, :, 0], y[:, :, 1], y[:, :, 2]


class MultiHeadAttention(nn.Module):
    """Q/K/V/O projections around ``dot_product_attention`` (HF ``XLMRobertaAttention``);
    self-attention (one input for queries and keys) projects Q, K and V in one matmul.

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
        rotary: tuple[jax.Array, jax.Array] | None = None,
    ) -> jax.Array:
        """``rotary``: (positions from 0 ``[B, L]``, base) rotate queries and keys (ModernBERT)."""
        cfg = self.config
        init = nn.initializers.normal(cfg.initializer_range)

        def projection(name: str) -> nn.DenseGeneral:
            return nn.DenseGeneral(
                features=(cfg.num_heads, cfg.head_dim),
                use_bias=cfg.biased,
                dtype=cfg.compute_dtype,
                kernel_init=nn.with_logical_partitioning(init, ("embed", "heads", "kv")),
                bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("heads", "kv")),
                name=name,
            )

        heads = ("batch", "length", "heads", "kv")
        if inputs_q is inputs_kv:
            params = [
                ProjectionParams(cfg, name=name)(inputs_q.shape[-1])
                for name in ("query", "key", "value")
            ]
            q, k, v = (
                sharding.constrain(y, heads) for y in fused_qkv(inputs_q, params, cfg.compute_dtype)
            )
        else:
            q = sharding.constrain(projection("query")(inputs_q), heads)
            k = sharding.constrain(projection("key")(inputs_kv), heads)
            v = sharding.constrain(projection("value")(inputs_kv), heads)
        if rotary is not None:
            q, k = rotary_lib.rotate(q, *rotary), rotary_lib.rotate(k, *rotary)
        rate = cfg.attention_dropout_rate
        dropout_rng = None if deterministic or rate == 0.0 else self.make_rng("dropout")
        bias = None
        if self.relative and cfg.relative_position != "none":
            bias = self._relative_bias(q, relative_table)
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
            platform=cfg.kernel_platform,
            flash_tiles=cfg.flash_tiles,
        )
        return nn.DenseGeneral(
            features=cfg.hidden_size,
            axis=(-2, -1),
            use_bias=cfg.biased,
            dtype=cfg.compute_dtype,
            kernel_init=nn.with_logical_partitioning(init, ("heads", "kv", "embed")),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            name="out",
        )(out)

    def _relative_bias(self, q, table: jax.Array | None) -> RelativeBias:
        """d (bucketed), or XLM-E's gated r: per layer `u`, `v` `[heads, kv]` and scalar `w`."""
        cfg = self.config
        if table is None:  # not shared: this layer's own table
            table = relative_table_param(self, cfg)
        scale = None
        if cfg.relative_position == "gated":
            init = nn.initializers.normal(cfg.initializer_range)
            gate = nn.with_logical_partitioning(init, ("heads", "kv"))
            u = self.param("gate_u", gate, (cfg.num_heads, cfg.head_dim), jnp.float32)
            v = self.param("gate_v", gate, (cfg.num_heads, cfg.head_dim), jnp.float32)
            w = self.param(
                "gate_w", nn.with_logical_partitioning(nn.initializers.zeros, ()), (), jnp.float32
            )
            scale = relative_position.gate_scale(q, u, v, w)
        return RelativeBias(table, scale, cfg.num_buckets, cfg.max_distance)
