"""VECO → Hugging Face ``EncoderDecoderModel``: loading, the layer mapping, and numerics of the
encoder, the plug-in as cross-attention, and the whole decoder."""

import dataclasses
import json

import flax.linen as nn
import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import xlpretrain  # noqa: E402
from tests.test_convert import assert_close_at_tokens, random_params  # noqa: E402
from xlpretrain import masks  # noqa: E402
from xlpretrain.api import hf_positions  # noqa: E402
from xlpretrain.convert import folder, to_hf, to_hf_seq2seq  # noqa: E402
from xlpretrain.convert.__main__ import main  # noqa: E402
from xlpretrain.data.tokenizer import train_tokenizer  # noqa: E402
from xlpretrain.model.attention import MultiHeadAttention  # noqa: E402
from xlpretrain.model.config import ModelConfig  # noqa: E402
from xlpretrain.model.encoder import MaskedLM  # noqa: E402
from xlpretrain.model.layers import layer_norm  # noqa: E402

CONFIG = ModelConfig(
    vocab_size=48, hidden_size=32, num_layers=3, num_heads=4, mlp_dim=37, cross_attention=True
)
TEXTS = {
    "en": [
        "All human beings are born free and equal in dignity and rights.",
        "They are endowed with reason and conscience.",
        "No one shall be held in slavery or servitude.",
    ],
    "de": [
        "Alle Menschen sind frei und gleich an Würde und Rechten geboren.",
        "Sie sind mit Vernunft und Gewissen begabt.",
        "Niemand darf in Sklaverei oder Leibeigenschaft gehalten werden.",
    ],
}


@pytest.fixture(scope="module")
def veco(tmp_path_factory):
    """A VECO model (random params, plug-in in every layer) as a checkpoint folder."""
    root = tmp_path_factory.mktemp("veco")
    tokenizer = train_tokenizer(TEXTS, root / "tiny.model", CONFIG.vocab_size)
    model = folder.Pretrained(CONFIG, random_params(CONFIG), tokenizer)
    folder.write(model, root / "ours")
    return model, root


@pytest.fixture(scope="module", params=[None, 2], ids=["all-layers", "last-2-layers"])
def exported(veco, request):
    """The export with the decoder from all layers (default) or the last two; loaded."""
    _, root = veco
    dst = root / f"hf-{request.param}"
    to_hf_seq2seq(root / "ours", dst, decoder_layers=request.param)
    loaded, info = transformers.EncoderDecoderModel.from_pretrained(dst, output_loading_info=True)
    count = request.param or CONFIG.num_layers
    return loaded.eval(), info, dst, range(CONFIG.num_layers - count, CONFIG.num_layers)


def batch(seed, lengths=(9, 6)):
    """A right-padded ``<s> … </s>`` batch and its mask; rows of the same lengths per call."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, CONFIG.vocab_size, (len(lengths), max(lengths)))
    mask = np.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, 0], ids[row, length - 1], ids[row, length:] = 0, 2, 1
        mask[row, :length] = 1
    return ids, mask


def test_loads_without_missing_weights_and_ties_the_decoder_head(exported, veco):
    model, info, dst, layers = exported
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert not info["mismatched_keys"]
    config = model.config
    assert (config.decoder_start_token_id, config.pad_token_id, config.eos_token_id) == (0, 1, 2)
    assert config.vocab_size == CONFIG.vocab_size
    assert config.decoder.num_hidden_layers == len(layers)
    assert config.decoder.is_decoder and config.decoder.add_cross_attention
    decoder = model.decoder
    assert decoder.lm_head.decoder.weight is decoder.roberta.embeddings.word_embeddings.weight
    words = veco[0].params["embeddings"]["word_embeddings"]["embedding"]
    for embeddings in (model.encoder.embeddings, decoder.roberta.embeddings):
        np.testing.assert_array_equal(embeddings.word_embeddings.weight.detach().numpy(), words)
    text = TEXTS["de"][1]
    hf_ids = transformers.AutoTokenizer.from_pretrained(dst)(text)["input_ids"]
    assert hf_ids == [0, *veco[0].tokenizer.encode(text).tolist(), 2]
    generated = model.generate(torch.tensor([hf_ids]), max_new_tokens=3)
    assert generated[0, 0] == config.decoder_start_token_id


def test_decoder_layers_are_our_last_layers_with_the_plug_in(exported, veco):
    model, _, _, layers = exported
    ours = veco[0].params["encoder"]["layers"]
    size = CONFIG.hidden_size

    def weight(module):
        return module.weight.detach().numpy()

    for j, i in enumerate(layers):
        hf_layer = model.decoder.roberta.encoder.layer[j]
        cross = hf_layer.crossattention
        for name in ("query", "key", "value"):  # [out, in] ← [in, heads, kv]
            kernel = ours["cross_attention"][name]["kernel"][i]
            np.testing.assert_array_equal(
                weight(getattr(cross.self, name)), kernel.reshape(size, size).T
            )
            np.testing.assert_array_equal(
                getattr(cross.self, name).bias.detach().numpy(),
                ours["cross_attention"][name]["bias"][i].reshape(-1),
            )
        out = ours["cross_attention"]["out"]["kernel"][i]  # [heads, kv, out]
        np.testing.assert_array_equal(weight(cross.output.dense), out.reshape(size, size).T)
        np.testing.assert_array_equal(
            weight(cross.output.LayerNorm), ours["cross_attention_norm"]["scale"][i]
        )
        np.testing.assert_array_equal(  # the rest of the layer is ours too
            weight(hf_layer.intermediate.dense), ours["mlp"]["wi"]["kernel"][i].T
        )
    assert not any(hasattr(layer, "crossattention") for layer in model.encoder.encoder.layer)


def test_encoder_is_the_plain_stream(exported, veco):
    model, _, _, _ = exported
    ids, mask = batch(0)
    with torch.no_grad():
        out = model.encoder(
            torch.tensor(ids), attention_mask=torch.tensor(mask), output_hidden_states=True
        )
    ours = xlpretrain.load(veco[1] / "ours").hidden_states(ids, mask)
    assert_close_at_tokens(ours, np.stack([h.numpy() for h in out.hidden_states]), mask)


class PlugIn(nn.Module):
    """Our cross-attention sub-layer as ``EncoderLayer`` runs it: LN(x + attn(x, memory))."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x, memory):
        ones = {"segment_ids": np.ones(x.shape[:2], np.int32)}
        h = MultiHeadAttention(self.config, name="cross_attention")(
            x,
            memory,
            mask_fn=masks.mmlm,
            q_meta=ones,
            k_meta={"segment_ids": np.ones(memory.shape[:2], np.int32)},
            deterministic=True,
        )
        return layer_norm(self.config, "cross_attention_norm")(x + h)


def test_hf_cross_attention_computes_our_plug_in(exported, veco):
    model, _, _, layers = exported
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, CONFIG.hidden_size)).astype(np.float32)
    memory = rng.normal(size=(2, 7, CONFIG.hidden_size)).astype(np.float32)
    stacked = veco[0].params["encoder"]["layers"]
    for j, i in enumerate(layers):
        params = {
            name: jax.tree.map(lambda p, i=i: p[i], stacked[name])
            for name in ("cross_attention", "cross_attention_norm")
        }
        with jax.default_matmul_precision("float32"):
            want = np.asarray(jax.jit(PlugIn(CONFIG).apply)({"params": params}, x, memory))
        with torch.no_grad():
            got, _ = model.decoder.roberta.encoder.layer[j].crossattention(
                torch.tensor(x), None, torch.tensor(memory), None
            )
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)


def test_decoder_is_our_s_stream_with_causal_self_attention(exported, veco):
    """The HF decoder's logits = our last layers run on the target with the source's last
    plain-stream states as the plug-in's memory and causal self-attention (CS-MLM's s stream)."""
    model, _, _, layers = exported
    pretrained = veco[0]
    (source, mask), (target, _) = batch(2), batch(3)  # same lengths: memory rows align
    memory = xlpretrain.load(veco[1] / "ours").hidden_states(source, mask, layer=-1)
    config = dataclasses.replace(CONFIG, num_layers=len(layers))
    last = jax.tree.map(lambda p: p[layers.start :], pretrained.params["encoder"]["layers"])
    params = {**pretrained.params, "encoder": {"layers": last}}
    positions = hf_positions(target, CONFIG.pad_token_id)

    def s_stream(module):
        hidden = module(
            target,
            positions,
            mask_fn=masks.veco_causal,
            mask_meta={"segment_ids": mask, "positions": positions},
            memory=memory,
            cross_mask_fn=masks.mmlm,
        )
        return module.mlm_logits(hidden)

    with jax.default_matmul_precision("float32"):
        want = np.asarray(
            jax.jit(lambda p: MaskedLM(config).apply({"params": p}, method=s_stream))(params)
        )
    with torch.no_grad():
        got = model(
            input_ids=torch.tensor(source),
            attention_mask=torch.tensor(mask),
            decoder_input_ids=torch.tensor(target),
            decoder_attention_mask=torch.tensor(mask),
        ).logits.numpy()
    assert_close_at_tokens(got, want, mask)


@pytest.mark.parametrize("layers", [0, 4])
def test_decoder_layers_out_of_range(veco, tmp_path, layers):
    _, root = veco
    with pytest.raises(ValueError, match=f"decoder_layers={layers}: the model has 3 layers"):
        to_hf_seq2seq(root / "ours", tmp_path / "hf", decoder_layers=layers)
    assert not (tmp_path / "hf").exists()


def test_models_without_the_plug_in_are_refused_and_to_hf_points_here(veco, tmp_path):
    plain = dataclasses.replace(CONFIG, cross_attention=False)
    folder.write(folder.Pretrained(plain, random_params(plain)), tmp_path / "plain")
    with pytest.raises(ValueError, match="needs a model with VECO's plug-in cross-attention"):
        to_hf_seq2seq(tmp_path / "plain", tmp_path / "hf")
    with pytest.raises(ValueError, match="cross_attention=True .*to-hf-seq2seq"):
        to_hf(veco[1] / "ours", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_cli(veco, tmp_path, capsys):
    _, root = veco
    main(["to-hf-seq2seq", str(root / "ours"), str(tmp_path / "hf"), "--decoder-layers", "1"])
    assert "encoder 3 layers, decoder 1 layers" in capsys.readouterr().out
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["EncoderDecoderModel"]
    assert config["decoder"]["num_hidden_layers"] == 1
    with pytest.raises(ValueError, match="decoder_layers=9"):
        main(["to-hf-seq2seq", str(root / "ours"), str(tmp_path / "x"), "--decoder-layers", "9"])
    assert not (tmp_path / "x").exists()
