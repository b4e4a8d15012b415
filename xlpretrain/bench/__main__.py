"""`python -m xlpretrain.bench --config configs/X.py [--steps N] [--json]`: the training step's
throughput, model FLOPs and MFU (`bench.step`).

`--peer` also times Hugging Face's PyTorch XLM-R step on the same shapes (`bench.peer`);
`--pipeline` times the input pipeline alone on the config's corpus, so the step's tokens/s can be
checked against what the data can feed; `--attention` runs the per-mask attention
micro-benchmark instead (`bench.attention`); `--store_gb` the pipeline on synthetic prepared
stores (`bench.store`); `--suite gpu --out DIR` runs everything a GPU session measures, on
`configs/xlmr.py:base` and `configs/mmbert.py:base`, and writes DIR (`bench.gpu_suite`; no
`--config`).
"""

from __future__ import annotations

import json
import sys
import tempfile

import jax
from absl import flags
from ml_collections import config_flags

from xlpretrain.bench.attention import attention_benchmark, format_attention
from xlpretrain.bench.peer import format_peer, peer_benchmark
from xlpretrain.bench.step import benchmark, pipeline_benchmark
from xlpretrain.core import programs
from xlpretrain.objectives.flops import FLOP_FORMULA
from xlpretrain.training import cli
from xlpretrain.training.plan import resolve


def main(argv: list[str]) -> None:
    del argv
    programs.quiet_libraries()
    if FLAGS.census:
        sys.exit(run_census())
    if FLAGS.suite:
        from xlpretrain.bench import gpu_suite

        sys.exit(gpu_suite.main(FLAGS.out, FLAGS.steps, FLAGS.warmup, FLAGS.units))
    plan = resolve(FLAGS.config)
    if FLAGS.attention:
        model = plan.model
        report = attention_benchmark(
            FLAGS.attention_impls or default_attention_impls(),
            [int(length) for length in FLAGS.attention_lengths],
            FLAGS.attention_batch,
            model.num_heads,
            model.hidden_size // model.num_heads,
            model.dtype,
            FLAGS.attention_repeats,
        )
        print(json.dumps(report) if FLAGS.json else format_attention(report))
        return
    if FLAGS.store_gb:
        from xlpretrain.bench import store as bench_store

        if not (FLAGS.workdir and plan.corpus.tokenizer_path):
            raise ValueError(
                "--store_gb needs --workdir (the stores are kept there) and "
                "--config.tokenizer.path (the ids' tokenizer, e.g. a run's tokenizer.model)"
            )
        sizes = [float(size) for size in FLAGS.store_gb]
        rows = bench_store.store_benchmark(plan, sizes, FLAGS.workdir, FLAGS.steps)
        print(json.dumps(rows) if FLAGS.json else "\n".join(bench_store.format_rows(rows)))
        return
    result = benchmark(plan, FLAGS.steps, FLAGS.warmup, FLAGS.peak_tflops)
    if FLAGS.pipeline:
        with tempfile.TemporaryDirectory() as scratch:  # a tokenizer trained for the run
            result.update(pipeline_benchmark(plan, FLAGS.steps, FLAGS.workdir or scratch))
        result["pipeline_vs_step"] = result["pipeline_tokens_per_s"] / result["tokens_per_s"]
    if FLAGS.peer:
        result["peer"] = peer_benchmark(plan, FLAGS.steps, FLAGS.warmup, FLAGS.peer_modes)
        result["peer_ratio"] = {
            mode: result["tokens_per_s"] / run["tokens_per_s"]
            for mode, run in result["peer"]["modes"].items()
            if "tokens_per_s" in run
        }
    if FLAGS.json:
        print(json.dumps(result))
        return
    mfu = f"{result['mfu']:.1%}" if result["mfu"] is not None else "n/a (unknown peak)"
    memory = result["peak_memory_gib"]
    print(
        f"device: {result['device']}\n"
        f"batch {result['batch_size']} x length {result['max_length']} ({result['dtype']}), "
        f"objectives {', '.join(result['config_objectives'])}\n"
        f"step time: {result['step_time_s'] * 1e3:.1f} ms ({result['steps_per_s']:.2f} steps/s), "
        f"compile + warm-up {result['compile_and_warmup_s']:.1f} s\n"
        f"tokens/s: {result['tokens_per_s']:,.0f}\n"
        f"model FLOPs/step: {result['model_tflops_per_step']:.3f} TFLOP "
        f"= {FLOP_FORMULA}\n"
        f"achieved: {result['achieved_tflops_per_s']:.2f} TFLOP/s, MFU {mfu}\n"
        f"peak memory: {f'{memory:.2f} GiB' if memory else 'n/a'}"
    )
    if FLAGS.pipeline:
        print(
            f"input pipeline alone: {result['pipeline_tokens_per_s']:,.0f} row tokens/s "
            f"({result['pipeline_vs_step']:.1f}x the step; {result['pipeline_fill']:.0%} of "
            f"slots are real tokens; data.num_workers={result['num_workers']})"
        )
    if FLAGS.peer:
        print(format_peer(result["tokens_per_s"], result["peer"]))


def run_census() -> int:
    """`--census TARGET`: both steps compiled for TARGET on this host, counted and printed."""
    from xlpretrain.bench import census

    # The target is compiled for, not run on: XLA's CPU backend is the host, whatever the GPU.
    jax.config.update("jax_platforms", "cpu")
    report = census.census(resolve(FLAGS.config), FLAGS.census)
    census.write(report, FLAGS.out or None, FLAGS.hlo or None)
    print(json.dumps(report) if FLAGS.json else census.format_census(report))
    return 0


def default_attention_impls() -> list[str]:
    """Every implementation this backend runs for real (a CPU runs the kernel only interpreted)."""
    native = {"gpu": ["xla", "cudnn", "pallas"], "tpu": ["xla", "splash"]}
    return native.get(jax.default_backend(), ["xla"])


def define_flags() -> None:
    """The CLI's flags, defined only when run as a program."""
    config_flags.DEFINE_config_file("config", None, "Config file (configs/NAME.py[:ARG]).")
    flags.DEFINE_integer("steps", 10, "Timed steps.")
    flags.DEFINE_integer("warmup", 2, "Untimed steps first (compilation included).")
    flags.DEFINE_float("peak_tflops", 0.0, "Peak TFLOP/s per device (overrides the table).")
    flags.DEFINE_bool("json", False, "Print one JSON object.")
    flags.DEFINE_bool(
        "pipeline", False, "Also time the input pipeline alone on the config's corpus."
    )
    flags.DEFINE_string(
        "workdir",
        "",
        "--pipeline: where the tokenizer is read or trained (default: a temp dir); "
        "--store_gb: where the synthetic stores are written and kept.",
    )
    flags.DEFINE_list(
        "store_gb",
        [],
        "Instead of the step: the pipeline's start-up, memory and tokens/s on synthetic "
        "prepared stores of these sizes in GB (xlpretrain/bench/store.py).",
    )
    flags.DEFINE_bool(
        "peer",
        False,
        "Also time Hugging Face's XLMRobertaForMaskedLM (ModernBertForMaskedLM for "
        "model.architecture=modernbert; PyTorch) on the same shapes.",
    )
    flags.DEFINE_list("peer_modes", ["eager", "compile"], "PyTorch modes for --peer.")
    flags.DEFINE_bool(
        "attention", False, "Attention micro-benchmark per objective mask instead of the step."
    )
    flags.DEFINE_list(
        "attention_impls", [], "Implementations (default: all this backend runs natively)."
    )
    flags.DEFINE_list("attention_lengths", ["512", "2048"], "Row lengths for --attention.")
    flags.DEFINE_integer("attention_batch", 8, "Rows for --attention.")
    flags.DEFINE_integer("attention_repeats", 10, "Timed calls per --attention row.")
    flags.DEFINE_enum(
        "suite",
        None,
        ["gpu"],
        "Run a whole suite instead (gpu: a profile, kernel check, tile sweep, step, peer and "
        "attention timings on configs/xlmr.py:base and configs/mmbert.py:base, under 9 "
        "minutes; xlpretrain/bench/gpu_suite.py).",
    )
    flags.DEFINE_string(
        "out",
        "",
        "--suite: the folder for suite.json, performance.md, suite.log, profile/; --census: "
        "for census.json.",
    )
    flags.DEFINE_string(
        "census",
        None,
        "Instead of timing: compile the step for this target (h100, h100:8, v5p:2x2x2, cpu:N) "
        "without it, beside a plain reference step, and count FLOPs, memory traffic, kernel "
        "launches and memory (xlpretrain/bench/census.py).",
    )
    flags.DEFINE_string("hlo", "", "--census: also write each step's optimized HLO to DIR.")
    flags.DEFINE_list(
        "units",
        [],
        "--suite: only these units (default: all, in priority order; one 9-minute call does not "
        "reach the last ones, so a later call names them).",
    )
    flags.register_multi_flags_validator(
        ["config", "suite"],
        lambda f: f["config"] is not None or f["suite"] is not None,
        "--config is required (unless --suite is given)",
    )
    flags.register_multi_flags_validator(
        ["suite", "out"], lambda f: f["suite"] is None or bool(f["out"]), "--suite needs --out DIR"
    )


FLAGS = flags.FLAGS

if __name__ == "__main__":
    define_flags()
    cli.run(main)
