import subprocess
import sys

import ml_collections
import pytest

from xlpretrain import config as config_lib


def test_default_and_shipped_configs_validate():
    config_lib.validate(config_lib.default_config())
    sys.path.insert(0, "configs")
    import demo
    import xlmr

    config_lib.validate(demo.get_config())
    for size in ("tiny", "base", "large"):
        config_lib.validate(xlmr.get_config(size))
    with pytest.raises(ValueError, match="unknown size"):
        xlmr.get_config("huge")


def test_xlmr_sizes():
    sys.path.insert(0, "configs")
    import xlmr

    base, large = xlmr.get_config("base"), xlmr.get_config("large")
    assert (base.model.num_layers, base.model.hidden_size, base.model.num_heads) == (12, 768, 12)
    assert (large.model.num_layers, large.model.hidden_size, large.model.num_heads) == (
        24,
        1024,
        16,
    )
    assert base.model.vocab_size == large.model.vocab_size == 250002
    assert base.data.mono_alpha == 0.3
    assert {k: w for k, w in base.objectives.items() if w} == {"mmlm": 1.0}


@pytest.mark.parametrize(
    "path, value, message",
    [
        ("train.stepz", 3, "'train.stepz': unknown key"),
        ("optim.learning_rate", -1.0, "'optim.learning_rate': must be > 0"),
        ("model.dtype", "float16", "'model.dtype'"),
        ("data.batch_size", "32", "'data.batch_size': expected int"),
        ("train.stop_at", 10_000, "'train.stop_at'"),
        ("objectives.bogus", 1.0, "'objectives.bogus': unknown objective"),
        ("model.num_heads", 5, "'model.hidden_size'"),
    ],
)
def test_bad_values_name_the_key(path, value, message):
    # Built from a plain dict, as a config file may do: ConfigDict's type checks are bypassed.
    raw = config_lib.default_config().to_dict()
    section, key = path.split(".")
    raw[section][key] = value
    cfg = ml_collections.ConfigDict(raw)
    with pytest.raises(config_lib.ConfigError, match=message):
        config_lib.validate(cfg)


def test_unknown_section():
    cfg = config_lib.default_config()
    cfg.bogus = 1
    with pytest.raises(config_lib.ConfigError, match="'bogus': unknown section"):
        config_lib.validate(cfg)


def test_cli_unknown_override_exits_nonzero_naming_the_key(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "xlpretrain.train",
            "--config",
            "configs/demo.py",
            "--workdir",
            str(tmp_path),
            "--config.train.stepz=3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "stepz" in result.stderr + result.stdout


def test_cli_missing_corpus_exits_nonzero_naming_the_path(tmp_path):
    missing = tmp_path / "no_such_corpus"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "xlpretrain.train",
            "--config",
            "configs/demo.py",
            "--workdir",
            str(tmp_path / "run"),
            f"--config.data.mono_dir={missing}",
            "--config.objectives.tlm=0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert str(missing) in result.stderr + result.stdout


def test_every_objective_can_be_switched_on_from_the_command_line():
    """Weights of all objectives exist (0 = off), so the locked config that `--config.*`
    overrides act on accepts any of them."""
    sys.path.insert(0, "configs")
    import xlmr

    cfg = xlmr.get_config("tiny")
    cfg.lock()
    for name in config_lib.KNOWN_OBJECTIVES:
        assert name in cfg.objectives
    cfg.objectives.tlm = 1.0
    config_lib.validate(cfg)
    with pytest.raises(AttributeError):
        cfg.objectives.bogus = 1.0
