"""The optimizer section every task shares (`sections.OptimizerSettings`): the schedule of
pre-training's warm-up steps and of fine-tuning's warm-up fraction are one schedule, and
`adamw_from` of a run's section updates exactly as `optim.adamw` of the same numbers."""

import jax
import numpy as np
import optax
import pytest

from xlpretrain.training import optim
from xlpretrain.training.config import default_config
from xlpretrain.training.finetune_config import default_config as finetune_config
from xlpretrain.training.plan import resolve
from xlpretrain.training.sections import OptimizerSettings, warmup_linear_decay

PARAMS = {
    "dense": {"kernel": np.ones((3, 2), np.float32), "bias": np.zeros(2, np.float32)},
    "norm": {"scale": np.ones(2, np.float32)},
}


def test_warmup_steps_and_warmup_fraction_give_one_schedule():
    cfg = default_config()
    cfg.optim.learning_rate, cfg.optim.warmup_steps, cfg.train.steps = 1e-3, 3, 10
    tuning = finetune_config()
    tuning.optim.learning_rate, tuning.optim.warmup_fraction, tuning.train.steps = 1e-3, 0.3, 10
    pretraining = resolve(cfg).optim.learning_rates()
    finetuning = OptimizerSettings.of(tuning).learning_rates()
    explicit = warmup_linear_decay(1e-3, warmup_steps=3, total_steps=10)
    for schedule in (pretraining, finetuning):
        assert [float(schedule(s)) for s in range(12)] == [float(explicit(s)) for s in range(12)]
    hand = [0.0, 1e-3 / 3, 2e-3 / 3, 1e-3, *(1e-3 * (10 - s) / 7 for s in range(4, 11)), 0.0]
    np.testing.assert_allclose([float(explicit(s)) for s in range(12)], hand, rtol=1e-6)


def test_adamw_from_a_section_updates_as_adamw_from_numbers():
    cfg = default_config()
    cfg.train.steps, cfg.optim.warmup_steps = 10, 1
    numbers = {"b1": 0.8, "b2": 0.95, "eps": 1e-5, "weight_decay": 0.1, "clip_norm": 0.5}
    for key, value in numbers.items():
        cfg.optim[key] = value
    section = resolve(cfg).optim
    by_config = optim.adamw_from(section, trainable="dense")
    explicit = optim.adamw(
        warmup_linear_decay(section.learning_rate, 1, 10), **numbers, trainable="dense"
    )

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


@pytest.mark.parametrize(
    "shape, decaying",
    [("linear", [1.0, 0.75, 0.5, 0.25, 0.0]),
     ("1-sqrt", [1.0, 0.5, 1 - 0.5**0.5, 1 - 0.75**0.5, 0.0]),
     ("cosine", [1.0, (1 + 2**-0.5) / 2, 0.5, (1 - 2**-0.5) / 2, 0.0])],
)  # fmt: skip
def test_warmup_stable_decay_by_hand(shape, decaying):
    """mmBERT's trapezoid: 2 warm-up steps, the peak until the last 4 of 10 steps, then to 0
    along the shape; a longer run trains at the same rates until its own decay starts."""
    cfg = default_config()
    cfg.train.steps = 10
    cfg.optim.update(schedule="wsd", decay_steps=4, decay_shape=shape)
    cfg.optim.update(learning_rate=1.0, warmup_steps=2)
    rates = resolve(cfg).optim.learning_rates()
    expected = [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, *decaying, 0.0]
    np.testing.assert_allclose([float(rates(s)) for s in range(12)], expected, atol=1e-6)
    cfg.train.steps = 30
    longer = resolve(cfg).optim.learning_rates()
    assert [float(longer(s)) for s in range(27)] == [
        *(float(rates(s)) for s in range(6)),
        *[1.0] * 21,
    ]
