"""`python -m xlpretrain.bench --store_gb 1,4,16`: does training from a prepared store start
and run in constant time and memory whatever the corpus size?

For each size it writes (once, into `--workdir`) a synthetic store of that many GB of token
ids: 100 languages of Zipf-sized shares, documents of 50–400 Zipf-distributed ids over the
config's vocabulary, 64 MB shards, in the format `xlpretrain.data.prepare` writes (prepare's
own speed is tokenization's). Then, in a fresh process per size so that nothing is shared, it
times the run plan's input pipeline as training runs it (`--config.data.store`): start-up (open
the store, build the rows' sampler, deliver the first batch), resident memory after start-up
and after the timed steps, and row tokens per second.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time
from typing import TYPE_CHECKING

import numpy as np

from xlpretrain.core import programs
from xlpretrain.data.corpora import store as store_lib
from xlpretrain.data.pretraining.streams import MONO

if TYPE_CHECKING:  # the measuring process imports the training stack, this module does not
    from xlpretrain.training.plan import RunPlan
    from xlpretrain.training.record import ConfigRecord

LANGUAGES = 100
SHARD_BYTES = 64 << 20
MIN_DOC, MAX_DOC = 50, 400


def synthetic_store(path: str, gigabytes: float, tokenizer_path: str, seed: int = 0) -> str:
    """A store of about `gigabytes` GB of int32 token ids (kept if already complete)."""
    from xlpretrain.data.tokenizer import Tokenizer

    if os.path.isfile(os.path.join(path, store_lib.MANIFEST)):
        return path
    os.makedirs(path, exist_ok=True)
    tokenizer = Tokenizer.load(tokenizer_path)
    vocab = tokenizer.vocab_size
    rng = np.random.default_rng(seed)
    shares = 1.0 / np.arange(1, LANGUAGES + 1) ** 1.1
    shares /= shares.sum()
    manifest = {
        "format": store_lib.FORMAT,
        "tokenizer": {"sha256": store_lib.fingerprint(tokenizer_path), "vocab_size": vocab},
        MONO: {},
    }
    for lang_index, share in enumerate(shares):
        lang = f"l{lang_index:03d}"
        budget, shard, shards = max(int(share * gigabytes * 2**30), 4 * MAX_DOC), 0, []
        while budget > 0:  # every shard holds at least one document, so this ends
            name = f"{MONO}/{lang}/{shard:05d}.array_record"
            os.makedirs(os.path.dirname(os.path.join(path, name)), exist_ok=True)
            size = min(SHARD_BYTES, budget) // 4  # ids in this shard, about
            lengths = rng.integers(MIN_DOC, MAX_DOC, size=size // MIN_DOC + 1)
            lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), size)) + 1]
            ids = (5 + rng.zipf(1.2, size=int(lengths.sum())) % (vocab - 5)).astype(np.int32)
            documents = [(d,) for d in np.split(ids, np.cumsum(lengths)[:-1])]
            written = store_lib.write_shard(os.path.join(path, name), documents)
            lines, tokens = len(lengths), int(lengths.sum())
            shards.append({"path": name, "lines": lines, "tokens": tokens, **written})
            budget -= 4 * tokens
            shard += 1
        manifest[MONO][lang] = {
            "shards": shards,
            "lines": sum(s["lines"] for s in shards),
            "tokens": sum(s["tokens"] for s in shards),
            "skipped": {},
        }
    tokenizer.save(os.path.join(path, tokenizer.FILE))
    store_lib.write_manifest(path, manifest)
    return path


def synthetic_tokenizer(path: str, vocab_size: int = 2002, seed: int = 0) -> str:
    """A SentencePiece model of `vocab_size` ids, trained on random syllables: a synthetic
    store's ids need only a tokenizer of the right size (its fingerprint, its special ids)."""
    from xlpretrain.data.tokenizer import train_tokenizer

    rng = np.random.default_rng(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]
    words = ["".join(rng.choice(syllables, rng.integers(1, 4))) for _ in range(5_000)]
    lines = [" ".join(rng.choice(words, 12)) for _ in range(3_000)]
    train_tokenizer({"xx": lines}, path, vocab_size, seed=seed)
    return path


def resident_mb() -> float:
    """This process's resident memory now (Linux), in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def measure(record: ConfigRecord, store: str, steps: int) -> dict:
    """Start-up, memory and row tokens/s of the pipeline on `store` (run in a fresh process):
    `record` is the run's plan's (`RunPlan.record`), resolved here into the same plan, which
    reads `store` in place of its corpus's."""
    from xlpretrain.data.corpora import corpus as corpus_lib
    from xlpretrain.data.pretraining.pipeline import iterators
    from xlpretrain.data.tokenizer import Tokenizer
    from xlpretrain.training.plan import resolve_record

    programs.quiet_libraries()
    plan = resolve_record(record)
    plan = dataclasses.replace(plan, corpus=dataclasses.replace(plan.corpus, store=store))
    before = resident_mb()
    start = time.perf_counter()
    corpus = corpus_lib.load_corpus(plan.corpus, plan.sources())
    tokenizer = Tokenizer.load(store_lib.tokenizer_path(store))
    dataset = plan.pipeline.dataset(plan.batch_builder(corpus, tokenizer), steps + 1)
    with iterators(dataset) as new_iterator:
        iterator = new_iterator()
        next(iterator)
        startup = time.perf_counter() - start
        after_startup = resident_mb()
        slots, begin = 0, time.perf_counter()
        for _ in range(steps):
            slots += sum(rows["segment_ids"].size for rows in next(iterator).values())
        seconds = time.perf_counter() - begin
    return {
        "startup_s": startup,
        "rss_before_mb": before,
        "rss_startup_mb": after_startup,
        "rss_end_mb": resident_mb(),
        "tokens_per_s": slots / seconds,
        "documents": sum(corpus.mono.num_lines(lang) for lang in corpus.mono.languages),
    }


def _measure_into(queue, record: ConfigRecord, store: str, steps: int) -> None:
    from absl import flags

    if not flags.FLAGS.is_parsed():  # grain reads its flags in every process
        flags.FLAGS(["bench_store"])
    try:
        queue.put(measure(record, store, steps))
    except Exception as error:  # reported by the parent, which owns the output
        queue.put(f"{type(error).__name__}: {error}")


def store_benchmark(plan: RunPlan, sizes: list[float], workdir: str, steps: int) -> list[dict]:
    """One row per store size: its bytes on disk and `measure`'s figures; the stores' ids are
    those of the plan's tokenizer (`tokenizer.path`)."""
    results = []
    for gigabytes in sizes:
        path = synthetic_store(
            os.path.join(workdir, f"store_{gigabytes:g}gb"), gigabytes, plan.corpus.tokenizer_path
        )
        disk = sum(
            os.path.getsize(os.path.join(root, name))
            for root, _, names in os.walk(path)
            for name in names
        )
        figures = measure_in_new_process(plan.record, path, steps)
        results.append({"store_gb": gigabytes, "disk_gb": disk / 2**30, **figures})
    return results


def measure_in_new_process(record: ConfigRecord, store: str, steps: int) -> dict:
    """`measure` in a process of its own (so start-up and memory are its own), not a daemonic
    pool worker: grain's workers are its children. It gets the plan's record, as a plan holds
    functions, which do not pass between processes."""
    context = multiprocessing.get_context("spawn")
    results_queue = context.Queue()
    process = context.Process(target=_measure_into, args=(results_queue, record, store, steps))
    process.start()
    figures = results_queue.get()
    process.join()
    if isinstance(figures, str):
        raise RuntimeError(f"measuring {store} failed: {figures}")
    return figures


def format_rows(results: list[dict]) -> list[str]:
    lines = [
        f"{'store':>8} {'on disk':>8} {'documents':>12} {'start-up':>9} "
        f"{'RSS start':>10} {'RSS end':>9} {'tokens/s':>12}"
    ]
    for r in results:
        lines.append(
            f"{r['store_gb']:>6g}GB {r['disk_gb']:>6.1f}GB {r['documents']:>12,} "
            f"{r['startup_s']:>8.2f}s {r['rss_startup_mb']:>8.0f}MB {r['rss_end_mb']:>7.0f}MB "
            f"{r['tokens_per_s']:>12,.0f}"
        )
    return lines
