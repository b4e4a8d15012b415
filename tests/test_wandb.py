"""Weights & Biases beside metrics.jsonl and TensorBoard (`train.wandb_project`), run offline:
every logged record reaches the run, a resumed run continues the same W&B run, and a project
without wandb installed is a config error before anything is built."""

import importlib.util
import json

import jax
import pytest

from xlpretrain.training import trainer as trainer_lib
from xlpretrain.training.config import ConfigError
from xlpretrain.training.metrics import read_metrics
from xlpretrain.training.plan import resolve


def train(cfg, workdir) -> None:
    trainer = trainer_lib.build(resolve(cfg), str(workdir), jax.devices()[:1])
    try:
        trainer_lib.run(trainer)
    finally:
        trainer.checkpointer.close()


def test_records_go_to_an_offline_run_that_a_resumed_run_continues(
    udhr_run_config, tmp_path, monkeypatch
):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = udhr_run_config(train__wandb_project="xlpretrain-test", train__stop_at=2)
    train(cfg, tmp_path)
    run_id = (tmp_path / "wandb_run_id").read_text().strip()
    cfg.train.stop_at = -1  # the rest of the run, resumed from step 2
    train(cfg, tmp_path)

    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(run.name.endswith(f"-{run_id}") for run in runs)
    logged = b"".join(path.read_bytes() for run in runs for path in run.glob("run-*.wandb"))
    assert b"xlpretrain-test" in logged  # the project, with the run's config
    records = read_metrics(tmp_path)
    assert len(records) == cfg.train.steps
    for record in records:  # each value as W&B writes it: shortest JSON of the float
        for key in ("loss", "loss/mmlm", "accuracy/tlm", "learning_rate", "grad_norm"):
            assert json.dumps(record[key]).encode() in logged, (record["step"], key)


def test_a_project_without_wandb_installed_is_a_config_error(udhr_run_config, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    with pytest.raises(
        ConfigError, match=r"train.wandb_project.*pip install wandb \(the wandb extra\)"
    ):
        resolve(udhr_run_config(train__wandb_project="p"))
