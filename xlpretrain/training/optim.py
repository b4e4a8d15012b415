"""AdamW with linear warm-up and linear decay, as every seed paper trains."""

from __future__ import annotations

import re

import jax
import optax

from xlpretrain.training.sections import OptimizerSettings


def weight_decay_mask(params) -> object:
    """True where weight decay applies: not on biases, nor on LayerNorm scales/offsets."""

    def decays(path, _) -> bool:
        names = [str(getattr(k, "key", k)) for k in path]
        return not (names[-1] in ("bias", "scale") or any("norm" in n.lower() for n in names))

    return jax.tree_util.tree_map_with_path(decays, params)


def parameter_path(path) -> str:
    """'encoder/layers/cross_attention/query/kernel' for a key path of the params tree; any
    key type alike (dict keys, attributes, sequence indices), so a whole train state and
    Orbax's metadata tree of it name a parameter the same ('params/encoder/…')."""
    return "/".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)


def trainable_mask(params, pattern: str):
    """True for parameters whose path matches `pattern` (a regular expression; "" = all)."""
    regex = re.compile(pattern)
    return jax.tree_util.tree_map_with_path(
        lambda path, _: bool(regex.search(parameter_path(path))), params
    )


def freeze(pattern: str) -> optax.GradientTransformation:
    """Zeroes the gradients or updates of parameters not matching `pattern`. Stateless, so
    stages that train different parameters (or all: `pattern` "") share one optimizer state."""
    frozen = lambda params: jax.tree.map(lambda t: not t, trainable_mask(params, pattern))  # noqa: E731
    return optax.masked(optax.set_to_zero(), frozen)


def adamw(
    learning_rate: float | optax.Schedule,
    *,
    b1: float,
    b2: float,
    eps: float,
    weight_decay: float,
    clip_norm: float,
    trainable: str = "",
) -> optax.GradientTransformation:
    """AdamW (no weight decay on biases and norms) after global-norm clipping (`clip_norm` 0:
    none), from plain numbers so that pre-training and fine-tuning share it. With `trainable`,
    frozen parameters get zero gradients before (no moment updates, no share of the clipping
    norm) and zero updates after (no weight decay): they stay exactly as they are."""
    decayed = optax.adamw(
        learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=weight_decay_mask
    )
    clip = optax.clip_by_global_norm(clip_norm) if clip_norm > 0 else None
    return optax.chain(*[t for t in (freeze(trainable), clip, decayed) if t], freeze(trainable))


def adamw_from(optim: OptimizerSettings, trainable: str = "") -> optax.GradientTransformation:
    """`adamw` on the schedule and with the numbers of a run's `optim` section, the section
    pre-training and fine-tuning plans both have."""
    return adamw(
        optim.learning_rates(),
        b1=optim.b1,
        b2=optim.b2,
        eps=optim.eps,
        weight_decay=optim.weight_decay,
        clip_norm=optim.clip_norm,
        trainable=trainable,
    )


def restart_moments(opt_state):
    """Adam's moments and bias-correction count back to zero; everything else (the
    learning-rate schedule's step) kept.

    Needed where a stage starts training parameters an earlier stage froze (VECO: the
    cross-attention alone, then everything): Adam's count is shared by all parameters, so
    without a restart the newly trainable ones meet a bias correction of ~1 on moments that
    hold one gradient, and their first update is up to (1 - b1) / sqrt(1 - b2) times a fresh
    run's (3.2× for b2 = 0.999).
    """

    def restart(node):
        if isinstance(node, optax.ScaleByAdamState):
            return node._replace(
                count=jax.numpy.zeros_like(node.count),
                mu=jax.tree.map(jax.numpy.zeros_like, node.mu),
                nu=jax.tree.map(jax.numpy.zeros_like, node.nu),
            )
        return node

    return jax.tree.map(
        restart, opt_state, is_leaf=lambda node: isinstance(node, optax.ScaleByAdamState)
    )
