"""Faults a long run meets — kill -9 at any moment, preemption (SIGTERM), divergence, an
unusable workdir, a batch the mesh cannot split — each ending with nothing lost and a message
that says what happened where. The runs are the real CLI in a subprocess."""

import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest

from xlpretrain.training.metrics import read_metrics
from xlpretrain.training.plan import resolve

REPO = pathlib.Path(__file__).resolve().parents[1]
STEPS = 12
DEMO = [
    "--config", str(REPO / "configs" / "demo.py"),
    f"--config.train.steps={STEPS}",
    "--config.train.log_every=1",
    "--config.train.checkpoint_every=2",
    "--config.train.keep_checkpoints=2",
    "--config.data.batch_size=8",
    "--config.data.max_length=32",
    "--config.model.vocab_size=2002",
    "--config.tokenizer.sentences_per_language=200",
    # No held-out evaluation: its step-0 retrieval, redone at every start, was most of each
    # run, and no fault here lands in it (the last step's evaluation is after every kill).
    "--config.eval.every_steps=0",
]  # fmt: skip


def train_command(workdir: pathlib.Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "xlpretrain.train", *DEMO, "--workdir", str(workdir), *extra]


def train(workdir: pathlib.Path, *extra: str) -> subprocess.CompletedProcess:
    """The CLI run to its end; its log (stdout and stderr together) in ``.stdout``."""
    return subprocess.run(
        train_command(workdir, *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        cwd=REPO,
    )


def losses(workdir: pathlib.Path) -> dict[int, float]:
    """step -> loss; every step appears once (a resumed run drops what it recomputes)."""
    records = read_metrics(workdir)
    steps = [r["step"] for r in records]
    assert len(steps) == len(set(steps)), f"steps logged twice: {steps}"
    return {r["step"]: r["loss"] for r in records}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[pathlib.Path, dict[int, float]]:
    """An uninterrupted run; its tokenizer is every other run's, so all read the same ids."""
    workdir = tmp_path_factory.mktemp("reference")
    result = train(workdir)
    assert result.returncode == 0, result.stdout[-3000:]
    got = losses(workdir)
    assert sorted(got) == list(range(1, STEPS + 1))
    return workdir / "tokenizer.model", got


def start(workdir: pathlib.Path, tokenizer: pathlib.Path) -> subprocess.Popen:
    return subprocess.Popen(
        train_command(workdir, f"--config.tokenizer.path={tokenizer}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )


def last_logged(workdir: pathlib.Path) -> int:
    path = workdir / "metrics.jsonl"
    if not path.exists():
        return 0
    steps = [line.split(",")[0] for line in path.read_text().splitlines() if line.endswith("}")]
    return max((int(s.split(":")[1]) for s in steps), default=0)


def wait_for_step(proc: subprocess.Popen, workdir: pathlib.Path, step: int) -> bool:
    """True once `step` is logged; False if the run ended first."""
    deadline = time.monotonic() + 300
    while last_logged(workdir) < step:
        if proc.poll() is not None:
            return False
        assert time.monotonic() < deadline, "the run made no progress for 300 s"
        time.sleep(0.01)
    return True


def kill_and_resume(reference, tmp_path, kills: int, seed: int) -> None:
    """Kills the run `kills` times, each right after a random logged step plus a random delay
    of up to 0.3 s — within a step, within an asynchronous checkpoint write (every even step
    starts one) or just after — then lets it finish: its losses are the uninterrupted run's."""
    tokenizer, want = reference
    rng = random.Random(seed)
    workdir = tmp_path / "killed"
    moments = []
    for _ in range(kills):
        proc = start(workdir, tokenizer)
        target = min(last_logged(workdir) + rng.randint(1, 4), STEPS - 1)
        if wait_for_step(proc, workdir, target):
            time.sleep(rng.uniform(0.0, 0.3))
            proc.send_signal(signal.SIGKILL)
            moments.append((target, last_logged(workdir)))
        proc.wait(timeout=60)
    result = train(workdir, f"--config.tokenizer.path={tokenizer}")
    assert result.returncode == 0, result.stdout[-3000:]
    got = losses(workdir)
    assert sorted(got) == list(range(1, STEPS + 1)), f"seed {seed}, kills {moments}"
    for step, loss in want.items():
        assert got[step] == pytest.approx(loss, rel=1e-5, abs=1e-5), (step, seed, moments)
    complete = sorted(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())
    assert complete[-1] == STEPS
    assert not (workdir / "checkpoints" / "unreadable").exists()  # no half-written step taken


def test_kill_9_at_random_moments_resumes_exactly(reference, tmp_path):
    seed = int(os.environ.get("XLPRETRAIN_KILL_SEED", time.time_ns() % 10_000))
    kill_and_resume(reference, tmp_path, kills=3, seed=seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_kill_9_many_times(reference, tmp_path, seed):
    kill_and_resume(reference, tmp_path, kills=8, seed=seed)


def stop(workdir: pathlib.Path, tokenizer: pathlib.Path, signum: int, code: int, after: int):
    """Sends `signum` once step `after` is logged; the run must exit with `code` and a
    checkpoint at the step it stopped after. (that step, its output)"""
    proc = start(workdir, tokenizer)
    assert wait_for_step(proc, workdir, after)
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == code, output[-3000:]
    stopped = last_logged(workdir)
    assert after <= stopped < STEPS, output[-3000:]
    assert (workdir / "checkpoints" / str(stopped)).is_dir(), output[-3000:]
    return stopped, output


@pytest.fixture(scope="module")
def preempted_then_interrupted(reference, tmp_path_factory):
    """One run stopped twice, each time resumed by the same command: SIGTERM after step 3, then
    Ctrl-C two steps into the resumed run, then run to its end, where it logs the losses of the
    uninterrupted run. One resume serves both signals' tests (a resume each cost a whole run).
    (workdir, (step, output) of the SIGTERM and of the Ctrl-C, the output resuming after each)"""
    tokenizer, want = reference
    workdir = tmp_path_factory.mktemp("signals") / "run"
    preempted, preempted_output = stop(workdir, tokenizer, signal.SIGTERM, 0, after=3)
    interrupted, interrupted_output = stop(
        workdir, tokenizer, signal.SIGINT, 130, after=preempted + 2
    )
    result = train(workdir, f"--config.tokenizer.path={tokenizer}")
    assert result.returncode == 0, result.stdout[-3000:]
    got = losses(workdir)
    for step, loss in want.items():
        assert got[step] == pytest.approx(loss, rel=1e-5, abs=1e-5), step
    return workdir, (preempted, preempted_output), (interrupted, interrupted_output), result.stdout


def test_sigterm_saves_the_current_step_and_exits_0(preempted_then_interrupted):
    """...and the same command resumes from that step (exactly: the fixture's losses)."""
    workdir, (stopped, output), (_, resumed_output), _ = preempted_then_interrupted
    assert f"preempted: stopped after step {stopped} with a checkpoint" in output
    assert f"resumed from {workdir / 'checkpoints'}/{stopped}" in resumed_output


def test_huge_learning_rate_stops_with_the_divergence_named(reference, tmp_path):
    tokenizer, _ = reference
    result = train(
        tmp_path, f"--config.tokenizer.path={tokenizer}", "--config.optim.learning_rate=1e9"
    )
    assert result.returncode == 1
    assert "xlpretrain.train: error: the run diverged" in result.stdout, result.stdout[-3000:]
    assert "train.max_bad_steps=5" in result.stdout
    assert "The last checkpoint is step" in result.stdout


def test_ctrl_c_saves_the_current_step_and_exits_130(preempted_then_interrupted):
    """The first Ctrl-C is a preemption the user asked for: the step finishes and is saved,
    the run says how to resume in one line and exits 130; the resumed run is exact."""
    workdir, _, (stopped, output), resumed_output = preempted_then_interrupted
    assert (
        f"xlpretrain.train: stopped: Ctrl-C: stopped after step {stopped} with a checkpoint in "
        f"{workdir / 'checkpoints'}; run the same command to resume" in output
    )
    assert "Traceback" not in output and "KeyboardInterrupt" not in output
    assert f"curves: {workdir / 'curves.png'}" in output  # the picture, up to the stop
    assert f"resumed from {workdir / 'checkpoints'}/{stopped}" in resumed_output


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--config.mesh.data=3"],
            "mesh: 8 devices cannot be split into axes of size 3",
        ),
        (
            ["--config.mesh.data=4", "--config.data.batch_size=6"],
            "config key 'data.batch_size': 6 (mmlm) / train.grad_accum=1 = 6 rows per "
            "micro-batch, not divisible by the data-parallel size 8 (the mesh axes mesh.rules "
            "put 'batch' on: data 4 × fsdp 2)",
        ),
    ],
)
def test_mesh_and_batch_errors_before_compiling(reference, tmp_path, extra, message):
    tokenizer, _ = reference
    result = train(
        tmp_path, f"--config.tokenizer.path={tokenizer}", "--config.mesh.fsdp=-1", *extra
    )
    assert result.returncode == 2
    assert message in result.stdout, result.stdout[-3000:]
    assert "Traceback" not in result.stdout
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


def test_read_only_workdir_is_named():
    """/proc refuses new folders, for root too (CI may run as root, where chmod is no bar)."""
    workdir = "/proc/xlpretrain-run"
    result = train(pathlib.Path(workdir))
    assert result.returncode == 2
    assert f"workdir {workdir} is not writable" in result.stdout, result.stdout
    assert "Traceback" not in result.stdout


def test_full_disk_is_named_before_the_first_step(tmp_path, monkeypatch, udhr_run_config):
    """A disk with less room than one checkpoint stops the run at build, naming both sizes."""
    import shutil

    from xlpretrain.training import trainer as train_lib

    real = shutil.disk_usage
    monkeypatch.setattr(
        train_lib.shutil, "disk_usage", lambda path: real(path)._replace(free=1 << 20)
    )
    # wider than the tiny default, so that one checkpoint needs more than 1 MiB
    cfg = udhr_run_config(model__hidden_size=64, model__mlp_dim=128, objectives={"mmlm": 1.0})
    with pytest.raises(train_lib.WorkdirError, match=r"1\.0 MiB free, but one checkpoint"):
        train_lib.build(resolve(cfg), str(tmp_path))
