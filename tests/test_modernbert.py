"""ModernBERT / mmBERT interop: parity with transformers' ModernBertForMaskedLM both ways, exact
round trips, the settings conversion refuses, and the local attention window."""

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

from tests.tiny import assert_from_hf_refuses_architecture  # noqa: E402
from xlpretrain import backbones, masks  # noqa: E402
from xlpretrain.convert import folder, from_hf, modernbert, to_hf  # noqa: E402
from xlpretrain.convert.__main__ import main  # noqa: E402
from xlpretrain.data import demo_corpus  # noqa: E402
from xlpretrain.data.tokenizer import Tokenizer, train_tokenizer  # noqa: E402
from xlpretrain.model.encoder import MaskedLM  # noqa: E402

LENGTHS = (11, 7)  # a padded batch: the second row is shorter
TOLERANCE = 1e-5


def hf_config(**overrides):
    """Tiny, with every layer type (global every 2nd layer, the rest local with a window that
    bites) and rotary bases unlike the defaults, so a mix-up of either shows."""
    fields = dict(
        vocab_size=64,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=48,
        num_hidden_layers=5,
        local_attention=4,
        max_position_embeddings=64,
        layer_types=modernbert.layer_types(5, 2),
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 500.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 80.0},
        },
        pad_token_id=1,
        bos_token_id=0,
        cls_token_id=0,
        eos_token_id=2,
        sep_token_id=2,
    )
    return transformers.ModernBertConfig(**{**fields, **overrides})


def hf_model(seed=0):
    """A random HF masked LM in eval mode (eager attention), every weight non-trivial."""
    torch.manual_seed(seed)
    model = transformers.ModernBertForMaskedLM(hf_config(attn_implementation="eager")).eval()
    assert model.config._attn_implementation == "eager"
    with torch.no_grad():
        for name, param in model.named_parameters():
            scale = 1.0 if "norm" in name else 0.0  # norms around 1, the rest around 0
            param.copy_(scale + torch.randn_like(param) * 0.3)
    return model


def padded_batch(vocab_size, seed=0):
    """ids (padding 1), HF's attention mask, and our metadata as the pipeline builds it:
    segment 1 on real tokens and 0 on padding, positions 2, 3, … on real tokens, 1 on padding."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, vocab_size, (len(LENGTHS), max(LENGTHS)))
    mask = np.zeros_like(ids)
    for row, length in enumerate(LENGTHS):
        ids[row, length:] = 1
        mask[row, :length] = 1
    positions = np.where(mask == 1, 2 + np.arange(ids.shape[1]), 1)
    return ids, mask, {"segment_ids": mask, "positions": positions}


def our_logits(config, params, ids, meta):
    def forward(module):
        hidden = module(ids, meta["positions"], mask_fn=masks.mmlm, mask_meta=meta)
        return module.mlm_logits(hidden)

    return np.asarray(MaskedLM(config).apply({"params": params}, method=forward))


def hf_logits(model, ids, mask):
    with torch.no_grad():
        return model(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()


def assert_equal_on_real_tokens(got, want, mask):
    """Equal at real tokens (padding's outputs are unspecified) within ``TOLERANCE`` of the
    outputs' scale: float32 noise alone (transformers' own float32 logits are 2e-6 of it from
    its float64 ones here) rules out an absolute bound on outputs as large as 6."""
    real = mask.astype(bool)
    scale = np.abs(want[real]).max()
    np.testing.assert_allclose(got[real], want[real], rtol=0, atol=TOLERANCE * scale)


def random_params(config, seed=0):
    """Random float32 params of ``config``; norms around 1, everything else around 0."""
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        centre = 1.0 if jax.tree_util.keystr(path).endswith("['scale']") else 0.0
        return (centre + rng.normal(0.0, 0.3, leaf.shape)).astype(np.float32)

    return jax.tree_util.tree_map_with_path(draw, folder.abstract_params(config))


def our_config(**overrides):
    fields = dict(
        absolute_positions=False,
        vocab_size=64,
        hidden_size=32,
        num_heads=4,
        mlp_dim=48,
        num_layers=5,
        max_positions=64,
        local_window=5,  # odd: both sides halve it the same way
        global_every=3,
        rope_theta=300.0,
        local_rope_theta=40.0,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
    )
    return backbones.get("modernbert").config(**{**fields, **overrides})


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The HF model, saved, and converted once."""
    root = tmp_path_factory.mktemp("modernbert")
    model = hf_model()
    model.save_pretrained(root / "hf")
    from_hf(root / "hf", root / "ours")
    return model, root


def test_from_hf_matches_transformers_logits(converted):
    model, root = converted
    ours = folder.read(root / "ours")
    assert ours.tokenizer is None
    config = ours.config
    assert (config.architecture, config.global_every, config.local_window) == ("modernbert", 2, 4)
    assert (config.rope_theta, config.local_rope_theta) == (500.0, 80.0)
    np.testing.assert_array_equal(ours.params["encoder"]["layers"]["attention_norm"]["scale"][0], 1)
    ids, mask, meta = padded_batch(config.vocab_size)
    got = our_logits(config, ours.params, ids, meta)
    assert_equal_on_real_tokens(got, hf_logits(model, ids, mask), mask)


def test_every_layers_state_is_transformers_hidden_states(converted):
    """``all_layers`` is HF's ``output_hidden_states``: the embeddings' output, then each
    layer's, the final norm on the last only (transformers ties it to ``last_hidden_state``)."""
    model, root = converted
    ours = folder.read(root / "ours")
    ids, mask, meta = padded_batch(ours.config.vocab_size)
    got = MaskedLM(ours.config).apply(
        {"params": ours.params},
        ids,
        meta["positions"],
        mask_fn=masks.mmlm,
        mask_meta=meta,
        all_layers=True,
    )
    with torch.no_grad():
        out = model(torch.tensor(ids), attention_mask=torch.tensor(mask), output_hidden_states=True)
    assert len(got) == len(out.hidden_states) == ours.config.num_layers + 1
    for state, want in zip(np.asarray(got), out.hidden_states, strict=True):
        assert_equal_on_real_tokens(state, want.numpy(), mask)


@pytest.mark.parametrize("kind", [folder.MASKED_LM, folder.DISCRIMINATOR])
def test_to_hf_matches_our_outputs(kind, tmp_path):
    config = our_config()
    params = random_params(config, seed=1)
    ids, mask, meta = padded_batch(config.vocab_size, seed=1)
    if kind == folder.MASKED_LM:
        folder.write(folder.Pretrained(config, params), tmp_path / "ours")
        to_hf(tmp_path / "ours", tmp_path / "hf")
        model = transformers.AutoModelForMaskedLM.from_pretrained(
            tmp_path / "hf", attn_implementation="eager"
        ).eval()
        assert type(model).__name__ == "ModernBertForMaskedLM"
        want = hf_logits(model, ids, mask)
        got = our_logits(config, params, ids, meta)
    else:  # an XLM-E discriminator: no MLM head, a bare ModernBertModel
        del params["lm_head"]
        modernbert.CONVERTER.write_hf(folder.Pretrained(config, params, kind=kind), tmp_path / "hf")
        model = transformers.AutoModel.from_pretrained(
            tmp_path / "hf", attn_implementation="eager"
        ).eval()
        assert type(model).__name__ == "ModernBertModel"
        with torch.no_grad():
            want = model(torch.tensor(ids), attention_mask=torch.tensor(mask))
        want = want.last_hidden_state.numpy()
        got = np.asarray(
            MaskedLM(config).apply(
                {"params": params},
                ids,
                meta["positions"],
                mask_fn=masks.mmlm,
                mask_meta=meta,
            )
        )
    assert model.config.sliding_window == 2 and model.config.layer_types[3] == "full_attention"
    assert_equal_on_real_tokens(got, want, mask)


def test_round_trip_is_exact_and_loads_without_missing_keys(converted, tmp_path, capsys):
    model, root = converted
    main(["to-hf", str(root / "ours"), str(tmp_path / "hf")])
    assert "5 layers" in capsys.readouterr().out
    original = safetensors_numpy.load_file(root / "hf" / "model.safetensors")
    exported = safetensors_numpy.load_file(tmp_path / "hf" / "model.safetensors")
    assert sorted(exported) == sorted(original)
    for name, tensor in original.items():
        np.testing.assert_array_equal(exported[name], tensor, err_msg=name)
    reloaded, info = transformers.AutoModelForMaskedLM.from_pretrained(
        tmp_path / "hf", output_loading_info=True
    )
    assert not any(info.values()), info
    for key in ("layer_types", "rope_parameters", "local_attention", "norm_eps", "vocab_size"):
        assert getattr(reloaded.config, key) == getattr(model.config, key), key
    from_hf(tmp_path / "hf", tmp_path / "again")
    before, after = folder.read(root / "ours"), folder.read(tmp_path / "again")
    assert before.config == after.config
    jax.tree.map(np.testing.assert_array_equal, before.params, after.params)


def test_a_sentencepiece_model_exports_as_transformers_reads_it(tmp_path):
    """What configs/mmbert.py:tiny trains when given no tokenizer, exported as its "next:" line
    says (to-hf): transformers' AutoTokenizer gives xlpretrain's ids on the demo corpus's
    languages, special tokens (<s>, </s>, <mask>, padding) included; from-hf reads it back."""
    folders = demo_corpus.build_demo_corpus(demo_corpus.default_demo_cache_dir())
    texts = {
        path.stem: path.read_text(encoding="utf-8").splitlines()[:200]
        for path in sorted(folders.mono.glob("*.txt"))
    }
    ours = train_tokenizer(texts, tmp_path / "tokenizer.model", 1002, character_coverage=0.99)
    config = our_config(vocab_size=1002)
    folder.write(folder.Pretrained(config, random_params(config), ours), tmp_path / "run")
    main(["to-hf", str(tmp_path / "run"), str(tmp_path / "hf")])

    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    sentences = [texts[lang][7] for lang in ("ar", "de", "el", "hi", "ja", "ko", "ru", "th", "zh")]
    rows = [[ours.bos_id, *ours.encode(text).tolist(), ours.eos_id] for text in sentences]
    width = max(map(len, rows))
    padded = [row + [ours.pad_id] * (width - len(row)) for row in rows]
    assert theirs(sentences, padding=True)["input_ids"] == padded
    assert any(ours.pad_id in row for row in padded)  # rows of other lengths: padding shows
    masked = theirs(f"{sentences[1]} <mask>")["input_ids"]
    assert masked == [*rows[1][:-1], ours.mask_id, ours.eos_id]
    roles = ("cls", "pad", "sep", "unk", "mask")
    assert [getattr(theirs, f"{role}_token_id") for role in roles] == [0, 1, 2, 3, 1001]
    assert from_hf(tmp_path / "hf", tmp_path / "back").tokenizer.special == ours.special
    assert Tokenizer.load(tmp_path / "hf" / "tokenizer.json").special == ours.special


def test_transformers_4_config_keys_read_as_version_5s(converted):
    """Checkpoints saved before transformers 5 state the pattern and the bases in other keys."""
    model, _ = converted
    current = model.config.to_dict()
    legacy = {k: v for k, v in current.items() if k not in ("layer_types", "rope_parameters")}
    legacy.update(global_attn_every_n_layers=2, global_rope_theta=500.0, local_rope_theta=80.0)
    assert modernbert.config_from_hf(legacy) == modernbert.config_from_hf(current)
    exported = modernbert.config_to_hf(modernbert.config_from_hf(current))
    assert exported["global_attn_every_n_layers"] == 2 and exported["local_rope_theta"] == 80.0


REFUSALS = [
    (dict(attention_bias=True), "attention_bias=True is not supported"),
    (dict(mlp_bias=True), "mlp_bias=True is not supported"),
    (dict(norm_bias=True), "norm_bias=True is not supported"),
    (dict(classifier_bias=True), "classifier_bias=True is not supported"),
    (dict(hidden_activation="silu"), "hidden_activation='silu' is not supported"),
    (dict(classifier_activation="relu"), "classifier_activation='relu' is not supported"),
    (dict(decoder_bias=False), "decoder_bias=False is not supported"),
    (dict(tie_word_embeddings=False), "tie_word_embeddings=False is not supported"),
    (
        dict(rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0}}),
        r"rope_parameters\['full_attention'\] has rope_type='linear'",
    ),
    (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "rope_scaling has rope_type="),
    (dict(rope_parameters={"rope_type": "default"}), r"rope_parameters has \['rope_type'\]"),
    (
        dict(layer_types=["sliding_attention", "full_attention"] * 2 + ["full_attention"]),
        "layer_types=",
    ),
    (dict(layer_types=["full_attention"] * 4), "layer_types=.* is not supported"),
    (dict(global_attn_every_n_layers=0, layer_types=None), "global_attn_every_n_layers=0"),
    (dict(mlp_dropout=0.1), "mlp_dropout=0.1 differs from embedding_dropout=0.0"),
    (dict(head_dim=16), "head_dim=16 is not supported"),
    (dict(local_attention=None), "missing key.*local_attention"),
    (dict(model_type="bert"), "model_type='bert' is not 'modernbert'"),
]


@pytest.mark.parametrize("change, message", REFUSALS)
def test_config_from_hf_names_each_unsupported_setting(change, message):
    config = {**hf_config().to_dict(), **change}
    config = {k: v for k, v in config.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        modernbert.config_from_hf(config)


def test_from_hf_refuses_other_architectures_and_writes_nothing(converted, tmp_path):
    _, root = converted
    assert_from_hf_refuses_architecture(
        root / "hf",
        tmp_path,
        "ModernBertForSequenceClassification",
        r"unsupported architecture \['ModernBertForSeq",
    )


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda t: t.update(
                {"decoder.weight": t["model.embeddings.tok_embeddings.weight"] + 1.0}
            ),
            "decoder.weight differs from model.embeddings.tok_embeddings.weight",
        ),
        (
            lambda t: t.update({"model.layers.0.attn_norm.weight": np.ones(32, np.float32)}),
            "unexpected tensor model.layers.0.attn_norm.weight",
        ),
        (
            lambda t: t.update({"model.layers.2.attn.Wqkv.weight": np.zeros((95, 32))}),
            r"model.layers.2.attn.Wqkv.weight has shape \(95, 32\)",
        ),
        (
            lambda t: t.update({"model.layers.1.mlp.Wi.weight": np.zeros((90, 32))}),
            r"mlp.Wi.weight#input has shape \(45, 32\), .* need \(48, 32\)",
        ),
        (lambda t: t.pop("head.norm.weight"), "missing tensor.*head.norm.weight"),
        (lambda t: t.update({"head.dense.bias": np.zeros(32)}), "unexpected tensor.*dense.bias"),
    ],
)
def test_params_from_hf_names_the_offending_tensor(converted, edit, message):
    model, root = converted
    tensors = safetensors_numpy.load_file(root / "hf" / "model.safetensors")
    edit(tensors)
    with pytest.raises(ValueError, match=message):
        modernbert.CONVERTER.params_from_hf(tensors, folder.read(root / "ours").config)


def test_to_hf_refuses_options_modernbert_cannot_express(tmp_path):
    config = our_config(num_languages=3)
    folder.write(folder.Pretrained(config, random_params(config)), tmp_path / "ours")
    with pytest.raises(ValueError, match="num_languages=3 .*language embeddings"):
        to_hf(tmp_path / "ours", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    modernbert.check_exportable(our_config(loss_chunk=7, dtype="bfloat16"))  # how, not what


def test_local_layers_see_only_their_window():
    """Layer 0 (global) made token-wise by zeroing its attention output, the two local layers
    (window 5 // 2 = 2 each side) carry a token 4 places at most: changing the token 4 places
    from the first changes its logits, changing any farther one does not."""
    config = our_config(num_layers=3, global_every=3)
    params = random_params(config, seed=2)
    out = params["encoder"]["layers"]["attention"]["out"]["kernel"]
    out[0] = 0.0
    length = 12
    ids = np.full((1, length), 5)
    meta = {"segment_ids": np.ones_like(ids), "positions": 2 + np.arange(length)[None]}
    reference = our_logits(config, params, ids, meta)[0, 0]
    for far in range(1, length):
        changed = ids.copy()
        changed[0, far] = 9
        logits = our_logits(config, params, changed, meta)[0, 0]
        if far <= 4:
            assert np.abs(logits - reference).max() > 1e-4, far
        else:
            np.testing.assert_array_equal(logits, reference, err_msg=str(far))


@pytest.mark.parametrize("layers, every", [(7, 3), (5, 2), (2, 3), (4, 1)])
def test_layer_types_are_transformers_pattern(layers, every):
    """HF's ``global_attn_every_n_layers`` pattern is ours, and reads back as the same one."""
    want = transformers.ModernBertConfig(
        num_hidden_layers=layers, global_attn_every_n_layers=every
    ).layer_types
    assert modernbert.layer_types(layers, every) == want
    config = hf_config(num_hidden_layers=layers, layer_types=want).to_dict()
    assert modernbert.layer_types(layers, modernbert.config_from_hf(config).global_every) == want
