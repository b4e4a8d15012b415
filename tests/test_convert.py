"""Hugging Face interop: parity with `transformers`, exact round trips, workdir export, errors."""

import dataclasses
import json
import re
import subprocess
import sys

import flax.linen as nn
import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

import xlpretrain  # noqa: E402
from tests import tiny  # noqa: E402
from tests.test_api import xlm_e_workdir  # noqa: E402
from xlpretrain.convert import folder, from_hf, to_hf  # noqa: E402
from xlpretrain.convert.__main__ import main  # noqa: E402
from xlpretrain.model import vocab  # noqa: E402
from xlpretrain.model.config import ModelConfig  # noqa: E402
from xlpretrain.model.encoder import init_params  # noqa: E402
from xlpretrain.training import trainer as trainer_lib  # noqa: E402
from xlpretrain.training.plan import resolve  # noqa: E402

SHAPES = {
    "small": dict(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=37,
        vocab_size=99,
    ),  # fmt: skip
    "deeper": dict(
        num_hidden_layers=3,
        hidden_size=24,
        num_attention_heads=2,
        intermediate_size=40,
        vocab_size=57,
        max_position_embeddings=40,
    ),  # fmt: skip
}


def hf_model(shape="small", seed=0, architecture="XLMRobertaForMaskedLM"):
    """A random HF model in eval mode, every parameter (LayerNorms and biases too) non-trivial."""
    torch.manual_seed(seed)
    config = transformers.XLMRobertaConfig(
        **{"max_position_embeddings": 514, **SHAPES[shape]},
        type_vocab_size=1,
        layer_norm_eps=1e-5,
    )
    model = getattr(transformers, architecture)(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.3)
    return model


def batch_with_padding(vocab_size, lengths=(11, 7, 3), seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, vocab_size, (len(lengths), max(lengths)))
    mask = np.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, 0], ids[row, length - 1] = 0, 2
        ids[row, length:] = 1
        mask[row, :length] = 1
    return ids, mask


def hf_outputs(model, ids, mask):
    with torch.no_grad():
        out = model(torch.tensor(ids), attention_mask=torch.tensor(mask), output_hidden_states=True)
    return out.logits.numpy(), np.stack([h.numpy() for h in out.hidden_states])


def assert_close_at_tokens(got, want, mask, rtol=1e-4):
    """Equal at real tokens (padding positions are unspecified), relative to the output scale."""
    real = mask.astype(bool)
    np.testing.assert_allclose(got[..., real, :], want[..., real, :], rtol=0, atol=rtol * 10)
    scale = np.abs(want[..., real, :]).max()
    assert np.abs(got[..., real, :] - want[..., real, :]).max() <= rtol * scale


def edit_tensors(path, edit):
    file = path / "model.safetensors"
    tensors = safetensors_numpy.load_file(file)
    edit(tensors)
    safetensors_numpy.save_file(tensors, file, metadata={"format": "pt"})


def edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The small HF model, saved, and converted once."""
    root = tmp_path_factory.mktemp("small")
    model = hf_model()
    model.save_pretrained(root / "hf")
    from_hf(root / "hf", root / "ours")
    return model, root


@pytest.mark.parametrize(
    "shape, weights", [("small", "safetensors"), ("deeper", "safetensors"), ("small", "bin")]
)
def test_from_hf_matches_transformers_logits_and_every_layer(shape, weights, tmp_path):
    model = hf_model(shape, seed=1)
    model.save_pretrained(tmp_path / "hf")
    if weights == "bin":  # what transformers < 5 wrote: a torch pickle with the tied copies
        (tmp_path / "hf" / "model.safetensors").unlink()
        torch.save(model.state_dict(), tmp_path / "hf" / "pytorch_model.bin")
        assert "lm_head.decoder.weight" in model.state_dict()
    from_hf(tmp_path / "hf", tmp_path / "ours")
    ours = xlpretrain.load(tmp_path / "ours")
    ids, mask = batch_with_padding(model.config.vocab_size)
    logits, hidden = hf_outputs(model, ids, mask)
    assert_close_at_tokens(ours.mlm_logits(ids, mask), logits, mask)
    got_hidden = ours.hidden_states(ids, mask)
    assert got_hidden.shape == (len(hidden), *ids.shape, model.config.hidden_size)
    assert_close_at_tokens(got_hidden, hidden, mask)


def test_checkpoint_folder_holds_the_scanned_init_tree(small):
    _, root = small
    model = folder.read(root / "ours")
    config = ModelConfig(**json.loads((root / "ours" / "model.json").read_text()))
    assert config.layer_norm_eps == 1e-5 and config.max_positions == 514 and config.scan_layers
    expected = nn.unbox(jax.eval_shape(lambda k: init_params(config, k), jax.random.key(0)))
    assert jax.tree.structure(model.params) == jax.tree.structure(expected)
    for got, want in zip(jax.tree.leaves(model.params), jax.tree.leaves(expected), strict=True):
        assert got.shape == want.shape and got.dtype == np.float32


def test_to_hf_then_from_hf_is_exact_and_loads_without_missing_keys(small, tmp_path):
    original, root = small
    to_hf(root / "ours", tmp_path / "hf")
    modes = {f.name: f.stat().st_mode & 0o777 for f in (tmp_path / "hf").iterdir()}
    assert modes["model.safetensors"] == modes["config.json"], modes  # not owner-only
    exported, info = transformers.AutoModelForMaskedLM.from_pretrained(
        tmp_path / "hf", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert not info["mismatched_keys"]
    ids, mask = batch_with_padding(original.config.vocab_size)
    np.testing.assert_array_equal(
        hf_outputs(exported.eval(), ids, mask)[0], hf_outputs(original, ids, mask)[0]
    )
    from_hf(tmp_path / "hf", tmp_path / "again")
    before, after = folder.read(root / "ours"), folder.read(tmp_path / "again")
    assert before.config == after.config
    jax.tree.map(np.testing.assert_array_equal, before.params, after.params)


def random_params(config, seed=0):
    """Random float32 params of ``config`` (NumPy, no compilation)."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda x: rng.normal(0.0, 0.3, x.shape).astype(np.float32), folder.abstract_params(config)
    )


@pytest.mark.parametrize("relative_position", ["none", "gated"])
def test_unrolled_layers_stack_into_the_scanned_layout(relative_position):
    """Workdirs trained with scan_layers=False export too: their layers_i are stacked, and the
    encoder's shared relative-position table stays beside them."""
    config = ModelConfig(
        vocab_size=20,
        hidden_size=8,
        num_layers=3,
        num_heads=2,
        mlp_dim=12,
        scan_layers=False,
        relative_position=relative_position,
    )
    unrolled = random_params(config)
    stacked = folder.stack_layers(unrolled, config)
    expected = folder.abstract_params(dataclasses.replace(config, scan_layers=True))
    assert jax.tree.structure(stacked) == jax.tree.structure(expected)
    for i in range(config.num_layers):
        layer_i = jax.tree.map(lambda x, i=i: x[i], stacked["encoder"]["layers"])
        jax.tree.map(np.testing.assert_array_equal, layer_i, unrolled["encoder"][f"layers_{i}"])
    if relative_position != "none":
        np.testing.assert_array_equal(
            stacked["encoder"]["relative_position_table"],
            unrolled["encoder"]["relative_position_table"],
        )


@pytest.fixture(scope="module")
def workdir(udhr, udhr_tokenizer_path, tmp_path_factory):
    """A real training workdir: built by the trainer, then its (perturbed) initial state saved
    by the trainer's checkpointer at step 1 — the files a run writes, without compiling a step."""
    import grain

    root = tmp_path_factory.mktemp("workdir")
    subset = root / "mono"
    subset.mkdir()
    for lang in sorted(p.name for p in (udhr / "mono").glob("*.txt"))[:3]:
        (subset / lang).write_text((udhr / "mono" / lang).read_text())
    cfg = tiny.run_config(
        tokenizer=udhr_tokenizer_path,
        data__mono_dir=str(subset),
        data__batch_size=2,
        objectives={"mmlm": 1.0},
    )
    trainer = trainer_lib.build(resolve(cfg), str(root / "run"), jax.devices()[:1])
    state = trainer.training.state
    rng = np.random.default_rng(7)  # NumPy noise: eager jax.random would compile per shape
    state = state.replace(
        params=jax.tree.map(
            lambda x: jax.device_put(np.asarray(x) + rng.normal(0, 0.1, x.shape), x.sharding),
            state.params,
        )
    )
    try:
        trainer.checkpointer.save(1, state, iter(grain.MapDataset.range(1).to_iter_dataset()))
        trainer.checkpointer.wait()
    finally:
        trainer.checkpointer.close()
    return root / "run"


def test_to_hf_exports_a_training_workdir(workdir, tmp_path):
    to_hf(workdir, tmp_path / "hf")
    exported, info = transformers.AutoModelForMaskedLM.from_pretrained(
        tmp_path / "hf", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ours = xlpretrain.load(workdir)
    text = "Everyone has the right to life, liberty and security of person."
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    ids = [0, *ours.tokenizer.encode(text).tolist(), 2]
    assert hf_tokenizer(text)["input_ids"] == ids
    ids, mask = np.array([ids, ids[:5] + [1] * (len(ids) - 5)]), np.zeros((2, len(ids)), int)
    mask[0], mask[1, :5] = 1, 1
    assert_close_at_tokens(
        ours.mlm_logits(ids, mask), hf_outputs(exported.eval(), ids, mask)[0], mask
    )


def test_to_hf_exports_the_xlm_e_discriminator_as_a_bare_encoder(tmp_path):
    _, trained = xlm_e_workdir(tmp_path / "run", relative_position="none")
    to_hf(tmp_path / "run", tmp_path / "hf")
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf_config["architectures"] == ["XLMRobertaModel"]
    exported, info = transformers.AutoModel.from_pretrained(
        tmp_path / "hf", output_loading_info=True
    )
    assert isinstance(exported, transformers.XLMRobertaModel)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert not info["mismatched_keys"]
    ours = xlpretrain.load(tmp_path / "run")
    ids, mask = batch_with_padding(ours.config.vocab_size)
    with torch.no_grad():
        out = exported.eval()(
            torch.tensor(ids), attention_mask=torch.tensor(mask), output_hidden_states=True
        )
    assert_close_at_tokens(
        ours.hidden_states(ids, mask), np.stack([h.numpy() for h in out.hidden_states]), mask
    )
    # The discriminator, not the generator: from-hf gives back its embeddings and encoder
    # (the word embeddings without the rows the run padded the vocabulary with).
    back = from_hf(tmp_path / "hf", tmp_path / "back", allow_missing_head=True)
    trained = vocab.with_rows(trained, ours.config.vocab_size)
    for name in ("embeddings", "encoder"):
        jax.tree.map(np.testing.assert_array_equal, back.params[name], trained[name])


def test_to_hf_refuses_xlm_e_relative_positions(tmp_path):
    xlm_e_workdir(tmp_path / "run", relative_position="gated")
    with pytest.raises(
        ValueError,
        match="XLMRobertaModel cannot express .*relative_position='gated' .*no relative position",
    ):
        to_hf(tmp_path / "run", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_a_workdir_is_read_by_its_recorded_family_without_the_objectives(tmp_path):
    """The trainer records the module it trained; readers never work it out from objective
    names (a renamed objective cannot change how a workdir reads)."""
    run = tmp_path / "run"
    xlm_e_workdir(run, relative_position="none")
    family_file = run / folder.FAMILY_FILE
    assert json.loads(family_file.read_text()) == {
        "family": "electra",
        "layer_features": {"layer_type": "post_ln", "token_type_rows": 1, "positions_from": 2},
    }
    run_config = json.loads((run / "config.json").read_text())
    run_config["objectives"] = {"renamed": 1.0}
    (run / "config.json").write_text(json.dumps(run_config))
    script = (
        "import sys; from xlpretrain.convert import folder; "
        f"print(folder.read({str(run)!r}).kind, 'xlpretrain.objectives' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [folder.DISCRIMINATOR, "False"]
    family_file.write_text('{"family": "gpt"}')
    with pytest.raises(ValueError, match=r"model_family.json: expected .*'masked_lm', 'electra'"):
        folder.read(run)
    family_file.unlink()
    with pytest.raises(FileNotFoundError, match=r"model_family.json is missing"):
        folder.read(run)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(model_type="gpt2"), "unsupported architecture: model_type='gpt2'"),
        (
            dict(architectures=["XLMRobertaForSequenceClassification"]),
            r"unsupported architecture \['XLMRobertaForSequenceClassification'\]",
        ),
        (dict(hidden_act="relu"), "hidden_act='relu' is not supported"),
        (dict(position_embedding_type="relative_key"), "position_embedding_type="),
        (dict(intermediate_size=36), r"intermediate.dense.weight has shape \(37, 32\)"),
    ],
)
def test_from_hf_rejects_what_it_cannot_convert(small, tmp_path, change, message):
    _, root = small
    (tmp_path / "hf").mkdir()
    for file in (root / "hf").iterdir():
        (tmp_path / "hf" / file.name).write_bytes(file.read_bytes())
    edit_config(tmp_path / "hf", **change)
    with pytest.raises(ValueError, match=message):
        from_hf(tmp_path / "hf", tmp_path / "ours")
    assert not (tmp_path / "ours").exists()


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda t: t.update({"roberta.encoder.layer.1.output.dense.weight": np.zeros((32, 5))}),
            r"roberta.encoder.layer.1.output.dense.weight has shape \(32, 5\), .* need \(32, 37\)",
        ),
        (
            lambda t: t.update(
                {"lm_head.decoder.weight": t["lm_head.bias"][:, None] * np.ones(32)}
            ),
            "lm_head.decoder.weight differs from roberta.embeddings.word_embeddings.weight",
        ),
        (lambda t: t.pop("roberta.embeddings.LayerNorm.bias"), "missing tensor.*LayerNorm.bias"),
        (lambda t: t.update({"classifier.bias": np.zeros(2)}), "unexpected tensor.*classifier"),
    ],
)
def test_from_hf_names_the_offending_tensor(small, tmp_path, edit, message):
    original, root = small
    original.save_pretrained(tmp_path / "hf")
    edit_tensors(tmp_path / "hf", edit)
    with pytest.raises(ValueError, match=message):
        from_hf(tmp_path / "hf", tmp_path / "ours")


def test_bare_encoder_needs_allow_missing_head(tmp_path):
    encoder = hf_model(architecture="XLMRobertaModel")  # no lm_head, plus a pooler
    encoder.save_pretrained(tmp_path / "hf")
    with pytest.raises(ValueError, match="--allow-missing-head"):
        from_hf(tmp_path / "hf", tmp_path / "ours")
    model = from_hf(tmp_path / "hf", tmp_path / "ours", allow_missing_head=True)
    np.testing.assert_array_equal(
        model.params["embeddings"]["word_embeddings"]["embedding"],
        encoder.embeddings.word_embeddings.weight.detach().numpy(),
    )
    np.testing.assert_array_equal(model.params["lm_head"]["bias"], 0.0)
    assert folder.read(tmp_path / "ours").params["lm_head"]["dense"]["kernel"].shape == (32, 32)


def test_to_hf_rejects_language_embeddings_and_missing_folders(tmp_path):
    config = ModelConfig(vocab_size=20, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=8)
    with_languages = dataclasses.replace(config, num_languages=3)
    folder.write(
        folder.Pretrained(with_languages, random_params(with_languages)), tmp_path / "ours"
    )
    with pytest.raises(ValueError, match="num_languages=3.*language embeddings"):
        to_hf(tmp_path / "ours", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    for convert in (from_hf, to_hf):
        with pytest.raises(FileNotFoundError, match="no such folder"):
            convert(tmp_path / "missing", tmp_path / "out")
    with pytest.raises(ValueError, match="neither an xlpretrain checkpoint folder"):
        to_hf(tmp_path, tmp_path / "out")
    with pytest.raises(FileExistsError, match="already exists"):
        to_hf(tmp_path / "ours", tmp_path / "ours")


def test_cli_converts_without_importing_torch(small, tmp_path):
    _, root = small
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "xlpretrain.convert", "from-hf"]
        + [str(root / "hf"), str(tmp_path / "ours")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "wrote" in result.stdout and "2 layers" in result.stdout
    assert not re.search(r"\|\s+torch$", result.stderr, re.M), "safetensors import needs no torch"
    assert (tmp_path / "ours" / "model.json").is_file()


def test_cli_errors_name_the_path_and_write_nothing(tmp_path):
    """(The one line on stderr and exit status 2 are the program's: tests/test_programs.py.)"""
    with pytest.raises(FileNotFoundError, match=f"no such folder: {tmp_path / 'missing'}"):
        main(["to-hf", str(tmp_path / "missing"), str(tmp_path / "hf")])
    assert not (tmp_path / "hf").exists()
