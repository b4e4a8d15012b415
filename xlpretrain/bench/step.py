"""Training-step throughput of a run plan: its jitted step on synthetic full rows, tokens/s,
model FLOPs and MFU (`python -m xlpretrain.bench`), and the input pipeline alone.

Times the jitted step of the plan's model, objectives, batch and mesh on synthetic full rows
(no padding, the configured masking rate), so the number is the step's, not the input
pipeline's. Model FLOPs per step are counted analytically (formula printed with the result):

    6 · N_matmul · T                       dense weight matmuls, forward + backward
  + 12 · layers · hidden · L · T           attention scores and weighted values (fwd + bwd)
  + 6 · (hidden² + hidden · vocab) · P     LM head on the P predicted tokens only

with T tokens and P predictions per step, N_matmul the encoder's weight-matrix parameters
(embeddings excluded: they are gathers). Recomputation under remat is not counted, so MFU is
model FLOPs utilisation. Peak FLOP/s comes from a table of accelerators (dense bf16) or
`--peak_tflops`; on a CPU MFU is reported only when a peak is given.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from xlpretrain import objectives as objectives_lib
from xlpretrain.data.corpora import corpus as corpus_lib
from xlpretrain.data.corpora.run_tokenizer import load_tokenizer
from xlpretrain.data.pretraining.batch import Batch
from xlpretrain.data.pretraining.pipeline import iterators
from xlpretrain.data.pretraining.streams import StreamSpec
from xlpretrain.objectives.flops import FLOP_FORMULA, StepShape
from xlpretrain.parallel.sharding import global_batch
from xlpretrain.training.plan import RunPlan
from xlpretrain.training.step import setup_training

# Dense bf16 peak FLOP/s per chip, by `device_kind` prefix.
PEAK_TFLOPS = {
    "NVIDIA H200": 989.0,
    "NVIDIA H100": 989.0,
    "NVIDIA A100": 312.0,
    "TPU v4": 275.0,
    "TPU v5 lite": 197.0,
    "TPU v5e": 197.0,
    "TPU v5p": 459.0,
    "TPU v6": 918.0,
}


def synthetic_batch(
    rows: int, stream: StreamSpec, vocab_size: int, rng: np.random.Generator
) -> Batch:
    """Full rows of regular ids at the stream's row length, laid out as its kind lays out a row
    and predicted at its mask rate (`RowKind.synthesise`): every field has the shape the
    pipeline gives it (`StreamSpec.batch_shapes`), and no corpus is read."""
    return stream.kind.synthesise(rows, stream, vocab_size, rng)


def pipeline_benchmark(plan: RunPlan, steps: int, workdir: str) -> dict:
    """The input pipeline alone, as the training loop runs it (corpus → tokenize → sample →
    mask → pack → grain with `data.num_workers` and `data.prefetch`): row slots per second,
    comparable with the step's tokens/s, and the share of slots holding real tokens."""
    corpus = corpus_lib.load_corpus(plan.corpus, plan.sources())
    tokenizer = load_tokenizer(plan.corpus, workdir, corpus, plan.model.vocab_size)
    dataset = plan.pipeline.dataset(plan.batch_builder(corpus, tokenizer), steps + 1)
    with iterators(dataset) as new_iterator:
        iterator = new_iterator()
        next(iterator)  # start-up: workers, file opening, first packing
        slots = real = 0
        start = time.perf_counter()
        for _ in range(steps):
            for rows in next(iterator).values():
                slots += rows["segment_ids"].size
                real += int(np.count_nonzero(rows["segment_ids"]))
        seconds = time.perf_counter() - start
    return {
        "pipeline_tokens_per_s": slots * jax.process_count() / seconds,
        "pipeline_fill": real / max(slots, 1),
        "pipeline_step_s": seconds / steps,
        "num_workers": plan.pipeline.num_workers,
    }


def peak_flops(device: jax.Device, override_tflops: float) -> float | None:
    if override_tflops > 0:
        return override_tflops * 1e12
    for prefix, tflops in PEAK_TFLOPS.items():
        if device.device_kind.startswith(prefix):
            return tflops * 1e12
    return None


@dataclasses.dataclass
class StepInputs:
    """What timing a plan's step needs: its last stage's jitted step, the state and a global
    batch of synthetic rows, with what the FLOP count reads."""

    plan: RunPlan  # sized
    step_fn: Callable
    state: Any
    batch: Any
    shapes: dict[str, tuple[int, int]]  # (global rows, length) per objective
    local: dict[str, Batch]
    active: dict


def step_inputs(plan: RunPlan) -> StepInputs:
    """The plan's last stage (a staged run's every objective) on 8 languages, its vocabulary
    the tokenizer's where `model.vocab_size` is 0, set up for timing."""
    plan = plan.sized(workdir=None)
    last = len(plan.stages) - 1
    active = plan.stage_objectives(last)
    model, init_params = objectives_lib.build_model(
        plan.model_config(num_languages=8), plan.objectives, plan.contexts
    )
    training = setup_training(plan, model, init_params, plan.mesh.make())
    rng = np.random.default_rng(0)
    streams = plan.stage_streams[last]
    shapes = {
        name: (rows, streams[name].max_length) for name, rows in plan.stages[last].rows.items()
    }
    local = {
        name: synthetic_batch(
            shapes[name][0] // jax.process_count(), streams[name], plan.model.vocab_size, rng
        )
        for name in active
    }
    batch = global_batch(local, training.batch_sharding)
    return StepInputs(plan, training.step_fns[last], training.state, batch, shapes, local, active)


def benchmark(plan: RunPlan, steps: int, warmup: int, peak_tflops: float = 0.0) -> dict:
    """The timed step of the plan's last stage (a staged run's every objective) on 8
    languages, its vocabulary the tokenizer's where `model.vocab_size` is 0."""
    inputs = step_inputs(plan)
    plan, step_fn, batch, state = inputs.plan, inputs.step_fn, inputs.batch, inputs.state
    shapes, local, active = inputs.shapes, inputs.local, inputs.active
    streams = plan.stage_streams[len(plan.stages) - 1]
    compile_start = time.perf_counter()
    for _ in range(max(warmup, 1)):
        state, metrics = step_fn(state, batch)
    jax.block_until_ready(metrics)
    compile_and_warmup_s = time.perf_counter() - compile_start
    start = time.perf_counter()
    for _ in range(steps):
        state, metrics = step_fn(state, batch)
    jax.block_until_ready((state, metrics))
    step_s = (time.perf_counter() - start) / steps

    tokens = sum(rows * length for rows, length in shapes.values())
    flops = sum(
        active[n].flops(
            plan.contexts[n],
            streams[n],
            StepShape(
                tokens=shapes[n][0] * shapes[n][1],
                length=shapes[n][1],
                predictions=int(local[n]["pred_weights"].sum()) * jax.process_count(),
            ),
        )
        for n in active
    )
    device = jax.devices()[0]
    peak = peak_flops(device, peak_tflops)
    memory = device.memory_stats() or {}
    return {
        "config_objectives": sorted(active),
        "device": f"{jax.device_count()} x {device.device_kind}",
        "batch_size": sum(rows for rows, _ in shapes.values()),  # every objective's rows
        "max_length": max(length for _, length in shapes.values()),
        "dtype": plan.model.dtype,
        "steps": steps,
        "compile_and_warmup_s": round(compile_and_warmup_s, 3),
        "step_time_s": step_s,
        "steps_per_s": 1.0 / step_s,
        "tokens_per_s": tokens / step_s,
        "model_tflops_per_step": flops / 1e12,
        "achieved_tflops_per_s": flops / step_s / 1e12,
        "mfu": (flops / step_s / (peak * jax.device_count())) if peak else None,
        "peak_tflops_per_device": peak / 1e12 if peak else None,
        "flop_formula": FLOP_FORMULA,
        "peak_memory_gib": memory.get("peak_bytes_in_use", 0) / 2**30 or None,
        "final_loss": float(metrics["loss"]),
    }
