"""What the GPU suite times on `configs/xlmr.py:base`, `configs/mmbert.py:base` and the host,
beside the kernel.

Each is a unit the suite runs in its own process (`gpu_suite.UNITS`), yielding records: the
training step per model and attention implementation (bf16, 16 k tokens a step: XLM-R base at
32 × 512, mmBERT base at 16 × 1,024, the length of mmBERT's pre-training phase), Hugging Face's
step per model and mode, the attention micro-benchmark at L = 512 and 2048, and the input
pipeline per number of grain workers on this host's CPUs (a 2-core CI machine cannot say
whether one host feeds 8 GPUs); XLM-R's cuDNN step with one setting changed (`STEP_VARIANTS`);
and a profile of both models' steps (`profile`). The shapes are here once: the suite runs them
and the report names them.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jax

from xlpretrain.bench import attention as bench_attention
from xlpretrain.bench import peer as bench_peer
from xlpretrain.bench import profile as bench_profile
from xlpretrain.bench import step as bench
from xlpretrain.training.config import default_config
from xlpretrain.training.config_files import load_config
from xlpretrain.training.plan import RunPlan, resolve
from xlpretrain.training.sections import PRNG_IMPLS

# The input pipeline on this host's CPUs: a synthetic store of PIPELINE_GB GB, MMLM rows of
# 512 tokens, 32 a step, PIPELINE_STEPS steps per `data.num_workers` in PIPELINE_WORKERS. The
# goal is 8 GPUs fed at 700 k tokens/s each: 5.6 M row tokens/s per host.
PIPELINE_GB, PIPELINE_STEPS, PIPELINE_WORKERS = 0.1, 200, (0, 4, 8)
PIPELINE_GOAL = 5.6e6
ATTENTION_IMPLS = ("pallas", "cudnn", "xla")
ATTENTION_LENGTHS = (512, 2048)
ATTENTION_MASKS = ("unmasked", "mmlm", "tlm", "camlm")
# The measured models, each `configs/<name>.py:base`, at (rows, row length) a step.
SHAPES = {"xlmr": (32, 512), "mmbert": (16, 1024)}
ATTENTION_MODEL = "xlmr"  # whose heads the attention benchmark measures
# The profile: PROFILE_STEPS steps of each model's step with PROFILE_ATTENTION (the plain
# reference step's attention, issue 43's yardstick; no kernel check or sweep needed first).
PROFILE_STEPS, PROFILE_ATTENTION = 3, "cudnn"
# XLM-R's cuDNN step (`step_xlmr_cudnn`: hidden dropout 0.1, the default generator
# `DEFAULT_PRNG`, `model.loss_chunk` 1024) with one setting changed, per unit-name suffix:
# dropout 0, each other PRNG implementation, the head's loss unchunked.
VARIANT_MODEL, VARIANT_ATTENTION = "xlmr", "cudnn"
DEFAULT_PRNG = default_config().train.prng_impl
STEP_VARIANTS: dict[str, dict[str, Any]] = {
    "dropout0": {"model.dropout_rate": 0.0},
    **{impl: {"train.prng_impl": impl} for impl in PRNG_IMPLS if impl != DEFAULT_PRNG},
    "loss_chunk0": {"model.loss_chunk": 0},
}


def step_unit(model: str, attention: str) -> str:
    """The suite's name of ``model``'s step with ``attention``: ``step_mmbert_pallas``."""
    return f"step_{model}_{attention}"


def variant_unit(variant: str) -> str:
    """The suite's name of the XLM-R cuDNN step's ``variant``: ``step_xlmr_cudnn_rbg``."""
    return f"{step_unit(VARIANT_MODEL, VARIANT_ATTENTION)}_{variant}"


def peer_unit(model: str, mode: str) -> str:
    """The suite's name of the peer of ``model`` in ``mode``: ``peer_xlmr_eager``."""
    return f"peer_{model}_{mode}"


def measured_plan(
    model: str, attention: str, flash_tiles: str = "", overrides: Mapping[str, Any] = {}
) -> RunPlan:
    """The plan of ``configs/<model>.py:base`` at ``model``'s measured shape (`SHAPES`), bf16,
    with ``attention`` (cuDNN's has no dropout, so its run has no attention dropout), and
    ``overrides`` last.

    mmBERT is measured in its pre-training phase alone, as one stage: the first stage's
    objectives (MMLM) at the first phase's mask rate (30 %), set as `data.mono_mask_rate` so
    that our step and the peer predict the same share of the rows. The context extension (a
    second stage of 8,192-token rows, which `bench.step` would time as the last stage) and the
    later phases (`data.anneal`) are left out."""
    spec = f"{model}:base"
    rows, length = SHAPES[model]
    settings = {
        "model.dtype": "bfloat16",
        "data.batch_size": rows,
        "data.max_length": length,
        "model.attention": attention,
        "model.flash_tiles": flash_tiles,
    }
    if attention == "cudnn":
        settings["model.attention_dropout_rate"] = 0.0
    if model == "mmbert":
        settings |= first_phase(resolve(load_config(spec)))
    return resolve(load_config(spec, settings | dict(overrides)))


def first_phase(plan: RunPlan) -> dict[str, Any]:
    """The config overrides that make `plan`'s run its first stage alone, at the mask rate its
    first `data.anneal` point sets: no schedule, no anneal."""
    _, rates = plan.anneal.points["mono_mask_rate"]
    weights = {f"objectives.{name}": w for name, w in plan.stages[0].weights.items()}
    return {"schedule": (), "data.anneal": (), **weights, "data.mono_mask_rate": rates[0]}


def step_throughput(
    model: str,
    attention: str,
    flash_tiles: str,
    steps: int,
    warmup: int,
    overrides: Mapping[str, Any] = {},
) -> Iterator[dict]:
    plan = measured_plan(model, attention, flash_tiles, overrides)
    result = bench.benchmark(plan, steps, warmup)
    yield {
        "model": model,
        "attention": attention,
        "flash_tiles": flash_tiles,
        "attention_dropout_rate": plan.model.attention_dropout_rate,
        "overrides": dict(overrides),
        **result,
    }


def profile_step(plan: RunPlan, steps: int, trace_dir: str) -> dict:
    """``steps`` steps of ``plan``'s step (`bench.step.step_inputs`: synthetic full rows),
    compiled ahead and run once first, under `jax.profiler` into ``trace_dir``: its ops of most
    device time with their shares and sources (`bench.profile.top_ops`)."""
    inputs = bench.step_inputs(plan)
    start = time.perf_counter()
    compiled = inputs.step_fn.lower(inputs.state, inputs.batch).compile()
    state, _ = compiled(inputs.state, inputs.batch)  # the warm-up; donates the first state
    jax.block_until_ready(state)
    compile_s = time.perf_counter() - start
    result = bench_profile.profile_compiled(
        compiled, compiled.as_text(), (state, inputs.batch), steps, trace_dir
    )
    return {"compile_and_warmup_s": round(compile_s, 3), **result}


def profile(models: Sequence[str], attention: str, steps: int, trace_dir: str) -> Iterator[dict]:
    """Each model's step at its measured shape (`measured_plan`) profiled (`profile_step`),
    its trace under ``trace_dir/<model>``: a record per model, as each is done."""
    for model in models:
        plan = measured_plan(model, attention)
        yield {
            "model": model,
            "attention": attention,
            **profile_step(plan, steps, os.path.join(trace_dir, model)),
        }


def peer(model: str, mode: str, steps: int, warmup: int) -> Iterator[dict]:
    """HF's step on ``model``'s plan (its backbone's `hf_peer`: XLM-R's or ModernBERT's class)."""
    yield bench_peer.peer_benchmark(measured_plan(model, "xla"), steps, warmup, [mode])


def attention_timings(length: int) -> Iterator[dict]:
    model = measured_plan(ATTENTION_MODEL, "xla").model
    yield bench_attention.attention_benchmark(
        ATTENTION_IMPLS,
        [length],
        8,
        model.num_heads,
        model.hidden_size // model.num_heads,
        model.dtype,
        10,
        ATTENTION_MASKS,
    )


def pipeline_plan(tokenizer: str, num_workers: int) -> RunPlan:
    """The plan of `configs/demo.py` at the shape of docs/performance.md's store benchmark:
    MMLM only, 32 rows of 512 tokens, no evaluation, `num_workers` grain workers."""
    overrides = {
        "tokenizer.path": tokenizer,
        "data.batch_size": 32,
        "data.max_length": 512,
        "objectives.tlm": 0.0,
        "eval.every_steps": 0,
        "data.num_workers": num_workers,
    }
    return resolve(load_config("demo", overrides))


def pipeline_workers(gigabytes: float, workers: Sequence[int], steps: int) -> Iterator[dict]:
    """Row tokens/s of the input pipeline on a synthetic prepared store, per number of grain
    worker processes: whether this host's CPUs feed its GPUs (a 2-core CI machine cannot say)."""
    from xlpretrain.bench import store as bench_store

    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = bench_store.synthetic_tokenizer(os.path.join(scratch, "tokenizer.model"))
        store = bench_store.synthetic_store(os.path.join(scratch, "store"), gigabytes, tokenizer)
        for count in workers:
            record = pipeline_plan(tokenizer, count).record
            figures = bench_store.measure_in_new_process(record, store, steps)
            yield {"num_workers": count, "cpus": os.cpu_count(), "store_gb": gigabytes, **figures}
