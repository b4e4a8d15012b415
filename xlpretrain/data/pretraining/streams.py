"""Example streams: what one objective's rows are made of, and which streams a step draws.

The data layer's own vocabulary. An objective declares a `StreamSpec`: its row kind (a
`RowKind`, with the kind's own options), the mask rate of the rows it draws from each corpus,
and how predicted tokens are corrupted; the run turns its schedule into `Phase`s. The input
pipeline, the run plan and the benchmark ask a stream's kind what they need of it and never
branch on which kind it is (`tests/test_row_kinds.py`), so a new kind is a declaration, not an
edit of theirs. Nothing here knows about configs, objectives or models, so the input pipeline
never reaches up into the training code.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np

from xlpretrain.data.pretraining import synthetic
from xlpretrain.data.pretraining.anneal import Anneal
from xlpretrain.data.pretraining.batch import Batch, field_shapes
from xlpretrain.data.pretraining.masking import BERT_CORRUPTION, Corruption, check_corruption
from xlpretrain.data.tokenizer import Tokenizer

MONO = "mono"  # the monolingual corpus: documents by language
PARALLEL = "parallel"  # the parallel corpus: aligned pairs by language pair
SOURCES = (MONO, PARALLEL)  # the corpora a row is drawn from; `data.anneal` keys by them
FieldShapes = dict[str, tuple[tuple[int, ...], type]]


def max_predictions(max_length: int, mask_rate: float) -> int:
    """Static number of prediction slots per row: masking never selects more than this."""
    return max(1, math.ceil(mask_rate * max_length))


class Lines(Protocol):
    """The run's corpora as a row kind reads them, at one row's step: `monolingual` and
    `parallel` draw a language (pair) by the run's sampling probabilities at that step and
    build the row from it, with the run's tokenizer and packing."""

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def languages(self) -> Sequence[str]: ...  # the run's; a language's id is its index

    @property
    def monolingual_languages(self) -> Sequence[str]: ...  # the monolingual corpus's

    @property
    def reset_positions(self) -> bool: ...  # TLM's second sentence restarts its positions

    def monolingual(
        self, build: Callable[..., Batch], rng: np.random.Generator, length: int, **options
    ) -> Batch:
        """`build(corpus, tokenizer, language, lang_id, rng, length=, pack=, **options)`."""

    def parallel(
        self, build: Callable[..., Batch], rng: np.random.Generator, length: int, **options
    ) -> Batch:
        """`build(corpus, tokenizer, pair, lang_ids, rng, length=, pack=, **options)`."""


class RowBuilder(Protocol):
    """Builds one unmasked row of a stream from the run's lines: the corpus it read (one of
    `SOURCES`, whose mask rate the pipeline masks it at) and the row, with any fields beyond
    the token fields that its kind declares (`RowKind.extra_shapes`)."""

    def row(
        self, lines: Lines, stream: StreamSpec, rng: np.random.Generator
    ) -> tuple[str, Batch]: ...


class RowKind(abc.ABC):
    """What a stream's rows are made of: a frozen dataclass deriving from this, whose fields
    are the kind's options, declared by the objective whose stream it is
    (`data.pretraining.row_kinds` holds the shipped ones).

    A kind says which corpora its rows read (`sources`) and builds one unmasked row (`row`,
    which a kind defines unless `bind` returns another builder); the pipeline masks it. A kind
    that needs more of the run than its lines (BTMLM's target language ids and tag tokens)
    resolves it once per phase in `bind`. It may add fields to its rows (`extra_shapes`), and
    says how the benchmark fakes a batch of them (`synthesise`; by default full rows of one
    segment)."""

    @abc.abstractmethod
    def sources(self) -> frozenset[str]:
        """The corpora (of `SOURCES`) its rows read."""

    def bind(self, name: str, stream: StreamSpec, lines: Lines) -> RowBuilder:
        """The builder of stream `name`'s rows in the run whose lines are `lines` (a
        `ValueError` for options the run cannot honour): this kind itself by default."""
        return self

    def extra_shapes(self, rows: int, stream: StreamSpec) -> FieldShapes:
        """(shape, dtype) of the fields its rows carry beyond the Batch contract's."""
        return {}

    def synthesise(
        self, rows: int, stream: StreamSpec, vocab_size: int, rng: np.random.Generator
    ) -> Batch:
        """A batch of `rows` full rows for the benchmark, as many tokens predicted as the
        stream has prediction slots (none for an unmasked stream)."""
        batch = synthetic.one_segment(rows, stream.max_length, vocab_size, rng)
        count = stream.prediction_slots if stream.masked else 0
        return synthetic.predicted(batch, count, stream.prediction_slots, vocab_size, rng)


@dataclasses.dataclass(frozen=True)
class StreamSpec:
    """How one objective's rows are built: by its `kind`, each row masked at the rate of the
    corpus it was drawn from (`mask_rates`; none: the rows carry no masked tokens whatever
    `data.anneal` says, as a contrastive objective reads clean sentences)."""

    kind: RowKind
    mask_rates: Mapping[str, float]  # by corpus (`SOURCES`): every one the kind reads, or none
    max_length: int = 0  # this stream's row length (0 until a run resolves it)
    corruption: Corruption = BERT_CORRUPTION  # predicted tokens: (<mask>, random, kept) shares

    def __post_init__(self) -> None:
        if not isinstance(self.kind, RowKind):
            raise TypeError(f"stream kind {self.kind!r}: expected a RowKind")
        object.__setattr__(self, "mask_rates", dict(self.mask_rates))
        unknown = sorted(set(self.mask_rates) - set(SOURCES))
        if unknown:
            raise ValueError(f"mask rates of {unknown}: rows are drawn from {SOURCES}")
        missing = sorted(self.kind.sources() - set(self.mask_rates))
        if self.masked and missing:
            raise ValueError(f"{self.kind}: no mask rate for its rows from {missing}")
        check_corruption(self.corruption)

    @property
    def masked(self) -> bool:
        return bool(self.mask_rates)

    def at_length(self, max_length: int) -> StreamSpec:
        """This stream with rows of `max_length` tokens."""
        return dataclasses.replace(self, max_length=max_length)

    def sized_for(self, anneal: Anneal, first: int, last: int) -> StreamSpec:
        """This stream with the highest mask rate its rows from each corpus reach from logged
        step `first` to `last` (a stage) or after training (held-out rows), where `anneal`
        gives that corpus's rate, so its prediction slots hold any of those steps' (a row's
        rate at its step comes from the schedule, not from these fields)."""

        def highest(source: str, rate: float) -> float:
            key = f"{source}_mask_rate"
            if key not in anneal:
                return rate
            return max(anneal.maximum(key, first, last), anneal.points[key][1][-1])

        rates = {source: highest(source, rate) for source, rate in self.mask_rates.items()}
        return dataclasses.replace(self, mask_rates=rates)

    def sources(self) -> set[str]:
        """The corpora (MONO, PARALLEL) this stream reads."""
        return set(self.kind.sources())

    @property
    def prediction_slots(self) -> int:
        """Prediction slots per row: room for the highest mask rate the stream's rows use (one
        empty slot for unmasked rows)."""
        return max_predictions(self._length(), max(self.mask_rates.values(), default=0.0))

    def batch_shapes(self, rows: int) -> FieldShapes:
        """(shape, dtype) of every field of a batch of `rows` rows of this stream: what the
        pipeline builds, the benchmark synthesises and ahead-of-time compiling assumes."""
        shapes = field_shapes(rows, self._length(), self.prediction_slots)
        return {**shapes, **self.kind.extra_shapes(rows, self)}

    def _length(self) -> int:
        if self.max_length <= 0:
            raise ValueError(f"{self.kind} stream: its row length is not resolved (max_length=0)")
        return self.max_length


@dataclasses.dataclass(frozen=True)
class Phase:
    """From logged step `start_step` on (the first phase starts at 0), each step draws
    `rows[name]` global rows of stream `name`, built as `streams[name]` says (its row length
    among them), and no other stream."""

    start_step: int
    rows: Mapping[str, int]
    streams: Mapping[str, StreamSpec]

    def __post_init__(self) -> None:
        if set(self.rows) != set(self.streams):
            raise ValueError(
                f"phase at step {self.start_step}: rows of {sorted(self.rows)} but streams "
                f"{sorted(self.streams)}"
            )
        unresolved = sorted(n for n, spec in self.streams.items() if spec.max_length <= 0)
        if unresolved:
            raise ValueError(f"streams {unresolved} have no row length (StreamSpec.at_length)")


def phase_index(phases: Sequence[Phase], step: int) -> int:
    """The phase (of `phases`, in start order) that logged step `step` (1-based) belongs to."""
    return max(i for i, p in enumerate(phases) if p.start_step <= step)
