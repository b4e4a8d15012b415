"""The folder backend: monolingual `<lang>.txt` and parallel `<l1>-<l2>.tsv` files, read by
random access.

The grain pipeline reads examples by (language, line index) from worker processes, so a source
is an index, not the text: each file is scanned once at load time into numpy arrays of byte
offsets and lengths of its usable lines, and a line is read by slicing a lazily opened
read-only mmap. Pickling a source copies only paths and these arrays; every process reopens
the files itself.

Bad data never crashes a run and is never dropped silently: every line is classified (the
kinds and their precedence are in `sources`), the counts (with the first few line numbers of
each problem) are kept per file in `FileStats` for the training log (`format_stats`), and
`strict=True` turns the first bad line into a `DataError` naming the file and line. A file
with no usable line (empty, or only bad lines) is left out of the source, so it is never
sampled, and reported as such; in strict mode, or when it was asked for by name, it is a
`DataError`. In a `.tsv` file, `bad_fields` is a line that is not exactly two tab-separated
fields, or has a blank one.

Files must not change while a run reads them: the index would no longer match, and reading a
truncated file through an mmap kills the process with SIGBUS. So every read first checks the
file's size and modification time (one `fstat`: a few µs, under 1% of building a batch), and
a process (re)opening a file checks that the path still leads to the file that was scanned;
any change is a `DataError` naming the file. A file removed or renamed over after it was
opened stays readable, and correct, in that process (the mapping keeps the scanned file alive).

Lines end with `\\n`; a `\\r` before it (`\\r\\n` files) is not part of the line, and a final
line without a line end counts as a line.
"""

from __future__ import annotations

import codecs
import mmap
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from typing import Any, BinaryIO, TypeVar

import numpy as np

from xlpretrain.data.corpora.sources import (
    KINDS,
    MAX_EXAMPLES,
    DataError,
    FileStats,
    MonolingualBase,
    Pair,
    ParallelBase,
    as_pair,
    parse_pair,
    reject_string,
    skip_counts,
)

__all__ = ["MonolingualSource", "ParallelSource", "pair_fields_ok", "usable_lines"]

K = TypeVar("K")

# A line's code while scanning: 0 if usable, else its problem kind's index in KINDS + 1.
_TOO_LONG, _INVALID_UTF8, _EMPTY, _BAD_FIELDS = range(1, len(KINDS) + 1)
_DESCRIPTIONS = {
    "too_long": "line longer than max_line_bytes={max_line_bytes}",
    "invalid_utf8": "invalid UTF-8",
    "empty": "empty or whitespace-only line",
    "bad_fields": "not exactly two non-empty tab-separated fields",
}

# Files are scanned in chunks of about this many bytes (cut at line ends), so that memory stays
# bounded on multi-GB corpora (the scan needs a few times a chunk's size).
_CHUNK_BYTES = 16 << 20
# The characters for which `str.isspace()` is true (a test checks this against Python), as a
# lookup table over the Basic Multilingual Plane.
_UNICODE_SPACES = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_IS_SPACE = np.zeros(0x10000, dtype=bool)
_IS_SPACE[[ord(c) for c in _UNICODE_SPACES]] = True


class _IndexedFile:
    """Usable lines of one file as byte ranges; reads them through a lazily opened mmap.

    `signature` is the file's (device, inode, size, mtime in ns) when it was scanned: the
    index is only valid for that file, unchanged.
    """

    def __init__(
        self,
        path: str,
        signature: tuple[int, int, int, int],
        offsets: np.ndarray,
        lengths: np.ndarray,
    ):
        self.path = path
        self.signature = signature
        self.offsets = offsets
        self.lengths = lengths
        # (open file, its mmap), set at once so that threads see both or neither.
        self._opened: tuple[BinaryIO, mmap.mmap] | None = None

    def __len__(self) -> int:
        return len(self.offsets)

    def __getstate__(self) -> dict[str, Any]:
        # An open file cannot (and must not) travel: each process opens its own.
        return {**self.__dict__, "_opened": None}

    def _open(self) -> tuple[BinaryIO, mmap.mmap]:
        """Opens the file by path, checking that it is still the file that was scanned."""
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            raise DataError(
                f"{self.path} was removed after it was indexed at start: restart the run to "
                "re-index the data"
            ) from None
        try:
            stat = os.fstat(f.fileno())
            if (stat.st_dev, stat.st_ino) != self.signature[:2]:
                raise DataError(
                    f"{self.path} was replaced by another file after it was indexed at start: "
                    "restart the run to re-index the data"
                )
            self._check(stat)
            return f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except BaseException:
            f.close()
            raise

    def _check(self, stat: os.stat_result) -> None:
        """Raises if the file's content may differ from the scanned one (before any read: a
        slice of an mmap past the end of a truncated file is a SIGBUS, not an exception)."""
        _, _, size, mtime_ns = self.signature
        if stat.st_mtime_ns != mtime_ns or stat.st_size != size:
            change = (
                f"{size} -> {stat.st_size} bytes"
                if stat.st_size != size
                else "same size, new modification time"
            )
            raise DataError(
                f"{self.path} was modified after it was indexed at start ({change}): its line "
                "index no longer matches; restart the run to re-index the data"
            )

    def read(self, index: int) -> str:
        if not 0 <= index < len(self.offsets):
            raise IndexError(f"line {index} out of range for {self.path} ({len(self)} lines)")
        if self._opened is None:
            self._opened = self._open()
        f, data = self._opened
        self._check(os.fstat(f.fileno()))
        start = int(self.offsets[index])
        return data[start : start + int(self.lengths[index])].decode("utf-8")


def _chunks(data: mmap.mmap | bytes, chunk_bytes: int) -> Iterator[tuple[int, int, bool]]:
    """Yields (start, end, is_one_long_line) byte ranges of whole lines, about `chunk_bytes` each.

    A line with no line end within a whole chunk comes alone, flagged: with `chunk_bytes` at
    least `max_line_bytes + 2` (room for a CR LF) it is too long, and is skipped unread.
    """
    pos, size = 0, len(data)
    while pos < size:
        limit = min(pos + chunk_bytes, size)
        end = size if limit == size else data.rfind(b"\n", pos, limit) + 1
        if end:
            yield pos, end, False
        else:
            newline = data.find(b"\n", limit)
            end = size if newline < 0 else newline + 1
            yield pos, end, True
        pos = end


class _Chunk:
    """A run of whole lines of a file as a byte array, with vectorised tests over byte ranges."""

    def __init__(self, raw: bytes):
        self.raw = raw
        self.data = np.frombuffer(raw, dtype=np.uint8)
        newlines = np.flatnonzero(self.data == ord("\n"))
        starts = np.concatenate(([0], newlines + 1))
        ends = np.concatenate((newlines, [len(raw)]))
        if starts[-1] == len(raw):  # the chunk ends with a line end: no partial final line
            starts, ends = starts[:-1], ends[:-1]
        has_cr = (ends > starts) & (self.data[np.maximum(ends - 1, 0)] == ord("\r"))
        self.starts = starts  # of each line
        self.ends = ends - has_cr  # of each line's text, without '\r\n' or '\n'

    def invalid_utf8(self) -> np.ndarray:
        """Which lines are not valid UTF-8.

        One decode when all is valid; otherwise decoding resumes after each bad line, which
        keeps it linear (a newline byte is never part of a multi-byte sequence).
        """
        invalid = np.zeros(len(self.starts), dtype=bool)
        if self.raw.isascii():
            return invalid
        view, pos = memoryview(self.raw), 0
        while True:
            try:
                codecs.utf_8_decode(view[pos:], "strict", True)
                return invalid
            except UnicodeDecodeError as error:
                line = int(np.searchsorted(self.starts, pos + error.start, side="right")) - 1
                invalid[line] = True
                if line + 1 == len(self.starts):
                    return invalid
                pos = int(self.starts[line + 1])

    def blank(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Whether each byte range is empty or whitespace only (by `str.isspace`).

        Vectorised on the first character: only ranges that start with whitespace are decoded.
        """
        lengths = ends - starts
        last = len(self.data) - 1
        b0, b1, b2 = (
            np.where(lengths > k, self.data[np.minimum(starts + k, last)], 0).astype(np.int32)
            for k in range(3)
        )
        # The code point of a 1-, 2- or 3-byte UTF-8 sequence (garbage for others, which the
        # decoding below then rejects); all whitespace is in the Basic Multilingual Plane.
        first_char = np.where(
            b0 < 0x80,
            b0,
            np.where(
                b0 < 0xE0,
                (b0 & 0x1F) << 6 | (b1 & 0x3F),
                (b0 & 0x0F) << 12 | (b1 & 0x3F) << 6 | (b2 & 0x3F),
            ),
        )
        blank = lengths == 0
        for i in np.flatnonzero(_IS_SPACE[first_char] & ~blank).tolist():
            blank[i] = self.raw[starts[i] : ends[i]].decode("utf-8", "replace").isspace()
        return blank


def _line_codes(
    chunk: _Chunk, max_line_bytes: int, fields_ok: Callable[[_Chunk], np.ndarray] | None
) -> np.ndarray:
    """Per line of `chunk`: 0 if usable, else 1 + its problem's index in `KINDS`."""
    lengths = chunk.ends - chunk.starts
    # Assigned in reverse order of precedence, so that the strongest kind wins.
    codes = np.zeros(len(lengths), dtype=np.int8)
    codes[chunk.blank(chunk.starts, chunk.ends)] = _EMPTY
    codes[chunk.invalid_utf8()] = _INVALID_UTF8
    codes[lengths > max_line_bytes] = _TOO_LONG
    if fields_ok is not None:
        codes[(codes == 0) & ~fields_ok(chunk)] = _BAD_FIELDS
    return codes


def usable_lines(
    raw: bytes, *, max_line_bytes: int, fields_ok: Callable[[_Chunk], np.ndarray] | None = None
) -> tuple[list[str], dict[str, int]]:
    """The usable lines of `raw` (whole lines of a file) as text, and how many lines of each
    problem kind were skipped: the folder sources' rules, for tools that stream a file's bytes
    (`xlpretrain.data.prepare`) instead of indexing it."""
    lines, counts = [], skip_counts()
    for start, end, is_one_long_line in _chunks(raw, max(_CHUNK_BYTES, max_line_bytes + 2)):
        if is_one_long_line:
            counts["too_long"] += 1
            continue
        chunk = _Chunk(raw[start:end])
        codes = _line_codes(chunk, max_line_bytes, fields_ok)
        for code in np.flatnonzero(np.bincount(codes, minlength=len(KINDS) + 1)[1:]).tolist():
            counts[KINDS[code]] += int(np.count_nonzero(codes == code + 1))
        for i in np.flatnonzero(codes == 0).tolist():
            lines.append(chunk.raw[chunk.starts[i] : chunk.ends[i]].decode("utf-8"))
    return lines, counts


def _scan_file(
    path: str,
    *,
    max_line_bytes: int,
    strict: bool,
    fields_ok: Callable[[_Chunk], np.ndarray] | None = None,
) -> tuple[_IndexedFile, FileStats]:
    """Classifies every line of `path` and indexes the usable ones (the one scan per file).

    `fields_ok` checks the format of every line of a chunk at once (failures of otherwise
    usable lines count as `bad_fields`); `strict` raises on the first bad line instead.
    """
    counts = np.zeros(len(KINDS) + 1, dtype=np.int64)
    examples: dict[str, list[int]] = {}
    offsets, lengths = [], []
    lines_before = 0
    with open(path, "rb") as f:
        stat = os.fstat(f.fileno())
        size = stat.st_size
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else nullcontext(b"")
    with mapped as data:
        for start, end, is_one_long_line in _chunks(data, max(_CHUNK_BYTES, max_line_bytes + 2)):
            if is_one_long_line:
                codes = np.array([_TOO_LONG], dtype=np.int8)
                chunk_offsets = chunk_lengths = np.zeros(1, dtype=np.int64)
            else:
                chunk = _Chunk(data[start:end])
                chunk_offsets, chunk_lengths = chunk.starts, chunk.ends - chunk.starts
                codes = _line_codes(chunk, max_line_bytes, fields_ok)
            bad = np.flatnonzero(codes)
            if strict and len(bad):
                kind = KINDS[int(codes[bad[0]]) - 1]
                description = _DESCRIPTIONS[kind].format(max_line_bytes=max_line_bytes)
                line_number = lines_before + int(bad[0]) + 1
                raise DataError(f"{path}:{line_number}: {description} (strict mode)")
            counts += np.bincount(codes, minlength=len(counts))
            for code in np.unique(codes[bad]).tolist():
                seen = examples.setdefault(KINDS[code - 1], [])
                first = np.flatnonzero(codes == code)[: MAX_EXAMPLES - len(seen)]
                seen.extend((first + lines_before + 1).tolist())
            ok = codes == 0
            offsets.append(chunk_offsets[ok] + start)
            lengths.append(chunk_lengths[ok])
            lines_before += len(codes)
    index = _IndexedFile(
        path,
        (stat.st_dev, stat.st_ino, size, stat.st_mtime_ns),
        np.concatenate(offsets or [np.zeros(0)]).astype(np.int64),
        np.concatenate(lengths or [np.zeros(0)]).astype(np.int32),
    )
    stats = FileStats(
        path=path,
        total=lines_before,
        used=len(index),
        **{kind: int(counts[code + 1]) for code, kind in enumerate(KINDS)},
        examples=examples,
    )
    return index, stats


_CODE = re.compile(r"[a-z]{2,3}(?:_[A-Za-z0-9]+)?")
_EXAMPLE_CODES = ("en", "de")  # the demo corpus's, for a folder that names no language


def _codes(names: Sequence[str]) -> list[str]:
    """Language codes the folder's own file names use (`fr.txt.gz`, `de-fr.csv`), then the
    demo's, so that a layout's example is written the way the user names languages."""
    found = [
        code for name in names for code in name.split(".", 1)[0].split("-") if _CODE.fullmatch(code)
    ]
    return list(dict.fromkeys([*found, *_EXAMPLE_CODES]))


def _load_dir(
    path: str | os.PathLike[str],
    *,
    suffix: str,
    layout: Callable[[Sequence[str]], str],
    parse_key: Callable[[str, str], K],
    describe: Callable[[K], str],
    wanted: Sequence[K] | None,
    fields_ok: Callable[[_Chunk], np.ndarray] | None,
    strict: bool,
    max_line_bytes: int,
) -> tuple[str, dict[K, _IndexedFile], dict[K, FileStats]]:
    """Finds, selects and scans the data files of a folder (shared by both sources).

    Files with no usable line are left out of the indexes (their stats stay, for the log):
    sampling gives each file a share by its line count, which must not be 0.
    """
    if not isinstance(max_line_bytes, int) or not 0 < max_line_bytes <= 2**30:
        raise ValueError(f"max_line_bytes must be an int in [1, 2**30], not {max_line_bytes!r}")
    folder = os.path.abspath(path)
    if not os.path.exists(folder):
        raise DataError(f"data folder {folder} does not exist")
    if not os.path.isdir(folder):
        raise DataError(f"data folder {folder} is not a directory")
    files: dict[K, str] = {}
    others, other_files = [], []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        name = entry.name
        if name.endswith(suffix) and len(name) > len(suffix) and not name.startswith("."):
            if entry.is_file():
                files[parse_key(name[: -len(suffix)], entry.path)] = entry.path
                continue
        others.append(name)
        if entry.is_file():
            other_files.append(name)
    if not files:
        found = ", ".join(others[:5]) + (", …" if len(others) > 5 else "")
        raise DataError(
            f"no *{suffix} file in data folder {folder} ({layout(_codes(other_files))}); "
            + (f"it holds only: {found}" if others else "it is empty")
        )
    if wanted is not None:
        missing = [describe(key) for key in wanted if key not in files]
        if missing:
            raise DataError(
                f"{', '.join(missing)} not found in {folder} (it has {len(files)} *{suffix} files)"
            )
        if not wanted:
            raise DataError(f"empty selection of data files from {folder}")
        files = {key: files[key] for key in wanted}
    indexes, stats = {}, {}
    for key in sorted(files):
        index, stat = _scan_file(
            files[key], max_line_bytes=max_line_bytes, strict=strict, fields_ok=fields_ok
        )
        stats[key] = stat
        if stat.used:
            indexes[key] = index
        elif strict or wanted is not None:
            why = "strict mode" if strict else "it was asked for by name"
            raise DataError(
                f"{describe(key)}: no usable lines in {stat.path} ({stat.why_unusable()}; {why})"
            )
    if not indexes:
        raise DataError(
            f"no usable lines in any of the {len(stats)} *{suffix} files in data folder {folder}"
            f" (e.g. {stat.path}: {stat.why_unusable()})"
        )
    return folder, indexes, stats


class MonolingualSource(MonolingualBase):
    """A folder of `<lang>.txt` files (UTF-8, one paragraph or document per line).

    The language is the file stem; other files (and dot files) are ignored, and so is (with a
    log line from `format_stats`) a file with no usable line.
    """

    @classmethod
    def from_dir(
        cls,
        path: str | os.PathLike[str],
        *,
        strict: bool = False,
        max_line_bytes: int = 1_000_000,
        languages: Sequence[str] | None = None,
    ) -> MonolingualSource:
        """Scans the folder; `languages` selects a subset (each must have a file)."""
        reject_string(languages, "languages")
        folder, files, stats = _load_dir(
            path,
            suffix=".txt",
            layout=lambda codes: (
                f"monolingual data is one <lang>.txt file per language, e.g. {codes[0]}.txt"
            ),
            parse_key=lambda stem, _: stem,
            describe=lambda lang: f"language {lang!r}",
            wanted=None if languages is None else sorted(set(languages)),
            fields_ok=None,
            strict=strict,
            max_line_bytes=max_line_bytes,
        )
        return cls(folder, files, stats)

    def line(self, lang: str, index: int) -> str:
        return self._file(lang).read(index)


def pair_fields_ok(chunk: _Chunk) -> np.ndarray:
    """Which lines are exactly two tab-separated fields, neither of them blank."""
    tabs = np.flatnonzero(chunk.data == ord("\t"))
    line_of_tab = np.searchsorted(chunk.starts, tabs, side="right") - 1
    ok = np.bincount(line_of_tab, minlength=len(chunk.starts)) == 1
    lines = np.flatnonzero(ok)
    tab = np.empty_like(chunk.starts)
    tab[line_of_tab] = tabs  # right for the lines with one tab, the only ones used
    ok[lines] = ~chunk.blank(chunk.starts[lines], tab[lines]) & ~chunk.blank(
        tab[lines] + 1, chunk.ends[lines]
    )
    return ok


class ParallelSource(ParallelBase):
    """A folder of `<l1>-<l2>.tsv` files: one aligned pair per line, `l1 text<TAB>l2 text`.

    The pair is parsed from the file stem by `parse_pair`; other files are ignored, and so is
    (with a log line from `format_stats`) a file with no usable line.
    """

    @classmethod
    def from_dir(
        cls,
        path: str | os.PathLike[str],
        *,
        strict: bool = False,
        max_line_bytes: int = 1_000_000,
        pairs: Sequence[Pair | str] | None = None,
    ) -> ParallelSource:
        """Scans the folder; `pairs` selects a subset, as tuples or 'l1-l2' strings."""
        reject_string(pairs, "pairs")
        wanted = None if pairs is None else sorted({as_pair(pair) for pair in pairs})
        folder, files, stats = _load_dir(
            path,
            suffix=".tsv",
            layout=lambda codes: (
                "parallel data is one <l1>-<l2>.tsv file per language pair, "
                f"e.g. {codes[0]}-{codes[1]}.tsv"
            ),
            parse_key=parse_pair,
            describe=lambda pair: f"language pair '{pair[0]}-{pair[1]}'",
            wanted=wanted,
            fields_ok=pair_fields_ok,
            strict=strict,
            max_line_bytes=max_line_bytes,
        )
        return cls(folder, files, stats)

    def line(self, pair: Pair | str, index: int) -> tuple[str, str]:
        first, second = self._file(as_pair(pair)).read(index).split("\t")
        return first, second
