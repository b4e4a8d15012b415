"""Bitext mining and the benchmark files, without a model: the ratio margin on vectors whose
cosines are chosen by hand, the best-threshold F1, the banded nearest-neighbour search, and
reading Tatoeba and BUCC folders with their errors (the CLI runs in test_retrieval.py)."""

import numpy as np
import pytest

from xlpretrain.data.corpora.sources import DataError
from xlpretrain.eval import benchmarks, mining


def with_cosines(similarity: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Unit rows x (n) and y (m) with cos(x_i, y_j) = similarity[i][j]: x_i is the i-th basis
    vector, y_j has the column j of `similarity` on them and the rest of its length on an axis
    of its own."""
    similarity = np.asarray(similarity)
    n, m = similarity.shape
    x = np.eye(n, n + m)
    y = np.zeros((m, n + m))
    y[:, :n] = similarity.T
    y[np.arange(m), n + np.arange(m)] = np.sqrt(1 - (similarity**2).sum(axis=0))
    return x, y


def test_the_margin_divides_the_cosine_by_the_mean_neighbourhood_similarity():
    # k = 2 neighbours; x has 2 rows, so each y's neighbourhood is both x.
    #   x0's mean 0.45, x1's 0.40; y0's (0.5 + 0.6) / 2 = 0.55, y1's 0.30, y2's 0.10
    #   score(x0, y1) = 0.4 / ((0.45 + 0.30) / 2) = 16/15; score(x0, y0) = 0.5 / 0.5 = 1
    #   score(x1, y0) = 0.6 / ((0.40 + 0.55) / 2) = 24/19; score(x1, y2) = 0.1 / 0.25 = 0.4
    # Proposals: x0 -> y1, x1 -> y0, y0 -> x1, y1 -> x0, y2 -> x1 (x1 taken: dropped).
    x, y = with_cosines([[0.5, 0.4, 0.1], [0.6, 0.2, 0.1]])
    candidates = mining.margin_candidates(x, y, k=2)
    assert candidates.l1_rows.tolist() == [1, 0]
    assert candidates.l2_rows.tolist() == [0, 1]
    assert candidates.scores.tolist() == pytest.approx([24 / 19, 16 / 15], rel=1e-6)


def test_the_margin_mines_the_translations_where_the_cosine_mines_a_hub():
    # y0 is closest to both x; the translations are x0-y1 and x1-y0. By cosine, x0-y0 (0.55)
    # is taken first and leaves no pair for the others. Every mean is over both rows (k = 4
    # cut to 2): x0, y0 0.525; x1, y1 0.3; so score(x0, y1) = score(x1, y0) = 0.5 / 0.4125 and
    # score(x0, y0) = 0.55 / 0.525 < it.
    x, y = with_cosines([[0.55, 0.5], [0.5, 0.1]])
    candidates = mining.margin_candidates(x, y)
    assert (candidates.l1_rows.tolist(), candidates.l2_rows.tolist()) == ([0, 1], [1, 0])
    assert candidates.scores.tolist() == pytest.approx([40 / 33, 40 / 33], rel=1e-6)


def ratio_margin(similarity: np.ndarray, k: int) -> np.ndarray:
    """Every pair's score(x_i, y_j), straight from the definition: 2 cos(x_i, y_j) over the sum
    of the means of x_i's k highest cosines and of y_j's."""
    x_mean = np.sort(similarity, axis=1)[:, -k:].mean(axis=1)
    y_mean = np.sort(similarity, axis=0)[-k:, :].mean(axis=0)
    return 2 * similarity / (x_mean[:, None] + y_mean[None, :])


def test_the_margin_takes_4_neighbours_by_default():
    """Six and seven rows a side, so that k = 3, 4 and 5 are three neighbourhoods (with two
    rows, any k >= 2 is both): the default scores are k = 4's, as LASER and XTREME mine BUCC.
    By hand for x0-y0: x0's 4 highest cosines, and y0's, are 0.60, 0.30, 0.25, 0.20 (mean
    0.3375), so 2 · 0.6 / 0.675 = 16/9; k = 3 would give 1.2 / 0.7667 = 1.565, k = 5
    1.2 / (0.30 + 0.29) = 2.034."""
    similarity = np.array(
        [
            [0.60, 0.30, 0.10, 0.20, 0.05, 0.25, 0.15],
            [0.25, 0.55, 0.30, 0.10, 0.20, 0.05, 0.10],
            [0.10, 0.20, 0.50, 0.30, 0.15, 0.10, 0.25],
            [0.30, 0.05, 0.20, 0.45, 0.30, 0.15, 0.05],
            [0.05, 0.15, 0.25, 0.10, 0.50, 0.30, 0.20],
            [0.20, 0.10, 0.05, 0.25, 0.10, 0.40, 0.30],
        ]
    )
    candidates = mining.margin_candidates(*with_cosines(similarity))
    assert candidates.l1_rows.tolist() == candidates.l2_rows.tolist() == [0, 1, 4, 2, 3, 5]
    assert candidates.scores[0] == pytest.approx(16 / 9, rel=1e-5)
    pairs = (candidates.l1_rows, candidates.l2_rows)
    np.testing.assert_allclose(candidates.scores, ratio_margin(similarity, 4)[pairs], rtol=1e-5)
    for k in (3, 5):  # what the default is told apart from
        assert np.abs(ratio_margin(similarity, k)[pairs] / candidates.scores - 1).min() > 0.05


def test_nearest_neighbours_in_bands_are_those_of_the_whole_matrix(monkeypatch):
    rng = np.random.default_rng(0)
    queries, keys = rng.normal(size=(37, 8)), rng.normal(size=(23, 8))
    full = queries @ keys.T
    monkeypatch.setattr(mining, "_SIMILARITY_ELEMENTS", 5 * len(keys))  # bands of 5 rows
    similarities, rows = mining.nearest_neighbours(queries, keys, 3)
    assert rows.tolist() == np.argsort(-full, axis=1)[:, :3].tolist()
    assert similarities == pytest.approx(np.sort(full, axis=1)[:, ::-1][:, :3])


def test_the_best_threshold_maximises_f1_and_sits_between_two_scores():
    # 4 gold pairs, one never proposed. F1 of the prefixes = 2 hits / (mined + 4):
    # 2/5, 2/6, 4/7, 6/8, 6/9: the best mines the top 4, so the threshold is (0.6 + 0.5) / 2.
    scores = np.array([0.5, 0.8, 0.9, 0.6, 0.7])
    correct = np.array([False, False, True, True, True])
    best = mining.best_threshold(scores, correct, gold_count=4)
    assert best == pytest.approx(
        {"threshold": 0.55, "precision": 0.75, "recall": 0.75, "f1": 0.75, "mined": 4}
    )
    assert mining.at_threshold(scores, correct, 4, 0.85) == pytest.approx(
        {"threshold": 0.85, "precision": 1.0, "recall": 0.25, "f1": 0.4, "mined": 1}
    )


def test_the_best_threshold_never_splits_equal_scores():
    # Mining the top 2 would be perfect, but the second and third score 0.8: a threshold
    # mines both or neither. Both: F1 2*2 / (3 + 2) = 0.8; neither: 2/3.
    scores = np.array([0.9, 0.8, 0.8, 0.5])
    best = mining.best_threshold(scores, np.array([True, True, False, False]), gold_count=2)
    assert best == pytest.approx(
        {"threshold": 0.65, "precision": 2 / 3, "recall": 1.0, "f1": 0.8, "mined": 3}
    )


def test_the_best_threshold_when_everything_or_nothing_is_right():
    scores = np.array([0.9, 0.8])
    every = mining.best_threshold(scores, np.array([True, True]), gold_count=2)
    assert every == {"threshold": 0.8, "precision": 1.0, "recall": 1.0, "f1": 1.0, "mined": 2}
    none = mining.best_threshold(scores, np.array([False, False]), gold_count=2)
    assert none == {"threshold": None, "precision": 0.0, "recall": 0.0, "f1": 0.0, "mined": 0}


def test_a_repeated_sentence_is_mined_once_under_its_first_row():
    assert mining.first_rows(["a", "b", "a", "c", "b"]).tolist() == [0, 1, 3]


# --- Tatoeba files ---------------------------------------------------------------------------


def write_tatoeba(folder, stem, first: list[str], second: list[str]) -> None:
    l1, l2 = stem.split("-")
    (folder / f"tatoeba.{stem}.{l1}").write_text("".join(f"{line}\n" for line in first))
    (folder / f"tatoeba.{stem}.{l2}").write_text("".join(f"{line}\n" for line in second))


def test_tatoeba_pairs_are_line_aligned_and_a_blank_side_skips_the_line_pair(tmp_path):
    write_tatoeba(tmp_path, "deu-eng", ["Hallo.", "", "Danke."], ["Hello.", "Hi.", "Thanks."])
    write_tatoeba(tmp_path, "fra-eng", ["Merci."], ["Thanks."])
    (tmp_path / "tatoeba.deu-eng.tok.deu").write_text("not a pair file\n")
    source = benchmarks.TatoebaSource.from_dir(tmp_path)
    assert source.pairs == [("deu", "eng"), ("fra", "eng")]
    assert [source.line("deu-eng", i) for i in range(2)] == [
        ("Hallo.", "Hello."),
        ("Danke.", "Thanks."),
    ]
    stats = source.stats[("deu", "eng")]
    assert (stats.total, stats.used, stats.bad_fields, stats.examples) == (
        3,
        2,
        1,
        {"bad_fields": [2]},
    )
    only = benchmarks.TatoebaSource.from_dir(tmp_path, pairs=["fra-eng"])
    assert only.pairs == [("fra", "eng")]


@pytest.mark.parametrize(
    "case, message",
    [
        ("line counts", r"tatoeba\.deu-eng\.deu has 2 lines but .*tatoeba\.deu-eng\.eng has 1"),
        ("one file", r"tatoeba\.deu-eng\.eng is missing: a Tatoeba pair is two files"),
        ("no pair", r"no tatoeba\.<l1>-<l2>\.<l1> and tatoeba\.<l1>-<l2>\.<l2> files in"),
        ("not asked", r"Tatoeba pair\(s\) ita-eng not found"),
    ],
)
def test_tatoeba_folder_errors_name_the_file(tmp_path, case, message):
    if case == "line counts":
        write_tatoeba(tmp_path, "deu-eng", ["Hallo.", "Danke."], ["Hello."])
    elif case == "one file":
        (tmp_path / "tatoeba.deu-eng.deu").write_text("Hallo.\n")
    elif case == "not asked":
        write_tatoeba(tmp_path, "deu-eng", ["Hallo."], ["Hello."])
    pairs = ["ita-eng"] if case == "not asked" else None
    with pytest.raises(DataError, match=message):
        benchmarks.TatoebaSource.from_dir(tmp_path, pairs=pairs)


# --- BUCC files ------------------------------------------------------------------------------


def write_bucc(folder, name="de-en.sample", de=None, en=None, gold=None) -> None:
    """A set of 3 German and 4 English sentences, two of them pairs."""
    l1, l2 = name.split(".")[0].split("-")
    de = de or ["de-1\tHallo Welt.", "de-2\tDas ist alles.", "de-3\tGuten Tag."]
    en = en or ["en-1\tNothing here.", "en-2\tHello world.", "en-3\tGood day.", "en-4\tBye."]
    gold = gold or ["de-1\ten-2", "de-3\ten-3"]
    for suffix, lines in ((l1, de), (l2, en), ("gold", gold)):
        (folder / f"{name}.{suffix}").write_text("".join(f"{line}\n" for line in lines))


def test_bucc_sets_are_read_by_id_with_gold_pairs_as_rows(tmp_path):
    write_bucc(tmp_path)
    write_bucc(tmp_path, "fr-en.training", de=["fr-9\tBonjour\tle monde."], gold=["fr-9\ten-2"])
    (tmp_path / "de-en.test.de").write_text("de-7\tNo gold: not a set.\n")
    sets = benchmarks.read_mining_sets(tmp_path)
    assert [s.name for s in sets] == ["de-en.sample", "fr-en.training"]
    sample, training = sets
    assert sample.pair == ("de", "en") and sample.ids[0] == ["de-1", "de-2", "de-3"]
    assert sample.texts[1][1] == "Hello world." and sample.gold == {(0, 1), (2, 2)}
    assert training.texts[0] == ["Bonjour\tle monde."]  # only the first tab separates
    assert [s.name for s in benchmarks.read_mining_sets(tmp_path, pairs=["fr-en"])] == [
        "fr-en.training"
    ]


@pytest.mark.parametrize(
    "case, message",
    [
        ("no tab", r"de-en\.sample\.de:2: expected ID<TAB>sentence, got 'de-2 Das ist alles\.'"),
        ("duplicate ID", r"de-en\.sample\.en:3: ID 'en-1' is also on line 1"),
        ("unknown gold ID", r"de-en\.sample\.gold:2: ID 'en-9' is not in .*de-en\.sample\.en"),
        ("gold without a tab", r"de-en\.sample\.gold:1: expected ID_l1<TAB>ID_l2"),
        ("missing side", r"de-en\.sample\.en is missing: de-en\.sample\.gold pairs IDs of"),
        ("no gold", r"no <l1>-<l2>\.<split>\.gold file in"),
        ("pair not there", r"no \.gold file of pair\(s\) ru-en in"),
    ],
)
def test_bucc_errors_name_the_file_and_line(tmp_path, case, message):
    if case == "no tab":
        write_bucc(tmp_path, de=["de-1\tHallo Welt.", "de-2 Das ist alles."])
    elif case == "duplicate ID":
        write_bucc(tmp_path, en=["en-1\tA.", "en-2\tHello world.", "en-1\tB.", "en-3\tC."])
    elif case == "unknown gold ID":
        write_bucc(tmp_path, gold=["de-1\ten-2", "de-3\ten-9"])
    elif case == "gold without a tab":
        write_bucc(tmp_path, gold=["de-1 en-2"])
    elif case in ("missing side", "pair not there"):
        write_bucc(tmp_path)
        if case == "missing side":
            (tmp_path / "de-en.sample.en").unlink()
    pairs = ["ru-en"] if case == "pair not there" else None
    with pytest.raises(DataError, match=message):
        benchmarks.read_mining_sets(tmp_path, pairs=pairs)


def test_the_head_of_a_set_keeps_the_gold_pairs_among_its_lines(tmp_path):
    write_bucc(tmp_path)
    (sample,) = benchmarks.read_mining_sets(tmp_path)
    head = sample.head(2)
    assert head.ids == (["de-1", "de-2"], ["en-1", "en-2"]) and head.gold == {(0, 1)}
    assert head.texts[0] == ["Hallo Welt.", "Das ist alles."]
    with pytest.raises(DataError, match=r"de-en\.sample: no gold pair among the first 1 lines"):
        sample.head(1)
