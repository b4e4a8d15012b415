"""The model fits its data without a hunt: `model.vocab_size=0` takes the size of the run's
tokenizer (a store's, a given SentencePiece model's, the workdir's); a size that does not match,
or one the tokenizer sample cannot give, is an error naming the key and the value to set."""

import json
import re
import shutil

import jax
import pytest

from tests.tiny import prepare_store, udhr_subset
from xlpretrain.data.tokenizer import Tokenizer
from xlpretrain.training import trainer as trainer_lib
from xlpretrain.training.config import ConfigError
from xlpretrain.training.plan import resolve


@pytest.fixture(scope="module")
def store(udhr, udhr_tokenizer_path, tmp_path_factory):
    corpus = udhr_subset(udhr, tmp_path_factory.mktemp("corpus"), ("eng", "fra"))
    out = tmp_path_factory.mktemp("store") / "store"
    prepare_store(corpus, out, udhr_tokenizer_path)
    return out


def store_config(udhr_run_config, store, vocab_size):
    cfg = udhr_run_config(model__vocab_size=vocab_size)
    cfg.data.update(mono_dir="", parallel_dir="", store=str(store))
    cfg.tokenizer.path = ""
    return cfg


def test_a_store_sets_the_vocabulary_of_a_model_left_to_it(udhr_run_config, store, tmp_path):
    workdir = tmp_path / "run"
    trainer = trainer_lib.build(resolve(store_config(udhr_run_config, store, 0)), str(workdir))
    trainer.checkpointer.close()
    assert trainer.plan.model.vocab_size == 1002
    rows = {leaf.shape[0] for leaf in jax.tree.leaves(trainer.training.state.params)}
    assert 1024 in rows and 8064 not in rows  # 1002 ids padded to a multiple of 128
    # The workdir records the size, so an export or `xlpretrain.load` reads a whole model,
    # and a resumed run that again leaves it to the tokenizer changes nothing.
    assert json.loads((workdir / "config.json").read_text())["model"]["vocab_size"] == 1002
    again = trainer_lib.build(resolve(store_config(udhr_run_config, store, 0)), str(workdir))
    again.checkpointer.close()


def test_a_size_the_tokenizer_does_not_have_names_the_flag(udhr_run_config, store, tmp_path):
    with pytest.raises(ConfigError) as error:
        trainer_lib.build(
            resolve(store_config(udhr_run_config, store, 8002)), str(tmp_path / "run")
        )
    message = str(error.value)
    assert message.startswith("config key 'model.vocab_size': 8002, but the tokenizer ")
    assert "has 1002 ids: set --config.model.vocab_size=1002 (or 0" in message


def test_a_run_that_trains_its_tokenizer_needs_a_size(udhr_run_config, tmp_path):
    cfg = udhr_run_config(model__vocab_size=0)
    cfg.tokenizer.path = ""
    with pytest.raises(ConfigError, match="'model.vocab_size': 0 takes the size of the run's"):
        trainer_lib.build(resolve(cfg), str(tmp_path / "run"))


def test_a_size_the_sample_cannot_give_names_the_keys_that_give_it(udhr_run_config, tmp_path):
    """The message names the size and the coverage by the keys a run sets, and lowering the
    coverage as it suggests lets the same size train."""
    cfg = udhr_run_config(model__vocab_size=1002)  # fewer ids than the sample's characters
    cfg.tokenizer.update(path="", sentences_per_language=5)
    with pytest.raises(ConfigError) as error:
        trainer_lib.build(resolve(cfg), str(tmp_path / "run"))
    message = str(error.value)
    assert re.match(r"config key 'model.vocab_size': vocab_size=1002 is too small .* >=", message)
    assert re.findall(r"--config\.([\w.]+)", message) == [
        "model.vocab_size",
        "tokenizer.character_coverage",
    ]
    cfg.tokenizer.character_coverage = 0.98
    plan = resolve(cfg)
    assert plan.corpus.character_coverage == 0.98
    trainer_lib.build(plan, str(tmp_path / "covered"))
    assert Tokenizer.load(tmp_path / "covered" / "tokenizer.model").vocab_size == 1002


def test_programs_without_a_workdir_size_the_model_from_the_tokenizer_they_name(
    udhr_run_config, udhr_tokenizer_path, tmp_path, monkeypatch
):
    """`bench` and `aot` build the model with no workdir: 0 takes `tokenizer.path`'s size, and
    a `tokenizer.model` that happens to lie in the current folder is not theirs."""
    from xlpretrain import aot

    cfg = udhr_run_config(model__vocab_size=0)
    assert resolve(cfg).sized(workdir=None).model.vocab_size == 1002
    cfg.tokenizer.path = ""
    shutil.copy(udhr_tokenizer_path, tmp_path / "tokenizer.model")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="'model.vocab_size': 0 takes the size"):
        aot.size_step(resolve(cfg), 1)


def test_a_missing_tokenizer_is_named_by_the_key_that_points_to_it(udhr_run_config, tmp_path):
    cfg = udhr_run_config(model__vocab_size=0)
    cfg.tokenizer.path = ""
    cfg.data.update(mono_dir="", parallel_dir="", store=str(tmp_path / "no_store"))
    with pytest.raises(ConfigError, match="config key 'data.store': no file .*no_store"):
        resolve(cfg).sized(workdir=None)
    cfg.data.store, cfg.init.checkpoint = "", str(tmp_path)
    with pytest.raises(ConfigError, match=f"{tmp_path} has no tokenizer.model"):
        resolve(cfg).sized(workdir=None)
