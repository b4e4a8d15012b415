"""TFDS datasets as corpus sources, with the interface of the folder sources (`folders.py`).

A prepared TFDS dataset in a random-access format (ArrayRecord, as written by
`tfds build NAME --file_format=array_record` or `download_and_prepare(file_format=
"array_record")`) is opened by name like `tfds.data_source(name, split=..., data_dir=...,
download=False)`. TensorFlow is not needed: TFDS reads these files with numpy only. Sources
never download or prepare anything: a worker process re-opening a source must not start a
build, and a missing dataset should fail at start-up, clearly.

Like a file source, a TFDS source is an index, not the text. Loading reads every record of the
split once, in batches, to learn its language(s) and classify its text; the usable records'
ids are kept per language (or pair) in numpy arrays, and `line()` reads one record by random
access. Costs, measured on 2 CPU cores: the load-time pass reads and decodes every record,
about 16k short records a second (a minute per million; TFDS's record decoding dominates); the
index takes 8 bytes per record; one `line()` takes about 0.75 ms (ArrayRecord's single-record
read), where a text file's mmap takes microseconds. Right for small and medium datasets; for a
huge one prepare a store from it (`python -m xlpretrain.data.prepare --mono_tfds NAME`), which
reads it once, or index a slice (`split="train[:10%]"`).
Pickling a source copies only the dataset name, split, data folder and the index arrays;
every process re-opens the dataset itself.

Records are classified with the file sources' kinds and precedence, and counted per language
(or pair) in `FileStats` whose path is `tfds:<name>/<split> (<language or l1-l2>)`; problem
examples (`FileStats.examples`, printed as "line N" by `format_stats`) are 0-based record
indices, as `data_source[i]` takes them:
  too_long      the text (a pair's two texts together) has more than `max_line_bytes` bytes
  invalid_utf8  a text is not valid UTF-8
  empty         the text (both texts of a pair) is empty or whitespace only
  bad_fields    pairs only: one of the two texts is empty or whitespace only
`strict=True` turns the first bad record into a `DataError` naming dataset, split and record.
Language labels are metadata, not text: a missing, blank or non-string one is a `DataError`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from xlpretrain.core.errors import require
from xlpretrain.data.corpora.sources import (
    MAX_EXAMPLES,
    DataError,
    FileStats,
    MonolingualBase,
    Pair,
    ParallelBase,
    as_pair,
    classify,
    reject_string,
)

tfds = require("tensorflow_datasets", "a TFDS dataset as input")

__all__ = [
    "TfdsMonolingualSource",
    "TfdsParallelSource",
    "TfdsSplit",
    "mono_fields",
    "parallel_fields",
]

K = TypeVar("K")
Record = Mapping[str, Any]

# Records are read this many at a time.
_READ_BATCH = 4096
_DESCRIPTIONS = {
    "too_long": "text longer than max_line_bytes={max_line_bytes}",
    "invalid_utf8": "invalid UTF-8",
    "empty": "empty or whitespace-only text",
    "bad_fields": "one of the two texts is empty or whitespace only",
}


def _open(name: str, split: str, data_dir: str | None) -> Sequence[Record]:
    """What `tfds.data_source(..., download=False)` does, with TFDS's errors made clear.

    TFDS's own messages are kept (first line only: a missing name lists every dataset).
    """
    where = f"TFDS dataset {name!r} (data_dir={data_dir})"
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except ValueError as error:  # includes DatasetNotFoundError
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise DataError(f"{where} not found: {first_line}") from error
    if not builder.is_prepared():
        raise DataError(
            f"{where} is not prepared in {builder.data_dir} (sources never download): run "
            f"`tfds build {name} --file_format=array_record` first"
        )
    try:
        return builder.as_data_source(split=split)
    except (ValueError, NotImplementedError) as error:  # unknown split, not random access
        raise DataError(f"{where}, split {split!r}: {error}") from error


class TfdsSplit:
    """One split of a TFDS dataset, re-opened lazily in each process that reads it."""

    def __init__(self, name: str, split: str, data_dir: str | None):
        self.name = name
        self.split = split
        self.data_dir = data_dir
        self.where = f"tfds:{name}/{split}"
        self._records = _open(name, split, data_dir)
        self.size = len(self._records)

    def __getstate__(self) -> dict[str, Any]:
        # Open readers cannot (and must not) travel: each process opens its own.
        return {**self.__dict__, "_records": None}

    @property
    def records(self) -> Sequence[Record]:
        if self._records is None:
            records = _open(self.name, self.split, self.data_dir)
            if len(records) != self.size:
                raise DataError(
                    f"{self.where} changed since it was indexed "
                    f"({self.size} -> {len(records)} records)"
                )
            self._records = records
        return self._records

    def read(self, start: int, end: int) -> Iterator[tuple[int, Record]]:
        """Records `start` to `end` with their indices, read `_READ_BATCH` at a time
        (`__getitems__` reads each file's share at once)."""
        for begin in range(start, end, _READ_BATCH):
            batch = self.records.__getitems__(range(begin, min(begin + _READ_BATCH, end)))
            yield from enumerate(batch, begin)

    def check_keys(self, keys: Sequence[str]) -> None:
        """Fails early, naming the keys, when the dataset's features lack one."""
        features = list(self.records.dataset_info.features.keys())
        missing = [key for key in keys if key not in features]
        if missing:
            raise DataError(
                f"{self.where} has no feature {', '.join(map(repr, missing))} "
                f"(its features: {', '.join(features)})"
            )

    def string(self, record: Record, key: str, index: int) -> bytes:
        """A string feature's value: bytes (TFDS decodes `Text` without TensorFlow to bytes)."""
        value = record[key]
        if not isinstance(value, bytes):
            raise DataError(
                f"{self.where} record {index}: feature {key!r} is not a string feature "
                f"(it holds {type(value).__name__})"
            )
        return value


class _TfdsRecords:
    """The usable records of one language (or pair): their ids, and the text keys to read."""

    def __init__(self, split: TfdsSplit, path: str, ids: np.ndarray, text_keys: tuple[str, ...]):
        self.split = split  # shared by all keys of a source: pickled and re-opened once
        self.path = path
        self.ids = ids
        self.text_keys = text_keys

    def __len__(self) -> int:
        return len(self.ids)

    def read(self, index: int) -> tuple[str, ...]:
        if not 0 <= index < len(self.ids):
            raise IndexError(f"line {index} out of range for {self.path} ({len(self)} lines)")
        record = self.split.records[int(self.ids[index])]
        return tuple(record[key].decode("utf-8") for key in self.text_keys)


def _index(
    split: TfdsSplit,
    *,
    text_keys: tuple[str, ...],
    key_of: Callable[[Record, int], K],
    label: Callable[[K], str],
    wanted: Sequence[K] | None,
    strict: bool,
    max_line_bytes: int,
) -> tuple[dict[K, _TfdsRecords], dict[K, FileStats]]:
    """The one pass over the split: classifies the records of each key, indexes usable ones.

    `key_of(record, index)` gives a record's language (or pair); keys not `wanted` are skipped.
    """
    if not isinstance(max_line_bytes, int) or not 0 < max_line_bytes <= 2**30:
        raise ValueError(f"max_line_bytes must be an int in [1, 2**30], not {max_line_bytes!r}")
    if wanted is not None and not wanted:
        raise DataError(f"empty selection from {split.where}")
    if not split.size:
        raise DataError(f"{split.where} has no records")
    selected = None if wanted is None else set(wanted)
    seen: set[K] = set()  # all keys, selected or not, to name them when one is missing
    ids: dict[K, list[int]] = {}
    stats: dict[K, FileStats] = {}
    for index, record in split.read(0, split.size):
        key = key_of(record, index)
        seen.add(key)
        if selected is not None and key not in selected:
            continue
        texts = [split.string(record, text_key, index) for text_key in text_keys]
        kind = classify(texts, max_line_bytes)
        if strict and kind:
            description = _DESCRIPTIONS[kind].format(max_line_bytes=max_line_bytes)
            raise DataError(f"{split.where} record {index}: {description} (strict mode)")
        stat = stats.get(key)
        if stat is None:
            stat = stats[key] = FileStats(f"{split.where} ({label(key)})", 0, 0)
            ids[key] = []
        stat.total += 1
        if kind:
            setattr(stat, kind, getattr(stat, kind) + 1)
            examples = stat.examples.setdefault(kind, [])
            if len(examples) < MAX_EXAMPLES:
                examples.append(index)
        else:
            stat.used += 1
            ids[key].append(index)
    missing = [label(key) for key in wanted or () if key not in seen]
    if missing:
        found = ", ".join(map(label, sorted(seen)))
        raise DataError(f"{', '.join(missing)} not found in {split.where} (it has {found})")
    for stat in stats.values():
        if not stat.used:
            raise DataError(f"{stat.path} has no usable record ({stat.problems()})")
    records = {
        key: _TfdsRecords(split, stats[key].path, np.array(ids[key], dtype=np.int64), text_keys)
        for key in sorted(stats)
    }
    return records, {key: stats[key] for key in sorted(stats)}


def _language_reader(split: TfdsSplit, key: str) -> Callable[[Record, int], str]:
    """Reads a record's language label from a string feature (a clear error if it is bad)."""

    def language(record: Record, index: int) -> str:
        try:
            label = split.string(record, key, index).decode("utf-8")
        except UnicodeDecodeError:
            label = ""
        if not label.strip():
            raise DataError(f"{split.where} record {index}: bad language label in {key!r}")
        return label

    return language


def mono_fields(
    split: TfdsSplit, text_key: str, language_key: str | None, language: str | None
) -> tuple[tuple[str], Callable[[Record, int], str]]:
    """The text feature of a document split, and how a record's language is found: the
    `language_key` feature, or `language` for every record."""
    if language is None:
        split.check_keys([text_key, language_key])
        return (text_key,), _language_reader(split, language_key)
    split.check_keys([text_key])

    def key_of(record: Record, index: int) -> str:
        return language

    return (text_key,), key_of


def parallel_fields(
    split: TfdsSplit,
    pair: Pair | str | None,
    language_keys: tuple[str, str] | None,
    source_key: str | None,
    target_key: str | None,
) -> tuple[tuple[str, str], Callable[[Record, int], Pair]]:
    """The two text features of a pair split, and how a record's pair is found: `pair` for
    every record, or the two `language_keys` features (text keys default as `TfdsParallelSource`
    says)."""
    fixed = None if pair is None else as_pair(pair)
    default_keys = fixed or ("source", "target")
    text_keys = (source_key or default_keys[0], target_key or default_keys[1])
    if fixed is None:
        split.check_keys([*text_keys, *language_keys])
        first, second = (_language_reader(split, key) for key in language_keys)

        def key_of(record: Record, index: int) -> Pair:
            return first(record, index), second(record, index)
    else:
        split.check_keys(text_keys)

        def key_of(record: Record, index: int) -> Pair:
            return fixed

    return text_keys, key_of


def _data_dir(data_dir: str | os.PathLike[str] | None) -> str | None:
    return None if data_dir is None else os.fspath(data_dir)


class TfdsMonolingualSource(MonolingualBase):
    """A TFDS split whose records are documents: one text feature, a language per record."""

    _UNITS = ("keys", "records")

    @classmethod
    def from_tfds(
        cls,
        name: str,
        *,
        split: str = "train",
        data_dir: str | os.PathLike[str] | None = None,
        text_key: str = "text",
        language_key: str | None = "language",
        language: str | None = None,
        languages: Sequence[str] | None = None,
        strict: bool = False,
        max_line_bytes: int = 1_000_000,
    ) -> TfdsMonolingualSource:
        """Opens and indexes `name` (e.g. "wiki40b/en"); reads every record once.

        A record's language is its `language_key` string feature, or `language` for a
        single-language dataset (then `language_key` is not read). `languages` selects a
        subset, as in `MonolingualSource.from_dir`.
        """
        reject_string(languages, "languages")
        if language is None and language_key is None:
            raise ValueError("give language_key (a string feature) or language (for all records)")
        tfds_split = TfdsSplit(name, split, _data_dir(data_dir))
        text_keys, key_of = mono_fields(tfds_split, text_key, language_key, language)
        files, stats = _index(
            tfds_split,
            text_keys=text_keys,
            key_of=key_of,
            label=str,
            wanted=None if languages is None else sorted(set(languages)),
            strict=strict,
            max_line_bytes=max_line_bytes,
        )
        return cls(tfds_split.where, files, stats)

    def line(self, lang: str, index: int) -> str:
        return self._file(lang).read(index)[0]


class TfdsParallelSource(ParallelBase):
    """A TFDS split whose records are aligned pairs: two text features.

    The pair's languages come either from `pair`, for a dataset of one language pair, or from
    two string features named by `language_keys`, for a dataset mixing pairs. With `pair`, the
    text keys default to the pair's language codes: the layout of TFDS's `Translation`
    feature, e.g. `from_tfds("wmt14_translate/de-en", pair=("de", "en"))`; with
    `language_keys` they default to "source" and "target".
    """

    _UNITS = ("keys", "records")

    @classmethod
    def from_tfds(
        cls,
        name: str,
        *,
        split: str = "train",
        data_dir: str | os.PathLike[str] | None = None,
        pair: Pair | str | None = None,
        language_keys: tuple[str, str] | None = None,
        source_key: str | None = None,
        target_key: str | None = None,
        pairs: Sequence[Pair | str] | None = None,
        strict: bool = False,
        max_line_bytes: int = 1_000_000,
    ) -> TfdsParallelSource:
        """Opens and indexes `name`; reads every record once.

        Exactly one of `pair` (a tuple or "l1-l2") and `language_keys` must be given. `pairs`
        selects a subset, as in `ParallelSource.from_dir`.
        """
        reject_string(pairs, "pairs")
        if (pair is None) == (language_keys is None):
            raise ValueError("give exactly one of pair and language_keys")
        tfds_split = TfdsSplit(name, split, _data_dir(data_dir))
        text_keys, key_of = parallel_fields(tfds_split, pair, language_keys, source_key, target_key)
        files, stats = _index(
            tfds_split,
            text_keys=text_keys,
            key_of=key_of,
            label="-".join,
            wanted=None if pairs is None else sorted({as_pair(p) for p in pairs}),
            strict=strict,
            max_line_bytes=max_line_bytes,
        )
        return cls(tfds_split.where, files, stats)

    def line(self, pair: Pair | str, index: int) -> tuple[str, str]:
        first, second = self._file(as_pair(pair)).read(index)
        return first, second
