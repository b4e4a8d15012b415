"""VECO: plug-in cross-attention, the two streams, stop-gradient, CS-MLM causality, frozen
phases, segment-pair rows and the paper's configs."""

import functools
import pathlib
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests.tiny import model_config, step_batch_builder
from xlpretrain import masks
from xlpretrain.data.corpora.folders import MonolingualSource, ParallelSource
from xlpretrain.data.pretraining.batch import SIDE_SOURCE, SIDE_TARGET
from xlpretrain.data.pretraining.pipeline import Corpus
from xlpretrain.data.pretraining.row_kinds import SegmentPairs
from xlpretrain.data.pretraining.streams import MONO, PARALLEL, StreamSpec
from xlpretrain.data.tokenizer import Tokenizer
from xlpretrain.model import MaskedLM, ModelConfig, init_params
from xlpretrain.model.layers import Embeddings
from xlpretrain.objectives import veco
from xlpretrain.training.config import default_config
from xlpretrain.training.optim import adamw_from
from xlpretrain.training.plan import resolve

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "configs"))
import veco as veco_configs  # noqa: E402

CFG = model_config(num_layers=3, cross_attention=True)
PARAMS = nn.unbox(init_params(CFG, jax.random.key(0)))
MASK = CFG.vocab_size - 1

# x = <s> 5 [M] 7 </s> (0-4), y = <s> 8 9 [M] </s> (5-9), padding (10-11)
IDS = np.array([[0, 5, MASK, 7, 2, 0, 8, 9, MASK, 2, 1, 1]])
SEGMENTS = np.array([[1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0, 0]])
BATCH = {
    "input_ids": IDS,
    "positions": np.array([[2, 3, 4, 5, 6, 2, 3, 4, 5, 6, 1, 1]]),
    "segment_ids": SEGMENTS,
    "pair_ids": np.minimum(SEGMENTS, 1),
    "side": np.array([[0] * 5 + [1] * 5 + [0, 0]]),
    "is_masked": (IDS == MASK).astype(int),
    "lang_ids": np.zeros_like(IDS),
    "pred_positions": np.array([[2, 8]]),
    "pred_labels": np.array([[6, 10]]),
    "pred_weights": np.ones((1, 2), np.float32),
}
X, Y = set(range(0, 5)), set(range(5, 10))


@functools.cache
def loss_gradient(loss_of):
    """d metric / d embeddings, jitted once per metric (the slot's weights are an argument)."""
    objective = veco.make_veco("veco", loss_of[1])

    def loss(delta, weights):
        def add_delta(next_fun, args, kwargs, context):
            out = next_fun(*args, **kwargs)
            embedding = isinstance(context.module, Embeddings) and context.method_name == "__call__"
            return out + delta if embedding else out

        batch = {**BATCH, "pred_weights": weights}
        with nn.intercept_methods(add_delta):
            _, metrics = objective(PARAMS, batch, jax.random.key(0), MaskedLM(CFG))
        return metrics[loss_of[0]]

    return jax.jit(jax.grad(loss))


def influence(loss_of, prediction: int):
    """|d loss / d embedding_j| for the metric `loss_of(metrics)` restricted to one slot."""
    weights = np.zeros((1, 2), np.float32)
    weights[0, prediction] = 1.0
    grad = loss_gradient(loss_of)(jnp.zeros((1, IDS.shape[1], CFG.hidden_size)), weights)
    return {j for j in range(IDS.shape[1]) if np.abs(np.asarray(grad)[0, j]).sum() > 0}


def test_h_stream_never_sees_the_other_sequence():
    assert influence(("loss/veco_self", "acl"), 0) == X
    assert influence(("loss/veco_self", "acl"), 1) == Y


def test_cross_terms_get_no_gradient_through_the_other_sequence():
    # The s stream reads y only through stop_gradient(h_y): no gradient reaches y's inputs.
    assert influence(("loss/veco_cross", "acl"), 0) == X
    assert influence(("loss/veco_cross", "acl"), 1) == Y


def test_cross_stream_reads_the_other_sequence_in_the_forward_pass():
    model = MaskedLM(CFG)
    meta = {k: BATCH[k] for k in ("segment_ids", "pair_ids", "side", "is_masked", "positions")}

    def s_stream(ids):
        h = model.apply(
            {"params": PARAMS}, ids, BATCH["positions"], mask_fn=masks.mmlm, mask_meta=meta
        )
        return model.apply(
            {"params": PARAMS},
            ids,
            BATCH["positions"],
            mask_fn=masks.mmlm,
            mask_meta=meta,
            memory=h,
            cross_mask_fn=masks.veco_cross,
        )

    changed_y = IDS.copy()
    changed_y[0, 7] = 11
    before, after = s_stream(IDS), s_stream(changed_y)
    assert not np.allclose(before[0, :5], after[0, :5])  # x's s stream depends on y's h


def test_iclr_cross_stream_is_causal():
    # x's masked token at position 2 (slot 0): causal s stream sees x tokens 0..2 only
    assert influence(("loss/veco_cross", "iclr"), 0) == {0, 1, 2}
    assert influence(("loss/veco_cross", "iclr"), 1) == {5, 6, 7, 8}
    assert influence(("loss/veco_self", "iclr"), 0) == X  # the h stream stays bidirectional


def test_plugged_out_model_equals_the_plain_encoder():
    plain_cfg = ModelConfig(**{**CFG.__dict__, "cross_attention": False})
    plain_params = nn.unbox(init_params(plain_cfg, jax.random.key(0)))
    layers = PARAMS["encoder"]["layers"]
    assert set(layers) - set(plain_params["encoder"]["layers"]) == {
        "cross_attention",
        "cross_attention_norm",
    }
    shared = jax.tree.map(lambda x: x, PARAMS)
    shared["encoder"]["layers"] = {k: v for k, v in layers.items() if "cross" not in k}
    meta = {"segment_ids": SEGMENTS}
    plugged_out = MaskedLM(CFG).apply(
        {"params": PARAMS}, IDS, BATCH["positions"], mask_fn=masks.mmlm, mask_meta=meta
    )
    plain = MaskedLM(plain_cfg).apply(
        {"params": shared}, IDS, BATCH["positions"], mask_fn=masks.mmlm, mask_meta=meta
    )
    np.testing.assert_array_equal(np.asarray(plugged_out), np.asarray(plain))
    with pytest.raises(ValueError, match="cross_attention=False"):
        MaskedLM(plain_cfg).apply(
            {"params": shared},
            IDS,
            BATCH["positions"],
            mask_fn=masks.mmlm,
            mask_meta=meta,
            memory=plugged_out,
        )


def test_first_phase_updates_only_the_cross_attention():
    cfg = default_config()
    cfg.optim.weight_decay = 0.1  # frozen parameters must not even decay
    cfg.optim.warmup_steps = 0
    optimizer = adamw_from(resolve(cfg).optim, "cross_attention")
    objective = veco.make_veco("veco")
    grads = jax.grad(lambda p: objective(p, BATCH, jax.random.key(0), MaskedLM(CFG))[0])(PARAMS)
    state = optimizer.init(PARAMS)
    updates, _ = optimizer.update(grads, state, PARAMS)
    new = optax.apply_updates(PARAMS, updates)
    flat_old = jax.tree_util.tree_flatten_with_path(PARAMS)[0]
    flat_new = jax.tree.leaves(new)
    for (path, old), updated in zip(flat_old, flat_new, strict=True):
        name = "/".join(str(getattr(k, "key", k)) for k in path)
        if "cross_attention" in name:
            # (a key bias gets no gradient at all: softmax ignores a shift of all its scores)
            assert name.endswith("key/bias") or not np.array_equal(old, updated), name
        else:
            np.testing.assert_array_equal(old, updated, err_msg=name)
    # the same state structure as the all-trainable second phase
    assert jax.tree.structure(state) == jax.tree.structure(
        adamw_from(resolve(cfg).optim).init(PARAMS)
    )


def test_segment_pair_rows(udhr, udhr_tokenizer_path):
    tokenizer = Tokenizer.load(udhr_tokenizer_path)
    mono = MonolingualSource.from_dir(udhr / "mono", languages=["007", "eng"])
    parallel = ParallelSource.from_dir(udhr / "parallel", pairs=[("eng", "007")])
    corpus = Corpus(mono, parallel, ["007", "eng"])
    streams = {
        "veco": StreamSpec(SegmentPairs(), {PARALLEL: 0.25}, max_length=48),
        "veco_mono": StreamSpec(SegmentPairs(mono_fraction=1.0), {MONO: 0.15, PARALLEL: 0.25}),
    }
    builder = step_batch_builder(
        corpus,
        tokenizer,
        streams,
        {"veco": 4, "veco_mono": 2},
        max_length=96,
        mono_alpha=0.5,
        parallel_alpha=0.5,
    )
    batches = builder.map(0)
    assert batches["veco"]["input_ids"].shape == (4, 48)
    assert batches["veco_mono"]["input_ids"].shape == (2, 96)
    for name, batch in batches.items():
        for r in range(batch["input_ids"].shape[0]):
            for unit in range(1, batch["pair_ids"][r].max() + 1):
                segments = sorted(set(batch["segment_ids"][r][batch["pair_ids"][r] == unit]))
                assert len(segments) == 2, (name, r, unit)
                for seg, side in zip(segments, (SIDE_SOURCE, SIDE_TARGET), strict=True):
                    idx = np.flatnonzero(batch["segment_ids"][r] == seg)
                    assert (batch["side"][r, idx] == side).all()
                    assert batch["input_ids"][r, idx[0]] == tokenizer.bos_id
                    assert batch["input_ids"][r, idx[-1]] == tokenizer.eos_id
                    positions = batch["positions"][r, idx]
                    np.testing.assert_array_equal(positions, 2 + np.arange(len(idx)))
    for r in range(2):  # monolingual pairs: both segments in the row's one language
        real = batches["veco_mono"]["segment_ids"][r] > 0
        assert len(set(batches["veco_mono"]["lang_ids"][r][real])) == 1


@pytest.mark.parametrize(
    "size, layers, hidden, heads, ffn, lr, b2",
    [("small", 6, 768, 12, 3072, 3e-4, 0.999), ("large", 24, 1024, 16, 4096, 2e-4, 0.98)],
)
def test_configs_match_table_8(size, layers, hidden, heads, ffn, lr, b2):
    cfg = veco_configs.get_config(size)
    resolve(cfg)
    m, o = cfg.model, cfg.optim
    assert (m.num_layers, m.hidden_size, m.num_heads, m.mlp_dim) == (layers, hidden, heads, ffn)
    assert m.cross_attention and not m.language_embeddings
    assert (cfg.data.mono_mask_rate, cfg.data.parallel_mask_rate) == (0.15, 0.25)
    assert (o.learning_rate, o.warmup_steps, o.eps, o.b1, o.b2) == (lr, 12_000, 1e-6, 0.9, b2)
    assert (cfg.data.max_length, cfg.data.batch_size) == (128, 4096)  # bilingual
    mono = cfg.data.per_objective.veco_mono
    assert (mono.max_length, mono.batch_size) == (512, 1024)
    assert cfg.train.steps == 240_000 and cfg.data.mono_alpha == cfg.data.parallel_alpha == 0.5
    assert [s["trainable"] for s in cfg.schedule] == ["cross_attention", ""]


def test_pair_classifier_plugged_in_and_out():
    from xlpretrain.model.task_heads import PairClassifier

    pretrained = {k: v for k, v in PARAMS.items() if k != "lm_head"}
    batch = {k: BATCH[k] for k in ("input_ids", "positions", "segment_ids", "pair_ids", "side")}
    plugged_in = PairClassifier(CFG, num_labels=3, plug_in=True)
    # Jitted: op by op, initialising and differentiating compile every small op apart.
    params = nn.unbox(jax.jit(plugged_in.init)(jax.random.key(1), batch)["params"])
    # the pre-trained tree (with its cross-attention) loads into the backbone as it is
    assert jax.tree.structure(params["backbone"]) == jax.tree.structure(pretrained)
    assert params["head_dense"]["kernel"].shape == (4 * CFG.hidden_size, CFG.hidden_size)
    params = {**params, "backbone": pretrained}

    def score(p):
        return plugged_in.apply({"params": p}, batch)[0, 1]

    assert plugged_in.apply({"params": params}, batch).shape == (1, 3)
    grads = jax.jit(jax.grad(score))(params)
    cross = grads["backbone"]["encoder"]["layers"]["cross_attention"]["query"]["kernel"]
    assert np.abs(np.asarray(cross)).sum() > 0  # the plug-in takes part

    plugged_out = PairClassifier(CFG, num_labels=3, plug_in=False)
    tlm_row = dict(batch, segment_ids=np.minimum(SEGMENTS, 1) * 1)  # one segment: XLM-R style
    out_params = nn.unbox(jax.jit(plugged_out.init)(jax.random.key(1), tlm_row)["params"])
    assert "cross_attention" not in out_params["backbone"]["encoder"]["layers"]
    assert out_params["head_dense"]["kernel"].shape == (CFG.hidden_size, CFG.hidden_size)
    with pytest.raises(ValueError, match="cross_attention=True"):
        PairClassifier(model_config(num_layers=1), 3, plug_in=True).init(jax.random.key(0), batch)
