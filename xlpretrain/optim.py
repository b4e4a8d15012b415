"""AdamW with linear warm-up and linear decay, as every seed paper trains."""

from __future__ import annotations

import re

import jax
import ml_collections
import optax


def learning_rate_schedule(cfg: ml_collections.ConfigDict) -> optax.Schedule:
    """0 → lr over `warmup_steps`, then linearly to 0 at `train.steps`."""
    warmup = min(cfg.optim.warmup_steps, cfg.train.steps)
    return optax.join_schedules(
        [
            optax.linear_schedule(0.0, cfg.optim.learning_rate, max(warmup, 1)),
            optax.linear_schedule(cfg.optim.learning_rate, 0.0, max(cfg.train.steps - warmup, 1)),
        ],
        boundaries=[warmup],
    )


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


def make_optimizer(
    cfg: ml_collections.ConfigDict, trainable: str = ""
) -> optax.GradientTransformation:
    """AdamW after global-norm clipping. With `trainable`, frozen parameters get zero gradients
    before (no moment updates, no share of the clipping norm) and zero updates after (no weight
    decay): they stay exactly as they are."""
    adamw = optax.adamw(
        learning_rate_schedule(cfg),
        b1=cfg.optim.b1,
        b2=cfg.optim.b2,
        eps=cfg.optim.eps,
        weight_decay=cfg.optim.weight_decay,
        mask=weight_decay_mask,
    )
    clip = optax.clip_by_global_norm(cfg.optim.clip_norm) if cfg.optim.clip_norm > 0 else None
    return optax.chain(*[t for t in (freeze(trainable), clip, adamw) if t], freeze(trainable))


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
