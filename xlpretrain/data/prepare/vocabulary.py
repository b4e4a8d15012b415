"""The store's tokenizer: a copy of the one given (a SentencePiece model or a `tokenizer.json`),
or a SentencePiece model trained on a balanced sample of the inputs' first usable documents per
language. Every shard is encoded with it, so a store keeps one for good.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from typing import NamedTuple

from xlpretrain.data.corpora import store as store_lib
from xlpretrain.data.corpora.sources import DataError
from xlpretrain.data.prepare.inputs import Task, TfdsInput, plan
from xlpretrain.data.prepare.readers import Reading, documents
from xlpretrain.data.tokenizer import (
    SentencePieceTokenizer,
    Tokenizer,
    VocabularySizeError,
    tokenizer_file,
    train_tokenizer,
)

SAMPLE_PIECES = 32  # pieces of a self-labelled TFDS split read for the tokenizer's sample
# How `prepare`'s command line spells the tokenizer's settings, for the remedies errors suggest.
_FLAGS = {
    "vocab_size": "--vocab_size",
    "sentences_per_language": "--sentences_per_language",
    "character_coverage": "--character_coverage",
}


class Sample(NamedTuple):
    """What a trained tokenizer learns from: lines per language, how they are read, the seed
    choosing them, and the share of their characters it covers."""

    per_language: int
    reading: Reading
    seed: int
    character_coverage: float


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


def store_tokenizer(
    files: dict[str, dict[str, str]],
    tfds_inputs: Sequence[TfdsInput],
    out: str,
    tokenizer: str,
    vocab_size: int,
    shard: tuple[int, int],
    sample: Sample,
) -> None:
    """Puts the tokenizer into the store: a copy of `tokenizer`, or one trained on `sample`; a
    store that has one keeps it, unless a different one is given."""
    kept = tokenizer_file(out)
    if tokenizer:
        if not os.path.isfile(tokenizer):
            raise DataError(f"--tokenizer {tokenizer}: no such file")
        if kept is not None:
            if store_lib.fingerprint(kept) != store_lib.fingerprint(tokenizer):
                raise DataError(
                    f"{kept} differs from --tokenizer {tokenizer}: the store was begun with "
                    "another tokenizer; use a new --out"
                )
            return
        try:
            _put(Tokenizer.load(tokenizer), out)
        except ValueError as error:  # not a tokenizer of ours, e.g. a role it lacks
            raise DataError(f"--tokenizer {tokenizer}: {error}") from None
    elif kept is None:
        if shard[1] > 1:
            raise DataError(
                "--shard needs the tokenizer in the store first: run once without --shard to "
                "train it, or give --tokenizer"
            )
        texts = tokenizer_sample(files, tfds_inputs, sample.per_language, sample.reading)
        path = os.path.join(out, SentencePieceTokenizer.FILE)
        try:
            train_tokenizer(
                texts,
                path + ".tmp",
                vocab_size,
                seed=sample.seed,
                character_coverage=sample.character_coverage,
            )
        except VocabularySizeError as error:
            raise DataError(error.remedy(_FLAGS)) from None
        os.replace(path + ".tmp", path)
    elif Tokenizer.load(kept).vocab_size != vocab_size:
        raise DataError(
            f"{kept} has {Tokenizer.load(kept).vocab_size} ids, not --vocab_size {vocab_size}"
        )


def _put(tokenizer: Tokenizer, out: str) -> None:
    """Saves `tokenizer` into the store through a staging folder, its own file last: a store
    that has that file has the whole tokenizer (a `tokenizer.json`'s config beside it)."""
    staging = os.path.join(out, "tokenizer.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    tokenizer.save(os.path.join(staging, tokenizer.FILE))
    for name in sorted(os.listdir(staging), key=lambda name: name == tokenizer.FILE):
        os.replace(os.path.join(staging, name), os.path.join(out, name))
    os.rmdir(staging)
