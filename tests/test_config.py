import re
import subprocess
import sys

import ml_collections
import pytest

from xlpretrain.training import config as config_lib
from xlpretrain.training import config_keys
from xlpretrain.training.plan import resolve


def test_default_and_shipped_configs_validate():
    resolve(config_lib.default_config())
    sys.path.insert(0, "configs")
    import demo
    import xlmr

    resolve(demo.get_config())
    for size in ("tiny", "base", "large"):
        resolve(xlmr.get_config(size))
    with pytest.raises(ValueError, match="unknown size"):
        xlmr.get_config("huge")


def test_every_config_key_a_message_suggests_exists():
    """Remedies in the library's messages and the shipped configs (`--config.KEY=...`) name
    keys a run accepts: pre-training's, or fine-tuning's (`finetune.schema`)."""
    import pathlib

    from xlpretrain.finetune import schema

    root = pathlib.Path(__file__).resolve().parents[1]
    sources = [*(root / "xlpretrain").rglob("*.py"), *(root / "configs").glob("*.py")]
    named = {
        (path.name, key.rstrip("."))
        for path in sources
        for key in re.findall(r"--config\.([a-z_][\w.]*)", path.read_text(encoding="utf-8"))
    }
    assert ("run_tokenizer.py", "tokenizer.character_coverage") in named
    assert ("__main__.py", "pairs.train_language") in named  # eval.finetune's, naming its successor
    configs = [config_lib.default_config().to_dict(), schema.default_config().to_dict()]

    def exists(key: str) -> bool:
        return any(_holds(config, key) for config in configs)

    missing = sorted((name, key) for name, key in named if key != "a.b" and not exists(key))
    assert not missing, missing


def _holds(config: dict, key: str) -> bool:
    value = config
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return False
        value = value[part]
    return True


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
        ("train.seed", -1, "'train.seed': must be >= 0"),  # held-out lines draw from it
        ("objectives.bogus", 1.0, "'objectives.bogus': unknown objective"),
        ("model.num_heads", 5, "'model.hidden_size'"),
        ("model.flash_tiles", "dq=48x64", "'model.flash_tiles': must be empty or KERNEL=BQxBK"),
        ("model.flash_tiles", "bwd=64x64", "'model.flash_tiles'"),
    ],
)
def test_bad_values_name_the_key(path, value, message):
    # Built from a plain dict, as a config file may do: ConfigDict's type checks are bypassed.
    raw = config_lib.default_config().to_dict()
    section, key = path.split(".")
    raw[section][key] = value
    cfg = ml_collections.ConfigDict(raw)
    with pytest.raises(config_lib.ConfigError, match=message):
        resolve(cfg)


def test_unknown_section():
    cfg = config_lib.default_config()
    cfg.bogus = 1
    with pytest.raises(config_lib.ConfigError, match="'bogus': unknown section"):
        resolve(cfg)


CHECK_DEFAULTS = {"a": {"n": 1, "x": 0.5, "names": ()}}
CHECK_RANGES = {"a.n": (lambda v: v > 0, "must be > 0")}


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"a": {"m": 1}}, "'a.m': unknown key"),
        ({"b": {}}, "'b': unknown section"),
        ({"a": {"n": True}}, "'a.n': expected int, got bool"),
        ({"a": {"x": "0.5"}}, "'a.x': expected float, got str"),
        ({"a": {"n": 0}}, "'a.n': must be > 0, got 0"),
    ],
)
def test_check_keys_names_the_key_for_any_defaults(raw, message):
    """The generic check that fine-tuning shares, on other defaults and ranges."""
    defaults = ml_collections.ConfigDict(CHECK_DEFAULTS)
    fine = {"a": {"n": 2, "x": 1, "names": ["en"]}}  # an int for a float, a list for a tuple
    config_keys.check_keys(ml_collections.ConfigDict(fine), defaults, CHECK_RANGES)
    with pytest.raises(config_lib.ConfigError, match=message):
        config_keys.check_keys(ml_collections.ConfigDict(raw), defaults, CHECK_RANGES)


def test_check_keys_hands_free_form_keys_to_their_own_check():
    seen = []
    config_keys.check_keys(
        ml_collections.ConfigDict({"a": {"n": 1, "free": {"k": "v"}}}),
        ml_collections.ConfigDict(CHECK_DEFAULTS),
        CHECK_RANGES,
        own_checks={"a.free.": lambda path, value: seen.append((path, value))},
    )
    assert seen == [("a.free.k", "v")]


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
            "--config.eval.every_steps=0",
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
    resolve(cfg)
    with pytest.raises(AttributeError):
        cfg.objectives.bogus = 1.0


def _two_stages(**stage_rows):
    cfg = config_lib.default_config()
    cfg.objectives = ml_collections.ConfigDict({})
    cfg.data.batch_size = 4
    cfg.data.per_objective = ml_collections.ConfigDict({"tlm": {"batch_size": 6}})
    cfg.schedule = (
        {"start_step": 0, "objectives": {"mmlm": 1.0, "tlm": 1.0}},
        {"start_step": 10, "objectives": {"mmlm": 1.0, "tlm": 1.0}, "batch_size": stage_rows},
    )
    return cfg


def test_batch_sizes_combine_stage_over_objective_over_default():
    """A stage's batch_size beats data.per_objective, which beats data.batch_size; the step's
    global batch is the sum over the stage's objectives."""
    first, second = resolve(_two_stages(mmlm=8)).stages
    assert first.rows == {"mmlm": 4, "tlm": 6}
    assert second.rows == {"mmlm": 8, "tlm": 6}
    assert resolve(_two_stages(mmlm=8, tlm=2)).stages[1].rows == {"mmlm": 8, "tlm": 2}


@pytest.mark.parametrize(
    "stage_rows, key, message",
    [
        ({"camlm": 8}, "schedule[1].batch_size.camlm", "not an objective of this stage"),
        ({"mmlm": 0}, "schedule[1].batch_size.mmlm", "must be an int >= 1"),
        ({"mmlm": 2.5}, "schedule[1].batch_size.mmlm", "must be an int >= 1"),
    ],
)
def test_stage_batch_size_errors_name_the_key(stage_rows, key, message):
    with pytest.raises(config_lib.ConfigError, match=f"'{re.escape(key)}': {message}"):
        resolve(_two_stages(**stage_rows))


@pytest.mark.parametrize(
    "lengths, key, message",
    [
        ({"camlm": 64}, "schedule[1].max_length.camlm", "not an objective of this stage"),
        ({"mmlm": 4}, "schedule[1].max_length.mmlm", "must be an int >= 8"),
        ({"mmlm": 513}, "schedule[1].max_length.mmlm", "513 \\(mmlm\\) is longer than the 512"),
    ],
)
def test_stage_row_length_errors_name_the_key(lengths, key, message):
    cfg = _two_stages()
    cfg.schedule = (cfg.schedule[0], {**cfg.schedule[1], "max_length": lengths})
    with pytest.raises(config_lib.ConfigError, match=f"'{re.escape(key)}': {message}"):
        resolve(cfg)


def test_a_stage_sets_its_own_row_length():
    """A stage's max_length beats data.per_objective's, which beats data.max_length."""
    cfg = _two_stages()
    cfg.data.per_objective.tlm.max_length = 48
    cfg.schedule = (cfg.schedule[0], {**cfg.schedule[1], "max_length": {"mmlm": 256}})
    first, second = resolve(cfg).stages
    assert first.lengths == {"mmlm": 128, "tlm": 48}
    assert second.lengths == {"mmlm": 256, "tlm": 48}
    assert second.lengths_keys["mmlm"] == "schedule[1].max_length.mmlm"


def test_batch_checks_name_the_key_that_set_the_rows():
    cfg = _two_stages(mmlm=5)
    cfg.train.grad_accum = 2  # 5 rows of mmlm in stage 2 do not split in 2 micro-batches
    with pytest.raises(config_lib.ConfigError, match=r"schedule\[1\]\.batch_size\.mmlm=5 \(mmlm\)"):
        resolve(cfg)
    plan = resolve(_two_stages(mmlm=8))
    with pytest.raises(
        config_lib.ConfigError, match=r"'data\.per_objective\.tlm\.batch_size': 6 \(tlm\)"
    ):
        plan.check_batch_divides({"data": 4, "fsdp": 1, "tensor": 1})


@pytest.mark.parametrize(
    "batch_axes, fits",
    [(("data", "fsdp"), False), (("data",), True), (("data", "fsdp", "tensor"), False)],
)
def test_the_data_parallel_size_is_where_the_rules_put_the_batch(batch_axes, fits):
    """8 rows on a data 4 × fsdp 4 × tensor 2 mesh: they split 4 ways where the rules put the
    batch on data alone, not 16 or 32 ways where they add fsdp (and tensor)."""
    cfg = config_lib.default_config()
    cfg.data.batch_size = 8
    cfg.model.update(hidden_size=32, num_heads=4)
    cfg.mesh.rules = tuple(
        ("batch", batch_axes) if name == "batch" else (name, axes) for name, axes in cfg.mesh.rules
    )
    shape = {"data": 4, "fsdp": 4, "tensor": 2}
    # The axes the check counts are those Flax puts an array's batch axis on.
    import flax.linen as nn

    from xlpretrain.parallel.rules import data_parallel_axes

    placed = nn.logical_to_mesh_axes(("batch",), cfg.mesh.rules)[0]
    assert data_parallel_axes(cfg.mesh.rules) == ((placed,) if isinstance(placed, str) else placed)
    if fits:
        resolve(cfg).check_batch_divides(shape)
    else:
        size = {2: 16, 3: 32}[len(batch_axes)]
        with pytest.raises(config_lib.ConfigError, match=f"data-parallel size {size} "):
            resolve(cfg).check_batch_divides(shape)


@pytest.mark.parametrize(
    "objective, key",
    [("veco", "model.cross_attention"), ("veco_mono", "model.cross_attention"),
     ("btmlm", "model.language_embeddings")],
)  # fmt: skip
def test_objectives_declared_requirements_are_enforced(objective, key):
    cfg = config_lib.default_config()
    cfg.objectives.mmlm, cfg.objectives[objective] = 0.0, 1.0
    with pytest.raises(config_lib.ConfigError, match=f"config key '{re.escape(key)}'"):
        resolve(cfg)
    cfg.model.cross_attention = cfg.model.language_embeddings = True
    resolve(cfg)


@pytest.mark.parametrize(
    "key, bad",
    [("btmlm.ratio", 2.0), ("btmlm.decode", "beam"), ("veco.variant", "v3"),
     ("xlm_e.generator_width", 0.0), ("xlm_e.disc_weight", -1.0)],
)  # fmt: skip
def test_objective_sections_come_from_their_declarations(key, bad):
    """An objective's own section (defaults and allowed values) is declared with it; config
    takes it from there."""
    from xlpretrain import objectives

    declared = {o.section.name: o.section for o in objectives.REGISTRY.values() if o.section}
    cfg = config_lib.default_config()
    assert {s: cfg[s].to_dict() for s in declared} == {
        s: section.defaults for s, section in declared.items()
    }
    section, name = key.split(".")
    cfg[section][name] = bad
    with pytest.raises(config_lib.ConfigError, match=f"config key '{key}': .*got {bad!r}"):
        resolve(cfg)


def test_validating_a_config_builds_no_model():
    """Config validation reads the objectives' declarations, not the model: no Flax module
    (nor Flax) is imported by it, so checking a config is quick and the layers stay apart."""
    code = (
        "import sys; from xlpretrain.training.config import default_config; "
        "from xlpretrain.training.plan import resolve; resolve(default_config()); "
        "print(sorted(m for m in sys.modules if m.startswith(('flax', 'xlpretrain.model.'))))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)  # fmt: skip
    loaded = eval(result.stdout.strip().splitlines()[-1])  # noqa: S307 - our own printout
    assert loaded == [
        "xlpretrain.model.config",
        "xlpretrain.model.kernels",
        "xlpretrain.model.kernels.tiles",
        "xlpretrain.model.vocab",
    ]
