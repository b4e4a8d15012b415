"""AdamW with linear warm-up and linear decay, as every seed paper trains."""

from __future__ import annotations

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


def make_optimizer(cfg: ml_collections.ConfigDict) -> optax.GradientTransformation:
    adamw = optax.adamw(
        learning_rate_schedule(cfg),
        b1=cfg.optim.b1,
        b2=cfg.optim.b2,
        eps=cfg.optim.eps,
        weight_decay=cfg.optim.weight_decay,
        mask=weight_decay_mask,
    )
    if cfg.optim.clip_norm > 0:
        return optax.chain(optax.clip_by_global_norm(cfg.optim.clip_norm), adamw)
    return adamw
