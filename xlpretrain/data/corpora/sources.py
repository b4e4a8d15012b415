"""What every corpus backend shares, so that none imports another: folders of text
(`folders`), TFDS datasets (`tfds_source`) and prepared stores (`store`) all raise `DataError`,
count skipped lines in `FileStats` (logged by `format_stats`), key parallel data by `Pair`, and
derive from `MonolingualBase` / `ParallelBase`, which hold the per-key indexes behind the
protocols of `protocols.py`.

Bad data is classified the same way by every backend, in this order of precedence (a line or
record counts under one kind only):
  too_long      more than `max_line_bytes` bytes (without the line end); never decoded
  invalid_utf8  not valid UTF-8
  empty         empty or whitespace only
  bad_fields    parallel data only: not exactly two fields, or a field that is empty or
                whitespace only
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

if TYPE_CHECKING:
    from xlpretrain.data.tokenizer import Tokenizer

__all__ = [
    "DataError",
    "FileStats",
    "MonolingualBase",
    "Pair",
    "ParallelBase",
    "classify",
    "format_stats",
    "parse_pair",
    "skip_counts",
]

Pair = tuple[str, str]
K = TypeVar("K")

# Problem kinds, in order of precedence.
KINDS = ("too_long", "invalid_utf8", "empty", "bad_fields")
_LABELS = {
    "too_long": "too long",
    "invalid_utf8": "invalid UTF-8",
    "empty": "empty",
    "bad_fields": "bad fields",
}
MAX_EXAMPLES = 5  # line (record) numbers kept per problem kind, for the log


class DataError(ValueError):
    """A corpus folder or file cannot be used; the message names the path (and line)."""


@dataclasses.dataclass
class FileStats:
    """What the load-time scan found in one file, for the training log."""

    path: str
    total: int
    used: int
    empty: int = 0
    invalid_utf8: int = 0
    too_long: int = 0
    bad_fields: int = 0
    # First few (at most 5) 1-based line numbers per problem kind with a nonzero count.
    examples: dict[str, list[int]] = dataclasses.field(default_factory=dict)

    @property
    def skipped(self) -> int:
        return self.total - self.used

    def problems(self) -> str:
        """E.g. '12 empty (lines 3, 8, 9, 10, 11, …), 1 invalid UTF-8 (line 7)'."""
        parts = []
        for kind in KINDS:
            count = getattr(self, kind)
            if count:
                lines = self.examples.get(kind, [])
                where = ", ".join(map(str, lines)) + (", …" if count > len(lines) else "")
                parts.append(f"{count} {_LABELS[kind]} (line{'s' * (count > 1)} {where})")
        return ", ".join(parts)

    def why_unusable(self) -> str:
        """Why a file with no usable line has none."""
        return self.problems() or "the file is empty"


def format_stats(stats: Mapping[Any, FileStats]) -> list[str]:
    """Log lines: one per file with skipped lines, then one total line.

    A file with no usable line is left out of its source (see `folders.MonolingualSource`).
    """
    out = []
    for s in stats.values():
        if not s.used:
            out.append(f"{s.path}: no usable lines, file left out ({s.why_unusable()})")
        elif s.skipped:
            out.append(f"{s.path}: skipped {s.skipped} of {s.total} lines: {s.problems()}")
    total = sum(s.total for s in stats.values())
    used = sum(s.used for s in stats.values())
    counts = [(sum(getattr(s, kind) for s in stats.values()), kind) for kind in KINDS]
    skipped = ", ".join(f"{n} {_LABELS[kind]}" for n, kind in counts if n) or "nothing"
    summary = f"{len(stats)} files: {used} of {total} lines used; skipped {skipped}"
    left_out = sum(not s.used for s in stats.values())
    if left_out:
        summary += f"; {left_out} file{'s' * (left_out > 1)} with no usable lines left out"
    out.append(summary)
    return out


def skip_counts() -> dict[str, int]:
    """Zero skipped lines of every problem kind, in the sources' order of precedence."""
    return dict.fromkeys(KINDS, 0)


def classify(texts: Sequence[bytes], max_line_bytes: int) -> str | None:
    """The problem kind of a record's texts (a document's one, a pair's two; None when usable),
    with the line rules' precedence: for records that are not lines (TFDS, JSON, Parquet)."""
    if sum(map(len, texts)) > max_line_bytes:
        return "too_long"
    try:
        blank = [not text.decode("utf-8").strip() for text in texts]
    except UnicodeDecodeError:
        return "invalid_utf8"
    if all(blank):
        return "empty"
    return "bad_fields" if any(blank) else None


def parse_pair(name: str, path: str | None = None) -> Pair:
    """'eng-deu' -> ('eng', 'deu').

    The rule: exactly one '-', between two non-empty codes. Codes with subtags therefore write
    them with '_' (`zh_Hant-eng.tsv`), as in the UDHR data (`cmn_hant`).
    """
    parts = name.split("-")
    if len(parts) != 2 or not all(parts):
        where = f" (file {path})" if path else ""
        raise DataError(
            f"cannot parse a language pair from {name!r}{where}: expected '<l1>-<l2>' with "
            "exactly one '-' (write subtags with '_', e.g. 'zh_Hant-eng')"
        )
    return parts[0], parts[1]


def as_pair(pair: Pair | str) -> Pair:
    """Accepts ('eng', 'deu'), ['eng', 'deu'] (as configs give them) or 'eng-deu'."""
    if isinstance(pair, str):
        return parse_pair(pair)
    if len(pair) != 2 or not all(isinstance(lang, str) for lang in pair):
        raise TypeError(f"a language pair is two language codes or 'l1-l2', not {pair!r}")
    return pair[0], pair[1]


def reject_string(names: Any, what: str) -> None:
    """A selection of languages (pairs) is a sequence: 'eng' would select 'e', 'n' and 'g'."""
    if isinstance(names, str):
        raise TypeError(f"{what} must be a sequence, not the string {names!r}")


class LineIndex(Protocol):
    """A backend's index of one key's usable lines (a file's, a TFDS split's, a store's)."""

    def __len__(self) -> int: ...

    def read(self, index: int) -> Any: ...


class _Source(Generic[K]):
    """Shared by every source: per-key line indexes and their scan statistics.

    `stats` covers every scanned file, also those left out for having no usable line.
    """

    _UNITS = ("files", "lines")  # what a key and an index are, for the repr

    def __init__(self, path: str, files: dict[K, LineIndex], stats: dict[K, FileStats]):
        self.path = path
        self._files = files
        self.stats = stats

    def num_lines(self, key: K) -> int:
        return len(self._file(key))

    def summary(self) -> list[str]:
        """Log lines about skipped data (see `format_stats`)."""
        return format_stats(self.stats)

    def _file(self, key: K) -> LineIndex:
        try:
            return self._files[key]
        except KeyError:
            raise KeyError(f"{key!r} is not in this source (from {self.path})") from None

    def __repr__(self) -> str:
        total = sum(len(f) for f in self._files.values())
        keys, lines = self._UNITS
        return f"{type(self).__name__}({len(self._files)} {keys}, {total} {lines}, {self.path})"


class MonolingualBase(_Source[str]):
    """A monolingual source of any backend: keyed by language."""

    @property
    def languages(self) -> list[str]:
        return list(self._files)

    def tokens(self, lang: str, index: int, tokenizer: Tokenizer) -> np.ndarray:
        """The line's token ids (a text backend encodes it; a prepared store has them)."""
        return tokenizer.encode(self.line(lang, index))


class ParallelBase(_Source[Pair]):
    """A parallel source of any backend: keyed by language pair."""

    @property
    def pairs(self) -> list[Pair]:
        return list(self._files)

    @property
    def languages(self) -> list[str]:
        return sorted({lang for pair in self._files for lang in pair})

    def token_pair(
        self, pair: Pair, index: int, tokenizer: Tokenizer
    ) -> tuple[np.ndarray, np.ndarray]:
        """The pair's token ids, side by side (a prepared store has them)."""
        first, second = self.line(pair, index)
        return tokenizer.encode(first), tokenizer.encode(second)
