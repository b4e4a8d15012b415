"""The GPU suite's pieces on a CPU: the kernel check (interpret mode, tiny shapes) passes and can
fail, the tile pick, the suite's deadline and priority order (the profile first, the XLM-R
step's variants), the mmBERT plan and its peer, the variants' plans, the profile of a tiny
step, the markdown rows, a unit's failure and time-out, and the CLI's refusal."""

import os
import re
import subprocess
import sys

import pytest

from xlpretrain import backbones, masks
from xlpretrain.bench import gpu_report, gpu_suite, gpu_timings, kernel_check, tile_sweep
from xlpretrain.data.pretraining.streams import MONO
from xlpretrain.model.kernels import flash
from xlpretrain.model.kernels.gpu_compile import FlashCase
from xlpretrain.training.config import default_config
from xlpretrain.training.plan import resolve
from xlpretrain.training.sections import PRNG_IMPLS

BIASES = list(kernel_check.USED_PARAMS)  # none, bucketed, gated
# A length no tile divides; every mask, the three biases in turn, and dropout: 8 of the GPU's 23.
TINY = {"dtype": "float32", "batch": 2, "length": 45, "heads": 2, "head_dim": 16}
CASES = [
    *(FlashCase(mask, BIASES[i % 3], **TINY) for i, mask in enumerate(masks.MASKS)),
    FlashCase("camlm", "gated", dropout=0.1, **TINY),
]


def test_kernel_check_passes_for_every_mask_and_bias():
    records = list(kernel_check.kernel_check("cpu", CASES))
    assert [r["case"] for r in records] == [str(c) for c in CASES]
    for record, case in zip(records, CASES, strict=True):
        assert record["passed"], record
        used = kernel_check.PARAMS[: kernel_check.USED_PARAMS[case.bias]]
        assert list(record["errors"]) == ["out", *used]
        assert record["max_abs_error"] < 1e-5


def test_kernel_check_fails_when_the_reference_has_another_mask(monkeypatch):
    """The check can fail: a reference that runs MMLM's mask for CAMLM's disagrees."""
    reference = kernel_check.reference_attention

    def wrong_mask(q, k, v, mask_fn, meta, *args):
        return reference(q, k, v, masks.mmlm if mask_fn is masks.camlm else mask_fn, meta, *args)

    monkeypatch.setattr(kernel_check, "reference_attention", wrong_mask)
    cases = [FlashCase("camlm", bias, **TINY) for bias in ("none", "bucketed")]
    for record in kernel_check.kernel_check("cpu", cases):
        assert not record["passed"], record
        assert record["max_abs_error"] > 1e-2


def compiled(kernel, tiles, spills=0):
    return {
        "stage": "compile",
        "kernel": kernel,
        "tiles": tiles,
        "registers": 200,
        "spill_stores": spills,
        "spill_loads": spills,
        "shared_memory": 32768,
    }


def timed(kernel, tiles, ms):
    return {"stage": "time", "kernel": kernel, "tiles": tiles, "fwd_bwd_ms": ms}


DEFAULT = flash.Tiles.parse("forward=64x64:w4:s2 dq=32x32:w4:s2 dkv=64x32:w4:s2")
SWEEP_RECORDS = [
    compiled("forward", "64x64:w4:s2"),
    compiled("forward", "128x64:w8:s2"),
    compiled("forward", "128x128:w8:s2", spills=96),
    compiled("dq", "32x32:w4:s2"),
    compiled("dq", "64x64:w8:s2"),
    compiled("dq", "64x64:w4:s2", spills=8),
    {"stage": "compile", "kernel": "dkv", "tiles": "128x32:w8:s2", "error": "Shared memory"},
    compiled("dkv", "64x32:w4:s2"),
    timed("forward", "64x64:w4:s2", 5.0),
    timed("forward", "128x64:w8:s2", 4.0),
    timed("forward", "128x128:w8:s2", 1.0),  # fastest, but it spills
    timed("dq", "32x32:w4:s2", 5.0),
    {"stage": "time", "kernel": "dq", "tiles": "64x64:w8:s2", "error": "out of memory"},
    timed("dkv", "128x32:w8:s2", 0.5),  # never compiled cleanly
]


def test_the_gpu_check_covers_every_mask_and_bias():
    cases = {(c.mask, c.bias, c.dropout > 0) for c in kernel_check.check_cases()}
    assert {(m, b, False) for m in masks.MASKS for b in BIASES} < cases


def test_a_unit_runs_under_its_budget_cut_to_the_time_left_or_not_at_all():
    assert gpu_suite.unit_cap(60, 500.0) == 60
    assert gpu_suite.unit_cap(60, 45.7) == 45  # cut to what is left, in whole seconds
    assert gpu_suite.unit_cap(60, 30.0) == 30  # half its budget: still worth starting
    assert gpu_suite.unit_cap(60, 29.9) is None  # under half: left to a shorter unit
    assert gpu_suite.unit_cap(20, 14.0) is None  # under MIN_START_S, whatever the budget
    assert (
        gpu_suite.skipped(60, 29.9)["error"] == "29 s left of the suite's 520 s; its budget is 60 s"
    )


class FakeClock:
    """The suite's clock, moved on by the fake units instead of by time."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fake_units(monkeypatch, clock: FakeClock, share: float) -> list[tuple]:
    """``run_unit`` replaced by a unit that takes ``share`` of the seconds it is given (1: each
    overruns and is killed at its cap); returns the calls, (unit, params, cap), as they come."""
    calls = []

    def run_unit(unit, params, budget_s, log, env=None):
        calls.append((unit, params, budget_s))
        clock.now += share * budget_s
        overran = {"status": "timed out", "error": f"timed out after {budget_s} s"}
        return {
            "status": "ok",
            "seconds": share * budget_s,
            "budget_s": budget_s,
            "records": [],
            **(overran if share >= 1 else {}),
        }

    monkeypatch.setattr(gpu_suite, "run_unit", run_unit)
    return calls


@pytest.mark.parametrize("cut", [False, True], ids=["shipped-deadline", "deadline-in-a-unit"])
def test_the_suite_keeps_its_deadline_when_every_unit_overruns(monkeypatch, tmp_path, cut):
    """Every unit runs to its cap: the first ones in priority order run, the suite stops
    starting units before its deadline, and the rest are recorded as skipped with the time
    left. (Budgets together exceed the deadline, so without it this suite would run over.)
    With ``cut`` the deadline falls 1 s before the fourth unit's budget ends: it runs cut to
    what is left."""
    fourth = list(gpu_suite.BUDGETS)[3]
    if cut:
        monkeypatch.setattr(gpu_suite, "SUITE_S", sum(list(gpu_suite.BUDGETS.values())[:4]) - 1)
    suite_s = gpu_suite.SUITE_S
    assert sum(gpu_suite.BUDGETS.values()) > suite_s
    clock = FakeClock()
    calls = fake_units(monkeypatch, clock, share=1.0)
    suite = gpu_suite.run_suite(tmp_path, clock=clock)
    assert clock.now - 1000.0 <= suite_s
    steps = suite["steps"]
    assert list(steps) == list(gpu_suite.BUDGETS)  # every unit, in priority order
    ran = [name for name, step in steps.items() if step["status"] != "skipped"]
    assert ran[:4] == ["profile", "kernel_check", "tile_sweep", "step_xlmr_pallas"]
    assert len(calls) == len(ran)
    assert all(steps[name]["budget_s"] <= gpu_suite.BUDGETS[name] for name in steps)
    if cut:
        assert steps[fourth]["budget_s"] == gpu_suite.BUDGETS[fourth] - 1
    skipped = [name for name, step in steps.items() if step["status"] == "skipped"]
    assert skipped and skipped[-1] == "pipeline_workers"
    for name in skipped:
        left, budget = re.fullmatch(
            rf"(\d+) s left of the suite's {suite_s} s; its budget is (\d+) s", steps[name]["error"]
        ).groups()
        assert int(budget) == gpu_suite.BUDGETS[name]
        assert int(left) < max(gpu_suite.MIN_START_S, gpu_suite.START_SHARE * int(budget))
    assert not gpu_suite.suite_passed(suite)
    text = (tmp_path / "performance.md").read_text()
    assert "- `pipeline_workers` skipped: " in text
    assert "== pipeline_workers skipped: " in (tmp_path / "suite.log").read_text()


def test_units_that_finish_early_leave_their_time_to_the_later_ones(monkeypatch, tmp_path):
    """Each unit takes a quarter of its budget: all run, each under its whole budget, with the
    parameters the priority order gives them (the pallas steps the sweep's pick: here, nothing
    swept, the default tiles; the profile's traces under the suite's folder)."""
    clock = FakeClock()
    calls = fake_units(monkeypatch, clock, share=1 / 4)
    suite = gpu_suite.run_suite(tmp_path, steps=10, warmup=2, clock=clock)
    assert all(step["status"] == "ok" for step in suite["steps"].values())
    assert [cap for _, _, cap in calls] == list(gpu_suite.BUDGETS.values())
    call = dict(zip(gpu_suite.BUDGETS, calls, strict=True))
    timing = {"steps": 10, "warmup": 2}
    tiles = str(tile_sweep.sweep_default())
    assert call["profile"] == (
        "profile",
        {"models": ["xlmr", "mmbert"], "attention": "cudnn", "steps": 3,
         "trace_dir": str(tmp_path / "profile")},
        gpu_suite.BUDGETS["profile"],
    )  # fmt: skip
    assert call["step_mmbert_pallas"] == (
        "step",
        {"model": "mmbert", "attention": "pallas", "flash_tiles": tiles, **timing},
        gpu_suite.BUDGETS["step_mmbert_pallas"],
    )
    assert call["peer_mmbert_eager"][:2] == ("peer", {"model": "mmbert", "mode": "eager", **timing})
    cudnn = {"model": "xlmr", "attention": "cudnn", "flash_tiles": "", **timing}
    assert call["step_mmbert_cudnn"][1] == {**cudnn, "model": "mmbert"}
    assert call["step_xlmr_cudnn_rbg"][:2] == (
        "step",
        {**cudnn, "overrides": {"train.prng_impl": "rbg"}},
    )
    assert call["step_xlmr_cudnn_loss_chunk0"][1]["overrides"] == {"model.loss_chunk": 0}


def test_the_profile_runs_first_and_the_step_variants_follow_the_cudnn_step():
    """The profile leads the order; right after XLM-R's cuDNN step (the default generator,
    dropout and head) come its variants, each with a budget and a unit to run it: dropout 0,
    every other PRNG implementation, the loss unchunked."""
    order = list(gpu_suite.BUDGETS)
    assert order[:3] == ["profile", "kernel_check", "tile_sweep"]
    assert "profile" in gpu_suite.UNITS
    variants = [
        "step_xlmr_cudnn_dropout0",
        "step_xlmr_cudnn_threefry4x32",
        "step_xlmr_cudnn_rbg",
        "step_xlmr_cudnn_unsafe_rbg",
        "step_xlmr_cudnn_loss_chunk0",
    ]
    at = order.index("step_mmbert_cudnn") + 1
    assert order[at : at + len(variants)] == variants
    assert all(gpu_suite.BUDGETS[name] > 0 for name in order)
    assert gpu_timings.DEFAULT_PRNG == "threefry2x32"  # step_xlmr_cudnn's own
    impls = {gpu_timings.DEFAULT_PRNG} | {
        o["train.prng_impl"] for o in gpu_timings.STEP_VARIANTS.values() if "train.prng_impl" in o
    }
    assert impls == set(PRNG_IMPLS)
    names = [name for name, _, _ in gpu_suite.measurement_units("", 10, 2)]
    assert names == order[3:]  # every unit after the sweep, in the budgets' order


def test_the_variants_plans_change_one_setting_of_the_cudnn_step():
    base = gpu_timings.measured_plan("xlmr", "cudnn")
    assert (base.model.dropout_rate, base.model.attention_dropout_rate) == (0.1, 0.0)
    assert (base.loop.prng_impl, base.model.loss_chunk) == ("threefry2x32", 1024)
    plans = {
        v: gpu_timings.measured_plan("xlmr", "cudnn", "", o)
        for v, o in gpu_timings.STEP_VARIANTS.items()
    }
    assert plans["dropout0"].model.dropout_rate == 0.0
    assert plans["rbg"].loop.prng_impl == "rbg"
    assert plans["unsafe_rbg"].model == base.model
    assert plans["loss_chunk0"].model.loss_chunk == 0
    assert plans["loss_chunk0"].loop == base.loop
    assert all(plan.batch_size == 32 and plan.max_length == 512 for plan in plans.values())


def test_units_profile_runs_the_profile_alone(monkeypatch, tmp_path):
    clock = FakeClock()
    calls = fake_units(monkeypatch, clock, share=1 / 3)
    suite = gpu_suite.run_suite(tmp_path, clock=clock, units=["profile"])
    assert list(suite["steps"]) == ["profile"]
    assert [(unit, cap) for unit, _, cap in calls] == [("profile", gpu_suite.BUDGETS["profile"])]


def test_the_profile_of_a_tiny_step_names_its_ops_and_their_sources(tmp_path):
    """The profile unit's step, on a CPU: the real training step of a 2-layer encoder compiled,
    run once, traced three steps and read (the host's XLA ops: a CPU has no device lines)."""
    cfg = default_config()
    cfg.model.update(vocab_size=512, hidden_size=64, num_layers=2, num_heads=4, mlp_dim=128)
    cfg.data.update(batch_size=8, max_length=32)
    result = gpu_timings.profile_step(resolve(cfg), 3, str(tmp_path / "trace"))
    assert result["steps"] == 3 and result["events_from"] == "host"
    ops = result["top_ops"]
    assert 0 < len(ops) <= 25 and result["hlo_ops_timed"] >= len(ops)
    assert sum(op["share"] for op in ops) <= 1 + 1e-9
    assert sum(bool(op["source"]) for op in ops) >= len(ops) // 2
    assert any("transpose(" in op["source"] or "jvp(" in op["source"] for op in ops)


def test_units_runs_only_the_named_units_and_refuses_an_unknown_one(monkeypatch, tmp_path):
    """A later call measures what an earlier one did not reach: only the named units run (the
    pallas steps, with no sweep among them, at the default tiles) and the report and verdict
    cover those alone; a misspelt unit is refused before anything runs."""
    clock = FakeClock()
    calls = fake_units(monkeypatch, clock, share=1 / 3)
    with pytest.raises(
        ValueError, match=r"--units: no unit attention_4096; the units: profile, kernel_"
    ):
        gpu_suite.run_suite(tmp_path, clock=clock, units=["attention_512", "attention_4096"])
    assert not calls
    suite = gpu_suite.run_suite(
        tmp_path, clock=clock, units=["pipeline_workers", "step_xlmr_pallas"]
    )
    assert list(suite["steps"]) == ["step_xlmr_pallas", "pipeline_workers"]  # priority order
    assert [unit for unit, _, _ in calls] == ["step", "pipeline_workers"]
    assert calls[0][1]["flash_tiles"] == str(tile_sweep.sweep_default())
    assert gpu_suite.suite_passed(suite)
    assert "GPU suite on" in gpu_suite.summary(suite, tmp_path)


def test_the_sweep_hands_over_each_compiled_candidate_before_compiling_the_next(monkeypatch):
    """The suite keeps a unit's records up to its budget: a sweep cut while compiling still
    reports the candidates it compiled."""
    first = {"stage": "compile", "kernel": "forward", "tiles": "64x64:w4:s2", "spill_stores": 0}

    def compile_stage(gpu):
        yield first
        raise TimeoutError("cut at the unit's budget")

    monkeypatch.setattr(tile_sweep, "_compile_stage", compile_stage)
    assert next(tile_sweep.tile_sweep("h100")) == first


def test_mmbert_is_measured_in_one_stage_of_1024_token_rows_against_modernbert():
    """mmBERT base's pre-training phase alone (the context extension's 8,192-token stage would
    be the one `bench.step` times), both sides masking 30 %; its peer is HF's 307 M-parameter
    ModernBertForMaskedLM (built on PyTorch's meta device: shapes, no memory)."""
    plan = gpu_timings.measured_plan("mmbert", "pallas", "forward=64x64:w4:s2")
    assert len(plan.stages) == 1 and plan.stages[0].weights == {"mmlm": 1.0}
    assert (plan.stages[0].rows, plan.stages[0].lengths) == ({"mmlm": 16}, {"mmlm": 1024})
    assert plan.sized(workdir=None).stage_streams[0]["mmlm"].mask_rates == {MONO: 0.3}
    assert plan.mask_rates.mono == 0.3  # the peer's
    assert (plan.model.architecture, plan.model.dtype) == ("modernbert", "bfloat16")
    assert (plan.model.attention_impl, plan.model.flash_tiles) == ("pallas", "forward=64x64:w4:s2")
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    with torch.device("meta"):
        model = gpu_timings.measured_plan("mmbert", "xla").model
        peer = backbones.of(model).hf_peer(model)
    assert type(peer).__name__ == "ModernBertForMaskedLM"
    assert round(sum(p.numel() for p in peer.parameters()) / 1e6) == 308
    assert (peer.config.num_hidden_layers, peer.config.local_attention) == (22, 128)


def test_pick_takes_the_fastest_spill_free_candidate_per_kernel():
    picked = tile_sweep.pick_tiles(SWEEP_RECORDS, DEFAULT)
    assert str(picked) == "forward=128x64:w8:s2 dq=32x32:w4:s2 dkv=64x32:w4:s2"
    assert tile_sweep.pick_tiles([], DEFAULT) == DEFAULT  # nothing measured: the default
    free = tile_sweep.spill_free(SWEEP_RECORDS)
    assert free == {
        "forward": ["64x64:w4:s2", "128x64:w8:s2"],
        "dq": ["32x32:w4:s2", "64x64:w8:s2"],
        "dkv": ["64x32:w4:s2"],
    }


def step(*records, status="ok", error=None):
    return {
        "status": status,
        "seconds": 1.0,
        "budget_s": 60,
        "records": list(records),
        **({"error": error} if error else {}),
    }


def fake_suite() -> dict:
    """A suite whose XLM-R cuDNN step failed and whose compiled XLM-R peer ran out of memory;
    mmBERT's cuDNN step timed out and its compiled peer was skipped at the deadline."""
    ours = {"tokens_per_s": 150_000.0, "mfu": 0.42, "peak_memory_gib": 31.25}
    peer = {
        "eager": {"tokens_per_s": 100_000.0, "peak_memory_gib": 56.0},
        "compile": {"error": "OutOfMemoryError: CUDA out of memory"},
    }
    mmbert = {"tokens_per_s": 90_000.0, "mfu": 0.35, "peak_memory_gib": 20.0}
    attention = {
        "results": [
            {
                "length": 512,
                "mask": mask,
                "impl": "pallas",
                "fwd_bwd_ms": ms,
                "vs_unmasked": ms / 2,
                "tiles_skipped": 0.3,
                "temp_memory_mib": 12.0,
            }
            for mask, ms in (("unmasked", 2.0), ("camlm", 1.5), ("tlm", 1.2))
        ]
    }
    top = {
        "hlo_op": "gemm.3",
        "kind": "custom-call __cublas$gemm",
        "ms_per_step": 12.5,
        "share": 0.25,
        "launches_per_step": 12.0,
        "source": "jit(step)/transpose(jvp(encoder))/dot_general",
    }
    profiled = {
        "model": "xlmr",
        "attention": "cudnn",
        "trace": "gpu_suite/profile/xlmr/plugins/profile/t/host.trace.json.gz",
        "module": "jit_step",
        "events_from": "device",
        "steps": 3,
        "device_ms_per_step": 50.0,
        "hlo_ops_timed": 640,
        "top_ops": [top, {**top, "hlo_op": "fusion.9", "kind": "fusion kLoop", "share": 0.1,
                          "ms_per_step": 5.0, "source": "a|b"}],
    }  # fmt: skip
    steps = {
        "profile": step(profiled, status="timed out", error="timed out after 90 s"),
        "kernel_check": step(
            {
                "case": "mmlm/none/float32/L300/dropout0.0/d64",
                "passed": True,
                "max_abs_error": 1.5e-6,
                "errors": {"out": 1.5e-6},
            }
        ),
        "tile_sweep": step(
            *SWEEP_RECORDS, {"stage": "picked", "fwd_bwd_ms": 4.0, "default_ms": 5.0}
        ),
        "step_xlmr_pallas": step(ours),
        "step_mmbert_pallas": step(mmbert),
        "peer_xlmr_eager": step({"modes": {"eager": peer["eager"]}}),
        "peer_mmbert_eager": step(
            {"modes": {"eager": {"tokens_per_s": 60_000.0, "peak_memory_gib": 48.0}}}
        ),
        "step_xlmr_xla": step({**ours, "tokens_per_s": 120_000.0}),
        "step_mmbert_xla": step({**mmbert, "tokens_per_s": 75_000.0}),
        "step_xlmr_cudnn": step(status="failed", error="ValueError: cuDNN refused\nmore text"),
        "step_mmbert_cudnn": step(status="timed out", error="timed out after 65 s"),
        "step_xlmr_cudnn_rbg": step({**ours, "tokens_per_s": 160_000.0}),
        "step_xlmr_cudnn_dropout0": step(
            status="skipped", error="20 s left of the suite's 520 s; its budget is 40 s"
        ),
        "peer_xlmr_compile": step({"modes": {"compile": peer["compile"]}}),
        "peer_mmbert_compile": step(
            status="skipped", error="12 s left of the suite's 520 s; its budget is 70 s"
        ),
        "attention_512": step(attention),
        "attention_2048": step(status="timed out", error="timed out after 30 s"),
        "pipeline_workers": step(
            *(
                {
                    "num_workers": n,
                    "cpus": 16,
                    "store_gb": 0.1,
                    "startup_s": 2.0,
                    "tokens_per_s": rate,
                }
                for n, rate in ((0, 2.0e6), (4, 6.1e6))
            )
        ),  # fmt: skip
    }
    suite = {
        "device": "NVIDIA H100 80GB HBM3",
        "date": "2026-11-25T10:00:00+00:00",
        "versions": {
            "jax": "0.11.2",
            "jaxlib": "0.11.2",
            "flax": "0.12.8",
            "torch": "2.11.0",
            "transformers": "5.17.0",
        },
        "steps": steps,
        "flash_tiles": str(tile_sweep.pick_tiles(SWEEP_RECORDS, DEFAULT)),
    }
    suite["peer_ratio"] = gpu_report.peer_ratios(steps)
    return suite


def test_markdown_rows_for_the_measured_tables(tmp_path):
    suite = fake_suite()
    assert suite["peer_ratio"] == {
        "xlmr": {"pallas": {"eager": 1.5}, "xla": {"eager": 1.2}},
        "mmbert": {"pallas": {"eager": 1.5}, "xla": {"eager": 1.25}},
    }
    rows = gpu_report.measured_rows(suite, "xlmr")
    versions = "2026-11-25, NVIDIA H100 80GB HBM3, JAX 0.11.2, Flax 0.12.8 |"
    assert rows[0] == (
        '| xlpretrain `xlmr.py:base`, `attention=pallas`, `model.flash_tiles="forward=128x64:w8:s2 '
        'dq=32x32:w4:s2 dkv=64x32:w4:s2"` | 150,000 (MFU 42.0%) | 31.2 GiB | ' + versions
    )
    assert rows[1].startswith("| xlpretrain `xlmr.py:base`, `attention=cudnn` (attention dropout")
    assert "| failed: ValueError: cuDNN refused | — |" in rows[1]
    assert rows[2].startswith("| xlpretrain `xlmr.py:base`, `attention=xla` | 120,000 (MFU 42.0%)")
    assert rows[3] == (
        "| HF `XLMRobertaForMaskedLM`, eager | 100,000; ours / peer: pallas 1.50x, xla 1.20x | "
        "56.0 GiB | 2026-11-25, NVIDIA H100 80GB HBM3, PyTorch 2.11.0, transformers 5.17.0 |"
    )
    assert "`torch.compile` | failed: OutOfMemoryError: CUDA out of memory | — |" in rows[4]
    assert "L = 512: camlm 0.75x; L = 512: tlm 0.60x" in rows[5]
    assert len(rows) == 8 and all(row.count("|") == 5 for row in rows)

    mmbert = gpu_report.measured_rows(suite, "mmbert")
    assert len(mmbert) == 5 and all(row.count("|") == 5 for row in mmbert)  # no attention rows
    assert mmbert[0].startswith(
        '| xlpretrain `mmbert.py:base`, `attention=pallas`, `model.flash_tiles="forward=128x64'
    )
    assert "| 90,000 (MFU 35.0%) | 20.0 GiB | " + versions in mmbert[0]
    assert "| timed out: timed out after 65 s | — |" in mmbert[1]
    assert mmbert[2].startswith("| xlpretrain `mmbert.py:base`, `attention=xla` | 75,000 (MFU")
    assert mmbert[3].startswith(
        "| HF `ModernBertForMaskedLM`, eager | 60,000; ours / peer: pallas 1.50x, xla 1.25x | "
        "48.0 GiB | 2026-11-25, NVIDIA H100 80GB HBM3, PyTorch 2.11.0"
    )
    assert mmbert[4].startswith(
        "| HF `ModernBertForMaskedLM`, `torch.compile` | skipped: 12 s left of the suite's "
        "520 s; its budget is 70 s | — |"
    )

    text = gpu_report.performance_markdown(suite)
    assert "## `xlmr.py:base`, batch 32 × 512, bf16, AdamW" in text
    assert "## `mmbert.py:base`, batch 16 × 1,024, bf16, AdamW" in text
    assert "| mmlm/none/float32/L300/dropout0.0/d64 | 1.50e-06 | yes |" in text
    assert "| forward | 128x64:w8:s2 | 200 | 0 B | 32 KiB | 4.00 | yes |" in text
    assert "| forward | 128x128:w8:s2 | 200 | 96 B | 32 KiB | 1.00 |  |" in text
    assert "| dq | 64x64:w4:s2 | 200 | 8 B | 32 KiB | spills: not timed |  |" in text
    assert "| dq | 64x64:w8:s2 | 200 | 0 B | 32 KiB | out of memory |  |" in text
    assert "| dkv | 128x32:w8:s2 | Shared memory |" in text
    assert "4.00 ms forward + backward, the default 5.00 ms" in text
    assert "| 512 | camlm | pallas | 1.50 | 0.75x | 30% | 12 |" in text
    assert "| 2048 | timed out: timed out after 30 s |" in text
    assert "- `step_xlmr_cudnn` failed: ValueError: cuDNN refused" in text
    assert (
        "- `peer_mmbert_compile` skipped: 12 s left of the suite's 520 s; its budget is 70 s"
        in text
    )
    assert "on 16 CPUs; the goal is 5.6 M row tokens/s a host" in text
    assert "## Profile: the 25 HLO ops of most device time" in text
    assert (
        "3 steps under `jax.profiler` (`gpu_suite/profile/xlmr/plugins/profile/t/host.trace."
        "json.gz`): 50.00 ms of op time a step on the device, over 640 HLO ops of `jit_step`; "
        "the 2 longest" in text
    )
    assert (
        "| 1 | `gemm.3` | custom-call __cublas$gemm | 12.500 | 25.0% | 12 | "
        "jit(step)/transpose(jvp(encoder))/dot_general |" in text
    )
    assert "| 2 | `fusion.9` | fusion kLoop | 5.000 | 10.0% | 12 | a\\|b |" in text
    assert "The profile did not finish: timed out: timed out after 90 s." in text
    assert "| `step_xlmr_cudnn` with | tokens/s | over `step_xlmr_cudnn` | peak memory |" in text
    assert "| nothing changed (`train.prng_impl=threefry2x32`) | failed: ValueError: cuDNN" in text
    assert "| `train.prng_impl=rbg` | 160,000 | — | 31.2 GiB |" in text
    assert "| `model.dropout_rate=0.0` | skipped: 20 s left of the suite's 520 s" in text
    assert "| `model.loss_chunk=0` | not run | | |" in text
    assert "| 0 | 2.00 s | 2,000,000 | not met |" in text
    assert "| 4 | 2.00 s | 6,100,000 | met |" in text
    assert not gpu_suite.suite_passed(suite)
    lines = gpu_report.summary(suite, tmp_path).splitlines()
    assert "xlmr step, attention=pallas: 150,000 tokens/s" in lines
    assert "xlmr peer (eager): 100,000 tokens/s, ours / peer: pallas 1.50x, xla 1.20x" in lines
    assert "mmbert step, attention=cudnn: timed out: timed out after 65 s" in lines
    assert "mmbert peer (eager): 60,000 tokens/s, ours / peer: pallas 1.50x, xla 1.25x" in lines
    assert "xlmr profile: 50.00 ms of op time a step, the longest op gemm.3 (25.0%)" in lines
    assert (
        "mmbert peer (compile): skipped: 12 s left of the suite's 520 s; its budget is 70 s"
        in lines
    )
    assert (
        "input pipeline, row tokens/s by data.num_workers: 0: 2.00 M, 4: 6.10 M (goal 5.6 M)"
        in lines
    )
    assert lines[-1].startswith(
        "did not finish: profile (timed out), step_xlmr_cudnn (failed), step_mmbert_cudnn "
        "(timed out), step_xlmr_cudnn_dropout0 (skipped), "
        "peer_mmbert_compile (skipped), attention_2048 (timed out)"
    )


def test_the_pipeline_step_measures_a_synthetic_store_per_worker_count(tmp_path):
    """The suite's input-pipeline step, run here at a tiny size as the suite runs it (a child
    process finds the unit by name): a row per worker count."""
    params = {"gigabytes": 0.002, "workers": [0], "steps": 3}
    step = gpu_suite.run_unit("pipeline_workers", params, 300, tmp_path / "suite.log")
    assert step["status"] == "ok", step
    records = step["records"]
    assert [r["num_workers"] for r in records] == [0]
    assert records[0]["tokens_per_s"] > 0 and records[0]["documents"] > 0
    assert records[0]["cpus"] >= 1 and records[0]["store_gb"] == 0.002


def test_a_step_that_fails_or_overruns_is_recorded(tmp_path):
    log = tmp_path / "suite.log"
    failed = gpu_suite.run_unit("no_such_unit", {}, 60, log)
    assert failed["status"] == "failed" and failed["records"] == []
    assert failed["error"] == "KeyError: 'no_such_unit'"
    slow = gpu_suite.run_unit("kernel_check", {"platform": "cpu"}, 1, log)
    assert slow["status"] == "timed out" and slow["error"] == "timed out after 1 s"
    assert "== kernel_check" in log.read_text()


def test_the_suite_refuses_at_once_without_a_gpu(tmp_path):
    """No GPU for JAX (CUDA's plugin, where installed, finds none): one line, nothing else."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    out = tmp_path / "suite"
    result = subprocess.run(
        [sys.executable, "-m", "xlpretrain.bench", "--suite", "gpu", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "xlpretrain.bench: error: --suite gpu needs a GPU: JAX's default backend here is 'cpu' "
        "(python -c 'import jax; print(jax.devices())' shows why)"
    ]
    assert not out.exists()


@pytest.mark.parametrize("args", [["--suite", "gpu"], []])
def test_the_suite_needs_out_and_the_step_needs_config(args):
    result = subprocess.run(
        [sys.executable, "-m", "xlpretrain.bench", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert ("--suite needs --out DIR" if args else "--config is required") in result.stderr
