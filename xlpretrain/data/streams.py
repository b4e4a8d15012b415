"""Example streams: what one objective's rows are made of, and which streams a step draws.

The data layer's own vocabulary. An objective declares a `StreamSpec`; the run turns its
schedule into `Phase`s. Nothing here knows about configs, objectives or models, so the input
pipeline never reaches up into the training code.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from xlpretrain.data.batch import field_shapes
from xlpretrain.data.masking import BERT_CORRUPTION, Corruption, check_corruption

MONO = "mono"  # rows of monolingual segments
PARALLEL = "parallel"  # rows of translation pairs `<s> a </s></s> b </s>`
SEGMENT_PAIRS = "segment_pairs"  # VECO: (x, y) as two segments, from parallel or mono data
STREAM_KINDS = (MONO, PARALLEL, SEGMENT_PAIRS)


def max_predictions(max_length: int, mask_rate: float) -> int:
    """Static number of prediction slots per row: masking never selects more than this."""
    return max(1, math.ceil(mask_rate * max_length))


def max_placeholders(max_length: int, ratio: float) -> int:
    """Static placeholder slots per row: ⌈ratio·L⌉ plus room for per-unit rounding up."""
    return max_predictions(max_length, ratio) + 8


@dataclasses.dataclass(frozen=True)
class StreamSpec:
    """How one objective's rows are built."""

    kind: str  # one of STREAM_KINDS
    mask_rate: float  # SEGMENT_PAIRS: the rate of bilingual rows
    placeholder_ratio: float = 0.0  # > 0: BTMLM placeholders after each monolingual unit
    target_languages: tuple[str, ...] = ()  # placeholder languages; empty: all of the run's
    tag_format: str = ""  # e.g. "<{lang}>": tag tokens before the placeholders; "": none
    mono_fraction: float = 0.0  # SEGMENT_PAIRS: share of rows from adjacent monolingual lines
    mono_mask_rate: float = 0.15  # SEGMENT_PAIRS: the rate of monolingual rows
    max_length: int = 0  # this stream's row length (0 until a run resolves it)
    corruption: Corruption = BERT_CORRUPTION  # predicted tokens: (<mask>, random, kept) shares
    # False: rows carry no masked tokens whatever the mask rates and `data.anneal` say (a
    # contrastive objective reads clean sentences).
    masked: bool = True
    max_units: int = 0  # SEGMENT_PAIRS: at most this many pairs a row (0: as many as fit)

    def __post_init__(self) -> None:
        if self.kind not in STREAM_KINDS:
            raise ValueError(f"stream kind {self.kind!r}: expected one of {STREAM_KINDS}")
        if self.max_units and self.kind != SEGMENT_PAIRS:
            raise ValueError(f"max_units={self.max_units}: only {SEGMENT_PAIRS} rows count pairs")
        check_corruption(self.corruption)

    def at_length(self, max_length: int) -> StreamSpec:
        """This stream with rows of `max_length` tokens."""
        return dataclasses.replace(self, max_length=max_length)

    def sources(self) -> set[str]:
        """The corpora (MONO, PARALLEL) this stream reads."""
        if self.kind != SEGMENT_PAIRS:
            return {self.kind}
        return {
            k
            for k, used in ((MONO, self.mono_fraction > 0), (PARALLEL, self.mono_fraction < 1))
            if used
        }

    @property
    def prediction_slots(self) -> int:
        """Prediction slots per row: room for the highest mask rate the stream's rows use (one
        empty slot for unmasked rows)."""
        rates = [self.mask_rate] + ([self.mono_mask_rate] if self.mono_fraction > 0 else [])
        return max_predictions(self._length(), max(rates) if self.masked else 0.0)

    @property
    def placeholder_slots(self) -> int:
        """BTMLM placeholder slots per row; 0 for a stream without placeholders."""
        if self.placeholder_ratio <= 0:
            return 0
        return max_placeholders(self._length(), self.placeholder_ratio)

    def batch_shapes(self, rows: int) -> dict[str, tuple[tuple[int, ...], type]]:
        """(shape, dtype) of every field of a batch of `rows` rows of this stream: what the
        pipeline builds, the benchmark synthesises and ahead-of-time compiling assumes."""
        return field_shapes(rows, self._length(), self.prediction_slots, self.placeholder_slots)

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
