"""The optimizer section every task shares (`sections.OptimizerSettings`): the schedule of
pre-training's warm-up steps and of fine-tuning's warm-up fraction are one schedule, and
`adamw_from` of a run's section updates exactly as `optim.adamw` of the same numbers."""

import re

import jax
import numpy as np
import optax
import pytest

from tests.test_plan import shipped_config
from xlpretrain.core.errors import ConfigError
from xlpretrain.finetune.plan import resolve as resolve_finetuning
from xlpretrain.finetune.schema import default_config as finetune_config
from xlpretrain.training import optim
from xlpretrain.training.config import default_config
from xlpretrain.training.plan import resolve
from xlpretrain.training.sections import warmup_linear_decay

PARAMS = {
    "dense": {"kernel": np.ones((3, 2), np.float32), "bias": np.zeros(2, np.float32)},
    "norm": {"scale": np.ones(2, np.float32)},
}


def test_warmup_steps_and_warmup_fraction_give_one_schedule():
    cfg = default_config()
    cfg.optim.learning_rate, cfg.optim.warmup_steps, cfg.train.steps = 1e-3, 3, 10
    tuning = finetune_config()
    tuning.init.path, tuning.data.dir, tuning.tasks = "model", "pairs", "pairs"
    tuning.pairs.learning_rate, tuning.pairs.warmup_fraction, tuning.train.steps = 1e-3, 0.3, 10
    pretraining = resolve(cfg).optim.learning_rates()
    finetuning = resolve_finetuning(tuning).task_plan("pairs", 100).optim.learning_rates()
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


def wsd(steps: int, warmup: int, **decay) -> object:
    cfg = default_config()
    cfg.train.steps = steps
    cfg.optim.update(schedule="wsd", learning_rate=1.0, warmup_steps=warmup, **decay)
    return cfg


@pytest.mark.parametrize(
    "decay, message",
    [({"decay_steps": 9}, "'optim.decay_steps': 9, but train.steps=10 leave 8 after "
      "optim.warmup_steps=2: set a decay of at most 8 steps, or optim.decay_fraction"),
     ({"decay_fraction": 0.9}, "'optim.decay_fraction': 0.9 of train.steps=10 is 9 steps, "
      "but train.steps=10 leave 8"),
     ({"decay_steps": 3, "decay_fraction": 0.3}, "'optim.decay_fraction': 0.3 and "
      "optim.decay_steps=3 both give the decay")],
)  # fmt: skip
def test_a_decay_longer_than_the_steps_after_warm_up_is_refused(decay, message):
    """Squeezed into the 8 steps warm-up leaves, a 9-step decay would fall faster than asked."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        resolve(wsd(10, 2, **decay))


@pytest.mark.parametrize("shape", ["linear", "cosine", "1-sqrt"])
def test_a_decay_of_every_step_after_warm_up_falls_to_0_and_no_lower(shape):
    """The longest decay that fits: from the peak straight after warm-up, never rising, never
    negative, 0 at train.steps and after."""
    rates = resolve(wsd(10, 2, decay_steps=8, decay_shape=shape)).optim.learning_rates()
    values = np.array([float(rates(s)) for s in range(14)])
    np.testing.assert_allclose(values[:3], [0.0, 0.5, 1.0], atol=1e-6)
    assert np.all(np.diff(values[2:]) <= 0) and np.all(values[2:10] > 0), values
    assert np.all(values >= 0) and not np.any(values[10:]), values


@pytest.mark.parametrize("steps", [3, 4, 20, 30, 31, 45, 300, 600])
def test_mmbert_decays_in_its_decay_phase_at_any_train_steps(steps):
    """configs/mmbert.py:tiny gives its decay as the last 1/30 of the run, so a shorter run (the
    docs train 4 steps) starts, and the learning rate decays where data.anneal's decay phase
    begins; a run no longer than its 30 warm-up steps only warms up."""
    cfg = shipped_config("mmbert.py", "tiny")
    cfg.train.steps = steps
    plan = resolve(cfg)
    rates, decay = plan.optim.learning_rates(), plan.optim.decay_steps
    if steps <= 30:
        assert decay == round(steps / 30)  # a warm-up of `steps`, never reaching the decay
        assert float(rates(steps - 1)) == pytest.approx(2e-3 * (steps - 1) / steps)
        return
    phase = min(s for s in range(steps + 1) if plan.anneal.value("mono_mask_rate", s) == 0.05)
    assert steps - decay == phase and (steps != 300 or decay == 10)
    peak = float(rates(phase))  # where the decay starts (optax counts steps from 0)
    assert peak == pytest.approx(2e-3) and float(rates(phase + 1)) < peak
    assert float(rates(steps)) == 0.0
