"""Checkpoint merging (`python -m xlpretrain.convert merge`): averages checked on parameters one
can compute by hand, every kind of source (folder, workdir, `WORKDIR/checkpoints/N`), models
that differ refused by name, and the merged folder used as any checkpoint folder is: loaded,
exported and warm-starting a run."""

import dataclasses
import json
import pathlib

import grain
import jax
import numpy as np
import pytest

import xlpretrain
from tests import tiny
from tests.test_api import TEXTS, xlm_e_workdir
from xlpretrain.convert import folder, merge
from xlpretrain.convert.__main__ import main
from xlpretrain.convert.merging import check_same_model
from xlpretrain.data.tokenizer import HFTokenizer, Tokenizer, train_tokenizer
from xlpretrain.model import vocab
from xlpretrain.model.config import ModelConfig, ModelFamily
from xlpretrain.training import trainer as trainer_lib
from xlpretrain.training.checkpoint import Checkpointer
from xlpretrain.training.plan import resolve

STEPS = {1: 1.0, 2: 3.0, 3: 5.0}  # the workdir's checkpoints: every parameter this constant


def constant(config: ModelConfig, value: float) -> dict:
    """Params of `config`, every entry `value` (float32)."""
    return jax.tree.map(
        lambda x: np.full(x.shape, value, np.float32), folder.abstract_params(config)
    )


def leaves(path) -> list[np.ndarray]:
    return jax.tree.leaves(folder.read(path).params)


def constant_run(workdir: pathlib.Path, cfg, tokenizer: Tokenizer) -> ModelConfig:
    """`workdir` as the trainer leaves a run of `cfg` (config.json, model_family.json, the
    tokenizer under its kind's name) with checkpoints at steps 1, 2 and 3 whose parameters are
    the constants `STEPS`, saved by the trainer's checkpointer: no step compiled. Returns its
    model config."""
    workdir.mkdir(parents=True)
    (workdir / "config.json").write_text(cfg.to_json_best_effort(indent=2))
    config = resolve(cfg).model
    folder.record_family(workdir, ModelFamily.MASKED_LM, config)
    tokenizer.save(workdir / tokenizer.FILE)
    checkpointer = Checkpointer(workdir / "checkpoints", keep=len(STEPS), async_save=False)
    try:
        for step, value in STEPS.items():
            data = iter(grain.MapDataset.range(1).to_iter_dataset())
            checkpointer.save(step, {"params": constant(config, value)}, data)
    finally:
        checkpointer.close()
    return config


@pytest.fixture(scope="module")
def run(udhr_run_config, udhr_tokenizer_path, tmp_path_factory):
    """`constant_run` of a tiny XLM-R with a SentencePiece model (tokenizer.model). Returns
    (workdir, config, model config)."""
    cfg = udhr_run_config(objectives={"mmlm": 1.0})
    workdir = tmp_path_factory.mktemp("merge") / "run"
    return workdir, cfg, constant_run(workdir, cfg, Tokenizer.load(udhr_tokenizer_path))


@pytest.fixture(scope="module")
def json_run(demo_json_tokenizer_path, tmp_path_factory):
    """`constant_run` of a tiny ModernBERT on the demo corpus whose tokenizer is a
    `tokenizer.json` (mmBERT's kind: the decay-merge flow of docs/modern.md). Returns
    (workdir, config)."""
    cfg = tiny.run_config(
        None,
        demo_json_tokenizer_path,
        objectives={"mmlm": 1.0},
        model__vocab_size=2002,
        model__architecture="modernbert",
        model__absolute_positions=False,
    )
    workdir = tmp_path_factory.mktemp("merge_json") / "run"
    constant_run(workdir, cfg, Tokenizer.load(demo_json_tokenizer_path))
    return workdir, cfg


def test_averages_are_computed_by_hand(run, tmp_path, capsys):
    workdir, _, _ = run
    main(["merge", str(workdir), "--steps", "1,2", "--out", str(tmp_path / "uniform")])
    assert "the average of 2 checkpoints (weights 0.5, 0.5)" in capsys.readouterr().out
    assert all(np.all(leaf == 2.0) for leaf in leaves(tmp_path / "uniform"))  # (1 + 3) / 2

    ones, threes = (str(workdir / "checkpoints" / str(step)) for step in (1, 2))
    main(["merge", ones, threes, "--weights", "3,1", "--out", str(tmp_path / "weighted")])
    assert all(np.all(leaf == 1.5) for leaf in leaves(tmp_path / "weighted"))  # (3·1 + 3) / 4

    # A workdir is its latest checkpoint (5); a merged folder merges again (2).
    merge([workdir, ones, tmp_path / "uniform"], tmp_path / "three")
    assert all(np.all(leaf == (5 + 1 + 2) / 3) for leaf in leaves(tmp_path / "three"))


def test_the_merged_folder_is_a_checkpoint_folder_of_the_inputs_model(run, tmp_path):
    workdir, _, config = run
    merged = merge([workdir / "checkpoints" / "1", workdir], tmp_path / "merged")
    read = folder.read(tmp_path / "merged")
    # The real vocabulary's rows only, as a from-hf folder: rows padded for sharding are unused.
    unpadded = dataclasses.replace(config, scan_layers=True, vocab_multiple=1)
    assert read.config == unpadded == merged.config
    assert (tmp_path / "merged" / "tokenizer.model").read_bytes() == (
        workdir / "tokenizer.model"
    ).read_bytes()
    assert all(np.all(leaf == 3.0) for leaf in jax.tree.leaves(read.params))  # (1 + 5) / 2


def test_languages_travel_with_the_merged_folder(tmp_path):
    config = ModelConfig(
        vocab_size=40, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, num_languages=2
    )
    for name, value in (("a", 0.0), ("b", 1.0)):
        model = folder.Pretrained(config, constant(config, value), languages=("deu", "eng"))
        folder.write(model, tmp_path / name)
    merge([tmp_path / "a", tmp_path / "b"], tmp_path / "merged")
    assert json.loads((tmp_path / "merged" / "languages.json").read_text()) == ["deu", "eng"]
    assert folder.read(tmp_path / "merged").languages == ("deu", "eng")
    other = folder.Pretrained(config, constant(config, 0.0), languages=("eng", "fra"))
    folder.write(other, tmp_path / "c")
    with pytest.raises(ValueError, match=r"a and .*c are not .*one model: their languages"):
        merge([tmp_path / "a", tmp_path / "c"], tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def test_checkpoints_of_different_models_are_refused_naming_both(run, tmp_path):
    workdir, _, config = run
    tokenizer = Tokenizer.load(workdir / "tokenizer.model")
    ours = str(workdir / "checkpoints" / "1")
    wider = dataclasses.replace(config, hidden_size=64, mlp_dim=128)
    folder.write(folder.Pretrained(wider, constant(wider, 1.0), tokenizer), tmp_path / "wider")
    folder.write(folder.Pretrained(config, constant(config, 1.0)), tmp_path / "no_tokenizer")
    other = train_tokenizer(TEXTS, tmp_path / "other.model", 64)  # any other model will do
    folder.write(folder.Pretrained(config, constant(config, 1.0), other), tmp_path / "other")
    for name, message in (
        ("wider", r"the model config differs in hidden_size \(32 vs 64\), mlp_dim \(64 vs 128\)"),
        ("no_tokenizer", r"no_tokenizer has no tokenizer, the other has tokenizer.model"),
        ("other", r"their tokenizers \(tokenizer.model\) differ"),
    ):
        with pytest.raises(ValueError, match=f"{ours} and .*{name} are not checkpoints of one"):
            main(["merge", ours, str(tmp_path / name), "--out", str(tmp_path / "out")])
        with pytest.raises(ValueError, match=message):
            merge([ours, tmp_path / name], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_different_parameter_tree_or_shape_is_named():
    """One model config means one tree; the check stands on its own all the same."""
    config = ModelConfig(vocab_size=40, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32)
    a = folder.Pretrained(config, constant(config, 0.0))
    params = constant(config, 0.0)
    params["lm_head"]["bias"] = np.zeros(41, np.float32)
    with pytest.raises(ValueError, match=r"A and B .*lm_head/bias has shape \(40,\) vs \(41,\)"):
        check_same_model(a, dataclasses.replace(a, params=params), "A", "B")
    del params["lm_head"]
    with pytest.raises(ValueError, match="lm_head/bias is only in A"):
        check_same_model(a, dataclasses.replace(a, params=params), "A", "B")


def test_what_merge_is_given_is_checked_before_anything_is_read(run, tmp_path):
    workdir, _, _ = run
    out = str(tmp_path / "out")
    for argv, message in (
        ([str(workdir), "--steps", "1,4"], r"no finished checkpoint at step\(s\) 4; .*1, 2, 3"),
        ([str(workdir), "--steps", "1,1"], "a step is named twice"),
        ([str(workdir), str(workdir), "--steps", "1,2"], "--steps picks .* one workdir, not 2"),
        ([str(tmp_path), "--steps", "1,2"], "is not a training workdir"),
        ([str(workdir), "--steps", "1,2", "--weights", "1,2,3"], "3 weights for 2 checkpoints"),
        ([str(workdir), "--steps", "1,2", "--weights", "1,-1"], r"each must be .* >= 0"),
        ([str(workdir), "--steps", "1,2", "--weights", "0,0"], "their sum > 0"),
        ([str(workdir)], "two or more checkpoints, got 1"),
    ):
        with pytest.raises(ValueError, match=message):
            main(["merge", *argv, "--out", out])
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit):  # argparse's one-line usage error
        main(["merge", str(workdir), "--steps", "1,two", "--out", out])
    with pytest.raises(FileExistsError, match="already exists"):
        main(["merge", str(workdir), "--steps", "1,2", "--out", str(workdir)])


def test_an_xlm_e_discriminator_is_refused(tmp_path):
    xlm_e_workdir(tmp_path / "a", relative_position="none")
    with pytest.raises(ValueError, match=r"a is an XLM-E run, .*holds a masked LM"):
        merge([tmp_path / "a", tmp_path / "a"], tmp_path / "out")


def test_the_merged_folder_loads_exports_and_starts_a_run(run, tmp_path, caplog):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    workdir, cfg, _ = run
    merged = tmp_path / "merged"
    main(["merge", str(workdir), "--steps", "1,2", "--out", str(merged)])

    model = xlpretrain.load(merged)
    ids = np.array([[0, 100, 200, 2]])
    assert model.mlm_logits(ids).shape == (1, 4, model.config.vocab_size)

    main(["to-hf", str(merged), str(tmp_path / "hf")])
    tensors = safetensors_numpy.load_file(tmp_path / "hf" / "model.safetensors")
    assert all(np.all(tensor == 2.0) for tensor in tensors.values())

    cfg = cfg.copy_and_resolve_references()
    cfg.init.checkpoint, cfg.tokenizer.path = str(merged), ""  # its tokenizer comes with it
    with caplog.at_level("INFO", logger="xlpretrain"):
        trainer = trainer_lib.build(resolve(cfg), str(tmp_path / "warm"), jax.devices()[:1])
    trainer.checkpointer.close()
    params = vocab.with_rows(jax.device_get(trainer.training.state.params), model.config.vocab_size)
    assert all(np.all(leaf == 2.0) for leaf in jax.tree.leaves(params))  # the real vocabulary's
    assert "freshly initialised" not in caplog.text


def test_runs_with_a_tokenizer_json_merge_load_and_warm_start(json_run, tmp_path, caplog):
    """The decay-merge flow of docs/modern.md for a run whose tokenizer is a `tokenizer.json`
    (mmBERT's): the merged folder carries that tokenizer, with its special ids, and a run
    started from it trains with them."""
    workdir, cfg = json_run
    merged = tmp_path / "merged"
    main(["merge", str(workdir), "--steps", "1,3", "--out", str(merged)])
    assert (merged / "tokenizer.json").read_bytes() == (workdir / "tokenizer.json").read_bytes()
    assert not (merged / "tokenizer.model").exists()
    ours = Tokenizer.load(workdir / "tokenizer.json")
    model = xlpretrain.load(merged)
    assert model.tokenizer.special == ours.special
    assert model.tokenizer.mask_id == 2001  # the tokenizer.json's, not XLM-R's layout
    assert all(np.all(leaf == 3.0) for leaf in jax.tree.leaves(model.params))  # (1 + 5) / 2

    cfg = cfg.copy_and_resolve_references()
    cfg.init.checkpoint, cfg.tokenizer.path = str(merged), ""  # its tokenizer comes with it
    with caplog.at_level("INFO", logger="xlpretrain"):
        trainer = trainer_lib.build(resolve(cfg), str(tmp_path / "warm"), jax.devices()[:1])
    trainer.checkpointer.close()
    assert (tmp_path / "warm" / "tokenizer.json").read_bytes() == (
        workdir / "tokenizer.json"
    ).read_bytes()
    assert trainer.plan.contexts["mmlm"].special == ours.special
    params = vocab.with_rows(jax.device_get(trainer.training.state.params), 2002)
    assert all(np.all(leaf == 3.0) for leaf in jax.tree.leaves(params))
    assert "freshly initialised" not in caplog.text


def test_tokenizers_of_another_kind_or_other_roles_are_refused(json_run, tmp_path):
    """Two `tokenizer.json`s are one tokenizer only if their text and special tokens by role
    agree; a SentencePiece model is another tokenizer."""
    workdir, _ = json_run
    first = folder.read(workdir)
    text = (workdir / "tokenizer.json").read_text(encoding="utf-8")
    roles = json.loads((workdir / "tokenizer_config.json").read_text(encoding="utf-8"))
    swapped = HFTokenizer(
        text, {HFTokenizer.CONFIG: {**roles, "pad_token": "[MASK]", "mask_token": "[PAD]"}}
    )
    sentencepiece = train_tokenizer(TEXTS, tmp_path / "other.model", 64)
    for name, tokenizer, message in (
        ("swapped", swapped, r"their tokenizers \(tokenizer.json\) differ"),
        ("spm", sentencepiece, r"their tokenizers \(tokenizer.json vs tokenizer.model\) differ"),
    ):
        folder.write(dataclasses.replace(first, tokenizer=tokenizer), tmp_path / name)
        with pytest.raises(ValueError, match=message):
            merge([workdir, tmp_path / name], tmp_path / "out")
    assert not (tmp_path / "out").exists()
