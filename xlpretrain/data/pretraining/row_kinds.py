"""The shipped row kinds (`streams.RowKind`): what the objectives' rows are made of.

`Segments` (MMLM, MRTD): monolingual segments. `PlaceholderSegments` (BTMLM): segments each
followed by placeholders for its back-translation. `TranslationPairs` (TLM, CAMLM, TRTD):
`<s> a </s></s> b </s>`. `SegmentPairs` (VECO, xlco): (x, y) as two segments of one pair, from
parallel or adjacent monolingual lines. Each builds its rows with `examples`' functions and fakes
them for the benchmark with `synthetic`'s; its options are its fields.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from xlpretrain.data.pretraining import synthetic
from xlpretrain.data.pretraining.batch import PLACEHOLDER_FIELDS, SIDE_PLACEHOLDER, Batch
from xlpretrain.data.pretraining.examples import (
    Placeholders,
    monolingual_row,
    monolingual_segment_pairs_row,
    parallel_segment_pairs_row,
    translation_pair_row,
)
from xlpretrain.data.pretraining.streams import (
    MONO,
    PARALLEL,
    FieldShapes,
    Lines,
    RowKind,
    StreamSpec,
    max_predictions,
)


@dataclasses.dataclass(frozen=True)
class Segments(RowKind):
    """Segments `<s> line </s>` of consecutive lines of one language."""

    def sources(self) -> frozenset[str]:
        return frozenset({MONO})

    def row(self, lines: Lines, stream: StreamSpec, rng: np.random.Generator) -> tuple[str, Batch]:
        return MONO, lines.monolingual(monolingual_row, rng, stream.max_length)


@dataclasses.dataclass(frozen=True)
class TranslationPairs(RowKind):
    """Units `<s> a </s></s> b </s>` of consecutive aligned lines of one language pair."""

    def sources(self) -> frozenset[str]:
        return frozenset({PARALLEL})

    def row(self, lines: Lines, stream: StreamSpec, rng: np.random.Generator) -> tuple[str, Batch]:
        unmasked = lines.parallel(
            translation_pair_row,
            rng,
            stream.max_length,
            reset_positions=lines.reset_positions,
        )
        return PARALLEL, unmasked


@dataclasses.dataclass(frozen=True)
class SegmentPairs(RowKind):
    """Units of two segments `<s> x </s>` `<s> y </s>` of one pair: a sentence and its
    translation, or (a `mono_fraction` of the rows) two adjacent lines of one language."""

    mono_fraction: float = 0.0  # the share of rows from adjacent monolingual lines
    max_units: int = 0  # at most this many pairs a row (0: as many as fit)

    def __post_init__(self) -> None:
        if not 0.0 <= self.mono_fraction <= 1.0:
            raise ValueError(f"mono_fraction={self.mono_fraction}: expected a share in [0, 1]")
        if self.max_units < 0:
            raise ValueError(f"max_units={self.max_units}: expected >= 0 (0: as many as fit)")

    def sources(self) -> frozenset[str]:
        used = ((MONO, self.mono_fraction > 0), (PARALLEL, self.mono_fraction < 1))
        return frozenset(source for source, reads in used if reads)

    def row(self, lines: Lines, stream: StreamSpec, rng: np.random.Generator) -> tuple[str, Batch]:
        units = {"max_units": self.max_units}
        if rng.random() < self.mono_fraction:  # drawn for every row, whatever the share
            return MONO, lines.monolingual(
                monolingual_segment_pairs_row, rng, stream.max_length, **units
            )
        return PARALLEL, lines.parallel(parallel_segment_pairs_row, rng, stream.max_length, **units)

    def synthesise(
        self, rows: int, stream: StreamSpec, vocab_size: int, rng: np.random.Generator
    ) -> Batch:
        """x and y of one pair in each row, masked at the rate of the stream's bilingual rows
        (of its monolingual rows where it has no bilingual rate)."""
        length = stream.max_length
        batch = synthetic.two_segments(
            synthetic.one_segment(rows, length, vocab_size, rng), vocab_size
        )
        rate = stream.mask_rates.get(PARALLEL, stream.mask_rates.get(MONO, 0.0))
        count = max_predictions(length, rate) if stream.masked else 0
        return synthetic.predicted(batch, count, stream.prediction_slots, vocab_size, rng)


@dataclasses.dataclass(frozen=True)
class PlaceholderSegments(RowKind):
    """ERNIE-M BTMLM's rows: segments `<s> x </s>` of one language, each followed by
    ⌈ratio·|x|⌉ `<mask>` placeholders in a target language (`examples.Placeholders`), with the
    fields BTMLM's two passes read: the unmasked source ids and the placeholder slots."""

    ratio: float  # placeholders per source token
    target_languages: tuple[str, ...] = ()  # placeholder languages; empty: all of the run's
    tag_format: str = ""  # e.g. "<{lang}>": tag tokens before the placeholders; "": none

    def __post_init__(self) -> None:
        if self.ratio <= 0:
            raise ValueError(f"ratio={self.ratio}: expected placeholders per token > 0")

    def sources(self) -> frozenset[str]:
        return frozenset({MONO})

    def slots(self, length: int) -> int:
        """Placeholder slots per row of `length` tokens: ⌈ratio·L⌉ and room for rounding each
        unit's count up."""
        return max_predictions(length, self.ratio) + 8

    def bind(self, name: str, stream: StreamSpec, lines: Lines) -> PlaceholderRows:
        """Its placeholders in the run: the target languages' ids and tag tokens."""
        targets = list(self.target_languages) or list(lines.languages)
        unknown = sorted(set(targets) - set(lines.languages))
        if unknown:
            raise ValueError(f"{name}: target languages {unknown} are not languages of the run")
        if len(set(targets)) < 2:
            # Every source language needs a target other than itself.
            lonely = [lang for lang in lines.monolingual_languages if set(targets) <= {lang}]
            if lonely:
                raise ValueError(f"{name}: no target language other than {lonely[0]!r}")
        tags = None
        if self.tag_format:
            tags = {
                lines.languages.index(t): lines.tokenizer.encode(self.tag_format.format(lang=t))
                for t in targets
            }
        target_ids = tuple(lines.languages.index(t) for t in targets)
        slots = self.slots(stream.max_length)
        return PlaceholderRows(Placeholders(self.ratio, target_ids, slots, tags))

    def extra_shapes(self, rows: int, stream: StreamSpec) -> FieldShapes:
        slots = self.slots(stream.max_length)
        shapes = {"source_ids": ((rows, stream.max_length), np.int32)}
        return {**shapes, **{n: ((rows, slots), d) for n, d in PLACEHOLDER_FIELDS.items()}}

    def synthesise(
        self, rows: int, stream: StreamSpec, vocab_size: int, rng: np.random.Generator
    ) -> Batch:
        """One full segment a row and as many placeholders after it as fit."""
        length = stream.max_length
        source = int((length - 2) / (1 + self.ratio))
        count = min(math.ceil(self.ratio * source), length - source - 2)
        batch = synthetic.one_segment(rows, source + 2, vocab_size, rng)
        rate = stream.mask_rates.get(MONO, 0.0)
        predicted = max_predictions(source + 2, rate) if stream.masked else 0
        batch = synthetic.predicted(batch, predicted, stream.prediction_slots, vocab_size, rng)
        return synthetic.with_placeholders(batch, length, count, self.slots(length), vocab_size)


@dataclasses.dataclass(frozen=True)
class PlaceholderRows:
    """`PlaceholderSegments` bound to a run (`RowKind.bind`)."""

    placeholders: Placeholders

    def row(self, lines: Lines, stream: StreamSpec, rng: np.random.Generator) -> tuple[str, Batch]:
        unmasked = lines.monolingual(
            monolingual_row, rng, stream.max_length, placeholders=self.placeholders
        )
        return MONO, {**unmasked, **placeholder_fields(unmasked, self.placeholders.max_per_row)}


def placeholder_fields(unmasked: Batch, slots: int) -> Batch:
    """BTMLM pass 1 reads the unmasked source (`source_ids`) and decodes at the placeholder
    slots; pass 2 writes its pseudo tokens back at the same positions."""
    found = np.flatnonzero(unmasked["side"] == SIDE_PLACEHOLDER)
    positions = np.zeros(slots, np.int32)
    positions[: len(found)] = found
    weights = np.zeros(slots, np.float32)
    weights[: len(found)] = 1.0
    return {
        "source_ids": unmasked["input_ids"].copy(),
        "placeholder_positions": positions,
        "placeholder_weights": weights,
    }
