"""Multi-process runs on one machine: `python -m xlpretrain.launch local` joins CPU processes
through jax.distributed; two processes × two devices train exactly as one process × four
devices, stop, and resume."""

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.compile_flags import FAST_COMPILE
from xlpretrain import launch
from xlpretrain.parallel import distributed
from xlpretrain.training.metrics import read_metrics

STEPS = 6
TRAIN = [
    "--config", "configs/demo.py",
    "--config.train.steps=6", "--config.train.log_every=1", "--config.train.checkpoint_every=3",
    "--config.data.batch_size=8", "--config.data.max_length=32",
    "--config.model.vocab_size=2002", "--config.model.hidden_size=32",
    "--config.model.mlp_dim=64", "--config.tokenizer.sentences_per_language=200",
    # No held-out evaluation (its step-0 retrieval was most of each process's time): the
    # losses are compared here; tests/test_docs.py runs the README's launch with evaluation.
    "--config.eval.every_steps=0",
]  # fmt: skip


def losses(workdir) -> dict[int, tuple[float, float, float]]:
    return {r["step"]: (r["loss"], r["loss/mmlm"], r["loss/tlm"]) for r in read_metrics(workdir)}


def launch_local(workdir, *extra: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "xlpretrain.launch",
        "local",
        "--processes",
        "2",
        "--devices-per-process",
        "2",
        "--",
        *TRAIN,
        "--workdir",
        str(workdir),
        *extra,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)  # fmt: skip


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The reference: one process with four devices, straight through."""
    workdir = tmp_path_factory.mktemp("one_process")
    env = {**os.environ, "XLA_FLAGS": f"{FAST_COMPILE} --xla_force_host_platform_device_count=4"}
    subprocess.run(
        [sys.executable, "-m", "xlpretrain.train", *TRAIN, "--workdir", str(workdir)],
        env=env, check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    return workdir


def test_two_processes_log_the_losses_of_one_and_resume(one_process, tmp_path):
    reference = losses(one_process)
    assert sorted(reference) == list(range(1, STEPS + 1))
    tokenizer = f"--config.tokenizer.path={one_process / 'tokenizer.model'}"
    first = launch_local(tmp_path, tokenizer, "--config.train.stop_at=3")
    assert first.returncode == 0, first.stdout[-3000:]
    assert "[0]" in first.stdout and "[1]" in first.stdout
    assert sorted(losses(tmp_path)) == [1, 2, 3]
    second = launch_local(tmp_path, tokenizer)
    assert second.returncode == 0, second.stdout[-3000:]
    assert "resumed from" in second.stdout
    resumed = losses(tmp_path)
    assert sorted(resumed) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        np.testing.assert_allclose(
            resumed[step], reference[step], rtol=1e-5, atol=1e-5, err_msg=f"step {step}"
        )
    log = (tmp_path / "train.log").read_text()
    assert log.count("step 6/6") == 1  # only process 0 writes the log


def test_a_failing_process_stops_the_others_and_its_code_is_returned(tmp_path):
    result = launch_local(tmp_path, "--config.model.num_heads=3")  # 32 % 3: invalid config
    assert result.returncode != 0
    assert "hidden_size" in result.stdout


def test_partial_distributed_environment_is_an_error_naming_what_is_missing():
    with pytest.raises(ValueError, match="JAX_PROCESS_ID"):
        distributed.initialize({"JAX_COORDINATOR_ADDRESS": "localhost:1", "JAX_NUM_PROCESSES": "2"})


def test_launch_needs_train_arguments():
    with pytest.raises(SystemExit):
        launch.main(["local", "--processes", "2"])


def test_each_process_keeps_the_callers_xla_flags_and_gets_its_device_count(monkeypatch):
    flags = "--xla_dump_to=/tmp/dump --xla_force_host_platform_device_count=8"
    monkeypatch.setenv("XLA_FLAGS", flags)
    env = launch.process_env(1, processes=2, devices=2, port=1234)
    assert env["XLA_FLAGS"] == (
        "--xla_dump_to=/tmp/dump --xla_force_host_platform_device_count=8 "
        "--xla_force_host_platform_device_count=2"  # the last one counts
    )
    assert (env["JAX_PROCESS_ID"], env["JAX_NUM_PROCESSES"]) == ("1", "2")
