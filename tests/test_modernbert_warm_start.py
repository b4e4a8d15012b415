"""`init.checkpoint` from a converted ModernBERT / mmBERT folder, for every objective: a run of
the checkpoint's shape loads every parameter it shares with it exactly, and lists its new ones
(VECO's cross-attention, XLM-E's generator and replaced-token head) in the log, as a run
starting from XLM-R does. XLM-E follows XLM-R → XLM-E: the masked LM's embeddings and encoder
become the discriminator's, its MLM head is not used, and the generator starts fresh. A run
whose settings would make the checkpoint's weights compute another function (a window, a rotary
base, …) is refused in one line naming the key and the checkpoint's value, unless it names the
key in `init.changes`."""

import dataclasses
import json
import pathlib
import re
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import traverse_util

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors.numpy")

from tests.test_modern_encoder import OBJECTIVES  # noqa: E402
from tests.test_modernbert import hf_config  # noqa: E402
from xlpretrain import backbones  # noqa: E402
from xlpretrain.convert import folder, from_hf, modernbert  # noqa: E402
from xlpretrain.model import vocab  # noqa: E402
from xlpretrain.model.config import ModelConfig  # noqa: E402
from xlpretrain.training import cli, warm_start  # noqa: E402
from xlpretrain.training import trainer as trainer_lib  # noqa: E402
from xlpretrain.training.config import ConfigError  # noqa: E402
from xlpretrain.training.plan import resolve  # noqa: E402

# The run's parameters that a masked LM does not have, by objective (prefixes of their paths).
NEW = {
    "veco": ("encoder/layers/cross_attention",),
    "veco_mono": ("encoder/layers/cross_attention",),
    "mrtd": ("generator_", "discriminator_"),
    "trtd": ("generator_", "discriminator_"),
}
# The model settings a run takes from the checkpoint: its shape and how its layers attend.
SHAPE = (
    "hidden_size", "num_layers", "num_heads", "mlp_dim", "max_positions",
    "local_window", "global_every", "rope_theta", "local_rope_theta",
)  # fmt: skip
REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A random transformers ModernBertForMaskedLM over the tests' UDHR vocabulary (1,002 ids:
    2 layers, one global and one local), saved and converted with from-hf."""
    root = tmp_path_factory.mktemp("modernbert")
    torch.manual_seed(0)
    config = hf_config(
        vocab_size=1002, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        layer_types=["full_attention", "sliding_attention"],
    )  # fmt: skip
    transformers.ModernBertForMaskedLM(config).save_pretrained(root / "hf")
    from_hf(root / "hf", root / "ours")
    return root / "ours"


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_every_objective_starts_from_a_converted_modernbert(
    name, converted, udhr_run_config, tmp_path, caplog
):
    pretrained = folder.read(converted)
    shape = {key: getattr(pretrained.config, key) for key in SHAPE}
    cfg = udhr_run_config(
        objectives={name: 1.0},
        model__architecture="modernbert",
        model__absolute_positions=False,
        **{f"model__{key}": value for key, value in shape.items()},
        **OBJECTIVES[name],
    )
    cfg.init.checkpoint = str(converted)
    with caplog.at_level("INFO", logger="xlpretrain"):
        trainer = trainer_lib.build(resolve(cfg), str(tmp_path / "run"), jax.devices()[:1])
    trainer.checkpointer.close()
    params = vocab.with_rows(jax.device_get(trainer.training.state.params), 1002)
    ours = traverse_util.flatten_dict(params, sep="/")
    theirs = traverse_util.flatten_dict(pretrained.params, sep="/")

    shared = set(ours) & set(theirs)
    for path in shared:
        np.testing.assert_array_equal(ours[path], theirs[path], err_msg=path)
    new = set(re.findall(r"new parameter, freshly initialised: (\S+)", caplog.text))
    assert new == set(ours) - set(theirs)
    assert bool(new) == (name in NEW) and all(p.startswith(NEW.get(name, ())) for p in new), new
    unused = set(re.findall(r"checkpoint parameter not used by this model: (\S+)", caplog.text))
    assert unused == set(theirs) - set(ours)
    electra = name in ("mrtd", "trtd")  # the masked LM's head has no place in XLM-E
    assert unused == {p for p in theirs if electra and p.startswith("lm_head/")}
    changed = set(re.findall(r"init.checkpoint: model.(\w+) is", caplog.text))
    assert not changed & set(SHAPE), changed  # the run is the checkpoint's model
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())["model"]
    assert {key: recorded[key] for key in SHAPE} == shape  # and says so


def test_a_checkpoint_of_another_architecture_is_refused(converted):
    """Names and shapes alone would load parts of a ModernBERT into XLM-R layers."""
    pretrained = folder.read(converted)
    xlmr = ModelConfig(vocab_size=1002, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)
    with pytest.raises(warm_start.WarmStartError, match="modernbert model, but the run's .*xlmr"):
        warm_start.check_model(xlmr, pretrained.config, "ckpt")


# The checkpoint `converted` holds: window 4, rotary bases 500 and 80, global every 2nd layer.
MODERN = backbones.get("modernbert").config(
    absolute_positions=False, vocab_size=1002, hidden_size=32,
    num_layers=2, num_heads=4, mlp_dim=64, local_window=4, global_every=2, rope_theta=500.0,
    local_rope_theta=80.0,
)  # fmt: skip
XLMR = ModelConfig(vocab_size=1002, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)


@pytest.mark.parametrize(
    "checkpoint, key, value, message",
    [(MODERN, "local_window", 16, "model.local_window=4 (the run: 16)"),
     (MODERN, "rope_theta", 1e4, "model.rope_theta=500.0 (the run: 10000.0)"),
     (MODERN, "local_rope_theta", 1e4, "model.local_rope_theta=80.0 (the run: 10000.0)"),
     (MODERN, "global_every", 1, "model.global_every=2 (the run: 1)"),
     (MODERN, "layer_norm_eps", 1e-6, "model.layer_norm_eps=1e-05 (the run: 1e-06)"),
     (XLMR, "layer_norm_eps", 1e-6, "model.layer_norm_eps=1e-05 (the run: 1e-06)"),
     (dataclasses.replace(XLMR, relative_position="bucketed"), "max_distance", 64,
      "model.max_distance=128 (the run: 64)")],
)  # fmt: skip
def test_a_setting_that_changes_what_the_weights_compute_is_refused(
    checkpoint, key, value, message
):
    """Each changes no parameter's shape, so the weights would load and compute another
    function; the message names the key, the checkpoint's value and the flag that sets it."""
    run = dataclasses.replace(checkpoint, **{key: value})
    with pytest.raises(warm_start.WarmStartError) as refused:
        warm_start.check_model(run, checkpoint, "ckpt")
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert f"--config.model.{key}={getattr(checkpoint, key)!r}" in str(refused.value)
    warm_start.check_model(run, checkpoint, "ckpt", changes=(key,))  # named: on purpose


def test_settings_that_mean_nothing_to_the_checkpoint_are_not_compared():
    """XLM-E's gated relative bias is new on XLM-R (its distance too), an XLM-R run's window
    and rotary bases are unused, a model without local layers has no window, and in 2 layers
    every 2nd or 3rd layer global is one pattern."""
    gated = dataclasses.replace(XLMR, relative_position="gated", max_distance=64)
    warm_start.check_model(gated, XLMR, "ckpt")
    unused = dataclasses.replace(XLMR, local_window=16, rope_theta=1.0, global_every=1)
    warm_start.check_model(unused, XLMR, "ckpt")
    all_global = dataclasses.replace(MODERN, global_every=1)
    windowless = dataclasses.replace(all_global, local_window=16, local_rope_theta=1.0)
    warm_start.check_model(windowless, all_global, "ckpt")
    warm_start.check_model(dataclasses.replace(MODERN, global_every=3), MODERN, "ckpt")


def test_an_xlmr_checkpoint_whose_positions_start_elsewhere_is_refused():
    """A run numbers positions from 2 (pad id 1); a checkpoint that starts them at 1 would have
    every token read its neighbour's position embedding, and no setting moves a run's."""
    with pytest.raises(warm_start.WarmStartError, match=r"start at 1 \(pad_token_id 0\), a run's"):
        warm_start.check_model(XLMR, dataclasses.replace(XLMR, pad_token_id=0), "ckpt")


def test_a_rotary_base_the_run_names_in_init_changes_is_its_own(
    converted, udhr_run_config, tmp_path, caplog
):
    """A run with another global rotary base than its checkpoint's is refused before anything
    is built; named in init.changes, it trains with its own base, logged and in config.json."""
    pretrained = folder.read(converted)
    shape = {key: getattr(pretrained.config, key) for key in SHAPE}
    cfg = udhr_run_config(
        objectives={"mmlm": 1.0},
        model__architecture="modernbert",
        model__absolute_positions=False,
        **{f"model__{key}": value for key, value in {**shape, "rope_theta": 1e4}.items()},
    )
    cfg.init.checkpoint = str(converted)
    with pytest.raises(warm_start.WarmStartError, match=r"model.rope_theta=500.0 \(the run: "):
        trainer_lib.build(resolve(cfg), str(tmp_path / "refused"), jax.devices()[:1])
    cfg.init.changes = "model.rope_theta"
    with caplog.at_level("INFO", logger="xlpretrain"):
        trainer = trainer_lib.build(resolve(cfg), str(tmp_path / "run"), jax.devices()[:1])
    trainer.checkpointer.close()
    assert "model.rope_theta is 10000.0 in this run, 500.0 in the checkpoint" in caplog.text
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())
    assert recorded["model"]["rope_theta"] == 1e4
    assert recorded["init"]["changes"] == "model.rope_theta"
    cfg.init.changes = "model.dropout_rate"  # changes no function: nothing to name
    with pytest.raises(ConfigError, match="config key 'init.changes': must name keys among"):
        resolve(cfg)


@pytest.fixture(scope="module")
def window_16(tmp_path_factory):
    """A random ModernBertForMaskedLM of configs/mmbert.py:tiny's shape and rotary bases but
    a 16-token window (the config's is 32), converted with from-hf."""
    root = tmp_path_factory.mktemp("window16")
    torch.manual_seed(0)
    config = hf_config(
        vocab_size=8002, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        max_position_embeddings=256, local_attention=16,
        layer_types=modernbert.layer_types(4, 3),
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 160_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        },
    )  # fmt: skip
    transformers.ModernBertForMaskedLM(config).save_pretrained(root / "hf")
    from_hf(root / "hf", root / "ours")
    return root / "ours"


def test_mmbert_tiny_from_a_window_16_checkpoint_is_one_line_naming_the_window(window_16, tmp_path):
    """The shipped config's 32-token window would run the checkpoint's weights as another
    model: exit 2, one line naming model.local_window and 16, nothing on disk; the flag it
    suggests makes the same run acceptable."""
    workdir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "xlpretrain.train", "--config=configs/mmbert.py:tiny",
         f"--workdir={workdir}", f"--config.init.checkpoint={window_16}"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stdout[-2000:] + result.stderr
    assert lines[0] == (
        f"xlpretrain.train: error: init.checkpoint {window_16} was trained with "
        "model.local_window=16 (the run: 32), which change what its weights compute: set "
        "--config.model.local_window=16, or --config.init.changes=model.local_window to change "
        "them on purpose"
    )
    assert not workdir.exists()
    cfg = cli.load_config(f"{REPO}/configs/mmbert.py:tiny")
    cfg.model.local_window = 16
    plan = resolve(cfg)
    pretrained = warm_start.read(str(window_16), plan.model, plan.init_changes)
    assert not folder.different_settings(plan.model, pretrained.config)  # the same model


def test_settings_a_run_changes_are_logged(converted, caplog):
    """A window or a rotary base the run names in init.changes changes no shape: only the log
    shows the run departs."""
    pretrained = folder.read(converted)
    config = dataclasses.replace(pretrained.config, rope_theta=1e4, local_window=16)
    with caplog.at_level("INFO", logger="xlpretrain"):
        warm_start.merge({}, config, pretrained, "ckpt")
    assert "model.rope_theta is 10000.0 in this run, 500.0 in the checkpoint" in caplog.text
    assert "model.local_window is 16 in this run, 4 in the checkpoint" in caplog.text
