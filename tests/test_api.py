"""`xlpretrain.load`: batching, padding, layer selection, pooling and language ids."""

import dataclasses
import importlib.util
import pathlib

import flax.linen as nn
import grain
import jax
import numpy as np
import pytest

import xlpretrain
from xlpretrain import masks, objectives
from xlpretrain.api import Model, hf_positions
from xlpretrain.convert import folder
from xlpretrain.data.tokenizer import train_tokenizer
from xlpretrain.model.config import ModelConfig
from xlpretrain.model.encoder import MaskedLM
from xlpretrain.training.checkpoint import Checkpointer
from xlpretrain.training.plan import resolve

TEXTS = {
    "en": [
        "All human beings are born free and equal in dignity and rights.",
        "They are endowed with reason and conscience.",
        "Everyone has the right to life, liberty and security of person.",
        "No one shall be held in slavery or servitude.",
    ],
    "de": [
        "Alle Menschen sind frei und gleich an Würde und Rechten geboren.",
        "Sie sind mit Vernunft und Gewissen begabt.",
        "Jeder hat das Recht auf Leben, Freiheit und Sicherheit der Person.",
        "Niemand darf in Sklaverei oder Leibeigenschaft gehalten werden.",
    ],
}
# Short enough that every batch pads to one length (16), so the tests compile few programs.
SHORT = ["All human beings", "Alle Menschen sind frei", "Recht auf Leben", "free and equal"]
CONFIG = ModelConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=37)


def random_params(config, seed=0):
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda x: rng.normal(0.0, 0.3, x.shape).astype(np.float32), folder.abstract_params(config)
    )


def xlm_e_workdir(path, tokenizer=None, **model):
    """The files an XLM-E run (``configs/xlm_e.py:tiny`` at CONFIG's size, ``model`` overrides)
    leaves: config.json, and random params of the model the trainer builds, saved by the
    trainer's checkpointer at step 1 — without compiling a step. Returns (module, params)."""
    spec = importlib.util.spec_from_file_location(
        "xlm_e", pathlib.Path(__file__).resolve().parents[1] / "configs" / "xlm_e.py"
    )
    xlm_e = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(xlm_e)
    cfg = xlm_e.get_config("tiny")
    cfg.model.update(
        vocab_size=CONFIG.vocab_size, hidden_size=CONFIG.hidden_size, mlp_dim=CONFIG.mlp_dim
    )
    cfg.model.update(model)
    plan = resolve(cfg)
    active = plan.objectives
    module, init = objectives.build_model(plan.model_config(0), active, plan.contexts)
    rng = np.random.default_rng(1)
    params = jax.tree.map(
        lambda x: rng.normal(0.0, 0.3, x.shape).astype(np.float32),
        nn.unbox(jax.eval_shape(init, jax.random.key(0))),
    )
    path.mkdir(parents=True)
    (path / "config.json").write_text(cfg.to_json_best_effort(indent=2))
    folder.record_family(path, objectives.model_family(active), plan.model)
    if tokenizer is not None:
        tokenizer.save(path / "tokenizer.model")
    checkpointer = Checkpointer(path / "checkpoints", keep=1, async_save=False)
    try:
        checkpointer.save(1, {"params": params}, iter(grain.MapDataset.range(1).to_iter_dataset()))
    finally:
        checkpointer.close()
    return module, params


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("tokenizer") / "tiny.model"
    return train_tokenizer(TEXTS, path, CONFIG.vocab_size)


@pytest.fixture(scope="module")
def model(tokenizer, tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "ckpt"
    folder.write(folder.Pretrained(CONFIG, random_params(CONFIG), tokenizer), path)
    return xlpretrain.load(path, batch_size=4)


def test_positions_follow_hf():
    ids = np.array([[0, 7, 8, 2, 1, 1], [0, 9, 2, 1, 1, 1]])
    np.testing.assert_array_equal(hf_positions(ids, 1), [[2, 3, 4, 5, 1, 1], [2, 3, 4, 1, 1, 1]])


@pytest.fixture(scope="module")
def batch(tokenizer):
    """SHORT tokenized as ``encode`` does it: ``<s> text </s>``, padded, with its mask."""
    rows = [[0, *tokenizer.encode(text).tolist(), 2] for text in SHORT]
    ids = np.ones((len(rows), max(map(len, rows))), np.int32)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
    return ids, (ids != 1).astype(np.int32)


def model_output(model, ids, mask):
    """The last hidden states as ``MaskedLM`` itself computes them."""
    positions = hf_positions(ids, model.config.pad_token_id)
    apply = jax.jit(
        lambda params: MaskedLM(model.config).apply(
            {"params": params},
            ids,
            positions,
            mask_fn=masks.mmlm,
            mask_meta={"segment_ids": mask, "positions": positions},
        )
    )
    return np.asarray(apply(model.params))


def test_layer_by_layer_states_end_in_the_models_own_output(model, batch):
    ids, mask = batch
    states = model.hidden_states(ids, mask)
    assert states.shape == (CONFIG.num_layers + 1, *ids.shape, CONFIG.hidden_size)
    assert states.dtype == np.float32
    real = mask.astype(bool)
    final = model_output(model, ids, mask)
    np.testing.assert_allclose(states[-1][real], final[real], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.hidden_states(ids, mask, layer=-2), states[1], atol=1e-6)
    with pytest.raises(ValueError, match="layer=3"):
        model.hidden_states(ids, mask, layer=3)


def test_layer_by_layer_states_with_shared_encoder_params(tokenizer, batch):
    """XLM-E's relative-position table lives beside the stacked layers; no absolute positions."""
    config = dataclasses.replace(CONFIG, relative_position="gated", absolute_positions=False)
    model = Model(folder.Pretrained(config, random_params(config), tokenizer))
    ids, mask = batch
    real = mask.astype(bool)
    np.testing.assert_allclose(
        model.hidden_states(ids, mask, layer=-1)[real],
        model_output(model, ids, mask)[real],
        rtol=1e-5,
        atol=1e-5,
    )


def test_batches_are_chunked_and_padded_invisibly(model):
    """5 rows in chunks of 4 (padded to 4 and 1 rows) = each row run on its own."""
    rng = np.random.default_rng(0)
    lengths = [9, 3, 12, 5, 7]
    ids = np.ones((5, 12), np.int64)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(3, CONFIG.vocab_size, length)
    logits = model.mlm_logits(ids)  # attention_mask defaults to ids != pad
    assert logits.shape == (5, 12, CONFIG.vocab_size) and logits.dtype == np.float32
    for row, length in enumerate(lengths):
        alone = model.mlm_logits(ids[row : row + 1, :length])
        np.testing.assert_allclose(logits[row, :length], alone[0], rtol=1e-5, atol=1e-5)


def test_encode_mean_pooling_ignores_padding_and_layer_selects(model, batch):
    embeddings = model.encode(SHORT)
    assert embeddings.shape == (len(SHORT), CONFIG.hidden_size)
    assert embeddings.dtype == np.float32
    for i, text in enumerate(SHORT):
        np.testing.assert_allclose(model.encode([text])[0], embeddings[i], rtol=1e-5, atol=1e-5)
    ids, mask = batch
    states = model.hidden_states(ids, mask)
    for i, length in enumerate(mask.sum(1)):
        mean = states[-1, i, :length].mean(0)
        np.testing.assert_allclose(embeddings[i], mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        model.encode(SHORT, layer=1, pooling="cls"), states[1, :, 0], rtol=1e-5, atol=1e-5
    )
    with pytest.raises(ValueError, match="pooling='max'"):
        model.encode(SHORT, pooling="max")


def test_language_embeddings_need_language_codes(tokenizer):
    config = dataclasses.replace(CONFIG, num_languages=2)
    model = Model(folder.Pretrained(config, random_params(config), tokenizer, ("de", "en")))
    with pytest.raises(ValueError, match="language embeddings.*langs="):
        model.encode(SHORT[:2])
    with pytest.raises(ValueError, match=r"unknown language\(s\) \['fr'\]"):
        model.encode(SHORT[:2], langs="fr")
    with pytest.raises(ValueError, match="pass lang_ids"):
        model.mlm_logits(np.array([[0, 5, 2]]))
    as_en, as_de = (model.encode(SHORT[:2], langs=code) for code in ("en", "de"))
    assert not np.allclose(as_en, as_de)
    np.testing.assert_allclose(
        model.encode(SHORT[:2], langs=["en", "de"]), [as_en[0], as_de[1]], atol=1e-6
    )


def test_load_errors(tmp_path, model):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        xlpretrain.load(tmp_path / "missing")
    with pytest.raises(ValueError, match="exceeds the model's 512 positions"):
        model.mlm_logits(np.zeros((1, 513), np.int32))


def test_xlm_e_workdir_serves_its_discriminator(tokenizer, batch, tmp_path):
    """Hidden states are the discriminator's (gated relative positions need the mask metadata's
    positions), ``encode`` works, and there is no MLM head to give logits."""
    module, params = xlm_e_workdir(tmp_path / "run", tokenizer, relative_position="gated")
    model = xlpretrain.load(tmp_path / "run", batch_size=4)
    assert model.kind == folder.DISCRIMINATOR and model.config.relative_position == "gated"
    assert set(model.params) == {"embeddings", "encoder"}
    ids, mask = batch
    positions = hf_positions(ids, CONFIG.pad_token_id)
    meta = {"segment_ids": mask, "positions": positions}

    def discriminator(m):
        x = m.embeddings(ids, positions, None, True)
        return m.encoder(x, meta, mask_fn=masks.mmlm, deterministic=True)

    want = np.asarray(module.apply({"params": jax.device_put(params)}, method=discriminator))
    states = model.hidden_states(ids, mask)
    assert states.shape == (module.config.num_layers + 1, *ids.shape, CONFIG.hidden_size)
    real = mask.astype(bool)
    np.testing.assert_allclose(states[-1][real], want[real], rtol=1e-5, atol=1e-5)
    embeddings = model.encode(SHORT)
    for i, length in enumerate(mask.sum(1)):
        np.testing.assert_allclose(
            embeddings[i], states[-1, i, :length].mean(0), rtol=1e-5, atol=1e-5
        )
    with pytest.raises(ValueError, match="an XLM-E discriminator has no MLM head"):
        model.mlm_logits(ids, mask)
    with pytest.raises(ValueError, match="checkpoint folder holds a masked LM"):
        folder.write(folder.read(tmp_path / "run"), tmp_path / "folder")
