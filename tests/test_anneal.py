"""`data.anneal`: data settings as piecewise-linear functions of the step, checked at
validation, logged with each step, in force in the rows of exactly their step, and resumed
exactly in the middle of a schedule (the language shares and masked shares of many rows:
tests/test_data_pipeline.py::test_alpha_and_mask_rates_anneal_with_the_step)."""

import jax
import numpy as np
import pytest

from tests.tiny import workdir_at_step
from xlpretrain.data.corpora import corpus as corpus_lib
from xlpretrain.data.pretraining.anneal import Anneal
from xlpretrain.data.tokenizer import Tokenizer
from xlpretrain.training import trainer as trainer_lib
from xlpretrain.training.config import ConfigError
from xlpretrain.training.metrics import read_metrics
from xlpretrain.training.plan import resolve

MMBERT = (  # mmBERT's recipe in one run: mask 30% → 15% → 5%, α 0.7 → 0.5 → 0.3
    {"step": 0, "mono_alpha": 0.7, "mono_mask_rate": 0.3},
    {"step": 0.5, "mono_alpha": 0.5, "mono_mask_rate": 0.15},
    {"step": 100, "mono_alpha": 0.3, "mono_mask_rate": 0.05},
)


def test_points_are_joined_linearly_and_held_outside():
    anneal = Anneal.from_config(MMBERT, total_steps=100)
    assert anneal.points["mono_alpha"] == ((0, 50, 100), (0.7, 0.5, 0.3))
    assert [anneal.value("mono_alpha", s) for s in (0, 25, 50, 75, 100, 500)] == pytest.approx(
        [0.7, 0.6, 0.5, 0.4, 0.3, 0.3]
    )
    assert anneal.value("mono_mask_rate", 75) == pytest.approx(0.1)
    assert anneal.maximum("mono_mask_rate") == 0.3 and "parallel_alpha" not in anneal
    assert anneal.at(25) == pytest.approx({"data/mono_alpha": 0.6, "data/mono_mask_rate": 0.225})
    assert anneal.settled().at(0) == pytest.approx(anneal.at(100))
    joins = Anneal.from_config(
        ({"step": 10, "mono_languages": 60}, {"step": 20, "mono_languages": 110}), 100
    )
    assert [joins.value("mono_languages", s) for s in (0, 10, 19, 20, 99)] == [60, 60, 60, 110, 110]


def test_the_highest_value_of_a_span_of_steps():
    """A stage's prediction slots are sized by the highest mask rate of its steps: at its ends
    or at a point inside; a jump at its first step counts from its later value."""
    rising = Anneal.from_config(
        (
            {"step": 0, "mono_mask_rate": 0.1},
            {"step": 40, "mono_mask_rate": 0.3},
            {"step": 60, "mono_mask_rate": 0.2},
            {"step": 60, "mono_mask_rate": 0.05},
        ),
        100,
    )
    assert rising.maximum("mono_mask_rate", 0, 20) == pytest.approx(0.2)  # its last step
    assert rising.maximum("mono_mask_rate", 0, 59) == pytest.approx(0.3)  # a point inside
    assert rising.maximum("mono_mask_rate", 60, 100) == pytest.approx(0.05)  # after the jump
    assert rising.maximum("mono_mask_rate") == pytest.approx(0.3)
    falling = Anneal.from_config(MMBERT, total_steps=100)
    assert falling.maximum("mono_mask_rate", 50, 100) == pytest.approx(0.15)  # its first step


@pytest.mark.parametrize(
    "points, message",
    [
        (({"step": 0, "mono_alfa": 0.5},), "unknown keys \\['mono_alfa'\\]"),
        (({"step": 10, "mono_alpha": 0.5}, {"step": 5, "mono_alpha": 0.3}), "before the previous"),
        (({"step": 0, "mono_mask_rate": 1.5},), "mono_mask_rate=1.5 must be in \\(0, 1\\]"),
        (({"mono_alpha": 0.5},), "point 0 has no 'step'"),
        (({"step": 0},), "gives no setting"),
        (({"step": -3, "mono_alpha": 0.5},), "must be a step >= 0 or a fraction"),
        (({"step": 0, "mono_languages": 2.5},), "mono_languages=2.5 must be an int >= 1"),
    ],
)
def test_a_bad_schedule_is_a_config_error_naming_the_point(udhr_run_config, points, message):
    with pytest.raises(ConfigError, match=f"config key 'data.anneal': .*{message}"):
        resolve(udhr_run_config(data__anneal=points))


# Every setting jumps between logged steps 4 and 5: a schedule read a step early or late
# builds the rows of one of those steps with the other's settings.
JUMP = (
    {"step": 4, "mono_mask_rate": 0.05, "parallel_mask_rate": 0.6, "mono_languages": 1},
    {"step": 5, "mono_mask_rate": 0.6, "parallel_mask_rate": 0.05, "mono_languages": 528},
)


def test_the_rows_of_a_step_have_that_steps_settings(udhr_run_config):
    """Each row of logged step k (dataset index k - 1) predicts exactly
    max(1, round(rate · n)) of its n maskable tokens at the schedule's rate for step k, and
    draws its language from the largest one alone up to step 4, from all 528 from step 5."""
    cfg = udhr_run_config(data__anneal=JUMP)
    plan = resolve(cfg)
    corpus = corpus_lib.load_corpus(plan.corpus, plan.sources())
    tokenizer = Tokenizer.load(cfg.tokenizer.path)
    builder = plan.batch_builder(corpus, tokenizer)
    specials = tokenizer.special_ids()
    largest = max(corpus.mono.languages, key=corpus.mono.num_lines)
    for step in (3, 4, 5, 6):
        late = step >= 5
        batches = builder.map(step - 1)
        for name, rate in (("mmlm", 0.6 if late else 0.05), ("tlm", 0.05 if late else 0.6)):
            batch = batches[name]
            original = np.where(batch["is_masked"] > 0, batch["labels"], batch["input_ids"])
            maskable = (batch["segment_ids"] > 0) & ~np.isin(original, specials)
            expected = [max(1, round(rate * n)) for n in maskable.sum(1)]
            predicted = batch["pred_weights"].sum(1).astype(int).tolist()
            assert predicted == expected, f"{name} rows of step {step}: rate {rate}"
        languages = {
            corpus.languages[ids[segments > 0][0]]
            for ids, segments in zip(
                batches["mmlm"]["lang_ids"], batches["mmlm"]["segment_ids"], strict=True
            )
        }
        assert (languages == {largest}) != late, f"step {step}: {sorted(languages)}"


def test_settings_in_force_are_logged_and_a_resume_mid_schedule_is_exact(udhr_run_config, tmp_path):
    """The resume starts from the whole run's own checkpoint at step 3 (its later ones removed):
    a run stopped there would have computed the same first steps again."""
    schedule = ({"step": 0, "mono_alpha": 1.0, "mono_mask_rate": 0.4},
                {"step": 8, "mono_alpha": 0.2, "mono_mask_rate": 0.1})  # fmt: skip

    def train(workdir):
        cfg = udhr_run_config(data__anneal=schedule, train__checkpoint_every=3)
        trainer = trainer_lib.build(resolve(cfg), str(workdir), jax.devices()[:1])
        try:
            trainer_lib.run(trainer)
        finally:
            trainer.checkpointer.close()
        return read_metrics(workdir)

    whole = train(tmp_path / "whole")
    workdir_at_step(tmp_path / "whole", tmp_path / "resumed", 3)
    resumed = train(tmp_path / "resumed")
    assert (tmp_path / "resumed" / "checkpoints" / "8").is_dir()  # it trained steps 4-8
    anneal = Anneal.from_config(schedule, total_steps=8)
    for record in whole:
        assert record["data/mono_alpha"] == pytest.approx(
            anneal.value("mono_alpha", record["step"])
        )
        assert record["data/mono_mask_rate"] == pytest.approx(
            anneal.value("mono_mask_rate", record["step"])
        )
    assert [r["step"] for r in resumed] == [r["step"] for r in whole]
    np.testing.assert_allclose([r["loss"] for r in resumed], [r["loss"] for r in whole], rtol=1e-5)


def test_two_points_at_one_step_are_a_jump():
    """mmBERT's phases: a setting holds through a phase and changes at the next one's start."""
    anneal = Anneal.from_config(
        (
            {"step": 0, "mono_mask_rate": 0.3},
            {"step": 6, "mono_mask_rate": 0.3},
            {"step": 6, "mono_mask_rate": 0.15},
            {"step": 10, "mono_mask_rate": 0.05},
        ),
        total_steps=20,
    )
    rates = [anneal.value("mono_mask_rate", s) for s in (0, 5, 6, 8, 10, 15)]
    assert rates == pytest.approx([0.3, 0.3, 0.15, 0.1, 0.05, 0.05])
