"""`python -m xlpretrain.finetune run`: each task of the demo benchmark (one of each kind:
pawsx, panx, xquad fine-tuned on a tiny model, tatoeba retrieved), every test language predicted
into XTREME's
submission layout, `results.json` equal to what the scorer (evaluate.py's functions) gives on
those predictions, a finished task not redone after a kill, and the run's config and data
errors in one line."""

import json
import pathlib
import shutil
import subprocess
import sys

import pytest

from configs import xtreme as xtreme_config
from tests import xtreme_fixtures as fx
from xlpretrain.core.errors import ConfigError
from xlpretrain.data import demo_corpus
from xlpretrain.data.corpora.sources import DataError
from xlpretrain.data.demo_corpus import demo_xtreme
from xlpretrain.eval.xtreme import score, tables
from xlpretrain.finetune import suite
from xlpretrain.finetune.plan import resolve, tasks_of
from xlpretrain.finetune.schema import check as check_run_config

REPO = pathlib.Path(__file__).resolve().parents[1]
TASKS = ("pawsx", "panx", "xquad")


@pytest.fixture(scope="module")
def xtreme_dir(tmp_path_factory) -> pathlib.Path:
    corpus = demo_corpus.default_demo_cache_dir()
    demo_corpus.build_demo_corpus(corpus)
    out = tmp_path_factory.mktemp("xtreme")
    demo_xtreme.write_benchmark(corpus, out)
    return out


def run_config(model, data, **overrides):
    cfg = xtreme_config.get_config("demo")
    cfg.init.path, cfg.data.dir = str(model), str(data)
    cfg.train.update(steps=4, log_every=2, checkpoint_every=2, async_checkpointing=False)
    cfg.eval.every_steps = 2
    for task in TASKS:
        cfg[task].update(batch_size=8, max_length=48)
    for key, value in overrides.items():
        section, name = key.split("__")
        cfg[section][name] = value
    check_run_config(cfg)
    return cfg


@pytest.fixture(scope="module")
def finished(tiny_xlmr, xtreme_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    return out, suite.run(resolve(run_config(tiny_xlmr, xtreme_dir)), out)


def test_every_test_language_is_predicted_in_the_submission_layout(finished, xtreme_dir):
    out, _ = finished
    tests = {
        "pawsx": [p.stem.removeprefix("test-") for p in (xtreme_dir / "pawsx").glob("test-*")],
        "panx": [p.stem.removeprefix("test-") for p in (xtreme_dir / "panx").glob("test-*")],
        "xquad": [p.stem.removeprefix("xquad.") for p in (xtreme_dir / "xquad").glob("xquad.*")],
        "tatoeba": [
            p.suffix[1:] for p in (xtreme_dir / "tatoeba").glob("*-en.*") if p.suffix != ".en"
        ],
    }
    for task, languages in tests.items():
        predicted = [p.stem.removeprefix("test-") for p in (out / "predictions" / task).iterdir()]
        assert sorted(predicted) == sorted(languages), task
        assert len(languages) == (39 if task == "tatoeba" else 40), task
        suffixes = {p.suffix for p in (out / "predictions" / task).iterdir()}
        assert suffixes == ({".json"} if task == "xquad" else {".tsv"})
        assert (out / task / "results.json").is_file()


def test_results_json_is_evaluate_py_on_the_predictions(finished, xtreme_dir):
    out, result = finished
    expected = score.score(out / "predictions", xtreme_dir / "labels", "xtreme").results
    assert json.loads((out / "results.json").read_text()) == expected
    assert result.labels == xtreme_dir / "labels"
    assert set(expected) >= {*TASKS, "tatoeba"}


def test_each_task_selects_on_english_dev(finished):
    out, result = finished
    for task in TASKS:
        best = json.loads((out / task / "best" / "best.json").read_text())
        assert result.tasks[task]["selected_step"] == best["step"] in (2, 4)
        assert result.tasks[task]["dev"] == pytest.approx(best["score"])


def test_a_killed_run_resumes_without_redoing_a_finished_task(
    finished, tiny_xlmr, xtreme_dir, tmp_path, caplog
):
    """PAWS-X done (`finished`'s, with this config: what a run of it alone leaves), then a run
    of it and PAN-X killed mid-way and run again."""
    for folder in ("", "predictions", "dev_predictions", "labels", "dev_labels"):
        if (finished[0] / folder / "pawsx").is_dir():
            shutil.copytree(finished[0] / folder / "pawsx", tmp_path / folder / "pawsx")
    cfg = run_config(tiny_xlmr, xtreme_dir)
    done = (tmp_path / "pawsx" / "results.json").stat().st_mtime_ns
    cfg.tasks = "pawsx,panx"
    cfg.train.stop_at = 2  # panx halts mid-way with a checkpoint, as a kill leaves it
    assert suite.run(resolve(cfg), tmp_path) is None
    assert not (tmp_path / "panx" / "results.json").exists()
    cfg.train.stop_at = -1
    with caplog.at_level("INFO", logger="xlpretrain"):
        assert suite.run(resolve(cfg), tmp_path) is not None
    assert (tmp_path / "pawsx" / "results.json").stat().st_mtime_ns == done
    assert any("pawsx: done already" in r.getMessage() for r in caplog.records)
    assert (tmp_path / "panx" / "results.json").is_file()


def test_a_task_config_takes_its_epochs_over_its_rows(tiny_xlmr, xtreme_dir):
    cfg = run_config(tiny_xlmr, xtreme_dir)
    cfg.train.steps = 0
    cfg.pawsx.update(epochs=2.5, batch_size=8, learning_rate=1e-3)
    own = resolve(cfg).task_plan("pawsx", train_rows=20)
    assert own.loop.steps == own.optim.steps == 8  # 3 steps an epoch, 2.5 epochs
    assert own.loop.eval_every == 2  # as run_config sets it (0: once an epoch, 3)
    assert own.optim.learning_rate == 1e-3 and own.batch_size == 8


def test_config_and_data_errors(tiny_xlmr, xtreme_dir, tmp_path):
    cfg = run_config(tiny_xlmr, xtreme_dir)
    assert tasks_of(cfg, "pawsx,bucc2018") == ("pawsx", "bucc2018")
    with pytest.raises(ConfigError, match="unknown task.*nosuch.*knows xnli.*tatoeba"):
        tasks_of(cfg, "nosuch")
    cfg.pawsx.learnin_rate = 1.0
    with pytest.raises(ConfigError, match="pawsx.learnin_rate"):
        check_run_config(cfg)
    missing = run_config(tiny_xlmr, tmp_path)
    missing.tasks = "panx"
    with pytest.raises(Exception, match=r"panx.*AmazonPhotos"):
        suite.run(resolve(missing), tmp_path / "out")


def test_the_command_line_runs_a_task_and_prints_the_table(tiny_xlmr, xtreme_dir, tmp_path):
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "xlpretrain.finetune", "run",
        f"--config={REPO / 'configs' / 'xtreme.py'}:demo", f"--init={tiny_xlmr}",
        f"--data={xtreme_dir}", f"--out={out}", "--tasks=pawsx", "--config.train.steps=2",
        "--config.pawsx.batch_size=8", "--config.pawsx.max_length=32",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pawsx" in done.stdout and "results.json" in done.stdout
    for name in ("results.json", "results.md", "results.png", "finetune.log"):
        assert (out / name).is_file(), name
    assert "| model | pawsx (Acc.) | avg |" in (out / "results.md").read_text()
    assert "test (against" in done.stdout and "dev (every language" in done.stdout
    bad = subprocess.run(
        [*command[:-3], "--tasks=nosuch"], capture_output=True, text=True, cwd=REPO, timeout=600
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


# --- A real download: XTREME's utils_preprocess.py leaves no test labels. ----------------------

EVERY_TASK = ("xnli", "pawsx", "panx", "udpos", "xquad", "mlqa", "tydiqa", "bucc2018", "tatoeba")
FINE_TUNED = EVERY_TASK[:7]
# The tasks whose every language XTREME ships a dev set of (BUCC's chose its threshold).
DEV_TABLE = ("xnli", "pawsx", "panx", "udpos", "mlqa", "bucc2018")


@pytest.fixture(scope="module")
def download(tiny_xlmr, tmp_path_factory):
    """All nine tasks run on `tests/xtreme_fixtures`' XTREME_DIR: written as utils_preprocess.py
    writes it, test files without labels, QA test answers its placeholder."""
    data = fx.write_xtreme_dir(tmp_path_factory.mktemp("download"))
    cfg = xtreme_config.get_config("demo")
    cfg.init.path, cfg.data.dir, cfg.tasks = str(tiny_xlmr), str(data), ",".join(EVERY_TASK)
    cfg.train.update(steps=2, log_every=2, checkpoint_every=2, async_checkpointing=False)
    cfg.eval.every_steps = 2
    for task in FINE_TUNED:
        cfg[task].update(batch_size=8, max_length=48)
    cfg.bucc2018.layer = 1
    out = tmp_path_factory.mktemp("out")
    finished = suite.run(resolve(cfg), out)
    suite.write_tables(finished, out, model="tiny")
    return cfg, out, finished


def test_a_download_without_test_labels_reports_every_dev_language(download):
    _, out, finished = download
    for task in EVERY_TASK:
        predicted = sorted(
            p.stem.removeprefix("test-") for p in (out / "predictions" / task).iterdir()
        )
        assert predicted == sorted(fx.LANGUAGES[task]), task
    assert finished.test is None and finished.labels is None and not (out / "labels").exists()
    dev = finished.dev.results
    assert sorted(dev) == sorted(DEV_TABLE)  # xquad, tydiqa, tatoeba: no dev set shipped
    for task in DEV_TABLE:
        assert set(tables.per_language(dev[task])[1]) == set(fx.LANGUAGES[task]), task
    for lang, chosen in finished.tasks["bucc2018"]["dev"].items():
        assert dev["bucc2018"]["f1"][lang] == pytest.approx(100 * chosen["f1"])
    assert sorted(finished.selected) == sorted(FINE_TUNED)
    for task in FINE_TUNED:
        assert finished.selected[task]["en"]["score"] == finished.tasks[task]["dev"], task
    assert finished.selected["tydiqa"]["en"]["score"] is None  # no English dev: the last step
    assert not (out / "results.json").exists()  # no test labels: no test table
    assert json.loads((out / "dev_results.json").read_text()) == {
        "selected": finished.selected,
        "dev": dev,
    }
    report = (out / "results.md").read_text()
    assert tables.NO_TEST in report and "## Dev" in report and "| mlqa | en |" in report
    assert (out / "results.png").is_file()


def test_the_test_table_with_the_original_test_answers(download, tmp_path):
    """`--labels DIR` (`data.labels_dir`): the finished tasks are not redone, test is scored."""
    cfg, out, _ = download
    answers = fx.write_labels_dir(tmp_path) / "labels"
    cfg = cfg.copy_and_resolve_references()
    cfg.data.labels_dir = str(answers)
    finished = suite.run(resolve(cfg), out)
    expected = score.score(out / "predictions", answers, "xtreme").results
    assert finished.test.results == expected and sorted(tables.task_results(expected)) == sorted(
        EVERY_TASK
    )
    assert json.loads((out / "results.json").read_text()) == expected
    assert json.loads((out / "dev_results.json").read_text())["dev"] == finished.dev.results
    cfg.data.labels_dir = str(tmp_path / "nosuch")
    with pytest.raises(DataError, match="labels folder .*nosuch.* does not exist"):
        suite.run(resolve(cfg), out)


def test_the_command_line_says_which_table_is_which(download, tiny_xlmr, tmp_path):
    cfg, out, _ = download
    command = [
        sys.executable, "-m", "xlpretrain.finetune", "run",
        f"--config={REPO / 'configs' / 'xtreme.py'}:demo", f"--init={tiny_xlmr}",
        f"--data={cfg.data.dir}", f"--out={out}", f"--tasks={','.join(EVERY_TASK)}",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dev (every language's dev set" in done.stdout and "XTREME leaderboard" in done.stdout
    answers = fx.write_labels_dir(tmp_path) / "labels"
    done = subprocess.run(
        [*command, f"--labels={answers}"], capture_output=True, text=True, cwd=REPO, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"test (against {answers})" in done.stdout
    bad = subprocess.run(
        [*command, f"--labels={tmp_path / 'nosuch'}"], capture_output=True, text=True, cwd=REPO
    )
    assert bad.returncode == 2 and "nosuch" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
