"""The cluster launchers in launch/: valid bash, the commands they would run (dry run), and a
clear error for each missing setting."""

import os
import pathlib
import shlex
import subprocess

import pytest

LAUNCH = pathlib.Path(__file__).resolve().parents[1] / "launch"
TRAIN_ARGS = ["--config", "configs/xlmr.py:large", "--workdir", "gs://bucket/run one"]
SETTINGS = {
    "slurm.sh": {"SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "8"},
    "tpu_vm.sh": {"TPU_NAME": "pod", "ZONE": "us-east5-a", "PROJECT": "p",
                  "REPO": "https://example.org/xlpretrain.git"},
    "gke_xpk.sh": {"CLUSTER": "c", "WORKLOAD": "w", "TPU_TYPE": "v5p-64", "IMAGE": "img",
                   "PROJECT": "p", "ZONE": "us-east5-a"},
}  # fmt: skip


def dry_run(script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(LAUNCH / script), *TRAIN_ARGS],
        env={"PATH": os.environ["PATH"], "DRY_RUN": "1", **env},
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip


def commands(result: subprocess.CompletedProcess) -> list[list[str]]:
    assert result.returncode == 0, result.stderr
    return [shlex.split(line[2:]) for line in result.stdout.splitlines() if line.startswith("+ ")]


@pytest.mark.parametrize("script", sorted(p.name for p in LAUNCH.glob("*.sh")))
def test_scripts_are_valid_bash(script):
    subprocess.run(["bash", "-n", str(LAUNCH / script)], check=True)


def train_part(command: str) -> list[str]:
    words = shlex.split(command)
    start = words.index("python")
    return words[start:]


EXPECTED_TRAIN = ["python", "-m", "xlpretrain.train", "--distributed", *TRAIN_ARGS]


def test_slurm_one_process_per_node_or_per_gpu():
    (srun,) = commands(dry_run("slurm.sh", **SETTINGS["slurm.sh"]))
    assert srun[:3] == ["srun", "--nodes=2", "--ntasks-per-node=1"]
    assert srun[3:] == EXPECTED_TRAIN
    (srun,) = commands(dry_run("slurm.sh", PROCESS_PER="gpu", **SETTINGS["slurm.sh"]))
    assert srun[:4] == ["srun", "--nodes=2", "--ntasks-per-node=8", "--gpus-per-task=1"]
    assert "PROCESS_PER" in dry_run("slurm.sh", PROCESS_PER="x", **SETTINGS["slurm.sh"]).stderr


def test_tpu_vm_installs_then_runs_on_every_worker():
    setup, train = commands(dry_run("tpu_vm.sh", SETUP="1", **SETTINGS["tpu_vm.sh"]))
    for command in (setup, train):
        assert command[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "pod"]
        assert "--worker=all" in command
    assert "pip install -e 'xlpretrain[tpu]'" in setup[-1]
    assert train_part(train[-1].removeprefix("--command=")) == EXPECTED_TRAIN
    (only_train,) = commands(dry_run("tpu_vm.sh", **SETTINGS["tpu_vm.sh"]))
    assert only_train == train


def test_gke_xpk_creates_one_workload():
    (create,) = commands(dry_run("gke_xpk.sh", **SETTINGS["gke_xpk.sh"]))
    assert create[:3] == ["xpk", "workload", "create"]
    assert "--tpu-type=v5p-64" in create and "--num-slices=1" in create
    assert train_part(create[-1].removeprefix("--command=")) == EXPECTED_TRAIN


@pytest.mark.parametrize("script", sorted(SETTINGS))
def test_each_missing_setting_is_named(script):
    for name in SETTINGS[script]:
        if name in ("SLURM_GPUS_ON_NODE", "REPO"):  # needed only by PROCESS_PER=gpu / SETUP=1
            continue
        settings = {k: v for k, v in SETTINGS[script].items() if k != name}
        result = dry_run(script, **settings)
        assert result.returncode != 0 and name in result.stderr, (script, name)
