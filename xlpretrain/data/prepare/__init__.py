"""Tokenize a corpus once into a prepared store (`xlpretrain.data.corpora.store`) that training
reads by random access; the command line is `python -m xlpretrain.data.prepare` (`__main__.py`).

Each input (`inputs`) is cut into pieces of about `shard_mb`: byte ranges at line starts, runs
of row groups for Parquet, ranges of records for TFDS. One piece is one task, a pure function
of its bytes and the tokenizer (`vocabulary`): it keeps the usable documents (`readers`),
counts the skipped ones by kind, tokenizes the rest and writes one ArrayRecord shard per key
(language, or pair) it holds, then a small JSON that marks the piece finished (`shards`). So
the work can be split any way (`runners`: worker processes, a job array's `shard`, an Apache
Beam pipeline) and the store's bytes are the same whichever way it ran. Re-running resumes:
finished pieces are kept, anything half-written or of the wrong size is redone. The manifest
(`manifest`) is written by the run that finds every piece finished.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from xlpretrain.data.corpora import store as store_lib
from xlpretrain.data.corpora.sources import DataError
from xlpretrain.data.prepare.inputs import TfdsInput, input_files, plan, tfds_input
from xlpretrain.data.prepare.manifest import write_manifest
from xlpretrain.data.prepare.readers import Reading
from xlpretrain.data.prepare.runners import run_pieces
from xlpretrain.data.prepare.shards import finished
from xlpretrain.data.prepare.vocabulary import Sample, store_tokenizer

__all__ = ["TfdsInput", "prepare", "tfds_input"]


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
    character_coverage: float = 0.9995,
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
    sample = Sample(sentences_per_language, reading, seed, character_coverage)
    store_tokenizer(files, tfds_inputs, out, tokenizer, vocab_size, shard, sample)
    tasks = plan(files, tfds_inputs, int(shard_mb * 2**20))
    mine = [
        t for n, t in enumerate(tasks) if n % shard[1] == shard[0] and not finished(t, out, reading)
    ]
    run_pieces(mine, out, reading, workers, beam_options)
    if not all(finished(task, out, reading) for task in tasks):
        return None
    return write_manifest(tasks, out)
