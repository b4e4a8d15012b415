"""Evaluation during pre-training: held-out loss and accuracy per objective (dropout off,
reduced over every prediction of the held-out batches) and retrieval accuracy@1, logged with
the step's metrics every `eval.every_steps` steps."""

import dataclasses
import logging

import jax
import numpy as np
import pytest

from tests.tiny import STEPS, udhr_subset
from xlpretrain import objectives
from xlpretrain.api import Model
from xlpretrain.convert.folder import Pretrained
from xlpretrain.data.corpora.folders import ParallelSource
from xlpretrain.eval.alignment import retrieval_accuracy
from xlpretrain.training import trainer as trainer_lib
from xlpretrain.training.evaluation import (
    Evaluator,
    training_unigram,
    unigram_baseline,
    without_dropout,
)
from xlpretrain.training.metrics import progress_line, read_metrics
from xlpretrain.training.plan import resolve

HELD_OUT = ("007", "008", "009")


@pytest.fixture(scope="module")
def held_out(udhr, tmp_path_factory):
    """Three of the corpus's languages and their English pairs (the run knows their ids)."""
    return udhr_subset(udhr, tmp_path_factory.mktemp("held_out"), HELD_OUT)


class Phases(logging.Handler):
    """The run's log lines and, as `PHASE name`, the moment each long phase of its start
    begins: so a test sees which line came just before it."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def marking(self, name, fn):
        def marked(*args, **kwargs):
            self.lines.append(f"PHASE {name}")
            return fn(*args, **kwargs)

        return marked


@pytest.fixture(scope="module")
def evaluated_run(udhr_run_config, held_out, tmp_path_factory):
    """The run, its final parameters and metrics, and its log with its phases marked
    (`Phases`): initialising the state, measuring retrieval (first at step 0), the first train
    step (which compiles), the first evaluation."""
    cfg = udhr_run_config(
        data__pack=False,  # with long rows, some padded: batches differ in predictions
        data__max_length=128,
        eval__every_steps=4,
        eval__mono_dir=str(held_out / "mono"),
        eval__parallel_dir=str(held_out / "parallel"),
        eval__batches=2,
        eval__retrieval_lines=12,
    )
    workdir = tmp_path_factory.mktemp("run")
    phases, logger = Phases(), logging.getLogger("xlpretrain")
    setup_training, build_evaluator = trainer_lib.setup_training, trainer_lib.build_evaluator

    def marked_training(*args):
        training = phases.marking("init", setup_training)(*args)
        steps = [phases.marking("train step", step) for step in training.step_fns]
        return dataclasses.replace(training, step_fns=steps)

    def marked_evaluator(*args):
        evaluator = build_evaluator(*args)
        evaluator.steps = [phases.marking("evaluation", step) for step in evaluator.steps]
        return evaluator

    level = logger.level
    logger.addHandler(phases)
    logger.setLevel(logging.INFO)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(trainer_lib, "setup_training", marked_training)
            patch.setattr(trainer_lib, "build_evaluator", marked_evaluator)
            patch.setattr(
                Evaluator, "_retrieval", phases.marking("retrieval", Evaluator._retrieval)
            )
            trainer = trainer_lib.build(resolve(cfg), str(workdir), jax.devices()[:1])
            try:
                state = trainer_lib.run(trainer)
            finally:
                trainer.checkpointer.close()
    finally:
        logger.removeHandler(phases)
        logger.setLevel(level)
    return cfg, trainer, jax.device_get(state.params), read_metrics(str(workdir)), phases.lines


def test_each_long_phase_of_the_start_is_announced_just_before_it_begins(evaluated_run):
    """A user never sits through initialising the state, step 0's retrieval, compiling the
    train step or the first evaluation without a line saying which it is."""
    *_, lines = evaluated_run
    announced = {
        "init": "initialising the model and its optimizer state on 1 device(s)",
        "retrieval": "measuring retrieval at step 0 on 3 held-out pair files (up to 12 lines "
        "each), the reference for later evaluations",
        "train step": f"compiling the train step; then steps 1-{STEPS} (logged every 1)",
        "evaluation": "evaluating on 2 held-out batches, retrieval on 3 pair files",
    }
    for phase, line in announced.items():
        first = lines.index(f"PHASE {phase}")
        assert lines[first - 1] == line, (phase, lines[max(first - 3, 0) : first + 1])


def test_held_out_scores_are_logged_every_n_steps(evaluated_run):
    _, trainer, _, records, _ = evaluated_run
    evaluated = [r["step"] for r in records if "eval/loss/mmlm" in r]
    assert evaluated == list(range(4, STEPS + 1, 4))
    last = records[-1]
    for key in ("eval/loss/mmlm", "eval/loss/tlm", "eval/accuracy/mmlm", "eval/accuracy/tlm"):
        assert np.isfinite(last[key]), key
    assert 0.0 <= last["eval/retrieval"] <= 1.0
    pairs = {f"eval/retrieval/eng-{lang}" for lang in HELD_OUT}
    # All four languages are written in Latin script: one group, every pair in it.
    assert {k for k in last if k.startswith("eval/retrieval/")} == {
        *pairs,
        "eval/retrieval/within_latin",
    }
    within = np.mean([last[key] for key in pairs])
    assert last["eval/retrieval/within_latin"] == pytest.approx(within)
    assert last["eval/retrieval"] == pytest.approx(within)
    references = trainer.evaluator.baselines  # the group's own, measured with the average's
    assert references["eval/retrieval/within_latin"] == pytest.approx(references["eval/retrieval"])
    assert list(references["eval/retrieval/within_latin"]) == ["step 0", "chance"]
    assert "| eval mmlm " in progress_line(STEPS, STEPS, last, 0.0)


def test_held_out_loss_is_every_predictions_mean_without_dropout(evaluated_run):
    """The last evaluation, recomputed from the final parameters: each held-out batch scored
    by the objective with dropout off, summed over predictions and divided by their count."""
    cfg, trainer, params, records, _ = evaluated_run
    plan = trainer.plan
    model, _ = objectives.build_model(plan.model_config(0), plan.objectives, plan.contexts)
    quiet = without_dropout(model)
    for name in ("mmlm", "tlm"):
        loss_fn = jax.jit(objectives.get(name).loss(plan.contexts[name]), static_argnums=3)
        sums = np.zeros(3)
        for batch in trainer.evaluator.batches[0]:
            loss, metrics = loss_fn(params, batch[name], jax.random.key(0), quiet)
            count = float(metrics["count"])
            sums += [float(loss) * count, float(metrics["accuracy"]) * count, count]
        np.testing.assert_allclose(records[-1][f"eval/loss/{name}"], sums[0] / sums[2], rtol=1e-5)
        np.testing.assert_allclose(
            records[-1][f"eval/accuracy/{name}"], sums[1] / sums[2], rtol=1e-5
        )
    # With dropout on, the same batches score differently: the evaluator did turn it off.
    noisy, _ = loss_fn(params, trainer.evaluator.batches[0][0]["tlm"], jax.random.key(0), model)
    clean, _ = loss_fn(params, trainer.evaluator.batches[0][0]["tlm"], jax.random.key(0), quiet)
    assert abs(float(noisy) - float(clean)) > 1e-4


def test_retrieval_is_scored_with_the_current_parameters(evaluated_run, held_out):
    cfg, trainer, params, records, _ = evaluated_run
    languages = tuple(trainer.builder.corpus.languages)
    config = trainer.evaluator.model_config
    model = Model(Pretrained(config, params, trainer.builder.tokenizer, languages))
    source = ParallelSource.from_dir(held_out / "parallel")
    result = retrieval_accuracy(model, source, max_lines=12)
    np.testing.assert_allclose(records[-1]["eval/retrieval"], result["average"]["mean"])


def test_the_unigram_baseline_is_the_training_texts_distribution_on_held_out_labels():
    """Counts: every real text token of the training rows, a masked one as its label, special
    tokens and padding never; scored add-one smoothed on the held-out prediction slots, and the
    most frequent token as the guess."""

    class Tokenizer:
        def special_ids(self):
            return np.array([0, 1, 2, 3, 4])  # <s> <pad> </s> <unk> <mask>

    class TrainingRows:
        tokenizer = Tokenizer()

        def map(self, step):
            row = {
                "input_ids": np.array([[0, 5, 5, 5, 4, 6, 2, 1]]),
                "is_masked": np.array([[0, 0, 0, 0, 1, 0, 0, 0]]),
                "labels": np.array([[0, 0, 0, 0, 6, 0, 0, 0]]),
                "segment_ids": np.array([[1, 1, 1, 1, 1, 1, 1, 0]]),
            }
            return {"mmlm": row, "tlm": row}

    counts = training_unigram(TrainingRows(), steps=2, vocab_size=10)
    np.testing.assert_array_equal(counts, [0, 0, 0, 0, 0, 12, 8, 0, 0, 0])
    # Batches stop once a budget of tokens is counted: a large run's first batch is enough.
    first = training_unigram(TrainingRows(), steps=2, vocab_size=10, tokens=10)
    np.testing.assert_array_equal(first, [0, 0, 0, 0, 0, 6, 4, 0, 0, 0])
    held_out = [{"pred_labels": np.array([[5, 6, 9, 0]]), "pred_weights": np.array([[1, 1, 1, 0]])}]
    figures = unigram_baseline(held_out, counts)
    p = np.array([13, 9, 1]) / 30  # add-one: (count + 1) / (20 + 10)
    assert figures["loss"] == pytest.approx(-np.log(p).mean())
    assert figures["accuracy"] == pytest.approx(1 / 3)


def test_the_demo_corpus_is_evaluated_on_its_held_out_part():
    """With no corpus named (the demo corpus), empty eval folders mean the demo's held-out
    part, and nothing is held out of training; with a corpus of one's own, a share of its
    lines (tests/test_held_out.py)."""
    from tests.tiny import run_config
    from xlpretrain.data.corpora import corpus

    demo = run_config(eval__every_steps=10)
    mono, parallel = corpus.held_out_folders(resolve(demo).corpus)
    assert mono.endswith("held_out/mono") and parallel.endswith("held_out/parallel")
    assert corpus.held_out_splits(resolve(demo).corpus, ("mono", "parallel")) == {}
    demo.eval.mono_dir = "/elsewhere/mono"
    assert corpus.held_out_folders(resolve(demo).corpus)[0] == "/elsewhere/mono"
