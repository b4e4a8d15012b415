"""BERT / mBERT (`model.architecture = "bert"`), the third family: parity with transformers'
BertForMaskedLM both ways (float32, 1e-5 of the logits' scale), exact round trips with the
WordPiece tokenizer.json an mBERT folder carries, a hub checkpoint's layout (pooler,
next-sentence head, TensorFlow LayerNorm names), the settings conversion refuses, every
objective training on it, a sharded step equal to one device's, and configs/mbert.py's shapes."""

import json

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")
tokenizers = pytest.importorskip("tokenizers")

import xlpretrain  # noqa: E402
from tests.test_modern_encoder import OBJECTIVES  # noqa: E402
from tests.test_plan import shipped_config  # noqa: E402
from tests.tiny import (  # noqa: E402
    assert_from_hf_refuses_architecture,
    one_device_and_a_mesh,
    run_config,
    trains_alone,
)
from xlpretrain import api, backbones, masks  # noqa: E402
from xlpretrain.convert import bert, folder, from_hf, to_hf  # noqa: E402
from xlpretrain.convert.__main__ import main  # noqa: E402
from xlpretrain.data.pretraining.examples import FIRST_POSITION, PAD_POSITION  # noqa: E402
from xlpretrain.data.tokenizer import Tokenizer  # noqa: E402
from xlpretrain.model.encoder import MaskedLM  # noqa: E402
from xlpretrain.training.plan import resolve  # noqa: E402

TOLERANCE = 1e-5
# mBERT's layout in small: [PAD] 0, unused rows, then [UNK], [CLS], [SEP], [MASK]; pieces after.
SPECIALS = ("[PAD]", "[unused1]", "[unused2]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
LETTERS = "abcdefghijklmnopqrstuvwxyz"
WORDS = ("the", "right", "to", "life", "every", "one", "has", "free", "dom", ",", ".")
PIECES = (*SPECIALS, *LETTERS, *(f"##{c}" for c in LETTERS), *WORDS)
VOCAB = len(PIECES)  # 70 ids
PAD, UNK, CLS, SEP, MASK = (PIECES.index(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"))


def write_wordpiece(folder_path):
    """An mBERT-like folder's tokenizer: a WordPiece `tokenizer.json` (BERT's normalizer,
    pre-tokenizer, `[CLS] $A [SEP]` template) and mBERT's `tokenizer_config.json`, which names
    no special token: they are found by role."""
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

    wordpiece = tokenizers.Tokenizer(
        models.WordPiece({piece: i for i, piece in enumerate(PIECES)}, unk_token="[UNK]")
    )
    wordpiece.normalizer = normalizers.BertNormalizer(lowercase=False)
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wordpiece.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", CLS), ("[SEP]", SEP)],
    )
    wordpiece.decoder = decoders.WordPiece()
    wordpiece.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    wordpiece.save(str(folder_path / "tokenizer.json"))
    (folder_path / "tokenizer_config.json").write_text('{"do_lower_case": false}')


def hf_config(**overrides):
    fields = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        type_vocab_size=2,
        max_position_embeddings=64,
        layer_norm_eps=1e-12,
        pad_token_id=PAD,
    )
    return transformers.BertConfig(**{**fields, **overrides})


def hf_model(architecture="BertForMaskedLM", seed=0):
    """A random HF model in eval mode, every weight non-trivial (norms around 1)."""
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(hf_config()).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            centre = 1.0 if "LayerNorm.weight" in name else 0.0
            param.copy_(centre + torch.randn_like(param) * 0.3)
    return model


def batch(seed=0, lengths=(12, 12)):
    """`[CLS] … [SEP]` rows of random pieces, padded with [PAD] where shorter, and HF's mask."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(len(SPECIALS), VOCAB, (len(lengths), max(lengths)))
    mask = np.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, 0], ids[row, length - 1], ids[row, length:] = CLS, SEP, PAD
        mask[row, :length] = 1
    return ids, mask


def hf_logits(model, ids, mask):
    """HF's logits with token_type_ids left out: all 0, as xlpretrain's are."""
    with torch.no_grad():
        return model(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()


def assert_equal_on_real_tokens(got, want, mask):
    """Equal at real tokens (padding's outputs are unspecified) within ``TOLERANCE`` of the
    outputs' scale, as tests/test_modernbert.py compares."""
    real = mask.astype(bool)
    difference = float(np.abs(got[..., real, :] - want[..., real, :]).max())
    scale = float(np.abs(want[..., real, :]).max())
    assert difference <= TOLERANCE * scale, (difference, scale)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The HF model saved with its WordPiece tokenizer, and converted once."""
    root = tmp_path_factory.mktemp("bert")
    model = hf_model()
    model.save_pretrained(root / "hf")
    write_wordpiece(root / "hf")
    from_hf(root / "hf", root / "ours")
    return model, root


@pytest.mark.parametrize("lengths", [(12, 12), (12, 7)], ids=["whole rows", "padded"])
def test_from_hf_gives_transformers_logits(converted, lengths):
    model, root = converted
    ours = xlpretrain.load(root / "ours")
    assert ours.config.architecture == "bert" and ours.config.layer_norm_eps == 1e-12
    assert ours.pad_id == PAD  # the tokenizer's, found by role
    ids, mask = batch(seed=len(set(lengths)), lengths=lengths)
    assert_equal_on_real_tokens(ours.mlm_logits(ids, mask), hf_logits(model, ids, mask), mask)


def test_the_pipelines_positions_give_transformers_logits(converted):
    """Training reads the checkpoint with the pipeline's numbering (a unit's first token at
    `FIRST_POSITION`, padding at `PAD_POSITION`), whatever HF's pad id: the first token reads
    row 0 of the position table, as HF's does, and a warm start keeps the run's positions."""
    model, root = converted
    ours = folder.read(root / "ours")
    ids, mask = batch(seed=6, lengths=(12, 7))
    positions = np.where(mask == 1, FIRST_POSITION + np.arange(ids.shape[1]), PAD_POSITION)
    meta = {"segment_ids": mask, "positions": positions}

    def forward(module):
        hidden = module(ids, positions, mask_fn=masks.mmlm, mask_meta=meta)
        return module.mlm_logits(hidden)

    got = np.asarray(MaskedLM(ours.config).apply({"params": ours.params}, method=forward))
    assert_equal_on_real_tokens(got, hf_logits(model, ids, mask), mask)


def test_the_tokenizer_is_found_by_role_and_round_trips(converted, tmp_path):
    _, root = converted
    ours = folder.read(root / "ours").tokenizer
    assert (ours.bos_id, ours.eos_id, ours.pad_id, ours.unk_id, ours.mask_id) == (
        CLS, SEP, PAD, UNK, MASK
    )  # fmt: skip
    to_hf(root / "ours", tmp_path / "hf")
    assert (tmp_path / "hf" / "tokenizer.json").read_bytes() == (
        root / "hf" / "tokenizer.json"
    ).read_bytes()
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    text = "Everyone has the right to life, freedom."
    assert theirs(text)["input_ids"] == [CLS, *ours.encode(text).tolist(), SEP]
    assert (theirs.pad_token_id, theirs.mask_token_id, theirs.unk_token_id) == (PAD, MASK, UNK)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["pad_token_id"] == PAD


def test_round_trip_is_exact_and_loads_without_missing_keys(converted, tmp_path, capsys):
    model, root = converted
    main(["to-hf", str(root / "ours"), str(tmp_path / "hf")])
    assert "2 layers" in capsys.readouterr().out
    original = safetensors_numpy.load_file(root / "hf" / "model.safetensors")
    exported = safetensors_numpy.load_file(tmp_path / "hf" / "model.safetensors")
    assert sorted(exported) == sorted(original)
    for name, tensor in original.items():
        np.testing.assert_array_equal(exported[name], tensor, err_msg=name)
    reloaded, info = transformers.AutoModelForMaskedLM.from_pretrained(
        tmp_path / "hf", output_loading_info=True
    )
    assert type(reloaded).__name__ == "BertForMaskedLM" and not any(info.values()), info
    ids, mask = batch(seed=2, lengths=(12, 9))
    want = hf_logits(model, ids, mask)
    np.testing.assert_array_equal(hf_logits(reloaded.eval(), ids, mask), want)
    from_hf(tmp_path / "hf", tmp_path / "again")
    before, after = folder.read(root / "ours"), folder.read(tmp_path / "again")
    assert before.config == after.config
    jax.tree.map(np.testing.assert_array_equal, before.params, after.params)


def our_config(**overrides):
    fields = dict(
        vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=40,
        max_positions=64, layer_norm_eps=1e-12, dropout_rate=0.0, attention_dropout_rate=0.0,
    )  # fmt: skip
    return backbones.get("bert").config(**{**fields, **overrides})


def random_params(config, seed=0):
    """Random float32 params of ``config``; norms around 1, everything else around 0."""
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        centre = 1.0 if jax.tree_util.keystr(path).endswith("['scale']") else 0.0
        return (centre + rng.normal(0.0, 0.3, leaf.shape)).astype(np.float32)

    return jax.tree_util.tree_map_with_path(draw, folder.abstract_params(config))


def test_to_hf_of_our_model_gives_our_logits(tmp_path):
    """A model of ours (random weights, no tokenizer) exported: transformers' logits are ours."""
    config = our_config()
    params = random_params(config, seed=1)
    folder.write(folder.Pretrained(config, params), tmp_path / "ours")
    to_hf(tmp_path / "ours", tmp_path / "hf")
    model = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    assert type(model).__name__ == "BertForMaskedLM"
    ids, mask = batch(seed=3, lengths=(12, 7))
    got = xlpretrain.load(tmp_path / "ours").mlm_logits(ids, mask)
    assert_equal_on_real_tokens(got, hf_logits(model, ids, mask), mask)


def test_the_xlm_e_discriminator_exports_as_a_bert_model_with_a_fresh_pooler(tmp_path):
    config = our_config()
    params = random_params(config, seed=4)
    del params["lm_head"]
    discriminator = folder.Pretrained(config, params, kind=folder.DISCRIMINATOR)
    bert.CONVERTER.write_hf(discriminator, tmp_path / "hf")
    model, info = transformers.AutoModel.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert type(model).__name__ == "BertModel" and not any(info.values()), info
    ids, mask = batch(seed=5, lengths=(12, 8))
    with torch.no_grad():
        want = model.eval()(
            torch.tensor(ids), attention_mask=torch.tensor(mask), output_hidden_states=True
        )
    got = api.Model(discriminator).hidden_states(ids, mask)
    assert_equal_on_real_tokens(got, np.stack([h.numpy() for h in want.hidden_states]), mask)


def test_a_hub_checkpoint_reads_as_its_masked_lm(converted, tmp_path):
    """mBERT's hub files were saved from BertForPreTraining, with TensorFlow's LayerNorm names:
    the pooler and the next-sentence head are dropped, gamma and beta read as weight and bias,
    and the masked LM is the one a BertForMaskedLM folder gives."""
    masked_lm, root = converted
    pretraining = hf_model("BertForPreTraining")
    pretraining.load_state_dict(masked_lm.state_dict(), strict=False)
    pretraining.save_pretrained(tmp_path / "hf")
    tensors = safetensors_numpy.load_file(tmp_path / "hf" / "model.safetensors")
    assert any(n.startswith("cls.seq_relationship.") for n in tensors)
    assert any(n.startswith("bert.pooler.") for n in tensors)
    tensorflow = {"LayerNorm.weight": "LayerNorm.gamma", "LayerNorm.bias": "LayerNorm.beta"}
    for name in [n for n in tensors if n.endswith(tuple(tensorflow))]:
        ending = next(e for e in tensorflow if name.endswith(e))
        tensors[name.removesuffix(ending) + tensorflow[ending]] = tensors.pop(name)
    safetensors_numpy.save_file(tensors, tmp_path / "hf" / "model.safetensors")
    hub = from_hf(tmp_path / "hf", tmp_path / "ours")
    jax.tree.map(np.testing.assert_array_equal, hub.params, folder.read(root / "ours").params)


def test_a_sentencepiece_model_exports_as_transformers_reads_it(udhr_tokenizer_path, tmp_path):
    """What configs/mbert.py:tiny trains when given no tokenizer: transformers' AutoTokenizer
    reads the BERT folder's tokenizer with xlpretrain's ids; from-hf reads it back."""
    ours = Tokenizer.load(udhr_tokenizer_path)
    config = our_config(vocab_size=ours.vocab_size)
    folder.write(folder.Pretrained(config, random_params(config), ours), tmp_path / "run")
    to_hf(tmp_path / "run", tmp_path / "hf")
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    text = "Everyone has the right to life, liberty and security of person."
    assert theirs(text)["input_ids"] == [ours.bos_id, *ours.encode(text).tolist(), ours.eos_id]
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["pad_token_id"] == 1
    assert from_hf(tmp_path / "hf", tmp_path / "back").tokenizer.special == ours.special


def test_the_bench_peer_is_the_model_to_hf_writes():
    """`bench --peer` times HF's BertForMaskedLM of the model's shape: the tensors an export
    holds, two token types and BERT's epsilon, with PyTorch's fused attention."""
    config = our_config()
    peer = backbones.get("bert").hf_peer(config)
    exported = bert.CONVERTER.params_to_hf(random_params(config), config)
    shapes = {n: tuple(t.shape) for n, t in peer.state_dict().items() if n not in bert.TIED}
    assert shapes == {n: t.shape for n, t in exported.items()}
    assert (peer.config.layer_norm_eps, peer.config._attn_implementation) == (1e-12, "sdpa")


REFUSALS = [
    (dict(hidden_act="relu"), "hidden_act='relu' is not supported; xlpretrain's BERT has"),
    (dict(position_embedding_type="relative_key"), "position_embedding_type='relative_key' is"),
    (dict(type_vocab_size=1), "type_vocab_size=1 is not supported"),
    (dict(is_decoder=True), "is_decoder=True is not supported"),
    (dict(add_cross_attention=True), "add_cross_attention=True is not supported"),
    (dict(intermediate_size=None), "missing key.*intermediate_size"),
    (dict(model_type="roberta"), "model_type='roberta' is not 'bert'"),
]


@pytest.mark.parametrize("change, message", REFUSALS)
def test_config_from_hf_names_each_unsupported_setting(change, message):
    config = {**hf_config().to_dict(), **change}
    config = {k: v for k, v in config.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        bert.config_from_hf(config)


def test_from_hf_refuses_other_architectures_and_writes_nothing(converted, tmp_path):
    _, root = converted
    assert_from_hf_refuses_architecture(
        root / "hf",
        tmp_path,
        "BertForSequenceClassification",
        r"unsupported architecture \['BertForSequenceClass",
    )


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda t: t.update({"cls.predictions.decoder.weight": np.ones((VOCAB, 32))}),
            "cls.predictions.decoder.weight differs from bert.embeddings.word_embeddings.weight",
        ),
        (
            lambda t: t.update({"bert.embeddings.token_type_embeddings.weight": np.zeros((3, 32))}),
            r"token_type_embeddings.weight has shape \(3, 32\), .* need \(2, 32\)",
        ),
        (lambda t: t.pop("cls.predictions.bias"), "missing tensor.*cls.predictions.bias"),
        (lambda t: t.update({"classifier.bias": np.zeros(2)}), "unexpected tensor.*classifier"),
    ],
)
def test_params_from_hf_names_the_offending_tensor(converted, edit, message):
    _, root = converted
    tensors = safetensors_numpy.load_file(root / "hf" / "model.safetensors")
    edit(tensors)
    with pytest.raises(ValueError, match=message):
        bert.CONVERTER.params_from_hf(tensors, folder.read(root / "ours").config)


@pytest.mark.parametrize(
    "option, message",
    [
        (dict(num_languages=3), "num_languages=3 .*language embeddings"),
        (dict(relative_position="bucketed"), "relative_position='bucketed' .*no relative"),
        (dict(cross_attention=True), "cross_attention=True .*no BertForMaskedLM counterpart"),
    ],
)
def test_to_hf_refuses_options_bert_cannot_express(option, message, tmp_path):
    config = our_config(**option)
    folder.write(folder.Pretrained(config, random_params(config)), tmp_path / "ours")
    with pytest.raises(ValueError, match=f"BertForMaskedLM cannot express .*{message}"):
        to_hf(tmp_path / "ours", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def bert_run(**overrides):
    """The tiny pre-training run on BERT's layers."""
    cfg = run_config(**overrides)
    cfg.model.update(architecture="bert", layer_norm_eps=1e-12)
    return cfg


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_every_objective_trains_on_bert(name):
    trains_alone(resolve(bert_run(objectives={name: 1.0}, **OBJECTIVES[name])), name)


def test_a_sharded_step_equals_one_device():
    """MMLM + TLM on BERT's layers, data 2 × fsdp 2 × tensor 2 against one device: the same
    loss and the same updated parameters (the two-row token-type table included)."""
    (one_metrics, one), (sharded_metrics, sharded) = one_device_and_a_mesh(resolve(bert_run()))
    assert one["embeddings"]["token_type_embeddings"]["embedding"].shape == (2, 32)
    np.testing.assert_allclose(sharded_metrics["loss"], one_metrics["loss"], rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-4), sharded, one)


def test_mbert_base_has_mbert_shape():
    """12 layers, 768 wide, 12 heads, FFN 3,072, 512 positions from row 0, two token types,
    119,547 ids, LayerNorm ε 1e-12: 178 M parameters (mBERT's, less its pooler and NSP head)."""
    plan = resolve(shipped_config("mbert.py", "base"))
    m = plan.model
    assert (m.architecture, m.num_layers, m.hidden_size, m.num_heads, m.mlp_dim) == (
        "bert", 12, 768, 12, 3072
    )  # fmt: skip
    assert (m.max_positions, m.longest_row, m.token_type_rows) == (512, 512, 2)
    assert (m.vocab_size, m.layer_norm_eps) == (119547, 1e-12)
    shapes = folder.abstract_params(m)
    count = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))
    unpadded = count - (m.padded_vocab_size - m.vocab_size) * (m.hidden_size + 1)
    assert unpadded == pytest.approx(177.9e6, rel=0.001)
