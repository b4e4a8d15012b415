"""The files of the public sentence-retrieval benchmarks, as their distributions lay them out,
for `python -m xlpretrain.eval.retrieval --format tatoeba|bucc`.

Tatoeba (Artetxe & Schwenk 2019; LASER's `data/tatoeba/v1`, the files XTREME's download
script fetches): per pair two files, `tatoeba.<l1>-<l2>.<l1>` and `tatoeba.<l1>-<l2>.<l2>`,
line i of one the translation of line i of the other (1,000 lines for most languages). A
`TatoebaSource` is a `ParallelCorpus`, so `alignment.retrieval_accuracy` scores it as it
scores a folder of `.tsv` files. (XTREME's own preprocessed copy, `<xx>-en.<xx>`, sorts the
English side and keeps the alignment as hidden labels: it cannot be scored here.)

BUCC 2017/2018 (Zweigenbaum et al.): per pair and split, `<l1>-<l2>.<split>.<l1>` and
`<l1>-<l2>.<split>.<l2>` of `ID<TAB>sentence` lines, and `<l1>-<l2>.<split>.gold` of
`ID_l1<TAB>ID_l2` lines, the few sentences that have a translation on the other side. Every
gold file is one `MiningSet` (the official test split has no public gold, so it is not one).

Unlike a training corpus, whose bad lines are skipped and counted, these files are references:
an ID that cannot be read would silently change what is scored, so a malformed BUCC line, a
duplicate ID or a gold ID missing from its side is a `DataError` naming the file and line
(BUCC's files are read by the readers of XTREME's copy of them, `data.xtreme.retrieval`).
Tatoeba keeps the training rule (a line pair with a bad side is skipped and counted), since
skipping both sides of a pair keeps the alignment; different line counts are an error.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence

from xlpretrain.data.corpora.sources import (
    KINDS,
    MAX_EXAMPLES,
    DataError,
    FileStats,
    Pair,
    ParallelBase,
    as_pair,
    classify,
    parse_pair,
    reject_string,
)
from xlpretrain.data.xtreme.retrieval import read_gold_pairs, read_id_sentences

__all__ = ["MiningSet", "TatoebaSource", "read_mining_sets"]

MAX_LINE_BYTES = 1_000_000  # as `ParallelSource.from_dir`: longer lines are skipped
TATOEBA_FILE = re.compile(r"tatoeba\.([^.]+)\.[^.]+")  # tatoeba.<l1>-<l2>.<lang>
BUCC_GOLD = re.compile(r"([^.]+)\.([^.]+)\.gold")  # <l1>-<l2>.<split>.gold


class _AlignedLines(list):
    """(l1, l2) texts held in memory: the `LineIndex` of one Tatoeba pair."""

    def read(self, index: int) -> tuple[str, str]:
        return self[index]


class TatoebaSource(ParallelBase):
    """A folder of Tatoeba pairs (`tatoeba.<l1>-<l2>.<l1>` + `.<l2>`), keyed by (l1, l2).

    A few thousand lines per pair: read into memory, not indexed like `ParallelSource`.
    """

    @classmethod
    def from_dir(
        cls, path: str | os.PathLike[str], *, pairs: Sequence[Pair | str] | None = None
    ) -> TatoebaSource:
        """Reads every pair of the folder, or those of `pairs` ('l1-l2' or tuples)."""
        reject_string(pairs, "pairs")
        folder = _folder(path)
        found = tatoeba_pairs(folder)
        if not found:
            raise DataError(
                f"no tatoeba.<l1>-<l2>.<l1> and tatoeba.<l1>-<l2>.<l2> files in {folder} (as in "
                "LASER's data/tatoeba/v1)"
            )
        wanted = sorted(found) if pairs is None else sorted({as_pair(pair) for pair in pairs})
        missing = [f"{l1}-{l2}" for l1, l2 in wanted if (l1, l2) not in found]
        if missing:
            raise DataError(f"Tatoeba pair(s) {', '.join(missing)} not found in {folder}")
        files, stats = {}, {}
        for pair in wanted:
            lines, stats[pair] = read_aligned(*found[pair])
            files[pair] = _AlignedLines(lines)
        return cls(folder, files, stats)

    def line(self, pair: Pair | str, index: int) -> tuple[str, str]:
        return self._file(as_pair(pair)).read(index)


def tatoeba_pairs(folder: str) -> dict[Pair, tuple[str, str]]:
    """The pairs of a folder and their two files; a pair with one file is an error."""
    stems = sorted(
        {match[1] for name in os.listdir(folder) if (match := TATOEBA_FILE.fullmatch(name))}
    )
    found = {}
    for stem in stems:
        pair = parse_pair(stem, os.path.join(folder, f"tatoeba.{stem}.*"))
        paths = tuple(os.path.join(folder, f"tatoeba.{stem}.{lang}") for lang in pair)
        for side in paths:
            if not os.path.isfile(side):
                raise DataError(
                    f"{side} is missing: a Tatoeba pair is two files, "
                    f"{' and '.join(os.path.basename(p) for p in paths)}"
                )
        found[pair] = paths
    return found


def read_aligned(first: str, second: str) -> tuple[list[tuple[str, str]], FileStats]:
    """The usable line pairs of two line-aligned files, and what was skipped (a line pair is
    classified as one `.tsv` line would be: `bad_fields` if one side is blank)."""
    sides = [_read_lines(first), _read_lines(second)]
    if len(sides[0]) != len(sides[1]):
        raise DataError(
            f"{first} has {len(sides[0])} lines but {second} has {len(sides[1])}: line i of "
            "one must be the translation of line i of the other"
        )
    usable = []
    problems: dict[str, list[int]] = {kind: [] for kind in KINDS}
    for number, texts in enumerate(zip(*sides, strict=True), 1):
        kind = classify(texts, MAX_LINE_BYTES)
        if kind is None:
            usable.append((texts[0].decode("utf-8"), texts[1].decode("utf-8")))
        else:
            problems[kind].append(number)
    stats = FileStats(
        path=f"{first} + {os.path.basename(second)}",
        total=len(sides[0]),
        used=len(usable),
        **{kind: len(lines) for kind, lines in problems.items()},
        examples={kind: lines[:MAX_EXAMPLES] for kind, lines in problems.items() if lines},
    )
    if not usable:
        raise DataError(f"{stats.path}: no usable line pair ({stats.why_unusable()})")
    return usable, stats


@dataclasses.dataclass(frozen=True)
class MiningSet:
    """One BUCC-style set: each side's IDs and sentences (row i of `ids[s]` is the ID of
    `texts[s][i]`), and the gold pairs as (l1 row, l2 row)."""

    name: str  # "<l1>-<l2>.<split>"
    pair: Pair
    ids: tuple[list[str], list[str]]
    texts: tuple[list[str], list[str]]
    gold: frozenset[tuple[int, int]]

    def head(self, count: int) -> MiningSet:
        """The first `count` sentences of each side and the gold pairs among them: a quick
        look at a large set, whose F1 is not the whole set's."""
        gold = frozenset((a, b) for a, b in self.gold if a < count and b < count)
        if not gold:
            raise DataError(f"{self.name}: no gold pair among the first {count} lines of a side")
        ids = (self.ids[0][:count], self.ids[1][:count])
        texts = (self.texts[0][:count], self.texts[1][:count])
        return dataclasses.replace(self, ids=ids, texts=texts, gold=gold)


def read_mining_sets(
    path: str | os.PathLike[str], *, pairs: Sequence[Pair | str] | None = None
) -> list[MiningSet]:
    """Every `<l1>-<l2>.<split>.gold` of the folder with its two sentence files, sorted by
    name; `pairs` keeps those of some language pairs (all their splits)."""
    reject_string(pairs, "pairs")
    folder = _folder(path)
    golds = sorted(
        (parse_pair(match[1]), match[2], name)
        for name in os.listdir(folder)
        if (match := BUCC_GOLD.fullmatch(name))
    )
    if not golds:
        raise DataError(
            f"no <l1>-<l2>.<split>.gold file in {folder} (BUCC-style data: <l1>-<l2>.<split>.<l1>"
            " and .<l2> of ID<TAB>sentence lines, and the gold pairs)"
        )
    if pairs is not None:
        wanted = {as_pair(pair) for pair in pairs}
        missing = sorted(f"{l1}-{l2}" for l1, l2 in wanted - {pair for pair, _, _ in golds})
        if missing:
            raise DataError(f"no .gold file of pair(s) {', '.join(missing)} in {folder}")
        golds = [gold for gold in golds if gold[0] in wanted]
    return [_mining_set(folder, pair, split, name) for pair, split, name in golds]


def _mining_set(folder: str, pair: Pair, split: str, gold_name: str) -> MiningSet:
    name = f"{pair[0]}-{pair[1]}.{split}"
    paths = [os.path.join(folder, f"{name}.{lang}") for lang in pair]
    for side in paths:
        if not os.path.isfile(side):
            raise DataError(f"{side} is missing: {gold_name} pairs IDs of {name}.{{l1,l2}}")
    first, second = (read_id_sentences(side) for side in paths)
    pairs = read_gold_pairs(
        os.path.join(folder, gold_name), ((first, paths[0]), (second, paths[1]))
    )
    rows = [{name: row for row, name in enumerate(side)} for side in (first, second)]
    gold = frozenset((rows[0][a], rows[1][b]) for a, b in pairs)
    ids = (list(first), list(second))
    return MiningSet(name, pair, ids, (list(first.values()), list(second.values())), gold)


def _folder(path: str | os.PathLike[str]) -> str:
    folder = os.path.abspath(path)
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise DataError(f"data path {folder} {what}")
    return folder


def _read_lines(path: str) -> list[bytes]:
    with open(path, "rb") as f:
        return f.read().splitlines()
