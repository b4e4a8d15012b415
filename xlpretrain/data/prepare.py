"""`python -m xlpretrain.data.prepare --mono_dir DIR --parallel_dir DIR (--tokenizer MODEL |
--vocab_size N) --out STORE [--workers N] [--shard I/N]`: tokenize a corpus once into a store
that training reads by random access (`--config.data.store=STORE`; layout in
`xlpretrain.data.store`).

Monolingual inputs are `<lang>.txt` (a line a document), `<lang>.jsonl` (a JSON object a line,
the document under `--text_field`) or `<lang>.parquet` (a row a document, column
`--text_field`); parallel inputs are `<l1>-<l2>.tsv`. Each input file is cut into pieces of
about `--shard_mb` (byte ranges at line starts; runs of row groups for Parquet); one piece is
one task, a pure function of its bytes and the tokenizer: it keeps the usable documents (the
folder sources' rules; a JSON line that does not parse or has no text counts as `bad_fields`),
counts the skipped ones by kind, tokenizes the rest and writes one ArrayRecord shard, then a
small JSON beside it that marks the shard finished. So the work can be split any way —
`--workers N` processes here, `--shard I/N` for job I of an array of N (SLURM), or `--beam`
for an Apache Beam pipeline (the DirectRunner here; Flink, Spark or Dataflow with the store on
a filesystem every worker mounts) — and the store's bytes are the same whichever way it ran.
Re-running resumes: finished shards are kept, anything half-written is redone (shards are
written under a temporary name and renamed). The manifest is written by the run that finds
every shard finished.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import multiprocessing
import os
import shutil
import sys
from collections.abc import Sequence

from xlpretrain.data import store as store_lib
from xlpretrain.data.sources import (
    DataError,
    pair_fields_ok,
    parse_pair,
    skip_counts,
    usable_lines,
)
from xlpretrain.tokenizer import Tokenizer, train_tokenizer

FORMATS = {store_lib.MONO: (".txt", ".jsonl", ".parquet"), store_lib.PARALLEL: (".tsv",)}
PROGRAM = "python -m xlpretrain.data.prepare"


@dataclasses.dataclass(frozen=True)
class Task:
    """One shard: a piece of one input file (a byte range; for Parquet a range of row groups),
    and where its records go."""

    kind: str  # store.MONO or store.PARALLEL
    key: str  # the language, or the pair as 'l1-l2'
    source: str  # the input file
    index: int  # the shard's number within its key
    start: int
    end: int

    @property
    def name(self) -> str:
        return f"{self.kind}/{self.key}/{self.index:05d}"


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


def plan(files: dict[str, dict[str, str]], shard_bytes: int) -> list[Task]:
    """Every shard of every input file: ranges of about `shard_bytes`, cut after a newline."""
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
    return tasks


def _row_group_tasks(kind: str, key: str, path: str, shard_bytes: int) -> list[Task]:
    """Runs of a Parquet file's row groups of about `shard_bytes` (uncompressed) each."""
    import pyarrow.parquet as pq

    metadata = pq.ParquetFile(path).metadata
    tasks, start, size = [], 0, 0
    for group in range(metadata.num_row_groups):
        size += metadata.row_group(group).total_byte_size
        if size >= shard_bytes or group == metadata.num_row_groups - 1:
            tasks.append(Task(kind, key, path, len(tasks), start, group + 1))
            start, size = group + 1, 0
    return tasks


def documents(task: Task, max_line_bytes: int, text_field: str) -> tuple[list[str], dict]:
    """The usable documents of a task's piece (a pair's as 'first<TAB>second'), and the
    counts of the skipped ones by kind."""
    if task.source.endswith(".parquet"):
        return _parquet_documents(task, max_line_bytes, text_field)
    with open(task.source, "rb") as f:
        f.seek(task.start)
        raw = f.read(task.end - task.start)
    parallel = task.kind == store_lib.PARALLEL
    lines, skipped = usable_lines(
        raw, max_line_bytes=max_line_bytes, fields_ok=pair_fields_ok if parallel else None
    )
    if not task.source.endswith(".jsonl"):
        return lines, skipped
    texts = []
    for line in lines:
        try:
            text = json.loads(line).get(text_field)
        except (ValueError, AttributeError):  # not JSON, or not an object
            text = None
        if isinstance(text, str) and text.strip():
            texts.append(text)
        else:
            skipped["bad_fields"] += 1
    return texts, skipped


def _parquet_documents(task: Task, max_line_bytes: int, text_field: str):
    import pyarrow.parquet as pq

    source = pq.ParquetFile(task.source)
    if text_field not in source.schema_arrow.names:
        raise DataError(
            f"{task.source}: no column {text_field!r} (it has {source.schema_arrow.names}); "
            "name the documents' column with --text_field"
        )
    table = source.read_row_groups(range(task.start, task.end), columns=[text_field])
    texts, skipped = [], skip_counts()
    for text in table.column(text_field).to_pylist():
        if not isinstance(text, str):
            skipped["bad_fields"] += 1
        elif not text.strip():
            skipped["empty"] += 1
        elif len(text.encode("utf-8")) > max_line_bytes:
            skipped["too_long"] += 1
        else:
            texts.append(text)
    return texts, skipped


def run_task(task: Task, out: str, max_line_bytes: int, text_field: str = "text") -> None:
    """Tokenizes one shard into `out` (a pure function of its bytes and the store's tokenizer);
    nothing is left under the final names unless it finished."""
    from array_record.python.array_record_module import ArrayRecordWriter

    tokenizer = Tokenizer.load(os.path.join(out, store_lib.TOKENIZER))
    parallel = task.kind == store_lib.PARALLEL
    lines, skipped = documents(task, max_line_bytes, text_field)
    path = os.path.join(out, task.name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.array_record.tmp{os.getpid()}"
    writer = ArrayRecordWriter(temporary, "group_size:1")
    encoded = _encoded(tokenizer, lines, parallel)
    for start in range(0, len(encoded), store_lib.BLOCK):
        writer.write(store_lib.encode_block(encoded[start : start + store_lib.BLOCK]))
    tokens = sum(len(side) for line in encoded for side in line)
    writer.close()
    os.replace(temporary, path + ".array_record")
    done = {
        "lines": len(lines),
        "tokens": tokens,
        "skipped": skipped,
        "made_from": made_from(task, max_line_bytes, text_field),
    }
    with open(f"{path}.json.tmp{os.getpid()}", "w") as f:
        json.dump(done, f, sort_keys=True)
    os.replace(f"{path}.json.tmp{os.getpid()}", path + ".json")


def _encoded(tokenizer: Tokenizer, lines: list[str], parallel: bool) -> list[tuple]:
    """Each line's token ids: `(ids,)`, or a pair's `(first, second)`."""
    if not parallel:
        return [(ids,) for ids in tokenizer.encode_batch(lines, num_threads=1)]
    sides = [line.split("\t") for line in lines]
    firsts = tokenizer.encode_batch([s[0] for s in sides], num_threads=1)
    seconds = tokenizer.encode_batch([s[1] for s in sides], num_threads=1)
    return list(zip(firsts, seconds, strict=True))


def run_with_beam(
    tasks: Sequence[Task], out: str, max_line_bytes: int, text_field: str, options: Sequence[str]
) -> None:
    """The shards as an Apache Beam pipeline: one element per task, spread by a reshuffle."""
    try:
        import apache_beam as beam
        from apache_beam.options.pipeline_options import PipelineOptions
    except ImportError:
        raise DataError("--beam needs Apache Beam: pip install apache-beam") from None
    with beam.Pipeline(options=PipelineOptions(list(options))) as pipeline:
        _ = (
            pipeline
            | "shards" >> beam.Create(list(tasks))
            | "spread" >> beam.Reshuffle()
            | "tokenize" >> beam.Map(run_task, out, max_line_bytes, text_field)
        )


def made_from(task: Task, max_line_bytes: int, text_field: str) -> dict:
    """What a shard was made from, kept in its JSON: a re-run with other inputs or settings
    redoes the shard instead of keeping it."""
    return {
        "input": os.path.basename(task.source),
        "input_bytes": os.path.getsize(task.source),
        "piece": [task.start, task.end],
        "max_line_bytes": max_line_bytes,
        "text_field": text_field,
    }


def finished(task: Task, out: str, max_line_bytes: int, text_field: str) -> bool:
    """Whether the shard was written, from these inputs and settings."""
    path = os.path.join(out, task.name)
    if not (os.path.isfile(path + ".json") and os.path.isfile(path + ".array_record")):
        return False
    with open(path + ".json") as f:
        try:
            done = json.load(f)
        except ValueError:
            return False
    return done.get("made_from") == made_from(task, max_line_bytes, text_field)


def write_manifest(tasks: Sequence[Task], out: str) -> dict:
    """The manifest, from the finished shards' JSONs (every shard must be finished)."""
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
        entry = manifest.setdefault(task.kind, {}).setdefault(
            task.key, {"shards": [], "lines": 0, "tokens": 0, "skipped": {}}
        )
        entry["shards"].append(
            {"path": task.name + ".array_record", "lines": done["lines"], "tokens": done["tokens"]}
        )
        entry["lines"] += done["lines"]
        entry["tokens"] += done["tokens"]
        for kind, count in done["skipped"].items():
            entry["skipped"][kind] = entry["skipped"].get(kind, 0) + count
    temporary = os.path.join(out, store_lib.MANIFEST + ".tmp")
    with open(temporary, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(temporary, os.path.join(out, store_lib.MANIFEST))
    return manifest


def tokenizer_sample(
    files: dict[str, dict[str, str]], per_language: int, max_line_bytes: int, text_field: str
) -> dict[str, list]:
    """The first `per_language` usable documents of each language (both sides of pair files),
    from each input's first shard: a balanced sample for training the tokenizer."""
    texts: dict[str, list[str]] = {}
    first_shards = {
        (task.kind, task.key): task
        for task in reversed(plan(files, per_language * 2000))  # ample for `per_language`
    }
    for (kind, key), task in sorted(first_shards.items()):
        lines = documents(task, max_line_bytes, text_field)[0][:per_language]
        if kind == store_lib.PARALLEL:
            sides = [line.split("\t") for line in lines]
            for column, lang in enumerate(key.split("-")):
                texts.setdefault(lang, []).extend(side[column] for side in sides)
        else:
            texts.setdefault(key, []).extend(lines)
    return texts


def prepare(
    *,
    out: str,
    mono_dir: str = "",
    parallel_dir: str = "",
    tokenizer: str = "",
    vocab_size: int = 0,
    workers: int = 1,
    shard: tuple[int, int] = (0, 1),
    shard_mb: float = 64.0,
    max_line_bytes: int = 1_000_000,
    sentences_per_language: int = 10_000,
    seed: int = 0,
    text_field: str = "text",
    beam_options: Sequence[str] | None = None,
) -> dict | None:
    """Prepares (or finishes) the store `out`; returns its manifest, or None while shards of
    other jobs (`shard`) are still missing. `beam_options` (a list, e.g. `["--runner=
    DirectRunner"]`) runs the shards as an Apache Beam pipeline with those options instead."""
    if not (mono_dir or parallel_dir):
        raise DataError("nothing to prepare: give --mono_dir, --parallel_dir or both")
    if bool(tokenizer) == bool(vocab_size):
        raise DataError("give --tokenizer MODEL or --vocab_size N (to train one), not both")
    files = {}
    if mono_dir:
        files[store_lib.MONO] = input_files(mono_dir, store_lib.MONO)
    if parallel_dir:
        files[store_lib.PARALLEL] = input_files(parallel_dir, store_lib.PARALLEL)
    os.makedirs(out, exist_ok=True)
    sample = (sentences_per_language, max_line_bytes, seed, text_field)
    _store_tokenizer(files, out, tokenizer, vocab_size, shard, sample)
    tasks = plan(files, int(shard_mb * 2**20))
    settings = (max_line_bytes, text_field)
    mine = [
        t
        for n, t in enumerate(tasks)
        if n % shard[1] == shard[0] and not finished(t, out, *settings)
    ]
    if beam_options is not None:
        run_with_beam(mine, out, max_line_bytes, text_field, beam_options)
    elif workers > 1 and len(mine) > 1:
        spawn = multiprocessing.get_context("spawn")  # no JAX here, but stay safe with threads
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=spawn) as pool:
            jobs = [pool.submit(run_task, task, out, max_line_bytes, text_field) for task in mine]
            for job in jobs:
                job.result()
    else:
        for task in mine:
            run_task(task, out, max_line_bytes, text_field)
    if not all(finished(task, out, *settings) for task in tasks):
        return None
    return write_manifest(tasks, out)


def _store_tokenizer(files, out, tokenizer, vocab_size, shard, sample) -> None:
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
        per_language, max_line_bytes, seed, text_field = sample
        texts = tokenizer_sample(files, per_language, max_line_bytes, text_field)
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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Tokenize text folders once into a store that training reads by random "
        "access (--config.data.store=STORE).",
    )
    parser.add_argument(
        "--mono_dir", default="", help="folder of <lang>.txt, <lang>.jsonl or <lang>.parquet"
    )
    parser.add_argument("--parallel_dir", default="", help="folder of <l1>-<l2>.tsv pairs")
    parser.add_argument("--tokenizer", default="", help="a SentencePiece model (Tokenizer ids)")
    parser.add_argument("--vocab_size", type=int, default=0, help="train a tokenizer of N ids")
    parser.add_argument("--out", required=True, help="the store folder (created or resumed)")
    parser.add_argument("--workers", type=int, default=1, help="processes tokenizing shards")
    parser.add_argument("--shard", type=_shard_argument, default=(0, 1), help="job I of N")
    parser.add_argument("--shard_mb", type=float, default=64.0, help="input MB per shard")
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
        "--text_field", default="text", help="the document of a .jsonl or .parquet record"
    )
    parser.add_argument(
        "--beam",
        action="store_true",
        help="run the shards as an Apache Beam pipeline; other flags (--runner=..., "
        "--direct_num_workers=N, ...) are its pipeline options",
    )
    args, rest = parser.parse_known_args(argv)
    if rest and not args.beam:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        manifest = prepare(
            out=args.out,
            mono_dir=args.mono_dir,
            parallel_dir=args.parallel_dir,
            tokenizer=args.tokenizer,
            vocab_size=args.vocab_size,
            workers=args.workers,
            shard=args.shard,
            shard_mb=args.shard_mb,
            max_line_bytes=args.max_line_bytes,
            sentences_per_language=args.sentences_per_language,
            text_field=args.text_field,
            beam_options=rest if args.beam else None,
        )
    except (DataError, ValueError, OSError) as error:
        parser.exit(2, f"{PROGRAM}: error: {error}\n")
    if manifest is None:
        print(f"{args.out}: shards of other jobs are still missing; the last job writes the "
              "manifest")  # fmt: skip
        return
    for kind in (store_lib.MONO, store_lib.PARALLEL):
        for key, entry in manifest.get(kind, {}).items():
            skipped = sum(entry["skipped"].values())
            print(f"{kind} {key}: {entry['lines']} lines, {entry['tokens']} tokens, "
                  f"{skipped} skipped, {len(entry['shards'])} shards")  # fmt: skip
    print(f"store: {os.path.abspath(args.out)} (--config.data.store={args.out})")


if __name__ == "__main__":
    sys.exit(main())
