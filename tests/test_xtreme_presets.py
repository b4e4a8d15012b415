"""`configs/xtreme.py`'s presets as the plans each task runs by: XTREME's baselines, and the
seeds' published scripts where they exist (ERNIE-M: XNLI and MLQA; VECO: XNLI, XQuAD and
Tatoeba), checked through the plan a task resolves to, so that a key the run does not read the
way the preset means would show."""

import pytest

from configs import xtreme as xtreme_config
from xlpretrain.core.errors import ConfigError
from xlpretrain.finetune.plan import resolve
from xlpretrain.finetune.schema import check as check_run_config

SQUAD_ROWS = 88_000  # about SQuAD v1.1's training windows


def plan(preset: str, task: str, rows: int = SQUAD_ROWS):
    cfg = xtreme_config.get_config(preset)
    cfg.init.path, cfg.data.dir = "model", "xtreme"
    check_run_config(cfg)
    return resolve(cfg).task_plan(task, rows)


@pytest.mark.parametrize("preset", xtreme_config.PRESETS)
def test_every_preset_resolves(preset):
    cfg = xtreme_config.get_config(preset)
    cfg.init.path, cfg.data.dir = "model", "xtreme"
    check_run_config(cfg)
    assert resolve(cfg).tasks


def test_xtreme_baseline_fine_tunes_every_layer_alike_without_weight_decay():
    xnli = plan("base", "xnli", rows=392_702)
    assert (xnli.optim.learning_rate, xnli.optim.layer_decay) == (2e-5, 1.0)
    assert xnli.optim.weight_decay == 0.0 and xnli.batch_size == 32 and xnli.max_length == 128
    assert xnli.loop.steps == 5 * 12_272 and xnli.optim.warmup_steps == 0  # 392,702 pairs / 32
    mlqa = plan("base", "mlqa")
    assert (mlqa.optim.warmup_steps, mlqa.optim.weight_decay) == (500, 1e-4)


def test_ernie_m_xnli_and_mlqa():
    cfg = xtreme_config.get_config("ernie_m")
    assert cfg.tasks == "xnli,mlqa"
    xnli, mlqa = plan("ernie_m", "xnli"), plan("ernie_m", "mlqa")
    assert (xnli.optim.learning_rate, xnli.optim.layer_decay, xnli.max_length) == (5e-5, 0.8, 256)
    assert xnli.loop.steps == 5 * (SQUAD_ROWS // 32)
    assert xnli.optim.warmup_steps == round(0.1 * xnli.loop.steps)
    assert (mlqa.optim.learning_rate, mlqa.optim.layer_decay, mlqa.max_length) == (3e-4, 0.8, 384)
    assert mlqa.settings.doc_stride == 128 and mlqa.optim.weight_decay == 0.0
    large = plan("ernie_m_large", "mlqa")
    assert (large.optim.learning_rate, large.optim.layer_decay) == (8e-5, 0.9)


def test_veco_xquad_warms_up_500_steps():
    xquad = plan("veco_large", "xquad")
    assert xquad.optim.warmup_steps == 500 and xquad.loop.steps == 2 * (SQUAD_ROWS // 16)
    assert (xquad.optim.weight_decay, xquad.settings.doc_stride, xquad.batch_size) == (1e-4, 64, 16)
    xnli = plan("veco_large", "xnli")
    assert (xnli.optim.warmup_steps, xnli.batch_size, xnli.max_length) == (0, 64, 128)
    cfg = xtreme_config.get_config("veco_large")
    cfg.init.path, cfg.data.dir = "model", "xtreme"
    assert resolve(cfg).retrieval["tatoeba"].layer == 18
    tiny = resolve(cfg).task_plan("xquad", 16)  # 2 steps: still 500 (uncapped)
    assert tiny.optim.warmup_steps == 500 and not tiny.optim.cap_warmup


def test_a_task_section_key_out_of_range_is_named():
    cfg = xtreme_config.get_config("base")
    cfg.init.path, cfg.data.dir = "model", "xtreme"
    cfg.mlqa.layer_decay = 0.0
    with pytest.raises(ConfigError, match=r"mlqa.layer_decay.*\(0, 1\]"):
        check_run_config(cfg)
    cfg = xtreme_config.get_config("base")
    cfg.init.path, cfg.data.dir = "model", "xtreme"
    cfg.optim.layer_decay = 0.9  # each task's own
    with pytest.raises(ConfigError, match="optim.layer_decay"):
        check_run_config(cfg)
    cfg = xtreme_config.get_config("base")
    cfg.init.path, cfg.data.dir = "model", "xtreme"
    cfg.xquad.warmup_fraction = 0.1  # beside base's 500 steps: which one was meant?
    with pytest.raises(ConfigError, match=r"'xquad.warmup_fraction' \(0.1\) and 'xquad.warmup_s"):
        check_run_config(cfg)
