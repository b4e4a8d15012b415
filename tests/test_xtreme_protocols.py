"""The XTREME run's protocols, on the tiny XTREME_DIR of `tests/xtreme_fixtures`: which examples
each fine-tuning run trains, selects and predicts on, and where its workdir is. The fine-tuning
itself is `task_run`'s (tests/test_suite.py runs it); here it is replaced by a recorder
that predicts a constant, so what is checked is the protocol alone.

- zero_shot: one run in OUT/<task>/ on English training data, English dev, every test language;
- translate_train_all: the same with every translate-train file's examples added;
- in_language: one run per test language with training data of its own, in OUT/<task>/<lang>/,
  on that language's training data and dev, predicting its test alone; languages without
  training data are not run, and tasks whose training data XTREME ships in English only are
  refused before anything runs.
"""

import json

import pytest

from configs import xtreme as xtreme_config
from tests import xtreme_fixtures as fx
from xlpretrain.core.errors import ConfigError
from xlpretrain.data.finetuning.task_examples import PairExample, TaggedSentence
from xlpretrain.data.xtreme import read_tagged_file
from xlpretrain.finetune import suite
from xlpretrain.finetune.plan import resolve
from xlpretrain.finetune.schema import check as check_run_config


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = fx.write_xtreme_dir(tmp_path_factory.mktemp("x"), ("pawsx", "panx"))
    return fx.write_labels_dir(root, ("pawsx", "panx"))


@pytest.fixture
def runs(monkeypatch):
    """Each fine-tuning run's workdir and examples; each predicts "O" / "0" everywhere."""
    seen = []

    def fine_tune(plan, task, workdir, examples, devices=None):
        seen.append((workdir, examples))
        predict = {
            "panx": lambda e: ["O"] * len(e.words),
            "pawsx": lambda e: "0",
        }[task]
        tests = {lang: [predict(e) for e in test] for lang, test in examples.tests.items()}
        devs = {lang: [predict(e) for e in dev] for lang, dev in examples.devs.items()}
        chosen = {"selected_step": 1, "dev": None, "train_language": examples.train_language}
        return {**chosen, "predictions": tests, "dev_predictions": devs}

    monkeypatch.setattr(suite, "fine_tune", fine_tune)
    return seen


def plan(data, tasks, protocol):
    cfg = xtreme_config.get_config("base")
    cfg.init.path, cfg.data.dir, cfg.tasks, cfg.protocol = "model", str(data), tasks, protocol
    check_run_config(cfg)
    return resolve(cfg)


def test_zero_shot_trains_on_english_and_tests_every_language(data, runs, tmp_path):
    suite.run(plan(data, "panx", "zero_shot"), tmp_path)
    [(workdir, examples)] = runs
    assert workdir == tmp_path / "panx" / ""
    english = read_tagged_file(data / "panx" / "train-en.tsv", training=True)[0]
    assert examples.train == english and examples.dev_language == "en"
    assert sorted(examples.tests) == sorted(fx.LANGUAGES["panx"])


def test_translate_train_all_adds_every_translation(data, runs, tmp_path):
    suite.run(plan(data, "pawsx", "translate_train_all"), tmp_path)
    [(_, examples)] = runs
    english = len(fx.PAIRS["pawsx"]["en"]) + 1  # train-en.tsv has one pair more than dev
    translated = len(fx.PAIRS["pawsx"]["en"]) * (len(fx.LANGUAGES["pawsx"]) - 1)
    assert len(examples.train) == english + translated
    assert all(isinstance(e, PairExample) for e in examples.train)
    with pytest.raises(ConfigError, match="translate_train_all.*ships for xnli, pawsx, xquad"):
        plan(data, "pawsx,panx", "translate_train_all")  # before pawsx's fine-tuning
    assert not any(workdir.parent.name == "again" for workdir, _ in runs)


def test_in_language_runs_each_language_on_its_own_data(data, runs, tmp_path):
    """The fixtures ship PAN-X training data in English and German, not Arabic."""
    finished = suite.run(plan(data, "panx", "in_language"), tmp_path)
    by_language = {workdir.name: examples for workdir, examples in runs}
    assert sorted(by_language) == ["de", "en"]
    assert all(workdir.parent == tmp_path / "panx" for workdir, _ in runs)
    german = by_language["de"]
    assert german.train == [TaggedSentence(*s) for s in fx.TAGGED["panx"]["de"][1:]]
    assert german.dev == [TaggedSentence(*s) for s in fx.TAGGED["panx"]["de"]]
    assert (german.train_language, german.dev_language, list(german.tests)) == ("de", "de", ["de"])
    assert list(by_language["en"].tests) == ["en"] and by_language["en"].dev_language == "en"
    predicted = sorted(p.name for p in (tmp_path / "predictions" / "panx").iterdir())
    assert predicted == ["test-de.tsv", "test-en.tsv"]  # ar has no training data: not run
    done = json.loads((tmp_path / "panx" / "results.json").read_text())
    assert set(done["languages"]) == {"de", "en"}
    assert set(finished.test.results["panx"]["f1"]) == {"de", "en"}
    assert set(finished.dev.results["panx"]["f1"]) == {"de", "en"}  # each run's own dev
    assert set(finished.selected["panx"]) == {"de", "en"}


def test_in_language_refuses_tasks_trained_in_english_only(data):
    with pytest.raises(
        ConfigError, match=r"in_language.*ships for panx, udpos, tydiqa, not .*pawsx"
    ):
        plan(data, "panx,pawsx", "in_language")
    assert plan(data, "panx,tatoeba", "in_language").tasks == ("panx", "tatoeba")
