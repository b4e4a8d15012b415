"""ERNIE-M: BTMLM rows and passes, the masks CLI, staged schedules and the paper's configs."""

import json
import math
import pathlib
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from tests.tiny import model_config, step_batch_builder
from xlpretrain import masks
from xlpretrain.data.corpora.folders import MonolingualSource
from xlpretrain.data.pretraining.batch import SIDE_PLACEHOLDER, SIDE_SOURCE, SIDE_TAG
from xlpretrain.data.pretraining.pipeline import Corpus
from xlpretrain.data.pretraining.row_kinds import PlaceholderSegments
from xlpretrain.data.pretraining.streams import MONO, StreamSpec
from xlpretrain.data.tokenizer import SentencePieceTokenizer, SpecialIds, Tokenizer
from xlpretrain.masks import show
from xlpretrain.model import MaskedLM, init_params
from xlpretrain.objectives import ernie_m, mlm
from xlpretrain.training.config import ConfigError, default_config
from xlpretrain.training.plan import resolve

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "configs"))
import ernie_m as ernie_m_configs  # noqa: E402


@pytest.fixture(scope="module")
def btmlm_batch(udhr, udhr_tokenizer_path):
    tokenizer = Tokenizer.load(udhr_tokenizer_path)
    mono = MonolingualSource.from_dir(udhr / "mono", languages=["007", "008", "eng"])
    corpus = Corpus(mono, None, mono.languages)
    streams = {"btmlm": StreamSpec(PlaceholderSegments(0.2, target_languages=()), {MONO: 0.15})}
    builder = step_batch_builder(
        corpus, tokenizer, streams, 6, max_length=96, mono_alpha=0.5, parallel_alpha=0.5
    )
    return builder.map(0)["btmlm"], tokenizer


def test_btmlm_rows_append_placeholders_per_unit(btmlm_batch):
    batch, tokenizer = btmlm_batch
    for r in range(batch["input_ids"].shape[0]):
        for unit in range(1, batch["segment_ids"][r].max() + 1):
            idx = np.flatnonzero(batch["segment_ids"][r] == unit)
            side = batch["side"][r, idx]
            source, holders = idx[side == SIDE_SOURCE], idx[side == SIDE_PLACEHOLDER]
            assert len(holders) == math.ceil(0.2 * (len(source) - 2))  # <s>, </s> not counted
            assert holders.min() > source.max()  # appended after the source
            np.testing.assert_array_equal(  # positions continue after the source
                batch["positions"][r, idx], 2 + np.arange(len(idx))
            )
            assert (batch["source_ids"][r, holders] == tokenizer.mask_id).all()
            assert (batch["is_masked"][r, holders] == 0).all()  # placeholders carry no label
            target = set(batch["lang_ids"][r, holders])
            assert len(target) == 1 and target != set(batch["lang_ids"][r, source])
        holders = np.flatnonzero(batch["side"][r] == SIDE_PLACEHOLDER)
        slots = batch["placeholder_positions"][r][batch["placeholder_weights"][r] > 0]
        np.testing.assert_array_equal(slots, holders)
        # pass 2 input: the source is masked; pass 1 input: it is not
        masked = batch["is_masked"][r] > 0
        np.testing.assert_array_equal(batch["source_ids"][r, masked], batch["labels"][r, masked])


def _tiny_model():
    config = model_config(vocab_size=1002, max_positions=514, num_languages=3)
    return MaskedLM(config), nn.unbox(init_params(config, jax.random.key(0)))


def test_btmlm_gradient_does_not_flow_through_the_generation_pass(btmlm_batch):
    batch, _ = btmlm_batch
    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    model, params = _tiny_model()
    rng = jax.random.key(1)
    objective = ernie_m.make_btmlm("argmax", special=SentencePieceTokenizer.layout(1002))
    # Jitted, each a program: op by op, every small op of the two passes compiles apart.
    grads, metrics = jax.jit(jax.grad(lambda p: objective(p, batch, rng, model), has_aux=True))(
        params
    )
    # The same loss with the pseudo tokens given as constants:
    pseudo = jax.jit(
        lambda p: ernie_m.decode_pseudo_tokens(
            model, p, batch, rng, decode="argmax", temperature=1.0
        )
    )(params)
    rows = jnp.arange(pseudo.shape[0])[:, None]
    slots, filled = batch["placeholder_positions"], batch["placeholder_weights"] > 0
    ids = (
        batch["input_ids"]
        .at[rows, slots]
        .set(jnp.where(filled, pseudo, batch["input_ids"][rows, slots]))
    )
    fixed = {**batch, "input_ids": ids}

    def second_pass(p):
        hidden = model.apply(
            {"params": p},
            ids,
            fixed["positions"],
            mask_fn=masks.btmlm,
            mask_meta=mlm.mask_meta(fixed),
            lang_ids=fixed["lang_ids"],
        )
        return mlm.prediction_loss(
            model, p, hidden, fixed["pred_positions"], fixed["pred_labels"], fixed["pred_weights"]
        )[0]

    expected = jax.jit(jax.grad(second_pass))(params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), grads, expected)
    assert 0.0 <= float(metrics["pseudo_special_share"]) <= 1.0
    assert 0.0 < float(metrics["pseudo_distinct_ratio"]) <= 1.0


def test_pseudo_token_statistics():
    ids = jnp.array([[5, 5, 0, 3], [7, 1001, 8, 9]])
    weights = jnp.array([[1, 1, 1, 1], [1, 1, 0, 0]])
    stats = ernie_m.pseudo_token_statistics(ids, weights, SentencePieceTokenizer.layout(1002))
    assert float(stats["pseudo_special_share"]) == pytest.approx(3 / 6)  # 0, 3, 1001 (<mask>)
    assert float(stats["pseudo_unknown_share"]) == pytest.approx(1 / 6)
    assert float(stats["pseudo_distinct_ratio"]) == pytest.approx(5 / 6)  # 5, 0, 3, 7, 1001
    # Wherever the tokenizer keeps them: specials after the pieces, as ModernBERT's.
    at_end = SpecialIds(bos=1, pad=1001, eos=8, unk=5, mask=0)
    stats = ernie_m.pseudo_token_statistics(ids, weights, at_end)
    assert float(stats["pseudo_special_share"]) == pytest.approx(4 / 6)  # 5, 5, 0, 1001
    assert float(stats["pseudo_unknown_share"]) == pytest.approx(2 / 6)
    # A step compiled with no tokenizer (aot, bench) counts only what needs no ids.
    assert set(ernie_m.pseudo_token_statistics(ids, weights, None)) == {"pseudo_distinct_ratio"}


def test_masks_cli_json_and_png(tmp_path):
    example = "the cat <mask> sat ||| die Katze <mask>"
    png = tmp_path / "camlm.png"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "xlpretrain.masks",
            "--objective",
            "camlm",
            "--example",
            example,
            "--json",
            "--png",
            str(png),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout
    info = json.loads(out)
    assert info["tokens"] == [
        "<s>",
        "the",
        "cat",
        "<mask>",
        "sat",
        "</s>",
        "</s>",
        "die",
        "Katze",
        "<mask>",
        "</s>",
    ]
    assert info["side"] == ["source"] * 6 + ["target"] * 5
    assert info["is_masked"] == [0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0]
    assert info["is_padding"] == [0] * 11
    assert [j for j, a in enumerate(info["depends_on"][3]) if a] == [3, 6, 7, 8, 10]
    assert [j for j, a in enumerate(info["depends_on"][9]) if a] == [0, 1, 2, 4, 5, 9]
    assert png.stat().st_size > 1000
    btmlm_generate = ernie_m.BTMLM.masks[0]
    generate = show.describe(btmlm_generate, "a b c d e f g", ratio=0.2, objective="btmlm")
    assert (generate["objective"], generate["mask"]) == ("btmlm", "btmlm_generate")
    assert generate["side"][-2:] == ["placeholder", "placeholder"]  # ⌈0.2 · 7⌉ = 2
    assert generate["allowed"][-1] == [1] * 9 + [0, 1]
    with pytest.raises(ValueError, match="needs a pair"):
        show.describe(ernie_m.CAMLM.masks[0], "only one side")


def test_schedule_validation_and_stage_lookup():
    cfg = ernie_m_configs.get_config("tiny")
    plan = resolve(cfg)
    assert [s.start_step for s in plan.stages] == [0, cfg.train.steps // 2]
    assert set(plan.stages[1].weights) == {"mmlm", "tlm", "camlm", "btmlm"}
    assert plan.stage_index(1) == 0 and plan.stage_index(100) == 1
    cfg.train.steps = 60  # the fractional boundary follows the run's length
    assert resolve(cfg).stages[1].start_step == 30

    def with_schedule(schedule, objectives=None):
        raw = default_config()
        raw.objectives = ml_collections.ConfigDict(objectives or {})
        raw.schedule = schedule
        return raw

    bad = [
        (
            with_schedule(({"start_step": 0, "objectives": {"mmlm": 1.0}},), {"tlm": 1.0}),
            "either objective weights or a schedule",
        ),
        (with_schedule(({"start_step": 5, "objectives": {"mmlm": 1.0}},)), "starts at 0"),
        (
            with_schedule(
                (
                    {"start_step": 0, "objectives": {"mmlm": 1.0}},
                    {"start_step": 0, "objectives": {"tlm": 1.0}},
                )
            ),
            "must come after",
        ),
        (with_schedule(({"start_step": 0, "objectives": {"nope": 1.0}},)), "unknown objective"),
        (
            with_schedule(({"start_step": 0, "objectives": {"btmlm": 1.0}},)),
            "model.language_embeddings",
        ),
        (with_schedule(({"begin": 0},)), "a stage is"),
    ]
    for cfg, message in bad:
        with pytest.raises(ConfigError, match=message):
            resolve(cfg)


@pytest.mark.parametrize(
    "size, layers, hidden, ffn, heads, steps, lr",
    [("base", 12, 768, 3072, 12, 150_000, 2e-4), ("large", 24, 1024, 4096, 16, 200_000, 1e-4)],
)
def test_configs_match_table_10(size, layers, hidden, ffn, heads, steps, lr):
    cfg = ernie_m_configs.get_config(size)
    plan = resolve(cfg)
    m, o = cfg.model, cfg.optim
    assert (m.num_layers, m.hidden_size, m.mlp_dim, m.num_heads) == (layers, hidden, ffn, heads)
    assert m.dropout_rate == m.attention_dropout_rate == 0.1
    assert (cfg.train.steps, cfg.data.max_length) == (steps, 512)
    # The paper's 2048 sequences per step, in every stage, split half monolingual, half parallel.
    run_stages = plan.stages
    assert [sum(stage.rows.values()) for stage in run_stages] == [2048, 2048]
    assert run_stages[0].rows == {"mmlm": 1024, "tlm": 512, "camlm": 512}
    assert run_stages[1].rows == {"mmlm": 512, "tlm": 512, "camlm": 512, "btmlm": 512}
    assert (o.learning_rate, o.warmup_steps, o.eps, o.b1, o.b2) == (lr, 10_000, 1e-6, 0.98, 0.999)
    assert o.weight_decay == 0.01
    assert cfg.data.mono_alpha == cfg.data.parallel_alpha == 0.1
    assert m.vocab_size == 250002  # 250k SentencePiece pieces + <pad> + <mask>
    assert [set(s["objectives"]) for s in cfg.schedule] == [
        {"mmlm", "tlm", "camlm"},
        {"mmlm", "tlm", "camlm", "btmlm"},
    ]


def test_btmlm_tag_tokens_precede_the_placeholders(udhr, udhr_tokenizer_path):
    tokenizer = Tokenizer.load(udhr_tokenizer_path)
    mono = MonolingualSource.from_dir(udhr / "mono", languages=["007", "eng"])
    corpus = Corpus(mono, None, mono.languages)
    streams = {"btmlm": StreamSpec(PlaceholderSegments(0.2, tag_format="<{lang}>"), {MONO: 0.15})}
    builder = step_batch_builder(corpus, tokenizer, streams, 4, mono_alpha=0.5, parallel_alpha=0.5)
    batch = builder.map(0)["btmlm"]
    tags = {lang: tokenizer.encode(f"<{lang}>") for lang in corpus.languages}
    for r in range(4):
        for unit in range(1, batch["segment_ids"][r].max() + 1):
            idx = np.flatnonzero(batch["segment_ids"][r] == unit)
            side = batch["side"][r, idx]
            tag = idx[side == SIDE_TAG]
            holders = idx[side == SIDE_PLACEHOLDER]
            source_lang = corpus.languages[batch["lang_ids"][r, idx[0]]]
            target = "eng" if source_lang == "007" else "007"  # the only other language
            np.testing.assert_array_equal(batch["input_ids"][r, tag], tags[target])
            assert tag.max() < holders.min() and (batch["is_masked"][r, tag] == 0).all()
    # pass 1: placeholders see the tag; the source does not
    meta = {k: batch[k] for k in ("segment_ids", "side", "is_masked", "positions")}
    allowed = np.asarray(masks.materialize(masks.btmlm_generate, meta))[:, 0]
    side = batch["side"]
    for r in range(4):
        holders, tag = side[r] == SIDE_PLACEHOLDER, side[r] == SIDE_TAG
        same = batch["segment_ids"][r][:, None] == batch["segment_ids"][r][None, :]
        assert (allowed[r][np.ix_(holders, tag)] == same[np.ix_(holders, tag)]).all()
        assert not allowed[r][np.ix_(side[r] == SIDE_SOURCE, tag)].any()
