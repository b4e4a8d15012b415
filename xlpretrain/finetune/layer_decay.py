"""Layer-wise learning-rate decay (ERNIE-M, ELECTRA): the head learns at the full rate, encoder
layer i (0-based) at `layer_decay ** (num_layers - i)`, the embeddings at
`layer_decay ** (num_layers + 1)`, so the lower, more general layers move least. Applied after
pre-training's clipped AdamW as a per-parameter factor on its updates."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from xlpretrain.training.optim import adamw_from, parameter_path
from xlpretrain.training.sections import OptimizerSettings

Params = Any


def layer_decay_factors(params: Params, num_layers: int, decay: float) -> Params:
    """Learning-rate multipliers per parameter, shaped to broadcast against it.

    Outside `backbone/`: 1. `backbone/encoder/layers/*` (stacked, layer on axis 0): layer i
    gets `decay ** (num_layers - i)`. The rest of the backbone (embeddings, tables shared by all
    layers): `decay ** (num_layers + 1)`.
    """
    per_layer = decay ** (num_layers - np.arange(num_layers, dtype=np.float64))

    def factor(path, leaf) -> np.ndarray:
        name = parameter_path(path)
        if not name.startswith("backbone/"):
            return np.float32(1.0)
        if name.startswith("backbone/encoder/layers/"):
            return per_layer.reshape((-1,) + (1,) * (leaf.ndim - 1)).astype(np.float32)
        return np.float32(decay ** (num_layers + 1))

    return jax.tree_util.tree_map_with_path(factor, params)


def scale_updates(factors: Params) -> optax.GradientTransformation:
    """Multiplies each update by its factor. After AdamW (update −lr·(m̂/√v̂ + wd·p)) this is
    exactly a per-parameter learning rate, including per layer of a stacked array."""
    return optax.stateless(lambda updates, _: jax.tree.map(jnp.multiply, updates, factors))


def make_finetune_optimizer(
    optim: OptimizerSettings, params: Params, num_layers: int
) -> optax.GradientTransformation:
    """Pre-training's clipped AdamW on its schedule, then the layer-wise decay. `params` may be
    abstract: only paths and ranks are read."""
    factors = layer_decay_factors(params, num_layers, optim.layer_decay)
    return optax.chain(adamw_from(optim), scale_updates(factors))
