"""XLCo, the cross-lingual contrastive objective (xlpretrain/objectives/xlco.py), against its
definition: the loss of known vectors by hand (temperature, margin, both directions, empty
slots left out); which tokens make a sentence's vector; both sides get gradients; every pair
meets the whole batch, so a sharded step equals one device's; its rows are clean sentence
pairs, each side encoded alone; it trains mixed with other objectives, declared like them."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.tiny import one_device_and_a_mesh, run_config
from xlpretrain import objectives
from xlpretrain.bench.step import synthetic_batch
from xlpretrain.core.errors import ConfigError
from xlpretrain.data.pretraining.batch import SIDE_SOURCE, SIDE_TARGET
from xlpretrain.masks import catalog
from xlpretrain.objectives import flops
from xlpretrain.objectives.xlco import (
    XlcoSettings,
    pair_count,
    ranking_terms,
    sentence_vectors,
    translation_ranking,
    xlco_flops,
)
from xlpretrain.training import trainer as trainer_lib
from xlpretrain.training.metrics import read_metrics
from xlpretrain.training.plan import resolve


def unit(*angles: float) -> jnp.ndarray:
    return jnp.array([[math.cos(a), math.sin(a)] for a in angles], jnp.float32)


def test_the_loss_of_known_vectors_by_hand():
    """Two pairs at right angles, each pair 60° apart: cos(x_i, y_i) = 0.5, the cross cosines
    cos(x_0, y_1) = cos(90° + 60°) = -0.866 and cos(x_1, y_0) = cos(90° - 60°) = 0.866; a third
    slot is empty and neither scores nor counts."""
    sources, targets = unit(0.0, math.pi / 2, 0.0), unit(math.pi / 3, math.pi / 2 + math.pi / 3, 0)
    present = jnp.array([True, True, False])
    tau, m = 0.5, 0.2

    def nll(own: float, other: float) -> float:
        own, other = (own - m) / tau, other / tau
        return math.log(math.exp(own) + math.exp(other)) - own

    cos60, cos30 = 0.5, math.cos(math.pi / 6)
    # Rows x_0 → (y_0, y_1), x_1 → (y_0, y_1); columns y_0 → (x_0, x_1), y_1 → (x_0, x_1).
    forward = [nll(cos60, -cos30), nll(cos60, cos30)]
    backward = [nll(cos60, cos30), nll(cos60, -cos30)]
    expected = 0.5 * (sum(forward) + sum(backward)) / 2
    loss, accuracy, count = translation_ranking(
        sources, targets, present, temperature=tau, margin=m
    )
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    # x_1 scores y_0 (0.866) above its own y_1 (0.5), and y_0 prefers x_1: half the hits miss.
    assert float(accuracy) == pytest.approx(0.5) and float(count) == 2.0
    total, hits, pairs = ranking_terms(sources, targets, present, temperature=tau, margin=m)
    assert float(total) == pytest.approx(2 * expected) and (float(hits), float(pairs)) == (1, 2)


def test_both_directions_count_where_they_differ():
    """x = (0°, 90°), y = (30°, 150°): cos(x_i, y_j) = [[cos 30°, cos 150°], [cos 60°, cos 60°]],
    whose rows (x → y) and columns (y → x) hold different scores, so the loss of one direction
    scored twice, either one, is not the loss of both (the example above, symmetric, cannot
    tell them apart)."""
    sources, targets = unit(0.0, math.pi / 2), unit(math.pi / 6, 5 * math.pi / 6)
    tau, m = 0.5, 0.2

    def nll(own: float, other: float) -> float:
        own, other = (own - m) / tau, other / tau
        return math.log(math.exp(own) + math.exp(other)) - own

    cos30, cos60 = math.cos(math.pi / 6), 0.5
    forward = [nll(cos30, -cos30), nll(cos60, cos60)]  # rows: x_0 → (y_0, y_1), x_1 → (y_0, y_1)
    backward = [nll(cos30, cos60), nll(cos60, -cos30)]  # columns: y_0 → (x_0, x_1), y_1 → …
    assert abs(sum(forward) - sum(backward)) > 0.1  # the example is asymmetric
    loss, accuracy, count = translation_ranking(
        sources, targets, jnp.array([True, True]), temperature=tau, margin=m
    )
    np.testing.assert_allclose(loss, 0.5 * (sum(forward) + sum(backward)) / 2, rtol=1e-6)
    # x_1's own y_1 ((0.5 - m) / τ) loses to y_0 (0.5 / τ); both y find their own x: 3 of 4.
    assert float(accuracy) == pytest.approx(0.75) and float(count) == 2.0


def pair_rows() -> dict:
    """One row of two pairs (`<s> a b </s>` `<s> c </s>`, then `<s> d </s>` `<s> e f </s>`) and
    padding, as the pipeline lays xlco rows out."""
    segments = np.array([[1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 4, 0, 0]])
    pairs = np.array([[1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 0, 0]])
    side = np.where(np.isin(segments, (2, 4)), SIDE_TARGET, SIDE_SOURCE)
    return {"segment_ids": segments, "pair_ids": pairs, "side": side}


def test_a_sentence_vector_is_the_mean_or_the_first_of_its_own_tokens():
    batch = pair_rows()
    hidden = jnp.arange(16, dtype=jnp.float32)[None, :, None] * jnp.array([1.0, 0.0])
    hidden = hidden + jnp.array([0.0, 1.0])  # token t's state: (t, 1)
    expect = {"mean": ([1.5, 8.0], [5.0, 11.5]), "first": ([0.0, 7.0], [4.0, 10.0])}
    for pooling, (source_x, target_x) in expect.items():
        sources, targets, present = sentence_vectors(hidden, batch, pooling, pairs_per_row=3)
        assert present.tolist() == [True, True, False]
        for vectors, xs in ((sources, source_x), (targets, target_x)):
            for vector, x in zip(vectors[:2], xs, strict=True):
                np.testing.assert_allclose(vector, np.array([x, 1.0]) / math.hypot(x, 1.0), 1e-6)
    assert int(pair_count(batch, pairs_per_row=3)) == 2
    assert int(pair_count(batch, pairs_per_row=1)) == 1  # a slot per row: the second is not read


def xlco_run(**overrides):
    return run_config(objectives={"xlco": 1.0, "tlm": 0.5}, **overrides)


def test_gradients_reach_both_sides_of_a_pair():
    """The loss moves the embedding of a token that occurs only in the sources and of one that
    occurs only in the targets."""
    plan = resolve(xlco_run())
    model, init = objectives.build_model(plan.model_config(4), plan.objectives, plan.contexts)
    params = nn.unbox(init(jax.random.key(0)))
    batch = synthetic_batch(4, plan.stage_streams[0]["xlco"], plan.model.vocab_size,
                            np.random.default_rng(0))  # fmt: skip
    batch["input_ids"] = np.where(batch["side"] == SIDE_SOURCE, 100, 200).astype(np.int32)
    loss_fn = plan.objectives["xlco"].loss(plan.contexts["xlco"])
    grads = jax.jit(jax.grad(lambda p: loss_fn(p, batch, jax.random.key(1), model)[0]))(params)
    table = grads["embeddings"]["word_embeddings"]["embedding"]
    assert float(jnp.abs(table[100]).sum()) > 0 and float(jnp.abs(table[200]).sum()) > 0


def test_a_sharded_step_equals_one_device():
    """XLCo + TLM on data 2 × fsdp 2 × tensor 2 against one device: the same loss, accuracy
    and updated parameters, so every device's pairs met every pair of the batch."""
    results = one_device_and_a_mesh(resolve(xlco_run()))
    (one_metrics, one), (sharded_metrics, sharded) = results
    for key in ("loss", "loss/xlco", "accuracy/xlco", "count/xlco"):
        np.testing.assert_allclose(sharded_metrics[key], one_metrics[key], rtol=1e-5)
    assert one_metrics["count/xlco"] == 8  # one pair a synthetic row
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-4), sharded, one)


def test_rows_are_clean_pairs_each_side_alone(udhr_run_config):
    """No masked token even where data.anneal masks 40 %, at most pairs_per_row pairs a row,
    each side a segment of its own with positions from 2 (so it is encoded alone)."""
    cfg = udhr_run_config(
        objectives={"xlco": 1.0},
        data__anneal=({"step": 0, "parallel_mask_rate": 0.4, "mono_mask_rate": 0.4},),
        xlco__pairs_per_row=3,
        data__max_length=400,
        model__max_positions=402,
    )
    plan = resolve(cfg)
    from xlpretrain.data.corpora import corpus as corpus_lib
    from xlpretrain.data.tokenizer import Tokenizer

    corpus = corpus_lib.load_corpus(plan.corpus, plan.sources())
    rows = plan.batch_builder(corpus, Tokenizer.load(cfg.tokenizer.path)).map(0)["xlco"]
    assert rows["is_masked"].sum() == 0 and rows["pred_weights"].sum() == 0
    assert 1 <= rows["pair_ids"].max() <= 3 and (rows["pair_ids"].max(1) >= 2).any()
    for row in range(rows["input_ids"].shape[0]):
        for segment in range(1, rows["segment_ids"][row].max() + 1):
            where = rows["segment_ids"][row] == segment
            assert rows["positions"][row][where][0] == 2
            assert len(set(rows["side"][row][where])) == 1
            assert rows["side"][row][where][0] == (SIDE_SOURCE if segment % 2 else SIDE_TARGET)


def test_it_is_declared_like_every_objective():
    """Its mask (each side within itself) is shown by the masks CLI; its FLOPs count the
    encoder and the N × N scores both ways; micro-batches and bad settings are refused."""
    (mask,) = catalog.BY_OBJECTIVE["xlco"]
    assert mask.name == "xlco" and catalog.choices()["xlco"] == ("xlco", mask)
    plan = resolve(xlco_run(xlco__pairs_per_row=3))
    context, stream = plan.contexts["xlco"], plan.stage_streams[0]["xlco"]
    shape = flops.StepShape(tokens=8 * 32, length=32, predictions=0)
    encoder = flops.encoder_matmuls(context.model, 256) + flops.attention_scores(
        context.model, 256, 32
    )
    assert xlco_flops(context, stream, shape) == encoder + 12 * (8 * 3) ** 2 * 32
    with pytest.raises(ConfigError, match="'train.grad_accum': 2: xlco scores every pair"):
        resolve(xlco_run(train__grad_accum=2))
    with pytest.raises(ConfigError, match="'xlco.pooling'"):
        resolve(xlco_run(xlco__pooling="max"))
    with pytest.raises(ConfigError, match="'xlco.temperature'"):
        resolve(xlco_run(xlco__temperature=0.0))
    assert XlcoSettings() == plan.contexts["xlco"].own.__class__()


def test_it_trains_mixed_with_others_and_is_evaluated_against_chance(
    udhr, udhr_run_config, tmp_path
):
    """TLM + CAMLM + XLCo in one step: each logs its loss and accuracy; held out, XLCo's
    reference is chance ranking (log N, 1/N), not a unigram model. The held-out pairs are 4 of
    UDHR's 527 pair files: retrieval on every one, three times, was most of this test."""
    held_out = tmp_path / "held_out"
    held_out.mkdir()
    for path in sorted((udhr / "parallel").glob("*.tsv"))[:4]:
        (held_out / path.name).symlink_to(path)
    cfg = udhr_run_config(
        objectives={"tlm": 1.0, "camlm": 1.0, "xlco": 1.0}, eval__every_steps=4,
        eval__retrieval_lines=20, eval__retrieval_layer=2, eval__parallel_dir=str(held_out),
    )  # fmt: skip
    workdir = tmp_path / "run"
    trainer = trainer_lib.build(resolve(cfg), str(workdir), jax.devices()[:1])
    try:
        trainer_lib.run(trainer)
    finally:
        trainer.checkpointer.close()
    last = [r for r in read_metrics(workdir) if "loss" in r][-1]
    for name in ("tlm", "camlm", "xlco"):
        assert np.isfinite(last[f"loss/{name}"]) and 0 <= last[f"accuracy/{name}"] <= 1
    assert 0 <= last["eval/accuracy/xlco"] <= 1 and "eval/retrieval" in last
    chance = trainer.evaluator.baselines["eval/loss/xlco"]["chance"]
    assert 0 < chance <= math.log(8 * 2)  # at most 2 pairs in each of 8 rows
