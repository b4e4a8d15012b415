"""Turns corpus lines into packed, unmasked rows of the Batch contract.

A row holds one or more *units*: a monolingual segment `<s> x </s>` or a translation pair
`<s> a </s></s> b </s>`. Each unit gets its own `segment_ids`/`pair_ids` value, positions restart
at `FIRST_POSITION` for each unit (XLM-R's offset), and attention is confined to the unit by the
mask functions. A row draws consecutive lines of one language (or language pair), as XLM-R draws
each row from one language's stream.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable

import numpy as np

from xlpretrain.data.corpora.protocols import MonolingualCorpus, ParallelCorpus
from xlpretrain.data.pretraining.batch import (
    SIDE_PLACEHOLDER,
    SIDE_SOURCE,
    SIDE_TAG,
    SIDE_TARGET,
    TOKEN_FIELDS,
    Batch,
)
from xlpretrain.data.tokenizer import Tokenizer

# Positions are the pipeline's own numbering, whatever the tokenizer's ids: fairseq/XLM-R's, whose
# padding index is 1 (`ModelConfig.pad_token_id`), so padding is at 1 and a unit starts at 2.
PAD_POSITION = 1
FIRST_POSITION = PAD_POSITION + 1
MIN_SEGMENT_TOKENS = 2  # stop packing when a new unit could hold fewer real tokens than this


def empty_row(length: int, pad_id: int) -> Batch:
    """A row of padding: the tokenizer's `pad_id`, at `PAD_POSITION`."""
    row = {name: np.zeros(length, dtype) for name, dtype in TOKEN_FIELDS.items()}
    row["input_ids"][:] = pad_id
    row["positions"][:] = PAD_POSITION
    return row


@dataclasses.dataclass
class RowPacker:
    """Appends units to a fixed-length row, numbering them 1, 2, …"""

    length: int
    pad_id: int

    def __post_init__(self) -> None:
        self.row = empty_row(self.length, self.pad_id)
        self.cursor = 0
        self.units = 0
        self.segments = 0

    @property
    def remaining(self) -> int:
        return self.length - self.cursor

    def add(
        self,
        ids: np.ndarray,
        positions: np.ndarray,
        side: np.ndarray,
        lang: np.ndarray,
        *,
        same_pair: bool = False,
    ):
        """Adds a segment; `same_pair` makes it the second sequence of the previous unit
        (its own segment, the same `pair_ids`), as VECO's (x, y) pairs are laid out."""
        n = len(ids)
        assert n <= self.remaining, (n, self.remaining)
        self.units += 0 if same_pair else 1
        self.segments += 1
        span = slice(self.cursor, self.cursor + n)
        self.row["input_ids"][span] = ids
        self.row["positions"][span] = positions
        self.row["side"][span] = side
        self.row["lang_ids"][span] = lang
        self.row["segment_ids"][span] = self.segments
        self.row["pair_ids"][span] = self.units
        self.cursor += n


def _window(tokens: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """A random contiguous window, so long documents are seen beyond their first tokens."""
    if len(tokens) <= size:
        return tokens
    start = rng.integers(0, len(tokens) - size + 1)
    return tokens[start : start + size]


@dataclasses.dataclass(frozen=True)
class Placeholders:
    """ERNIE-M BTMLM: each unit `<s> x </s>` is followed by ⌈ratio·|x|⌉ `<mask>` placeholders
    whose positions continue after the source and whose language is a target language — given
    by `lang_ids` (for language embeddings) and, if `tags` is set, by that language's tag tokens
    placed before the placeholders."""

    ratio: float
    target_lang_ids: tuple[int, ...]  # candidates; the unit's own language is never chosen
    max_per_row: int  # static slot count of `placeholder_positions`
    tags: dict[int, np.ndarray] | None = None  # lang id -> tag token ids

    def count(self, source_tokens: int) -> int:
        return math.ceil(self.ratio * source_tokens)

    def fit(self, remaining: int, slots_left: int) -> int:
        """The most source tokens whose unit (specials, tag and placeholders) fits."""
        tag = max((len(t) for t in self.tags.values()), default=0) if self.tags else 0
        n = int((remaining - 2 - tag) / (1 + self.ratio))
        while n > 0 and (n + 2 + tag + self.count(n) > remaining or self.count(n) > slots_left):
            n -= 1
        return n


def monolingual_row(
    source: MonolingualCorpus,
    tokenizer: Tokenizer,
    language: str,
    lang_id: int,
    rng: np.random.Generator,
    *,
    length: int,
    pack: bool,
    placeholders: Placeholders | None = None,
) -> Batch:
    """Segments `<s> line </s>` from consecutive lines of `language`, starting at a random line
    (each followed by its placeholders when `placeholders` is given)."""
    packer = RowPacker(length, tokenizer.pad_id)
    n_lines = source.num_lines(language)
    index = int(rng.integers(n_lines))
    slots_left = placeholders.max_per_row if placeholders else 0
    for taken in range(n_lines):
        if placeholders:
            budget = placeholders.fit(packer.remaining, slots_left)
        else:
            budget = packer.remaining - 2
        if budget < MIN_SEGMENT_TOKENS:
            break
        tokens = source.tokens(language, (index + taken) % n_lines, tokenizer)
        tokens = _window(tokens, budget, rng) if packer.units == 0 else tokens[:budget]
        ids = np.concatenate([[tokenizer.bos_id], tokens, [tokenizer.eos_id]])
        side = np.full(len(ids), SIDE_SOURCE)
        lang = np.full(len(ids), lang_id)
        if placeholders:
            k = placeholders.count(len(tokens))
            slots_left -= k
            targets = [t for t in placeholders.target_lang_ids if t != lang_id]
            target = targets[rng.integers(len(targets))]
            tag = placeholders.tags[target] if placeholders.tags else np.zeros(0, np.int32)
            ids = np.concatenate([ids, tag, np.full(k, tokenizer.mask_id)])
            side = np.concatenate([side, np.full(len(tag), SIDE_TAG), np.full(k, SIDE_PLACEHOLDER)])
            lang = np.concatenate([lang, np.full(len(tag) + k, target)])
        packer.add(ids, FIRST_POSITION + np.arange(len(ids)), side, lang)
        if not pack:
            break
    return packer.row


def _fit_pair(a: np.ndarray, b: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """Truncates the longer side first, so a short sentence survives whole beside a long one."""
    a_len = min(len(a), max(budget - len(b), (budget + 1) // 2))
    return a[:a_len], b[: budget - a_len]


# A unit's two sentences and their language ids: (x, y, lang_x, lang_y).
_SentencePair = tuple[np.ndarray, np.ndarray, int, int]


def _sentence_pair_row(
    draw: Callable[[int], _SentencePair],
    add_unit: Callable[[RowPacker, np.ndarray, np.ndarray, int, int], None],
    pad_id: int,
    *,
    length: int,
    pack: bool,
    max_draws: int | None = None,
    max_units: int = 0,
) -> Batch:
    """Units of two sentences and 4 special tokens, `draw(i)` the i-th, laid out by `add_unit`:
    the one packing rule of TLM and VECO rows. A first unit too long for the row is cut
    (`_fit_pair`), a later one ends the row; at most `max_draws` draws (None: no limit) and
    `max_units` units (0: as many as fit)."""
    packer = RowPacker(length, pad_id)
    for taken in itertools.count() if max_draws is None else range(max_draws):
        if max_units and packer.units == max_units:
            break
        budget = packer.remaining - 4
        if budget < 2 * MIN_SEGMENT_TOKENS:
            break
        x, y, first_lang, second_lang = draw(taken)
        if len(x) + len(y) > budget:
            if packer.units > 0:
                break
            x, y = _fit_pair(x, y, budget)
        add_unit(packer, x, y, first_lang, second_lang)
        if not pack:
            break
    return packer.row


def _aligned_pair_draw(
    source: ParallelCorpus,
    tokenizer: Tokenizer,
    pair: tuple[str, str],
    lang_ids: tuple[int, int],
    rng: np.random.Generator,
) -> Callable[[int], _SentencePair]:
    """Consecutive aligned lines from a random one, each in a random order, so that both
    languages appear as the first sentence."""
    n_lines = source.num_lines(pair)
    index = int(rng.integers(n_lines))

    def draw(taken: int) -> _SentencePair:
        first, second = source.token_pair(pair, (index + taken) % n_lines, tokenizer)
        if rng.random() < 0.5:
            return second, first, lang_ids[1], lang_ids[0]
        return first, second, lang_ids[0], lang_ids[1]

    return draw


def translation_pair_row(
    source: ParallelCorpus,
    tokenizer: Tokenizer,
    pair: tuple[str, str],
    lang_ids: tuple[int, int],
    rng: np.random.Generator,
    *,
    length: int,
    pack: bool,
    reset_positions: bool,
) -> Batch:
    """TLM units `<s> a </s></s> b </s>` from consecutive aligned lines of one language pair.

    Each unit's direction is drawn at random, so both languages appear as the first sentence.
    `reset_positions` restarts positions for the second sentence (XLM); XLM-R/InfoXLM keep them
    continuous.
    """

    def add_unit(packer: RowPacker, a: np.ndarray, b: np.ndarray, lang_a: int, lang_b: int) -> None:
        side_a = np.concatenate([[tokenizer.bos_id], a, [tokenizer.eos_id]])
        side_b = np.concatenate([[tokenizer.eos_id], b, [tokenizer.eos_id]])
        ids = np.concatenate([side_a, side_b])
        positions_a = FIRST_POSITION + np.arange(len(side_a))
        start_b = FIRST_POSITION if reset_positions else positions_a[-1] + 1
        positions = np.concatenate([positions_a, start_b + np.arange(len(side_b))])
        side = np.concatenate(
            [np.full(len(side_a), SIDE_SOURCE), np.full(len(side_b), SIDE_TARGET)]
        )
        lang = np.concatenate([np.full(len(side_a), lang_a), np.full(len(side_b), lang_b)])
        packer.add(ids, positions, side, lang)

    draw = _aligned_pair_draw(source, tokenizer, pair, lang_ids, rng)
    return _sentence_pair_row(
        draw,
        add_unit,
        tokenizer.pad_id,
        length=length,
        pack=pack,
        max_draws=source.num_lines(pair),
    )


def _segment_pair_row(
    draw: Callable[[int], _SentencePair],
    tokenizer: Tokenizer,
    *,
    length: int,
    pack: bool,
    max_units: int = 0,
) -> Batch:
    """Units of two segments `<s> x </s>` (side 0) and `<s> y </s>` (side 1), each with its
    own positions from 2, sharing `pair_ids`; `draw(i)` gives the i-th; at most `max_units`
    units (0: as many as fit)."""

    def add_unit(packer: RowPacker, x: np.ndarray, y: np.ndarray, lang_x: int, lang_y: int) -> None:
        for i, (tokens, lang) in enumerate(((x, lang_x), (y, lang_y))):
            ids = np.concatenate([[tokenizer.bos_id], tokens, [tokenizer.eos_id]])
            packer.add(
                ids,
                FIRST_POSITION + np.arange(len(ids)),
                np.full(len(ids), SIDE_TARGET if i else SIDE_SOURCE),
                np.full(len(ids), lang),
                same_pair=bool(i),
            )

    return _sentence_pair_row(
        draw, add_unit, tokenizer.pad_id, length=length, pack=pack, max_units=max_units
    )


def parallel_segment_pairs_row(
    source: ParallelCorpus,
    tokenizer: Tokenizer,
    pair: tuple[str, str],
    lang_ids: tuple[int, int],
    rng: np.random.Generator,
    *,
    length: int,
    pack: bool,
    max_units: int = 0,
) -> Batch:
    """VECO bilingual units: a sentence and its translation as two segments (random order)."""
    draw = _aligned_pair_draw(source, tokenizer, pair, lang_ids, rng)
    return _segment_pair_row(draw, tokenizer, length=length, pack=pack, max_units=max_units)


def monolingual_segment_pairs_row(
    source: MonolingualCorpus,
    tokenizer: Tokenizer,
    language: str,
    lang_id: int,
    rng: np.random.Generator,
    *,
    length: int,
    pack: bool,
    max_units: int = 0,
) -> Batch:
    """VECO monolingual units: two adjacent lines (segments) of one language's text."""
    n_lines = source.num_lines(language)
    if n_lines < 2:
        raise ValueError(f"language {language!r} has one usable line: no adjacent segments")
    index = int(rng.integers(n_lines - 1))

    def draw(taken: int) -> _SentencePair:
        first = (index + 2 * taken) % (n_lines - 1)  # never pairs the last line with the first
        x = source.tokens(language, first, tokenizer)
        return x, source.tokens(language, first + 1, tokenizer), lang_id, lang_id

    return _segment_pair_row(draw, tokenizer, length=length, pack=pack, max_units=max_units)
