"""The explicit-argument optimizer and schedule (`optim.adamw`, `optim.warmup_linear_decay`),
which fine-tuning builds from its own numbers, are exactly what pre-training's config-reading
`make_optimizer` and `learning_rate_schedule` build."""

import jax
import numpy as np
import optax

from xlpretrain.training import optim
from xlpretrain.training.config import default_config

PARAMS = {
    "dense": {"kernel": np.ones((3, 2), np.float32), "bias": np.zeros(2, np.float32)},
    "norm": {"scale": np.ones(2, np.float32)},
}


def test_schedule_from_numbers_is_the_config_schedule():
    cfg = default_config()
    cfg.optim.learning_rate, cfg.optim.warmup_steps, cfg.train.steps = 1e-3, 3, 10
    by_config = optim.learning_rate_schedule(cfg)
    explicit = optim.warmup_linear_decay(1e-3, warmup_steps=3, total_steps=10)
    assert [float(by_config(s)) for s in range(12)] == [float(explicit(s)) for s in range(12)]
    assert explicit(3) == np.float32(1e-3) and explicit(10) == 0.0


def test_adamw_from_numbers_updates_as_make_optimizer():
    cfg = default_config()
    cfg.train.steps, cfg.optim.warmup_steps = 10, 1
    numbers = {"b1": 0.8, "b2": 0.95, "eps": 1e-5, "weight_decay": 0.1, "clip_norm": 0.5}
    for key, value in numbers.items():
        cfg.optim[key] = value
    by_config = optim.make_optimizer(cfg, trainable="dense")
    explicit = optim.adamw(optim.learning_rate_schedule(cfg), **numbers, trainable="dense")

    rng = np.random.default_rng(0)
    params = {"config": PARAMS, "explicit": PARAMS}
    states = {"config": by_config.init(PARAMS), "explicit": explicit.init(PARAMS)}
    for _ in range(3):  # step 0 at learning rate 0; clipping is active (gradient norm ~3)
        grads = jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32), PARAMS)
        updates = {}
        for name, tx in (("config", by_config), ("explicit", explicit)):
            updates[name], states[name] = tx.update(grads, states[name], params[name])
            params[name] = optax.apply_updates(params[name], updates[name])
        for got, want in zip(
            jax.tree.leaves(updates["explicit"]), jax.tree.leaves(updates["config"]), strict=True
        ):
            np.testing.assert_array_equal(got, want)
    assert np.abs(updates["explicit"]["dense"]["kernel"]).max() > 0
    assert not np.any(updates["explicit"]["norm"]["scale"])  # frozen: not "dense"
