"""The yardstick of the census: XLM-R's MLM training step as a plain JAX script writes it.

Nothing of the framework is used: a dict of stacked layer weights under ``lax.scan``, post-LN
layers with one fused QKV matmul, ``jax.nn.dot_product_attention`` (XLA's or cuDNN's) on the
same segment mask, the LM head on the predicted positions only with full float32 logits and
``optax.softmax_cross_entropy_with_integer_labels``, hidden dropout with ``jax.random``, optax
AdamW after global-norm clipping, the state donated. It takes the framework's MMLM batch
fields (``input_ids``, ``positions``, ``segment_ids``, ``pred_*``), so both steps compile for
the same rows and the same predictions. It has no attention dropout (cuDNN has none), no
non-finite guard and no per-objective bookkeeping: what the framework adds is what the census
shows.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax

HEAD_SCOPE = "mlm_head"  # the LM head's ops, named for the census


@dataclasses.dataclass(frozen=True)
class ReferenceModel:
    layers: int
    hidden: int
    heads: int
    mlp: int
    vocab: int  # the softmax's classes
    table_rows: int  # word-embedding rows (the vocabulary padded as the framework pads it)
    max_positions: int
    dtype: str  # compute dtype; parameters are float32
    attention: str  # 'xla' or 'cudnn'
    dropout: float  # hidden dropout
    layer_norm_eps: float = 1e-5


def init_params(model: ReferenceModel, rng: jax.Array) -> dict:
    """Normal(0.02) matrices, zero biases, unit LayerNorm scales; layers stacked."""
    h, m, n = model.hidden, model.mlp, model.layers
    keys = iter(jax.random.split(rng, 8))

    def normal(*shape):
        return 0.02 * jax.random.normal(next(keys), shape, jnp.float32)

    def norm(*lead):
        return {"scale": jnp.ones((*lead, h)), "bias": jnp.zeros((*lead, h))}

    return {
        "word": normal(model.table_rows, h),
        "position": normal(model.max_positions, h),
        "token_type": normal(h),
        "embedding_norm": norm(),
        "layers": {
            "qkv": normal(n, h, 3 * h), "qkv_bias": jnp.zeros((n, 3 * h)),
            "out": normal(n, h, h), "out_bias": jnp.zeros((n, h)),
            "attention_norm": norm(n),
            "wi": normal(n, h, m), "wi_bias": jnp.zeros((n, m)),
            "wo": normal(n, m, h), "wo_bias": jnp.zeros((n, h)),
            "mlp_norm": norm(n),
        },
        "head": {"dense": normal(h, h), "dense_bias": jnp.zeros(h), "norm": norm(),
                 "bias": jnp.zeros(model.table_rows)},
    }  # fmt: skip


def _layer_norm(x, p, eps, dtype):
    x = x.astype(jnp.float32)
    mean = x.mean(-1, keepdims=True)
    var = jnp.square(x - mean).mean(-1, keepdims=True)
    return ((x - mean) * jax.lax.rsqrt(var + eps) * p["scale"] + p["bias"]).astype(dtype)


def _dropout(x, rate, rng):
    if rate == 0.0:
        return x
    keep = jax.random.bernoulli(rng, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)


def loss(model: ReferenceModel, params: dict, batch: dict, rng: jax.Array) -> jax.Array:
    """Mean cross-entropy over the weighted predictions."""
    dt, eps = jnp.dtype(model.dtype), model.layer_norm_eps
    rows, length = batch["input_ids"].shape
    d = model.hidden // model.heads
    x = params["word"][batch["input_ids"]] + params["position"][batch["positions"]]
    x = _layer_norm(x + params["token_type"], params["embedding_norm"], eps, dt)
    embed_rng, layer_rng = jax.random.split(rng) if model.dropout else (rng, rng)
    x = _dropout(x, model.dropout, embed_rng)
    segments = batch["segment_ids"]
    mask = (segments[:, None, :, None] == segments[:, None, None, :]) & (
        segments[:, None, None, :] > 0
    )

    def layer(x, inputs):
        p, key = inputs
        attention_rng, mlp_rng = jax.random.split(key) if model.dropout else (key, key)
        qkv = x @ p["qkv"].astype(dt) + p["qkv_bias"].astype(dt)
        q, k, v = jnp.split(qkv.reshape(rows, length, 3 * model.heads, d), 3, axis=2)
        a = jax.nn.dot_product_attention(q, k, v, mask=mask, implementation=model.attention)
        a = a.reshape(rows, length, model.hidden) @ p["out"].astype(dt) + p["out_bias"].astype(dt)
        x = _layer_norm(x + _dropout(a, model.dropout, attention_rng), p["attention_norm"], eps, dt)
        f = jax.nn.gelu(x @ p["wi"].astype(dt) + p["wi_bias"].astype(dt), approximate=False)
        f = f @ p["wo"].astype(dt) + p["wo_bias"].astype(dt)
        return _layer_norm(x + _dropout(f, model.dropout, mlp_rng), p["mlp_norm"], eps, dt), None

    # Without dropout no key is split, as a script without dropout has none.
    keys = jax.random.split(layer_rng, model.layers) if model.dropout else jnp.arange(model.layers)
    x, _ = jax.lax.scan(layer, x, (params["layers"], keys))
    with jax.named_scope(HEAD_SCOPE):
        return _head_loss(model, params, x, batch)


def _head_loss(model: ReferenceModel, params: dict, x: jax.Array, batch: dict) -> jax.Array:
    dt, eps = jnp.dtype(model.dtype), model.layer_norm_eps
    head = params["head"]
    h = jnp.take_along_axis(x, batch["pred_positions"][..., None], axis=1)
    h = jax.nn.gelu(h @ head["dense"].astype(dt) + head["dense_bias"].astype(dt), approximate=False)
    h = _layer_norm(h, head["norm"], eps, dt)
    logits = jnp.einsum(
        "bpe,ve->bpv", h, params["word"].astype(dt), preferred_element_type=jnp.float32
    )
    logits = (logits + head["bias"])[..., : model.vocab]
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, batch["pred_labels"])
    weights = batch["pred_weights"]
    return (nll * weights).sum() / jnp.maximum(weights.sum(), 1.0)


def optimizer(clip_norm: float, weight_decay: float) -> optax.GradientTransformation:
    """AdamW (decay on matrices only) after global-norm clipping; RoBERTa's numbers."""
    adamw = optax.adamw(
        1e-4, b1=0.9, b2=0.98, eps=1e-6, weight_decay=weight_decay,
        mask=lambda params: jax.tree.map(lambda p: p.ndim >= 2, params),
    )  # fmt: skip
    return optax.chain(optax.clip_by_global_norm(clip_norm), adamw) if clip_norm > 0 else adamw


def train_step(model: ReferenceModel, tx: optax.GradientTransformation):
    """``step(state, batch) -> (state, loss)``, with ``state = (params, opt_state, rng, step)``."""

    def step(state, batch):
        params, opt_state, rng, index = state
        value, grads = jax.value_and_grad(lambda p: loss(model, p, batch, rng))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        rng = jax.random.fold_in(rng, index) if model.dropout else rng
        return (params, opt_state, rng, index + 1), value

    return step


def abstract_state(model: ReferenceModel, tx: optax.GradientTransformation):
    """The step's state as shapes (nothing allocated)."""

    def init(rng):
        params = init_params(model, rng)
        return params, tx.init(params), rng, jnp.zeros((), jnp.int32)

    return jax.eval_shape(init, jax.random.key(0))
