"""The XLM-R-compatible masked language model: embeddings → layer stack → tied LM head.

Parameter tree (``[...]`` = shape, ``(...)`` = logical axes; with ``scan_layers`` every leaf
under ``encoder/layers`` has an extra leading ``[num_layers]`` axis named ``layers``, without
it the layers are ``encoder/layers_0 … layers_{N-1}``)::

    embeddings/
      word_embeddings/embedding        [vocab, H]          (vocab, embed)
      position_embeddings/embedding    [max_positions, H]  (positions, embed)
      token_type_embeddings/embedding  [1, H]              (None, embed)
      language_embeddings/embedding    [num_languages, H]  (languages, embed)  only if > 0
      layer_norm/{scale,bias}          [H]                 (embed,)
    encoder/layers/
      attention/{query,key,value}/kernel [H, heads, kv]    (embed, heads, kv)
      attention/{query,key,value}/bias   [heads, kv]       (heads, kv)
      attention/out/kernel             [heads, kv, H]      (heads, kv, embed)
      attention/out/bias               [H]                 (embed,)
      attention_norm/{scale,bias}      [H]                 (embed,)
      mlp/wi/kernel [H, mlp_dim] (embed, mlp);  mlp/wi/bias [mlp_dim] (mlp,)
      mlp/wo/kernel [mlp_dim, H] (mlp, embed);  mlp/wo/bias [H] (embed,)
      mlp_norm/{scale,bias}            [H]                 (embed,)
      cross_attention/...              as attention/...    only with cross_attention (VECO)
      cross_attention_norm/{scale,bias} [H]                (embed,)  only with cross_attention
    lm_head/
      dense/kernel [H, H] (embed, None);  dense/bias [H] (None,)
      layer_norm/{scale,bias}          [H]                 (embed,)
      bias                             [vocab]             (vocab,)

HF ``XLMRobertaForMaskedLM`` names map one to one: ``roberta.embeddings.*``,
``roberta.encoder.layer.i.attention.self.{query,key,value}`` (kernel = weightᵀ reshaped to
``[H, heads, kv]``), ``attention.output.dense`` → ``out``, ``attention.output.LayerNorm`` →
``attention_norm``, ``intermediate.dense`` → ``mlp/wi``, ``output.dense`` → ``mlp/wo``,
``output.LayerNorm`` → ``mlp_norm``, ``lm_head.{dense,layer_norm,bias}``.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from xlpretrain import masks
from xlpretrain.model.attention import relative_table_param
from xlpretrain.model.config import ModelConfig
from xlpretrain.model.heads import LMHead, cross_entropy_per_device
from xlpretrain.model.layers import Embeddings, EncoderLayer, layer_norm
from xlpretrain.model.modern import ModernLayer, layer_schedule

# 'dots' keeps the weight matmuls' outputs and recomputes the rest (attention scores, GELU,
# LayerNorm), the usual memory/compute trade-off for Transformer training.
_REMAT_POLICIES = {
    "full": None,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


@functools.cache
def _emitting(layer: type[nn.Module]) -> type[nn.Module]:
    """``layer`` whose output is its state as well as its carry, so ``nn.scan`` stacks every
    layer's state (the plain layer outputs None: training keeps no stack alive)."""

    class Emitting(layer):
        def __call__(self, *args) -> tuple[jax.Array, jax.Array]:
            x, _ = super().__call__(*args)
            return x, x

    return Emitting


class Encoder(nn.Module):
    """``num_layers`` layers — XLM-R's post-LN ones, or ModernBERT's pre-norm ones and the
    final norm (``model.modern``) — under ``nn.scan`` (stacked params, one compiled body) or
    unrolled, optionally rematerialised.

    Returns the last state ``[B, L, H]``, or with ``all_layers`` every state ``[num_layers +
    1, B, L, H]`` as Hugging Face's ``output_hidden_states`` gives them: the input (the
    embeddings' output) first, then each layer's output, ModernBERT's final norm on the last
    only."""

    config: ModelConfig

    @nn.compact
    def __call__(
        self,
        x: jax.Array,
        meta: masks.Meta,
        *,
        mask_fn: masks.MaskFn,
        deterministic: bool,
        memory: jax.Array | None = None,
        cross_mask_fn: masks.MaskFn | None = None,
        all_layers: bool = False,
    ) -> jax.Array:
        cfg = self.config
        modern = cfg.layer_type == "pre_ln"
        layer = ModernLayer if modern else EncoderLayer
        if all_layers:
            layer = _emitting(layer)
        if cfg.remat != "none":
            # prevent_cse is unnecessary inside scan and only blocks optimisations there.
            layer = nn.remat(
                layer, policy=_REMAT_POLICIES[cfg.remat], prevent_cse=not cfg.scan_layers
            )
        # Each layer's last input: ModernBERT's slice of the layer schedule (window, rotary
        # base), scanned alongside its parameters; XLM-R's shared relative-position table (one d
        # for all layers; gates per layer), or None, the same for every layer.
        if modern:
            last, last_axis = layer_schedule(cfg), 0
        else:
            last, last_axis = None, nn.broadcast
            if cfg.relative_position != "none" and cfg.share_relative_table:
                last = relative_table_param(self, cfg)
        embedded = x
        if cfg.scan_layers:
            stack = nn.scan(
                layer,
                variable_axes={"params": 0},
                split_rngs={"params": True, "dropout": True},
                in_axes=(nn.broadcast, nn.broadcast, last_axis),
                length=cfg.num_layers,
                metadata_params={nn.PARTITION_NAME: "layers"},
            )
            # ``states``: every layer's output, stacked, with ``all_layers``; else None.
            x, states = stack(cfg, mask_fn, deterministic, cross_mask_fn, name="layers")(
                x, meta, memory, last
            )
        else:
            states = []
            for i in range(cfg.num_layers):
                mine = {key: value[i] for key, value in last.items()} if modern else last
                x, _ = layer(cfg, mask_fn, deterministic, cross_mask_fn, name=f"layers_{i}")(
                    x, meta, memory, mine
                )
                states.append(x)
        if modern:
            x = layer_norm(cfg, "final_norm")(x)
        if not all_layers:
            return x
        return jnp.concatenate([embedded[None], jnp.asarray(states)[:-1], x[None]])


class MaskedLM(nn.Module):
    """XLM-R (fairseq RoBERTa) encoder with its tied MLM head.

    Submodules are built in ``setup`` so ``__call__`` and ``mlm_logits`` share them. Hidden
    states are in ``config.dtype``; params, softmax, LayerNorm statistics and logits are
    float32.
    """

    config: ModelConfig

    def setup(self) -> None:
        self.embeddings = Embeddings(self.config)
        self.encoder = Encoder(self.config)
        self.lm_head = LMHead(self.config)

    def __call__(
        self,
        input_ids: jax.Array,
        positions: jax.Array,
        *,
        mask_fn: masks.MaskFn,
        mask_meta: masks.Meta,
        lang_ids: jax.Array | None = None,
        deterministic: bool = True,
        memory: jax.Array | None = None,
        cross_mask_fn: masks.MaskFn | None = None,
        token_types: jax.Array | None = None,
        all_layers: bool = False,
    ) -> jax.Array:
        """Final hidden states ``[B, L, H]``; with ``all_layers`` every layer's, ``[num_layers +
        1, B, L, H]``, the embeddings' output first (``Encoder``).

        With ``memory`` (``[B, L, H]``, one state per token of the row) every layer also runs
        its cross-attention sub-layer, reading the memory under ``cross_mask_fn`` (VECO's
        s-stream); without it, the model is the plain encoder.

        ``positions`` come from the batch, already offset (first real token 2, padding 1).
        ``mask_meta`` holds the ``[B, L]`` metadata ``mask_fn`` reads. ``lang_ids`` is
        required when ``num_languages > 0`` and ignored otherwise. ``token_types`` ``[B, L]``
        (0 or 1) are read by a model with two token-type rows (BERT's); without them every
        token is type 0.
        """
        if memory is not None and not self.config.cross_attention:
            raise ValueError("a cross-attention memory was given but model.cross_attention=False")
        x = self.embeddings(input_ids, positions, lang_ids, deterministic, token_types)
        return self.encoder(
            x,
            mask_meta,
            mask_fn=mask_fn,
            deterministic=deterministic,
            memory=memory,
            cross_mask_fn=cross_mask_fn,
            all_layers=all_layers,
        )

    def mlm_logits(self, hidden_selected: jax.Array) -> jax.Array:
        """float32 logits ``[..., vocab]`` for already-gathered hidden states, so callers
        never build a ``[all tokens, vocab]`` tensor."""
        return self.lm_head(hidden_selected, self.embeddings.word_embeddings.embedding)

    def mlm_nll(self, hidden_selected: jax.Array, labels: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(negative log-likelihood, correct) of integer ``labels`` ``[...]`` at gathered
        hidden states ``[..., H]``, the vocabulary projection in chunks of
        ``config.loss_chunk`` predictions, per device under a mesh
        (``heads.cross_entropy_per_device``)."""
        h = self.lm_head.transform(hidden_selected)
        nll, correct = cross_entropy_per_device(
            h.reshape(-1, h.shape[-1]),
            self.embeddings.word_embeddings.embedding,
            self.lm_head.bias,
            labels.reshape(-1),
            self.config.loss_chunk,
            self.config.vocab_size,
        )
        return nll.reshape(labels.shape), correct.reshape(labels.shape)


def _forward_and_head(
    model: MaskedLM, input_ids: jax.Array, positions: jax.Array, **kwargs
) -> jax.Array:
    return model.mlm_logits(model(input_ids, positions, **kwargs))


def init_inputs(
    config: ModelConfig, batch_shape: tuple[int, int]
) -> tuple[jax.Array, jax.Array, dict]:
    """``(input_ids, positions, keyword arguments)`` to trace a model's ``init`` with: zero ids
    at the first positions under the MMLM mask, with language ids where the model has a table."""
    ids = jnp.zeros(batch_shape, jnp.int32)
    positions = ids + config.pad_token_id + 1 + jnp.arange(batch_shape[1])
    kwargs = {
        "mask_fn": masks.mmlm,
        "mask_meta": {"segment_ids": ids + 1, "positions": positions},
        "lang_ids": ids if config.num_languages > 0 else None,
    }
    return ids, positions, kwargs


@functools.partial(jax.jit, static_argnames=("config", "batch_shape"))
def init_params(config: ModelConfig, rng: jax.Array, batch_shape: tuple[int, int] = (1, 8)) -> dict:
    """Initialises all parameters, including the LM head.

    Leaves are boxed ``nn.LogicallyPartitioned``: ``nn.get_partition_spec(params)`` gives
    their logical axes and ``nn.unbox(params)`` the plain arrays ``apply`` and optimisers
    use. Jitted (eager init is slow); works under ``jax.eval_shape``, so shardings can be
    derived before allocating.
    """
    ids, positions, kwargs = init_inputs(config, batch_shape)
    memory = None
    if config.cross_attention:  # create the plug-in's parameters too
        memory = jnp.zeros((*batch_shape, config.hidden_size), config.compute_dtype)
    variables = MaskedLM(config).init(
        {"params": rng},
        ids,
        positions,
        **kwargs,
        memory=memory,
        cross_mask_fn=masks.mmlm,
        method=_forward_and_head,
    )
    return variables["params"]
