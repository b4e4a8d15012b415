"""XTREME's retrieval tasks as its scripts define them (`eval.xtreme.retrieval`), on a model
whose embeddings are known: a translation's embedding is its source's, so what each task must
predict is known too. Tatoeba: each English line (on disk sorted) gives the line of its source
sentence; BUCC: the threshold is chosen on the dev split's gold and the test split's pairs
scoring at least that are mined, by id. Then `run` writes both into XTREME's submission layout,
scored as evaluate.py scores them, and does not redo them."""

import json
import types

import numpy as np
import pytest

from configs import xtreme as xtreme_config
from tests import xtreme_fixtures
from xlpretrain.core.errors import ConfigError
from xlpretrain.data.xtreme import BuccSplit, TatoebaSplit
from xlpretrain.eval.xtreme import retrieval, score
from xlpretrain.eval.xtreme.retrieval import RetrievalSettings
from xlpretrain.finetune import suite
from xlpretrain.finetune.plan import resolve
from xlpretrain.finetune.schema import check as check_run_config

SETTINGS = RetrievalSettings(layer=1, pooling="mean", batch_size=100)


class MeaningModel:
    """A stand-in for `api.Model`: each text's embedding is its meaning's vector (translations
    share one) plus a little noise; records what `encode` was asked. As an encoder's, the
    vectors share a component, so unrelated sentences are at cosines near 0.35, not 0."""

    def __init__(self, meanings: dict[str, str], width: int = 64, seed: int = 0):
        self.meanings = meanings
        self.rng = np.random.default_rng(seed)
        shared = 6.0 * np.eye(width)[0]
        self.vectors = {
            m: shared + self.rng.normal(size=width) for m in sorted(set(meanings.values()), key=str)
        }
        self.config = types.SimpleNamespace(num_languages=0, num_layers=2)
        self.calls = []

    def encode(self, texts, langs=None, layer=None, pooling="mean"):
        self.calls.append((layer, pooling))
        noise = self.rng.normal(scale=0.05, size=(len(texts), 64))
        return np.stack([self.vectors[self.meanings[t]] for t in texts]) + noise


def test_tatoeba_gives_each_english_line_the_line_of_its_source():
    """The English side is sorted on disk, so line i of it is the translation of source line
    gold[i]; a 4-cycle, so that answering the other way round (each source's English line,
    the inverse permutation) would be wrong."""
    source = ["s0", "s1", "s2", "s3"]
    gold = [1, 2, 3, 0]  # English line i translates source line gold[i]
    english = [f"e{g}" for g in gold]
    model = MeaningModel({**{s: s[1] for s in source}, **{e: e[1] for e in english}})
    split = TatoebaSplit(tuple(source), tuple(english))
    assert retrieval.tatoeba_indices(model, split, "de", SETTINGS) == gold
    assert set(model.calls) == {(1, "mean")}


def _bucc(lang: str, pairs: list[tuple[int, int]], size: int, split: str) -> BuccSplit:
    """`size` sentences a side, ids as BUCC's; `pairs` (source number, English number) share a
    meaning, every other sentence has its own."""
    source = {f"{lang}-{split}{i:04d}": f"{lang} {split} {i}" for i in range(size)}
    english = {f"en-{split}{i:04d}": f"en {split} {i}" for i in range(size)}
    return BuccSplit(
        source,
        english,
        tuple((f"{lang}-{split}{a:04d}", f"en-{split}{b:04d}") for a, b in pairs),
    )


def _meanings(*splits: BuccSplit) -> dict[str, str]:
    meanings = {}
    for split in splits:
        ids = {**split.source, **split.english}
        meanings.update({text: key for key, text in ids.items()})
        for a, b in split.gold:
            meanings[ids[b]] = a
    return meanings


def test_bucc_mines_the_test_split_at_the_threshold_chosen_on_dev_gold():
    dev = _bucc("de", [(0, 3), (1, 0), (4, 5)], size=8, split="d")
    hidden = _bucc("de", [(2, 6), (5, 1)], size=9, split="t")
    model = MeaningModel(_meanings(dev, hidden))
    test = BuccSplit(hidden.source, hidden.english, None)  # XTREME ships no test gold
    mined, dev_mined, chosen = retrieval.bucc_pairs(model, dev, test, "de", SETTINGS)
    assert sorted(mined) == sorted(hidden.gold)
    assert sorted(dev_mined) == sorted(dev.gold)  # what the dev table scores: F1 1.0 here
    assert chosen["f1"] == 1.0 and chosen["mined"] == 3 and chosen["threshold"] > 1.0
    with pytest.raises(ValueError, match="dev split has no gold"):
        retrieval.bucc_pairs(model, test, test, "de", SETTINGS)


def _fixture_model() -> MeaningModel:
    meanings = {}
    for source, english in xtreme_fixtures.TATOEBA.values():
        meanings |= {s: f"tatoeba {i}" for i, s in enumerate(source)}
        meanings |= {e: f"tatoeba {i}" for i, e in enumerate(english)}
    for source, english, pairs in xtreme_fixtures.BUCC.values():  # a sentence means itself
        meanings |= {text: text for text in source + english}
        meanings |= {source[a - 1]: english[b - 1] for a, b in pairs}  # or its translation
    return MeaningModel(meanings)


def test_run_predicts_both_tasks_into_the_submission_layout(tmp_path, monkeypatch):
    data = xtreme_fixtures.write_xtreme_dir(tmp_path / "x", ("bucc2018", "tatoeba"))
    xtreme_fixtures.write_labels_dir(data, ("bucc2018", "tatoeba"))
    loaded = []

    def load(path, *, batch_size):
        loaded.append((path, batch_size))
        return _fixture_model()

    monkeypatch.setattr(suite.api, "load", load)
    cfg = xtreme_config.get_config("base")
    cfg.init.path, cfg.data.dir, cfg.tasks = "pretrained", str(data), "bucc2018,tatoeba"
    cfg.bucc2018.layer = cfg.tatoeba.layer = 2
    check_run_config(cfg)
    out = tmp_path / "out"
    finished = suite.run(resolve(cfg), out)
    assert loaded == [("pretrained", 100), ("pretrained", 100)]
    for task in ("bucc2018", "tatoeba"):
        for lang in xtreme_fixtures.LANGUAGES[task]:
            assert (out / "predictions" / task / f"test-{lang}.tsv").is_file()
    assert finished.test.results == score.score(out / "predictions", data / "labels").results
    assert json.loads((out / "results.json").read_text()) == finished.test.results
    results = finished.test.results
    assert results["tatoeba"]["accuracy"] == {"de": 100.0, "zh": 100.0}
    assert results["bucc2018"]["f1"] == {"de": 100.0, "zh": 100.0}
    assert finished.dev.results["bucc2018"]["f1"] == {"de": 100.0, "zh": 100.0}  # its threshold's
    bucc = json.loads((out / "bucc2018" / "results.json").read_text())
    assert bucc["layer"] == 2 and bucc["pooling"] == "cls" and set(bucc["dev"]) == {"de", "zh"}
    # done: not redone, nothing loaded
    suite.run(resolve(cfg), out)
    assert len(loaded) == 2
    cfg.tatoeba.layer = 3
    (out / "tatoeba" / "results.json").unlink()
    with pytest.raises(ConfigError, match=r"'tatoeba.layer': 3.*states 0 to 2"):
        suite.run(resolve(cfg), out)
