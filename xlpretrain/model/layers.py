"""Building blocks of the post-LN XLM-R encoder: embeddings and one Transformer layer.

Every parameter is created through ``nn.with_logical_partitioning`` so ``sharding.py`` can map
its logical axes (``embed``, ``mlp``, ``heads``, ``kv``, ``vocab``, ``positions``,
``languages``; ``layers`` is added by the scan) to mesh axes.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from xlpretrain import masks
from xlpretrain.model.attention import MultiHeadAttention
from xlpretrain.model.config import ModelConfig
from xlpretrain.parallel import sharding


def dense(config: ModelConfig, features: int, axes: tuple[str, str], name: str) -> nn.Dense:
    """A dense layer initialised like HF (normal(initializer_range), zero bias), biased as the
    architecture is (`ModelConfig.biased`)."""
    init = nn.initializers.normal(config.initializer_range)
    return nn.Dense(
        features,
        use_bias=config.biased,
        dtype=config.compute_dtype,
        kernel_init=nn.with_logical_partitioning(init, axes),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, axes[1:]),
        name=name,
    )


def layer_norm(config: ModelConfig, name: str) -> nn.LayerNorm:
    """LayerNorm with float32 statistics whose output is cast to the compute dtype (with an
    offset where the architecture has biases)."""
    return nn.LayerNorm(
        epsilon=config.layer_norm_eps,
        use_bias=config.biased,
        dtype=config.compute_dtype,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
        name=name,
    )


def gelu(x: jax.Array) -> jax.Array:
    """Exact (erf) GELU, as HF XLM-R and fairseq use; the tanh approximation drifts."""
    return jax.nn.gelu(x, approximate=False)


class Embeddings(nn.Module):
    """word + position (+ token type) (+ language) → LayerNorm → dropout; with rotary
    positions (ModernBERT's) word (+ language) → LayerNorm → dropout.

    Lookups and the sum run in float32 (they are O(L·H), precision is free), the LayerNorm
    output is in the compute dtype. Token type 0 (``token_type_rows`` rows: XLM-R's one, BERT's
    two) is added to every token, so HF checkpoints import exactly; a model with two rows adds
    the batch's ``token_types`` instead where it has them (BERT's pair inputs: 1 on the second
    segment, as HF's ``token_type_ids``). A model with one row has no other type to add.
    """

    config: ModelConfig

    def setup(self) -> None:
        cfg = self.config
        init = nn.initializers.normal(cfg.initializer_range)

        def table(rows: int, axis: str | None, name: str) -> nn.Embed:
            return nn.Embed(
                rows,
                cfg.hidden_size,
                embedding_init=nn.with_logical_partitioning(init, (axis, "embed")),
                name=name,
            )

        self.word_embeddings = table(cfg.padded_vocab_size, "vocab", "word_embeddings")
        if cfg.absolute_positions:
            self.position_embeddings = table(cfg.max_positions, "positions", "position_embeddings")
        if cfg.token_type_rows:
            self.token_type_embeddings = table(cfg.token_type_rows, None, "token_type_embeddings")
        if cfg.num_languages > 0:
            self.language_embeddings = table(cfg.num_languages, "languages", "language_embeddings")
        self.layer_norm = layer_norm(cfg, "layer_norm")
        self.dropout = nn.Dropout(cfg.dropout_rate)

    def __call__(
        self,
        input_ids: jax.Array,
        positions: jax.Array,
        lang_ids: jax.Array | None,
        deterministic: bool,
        token_types: jax.Array | None = None,
    ) -> jax.Array:
        x = self.word_embeddings(input_ids)
        if self.config.absolute_positions:
            x = x + self.position_embeddings(position_rows(self.config, positions))
        if self.config.token_type_rows > 1 and token_types is not None:
            x = x + self.token_type_embeddings(token_types)
        elif self.config.token_type_rows:
            x = x + self.token_type_embeddings.embedding[0]
        if self.config.num_languages > 0:
            if lang_ids is None:
                raise ValueError("model.num_languages > 0 but no lang_ids were given")
            x = x + self.language_embeddings(lang_ids)
        return self.dropout(self.layer_norm(x), deterministic=deterministic)


def position_rows(config: ModelConfig, positions: jax.Array) -> jax.Array:
    """The batch's positions `[B, L]` (a unit's first token at ``pad_token_id + 1``, as the
    data numbers them; padding at ``pad_token_id``) as rows of the model's table, the first at
    ``positions_from``. Padding takes XLM-R's padding row where the table has one before its
    first; where it has none (BERT) padding takes its place in the row, as HF's BERT numbers
    every token (padding's state, which a loss over the padded window reads, is then HF's)."""
    rows = positions - (config.pad_token_id + 1) + config.positions_from
    if config.positions_from > 0:
        return jnp.maximum(rows, 0)
    place = jax.lax.broadcasted_iota(positions.dtype, positions.shape, positions.ndim - 1)
    return jnp.where(positions <= config.pad_token_id, place, rows)


class Mlp(nn.Module):
    """FFN ``wo(gelu(wi(x)))`` (HF ``intermediate.dense`` / ``output.dense``)."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cfg = self.config
        h = gelu(dense(cfg, cfg.mlp_dim, ("embed", "mlp"), "wi")(x))
        h = sharding.constrain(h, ("batch", "length", "mlp"))
        return dense(cfg, cfg.hidden_size, ("mlp", "embed"), "wo")(h)


class StackedLayer(nn.Module):
    """The attributes the ``Encoder`` builds each of its layers with, whatever their kind.

    ``mask_fn``, ``cross_mask_fn`` and ``deterministic`` are attributes rather than call
    arguments so that the lifted ``nn.scan``/``nn.remat`` only ever see arrays.
    """

    config: ModelConfig
    mask_fn: masks.MaskFn
    deterministic: bool
    cross_mask_fn: masks.MaskFn | None = None


class EncoderLayer(StackedLayer):
    """Post-LN layer: LN(x + drop(attn(x))), [LN(x + drop(cross_attn(x, memory)))],
    then LN(x + drop(wo(gelu(wi(x))))).

    The cross-attention sub-layer (VECO's plug-in; own Q/K/V/O and LayerNorm under
    ``cross_attention`` / ``cross_attention_norm``) runs only when a ``memory`` is given: one
    state per token of the same row (VECO: the plain stream's last layer), of which
    ``cross_mask_fn`` decides what each token reads. Without memory the layer is exactly the
    plain encoder layer — the module is "plugged out". Returns ``(hidden, None)``, the
    carry/output pair ``nn.scan`` expects.
    """

    @nn.compact
    def __call__(
        self,
        x: jax.Array,
        meta: masks.Meta,
        memory: jax.Array | None = None,
        relative_table: jax.Array | None = None,
    ) -> tuple[jax.Array, None]:
        cfg = self.config
        h = MultiHeadAttention(cfg, relative=True, name="attention")(
            x,
            x,
            mask_fn=self.mask_fn,
            q_meta=meta,
            k_meta=meta,
            deterministic=self.deterministic,
            relative_table=relative_table,
        )
        h = nn.Dropout(cfg.dropout_rate)(h, deterministic=self.deterministic)
        x = layer_norm(cfg, "attention_norm")(x + h)
        if memory is not None:
            h = MultiHeadAttention(cfg, name="cross_attention")(
                x,
                memory.astype(x.dtype),
                mask_fn=self.cross_mask_fn,
                q_meta=meta,
                k_meta=meta,
                deterministic=self.deterministic,
            )
            h = nn.Dropout(cfg.dropout_rate)(h, deterministic=self.deterministic)
            x = layer_norm(cfg, "cross_attention_norm")(x + h)
        h = Mlp(cfg, name="mlp")(x)
        h = nn.Dropout(cfg.dropout_rate)(h, deterministic=self.deterministic)
        x = layer_norm(cfg, "mlp_norm")(x + h)
        return sharding.constrain(x, ("batch", "length", "activation_embed")), None
