"""What `prepare` works on: its inputs (files of a folder, TFDS splits) and the pieces they are
cut into. A piece is the unit of work, of resuming and of naming: each becomes one shard per
key it holds and a JSON that marks it finished, so the pieces must be the same however the
work is later split (by `--workers`, `--shard` or `--beam`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Sequence
from typing import Any

from xlpretrain.core.errors import require
from xlpretrain.data.corpora import store as store_lib
from xlpretrain.data.corpora.sources import DataError, parse_pair

RECORD_FILES = (".jsonl", ".parquet")  # inputs whose documents are read from named fields
FORMATS = {
    store_lib.MONO: (".txt", ".jsonl", ".parquet"),
    store_lib.PARALLEL: (".tsv", ".jsonl", ".parquet"),
}


@dataclasses.dataclass(frozen=True)
class TfdsInput:
    """A TFDS split to prepare (`--mono_tfds` / `--parallel_tfds NAME[@SPLIT][=LANGUAGE]`).

    Records are documents (mono) or pairs (parallel), read by random access from a dataset
    prepared in ArrayRecord format, as the run's TFDS sources read them. Their language (pair
    'l1-l2') is `language` for all records, or each record's `language_fields`; the texts are
    `text_fields` (mono: one; parallel: two, by default the pair's codes with a fixed pair, as
    TFDS's `Translation` feature names them, else "source" and "target"). `records` and
    `version` are filled in by `plan`, so that a finished shard can be recognised without
    opening the dataset.
    """

    kind: str
    name: str
    split: str = "train"
    language: str = ""
    data_dir: str = ""
    text_fields: tuple[str, ...] = ()
    language_fields: tuple[str, ...] = ()
    records: int = 0
    version: str = ""

    @property
    def where(self) -> str:
        return f"tfds:{self.name}/{self.split}"

    @property
    def slug(self) -> str:
        """The dataset in shard file names: `wiki40b_en.train` for wiki40b/en, split train."""
        return re.sub(r"[^\w.-]+", "_", self.name) + "." + re.sub(r"[^\w.-]+", "_", self.split)

    def open(self) -> tuple[Any, tuple[str, ...], Any]:
        """The split, its text fields and how a record's key (language, pair) is read (opened
        once per process: every piece of a dataset uses the same)."""
        return _open_tfds(self)


@functools.lru_cache(maxsize=16)
def _open_tfds(spec: TfdsInput):
    try:
        from xlpretrain.data.corpora import tfds_source
    except ImportError as error:
        raise DataError(f"{spec.where}: {error}") from None
    split = tfds_source.TfdsSplit(spec.name, spec.split, spec.data_dir or None)
    if spec.kind == store_lib.PARALLEL and not (spec.language or spec.language_fields):
        raise DataError(
            f"{spec.where}: give its pair (--parallel_tfds {spec.name}=L1-L2) or the features "
            "that name each record's pair (--pair_language_fields A,B)"
        )
    hint = ""
    if not spec.language:
        flag = (
            "--mono_tfds NAME=LANG" if spec.kind == store_lib.MONO else "--parallel_tfds NAME=L1-L2"
        )
        hint = f" (a dataset of one language, or pair, says which: {flag})"
    try:
        if spec.kind == store_lib.MONO:
            text_keys, key_of = tfds_source.mono_fields(
                split,
                (spec.text_fields or ("text",))[0],
                (spec.language_fields or ("language",))[0],
                spec.language or None,
            )
        else:
            text_keys, key_of = tfds_source.parallel_fields(
                split,
                spec.language or None,
                None if spec.language else spec.language_fields,
                *(spec.text_fields or (None, None)),
            )
    except DataError as error:
        raise DataError(f"{error}{hint}") from None
    return split, text_keys, key_of


def tfds_input(kind: str, spec: str, **fields: Any) -> TfdsInput:
    """`NAME[@SPLIT][=LANGUAGE]` as a `TfdsInput` (`@` and `=` occur in no TFDS name or split;
    TFDS's `name/kwarg=value` form is not taken here)."""
    rest, _, language = spec.partition("=")
    name, _, split = rest.partition("@")
    if not name:
        raise DataError(f"--{kind}_tfds {spec!r}: expected NAME[@SPLIT][=LANGUAGE]")
    if language and kind == store_lib.PARALLEL:
        language = "-".join(parse_pair(language))
    if language:  # the records' own language features are not read
        fields["language_fields"] = ()
    return TfdsInput(kind, name, split or "train", language, **fields)


@dataclasses.dataclass(frozen=True)
class Task:
    """One piece of one input: a byte range of a file, a range of row groups of a Parquet file
    or a range of records of a TFDS split; where its shards and its JSON go."""

    kind: str  # store.MONO or store.PARALLEL
    key: str  # the language, or the pair as 'l1-l2' ("" for TFDS records that name their own)
    source: str  # the input file, or the TFDS split as tfds:NAME/SPLIT
    index: int  # the piece's number within its input
    start: int
    end: int
    tfds: TfdsInput | None = None

    @property
    def name(self) -> str:
        """The piece's JSON, without `.json`, in the store: written when its shards are."""
        if self.tfds is not None:
            return f"tfds/{self.tfds.slug}/{self.index:05d}"
        return f"{self.kind}/{self.key}/{self.index:05d}"

    def shard(self, key: str) -> str:
        """The shard of `key` that this piece writes, in the store."""
        if self.tfds is not None:
            return f"{self.kind}/{key}/{self.tfds.slug}.{self.index:05d}.array_record"
        return f"{self.name}.array_record"


def input_files(folder: str, kind: str) -> dict[str, str]:
    """key → input file of a folder (one per language, or per pair), in key order."""
    if not os.path.isdir(folder):
        raise DataError(f"data folder {folder} does not exist or is not a directory")
    files: dict[str, str] = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        suffix = next((x for x in FORMATS[kind] if name.endswith(x)), None)
        if suffix is None or name.startswith(".") or not os.path.isfile(path):
            continue
        stem = name[: -len(suffix)]
        key = "-".join(parse_pair(stem, path)) if kind == store_lib.PARALLEL else stem
        if key in files:
            raise DataError(f"{key}: two input files, {files[key]} and {path}; keep one")
        files[key] = path
    if not files:
        raise DataError(f"no {' or '.join('*' + x for x in FORMATS[kind])} file in {folder}")
    return files


def plan(
    files: dict[str, dict[str, str]], tfds_inputs: Sequence[TfdsInput], shard_bytes: int
) -> list[Task]:
    """Every piece of every input: ranges of about `shard_bytes`, cut after a newline in text
    files, between row groups in Parquet files, between records in TFDS splits."""
    shard_bytes = max(shard_bytes, 1)
    tasks = []
    for kind in sorted(files):
        for key, path in files[kind].items():
            if path.endswith(".parquet"):
                tasks += _row_group_tasks(kind, key, path, shard_bytes)
                continue
            size = os.path.getsize(path)
            starts = [0]
            with open(path, "rb") as f:
                while (target := starts[-1] + shard_bytes) < size:
                    f.seek(target - 1)
                    boundary = target - 1 + len(f.readline())  # just after the next newline
                    if boundary >= size:
                        break
                    starts.append(boundary)
            bounds = [*starts, size]
            tasks += [
                Task(kind, key, path, i, bounds[i], bounds[i + 1]) for i in range(len(starts))
            ]
    slugs: dict[str, TfdsInput] = {}
    for spec in tfds_inputs:
        if spec.slug in slugs:
            raise DataError(
                f"{spec.where} and {slugs[spec.slug].where} would write shards of the same name "
                f"({spec.slug}.*): give each dataset once"
            )
        slugs[spec.slug] = spec
        tasks += _record_tasks(spec, shard_bytes)
    return tasks


def _row_group_tasks(kind: str, key: str, path: str, shard_bytes: int) -> list[Task]:
    """Runs of a Parquet file's row groups of about `shard_bytes` (uncompressed) each."""
    metadata = parquet().ParquetFile(path).metadata
    tasks, start, size = [], 0, 0
    for group in range(metadata.num_row_groups):
        size += metadata.row_group(group).total_byte_size
        if size >= shard_bytes or group == metadata.num_row_groups - 1:
            tasks.append(Task(kind, key, path, len(tasks), start, group + 1))
            start, size = group + 1, 0
    return tasks


def parquet() -> Any:
    """pyarrow.parquet, or a one-line error naming the package to install."""
    return require("pyarrow.parquet", "reading Parquet inputs")


def _record_tasks(spec: TfdsInput, shard_bytes: int) -> list[Task]:
    """Ranges of a TFDS split's records of about `shard_bytes` each, from the split's mean
    record size in the dataset's info (its fields are checked here, before any work)."""
    split, _, _ = spec.open()
    if not split.size:
        raise DataError(f"{spec.where} has no records")
    info = split.records.dataset_info
    whole = info.splits[spec.split.split("[")[0]]  # a sliced split's records are like its whole
    record_bytes = whole.num_bytes / whole.num_examples if whole.num_bytes else 1024
    step = max(1, int(shard_bytes / record_bytes))
    resolved = dataclasses.replace(spec, records=split.size, version=str(info.version))
    bounds = [*range(0, split.size, step), split.size]
    return [
        Task(spec.kind, spec.language, spec.where, i, bounds[i], bounds[i + 1], resolved)
        for i in range(len(bounds) - 1)
    ]
