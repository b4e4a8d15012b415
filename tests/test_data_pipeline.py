"""Examples, masking, sampling and the grain pipeline: the Batch contract and determinism."""

import pickle
import subprocess
import sys

import numpy as np
import pytest

from tests.tiny import mask_tokens, run_config, step_batch_builder
from xlpretrain.data.corpora import corpus as corpus_lib
from xlpretrain.data.corpora.folders import MonolingualSource, ParallelSource
from xlpretrain.data.pretraining import batch as batch_lib
from xlpretrain.data.pretraining.anneal import Anneal
from xlpretrain.data.pretraining.examples import (
    FIRST_POSITION,
    PAD_POSITION,
    monolingual_row,
    translation_pair_row,
)
from xlpretrain.data.pretraining.masking import regular_ids
from xlpretrain.data.pretraining.pipeline import (
    Corpus,
    language_vocabulary,
    make_dataset,
    process_rows,
)
from xlpretrain.data.pretraining.row_kinds import Segments, TranslationPairs
from xlpretrain.data.pretraining.sampling import language_probabilities
from xlpretrain.data.pretraining.streams import MONO, PARALLEL, Phase, StreamSpec
from xlpretrain.data.tokenizer import Tokenizer
from xlpretrain.training.plan import resolve


@pytest.fixture(scope="module", params=["sentencepiece", "tokenizer.json"])
def tokenizer(request, udhr_tokenizer_path, demo_json_tokenizer_path):
    """Each kind: XLM-R's layout (specials at 0-3 and the last id), and a `tokenizer.json` whose
    special tokens follow its pieces (ModernBERT's layout), so no id is taken for granted."""
    if request.param == "sentencepiece":
        return Tokenizer.load(udhr_tokenizer_path)
    return Tokenizer.load(demo_json_tokenizer_path)


@pytest.fixture(scope="module")
def corpus(udhr):
    mono = MonolingualSource.from_dir(udhr / "mono", languages=["007", "008", "009", "010"])
    parallel = ParallelSource.from_dir(udhr / "parallel", pairs=[("eng", "007"), ("eng", "008")])
    return Corpus(mono, parallel, language_vocabulary(mono, parallel))


def _units(row):
    """(start, end) of each unit in a row, from segment_ids."""
    seg = row["segment_ids"]
    return [tuple(np.flatnonzero(seg == s)[[0, -1]] + [0, 1]) for s in range(1, seg.max() + 1)]


def test_language_probabilities_follow_alpha():
    p = language_probabilities({"a": 100, "b": 1}, 0.5)
    assert p["a"] / p["b"] == pytest.approx(10.0)
    assert sum(p.values()) == pytest.approx(1.0)
    assert language_probabilities({"a": 100, "b": 1}, 0.0) == {"a": 0.5, "b": 0.5}
    with pytest.raises(ValueError, match="no examples"):
        language_probabilities({"a": 0}, 0.3)


# Skewed corpora: lines per language (monolingual) and per pair (parallel, English to each).
SKEWED = {"007": 600, "008": 60, "009": 6}


@pytest.fixture(scope="module")
def skewed_corpus(udhr, tmp_path_factory):
    """UDHR lines of three languages (and their English pairs) repeated to `SKEWED` sizes."""
    root = tmp_path_factory.mktemp("skewed")
    (root / "mono").mkdir()
    (root / "parallel").mkdir()
    for lang, lines in SKEWED.items():
        text = (udhr / "mono" / f"{lang}.txt").read_text().splitlines()
        pairs = (udhr / "parallel" / f"eng-{lang}.tsv").read_text().splitlines()
        (root / "mono" / f"{lang}.txt").write_text(
            "\n".join(text[i % len(text)] for i in range(lines))
        )
        (root / "parallel" / f"eng-{lang}.tsv").write_text(
            "\n".join(pairs[i % len(pairs)] for i in range(lines))
        )
    return root


def skewed_shares(alpha: float) -> np.ndarray:
    """p_l = n_l^α / Σ_k n_k^α over `SKEWED`, written out here rather than imported."""
    sizes = np.array(list(SKEWED.values()), float)
    return sizes**alpha / (sizes**alpha).sum()


def run_builder(cfg):
    """The run's plan, corpus and batch builder, as training builds them."""
    plan = resolve(cfg)
    corpus = corpus_lib.load_corpus(plan.corpus, plan.sources())
    builder = plan.batch_builder(corpus, Tokenizer.load(cfg.tokenizer.path))
    return plan, corpus, builder


def row_languages(builder, corpus, steps) -> dict[str, np.ndarray]:
    """The language of every row `builder` builds at dataset indices `steps`, per objective:
    the one language of an MMLM row, the non-English side of a TLM row."""
    drawn = {"mmlm": [], "tlm": []}
    for step in steps:
        for name, batch in builder.map(step).items():
            for ids, segments in zip(batch["lang_ids"], batch["segment_ids"], strict=True):
                langs = {corpus.languages[i] for i in ids[segments > 0]} - {"eng"}
                assert len(langs) == 1, langs
                drawn[name].append(langs.pop())
    return {name: np.array(langs) for name, langs in drawn.items()}


def drawn_languages(cfg, steps: int) -> dict[str, np.ndarray]:
    _, corpus, builder = run_builder(cfg)
    return row_languages(builder, corpus, range(steps))


@pytest.mark.parametrize("mono_alpha, parallel_alpha", [(0.3, 1.0), (1.0, 0.3)])
def test_rows_are_drawn_by_the_configured_alphas(
    skewed_corpus, udhr_tokenizer_path, mono_alpha, parallel_alpha
):
    """The empirical language shares of the rows built follow p_l ∝ n_l^α with each stream's
    configured α (`data.mono_alpha`, `data.parallel_alpha`): every share within 5 standard
    errors of p_l, and the other α's p_l outside that band for some language."""
    cfg = run_config(
        skewed_corpus,
        udhr_tokenizer_path,
        objectives={"mmlm": 1.0, "tlm": 1.0},
        data__mono_alpha=mono_alpha,
        data__parallel_alpha=parallel_alpha,
    )
    drawn = drawn_languages(cfg, steps=150)
    for name, alpha in (("mmlm", mono_alpha), ("tlm", parallel_alpha)):
        rows = len(drawn[name])
        assert rows >= 500, rows
        share = np.array([np.mean(drawn[name] == lang) for lang in SKEWED])
        p = skewed_shares(alpha)
        tolerance = 5 * np.sqrt(p * (1 - p) / rows)  # 5 standard errors of a share
        np.testing.assert_array_less(np.abs(share - p), tolerance, err_msg=f"{name}, α={alpha}")
        other = skewed_shares(1.3 - alpha)  # the other of 0.3 and 1.0
        assert (np.abs(share - other) > tolerance).any(), name


@pytest.mark.parametrize("pack", [True, False])
def test_monolingual_row_layout(corpus, tokenizer, pack):
    rng = np.random.default_rng(0)
    row = monolingual_row(corpus.mono, tokenizer, "008", 3, rng, length=96, pack=pack)
    units = _units(row)
    assert len(units) >= (2 if pack else 1) and (pack or len(units) == 1)
    bos, eos = tokenizer.bos_id, tokenizer.eos_id
    for start, end in units:
        assert row["input_ids"][start] == bos and row["input_ids"][end - 1] == eos
        np.testing.assert_array_equal(
            row["positions"][start:end], FIRST_POSITION + np.arange(end - start)
        )
        specials = tokenizer.special_ids()
        assert not np.isin(row["input_ids"][start + 1 : end - 1], specials).any()
    pad = row["segment_ids"] == 0
    assert (row["input_ids"][pad] == tokenizer.pad_id).all()
    assert (row["positions"][pad] == PAD_POSITION).all()
    assert (row["lang_ids"][~pad] == 3).all()
    np.testing.assert_array_equal(row["pair_ids"], row["segment_ids"])


@pytest.mark.parametrize("reset", [False, True])
def test_translation_pair_row_layout(corpus, tokenizer, reset):
    rng = np.random.default_rng(1)
    row = translation_pair_row(
        corpus.parallel,
        tokenizer,
        ("eng", "007"),
        (5, 6),
        rng,
        length=256,
        pack=True,
        reset_positions=reset,
    )
    for start, end in _units(row):
        ids, side = row["input_ids"][start:end], row["side"][start:end]
        a_len = int((side == batch_lib.SIDE_SOURCE).sum())
        # <s> a </s></s> b </s>
        bos, eos = tokenizer.bos_id, tokenizer.eos_id
        assert ids[0] == bos and ids[a_len - 1] == eos and ids[a_len] == eos and ids[-1] == eos
        assert (side[:a_len] == 0).all() and (side[a_len:] == 1).all()
        lang = row["lang_ids"][start:end]
        assert {lang[0], lang[-1]} == {5, 6} and len(set(lang[:a_len])) == 1
        pos = row["positions"][start:end]
        np.testing.assert_array_equal(pos[:a_len], FIRST_POSITION + np.arange(a_len))
        second = FIRST_POSITION if reset else FIRST_POSITION + a_len
        np.testing.assert_array_equal(pos[a_len:], second + np.arange(end - start - a_len))


def test_pair_truncation_keeps_both_sides(corpus, tokenizer):
    row = translation_pair_row(
        corpus.parallel,
        tokenizer,
        ("eng", "008"),
        (0, 1),
        np.random.default_rng(2),
        length=24,
        pack=False,
        reset_positions=False,
    )
    assert (row["segment_ids"] == 1).all()  # one unit filling the row
    assert (row["side"] == 0).sum() >= 6 and (row["side"] == 1).sum() >= 6


def test_masking_rates_and_specials(tokenizer):
    rng = np.random.default_rng(0)
    length = 512
    row = batch_lib.stack_rows([_plain_row(length, rng, tokenizer)])
    row = {k: v[0] for k, v in row.items()}
    specials = tokenizer.special_ids()
    totals = np.zeros(3)
    for seed in range(40):
        out = mask_tokens(row, np.random.default_rng(seed), tokenizer, rate=0.15, num_slots=77)
        chosen = np.flatnonzero(out["is_masked"])
        maskable = (row["segment_ids"] > 0) & ~np.isin(row["input_ids"], specials)
        assert len(chosen) == round(0.15 * maskable.sum())
        assert maskable[chosen].all()  # never a special token or padding
        np.testing.assert_array_equal(out["labels"][chosen], row["input_ids"][chosen])
        np.testing.assert_array_equal(out["pred_positions"][: len(chosen)], chosen)
        np.testing.assert_array_equal(out["pred_labels"][: len(chosen)], row["input_ids"][chosen])
        assert out["pred_weights"].sum() == len(chosen) == out["label_weights"].sum()
        new = out["input_ids"][chosen]
        is_mask = new == tokenizer.mask_id
        kept = new == row["input_ids"][chosen]
        totals += [is_mask.sum(), (~is_mask & ~kept).sum(), kept.sum()]
        assert not np.isin(new[~is_mask], specials).any()  # random ids are never special
        untouched = np.setdiff1d(np.arange(length), chosen)
        np.testing.assert_array_equal(out["input_ids"][untouched], row["input_ids"][untouched])
    shares = totals / totals.sum()
    # 80% <mask>; 10% random; 10% kept (+ random draws that hit the original id)
    np.testing.assert_allclose(shares, [0.8, 0.1, 0.1], atol=0.03)


def test_a_row_with_more_predictions_than_slots_is_an_error(corpus, tokenizer):
    """Dropping predictions past the slots would lose training signal silently: 67 of the
    447 maskable tokens at 15% need 67 slots, and a stream sized for a lower rate than its
    rows are masked at (here an anneal the streams were not sized for) names itself."""
    row = _plain_row(512, np.random.default_rng(0), tokenizer)
    out = mask_tokens(row, np.random.default_rng(1), tokenizer, rate=0.15, num_slots=67)
    assert out["pred_weights"].sum() == 67
    with pytest.raises(RuntimeError, match="^a row: 67 of its 447 maskable tokens are predicted"):
        mask_tokens(row, np.random.default_rng(1), tokenizer, rate=0.15, num_slots=66)
    unsized = step_batch_builder(
        corpus, tokenizer, {"mmlm": StreamSpec(Segments(), {MONO: 0.15})}, 2,
        anneal=Anneal.from_config(({"step": 0, "mono_mask_rate": 0.5},), total_steps=10),
    )  # fmt: skip
    with pytest.raises(
        RuntimeError, match=r"^mmlm row: \d+ of .* at mask rate 0.5, but it has 10 "
    ):
        unsized.map(0)


@pytest.mark.parametrize("corruption", [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)])
def test_masking_follows_the_corruption_split(tokenizer, corruption):
    length, mask_id = 512, tokenizer.mask_id
    row = _plain_row(length, np.random.default_rng(0), tokenizer)
    new, original = [], []
    for seed in range(10):
        rng = np.random.default_rng(seed)
        out = mask_tokens(row, rng, tokenizer, rate=0.15, num_slots=77, corruption=corruption)
        chosen = np.flatnonzero(out["is_masked"])
        np.testing.assert_array_equal(out["labels"][chosen], row["input_ids"][chosen])
        new.append(out["input_ids"][chosen])
        original.append(row["input_ids"][chosen])
    new, original = np.concatenate(new), np.concatenate(original)
    if corruption[0] == 1.0:  # XLM-E's x^masked: every predicted token is <mask>
        assert (new == mask_id).all()
    elif corruption[1] == 1.0:  # regular ids only, almost never the original by chance
        assert ((new >= 0) & (new < tokenizer.vocab_size)).all()
        assert not np.isin(new, tokenizer.special_ids()).any()
        assert (new == original).mean() < 0.02
    else:
        np.testing.assert_array_equal(new, original)


@pytest.mark.parametrize("corruption", [(0.8, 0.1, 0.0), (1.1, -0.1, 0.0), (0.5, 0.5)])
def test_stream_corruption_must_be_a_split(corruption):
    with pytest.raises(ValueError, match="corruption"):
        StreamSpec(Segments(), {MONO: 0.15}, corruption=corruption)


def _plain_row(length, rng, tokenizer):
    """Two units of regular ids, then padding."""
    row = {k: np.zeros(length, t) for k, t in batch_lib.TOKEN_FIELDS.items()}
    specials = np.unique(tokenizer.special_ids())
    draws = rng.integers(0, tokenizer.vocab_size - len(specials), size=length)
    row["input_ids"] = regular_ids(draws, specials).astype(np.int32)
    row["input_ids"][[0, 200]] = tokenizer.bos_id
    row["input_ids"][[199, 450]] = tokenizer.eos_id
    row["input_ids"][451:] = tokenizer.pad_id
    row["segment_ids"][:200] = 1
    row["segment_ids"][200:451] = 2
    return row


def _builder(corpus, tokenizer, **overrides):
    streams = {
        "mmlm": StreamSpec(Segments(), {MONO: 0.15}),
        "tlm": StreamSpec(TranslationPairs(), {PARALLEL: 0.25}),
    }
    return step_batch_builder(corpus, tokenizer, streams, 8, **{"seed": 3, **overrides})


def test_batches_are_deterministic_and_independent_of_process_count(corpus, tokenizer):
    whole = _builder(corpus, tokenizer).map(5)
    halves = [_builder(corpus, tokenizer, process_index=i, process_count=2).map(5) for i in (0, 1)]
    for name in whole:
        for key, value in whole[name].items():
            np.testing.assert_array_equal(
                value, np.concatenate([h[name][key] for h in halves]), err_msg=f"{name}/{key}"
            )
    again = _builder(corpus, tokenizer).map(5)
    np.testing.assert_array_equal(whole["mmlm"]["input_ids"], again["mmlm"]["input_ids"])
    other = _builder(corpus, tokenizer).map(6)
    assert not np.array_equal(whole["mmlm"]["input_ids"], other["mmlm"]["input_ids"])
    assert whole["tlm"]["pred_positions"].shape == (8, 16)  # ceil(0.25 · 64) slots
    assert set(whole["mmlm"]) == set(batch_lib.TOKEN_FIELDS) | set(batch_lib.PREDICTION_FIELDS)
    with pytest.raises(ValueError, match="not divisible"):
        process_rows(8, 0, 3)


def test_iterator_state_resumes_the_exact_stream(corpus, tokenizer):
    dataset = make_dataset(_builder(corpus, tokenizer), 10, num_workers=0, prefetch=2)
    iterator = iter(dataset)
    for _ in range(3):
        next(iterator)
    state = iterator.get_state()
    expected = next(iterator)
    resumed = iter(make_dataset(_builder(corpus, tokenizer), 10, num_workers=0, prefetch=2))
    resumed.set_state(state)
    np.testing.assert_array_equal(next(resumed)["tlm"]["input_ids"], expected["tlm"]["input_ids"])
    np.testing.assert_array_equal(
        expected["mmlm"]["input_ids"], _builder(corpus, tokenizer).map(3)["mmlm"]["input_ids"]
    )


def test_worker_processes_free_their_shared_memory_when_the_stream_ends(
    corpus, tokenizer, tmp_path
):
    """Two worker processes run out of steps, and the process exits: no batch is left in
    shared memory for the resource tracker to report as leaked (grain keeps each worker's last
    batch in a reference cycle; `iterators` closes, collects and waits for the unlinks)."""
    path = tmp_path / "builder.pkl"
    path.write_bytes(pickle.dumps(_builder(corpus, tokenizer)))
    script = f"""
import pickle
from absl import flags
from xlpretrain.data.pretraining.pipeline import iterators, make_dataset
flags.FLAGS.mark_as_parsed()
builder = pickle.load(open({str(path)!r}, "rb"))
with iterators(make_dataset(builder, 6, num_workers=2, prefetch=2)) as new_iterator:
    print(len(list(new_iterator())), "batches")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0 and "6 batches" in result.stdout, result.stderr[-3000:]
    assert "leaked shared_memory" not in result.stderr, result.stderr[-3000:]


def test_missing_kind_is_a_clear_error(corpus, tokenizer):
    mono_only = Corpus(corpus.mono, None, corpus.languages)
    with pytest.raises(ValueError, match="^tlm need parallel data, but the corpus has none"):
        _builder(mono_only, tokenizer)


def test_phases_choose_each_steps_streams_rows_and_length(corpus, tokenizer):
    """From its start step a phase draws only its streams, at its rows and row length; a row's
    content does not depend on how many rows the phase draws."""
    mmlm, tlm = (
        StreamSpec(Segments(), {MONO: 0.15}).at_length(64),
        StreamSpec(TranslationPairs(), {PARALLEL: 0.25}).at_length(64),
    )
    longer = mmlm.at_length(128)
    phased = _builder(
        corpus,
        tokenizer,
        phases=[
            Phase(0, {"mmlm": 8, "tlm": 8}, {"mmlm": mmlm, "tlm": tlm}),
            Phase(3, {"mmlm": 2}, {"mmlm": mmlm}),
            Phase(5, {"mmlm": 2}, {"mmlm": longer}),
        ],
    )
    second = phased.map(1)  # logged step 2: the first phase
    assert {name: b["input_ids"].shape[0] for name, b in second.items()} == {"mmlm": 8, "tlm": 8}
    third = phased.map(2)  # logged step 3: the second phase
    assert set(third) == {"mmlm"} and third["mmlm"]["input_ids"].shape == (2, 64)
    whole = _builder(corpus, tokenizer).map(2)["mmlm"]["input_ids"]
    np.testing.assert_array_equal(third["mmlm"]["input_ids"], whole[:2])
    fifth = phased.map(4)["mmlm"]  # logged step 5: the third phase, rows of 128 tokens
    assert fifth["input_ids"].shape == (2, 128)
    assert fifth["pred_positions"].shape == (2, longer.prediction_slots)
    assert (fifth["segment_ids"][:, 64:] > 0).any()  # packed past the shorter length
    with pytest.raises(ValueError, match=r"rows of \['camlm'\] but streams \['mmlm'\]"):
        Phase(0, {"camlm": 2}, {"mmlm": mmlm})
    with pytest.raises(ValueError, match=r"\['mmlm'\] have no row length"):
        Phase(0, {"mmlm": 2}, {"mmlm": StreamSpec(Segments(), {MONO: 0.15})})


def annealed(corpus, tokenizer, *points):
    """MMLM + TLM on `corpus` for 200 steps with `data.anneal` = `points`."""
    return run_config(
        corpus, tokenizer, objectives={"mmlm": 1.0, "tlm": 1.0}, train__steps=200,
        data__anneal=points,
    )  # fmt: skip


def test_alpha_and_mask_rates_anneal_with_the_step(skewed_corpus, udhr_tokenizer_path):
    """`data.anneal`: rows of steps 1-50 are drawn at α = 1 and masked at 30%, rows of steps
    61-110 at α = 0.3 and 5% (language shares within 5 standard errors of p_l; masked shares
    near the rate), and every step's batch has the slots of the highest rate."""
    cfg = annealed(
        skewed_corpus,
        udhr_tokenizer_path,
        {"step": 0, "mono_alpha": 1.0, "parallel_alpha": 1.0, "mono_mask_rate": 0.3},
        {"step": 50, "mono_alpha": 1.0, "parallel_alpha": 1.0, "mono_mask_rate": 0.3},
        {"step": 60, "mono_alpha": 0.3, "parallel_alpha": 0.3, "mono_mask_rate": 0.05},
    )
    plan, corpus, builder = run_builder(cfg)
    streams = plan.stage_streams[0]
    assert streams["mmlm"].mask_rates == {MONO: 0.3} and streams["tlm"].mask_rates == {
        PARALLEL: 0.15
    }
    specials = Tokenizer.load(cfg.tokenizer.path).special_ids()
    for steps, alpha, rate in ((range(0, 50), 1.0, 0.3), (range(60, 110), 0.3, 0.05)):
        drawn = row_languages(builder, corpus, steps)  # the schedule reads logged step + 1
        masked = real = 0
        for step in steps:
            mmlm = builder.map(step)["mmlm"]
            assert mmlm["pred_positions"].shape[1] == streams["mmlm"].prediction_slots
            original = np.where(mmlm["is_masked"] > 0, mmlm["labels"], mmlm["input_ids"])
            masked += int(mmlm["is_masked"].sum())
            real += int(((mmlm["segment_ids"] > 0) & ~np.isin(original, specials)).sum())
        for name in drawn:
            share = np.array([np.mean(drawn[name] == lang) for lang in SKEWED])
            p = skewed_shares(alpha)
            tolerance = 5 * np.sqrt(p * (1 - p) / len(drawn[name]))
            np.testing.assert_array_less(np.abs(share - p), tolerance, err_msg=f"{name} α={alpha}")
        assert abs(masked / real - rate) < 0.02, (masked / real, rate)
    _, _, again = run_builder(cfg)
    np.testing.assert_array_equal(
        again.map(55)["mmlm"]["input_ids"], builder.map(55)["mmlm"]["input_ids"]
    )


def test_languages_join_at_their_step(skewed_corpus, udhr_tokenizer_path):
    """`mono_languages` / `parallel_pairs` in `data.anneal`: rows come from the largest N only,
    N changing at its points' steps (a step function); the rest keep their α shares."""
    cfg = annealed(
        skewed_corpus,
        udhr_tokenizer_path,
        {"step": 0, "mono_languages": 1, "parallel_pairs": 2},
        {"step": 30, "mono_languages": 3},
    )
    _, corpus, builder = run_builder(cfg)
    by_size = sorted(SKEWED, key=lambda lang: -SKEWED[lang])
    early = row_languages(builder, corpus, range(0, 29))  # logged steps 1-29
    late = row_languages(builder, corpus, range(29, 109))  # logged steps 30-109
    assert set(early["mmlm"]) == {by_size[0]}
    assert set(early["tlm"]) == set(late["tlm"]) == set(by_size[:2])
    share = np.array([np.mean(late["mmlm"] == lang) for lang in SKEWED])
    p = skewed_shares(cfg.data.mono_alpha)
    np.testing.assert_array_less(np.abs(share - p), 5 * np.sqrt(p * (1 - p) / len(late["mmlm"])))
