"""`python -m xlpretrain.data.prepare (--mono_dir DIR | --parallel_dir DIR | --mono_tfds NAME
| --parallel_tfds NAME)... (--tokenizer MODEL | --vocab_size N) --out STORE [--workers N]
[--shard I/N | --beam]`: tokenize a corpus once into a store that training reads by random
access (`--config.data.store=STORE`; layout in `xlpretrain.data.store`). `--verify --out STORE`
reads every shard back against the manifest.

Monolingual inputs are `<lang>.txt` (a line a document), `<lang>.jsonl` (a JSON object a line,
the document under `--text_field`) or `<lang>.parquet` (a row a document, column
`--text_field`); parallel inputs are `<l1>-<l2>.tsv`, `.jsonl` or `.parquet` (the two texts
under `--pair_text_fields`, by default the pair's codes); and TFDS datasets prepared in
ArrayRecord format, of documents or pairs, whose records carry their language (or all share
one: `=LANG`).
Each input is cut into pieces of about `--shard_mb` (byte ranges at line starts; runs of row
groups for Parquet; ranges of records for TFDS). One piece is one task, a pure function of its
bytes and the tokenizer: it keeps the usable documents (the folder sources' rules for lines,
`sources.classify` for records; a JSON line that does not parse, or a JSON or Parquet record
without its text fields as strings, counts as `bad_fields`),
counts the skipped ones by kind, tokenizes the rest and writes one ArrayRecord shard per key
(language, or pair) it holds, then a small JSON that marks the piece finished. So the work can
be split any way — `--workers N` processes here, `--shard I/N` for job I of an array of N
(SLURM), or `--beam` for an Apache Beam pipeline (the DirectRunner here; Flink, Spark or
Dataflow with the store on a filesystem every worker mounts) — and the store's bytes are the
same whichever way it ran. Re-running resumes: finished pieces are kept, anything half-written
or of the wrong size is redone (shards are written under a temporary name and renamed). The
manifest is written by the run that finds every piece finished.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import functools
import json
import multiprocessing
import os
import re
import shutil
from collections.abc import Sequence

from xlpretrain.core import programs
from xlpretrain.core.errors import require
from xlpretrain.data import store as store_lib
from xlpretrain.data.sources import (
    DataError,
    classify,
    pair_fields_ok,
    parse_pair,
    skip_counts,
    usable_lines,
)
from xlpretrain.data.tokenizer import Tokenizer, train_tokenizer

SAMPLE_PIECES = 32  # pieces of a self-labelled TFDS split read for the tokenizer's sample
RECORD_FILES = (".jsonl", ".parquet")  # inputs whose documents are read from named fields
SHARD_FIELDS = ("lines", "tokens", "bytes", "sha256")  # what the manifest keeps of a shard
FORMATS = {
    store_lib.MONO: (".txt", ".jsonl", ".parquet"),
    store_lib.PARALLEL: (".tsv", ".jsonl", ".parquet"),
}
PROGRAM = "python -m xlpretrain.data.prepare"


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

    def open(self):
        """The split, its text fields and how a record's key (language, pair) is read (opened
        once per process: every piece of a dataset uses the same)."""
        return _open_tfds(self)


@functools.lru_cache(maxsize=16)
def _open_tfds(spec: TfdsInput):
    try:
        from xlpretrain.data import tfds_source
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


def tfds_input(kind: str, spec: str, **fields) -> TfdsInput:
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
    metadata = _parquet().ParquetFile(path).metadata
    tasks, start, size = [], 0, 0
    for group in range(metadata.num_row_groups):
        size += metadata.row_group(group).total_byte_size
        if size >= shard_bytes or group == metadata.num_row_groups - 1:
            tasks.append(Task(kind, key, path, len(tasks), start, group + 1))
            start, size = group + 1, 0
    return tasks


def _parquet():
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


def _parquet_documents(task: Task, reading: Reading):
    source = _parquet().ParquetFile(task.source)
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


def _row_texts(rows: list, fields: tuple[str, ...], max_line_bytes: int, skipped: dict):
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


def run_task(task: Task, out: str, reading: Reading) -> None:
    """Tokenizes one piece into its shards in `out` (a pure function of its bytes and the
    store's tokenizer), then writes its JSON: nothing is left under a final name unless it
    finished."""
    done_path = os.path.join(out, task.name + ".json")
    if os.path.exists(done_path):  # from other settings: it must not vouch for the new shards
        os.remove(done_path)
    tokenizer = Tokenizer.load(os.path.join(out, store_lib.TOKENIZER))
    shards = {}
    for key, (texts, skipped) in sorted(documents(task, reading).items()):
        path = os.path.join(out, task.shard(key))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        sides = zip(*texts, strict=True)  # a pair's first texts, then its second
        columns = [tokenizer.encode_batch(list(side), num_threads=1) for side in sides]
        encoded = list(zip(*columns, strict=True))
        shards[key] = {
            "lines": len(texts),
            "tokens": sum(len(ids) for column in columns for ids in column),
            "skipped": skipped,
            **store_lib.write_shard(path, encoded),
        }
    done = {"made_from": made_from(task, reading), "shards": shards}
    os.makedirs(os.path.dirname(done_path), exist_ok=True)
    with open(f"{done_path}.tmp{os.getpid()}", "w") as f:
        json.dump(done, f, sort_keys=True)
    os.replace(f"{done_path}.tmp{os.getpid()}", done_path)


def run_with_beam(
    tasks: Sequence[Task], out: str, reading: Reading, options: Sequence[str]
) -> None:
    """The shards as an Apache Beam pipeline: one element per task, spread by a reshuffle."""
    beam = require("apache_beam", "--beam")
    pipeline_options = require("apache_beam.options.pipeline_options", "--beam")
    with beam.Pipeline(options=pipeline_options.PipelineOptions(list(options))) as pipeline:
        _ = (
            pipeline
            | "shards" >> beam.Create(list(tasks))
            | "spread" >> beam.Reshuffle()
            | "tokenize" >> beam.Map(run_task, out, reading)
        )


def made_from(task: Task, reading: Reading) -> dict:
    """What a piece was made from, kept in its JSON: a re-run with other inputs or settings
    redoes the piece instead of keeping it."""
    settings = {"piece": [task.start, task.end], "max_line_bytes": reading.max_line_bytes}
    if task.tfds is not None:
        spec = task.tfds
        return {
            "input": spec.where,
            "records": spec.records,
            "version": spec.version,
            "language": spec.language,
            "text_fields": list(spec.text_fields),
            "language_fields": list(spec.language_fields),
            **settings,
        }
    return {
        "input": os.path.basename(task.source),
        "input_bytes": os.path.getsize(task.source),
        "fields": list(reading.fields(task)) if task.source.endswith(RECORD_FILES) else [],
        **settings,
    }


def finished(task: Task, out: str, reading: Reading) -> bool:
    """Whether the piece's shards were written, from these inputs and settings."""
    try:
        with open(os.path.join(out, task.name + ".json")) as f:
            done = json.load(f)
    except (OSError, ValueError):
        return False
    if done.get("made_from") != made_from(task, reading):
        return False
    for key, shard in done["shards"].items():
        path = os.path.join(out, task.shard(key))
        if not os.path.isfile(path) or os.path.getsize(path) != shard["bytes"]:
            return False
    return True


def write_manifest(tasks: Sequence[Task], out: str) -> dict:
    """The manifest, from the finished pieces' JSONs (every piece must be finished)."""
    manifest = {
        "format": store_lib.FORMAT,
        "tokenizer": {
            "sha256": store_lib.fingerprint(os.path.join(out, store_lib.TOKENIZER)),
            "vocab_size": Tokenizer.load(os.path.join(out, store_lib.TOKENIZER)).vocab_size,
        },
    }
    for task in tasks:
        with open(os.path.join(out, task.name + ".json")) as f:
            done = json.load(f)
        for key, shard in sorted(done["shards"].items()):
            entry = manifest.setdefault(task.kind, {}).setdefault(
                key, {"shards": [], "lines": 0, "tokens": 0, "skipped": {}}
            )
            entry["shards"].append({"path": task.shard(key), **{k: shard[k] for k in SHARD_FIELDS}})
            entry["lines"] += shard["lines"]
            entry["tokens"] += shard["tokens"]
            for kind, count in shard["skipped"].items():
                entry["skipped"][kind] = entry["skipped"].get(kind, 0) + count
    store_lib.write_manifest(out, manifest)
    return manifest


def tokenizer_sample(
    files: dict[str, dict[str, str]],
    tfds_inputs: Sequence[TfdsInput],
    per_language: int,
    reading: Reading,
) -> dict[str, list]:
    """Up to `per_language` usable documents of each language (both sides of pairs): the first
    ones of each input's first piece, or, for TFDS records that name their own language (a
    split may be grouped by language), of up to SAMPLE_PIECES pieces spread over the split. A
    balanced sample for training the tokenizer."""
    texts: dict[str, list[str]] = {}
    pieces: dict[str, list[Task]] = {}
    for task in plan(files, tfds_inputs, per_language * 2000):  # ample for `per_language`
        pieces.setdefault(task.source, []).append(task)
    sampled = []
    for found in pieces.values():
        spread = found[0].tfds is not None and not found[0].key
        step = -(-len(found) // SAMPLE_PIECES) if spread else len(found)
        sampled += found[::step]
    taken: dict[tuple[str, str], int] = {}  # (input, language) → documents sampled
    for task in sorted(sampled, key=lambda task: task.name):
        for key, (found, _) in sorted(documents(task, reading).items()):
            langs = key.split("-") if task.kind == store_lib.PARALLEL else [key]
            for column, lang in enumerate(langs):
                room = per_language - taken.get((task.source, lang), 0)
                chosen = [doc[column] for doc in found[: max(room, 0)]]
                taken[task.source, lang] = taken.get((task.source, lang), 0) + len(chosen)
                texts.setdefault(lang, []).extend(chosen)
    return texts


def prepare(
    *,
    out: str,
    mono_dir: str = "",
    parallel_dir: str = "",
    mono_tfds: Sequence[TfdsInput] = (),
    parallel_tfds: Sequence[TfdsInput] = (),
    tokenizer: str = "",
    vocab_size: int = 0,
    workers: int = 1,
    shard: tuple[int, int] = (0, 1),
    shard_mb: float = 64.0,
    max_line_bytes: int = 1_000_000,
    sentences_per_language: int = 10_000,
    seed: int = 0,
    text_field: str = "text",
    pair_text_fields: Sequence[str] = (),
    beam_options: Sequence[str] | None = None,
) -> dict | None:
    """Prepares (or finishes) the store `out`; returns its manifest, or None while pieces of
    other jobs (`shard`) are still missing. `beam_options` (a list, e.g. `["--runner=
    DirectRunner"]`) runs the pieces as an Apache Beam pipeline with those options instead."""
    tfds_inputs = [*mono_tfds, *parallel_tfds]
    if not (mono_dir or parallel_dir or tfds_inputs):
        raise DataError(
            "nothing to prepare: give --mono_dir, --parallel_dir, --mono_tfds or --parallel_tfds"
        )
    if bool(tokenizer) == bool(vocab_size):
        raise DataError("give --tokenizer MODEL or --vocab_size N (to train one), not both")
    files = {}
    if mono_dir:
        files[store_lib.MONO] = input_files(mono_dir, store_lib.MONO)
    if parallel_dir:
        files[store_lib.PARALLEL] = input_files(parallel_dir, store_lib.PARALLEL)
    os.makedirs(out, exist_ok=True)
    reading = Reading(max_line_bytes, text_field, tuple(pair_text_fields))
    sample = (sentences_per_language, reading, seed)
    _store_tokenizer(files, tfds_inputs, out, tokenizer, vocab_size, shard, sample)
    tasks = plan(files, tfds_inputs, int(shard_mb * 2**20))
    mine = [
        t for n, t in enumerate(tasks) if n % shard[1] == shard[0] and not finished(t, out, reading)
    ]
    if beam_options is not None:
        run_with_beam(mine, out, reading, beam_options)
    elif workers > 1 and len(mine) > 1:
        spawn = multiprocessing.get_context("spawn")  # no JAX here, but stay safe with threads
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=spawn) as pool:
            jobs = [pool.submit(run_task, task, out, reading) for task in mine]
            for job in jobs:
                job.result()
    else:
        for task in mine:
            run_task(task, out, reading)
    if not all(finished(task, out, reading) for task in tasks):
        return None
    return write_manifest(tasks, out)


def _store_tokenizer(files, tfds_inputs, out, tokenizer, vocab_size, shard, sample) -> None:
    """Puts the tokenizer into the store: a copy of `tokenizer`, or one trained on a sample; a
    store that has one keeps it, unless a different one is given."""
    path = os.path.join(out, store_lib.TOKENIZER)
    if tokenizer:
        if not os.path.isfile(tokenizer):
            raise DataError(f"--tokenizer {tokenizer}: no such file")
        if os.path.isfile(path):
            if store_lib.fingerprint(path) != store_lib.fingerprint(tokenizer):
                raise DataError(
                    f"{path} differs from --tokenizer {tokenizer}: the store was begun with "
                    "another tokenizer; use a new --out"
                )
            return
        shutil.copyfile(tokenizer, path + ".tmp")
        os.replace(path + ".tmp", path)
    elif not os.path.isfile(path):
        if shard[1] > 1:
            raise DataError(
                "--shard needs the tokenizer in the store first: run once without --shard to "
                "train it, or give --tokenizer"
            )
        per_language, reading, seed = sample
        texts = tokenizer_sample(files, tfds_inputs, per_language, reading)
        train_tokenizer(texts, path + ".tmp", vocab_size, seed=seed)
        os.replace(path + ".tmp", path)
    elif Tokenizer.load(path).vocab_size != vocab_size:
        raise DataError(
            f"{path} has {Tokenizer.load(path).vocab_size} ids, not --vocab_size {vocab_size}"
        )


def _shard_argument(text: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I/N, e.g. 0/8, got {text!r}") from None
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"I/N needs 0 <= I < N, got {text!r}")
    return index, count


def _fields(text: str) -> tuple[str, str]:
    fields = tuple(part.strip() for part in text.split(","))
    if len(fields) != 2 or not all(fields):
        raise argparse.ArgumentTypeError(f"expected two feature names A,B, got {text!r}")
    return fields


def main(argv: Sequence[str] | None = None) -> None:
    parser = programs.ArgumentParser(
        prog=PROGRAM,
        description="Tokenize a corpus once into a store that training reads by random access "
        "(--config.data.store=STORE); or check a store's every byte (--verify).",
    )
    parser.add_argument(
        "--mono_dir", default="", help="folder of <lang>.txt, <lang>.jsonl or <lang>.parquet"
    )
    parser.add_argument(
        "--parallel_dir", default="", help="folder of <l1>-<l2>.tsv, .jsonl or .parquet pairs"
    )
    parser.add_argument(
        "--mono_tfds",
        action="append",
        default=[],
        metavar="NAME[@SPLIT][=LANG]",
        help="a TFDS dataset of documents (repeatable); =LANG for all its records, else each "
        "record's --language_field",
    )
    parser.add_argument(
        "--parallel_tfds",
        action="append",
        default=[],
        metavar="NAME[@SPLIT][=L1-L2]",
        help="a TFDS dataset of pairs (repeatable); =L1-L2 for all its records, else each "
        "record's --pair_language_fields",
    )
    parser.add_argument("--tfds_data_dir", default="", help="where the TFDS datasets are")
    parser.add_argument(
        "--language_field", default="language", help="a --mono_tfds record's language feature"
    )
    parser.add_argument(
        "--pair_text_fields",
        type=_fields,
        default=(),
        help="a pair record's two texts (a <l1>-<l2>.jsonl object, .parquet row or "
        "--parallel_tfds record; default: the pair's codes, as TFDS's Translation names them, "
        "or source,target for TFDS records that name their languages)",
    )
    parser.add_argument(
        "--pair_language_fields",
        type=_fields,
        default=(),
        help="the features naming a --parallel_tfds record's two languages",
    )
    parser.add_argument("--tokenizer", default="", help="a SentencePiece model (Tokenizer ids)")
    parser.add_argument("--vocab_size", type=int, default=0, help="train a tokenizer of N ids")
    parser.add_argument("--out", required=True, help="the store folder (created or resumed)")
    parser.add_argument("--workers", type=int, default=1, help="processes tokenizing pieces")
    parser.add_argument("--shard", type=_shard_argument, default=(0, 1), help="job I of N")
    parser.add_argument("--shard_mb", type=float, default=64.0, help="input MB per piece")
    parser.add_argument(
        "--max_line_bytes", type=int, default=1_000_000, help="longer lines are skipped"
    )
    parser.add_argument(
        "--sentences_per_language",
        type=int,
        default=10_000,
        help="tokenizer training sample per language (with --vocab_size)",
    )
    parser.add_argument(
        "--text_field",
        default="text",
        help="the document of a .jsonl or .parquet record, or of a --mono_tfds record",
    )
    parser.add_argument(
        "--beam",
        action="store_true",
        help="run the pieces as an Apache Beam pipeline; other flags (--runner=..., "
        "--direct_num_workers=N, ...) are its pipeline options",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="read every shard of the store --out and compare its size and SHA-256 with the "
        "manifest's (a run checks sizes only)",
    )
    args, rest = parser.parse_known_args(argv)
    if rest and not args.beam:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.verify:
        return _verify(args.out, args.workers if args.workers > 1 else 8)
    tfds_options = dict(data_dir=args.tfds_data_dir)
    manifest = prepare(
        out=args.out,
        mono_dir=args.mono_dir,
        parallel_dir=args.parallel_dir,
        mono_tfds=[
            tfds_input(
                store_lib.MONO,
                spec,
                text_fields=(args.text_field,),
                language_fields=(args.language_field,),
                **tfds_options,
            )
            for spec in args.mono_tfds
        ],
        parallel_tfds=[
            tfds_input(
                store_lib.PARALLEL,
                spec,
                text_fields=args.pair_text_fields,
                language_fields=args.pair_language_fields,
                **tfds_options,
            )
            for spec in args.parallel_tfds
        ],
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
        workers=args.workers,
        shard=args.shard,
        shard_mb=args.shard_mb,
        max_line_bytes=args.max_line_bytes,
        sentences_per_language=args.sentences_per_language,
        text_field=args.text_field,
        pair_text_fields=args.pair_text_fields,
        beam_options=rest if args.beam else None,
    )
    if manifest is None:
        print(f"{args.out}: pieces of other jobs are still missing; the last job writes the "
              "manifest")  # fmt: skip
        return
    for kind in (store_lib.MONO, store_lib.PARALLEL):
        for key, entry in manifest.get(kind, {}).items():
            skipped = sum(entry["skipped"].values())
            print(f"{kind} {key}: {entry['lines']} lines, {entry['tokens']} tokens, "
                  f"{skipped} skipped, {len(entry['shards'])} shards")  # fmt: skip
    print(f"store: {os.path.abspath(args.out)} (--config.data.store={args.out})")


def _verify(store: str, workers: int) -> None:
    """Each shard that differs from the manifest on a line, and what repairs the store."""
    checked, resized, changed = store_lib.verify_store(store, workers)
    for problem in (*resized, *changed):
        print(problem)
    if not (resized or changed):
        print(f"{os.path.abspath(store)}: all {checked} shards match the manifest")
        return
    repair = "run the same prepare command again: it redoes just their pieces"
    if changed:  # a run checks sizes only: it would keep a shard whose bytes changed in place
        repair = f"delete the {len(changed)} whose SHA-256 differs, then {repair}"
    differ = f"{len(resized) + len(changed)} of {checked} shards differ from the manifest"
    programs.exit_with(f"{differ} ({os.path.abspath(store)}): {repair}", programs.FAILED)


if __name__ == "__main__":
    programs.run(main)
