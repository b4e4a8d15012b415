"""The GPU suite's pieces on a CPU: the kernel check (interpret mode, tiny shapes) passes and can
fail, the tile pick, the markdown rows, a step's failure and time-out, and the CLI's refusal."""

import os
import subprocess
import sys

import pytest

from xlpretrain import masks
from xlpretrain.bench import gpu_report, gpu_suite, kernel_check, tile_sweep
from xlpretrain.model.kernels import flash
from xlpretrain.model.kernels.gpu_compile import FlashCase

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


def test_the_gpu_check_covers_every_mask_and_bias_and_the_budgets_fit_9_minutes():
    cases = {(c.mask, c.bias, c.dropout > 0) for c in kernel_check.check_cases()}
    assert {(m, b, False) for m in masks.MASKS for b in BIASES} < cases
    assert sum(gpu_suite.BUDGETS.values()) <= 520  # a device call may run 600 s


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
    """A suite whose cuDNN step failed and whose compiled peer ran out of memory."""
    ours = {"tokens_per_s": 150_000.0, "mfu": 0.42, "peak_memory_gib": 31.25}
    peer = {
        "eager": {"tokens_per_s": 100_000.0, "peak_memory_gib": 56.0},
        "compile": {"error": "OutOfMemoryError: CUDA out of memory"},
    }
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
    steps = {
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
        "step_pallas": step(ours),
        "step_cudnn": step(status="failed", error="ValueError: cuDNN refused\nmore text"),
        "step_xla": step({**ours, "tokens_per_s": 120_000.0}),
        "peer_eager": step({"modes": {"eager": peer["eager"]}}),
        "peer_compile": step({"modes": {"compile": peer["compile"]}}),
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


def test_markdown_rows_for_the_measured_table(tmp_path):
    suite = fake_suite()
    assert suite["peer_ratio"] == {"pallas": {"eager": 1.5}, "xla": {"eager": 1.2}}
    rows = gpu_report.measured_rows(suite)
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
    assert all(row.count("|") == 5 for row in rows)

    text = gpu_report.performance_markdown(suite)
    assert "| mmlm/none/float32/L300/dropout0.0/d64 | 1.50e-06 | yes |" in text
    assert "| forward | 128x64:w8:s2 | 200 | 0 B | 32 KiB | 4.00 | yes |" in text
    assert "| forward | 128x128:w8:s2 | 200 | 96 B | 32 KiB | 1.00 |  |" in text
    assert "| dq | 64x64:w4:s2 | 200 | 8 B | 32 KiB | spills: not timed |  |" in text
    assert "| dq | 64x64:w8:s2 | 200 | 0 B | 32 KiB | out of memory |  |" in text
    assert "| dkv | 128x32:w8:s2 | Shared memory |" in text
    assert "4.00 ms forward + backward, the default 5.00 ms" in text
    assert "| 512 | camlm | pallas | 1.50 | 0.75x | 30% | 12 |" in text
    assert "| 2048 | timed out: timed out after 30 s |" in text
    assert "- `step_cudnn` failed: ValueError: cuDNN refused" in text
    assert "on 16 CPUs; the goal is 5.6 M row tokens/s a host" in text
    assert "| 0 | 2.00 s | 2,000,000 | not met |" in text
    assert "| 4 | 2.00 s | 6,100,000 | met |" in text
    assert not gpu_suite.suite_passed(suite)
    lines = gpu_report.summary(suite, tmp_path).splitlines()
    assert "peer (eager): 100,000 tokens/s, ours / peer: pallas 1.50x, xla 1.20x" in lines
    assert (
        "input pipeline, row tokens/s by data.num_workers: 0: 2.00 M, 4: 6.10 M (goal 5.6 M)"
        in lines
    )
    assert lines[-1].startswith("did not finish: step_cudnn (failed), attention_2048 (timed out)")


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
