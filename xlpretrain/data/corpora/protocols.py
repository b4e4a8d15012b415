"""What the input pipeline, evaluation and the tools need of a corpus, whatever stores it.

A backend — folders of text (`folders.MonolingualSource`, `folders.ParallelSource`), TFDS
datasets (`tfds_source`), or a prepared store (`store`) — implements one of these two
protocols, usually by deriving from `sources.MonolingualBase` / `sources.ParallelBase`, which
supply the keys, the bookkeeping and `tokens` by encoding the text: a text backend then only
adds how to `line` an example; a store of token ids also says how to read them (`tokens`,
`token_pair`) without a tokenizer. Readers are typed with the protocols and never see the
backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import numpy as np

from xlpretrain.data.corpora.sources import FileStats, Pair
from xlpretrain.data.tokenizer import Tokenizer


@runtime_checkable
class MonolingualCorpus(Protocol):
    """Documents by language; a line is one example's text."""

    stats: Mapping[str, FileStats]  # what was scanned per language, skipped lines included

    @property
    def languages(self) -> list[str]: ...

    def num_lines(self, lang: str) -> int: ...

    def line(self, lang: str, index: int) -> str: ...

    def tokens(self, lang: str, index: int, tokenizer: Tokenizer) -> np.ndarray: ...

    def summary(self) -> list[str]: ...


@runtime_checkable
class ParallelCorpus(Protocol):
    """Aligned pairs by language pair; a line is one example's two texts."""

    stats: Mapping[Pair, FileStats]

    @property
    def pairs(self) -> list[Pair]: ...

    @property
    def languages(self) -> list[str]: ...

    def num_lines(self, pair: Pair) -> int: ...

    def line(self, pair: Pair, index: int) -> tuple[str, str]: ...

    def token_pair(
        self, pair: Pair, index: int, tokenizer: Tokenizer
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def summary(self) -> list[str]: ...
