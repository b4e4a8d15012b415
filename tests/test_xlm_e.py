"""XLM-E: generator/discriminator wiring, sampling labels, gradients and Table 6."""

import pathlib
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.tiny import model_config, objective_context, step_batch_builder
from xlpretrain import masks, objectives
from xlpretrain.data.corpora.folders import MonolingualSource, ParallelSource
from xlpretrain.data.pretraining.masking import BERT_CORRUPTION, MASK_ONLY
from xlpretrain.data.pretraining.pipeline import Corpus, language_vocabulary
from xlpretrain.data.tokenizer import Tokenizer
from xlpretrain.model.config import ModelFamily, generator_config
from xlpretrain.model.electra import ElectraPretrainer, init_electra_params
from xlpretrain.objectives import electra
from xlpretrain.training.config import ConfigError, default_config
from xlpretrain.training.plan import resolve

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "configs"))
import xlm_e as xlm_e_configs  # noqa: E402

CFG = model_config(relative_position="gated", num_buckets=8, max_distance=16)
GEN = generator_config(CFG, layers=1, width=0.5)
MODEL = ElectraPretrainer(CFG, GEN)
PARAMS = nn.unbox(init_electra_params(CFG, GEN, jax.random.key(0)))
MASK = CFG.vocab_size - 1

IDS = np.array([[0, 5, MASK, 7, MASK, 2, 1, 1]])
BATCH = {
    "input_ids": IDS,
    "positions": np.array([[2, 3, 4, 5, 6, 7, 1, 1]]),
    "segment_ids": np.array([[1, 1, 1, 1, 1, 1, 0, 0]]),
    "pair_ids": np.array([[1, 1, 1, 1, 1, 1, 0, 0]]),
    "side": np.zeros_like(IDS),
    "is_masked": (IDS == MASK).astype(int),
    "labels": np.where(IDS == MASK, 9, 0),
    "lang_ids": np.zeros_like(IDS),
    "pred_positions": np.array([[2, 4]]),
    "pred_labels": np.array([[9, 9]]),
    "pred_weights": np.ones((1, 2), np.float32),
}


def test_parameter_layout_shares_embeddings_and_exports_the_discriminator():
    assert set(PARAMS) == {
        "embeddings",
        "encoder",
        "generator_projection",
        "generator_encoder",
        "generator_head",
        "discriminator_dense",
        "discriminator_out",
    }
    assert "generator_embeddings" not in PARAMS  # one embedding table for both towers
    gen_layers = PARAMS["generator_encoder"]["layers"]["mlp"]["wi"]["kernel"]
    assert gen_layers.shape == (1, 8, 16)  # 1 layer, width 0.5: hidden 8, FFN 16
    assert "gate_u" in PARAMS["encoder"]["layers"]["attention"]


def test_sampled_original_tokens_are_labelled_original():
    corrupted, replaced = electra.replace_with_samples(
        {k: jnp.asarray(v) for k, v in BATCH.items()}, jnp.array([[9, 11]])
    )
    np.testing.assert_array_equal(corrupted[0], [0, 5, 9, 7, 11, 2, 1, 1])
    np.testing.assert_array_equal(replaced[0], [0, 0, 0, 0, 1, 0, 0, 0])


def _objective_grads(rng_seed=0, disc_weight=1.0):
    rtd = electra.make_rtd("gen_mlm", "mrtd", masks.mmlm, disc_weight=disc_weight, temperature=1.0)

    def parts(params):
        total, metrics = rtd(params, BATCH, jax.random.key(rng_seed), MODEL)
        return metrics["loss/gen_mlm"], metrics["loss/mrtd"]

    # One jitted program for both: op by op, every small op is dispatched (and compiled) apart.
    return jax.jit(jax.jacrev(parts))(PARAMS)


def _norm(tree):
    return float(sum(np.abs(np.asarray(x)).sum() for x in jax.tree.leaves(tree)))


def test_generator_gets_no_gradient_from_the_discriminator_and_embeddings_get_both():
    generator_grads, discriminator_grads = _objective_grads()
    for name in ("generator_encoder", "generator_head", "generator_projection"):
        assert _norm(discriminator_grads[name]) == 0.0, name  # no gradient through the sample
        assert _norm(generator_grads[name]) > 0.0, name
    for name in ("encoder", "discriminator_dense", "discriminator_out"):
        assert _norm(generator_grads[name]) == 0.0, name
        assert _norm(discriminator_grads[name]) > 0.0, name
    word = ("embeddings", "word_embeddings", "embedding")
    pick = lambda g: g[word[0]][word[1]][word[2]]  # noqa: E731
    assert _norm(pick(generator_grads)) > 0 and _norm(pick(discriminator_grads)) > 0


def test_padding_carries_no_discriminator_loss():
    rtd = electra.make_rtd("gen_mlm", "mrtd", masks.mmlm, disc_weight=50.0, temperature=1.0)
    _, metrics = rtd(PARAMS, BATCH, jax.random.key(0), MODEL)
    other = dict(BATCH, input_ids=np.where(BATCH["segment_ids"] > 0, IDS, 17))  # junk padding
    _, metrics_junk = rtd(PARAMS, other, jax.random.key(0), MODEL)
    np.testing.assert_allclose(
        float(metrics["loss/mrtd"]), float(metrics_junk["loss/mrtd"]), rtol=1e-6
    )
    assert 0.0 <= float(metrics["replaced_rate/mrtd"]) <= 2 / 6


class KnownLogits:
    """An `ElectraPretrainer` whose outputs are given: the generator puts `peak` on chosen
    tokens (so its samples are those tokens), the discriminator returns `disc_logits`. The RTD
    loss of given logits and labels can then be computed by hand."""

    def __init__(self, samples, disc_logits, vocab_size, peak=40.0):
        self.generator = jax.nn.one_hot(samples, vocab_size) * peak
        self.disc_logits = jnp.asarray(disc_logits, jnp.float32)
        self.corrupted = None

    def apply(self, variables, *args, method, **kwargs):
        if method == "generator_hidden":
            return jnp.zeros((*args[0].shape, 4))
        if method == "generator_logits":
            return self.generator
        assert method == "discriminator_logits"
        self.corrupted = args[0]
        return self.disc_logits


def _bce(logit, label):
    return np.log1p(np.exp(-logit)) if label else np.log1p(np.exp(logit))


# Two rows: 6 and 4 real tokens, then padding; slots at 2, 4 (row 0) and 1 (row 1).
RTD_IDS = np.array([[0, 5, MASK, 7, MASK, 2, 1, 1], [0, MASK, 8, 2, 1, 1, 1, 1]])
RTD_SEGMENTS = (np.array([[6], [4]]) > np.arange(8)).astype(int)
RTD_BATCH = {
    "input_ids": RTD_IDS,
    "positions": np.where(RTD_SEGMENTS > 0, np.arange(8) + 2, 1),
    "segment_ids": RTD_SEGMENTS,
    "pair_ids": RTD_SEGMENTS,
    "side": np.zeros_like(RTD_IDS),
    "is_masked": (RTD_IDS == MASK).astype(int),
    "labels": np.array([[0, 0, 9, 0, 12, 0, 0, 0], [0, 12, 0, 0, 0, 0, 0, 0]]),
    "lang_ids": np.zeros_like(RTD_IDS),
    "pred_positions": np.array([[2, 4], [1, 0]]),
    "pred_labels": np.array([[9, 12], [12, 0]]),
    "pred_weights": np.array([[1.0, 1.0], [1.0, 0.0]], np.float32),
}


def test_discriminator_loss_is_the_mean_over_every_real_token():
    """XLM-E (and ELECTRA): L_D sums the sigmoid cross-entropy over every non-padding token of
    the corrupted input, original or replaced, masked or not, and divides by their number;
    padding carries none. A sample equal to the original is labelled original."""
    rng = np.random.default_rng(0)
    disc_logits = rng.normal(size=RTD_IDS.shape) * 2
    # Row 0 samples 9 at slot 2 (the original: not replaced) and 30 at slot 4; row 1 samples
    # 17 at slot 1; row 1's second slot is empty.
    model = KnownLogits([[9, 30], [17, 3]], disc_logits, CFG.vocab_size)
    loss_fn = objectives.get("mrtd").loss(objective_context("mrtd"))
    _, metrics = loss_fn(PARAMS, RTD_BATCH, jax.random.key(0), model)
    np.testing.assert_array_equal(
        model.corrupted, [[0, 5, 9, 7, 30, 2, 1, 1], [0, 17, 8, 2, 1, 1, 1, 1]]
    )
    replaced = {(0, 4), (1, 1)}
    real = [(r, t) for r in range(2) for t in range(8) if RTD_SEGMENTS[r, t]]
    want = np.mean([_bce(disc_logits[r, t], (r, t) in replaced) for r, t in real])
    np.testing.assert_allclose(float(metrics["loss/mrtd"]), want, rtol=1e-6)
    assert float(metrics["replaced_rate/mrtd"]) == pytest.approx(2 / 10)
    slots_only = np.mean([_bce(disc_logits[r, t], (r, t) in replaced) for r, t in [*replaced]])
    assert abs(slots_only - want) > 0.1  # the test tells the two definitions apart


def test_lambda_is_50_by_default_and_in_every_shipped_xlm_e_config():
    """Table 6 of XLM-E: L = L_G + 50 · L_D, the declared default and every shipped config's."""
    assert default_config().xlm_e.disc_weight == 50.0
    for size in ("tiny", "base"):
        assert xlm_e_configs.get_config(size).xlm_e.disc_weight == 50.0, size
    model = KnownLogits([[9, 30], [17, 3]], np.ones(RTD_IDS.shape), CFG.vocab_size)
    for name in ("mrtd", "trtd"):
        total, metrics = objectives.get(name).loss(objective_context(name))(
            PARAMS, RTD_BATCH, jax.random.key(0), model
        )
        generator = "gen_mlm" if name == "mrtd" else "gen_tlm"
        np.testing.assert_allclose(
            float(total),
            float(metrics[f"loss/{generator}"]) + 50.0 * float(metrics[f"loss/{name}"]),
            rtol=1e-6,
        )


def test_generator_slots_of_pipeline_rtd_batches_are_all_mask(udhr, udhr_tokenizer_path):
    """XLM-E's x^masked replaces every token of M with [MASK]; MLM streams keep 80/10/10."""
    for name, objective in objectives.REGISTRY.items():
        expected = MASK_ONLY if objective.family is ModelFamily.ELECTRA else BERT_CORRUPTION
        assert objective.stream_spec(objective_context(name)).corruption == expected, name
    tokenizer = Tokenizer.load(udhr_tokenizer_path)
    mono = MonolingualSource.from_dir(udhr / "mono", languages=["007", "008", "009"])
    parallel = ParallelSource.from_dir(udhr / "parallel", pairs=[("eng", "007")])
    corpus = Corpus(mono, parallel, language_vocabulary(mono, parallel))
    streams = {
        name: objectives.get(name).stream_spec(objective_context(name)).at_length(128)
        for name in ("mrtd", "trtd", "mmlm")
    }
    builder = step_batch_builder(corpus, tokenizer, streams, 8)
    shown = {"mask": 0, "random": 0, "kept": 0}
    for step in range(12):
        batches = builder.map(step)
        for name in ("mrtd", "trtd"):
            b = batches[name]
            slots = b["pred_weights"] > 0
            at_slots = np.take_along_axis(b["input_ids"], b["pred_positions"], axis=1)
            assert slots.sum() > 0 and (at_slots[slots] == tokenizer.mask_id).all(), name
            assert (b["pred_labels"][slots] != tokenizer.mask_id).all()  # labels: the originals
            assert b["is_masked"].sum() == slots.sum()
        b = batches["mmlm"]
        slots = b["pred_weights"] > 0
        new = np.take_along_axis(b["input_ids"], b["pred_positions"], axis=1)[slots]
        is_mask, kept = new == tokenizer.mask_id, new == b["pred_labels"][slots]
        shown["mask"] += is_mask.sum()
        shown["kept"] += kept.sum()
        shown["random"] += (~is_mask & ~kept).sum()
    shares = np.array(list(shown.values())) / sum(shown.values())
    np.testing.assert_allclose(shares, [0.8, 0.1, 0.1], atol=0.04)


def test_rtd_does_not_mix_with_masked_lm_objectives():
    cfg = default_config()
    cfg.objectives = {"mrtd": 1.0, "mmlm": 1.0}
    with pytest.raises(ConfigError, match="model families do not mix"):
        resolve(cfg)


def test_base_config_matches_table_6():
    cfg = xlm_e_configs.get_config("base")
    resolve(cfg)
    m, o, x = cfg.model, cfg.optim, cfg.xlm_e
    assert (m.num_layers, m.hidden_size, m.mlp_dim, m.num_heads) == (12, 768, 3072, 12)
    gen = generator_config(resolve(cfg).model, x.generator_layers, x.generator_width)
    assert (gen.num_layers, gen.hidden_size, gen.mlp_dim, gen.num_heads) == (4, 768, 3072, 12)
    assert cfg.train.steps == 125_000 and x.disc_weight == 50.0
    assert (o.learning_rate, o.warmup_steps, o.eps, o.b1, o.b2) == (5e-4, 10_000, 1e-6, 0.9, 0.98)
    assert (o.clip_norm, o.weight_decay, cfg.data.mono_alpha) == (2.0, 0.01, 0.7)
    mrtd_tokens = cfg.data.batch_size * cfg.data.max_length
    trtd = cfg.data.per_objective.trtd
    assert mrtd_tokens == trtd.batch_size * trtd.max_length == 2**20  # ~1M tokens per task
    assert m.relative_position == "gated" and {k: w for k, w in cfg.objectives.items() if w} == {
        "mrtd": 1.0,
        "trtd": 1.0,
    }
