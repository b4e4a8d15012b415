"""The retrieval tasks' files, BUCC 2018 and Tatoeba: no training data, so every file is a
reference and a bad line is an error naming file:line.

BUCC: `{lang}-en.{split}.{lang}` and `{lang}-en.{split}.en` hold one `id<TAB>sentence` per line
(ids such as `de-000000001`); `{lang}-en.dev.gold` holds the true pairs, `source id<TAB>English
id`. The download script renames BUCC's training split to `test` and its sample to `dev`, and
deletes the test gold (the submission's labels are XTREME's).

Tatoeba: `{lang}-en.{lang}` holds the source sentences, one per line, and `{lang}-en.en` their
English translations, sorted (utils_preprocess.py sorts them, hiding the alignment; the sort
order of line `i` is the index of its source sentence, the gold).
"""

from __future__ import annotations

import dataclasses
import os

from xlpretrain.data.corpora.sources import DataError
from xlpretrain.data.xtreme.lines import BadLines, decoded_lines

__all__ = ["BuccSplit", "TatoebaSplit", "read_bucc", "read_tatoeba"]


@dataclasses.dataclass(frozen=True)
class BuccSplit:
    """One language's BUCC split: each side's sentences by id, in file order, and the gold
    pairs (source id, English id) where XTREME ships them (dev)."""

    source: dict[str, str]
    english: dict[str, str]
    gold: tuple[tuple[str, str], ...] | None


@dataclasses.dataclass(frozen=True)
class TatoebaSplit:
    """One language's Tatoeba test: the source sentences and, in XTREME's sorted order, the
    English ones."""

    source: tuple[str, ...]
    english: tuple[str, ...]


def read_bucc(
    source_path: str | os.PathLike,
    english_path: str | os.PathLike,
    gold_path: str | os.PathLike | None = None,
) -> BuccSplit:
    """Reads one BUCC split (and its gold, if given); every gold id must be a sentence's."""
    source, english = _id_sentences(source_path), _id_sentences(english_path)
    if gold_path is None:
        return BuccSplit(source, english, None)
    gold = []
    for number, fields in _fields(gold_path):
        if len(fields) != 2:
            raise DataError(f"{gold_path}:{number}: expected 2 fields, source id and English id")
        for known, name, path in (
            (source, fields[0], source_path),
            (english, fields[1], english_path),
        ):
            if name not in known:
                raise DataError(f"{gold_path}:{number}: no sentence {name!r} in {path}")
        gold.append((fields[0], fields[1]))
    return BuccSplit(source, english, tuple(gold))


def read_tatoeba(source_path: str | os.PathLike, english_path: str | os.PathLike) -> TatoebaSplit:
    """Reads one language's Tatoeba files, which must have as many lines as each other."""
    source = tuple(text for _, text in _lines(source_path))
    english = tuple(text for _, text in _lines(english_path))
    if len(source) != len(english):
        raise DataError(
            f"{source_path} has {len(source)} lines but {english_path} has {len(english)}"
        )
    return TatoebaSplit(source, english)


def _lines(path: str | os.PathLike) -> list[tuple[int, str]]:
    lines = list(decoded_lines(path, BadLines(path, training=False)))
    if not lines:
        raise DataError(f"{path} is empty")
    return lines


def _fields(path: str | os.PathLike) -> list[tuple[int, list[str]]]:
    return [(number, text.split("\t")) for number, text in _lines(path)]


def _id_sentences(path: str | os.PathLike) -> dict[str, str]:
    sentences: dict[str, str] = {}
    for number, fields in _fields(path):
        if len(fields) != 2 or not fields[0].strip():
            raise DataError(f"{path}:{number}: expected 2 fields, an id and a sentence")
        if fields[0] in sentences:
            raise DataError(f"{path}:{number}: id {fields[0]!r} given twice")
        sentences[fields[0]] = fields[1]
    return sentences
