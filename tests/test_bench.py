"""The benchmark runs a real step on synthetic rows that follow the Batch contract."""

import json
import subprocess
import sys

import numpy as np
import pytest

from xlpretrain import objectives
from xlpretrain.bench import attention as bench_attention
from xlpretrain.bench import step as bench
from xlpretrain.data.pretraining.batch import PREDICTION_FIELDS, TOKEN_FIELDS
from xlpretrain.data.pretraining.row_kinds import PlaceholderSegments, SegmentPairs, Segments
from xlpretrain.data.pretraining.streams import MONO, PARALLEL, StreamSpec
from xlpretrain.objectives.flops import StepShape
from xlpretrain.training.config import default_config
from xlpretrain.training.plan import resolve


def test_synthetic_rows_follow_the_batch_contract():
    rng = np.random.default_rng(0)
    batch = bench.synthetic_batch(4, StreamSpec(Segments(), {MONO: 0.15}, max_length=32), 100, rng)
    assert set(batch) == set(TOKEN_FIELDS) | set(PREDICTION_FIELDS)
    assert (batch["pred_weights"].sum(1) == 5).all()  # ⌈0.15 · 32⌉
    picked = np.take_along_axis(batch["input_ids"], batch["pred_positions"], 1)
    assert not np.isin(picked, [0, 1, 2]).any()
    pairs = bench.synthetic_batch(
        2, StreamSpec(SegmentPairs(), {PARALLEL: 0.25}, max_length=32), 100, rng
    )
    assert set(pairs["segment_ids"][0]) == {1, 2} and set(pairs["pair_ids"][0]) == {1}
    btmlm = bench.synthetic_batch(
        2, StreamSpec(PlaceholderSegments(0.2), {MONO: 0.15}, max_length=32), 100, rng
    )
    holders = btmlm["placeholder_positions"][0][btmlm["placeholder_weights"][0] > 0]
    assert (btmlm["source_ids"][0, holders] == 99).all()


def run_bench(*args: str) -> dict:
    """The bench CLI on the demo config, shrunk (its 40 languages' characters need a
    vocabulary of about 1,800 ids when --pipeline trains the tokenizer)."""
    result = subprocess.run(
        [sys.executable, "-m", "xlpretrain.bench", "--config", "configs/demo.py", "--json",
         "--config.model.vocab_size=2002", "--config.tokenizer.sentences_per_language=200",
         "--config.model.hidden_size=64", "--config.model.mlp_dim=256", *args],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_bench_cli_reports_throughput_the_flop_formula_the_pipeline_and_the_peer():
    report = run_bench(
        "--steps", "2", "--warmup", "1", "--peer", "--peer_modes", "eager", "--pipeline"
    )  # fmt: skip
    assert report["tokens_per_s"] > 0 and report["step_time_s"] > 0
    assert report["flop_formula"] == bench.FLOP_FORMULA
    # configs/demo.py: 2 layers; hidden 64, FFN 256, vocab 2002 (the overrides above); MMLM and
    # TLM each 16 rows × 64 tokens (T = 1024) with ⌈0.15 · 64⌉ = 10 predictions a row (P = 160):
    #   6 · 2 · (4 · 64² + 2 · 64 · 256) · 1024 = 603,979,776   weight matmuls
    # + 12 · 2 · 64 · 64 · 1024             = 100,663,296   attention
    # + 6 · (64² + 64 · 2002) · 160         = 126,935,040   LM head
    # = 831,578,112 per objective, twice.
    assert report["model_tflops_per_step"] * 1e12 == pytest.approx(2 * 831_578_112, rel=1e-12)
    assert np.isfinite(report["final_loss"])
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


def _flops_plan(name: str):
    """A run of objective `name` alone on 2 layers, hidden 8 (2 heads), FFN 32, vocab 100
    (with what the objective requires: VECO's cross-attention, BTMLM's language embeddings);
    XLM-E generator of 1 layer at half width (1 head: hidden 4, FFN 16)."""
    cfg = default_config()
    cfg.model.num_layers, cfg.model.hidden_size, cfg.model.num_heads = 2, 8, 2
    cfg.model.mlp_dim, cfg.model.vocab_size = 32, 100
    cfg.model.cross_attention = name.startswith("veco")
    cfg.model.language_embeddings = name == "btmlm"
    cfg.xlm_e.generator_layers, cfg.xlm_e.generator_width = 1, 0.5
    cfg.btmlm.ratio = 0.25
    cfg.objectives = {name: 1.0}
    return resolve(cfg)


# T = 64 tokens (2 rows of 32), P = 10 predictions. The counts every objective builds on:
#   weight matmuls 6 · 2 · (4 · 8² + 2 · 8 · 32) · 64 = 589,824
#   attention      12 · 2 · 8 · 32 · 64            = 393,216
#   LM head        6 · (8² + 8 · 100) · 10         =  51,840
MASKED_LM = 589_824 + 393_216 + 51_840
HAND_COUNTED_FLOPS = {
    "mmlm": MASKED_LM,
    "tlm": MASKED_LM,
    "camlm": MASKED_LM,
    # + pass 1, forward only: (matmuls + attention + LM head on ⌈0.25 · 64⌉ = 16 placeholders) / 3
    #   = (589,824 + 393,216 + 6 · 864 · 16) / 3 = 355,328
    "btmlm": MASKED_LM + 355_328,
    # two passes + the cross-attention sub-layer: 6 · 2 · 4 · 8² · 64 = 196,608 and its scores
    "veco": 2 * MASKED_LM + 196_608 + 393_216,
    "veco_mono": 2 * MASKED_LM + 196_608 + 393_216,
    # + generator (1 layer, hidden 4, FFN 16): 6 · (4 · 4² + 2 · 4 · 16) · 64 = 73,728 matmuls,
    #   12 · 4 · 32 · 64 = 98,304 attention; + discriminator head 6 · (8² + 8) · 64 = 27,648
    "mrtd": MASKED_LM + 73_728 + 98_304 + 27_648,
    "trtd": MASKED_LM + 73_728 + 98_304 + 27_648,
    # no LM head; + the scores of 2 rows · 2 pair slots against each other, both ways:
    #   12 · (2 · 2)² · 8 = 1,536
    "xlco": 589_824 + 393_216 + 1_536,
}


@pytest.mark.parametrize("name", sorted(objectives.REGISTRY))
def test_each_objectives_flops_equal_the_hand_count(name):
    plan = _flops_plan(name)
    objective = objectives.get(name)
    shape = StepShape(tokens=64, length=32, predictions=10)
    flops = objective.flops(plan.contexts[name], plan.stage_streams[0][name], shape)
    assert flops == HAND_COUNTED_FLOPS[name]


def test_store_benchmark_reports_start_up_memory_and_throughput(udhr_tokenizer_path, tmp_path):
    """The harness of `--store_gb` on a tiny synthetic store (the sizes it exists for are
    measured in docs/performance.md, not here)."""
    result = subprocess.run(
        [sys.executable, "-m", "xlpretrain.bench", "--config", "configs/demo.py", "--json",
         "--store_gb", "0.002", "--workdir", str(tmp_path), "--steps", "2",
         f"--config.tokenizer.path={udhr_tokenizer_path}", "--config.model.vocab_size=1002",
         "--config.eval.every_steps=0", "--config.objectives.tlm=0"],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    (row,) = json.loads(result.stdout.strip().splitlines()[-1])
    assert row["store_gb"] == 0.002 and row["documents"] > 1000
    assert row["startup_s"] > 0 and row["tokens_per_s"] > 0
    assert 0 < row["rss_startup_mb"] <= row["rss_end_mb"] * 1.5
    assert (tmp_path / "store_0.002gb" / "manifest.json").is_file()
