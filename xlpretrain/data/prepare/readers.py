"""How `prepare` reads a piece's documents: lines of `.txt` and `.tsv` files by the folder
sources' rules (`folders.usable_lines`), records (a JSON line, a Parquet row, a TFDS record) by
`sources.classify`; a JSON line that does not parse, or a JSON or Parquet record without its
text fields as strings, counts as `bad_fields`. Usable documents are kept per key (language,
or pair), skipped ones counted by kind.
"""

from __future__ import annotations

import dataclasses
import json
import re

from xlpretrain.data.corpora import store as store_lib
from xlpretrain.data.corpora.folders import pair_fields_ok, usable_lines
from xlpretrain.data.corpora.sources import DataError, classify, skip_counts
from xlpretrain.data.prepare.inputs import Task, parquet

Documents = dict[str, tuple[list[tuple[str, ...]], dict[str, int]]]


@dataclasses.dataclass(frozen=True)
class Reading:
    """How documents are read from input files; part of what a shard is made from."""

    max_line_bytes: int = 1_000_000
    text_field: str = "text"  # a .jsonl / .parquet document's text
    pair_fields: tuple[str, ...] = ()  # a .jsonl / .parquet pair's texts; default its codes

    def fields(self, task: Task) -> tuple[str, ...]:
        if task.kind == store_lib.MONO:
            return (self.text_field,)
        return self.pair_fields or tuple(task.key.split("-"))


def documents(task: Task, reading: Reading) -> Documents:
    """Per key of a piece (its language or pair; several for TFDS records that name their
    own): the usable documents, each a tuple of its texts (a pair's two), and the counts of
    the skipped ones by kind."""
    if task.tfds is not None:
        return _record_documents(task, reading.max_line_bytes)
    if task.source.endswith(".parquet"):
        return {task.key: _parquet_documents(task, reading)}
    with open(task.source, "rb") as f:
        f.seek(task.start)
        raw = f.read(task.end - task.start)
    tsv = task.source.endswith(".tsv")
    lines, skipped = usable_lines(
        raw, max_line_bytes=reading.max_line_bytes, fields_ok=pair_fields_ok if tsv else None
    )
    if tsv:
        return {task.key: ([tuple(line.split("\t")) for line in lines], skipped)}
    if not task.source.endswith(".jsonl"):
        return {task.key: ([(line,) for line in lines], skipped)}
    rows = []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except ValueError:
            rows.append(None)  # not JSON: counted as bad fields
    return {task.key: _row_texts(rows, reading.fields(task), reading.max_line_bytes, skipped)}


def _parquet_documents(task: Task, reading: Reading) -> tuple[list, dict[str, int]]:
    source = parquet().ParquetFile(task.source)
    fields = reading.fields(task)
    missing = [field for field in fields if field not in source.schema_arrow.names]
    if missing:
        flag = "--text_field" if task.kind == store_lib.MONO else "--pair_text_fields"
        raise DataError(
            f"{task.source}: no column {', '.join(map(repr, missing))} (it has "
            f"{source.schema_arrow.names}); name the documents' columns with {flag}"
        )
    table = source.read_row_groups(range(task.start, task.end), columns=list(fields))
    return _row_texts(table.to_pylist(), fields, reading.max_line_bytes, skip_counts())


def _row_texts(
    rows: list, fields: tuple[str, ...], max_line_bytes: int, skipped: dict[str, int]
) -> tuple[list, dict[str, int]]:
    """The usable texts of JSON objects or Parquet rows, the others counted into `skipped`: a
    row that is not an object, or whose fields are missing or not strings, as `bad_fields`;
    the rest by the rules of records (`sources.classify`)."""
    texts = []
    for row in rows:
        values = [row.get(field) for field in fields] if isinstance(row, dict) else [None]
        if not all(isinstance(value, str) for value in values):
            skipped["bad_fields"] += 1
            continue
        try:
            kind = classify([value.encode("utf-8") for value in values], max_line_bytes)
        except UnicodeEncodeError:  # a lone surrogate, which JSON escapes can spell
            kind = "invalid_utf8"
        if kind:
            skipped[kind] += 1
        else:
            texts.append(tuple(values))
    return texts, skipped


def _record_documents(task: Task, max_line_bytes: int) -> Documents:
    """A TFDS piece's records by key, classified as the run's TFDS sources classify them."""
    split, text_keys, key_of = task.tfds.open()
    if split.size != task.tfds.records:
        raise DataError(
            f"{split.where} changed while it was being prepared ({task.tfds.records} -> "
            f"{split.size} records): prepare it again into a new store"
        )
    found: Documents = {}
    for index, record in split.read(task.start, task.end):
        key = _record_key(task.kind, key_of(record, index), split.where, index)
        texts, skipped = found.setdefault(key, ([], skip_counts()))
        fields = [split.string(record, text_key, index) for text_key in text_keys]
        kind = classify(fields, max_line_bytes)
        if kind:
            skipped[kind] += 1
        else:
            texts.append(tuple(field.decode("utf-8") for field in fields))
    return found


def _record_key(kind: str, label: str | tuple[str, str], where: str, index: int) -> str:
    """A record's language (pair as 'l1-l2') as a store key: also a folder name, so it must
    be one path part, and a pair must read back as the same two codes."""
    key = "-".join(label) if kind == store_lib.PARALLEL else label
    parts = label if kind == store_lib.PARALLEL else (label,)
    for part in parts:
        if not re.fullmatch(r"[^/\\\s.][^/\\\s]*", part) or (
            kind == store_lib.PARALLEL and "-" in part
        ):
            raise DataError(
                f"{where} record {index}: language {part!r} cannot name a store folder (no "
                "'/', '\\', spaces or leading '.'; in a pair no '-': write subtags with '_')"
            )
    return key
