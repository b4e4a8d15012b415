"""A fixed, seeded share of a corpus's lines held out for evaluation, the rest for training.

A run that evaluates on its own corpus needs lines it never trains on, as transformers'
`run_mlm` carves a validation split out of the training file. Lines are chosen by position:
every key (language or language pair) is cut into blocks of `BLOCK` lines, and in each block
the same seeded offsets are held out. Which part a line belongs to, and which line is a part's
i-th, are then arithmetic: O(`BLOCK`) memory per key whatever the corpus size, nothing written
to disk, and the same split for text folders, TFDS datasets and prepared stores, since each is
read through the corpus protocols (`xlpretrain.data.corpora.protocols`).

A key too small to spare a line for training keeps all its lines for training (it has no
held-out part); a key whose held-out part is empty is not evaluated.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping
from typing import Generic, TypeVar

import numpy as np

from xlpretrain.data.corpora.protocols import MonolingualCorpus, ParallelCorpus
from xlpretrain.data.corpora.sources import FileStats, Pair
from xlpretrain.data.tokenizer import Tokenizer

BLOCK = 1000  # lines per block: a share is a whole number of thousandths
DEFAULT_FRACTION = 0.05  # eval.held_out_fraction's default, as transformers' run_mlm holds out
K = TypeVar("K", str, Pair)


@dataclasses.dataclass(frozen=True)
class LineSplit:
    """Which lines of each key are held out: `fraction` of every block, chosen by `seed`."""

    fraction: float
    seed: int

    def __post_init__(self):
        if not is_share(self.fraction):
            raise ValueError(
                f"a held-out share must be a multiple of {1 / BLOCK} in (0, 1), "
                f"got {self.fraction!r}"
            )

    @property
    def per_block(self) -> int:
        return int(round(self.fraction * BLOCK))

    def offsets(self, key: str | Pair, num_lines: int) -> tuple[np.ndarray, np.ndarray]:
        """(held-out, training) offsets within a block of `key`'s lines, each sorted; no
        held-out offset when holding them out would leave the key no training line."""
        name = key if isinstance(key, str) else "-".join(key)
        rng = np.random.default_rng([self.seed, zlib.crc32(name.encode())])
        held = np.sort(rng.choice(BLOCK, self.per_block, replace=False))
        kept = np.setdiff1d(np.arange(BLOCK), held)
        if _count(kept, num_lines) == 0:
            return np.zeros(0, np.int64), np.arange(BLOCK)
        return held, kept


def is_share(fraction: float) -> bool:
    """Whether `fraction` is a share the blocks can hold out exactly: k / `BLOCK`, 0 < k <
    `BLOCK`."""
    per_block = round(fraction * BLOCK)
    return 1 <= per_block < BLOCK and abs(per_block - fraction * BLOCK) < 1e-6


def _count(offsets: np.ndarray, num_lines: int) -> int:
    """How many of `num_lines` lines fall on `offsets` of their block."""
    blocks, tail = divmod(num_lines, BLOCK)
    return blocks * len(offsets) + int(np.searchsorted(offsets, tail))


class _Part(Generic[K]):
    """One part (held out or training) of a source's lines, read through the source."""

    def __init__(self, source, keys: list[K], split: LineSplit, held_out: bool):
        self.source = source
        self.split = split
        self.held_out = held_out
        self._offsets: dict[K, np.ndarray] = {}
        self._counts: dict[K, int] = {}
        for key in keys:
            n = source.num_lines(key)
            offsets = split.offsets(key, n)[0 if held_out else 1]
            if count := _count(offsets, n):
                self._offsets[key], self._counts[key] = offsets, count
        self.stats: Mapping[K, FileStats] = {k: source.stats[k] for k in self._counts}

    def num_lines(self, key: K) -> int:
        return self._counts[key]

    def original(self, key: K, index: int) -> int:
        """The source's line number of this part's line `index`."""
        offsets = self._offsets[key]
        block, within = divmod(int(index), len(offsets))
        return block * BLOCK + int(offsets[within])

    def summary(self) -> list[str]:
        return self.source.summary()


class MonolingualPart(_Part[str]):
    """A monolingual corpus's held-out or training lines (`MonolingualCorpus`)."""

    def __init__(self, source: MonolingualCorpus, split: LineSplit, held_out: bool):
        super().__init__(source, source.languages, split, held_out)

    @property
    def languages(self) -> list[str]:
        return list(self._counts)

    def line(self, lang: str, index: int) -> str:
        return self.source.line(lang, self.original(lang, index))

    def tokens(self, lang: str, index: int, tokenizer: Tokenizer) -> np.ndarray:
        return self.source.tokens(lang, self.original(lang, index), tokenizer)


class ParallelPart(_Part[Pair]):
    """A parallel corpus's held-out or training pairs (`ParallelCorpus`)."""

    def __init__(self, source: ParallelCorpus, split: LineSplit, held_out: bool):
        super().__init__(source, source.pairs, split, held_out)

    @property
    def pairs(self) -> list[Pair]:
        return list(self._counts)

    @property
    def languages(self) -> list[str]:
        return sorted({lang for pair in self._counts for lang in pair})

    def line(self, pair: Pair, index: int) -> tuple[str, str]:
        return self.source.line(pair, self.original(pair, index))

    def token_pair(
        self, pair: Pair, index: int, tokenizer: Tokenizer
    ) -> tuple[np.ndarray, np.ndarray]:
        return self.source.token_pair(pair, self.original(pair, index), tokenizer)
