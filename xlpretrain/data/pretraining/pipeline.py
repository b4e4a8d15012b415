"""The grain input pipeline: step index → this process's share of that step's global batch.

Determinism by construction: row `r` of objective `o`'s batch at step `k` is built from an RNG
seeded by `(seed, o, k, r)` alone, so the global batch of step k depends only on the seed and
the config — not on the number of devices, processes or workers — and each process builds only
its own rows. The dataset is a random-access `grain.MapDataset` over step indices; its
iterator state (the next step) is checkpointed with the model, so a resumed run sees exactly
the stream an uninterrupted run would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import signal
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence

import grain
import grain.python
import numpy as np

from xlpretrain.data.corpora.protocols import MonolingualCorpus, ParallelCorpus
from xlpretrain.data.pretraining.anneal import Anneal
from xlpretrain.data.pretraining.batch import Batch, stack_rows
from xlpretrain.data.pretraining.masking import mask_row, unmasked_row
from xlpretrain.data.pretraining.sampling import language_probabilities
from xlpretrain.data.pretraining.streams import (
    MONO,
    PARALLEL,
    Phase,
    RowBuilder,
    StreamSpec,
    phase_index,
)
from xlpretrain.data.tokenizer import Tokenizer


@dataclasses.dataclass
class Corpus:
    """The run's sources and its language vocabulary (index = `lang_ids` value)."""

    mono: MonolingualCorpus | None
    parallel: ParallelCorpus | None
    languages: list[str]

    def lang_id(self, language: str) -> int:
        return self.languages.index(language)


def language_vocabulary(
    mono: MonolingualCorpus | None, parallel: ParallelCorpus | None
) -> list[str]:
    """All languages of the run, sorted, so `lang_ids` are stable for a given corpus."""
    languages = set(mono.languages if mono else []) | set(parallel.languages if parallel else [])
    return sorted(languages)


class StepBatchBuilder(grain.transforms.Map):
    """Builds, for one step index, `{stream: Batch}` for the streams of that step's phase:
    this process's share of each one's global rows (rows `process_rows(...)` of them), at the
    phase's row length. A row is its stream's kind's (`streams.RowKind`), built from the lines
    this samples, then masked at the rate of the corpus it read."""

    def __init__(
        self,
        corpus: Corpus,
        tokenizer: Tokenizer,
        phases: Sequence[Phase],
        *,
        seed: int,
        mono_alpha: float,
        parallel_alpha: float,
        pack: bool,
        reset_positions: bool,
        process_index: int = 0,
        process_count: int = 1,
        anneal: Anneal | None = None,
    ):
        self.corpus = corpus
        self.tokenizer = tokenizer
        self.anneal = anneal  # α, mask rates and languages by step, where given
        self._alpha = {MONO: mono_alpha, PARALLEL: parallel_alpha}
        self.seed = seed
        self.pack = pack
        self.reset_positions = reset_positions
        self.phases = sorted(phases, key=lambda p: p.start_step)
        # This process's rows of each phase's streams; a step builds only its phase's.
        self.rows = [
            {n: process_rows(rows, process_index, process_count, n) for n, rows in p.rows.items()}
            for p in self.phases
        ]
        every = [(name, spec) for p in self.phases for name, spec in p.streams.items()]
        sources = set().union(*(spec.sources() for _, spec in every))

        def readers(source: str) -> str:
            return ", ".join(sorted({n for n, spec in every if source in spec.sources()}))

        # By corpus kind: lines per language (pair), and its languages' sampling order and
        # probabilities; empty for a kind no stream reads.
        self._counts: dict[str, dict] = {}
        probabilities: dict[str, dict] = {MONO: {}, PARALLEL: {}}
        for source, lines, what in (
            (MONO, corpus.mono, "monolingual"),
            (PARALLEL, corpus.parallel, "parallel"),
        ):
            if source not in sources:
                continue
            if lines is None:
                raise ValueError(f"{readers(source)} need {what} data, but the corpus has none")
            keys = lines.languages if source == MONO else lines.pairs
            self._counts[source] = {key: lines.num_lines(key) for key in keys}
            probabilities[source] = language_probabilities(
                self._counts[source], self._alpha[source]
            )
        self._keys = {source: list(p) for source, p in probabilities.items()}
        self._p = {source: np.array(list(p.values())) for source, p in probabilities.items()}
        self.mono_probabilities: dict[str, float] = probabilities[MONO]  # by language
        self.parallel_probabilities: dict[tuple[str, str], float] = probabilities[PARALLEL]
        self._special_ids = tokenizer.special_ids()
        self._builders: list[dict[str, RowBuilder]] = [  # per phase: its row lengths
            {
                name: spec.kind.bind(name, spec, _LinesAt(self, p.start_step))
                for name, spec in p.streams.items()
            }
            for p in self.phases
        ]

    def _probabilities(self, source: str, step: int) -> np.ndarray:
        """The languages' (pairs') sampling probabilities at logged step `step`: α's constant
        ones, or those of α annealed to that step."""
        alpha_key = f"{source}_alpha"
        count_key = "mono_languages" if source == MONO else "parallel_pairs"
        if self.anneal is None or not {alpha_key, count_key} & set(self.anneal.points):
            return self._p[source]
        counts = self._counts[source]
        alpha = self._alpha[source]
        if alpha_key in self.anneal:
            alpha = self.anneal.value(alpha_key, step)
        top = len(counts)
        if count_key in self.anneal:
            top = int(self.anneal.value(count_key, step))
        return _probabilities_at(tuple(counts.values()), alpha, top)

    def _rate(self, source: str, rate: float, step: int) -> float:
        """The mask rate of a row from corpus `source` at `step`: annealed, or `rate`."""
        key = f"{source}_mask_rate"
        return self.anneal.value(key, step) if self.anneal and key in self.anneal else rate

    def _row(self, name: str, spec: StreamSpec, builder: RowBuilder, step: int, row: int) -> Batch:
        stream_id = zlib.crc32(name.encode())  # adding an objective leaves others' streams alone
        rng = np.random.default_rng([self.seed, stream_id, step, row])
        logged = step + 1  # the schedule is by logged step
        source, unmasked = builder.row(_LinesAt(self, logged), spec, rng)
        if not spec.masked:
            return unmasked_row(unmasked, spec.prediction_slots)
        return mask_row(
            unmasked,
            rng,
            rate=self._rate(source, spec.mask_rates[source], logged),
            num_slots=spec.prediction_slots,
            special_ids=self._special_ids,
            mask_id=self.tokenizer.mask_id,
            vocab_size=self.tokenizer.vocab_size,
            corruption=spec.corruption,
            stream=name,
        )

    def map(self, step: int) -> dict[str, Batch]:
        """The batches of dataset index `step`, i.e. of logged step `step + 1`."""
        step = int(step)
        phase = phase_index(self.phases, step + 1)
        streams, builders = self.phases[phase].streams, self._builders[phase]
        return {
            name: stack_rows(
                [self._row(name, streams[name], builders[name], step, r) for r in range(*span)]
            )
            for name, span in self.rows[phase].items()
        }


@dataclasses.dataclass(frozen=True)
class _LinesAt:
    """The run's lines at logged step `step`, as row kinds read them (`streams.Lines`)."""

    run: StepBatchBuilder
    step: int

    @property
    def tokenizer(self) -> Tokenizer:
        return self.run.tokenizer

    @property
    def languages(self) -> list[str]:
        return self.run.corpus.languages

    @property
    def monolingual_languages(self) -> list[str]:
        return self.run._keys[MONO]

    @property
    def reset_positions(self) -> bool:
        return self.run.reset_positions

    def monolingual(self, build, rng: np.random.Generator, length: int, **options) -> Batch:
        """A row of one language drawn by the α-sampling probabilities at this step."""
        corpus = self.run.corpus
        lang = self._draw(MONO, self.run._keys[MONO], rng)
        return self._build(build, corpus.mono, lang, corpus.lang_id(lang), rng, length, options)

    def parallel(self, build, rng: np.random.Generator, length: int, **options) -> Batch:
        """A row of one language pair drawn by the α-sampling probabilities at this step."""
        corpus = self.run.corpus
        pair = self._draw(PARALLEL, self.run._keys[PARALLEL], rng)
        ids = (corpus.lang_id(pair[0]), corpus.lang_id(pair[1]))
        return self._build(build, corpus.parallel, pair, ids, rng, length, options)

    def _draw(self, source: str, keys: list, rng: np.random.Generator):
        return keys[rng.choice(len(keys), p=self.run._probabilities(source, self.step))]

    def _build(self, build, lines, key, ids, rng, length: int, options: dict) -> Batch:
        """`build` (an `examples` row builder) on the drawn language or pair's lines."""
        run = self.run
        return build(lines, run.tokenizer, key, ids, rng, length=length, pack=run.pack, **options)


@functools.lru_cache(maxsize=64)
def _probabilities_at(counts: tuple[int, ...], alpha: float, top: int) -> np.ndarray:
    """α-sampling probabilities over the `top` largest counts (ties: the earlier), 0 for the
    rest."""
    chosen = sorted(np.argsort(-np.array(counts), kind="stable")[:top].tolist())
    p = np.zeros(len(counts))
    p[chosen] = list(language_probabilities({i: counts[i] for i in chosen}, alpha).values())
    return p


def process_rows(
    batch_size: int, process_index: int, process_count: int, stream: str = ""
) -> tuple[int, int]:
    """The contiguous rows of the global batch that one process builds and feeds."""
    if batch_size % process_count:
        raise ValueError(
            f"{stream or 'a stream'}: {batch_size} rows per step are not divisible by the "
            f"{process_count} processes"
        )
    share = batch_size // process_count
    return process_index * share, (process_index + 1) * share


def make_dataset(
    builder: Callable[[int], Mapping[str, Batch]],
    num_steps: int,
    *,
    num_workers: int,
    prefetch: int,
) -> grain.IterDataset:
    """Steps `0 … num_steps-1` of `builder` (a `StepBatchBuilder`, or any picklable function of
    the step alone) as an iterable dataset; resume by restoring its iterator state."""
    dataset = grain.MapDataset.range(num_steps).map(builder)
    iterable = dataset.to_iter_dataset(
        grain.ReadOptions(
            num_threads=1 if num_workers else 2, prefetch_buffer_size=max(prefetch, 1)
        )
    )
    if num_workers:
        iterable = iterable.mp_prefetch(
            grain.MultiprocessingOptions(num_workers=num_workers, per_worker_buffer_size=prefetch),
            worker_init_fn=_ignore_ctrl_c,
        )
    return iterable


def _ignore_ctrl_c(worker_index: int, worker_count: int) -> None:
    """A worker process ignores Ctrl-C, which a terminal sends to every process of the job: the
    main process decides what it means (`xlpretrain.training.preemption`) and stops the workers with
    `close_iterator`, which frees the batches in flight; a worker killed by it mid-batch would
    leave that batch's shared memory behind."""
    del worker_index, worker_count
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def close_iterator(iterator: grain.DatasetIterator) -> None:
    """Stops `iterator`'s grain worker processes and prefetch threads and frees the batches they
    hold in shared memory, now rather than at interpreter exit, where each batch still alive is
    a "leaked shared_memory objects" warning of the resource tracker.

    `close()` alone is not enough with worker processes: when a worker's share of the steps
    runs out, grain (0.2.18) keeps the StopIteration, and with its traceback the frame of the
    prefetch thread that holds that worker's last batch, in a reference cycle that only the
    cycle collector frees (one way into google/grain#1031). Collecting here, while the
    interpreter is whole, lets each batch unlink its shared memory.

    Those unlinks run on a one-thread pool of grain's (`SharedMemoryArray.enable_async_del(1)`),
    which multiprocessing terminates at exit with whatever is still queued, so this waits for
    them: a task given to that first-in, first-out thread now runs after them all."""
    iterator.close()
    gc.collect()
    unlinks = getattr(grain.python.SharedMemoryArray, "_del_thread_pool", None)  # not public
    if unlinks is not None:
        unlinks.apply(int)


@contextlib.contextmanager
def iterators(dataset: grain.IterDataset) -> Iterator[Callable[[], grain.DatasetIterator]]:
    """Yields `new()`, a fresh iterator over `dataset` that replaces (and closes) the one it
    gave before; the last one is closed when the block ends, however it ends."""
    current: list[grain.DatasetIterator] = []

    def new() -> grain.DatasetIterator:
        while current:
            close_iterator(current.pop())
        current.append(iter(dataset))
        return current[-1]

    try:
        yield new
    finally:
        while current:
            close_iterator(current.pop())
