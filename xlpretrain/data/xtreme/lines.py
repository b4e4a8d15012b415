"""What every XTREME reader does with a bad line: a training file skips and counts it, as the
pre-training sources do (`FileStats`, its kinds and its order of precedence: invalid UTF-8, then
empty, then bad fields); a test or dev file is a reference, whose every line is an example a
submission must predict in order, so a bad line there is an error naming file:line.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from xlpretrain.data.corpora.sources import MAX_EXAMPLES, DataError, FileStats

_COUNTED = ("invalid_utf8", "empty", "bad_fields")


class BadLines:
    """Where one file's bad lines (or, for a JSON file, questions) go; `unit` names them in a
    reference's error: 'line' gives `path:12: why`, any other `path: question 12: why`."""

    def __init__(self, path: str | os.PathLike, *, training: bool, unit: str = "line"):
        self.path = str(path)
        self.training = training
        self.unit = unit
        self.numbers: dict[str, list[int]] = {kind: [] for kind in _COUNTED}

    def found(self, number: int, kind: str, why: str) -> None:
        """Counts a bad line of a training file; raises for a reference file."""
        if not self.training:
            where = f":{number}" if self.unit == "line" else f": {self.unit} {number}"
            raise DataError(f"{self.path}{where}: {why}")
        self.numbers[kind].append(number)

    def stats(self, seen: int, used: int) -> FileStats:
        """The file's `FileStats`, given the lines (questions) `seen` decoded and those `used`;
        a file with nothing usable is an error, naming why."""
        stats = FileStats(
            path=self.path,
            total=seen + len(self.numbers["invalid_utf8"]),
            used=used,
            **{kind: len(numbers) for kind, numbers in self.numbers.items()},
            examples={kind: found[:MAX_EXAMPLES] for kind, found in self.numbers.items() if found},
        )
        if not used:
            raise DataError(f"{self.path} has no usable {self.unit} ({stats.why_unusable()})")
        return stats


def decoded_lines(path: str | os.PathLike, bad: BadLines) -> Iterator[tuple[int, str]]:
    """(1-based number, text without its line end) of each UTF-8 line of `path`; lines that are
    not UTF-8 go to `bad`. Line ends are LF, CRLF (csv's, in XTREME's pair files) or CR."""
    if not os.path.isfile(path):
        raise DataError(f"no file {path}")
    with open(path, "rb") as f:
        raw_lines = f.read().splitlines()
    for number, raw in enumerate(raw_lines, 1):
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError:
            bad.found(number, "invalid_utf8", "not valid UTF-8")
