"""The benchmark runs a real step on synthetic rows that follow the Batch contract."""

import json
import subprocess
import sys

import numpy as np

from xlpretrain import bench
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


def test_bench_cli_reports_throughput_and_the_flop_formula():
    result = subprocess.run(
        [sys.executable, "-m", "xlpretrain.bench", "--config", "configs/demo.py", "--steps", "2",
         "--warmup", "1", "--json", "--config.model.vocab_size=1002"],
        capture_output=True, text=True, timeout=300, check=True,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["tokens_per_s"] > 0 and report["step_time_s"] > 0
    assert report["flop_formula"] == bench.FLOP_FORMULA
    assert report["model_tflops_per_step"] > 0 and np.isfinite(report["final_loss"])
    assert report["mfu"] is None  # a CPU has no known peak
