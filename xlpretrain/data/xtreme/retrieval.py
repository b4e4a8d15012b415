"""The retrieval tasks' files, BUCC 2018 and Tatoeba: no training data, so every file is a
reference and a bad line is an error naming file:line.

BUCC: `{lang}-en.{split}.{lang}` and `{lang}-en.{split}.en` hold one `id<TAB>sentence` per line
(ids such as `de-000000001`; the first tab separates, so a sentence may hold tabs);
`{lang}-en.dev.gold` holds the true pairs, `source id<TAB>English id`. The download script
renames BUCC's training split to `test` and its sample to `dev`, and deletes the test gold (the
submission's labels are XTREME's). The same readers serve BUCC's own files
(`<l1>-<l2>.<split>.{l1,l2,gold}`) for the pre-trained encoder's mining evaluation
(`eval.benchmarks.read_mining_sets`).

Tatoeba: `{lang}-en.{lang}` holds the source sentences, one per line, and `{lang}-en.en` their
English translations, sorted (utils_preprocess.py sorts them, hiding the alignment; the sort
order of line `i` is the index of its source sentence, the gold).
"""

from __future__ import annotations

import dataclasses
import os

from xlpretrain.data.corpora.sources import DataError
from xlpretrain.data.xtreme.lines import BadLines, decoded_lines

__all__ = [
    "BuccSplit",
    "TatoebaSplit",
    "read_bucc",
    "read_gold_pairs",
    "read_id_sentences",
    "read_tatoeba",
]


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
    source, english = read_id_sentences(source_path), read_id_sentences(english_path)
    if gold_path is None:
        return BuccSplit(source, english, None)
    sides = ((source, source_path), (english, english_path))
    return BuccSplit(source, english, read_gold_pairs(gold_path, sides))


def read_id_sentences(path: str | os.PathLike) -> dict[str, str]:
    """The sentences of a file of `id<TAB>sentence` lines by id, in file order (the first tab
    separates: a sentence may hold tabs); a line without a tab or an id, or an id given twice,
    is an error naming file:line."""
    sentences: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, text in _lines(path):
        name, tab, sentence = text.partition("\t")
        if not tab or not name.strip():
            raise DataError(f"{path}:{number}: expected ID<TAB>sentence, got {text[:80]!r}")
        if name in sentences:
            raise DataError(f"{path}:{number}: ID {name!r} is also on line {lines[name]}")
        sentences[name], lines[name] = sentence, number
    return sentences


def read_gold_pairs(
    path: str | os.PathLike, sides: tuple[tuple[dict[str, str], str | os.PathLike], ...]
) -> tuple[tuple[str, str], ...]:
    """The `id<TAB>id` lines of a gold file, each id one of its side's sentences (`sides`: each
    side's sentences by id and its file)."""
    gold = []
    for number, text in _lines(path):
        fields = text.split("\t")
        if len(fields) != 2:
            raise DataError(f"{path}:{number}: expected ID_l1<TAB>ID_l2, got {text[:80]!r}")
        for name, (known, side) in zip(fields, sides, strict=True):
            if name not in known:
                raise DataError(f"{path}:{number}: ID {name!r} is not in {side}")
        gold.append((fields[0], fields[1]))
    return tuple(gold)


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
