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
import math
import time

import jax
import numpy as np

from xlpretrain import objectives as objectives_lib
from xlpretrain.data import corpus as corpus_lib
from xlpretrain.data.batch import (
    PREDICTION_FIELDS,
    SIDE_PLACEHOLDER,
    SIDE_TARGET,
    TOKEN_FIELDS,
    Batch,
)
from xlpretrain.data.examples import FIRST_POSITION, PAD_POSITION
from xlpretrain.data.masking import regular_ids
from xlpretrain.data.pipeline import iterators
from xlpretrain.data.streams import SEGMENT_PAIRS, StreamSpec, max_predictions
from xlpretrain.data.tokenizer import SentencePieceTokenizer
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
    """Full rows `<s> … </s>` of regular ids at the stream's row length, `mask_rate` of them
    predicted (none for an unmasked stream; followed by BTMLM placeholders when the stream has
    them); every field has the shape the pipeline gives it (`StreamSpec.batch_shapes`). A
    step's time does not depend on which ids it reads, so the special ids are those of a
    SentencePiece vocabulary of `vocab_size` ids, whatever tokenizer the run has."""
    if stream.placeholder_ratio > 0:
        return _with_placeholders(rows, stream, vocab_size, rng)
    special = SentencePieceTokenizer.layout(vocab_size)
    bos, eos = special.bos, special.eos
    length = stream.max_length
    batch = {name: np.zeros((rows, length), dtype) for name, dtype in TOKEN_FIELDS.items()}
    specials = np.unique(special.all())
    draws = rng.integers(0, vocab_size - len(specials), (rows, length))
    batch["input_ids"] = regular_ids(draws, specials).astype(np.int32)
    batch["input_ids"][:, 0], batch["input_ids"][:, -1] = bos, eos
    batch["positions"][:] = FIRST_POSITION + np.arange(length)
    batch["segment_ids"][:] = batch["pair_ids"][:] = 1
    if stream.kind == SEGMENT_PAIRS:  # VECO: x and y, two segments of one pair
        half = length // 2
        batch["input_ids"][:, half - 1], batch["input_ids"][:, half] = eos, bos
        batch["positions"][:, half:] = FIRST_POSITION + np.arange(length - half)
        batch["segment_ids"][:, half:] = 2
        batch["side"][:, half:] = SIDE_TARGET
    regular = np.flatnonzero(~np.isin(batch["input_ids"][0], [bos, eos]))
    masked = max_predictions(length, stream.mask_rate) if stream.masked else 0
    chosen = rng.permuted(np.tile(regular, (rows, 1)), axis=1)
    chosen = np.sort(chosen[:, :masked], axis=1).astype(np.int32)
    np.put_along_axis(batch["is_masked"], chosen, 1, axis=1)
    labels = np.take_along_axis(batch["input_ids"], chosen, axis=1)
    np.put_along_axis(batch["labels"], chosen, labels, axis=1)
    batch["label_weights"] = batch["is_masked"].astype(np.float32)
    for name, value in (("pred_positions", chosen), ("pred_labels", labels), ("pred_weights", 1)):
        batch[name] = np.zeros((rows, stream.prediction_slots), PREDICTION_FIELDS[name])
        batch[name][:, :masked] = value
    return batch


def _with_placeholders(
    rows: int, stream: StreamSpec, vocab_size: int, rng: np.random.Generator
) -> Batch:
    length, ratio = stream.max_length, stream.placeholder_ratio
    source = int((length - 2) / (1 + ratio))
    count = min(math.ceil(ratio * source), length - source - 2)
    plain = dataclasses.replace(stream, placeholder_ratio=0.0, max_length=source + 2)
    batch = synthetic_batch(rows, plain, vocab_size, rng)
    extra_slots = stream.prediction_slots - plain.prediction_slots
    for name in TOKEN_FIELDS:
        batch[name] = np.pad(batch[name], ((0, 0), (0, length - source - 2)))
    for name in PREDICTION_FIELDS:
        batch[name] = np.pad(batch[name], ((0, 0), (0, extra_slots)))
    tail = slice(source + 2, source + 2 + count)
    special = SentencePieceTokenizer.layout(vocab_size)  # as `synthetic_batch`'s
    batch["input_ids"][:, source + 2 :] = special.pad
    batch["input_ids"][:, tail] = special.mask
    batch["positions"][:, source + 2 :] = PAD_POSITION
    batch["positions"][:, tail] = FIRST_POSITION + np.arange(source + 2, source + 2 + count)
    batch["segment_ids"][:, tail] = batch["pair_ids"][:, tail] = 1
    batch["side"][:, tail] = SIDE_PLACEHOLDER
    batch["source_ids"] = batch["input_ids"].copy()
    batch["placeholder_positions"] = np.zeros((rows, stream.placeholder_slots), np.int32)
    batch["placeholder_positions"][:, :count] = np.arange(source + 2, source + 2 + count)
    batch["placeholder_weights"] = np.zeros((rows, stream.placeholder_slots), np.float32)
    batch["placeholder_weights"][:, :count] = 1.0
    return batch


def pipeline_benchmark(plan: RunPlan, steps: int, workdir: str) -> dict:
    """The input pipeline alone, as the training loop runs it (corpus → tokenize → sample →
    mask → pack → grain with `data.num_workers` and `data.prefetch`): row slots per second,
    comparable with the step's tokens/s, and the share of slots holding real tokens."""
    corpus = corpus_lib.load_corpus(plan.corpus, plan.sources())
    tokenizer = corpus_lib.load_tokenizer(plan.corpus, workdir, corpus, plan.model.vocab_size)
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


def benchmark(plan: RunPlan, steps: int, warmup: int, peak_tflops: float = 0.0) -> dict:
    """The timed step of the plan's last stage (a staged run's every objective) on 8
    languages, its vocabulary the tokenizer's where `model.vocab_size` is 0."""
    plan = plan.sized(workdir=None)
    last = len(plan.stages) - 1
    active = plan.stage_objectives(last)
    model, init_params = objectives_lib.build_model(
        plan.model_config(num_languages=8), plan.objectives, plan.contexts
    )
    training = setup_training(plan, model, init_params, plan.mesh.make())
    step_fn = training.step_fns[last]
    rng = np.random.default_rng(0)
    streams = plan.stage_streams[last]
    shapes = {  # (global rows, length) per objective
        name: (rows, streams[name].max_length) for name, rows in plan.stages[last].rows.items()
    }
    local = {
        name: synthetic_batch(
            shapes[name][0] // jax.process_count(), streams[name], plan.model.vocab_size, rng
        )
        for name in active
    }
    batch = global_batch(local, training.batch_sharding)
    state = training.state
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
