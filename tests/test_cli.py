"""The command lines as a user meets them: a mistake is one line on stderr naming what and where
(with the nearest valid name), exit status 2 and nothing left on disk; Ctrl-C saves or aborts
in one line; a resumed run says how its config changed and refuses changes to the training
the checkpoint is part of unless told; the run reports what it did."""

import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from xlpretrain.data.corpora.sources import DataError
from xlpretrain.training import cli, trainer
from xlpretrain.training.config import ConfigError
from xlpretrain.training.metrics import Progress, progress_line, summary_lines
from xlpretrain.training.plan import resolve
from xlpretrain.training.preemption import PreemptionWatch

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            ["--config.optim.learnin_rate=1e-3"],
            "config key 'optim.learnin_rate': unknown key; did you mean 'optim.learning_rate'?",
        ),
        (["--config.optimm.learning_rate=1"], "config key 'optimm': unknown key; did you mean"),
        (["--config.train.steps=abc"], "config key 'train.steps': cannot read 'abc'"),
        (["--config.data.batch_size=-1"], "config key 'data.batch_size': must be > 0, got -1"),
        (["--config=configs/nonexistent.py"], "--config configs/nonexistent.py: no such file"),
        (["--config=configs/demoo.py"], "; did you mean configs/demo.py?"),
        (  # a shipped config's name that is not one: the file looked for, the shipped names
            ["--config=nosuch:tiny"],
            f"--config nosuch:tiny: no such file ({REPO / 'nosuch'}) and no shipped config "
            "'nosuch' (shipped: demo, ernie_m, finetune_pairs, mbert, mmbert, veco, xlm_e, xlmr, "
            "xtreme)",
        ),
        (
            ["--config=nosuch.py:tiny"],
            f"--config nosuch.py:tiny: no such file ({REPO / 'nosuch.py'}), and shipped configs "
            "are named without .py or a folder (shipped: demo, ernie_m, finetune_pairs, ",
        ),
        (
            ["--config=xlmr.py:tiny"],
            "(shipped: demo, ernie_m, finetune_pairs, mbert, mmbert, veco, "
            "xlm_e, xlmr, xtreme); did you mean xlmr:tiny?",
        ),
        (
            ["--config.data.mono_dir=/no/such/corpus"],  # evaluating, as configs/demo.py does
            "config key 'data.mono_dir': no such folder: /no/such/corpus",
        ),
        (
            ["--config.data.parallel_dir=/no/pairs"],
            "config key 'data.mono_dir': mmlm read monolingual data: set it to a folder",
        ),
        (
            ["--config.optim.schedule=wsd", "--config.optim.decay_steps=541"],
            "config key 'optim.decay_steps': 541, but train.steps=600 leave 540 after "
            "optim.warmup_steps=60: set a decay of at most 540 steps",
        ),
    ],
)
def test_a_user_error_is_one_line_with_exit_2_and_leaves_nothing(tmp_path, arguments, message):
    assert message in one_line_error(tmp_path / "run", arguments)


def one_line_error(workdir: pathlib.Path, arguments: list[str]) -> str:
    """The one line `python -m xlpretrain.train` of configs/demo.py into `workdir` with
    `arguments` prints on stderr, checked to be an error that exits 2 and leaves no `workdir`."""
    command = [sys.executable, "-m", "xlpretrain.train", "--config=configs/demo.py"]
    result = subprocess.run(
        [*command, f"--workdir={workdir}", *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    lines = result.stderr.splitlines()  # nothing else: JAX's start-up lines are held back
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert len(lines) == 1 and "Traceback" not in result.stderr + result.stdout, lines
    assert lines[0].startswith("xlpretrain.train: error: "), lines
    assert not workdir.exists()
    return lines[0]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("tokenizer.json", b"<html>not JSON</html>", "not JSON"),
        ("tokenizer.json", b'{"pieces": ["a", "b"]}', "JSON, but not a Hugging Face tokenizer"),
        ("tokenizer.model", bytes(range(256)) * 4, "not a SentencePiece model"),
    ],
)
def test_a_malformed_tokenizer_is_one_line_naming_it(tmp_path, name, content, message):
    """A `tokenizer.path` that is no tokenizer stops the run before it starts, as any other
    user error does."""
    path = tmp_path / "given" / name
    path.parent.mkdir()
    path.write_bytes(content)
    line = one_line_error(tmp_path / "run", [f"--config.tokenizer.path={path}"])
    assert f"config key 'tokenizer.path': {path}: {message}" in line


def test_a_workdir_that_is_a_file_is_named_so(tmp_path, capsys):
    path = tmp_path / "notes.txt"
    path.write_text("mine")
    with pytest.raises(SystemExit) as stop:
        cli.run_task(str(path), lambda: None, lambda _plan: None, print, "train.log")
    assert stop.value.code == 2 and path.read_text() == "mine"
    assert f"workdir {path} is a file, not a folder" in capsys.readouterr().err


def test_a_failed_start_removes_only_what_it_added(tmp_path, capsys):
    """A run that fails before its first step removes the files it made; an existing workdir
    keeps everything it had (its log gets the error)."""
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "train.log").write_text("earlier run\n")
    (workdir / "notes.txt").write_text("mine")

    def build(_plan):
        (workdir / "tokenizer.model").write_text("half-made")
        raise DataError(f"{workdir}/mono/de.txt:41: invalid UTF-8 (strict mode)")

    with pytest.raises(SystemExit) as stop:
        cli.run_task(str(workdir), lambda: None, build, print, "train.log")
    assert stop.value.code == 2
    assert sorted(p.name for p in workdir.iterdir()) == ["notes.txt", "train.log"]
    assert "de.txt:41: invalid UTF-8" in (workdir / "train.log").read_text()
    assert capsys.readouterr().err.count("\n") == 1

    fresh = tmp_path / "fresh"
    with pytest.raises(SystemExit):
        cli.run_task(str(fresh), lambda: None, build, print, "train.log")
    assert not fresh.exists()

    def invalid():
        raise ConfigError("config key 'train.steps': must be > 0, got 0")

    with pytest.raises(SystemExit) as stop:  # a config error stops before the disk is touched
        cli.run_task(str(fresh), invalid, build, print, "train.log")
    assert stop.value.code == 2 and not fresh.exists()


def test_ctrl_c_before_training_is_one_line_and_exit_130(tmp_path, capsys):
    def build(_plan):
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as stop:
        cli.run_task(str(tmp_path / "run"), lambda: None, build, print, "train.log")
    assert stop.value.code == 130
    error = capsys.readouterr().err.strip()
    assert error.endswith("aborted (Ctrl-C); nothing was saved after the last checkpoint")


def test_first_ctrl_c_asks_for_a_checkpoint_and_the_second_aborts(caplog):
    """...and the handler writes nothing: it can interrupt the main thread inside its own write
    to the console, where a second write fails ("reentrant call", a traceback in a Ctrl-C'd
    run's output); the step boundary says it, once."""
    previous = signal.getsignal(signal.SIGINT)
    with caplog.at_level("INFO", logger="xlpretrain"), PreemptionWatch(manager=None) as watch:
        assert not watch.reached(1)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)
        assert not caplog.messages
        assert watch.reached(2) and watch.interrupted and watch.reached(3)
        assert len(caplog.messages) == 1
        assert caplog.messages[0].startswith("Ctrl-C: stopping after step 2 with a checkpoint")
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    assert signal.getsignal(signal.SIGINT) is previous


def test_progress_line_carries_accuracy_learning_rate_and_gradient_norm():
    scalars = {
        "loss": 5.5,
        "loss/mmlm": 5.0,
        "loss/tlm": 6.0,
        "accuracy/mmlm": 0.25,
        "accuracy/tlm": 0.125,
        "learning_rate": 4.8e-4,
        "grad_norm": 1.234,
        "tokens_per_s": 12_300.0,
    }
    line = progress_line(30, 60, scalars, 83.0)
    assert line == (
        "step 30/60 | loss 5.5000 (mmlm 5.000 tlm 6.000) | acc mmlm 0.250 tlm 0.125 | "
        "lr 4.80e-04 | grad 1.23 | 12.3k tok/s | ETA 0:01:23"
    )
    tuned = {**scalars, "eval/accuracy/fra": 0.5, "eval/accuracy/rus": 0.75}
    assert progress_line(30, 60, tuned, 0).endswith("| eval accuracy fra 0.500 rus 0.750")


def test_a_run_stopping_early_shows_its_steps_against_the_whole_run_and_its_eta_to_the_stop():
    """`train.stop_at=40` of 60 steps: step 30 of 60 (the schedule's), stopping at 40, the ETA
    to step 40; a stop at the last step is no early stop."""
    scalars = {"loss": 5.5, "loss/mmlm": 5.5, "tokens_per_s": 1000.0}
    line = progress_line(30, 60, scalars, 12.0, stop_at=40)
    assert line == (
        "step 30/60 (stopping at 40) | loss 5.5000 (mmlm 5.500) | 1.0k tok/s | ETA 0:00:12 to "
        "step 40"
    )
    assert progress_line(30, 60, scalars, 12.0, stop_at=60) == progress_line(30, 60, scalars, 12.0)


def test_eta_comes_from_the_steps_after_the_compiling_one(monkeypatch):
    clock = iter([0.0, 10.0, 11.0, 11.0])  # start; step 1 done (compiled); step 3 logged twice
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    progress = Progress(start_step=0, end_step=103)
    progress.step_done(1, tokens=5, block_on=None)
    progress.step_done(2, tokens=5, block_on=None)
    progress.step_done(3, tokens=5, block_on=None)
    assert progress.seconds_left(3) == pytest.approx(0.5 * 100)  # 2 steps in 1 s after step 1


def test_the_summary_says_what_the_run_did():
    lines = summary_lines(
        first_step=1,
        last_step=200,
        total_steps=200,
        seconds=35.2,
        tokens=556_187,
        last={"loss": 12.0, "loss/mmlm": 5.6, "accuracy/mmlm": 0.2, "loss/tlm": 6.4},
        best={"eval/loss/mmlm": (5.3, 150), "eval/retrieval": (0.25, 200)},
        checkpoint="runs/demo/checkpoints/200",
        curves="runs/demo/curves.png",
        next_steps=["python -m xlpretrain.convert to-hf runs/demo runs/demo/hf"],
    )
    assert lines == [
        "finished steps 1-200 of 200 in 0:00:35: 556,187 tokens (15.8k tokens/s)",
        "final loss 12.0000 (mmlm loss 5.6000 accuracy 0.200, tlm loss 6.4000)",
        "best held-out: loss/mmlm 5.3000 (step 150), retrieval 0.2500 (step 200)",
        "checkpoint: runs/demo/checkpoints/200",
        "curves: runs/demo/curves.png",
        "next: python -m xlpretrain.convert to-hf runs/demo runs/demo/hf",
    ]


def test_the_summary_sets_held_out_figures_beside_what_needs_no_learning():
    last = {
        "step": 200,
        "loss": 9.0,
        "eval/loss/mmlm": 4.1,
        "eval/accuracy/mmlm": 0.2,
        "eval/loss/tlm": 4.0,
        "eval/accuracy/tlm": 0.17,
        "eval/retrieval": 0.3,
        "eval/retrieval/en-de": 0.68,
        "eval/retrieval/across_scripts": 0.035,
        "eval/retrieval/within_latin": 0.515,
    }
    baselines = {
        "eval/loss/mmlm": {"unigram": 5.98},
        "eval/accuracy/mmlm": {"unigram": 0.113},
        "eval/loss/tlm": {"unigram": 5.68},
        "eval/accuracy/tlm": {"unigram": 0.067},
        "eval/retrieval": {"step 0": 0.375, "chance": 0.01},
        "eval/retrieval/across_scripts": {"step 0": 0.033, "chance": 0.01},
        "eval/retrieval/within_latin": {"step 0": 0.632, "chance": 0.01},
    }
    best = {"eval/retrieval": (0.31, 100), "eval/retrieval/en-de": (0.7, 100)}
    lines = summary_lines(
        first_step=1, last_step=200, total_steps=200, seconds=60.0, tokens=1000, last=last,
        best=best, checkpoint=None, next_steps=(), baselines=baselines,
    )  # fmt: skip
    assert lines[2:] == [
        "held-out at step 200: mmlm loss 4.1000 (unigram 5.9800) accuracy 0.200 (unigram 0.113);"
        " tlm loss 4.0000 (unigram 5.6800) accuracy 0.170 (unigram 0.067); retrieval@1 0.300"
        " (step 0 0.375, chance 0.010): across scripts 0.035 (step 0 0.033, chance 0.010),"
        " within Latin 0.515 (step 0 0.632, chance 0.010)",
        "best held-out: retrieval 0.3100 (step 100)",  # not each pair's
    ]


def test_a_resumed_run_states_and_guards_its_config_changes(udhr_run_config, tmp_path, caplog):
    """Changing how a run is logged is accepted and logged; changing its schedule stops the run
    naming the change, unless `train.resume_with_changes`; then the learning-rate jump is
    stated and the earlier config is kept beside the new one."""
    first = udhr_run_config(train__steps=2)
    built = trainer.build(resolve(first), str(tmp_path))
    trainer.run(built)
    built.checkpointer.close()
    saved = (tmp_path / "config.json").read_text()

    with caplog.at_level(logging.INFO, logger="xlpretrain"):
        logged = trainer.build(
            resolve(udhr_run_config(train__steps=2, train__log_every=5)), str(tmp_path)
        )
    logged.checkpointer.close()
    assert "resuming at step 2 with a changed config: train.log_every 1 → 5" in caplog.text

    longer = udhr_run_config(train__steps=6)
    with pytest.raises(ConfigError) as refused:
        trainer.build(resolve(longer), str(tmp_path))
    assert "train.steps 2 → 6" in str(refused.value)
    assert "--config.train.resume_with_changes=True" in str(refused.value)

    caplog.clear()
    accepted = udhr_run_config(train__steps=6, train__resume_with_changes=True)
    with caplog.at_level(logging.INFO, logger="xlpretrain"):
        trainer.build(resolve(accepted), str(tmp_path)).checkpointer.close()
    assert "learning-rate schedule is rebuilt from the new config: step 3 trains at" in caplog.text
    kept = json.loads((tmp_path / "config.step-2.json").read_text())
    assert kept == json.loads(saved) and kept["train"]["steps"] == 2
    assert json.loads((tmp_path / "config.json").read_text())["train"]["steps"] == 6
