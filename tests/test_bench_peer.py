"""The PyTorch peer times a real HF training step on the benchmark's shapes."""

import dataclasses
import math

import pytest

from tests.tiny import run_config
from xlpretrain import backbones
from xlpretrain.bench.peer import format_peer, peer_benchmark
from xlpretrain.training.plan import resolve

pytest.importorskip("torch")
pytest.importorskip("transformers")


def tiny_config():
    return run_config(model__vocab_size=1000, model__num_heads=2, data__batch_size=2)


def test_peer_reports_throughput_and_an_untrained_loss():
    report = peer_benchmark(resolve(tiny_config()), steps=2, warmup=1, modes=("eager",))
    assert set(report) == {
        "peer",
        "torch",
        "transformers",
        "device",
        "batch_size",
        "max_length",
        "dtype",
        "modes",
    }
    assert report["peer"] == backbones.get("xlmr").peer_name and isinstance(report["device"], str)
    assert (report["batch_size"], report["max_length"], report["dtype"]) == (2, 32, "float32")
    eager = report["modes"]["eager"]
    assert set(eager) == {"step_time_s", "tokens_per_s", "peak_memory_gib", "final_loss"}, eager
    assert math.isfinite(eager["tokens_per_s"]) and eager["tokens_per_s"] > 0
    assert eager["tokens_per_s"] == pytest.approx(2 * 32 / eager["step_time_s"])
    assert abs(eager["final_loss"] - math.log(1000)) < 1.5  # uniform over the vocabulary


def test_a_failed_mode_is_reported_not_raised(monkeypatch):
    torch = pytest.importorskip("torch")

    def no_compiler(model):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(torch, "compile", no_compiler)
    report = peer_benchmark(resolve(tiny_config()), steps=1, warmup=1, modes=("compile", "eager"))
    assert report["modes"]["compile"] == {"error": "RuntimeError: no C++ compiler"}
    assert report["modes"]["eager"]["tokens_per_s"] > 0


def test_format_peer_gives_our_speed_up_per_mode():
    peer = {
        "modes": {
            "eager": {
                "step_time_s": 0.5,
                "tokens_per_s": 1000.0,
                "peak_memory_gib": None,
                "final_loss": 6.9,
            },
            "compile": {"error": "RuntimeError: no C++ compiler\nmore detail"},
        }
    }
    lines = format_peer(3120.0, peer).splitlines()
    assert lines == [
        "peer (eager): 1,000 tokens/s, peak memory n/a, ours / peer (eager): 3.12x",
        "peer (compile): failed: RuntimeError: no C++ compiler",
    ]


def test_a_modernbert_plan_is_timed_against_modernbert_for_masked_lm():
    """The peer of `model.architecture="modernbert"` is HF's ModernBERT built from the config
    `convert to-hf` writes (local and global layers, rotary bases, GeGLU), on the same rows."""
    cfg = tiny_config()
    cfg.model.update(architecture="modernbert", absolute_positions=False, local_window=8)
    report = peer_benchmark(resolve(cfg), steps=1, warmup=1, modes=("eager",))
    assert report["peer"] == backbones.get("modernbert").peer_name
    assert abs(report["modes"]["eager"]["final_loss"] - math.log(1000)) < 1.5


def test_each_peer_is_the_model_whose_config_to_hf_writes():
    """A peer is built from its converter's `config.json` (`config_to_hf`), not a restatement
    of it: every setting the export states, the initialiser's range too, is the peer's; an
    option no HF class has is left out, as a Hugging Face user would run the model."""
    for backbone in backbones.REGISTRY.values():
        config = backbone.config(
            absolute_positions=backbone.features["layer_type"] != "pre_ln", vocab_size=48,
            hidden_size=32, num_layers=2, num_heads=4, mlp_dim=36, max_positions=64,
            initializer_range=0.05,
        )  # fmt: skip
        converter = backbone.converter_module()
        written = converter.config_to_hf(config)
        peer = backbone.hf_peer(config)
        assert [type(peer).__name__] == written["architectures"]
        assert {key: getattr(peer.config, key) for key in converter.CONFIG_KEYS.values()} == {
            key: written[key] for key in converter.CONFIG_KEYS.values()
        }
        # An option no HF class has (VECO's plug-in) is left out: the same peer.
        plug_in = backbone.hf_peer(dataclasses.replace(config, cross_attention=True))
        assert plug_in.config.to_dict() == peer.config.to_dict()
