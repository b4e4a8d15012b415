"""`init.checkpoint` from a converted ModernBERT / mmBERT folder, for every objective: a run of
the checkpoint's shape loads every parameter it shares with it exactly, and lists its new ones
(VECO's cross-attention, XLM-E's generator and replaced-token head) in the log, as a run
starting from XLM-R does. XLM-E follows XLM-R → XLM-E: the masked LM's embeddings and encoder
become the discriminator's, its MLM head is not used, and the generator starts fresh."""

import dataclasses
import re

import jax
import numpy as np
import pytest
from flax import traverse_util

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors.numpy")

from tests.test_modern_encoder import OBJECTIVES  # noqa: E402
from tests.test_modernbert import hf_config  # noqa: E402
from xlpretrain.convert import folder, from_hf  # noqa: E402
from xlpretrain.model import vocab  # noqa: E402
from xlpretrain.model.config import ModelConfig  # noqa: E402
from xlpretrain.training import trainer as trainer_lib  # noqa: E402
from xlpretrain.training import warm_start  # noqa: E402
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


def test_a_checkpoint_of_another_architecture_is_refused(converted):
    """Names and shapes alone would load parts of a ModernBERT into XLM-R layers."""
    pretrained = folder.read(converted)
    xlmr = ModelConfig(vocab_size=1002, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)
    with pytest.raises(warm_start.WarmStartError, match="modernbert model, but the run's .*xlmr"):
        warm_start.merge({}, xlmr, pretrained, "ckpt")


def test_settings_a_run_changes_are_logged(converted, caplog):
    """A window or a rotary base changes no shape: only the log shows the run departs."""
    pretrained = folder.read(converted)
    config = dataclasses.replace(pretrained.config, rope_theta=1e4, local_window=16)
    with caplog.at_level("INFO", logger="xlpretrain"):
        warm_start.merge({}, config, pretrained, "ckpt")
    assert "model.rope_theta is 10000.0 in this run, 500.0 in the checkpoint" in caplog.text
    assert "model.local_window is 16 in this run, 4 in the checkpoint" in caplog.text
