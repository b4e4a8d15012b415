"""The benchmark runs a real step on synthetic rows that follow the Batch contract."""

import json
import subprocess
import sys

import numpy as np
import pytest

from xlpretrain import bench, bench_attention
from xlpretrain.data.batch import PREDICTION_FIELDS, TOKEN_FIELDS
from xlpretrain.data.pipeline import MONO, SEGMENT_PAIRS, StreamSpec


def test_synthetic_rows_follow_the_batch_contract():
    rng = np.random.default_rng(0)
    batch = bench.synthetic_batch(4, 32, StreamSpec(MONO, 0.15), 100, rng)
    assert set(batch) == set(TOKEN_FIELDS) | set(PREDICTION_FIELDS)
    assert (batch["pred_weights"].sum(1) == 5).all()  # ⌈0.15 · 32⌉
    picked = np.take_along_axis(batch["input_ids"], batch["pred_positions"], 1)
    assert not np.isin(picked, [0, 1, 2]).any()
    pairs = bench.synthetic_batch(2, 32, StreamSpec(SEGMENT_PAIRS, 0.25), 100, rng)
    assert set(pairs["segment_ids"][0]) == {1, 2} and set(pairs["pair_ids"][0]) == {1}
    btmlm = bench.synthetic_batch(2, 32, StreamSpec(MONO, 0.15, placeholder_ratio=0.2), 100, rng)
    holders = btmlm["placeholder_positions"][0][btmlm["placeholder_weights"][0] > 0]
    assert (btmlm["source_ids"][0, holders] == 99).all()


def run_bench(*args: str) -> dict:
    """The bench CLI on the demo config, shrunk (its 40 languages' characters need a
    vocabulary of about 1,800 ids when --pipeline trains the tokenizer)."""
    result = subprocess.run(
        [sys.executable, "-m", "xlpretrain.bench", "--config", "configs/demo.py", "--json",
         "--config.model.vocab_size=2002", "--config.tokenizer.sentences_per_language=200",
         *args],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_bench_cli_reports_throughput_the_flop_formula_the_pipeline_and_the_peer():
    report = run_bench(
        "--steps", "2", "--warmup", "1", "--peer", "--peer_modes", "eager", "--pipeline"
    )  # fmt: skip
    assert report["tokens_per_s"] > 0 and report["step_time_s"] > 0
    assert report["flop_formula"] == bench.FLOP_FORMULA
    assert report["model_tflops_per_step"] > 0 and np.isfinite(report["final_loss"])
    assert report["mfu"] is None  # a CPU has no known peak
    peer = report["peer"]["modes"]["eager"]
    assert peer["tokens_per_s"] > 0
    ratio = report["tokens_per_s"] / peer["tokens_per_s"]
    assert report["peer_ratio"]["eager"] == pytest.approx(ratio)
    assert report["pipeline_tokens_per_s"] > 0 and 0.5 < report["pipeline_fill"] <= 1.0
    assert report["pipeline_vs_step"] == pytest.approx(
        report["pipeline_tokens_per_s"] / report["tokens_per_s"]
    )


def test_attention_micro_benchmark_times_every_mask_and_impl():
    """The kernel runs interpreted on a CPU, so this checks the harness, not its speed."""
    report = run_bench(
        "--attention", "--attention_impls", "xla,pallas", "--attention_lengths", "256",
        "--attention_batch", "2", "--attention_repeats", "1",
    )  # fmt: skip
    rows = {(r["mask"], r["impl"]): r for r in report["results"]}
    assert set(rows) == {(m, i) for m in bench_attention.OBJECTIVE_MASKS for i in ("xla", "pallas")}
    for row in rows.values():
        assert row["fwd_bwd_ms"] > 0 and row["length"] == 256, row
        assert row["vs_unmasked"] > 0
    assert rows[("unmasked", "xla")]["tiles_skipped"] == 0.0


def test_packed_rows_leave_tiles_to_skip_at_length_2048():
    from xlpretrain import masks
    from xlpretrain.model.kernels.block_mask import classify_tiles, skipped_fraction

    rng = np.random.default_rng(0)
    for name in ("mmlm", "camlm", "btmlm_generate"):
        meta = bench_attention.row_meta(name, 2, 2048, rng)
        tiles = classify_tiles(
            masks.get(name), meta, meta, q_len=2048, k_len=2048, block_q=128, block_k=128
        )
        assert float(skipped_fraction(tiles)) > 0.5, name
