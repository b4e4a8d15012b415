"""The XLM-R encoder: packing independence, layer-stack variants, numerics, parameter axes,
and a NumPy reference forward standing in for Hugging Face parity."""

import dataclasses
import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.tiny import token_batch
from xlpretrain import masks
from xlpretrain.model import MaskedLM, ModelConfig, dot_product_attention, init_params
from xlpretrain.training.config import DEFAULT_LOGICAL_AXIS_RULES as RULES

CFG = ModelConfig(
    vocab_size=50, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, max_positions=20
)
# NumPy, not jax.random, for test inputs: multi-dimensional jax.random draws take seconds to
# compile on CPU.
RNG = np.random.default_rng(0)
LOGICAL_AXES = {"embed", "mlp", "heads", "kv", "vocab", "layers", "positions", "languages", None}


@functools.partial(jax.jit, static_argnames=("cfg", "deterministic"))
def hidden(params, batch, cfg, deterministic=True, dropout_rng=None):
    rngs = None if dropout_rng is None else {"dropout": dropout_rng}
    return MaskedLM(cfg).apply(
        {"params": params},
        batch["input_ids"],
        batch["positions"],
        mask_fn=masks.mmlm,
        mask_meta={"segment_ids": batch["segment_ids"]},
        lang_ids=batch.get("lang_ids"),
        deterministic=deterministic,
        rngs=rngs,
    )


A = [0, 7, 8, 9, 2]
B = [0, 10, 11, 2]


def segment(ids, seg_id):
    return [(token, seg_id) for token in ids]


@pytest.fixture(scope="module")
def boxed():
    return init_params(CFG, jax.random.key(0))


@pytest.fixture(scope="module")
def params(boxed):
    return nn.unbox(boxed)


@pytest.fixture(scope="module")
def batch():
    """Rows: A and B packed; A alone; B alone; A alone with non-pad ids in its padding."""
    rows = token_batch(
        segment(A, 1) + segment(B, 2), segment(A, 1), segment(B, 1), segment(A, 1), length=12
    )
    rows["input_ids"][3, len(A) :] = np.arange(30, 30 + 12 - len(A))
    return rows


@pytest.fixture(scope="module")
def base_hidden(params, batch):
    return np.asarray(hidden(params, batch, CFG))


def test_packed_segments_and_padding_are_independent(base_hidden):
    out = base_hidden
    assert out.shape == (4, 12, CFG.hidden_size) and out.dtype == np.float32
    np.testing.assert_allclose(out[0, : len(A)], out[1, : len(A)], atol=1e-5)
    np.testing.assert_allclose(out[0, len(A) : len(A) + len(B)], out[2, : len(B)], atol=1e-5)
    np.testing.assert_allclose(out[3, : len(A)], out[1, : len(A)], atol=1e-5)


def test_unrolled_layers_match_scanned(params, batch, base_hidden):
    layers = params["encoder"]["layers"]
    unrolled = dict(params)
    unrolled["encoder"] = {
        f"layers_{i}": jax.tree.map(lambda a, i=i: a[i], layers) for i in range(CFG.num_layers)
    }
    cfg = dataclasses.replace(CFG, scan_layers=False)
    abstract = jax.eval_shape(init_params, cfg, jax.random.key(0))
    assert jax.tree.structure(nn.unbox(abstract)) == jax.tree.structure(unrolled)
    np.testing.assert_allclose(hidden(unrolled, batch, cfg), base_hidden, atol=1e-6)


def test_remat_gives_same_outputs_and_grads(params, batch):
    weights = RNG.normal(size=(4, 12, CFG.hidden_size)).astype(np.float32)

    def value_and_grad(cfg):
        def loss(p):
            return jnp.sum(hidden(p, batch, cfg) * weights)

        return jax.jit(jax.value_and_grad(loss))(params)

    ref_loss, ref_grads = value_and_grad(CFG)
    for remat in ("full", "dots"):
        loss, grads = value_and_grad(dataclasses.replace(CFG, remat=remat))
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-6)
        jax.tree.map(
            lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4), grads, ref_grads
        )


def test_bfloat16_compute_keeps_float32_params(params, batch, base_hidden):
    cfg = dataclasses.replace(CFG, dtype="bfloat16")
    abstract = nn.unbox(jax.eval_shape(init_params, cfg, jax.random.key(0)))
    assert {leaf.dtype for leaf in jax.tree.leaves(abstract)} == {jnp.dtype("float32")}
    out = hidden(params, batch, cfg)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out, np.float32), base_hidden, atol=0.1)
    logits = MaskedLM(cfg).apply({"params": params}, out[:, :2], method=MaskedLM.mlm_logits)
    assert logits.dtype == jnp.float32


@pytest.mark.parametrize("scan_layers", [True, False])
def test_every_param_has_logical_axes(scan_layers):
    cfg = dataclasses.replace(CFG, scan_layers=scan_layers, num_languages=3)
    boxed = jax.eval_shape(init_params, cfg, jax.random.key(0))
    leaves = jax.tree_util.tree_leaves_with_path(
        boxed, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned)
    )
    assert len(leaves) == len(jax.tree.leaves(boxed)) > 0
    for path, leaf in leaves:
        name = jax.tree_util.keystr(path)
        assert isinstance(leaf, nn.LogicallyPartitioned), name
        assert len(leaf.names) == leaf.value.ndim, name
        assert set(leaf.names) <= LOGICAL_AXES, name
        stacked = scan_layers and name.startswith("['encoder']")
        assert (leaf.names[0] == "layers") == stacked, name
    assert "language_embeddings" in boxed["embeddings"]
    assert set(boxed["lm_head"]) == {"dense", "layer_norm", "bias"}  # no untied decoder


def test_dropout(params, batch, base_hidden):
    np.testing.assert_array_equal(hidden(params, batch, CFG), base_hidden)
    a, b, c = (
        np.asarray(hidden(params, batch, CFG, deterministic=False, dropout_rng=jax.random.key(s)))
        for s in (1, 2, 1)
    )
    np.testing.assert_array_equal(a, c)
    assert not np.allclose(a, b)
    assert not np.allclose(a, base_hidden)


def layer_norm(x, p, eps=CFG.layer_norm_eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * p["scale"] + p["bias"]


_erf = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def test_mlm_logits_use_tied_embedding(params):
    h = RNG.normal(size=(5, CFG.hidden_size)).astype(np.float32)
    got = MaskedLM(CFG).apply({"params": params}, h, method=MaskedLM.mlm_logits)
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    head = p["lm_head"]
    x = layer_norm(gelu(h @ head["dense"]["kernel"] + head["dense"]["bias"]), head["layer_norm"])
    expected = x @ p["embeddings"]["word_embeddings"]["embedding"].T + head["bias"]
    assert got.shape == (5, CFG.vocab_size) and got.dtype == jnp.float32
    np.testing.assert_allclose(got, expected, atol=1e-5)


def reference_layer(x, p, allowed):
    """One post-LN XLM-R layer in float64 NumPy, written from the HF module structure."""
    att = p["attention"]
    q, k, v = (
        np.einsum("ble,ehd->blhd", x, att[n]["kernel"]) + att[n]["bias"]
        for n in ("query", "key", "value")
    )
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    scores = np.where(allowed, scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    ctx = np.einsum("bhqk,bkhd->bqhd", probs, v)
    out = np.einsum("bqhd,hde->bqe", ctx, att["out"]["kernel"]) + att["out"]["bias"]
    x = layer_norm(x + out, p["attention_norm"])
    mlp = p["mlp"]
    h = gelu(x @ mlp["wi"]["kernel"] + mlp["wi"]["bias"]) @ mlp["wo"]["kernel"]
    return layer_norm(x + h + mlp["wo"]["bias"], p["mlp_norm"])


def test_matches_numpy_reference_forward(params, batch):
    cfg = dataclasses.replace(CFG, num_languages=3)
    languages = {"embedding": RNG.normal(size=(3, CFG.hidden_size)).astype(np.float32)}
    params = dict(params, embeddings=dict(params["embeddings"], language_embeddings=languages))
    lang_batch = dict(batch, lang_ids=np.array([[0] * 5 + [2] * 7, [1] * 12, [2] * 12, [0] * 12]))
    got = hidden(params, lang_batch, cfg)

    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    emb = p["embeddings"]
    x = (
        emb["word_embeddings"]["embedding"][batch["input_ids"]]
        + emb["position_embeddings"]["embedding"][batch["positions"]]
        + emb["token_type_embeddings"]["embedding"][0]
        + emb["language_embeddings"]["embedding"][lang_batch["lang_ids"]]
    )
    x = layer_norm(x, emb["layer_norm"])
    seg = batch["segment_ids"]
    allowed = (seg[:, :, None] == seg[:, None, :])[:, None]
    for i in range(cfg.num_layers):
        x = reference_layer(x, jax.tree.map(lambda a, i=i: a[i], p["encoder"]["layers"]), allowed)
    np.testing.assert_allclose(got, x, atol=1e-5)


def test_language_embeddings_need_lang_ids(batch):
    cfg = dataclasses.replace(CFG, num_languages=3)
    params = nn.unbox(jax.eval_shape(init_params, cfg, jax.random.key(0)))
    with pytest.raises(ValueError, match="lang_ids"):
        jax.eval_shape(functools.partial(hidden, cfg=cfg), params, batch)


def test_attention_dropout_path_matches_reference_when_nothing_dropped():
    q, k, v = RNG.normal(size=(3, 2, 6, 4, 8)).astype(np.float32)
    meta = {"segment_ids": jnp.array([[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 0, 0]])}

    @functools.partial(jax.jit, static_argnums=0)
    def attend(rate, rng):
        return dot_product_attention(
            q,
            k,
            v,
            mask_fn=masks.mmlm,
            q_meta=meta,
            k_meta=meta,
            dropout_rng=rng,
            dropout_rate=rate,
            deterministic=rng is None,
            platform="cpu",
        )

    ref = attend(0.0, None)
    # A rate that rounds to keeping everything takes the explicit-softmax dropout path.
    np.testing.assert_allclose(attend(1e-9, jax.random.key(6)), ref, atol=1e-6)


def test_cudnn_attention_refuses_cpu():
    x = jnp.zeros((1, 4, 2, 8))
    meta = {"segment_ids": jnp.ones((1, 4), jnp.int32)}
    with pytest.raises(ValueError, match="GPU"):
        dot_product_attention(x, x, x, mask_fn=masks.mmlm, q_meta=meta, k_meta=meta, impl="cudnn",
                              platform="cpu")  # fmt: skip


def test_config_is_hashable_and_refuses_unknown_values():
    cfg = ModelConfig(vocab_size=50, dtype="bfloat16", remat="dots")
    assert hash(cfg) == hash(dataclasses.replace(cfg))
    with pytest.raises(ValueError, match="remat"):
        ModelConfig(remat="some")


def plain_cross_entropy(h, table, bias, labels, vocab_size):
    """The reference: every prediction's float32 logits at once, log_softmax, the label's entry;
    correct when the label's logit is the largest (ties included)."""
    from xlpretrain.model.heads import vocabulary_logits

    logits = vocabulary_logits(h, table[:vocab_size], bias[:vocab_size])
    label_logit = jnp.take_along_axis(logits, labels[:, None], -1)[:, 0]
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], -1)[:, 0]
    return nll, label_logit >= logits.max(-1)


@pytest.mark.parametrize("chunk", [0, 4, 7, 100])
def test_chunked_cross_entropy_equals_the_full_softmax(chunk):
    """Values and gradients (states, tied embeddings, bias) of the chunked loss equal the plain
    log_softmax of the whole [N, vocab] logits, for chunks that do and do not divide N (4: three
    full chunks and a remainder of one; 7: one and six); the two rows padding the table past the
    30-id vocabulary take no part and get no gradient; a label tied for the largest logit is
    correct."""
    from xlpretrain.model.heads import chunked_cross_entropy

    rng = np.random.default_rng(4)
    h = jnp.asarray(rng.normal(size=(13, 8)), jnp.float32)
    table = rng.normal(size=(32, 8)).astype(np.float32)
    bias = rng.normal(size=(32,)).astype(np.float32)
    bias[30:] = 50.0  # padding rows that would win every softmax if they took part
    labels = rng.integers(0, 30, 13)
    labels[0] = np.argmax(h[0] @ table[:30].T + bias[:30])
    twin = (labels[0] + 1) % 30  # a second id with the same row: row 0's label ties with it
    table[twin], bias[twin] = table[labels[0]], bias[labels[0]]
    table, bias, labels = jnp.asarray(table), jnp.asarray(bias), jnp.asarray(labels)
    weights = jnp.asarray(rng.random(13), jnp.float32)

    def weighted(fn):
        def loss(h, table, bias):
            nll, correct = fn(h, table, bias, labels)
            return jnp.sum(nll * weights), correct

        return jax.value_and_grad(loss, (0, 1, 2), has_aux=True)

    (got, got_correct), got_grads = weighted(
        lambda *a: chunked_cross_entropy(*a, chunk, vocab_size=30)
    )(h, table, bias)
    (want, want_correct), want_grads = weighted(lambda *a: plain_cross_entropy(*a, vocab_size=30))(
        h, table, bias
    )
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_array_equal(got_correct, want_correct)
    assert got_correct[0]
    for g, w in zip(got_grads, want_grads, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5)
    assert not np.asarray(got_grads[1][30:]).any() and not np.asarray(got_grads[2][30:]).any()


def equations(jaxpr):
    """Every equation of ``jaxpr`` and of the jaxprs inside it (loops, custom rules)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            for inner in param if isinstance(param, (tuple, list)) else [param]:
                inner = getattr(inner, "jaxpr", inner)
                if isinstance(inner, jax.extend.core.Jaxpr):
                    yield from equations(inner)


@pytest.mark.parametrize("chunk, matmuls", [(0, 3), (4, 2 + 2 * 2)])
def test_the_loss_gradient_recomputes_no_logits_and_scatters_nothing(chunk, matmuls):
    """The loss and its gradient in bfloat16: one vocabulary matmul per piece of rows forward
    (the full chunks' loop body, the remainder) and two back (dh, dW), nothing recomputed; no
    scatter (the label's gradient is softmax − one-hot, formed directly); the float32 table
    cast to bfloat16 once, not per chunk."""
    from xlpretrain.model.heads import chunked_cross_entropy

    h = jnp.zeros((13, 8), jnp.bfloat16)
    table, bias, labels = jnp.zeros((32, 8)), jnp.zeros((32,)), jnp.zeros((13,), jnp.int32)

    def loss(h, table, bias):
        return chunked_cross_entropy(h, table, bias, labels, chunk, vocab_size=30)[0].sum()

    jaxpr = jax.make_jaxpr(jax.value_and_grad(loss, (0, 1, 2)))(h, table, bias).jaxpr
    names = [eqn.primitive.name for eqn in equations(jaxpr)]
    assert names.count("dot_general") == matmuls
    assert not [name for name in names if "scatter" in name]
    casts = [
        eqn
        for eqn in equations(jaxpr)
        if eqn.primitive.name == "convert_element_type" and eqn.invars[0].aval.shape == (32, 8)
    ]
    assert len(casts) == 1 and casts[0].outvars[0].aval.dtype == jnp.bfloat16


@pytest.mark.parametrize("vocab", [32, 31])
def test_cross_entropy_per_device_equals_one_device(vocab):
    """Under a data × fsdp × tensor = 2 × 2 × 2 mesh the loss runs per device, the vocabulary
    split over ``tensor`` (32) or replicated where it does not divide (31): values, accuracy
    and gradients (states, tied embeddings, bias) equal the one-device chunked loss."""
    from xlpretrain.model.heads import chunked_cross_entropy, cross_entropy_per_device
    from xlpretrain.parallel.sharding import batch_sharding, make_mesh, under_mesh

    rng = np.random.default_rng(5)
    h = jnp.asarray(rng.normal(size=(24, 8)), jnp.float32)
    table = jnp.asarray(rng.normal(size=(vocab, 8)), jnp.float32)
    bias = jnp.asarray(rng.normal(size=(vocab,)), jnp.float32)
    labels = rng.integers(0, 30, 24)
    logits = np.asarray(h @ table[:30].T + bias[:30])
    labels[::2] = np.argmax(logits, -1)[::2]  # some predicted right
    labels = jnp.asarray(labels)
    weights = jnp.asarray(rng.random(24), jnp.float32)

    def loss(fn):
        def weighted(h, table, bias):
            nll, correct = fn(h, table, bias, labels, 5, 30)  # rows past 30: padding
            return jnp.sum(nll * weights), correct

        return jax.value_and_grad(weighted, (0, 1, 2), has_aux=True)

    want = jax.jit(loss(chunked_cross_entropy))(h, table, bias)
    mesh = make_mesh(2, 2, 2)
    vocab_rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("tensor"))
    shardings = (batch_sharding(mesh, RULES), vocab_rows if vocab % 2 == 0 else None, None)
    got = jax.jit(under_mesh(mesh, RULES, loss(cross_entropy_per_device)), in_shardings=shardings)(
        h, table, bias
    )
    (got_loss, got_correct), got_grads = got
    (want_loss, want_correct), want_grads = want
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-6)
    np.testing.assert_array_equal(got_correct, want_correct)
    assert want_correct.any() and not want_correct.all()
    for g, w in zip(got_grads, want_grads, strict=True):  # the normaliser summed in another order
        np.testing.assert_allclose(g, w, atol=2e-6)


def test_vocabulary_rows_padded_for_sharding_are_never_predicted():
    """30 ids padded to 32 rows (`vocab_multiple=8`): the tables have 32 rows, but the logits
    (what argmax, sampling and BTMLM's decoding read) cover the 30 ids only, and the MLM loss
    equals the unpadded model's even when the padding rows would win every softmax."""
    from xlpretrain.model.config import generator_config
    from xlpretrain.model.electra import ElectraPretrainer, init_electra_params

    padded = dataclasses.replace(CFG, vocab_size=30, vocab_multiple=8)
    params = nn.unbox(init_params(padded, jax.random.key(0)))
    assert params["embeddings"]["word_embeddings"]["embedding"].shape[0] == 32
    params["lm_head"]["bias"] = params["lm_head"]["bias"].at[30:].set(100.0)
    model = MaskedLM(padded)
    hidden = jnp.asarray(np.random.default_rng(0).normal(size=(3, CFG.hidden_size)), jnp.float32)
    logits = model.apply({"params": params}, hidden, method=MaskedLM.mlm_logits)
    assert logits.shape == (3, 30)
    labels = jnp.array([1, 5, 29])
    nll, _ = model.apply({"params": params}, hidden, labels, method=MaskedLM.mlm_nll)
    want = -jax.nn.log_softmax(logits)[jnp.arange(3), labels]
    np.testing.assert_allclose(nll, want, rtol=1e-5)
    electra = ElectraPretrainer(padded, generator_config(padded, 1, 0.5))
    both = nn.unbox(
        init_electra_params(padded, generator_config(padded, 1, 0.5), jax.random.key(0))
    )
    states = jnp.zeros((3, padded.hidden_size // 2))
    generated = electra.apply({"params": both}, states, method=ElectraPretrainer.generator_logits)
    assert generated.shape == (3, 30)
