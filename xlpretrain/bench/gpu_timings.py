"""What the GPU suite times on `configs/xlmr.py:base` and on the host, beside the kernel.

Each is a unit the suite runs in its own process (`gpu_suite.UNITS`), yielding records: the
training step (batch 32 × 512, bf16) per attention implementation, Hugging Face's step per
mode, the attention micro-benchmark at L = 512 and 2048, and the input pipeline per number of
grain workers on this host's CPUs (a 2-core CI machine cannot say whether one host feeds 8
GPUs). The shapes are here once: the suite runs them and the report names them.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Sequence

from xlpretrain.bench import attention as bench_attention
from xlpretrain.bench import peer as bench_peer
from xlpretrain.bench import step as bench
from xlpretrain.training import cli
from xlpretrain.training.plan import RunPlan, resolve

# The input pipeline on this host's CPUs: a synthetic store of PIPELINE_GB GB, MMLM rows of
# 512 tokens, 32 a step, PIPELINE_STEPS steps per `data.num_workers` in PIPELINE_WORKERS. The
# goal is 8 GPUs fed at 700 k tokens/s each: 5.6 M row tokens/s per host.
PIPELINE_GB, PIPELINE_STEPS, PIPELINE_WORKERS = 0.1, 200, (0, 4, 8)
PIPELINE_GOAL = 5.6e6
ATTENTION_IMPLS = ("pallas", "cudnn", "xla")
ATTENTION_LENGTHS = (512, 2048)
ATTENTION_MASKS = ("unmasked", "mmlm", "tlm", "camlm")


def xlmr_base(attention: str, flash_tiles: str = "") -> RunPlan:
    """The plan of ``configs/xlmr.py:base`` at the measured shape (32 × 512, bf16) with
    ``attention`` (cuDNN's has no dropout, so its run has no attention dropout)."""
    cfg = cli.load_config("xlmr:base")
    cfg.model.dtype = "bfloat16"
    cfg.data.batch_size, cfg.data.max_length = 32, 512
    cfg.model.attention, cfg.model.flash_tiles = attention, flash_tiles
    if attention == "cudnn":
        cfg.model.attention_dropout_rate = 0.0
    return resolve(cfg)


def step_throughput(attention: str, flash_tiles: str, steps: int, warmup: int) -> Iterator[dict]:
    plan = xlmr_base(attention, flash_tiles)
    result = bench.benchmark(plan, steps, warmup)
    yield {
        "attention": attention,
        "flash_tiles": flash_tiles,
        "attention_dropout_rate": plan.model.attention_dropout_rate,
        **result,
    }


def peer(mode: str, steps: int, warmup: int) -> Iterator[dict]:
    yield bench_peer.peer_benchmark(xlmr_base("xla"), steps, warmup, [mode])


def attention_timings(length: int) -> Iterator[dict]:
    model = xlmr_base("xla").model
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
    cfg = cli.load_config("demo")
    cfg.tokenizer.path = tokenizer
    cfg.data.batch_size, cfg.data.max_length = 32, 512
    cfg.objectives.tlm, cfg.eval.every_steps = 0.0, 0
    cfg.data.num_workers = num_workers
    return resolve(cfg)


def pipeline_workers(gigabytes: float, workers: Sequence[int], steps: int) -> Iterator[dict]:
    """Row tokens/s of the input pipeline on a synthetic prepared store, per number of grain
    worker processes: whether this host's CPUs feed its GPUs (a 2-core CI machine cannot say)."""
    from xlpretrain.bench import store as bench_store

    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = bench_store.synthetic_tokenizer(os.path.join(scratch, "tokenizer.model"))
        store = bench_store.synthetic_store(os.path.join(scratch, "store"), gigabytes, tokenizer)
        for count in workers:
            config = json.dumps(pipeline_plan(tokenizer, count).config)
            figures = bench_store.measure_in_new_process(config, store, steps)
            yield {"num_workers": count, "cpus": os.cpu_count(), "store_gb": gigabytes, **figures}
