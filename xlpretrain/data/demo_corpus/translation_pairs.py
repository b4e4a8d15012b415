"""A cross-lingual sentence-pair task from a parallel corpus: is B a translation of A?

Every aligned line `a<TAB>b` of a pair file gives two examples, so the labels are balanced:
`a<TAB>b<TAB>translation`, and `a<TAB>b'<TAB>other` where `b'` is a hard negative's second side:
of the `NEIGHBOURS` lines either side in the same file, the one whose second side is closest
in length to `b` (the nearer line on a tie; never a line with the same text). The demo corpus
writes items of one kind together (countries with their currency, language names, dates, unit
phrases), so the negative is mostly the same kind of item at about the same length, and only
reading both sides tells the two apart.

`write_task` reads a corpus in the demo's layout (`parallel/<l1>-<l2>.tsv` and
`held_out/parallel/`) and writes the layout the `pairs` task of `xlpretrain.finetune` reads:
`OUT/<l1>-<l2>/train.tsv` from the training file and `OUT/<l1>-<l2>/test.tsv` from the held-out
one, each with negatives from its own file. A held-out line sharing a text with the training
file is left out, so no text of a test pair occurs in training. The folder is named by the pair:
a model with language embeddings gives the premise l1's and the hypothesis l2's.
`python -m xlpretrain.data.demo_corpus --out data/demo --pairs data/pairs` writes the demo
corpus and its task.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from xlpretrain.data.corpora.folders import ParallelSource
from xlpretrain.data.corpora.sources import DataError

NEIGHBOURS = 8  # lines either side a negative is chosen from
POSITIVE, NEGATIVE = "translation", "other"
Line = tuple[str, str]
Example = tuple[str, str, str]


def hard_negatives(seconds: Sequence[str], neighbours: int = NEIGHBOURS) -> list[int]:
    """For each line, the index of its negative (see the module docstring)."""
    chosen = []
    for i, text in enumerate(seconds):
        window = range(max(0, i - neighbours), min(len(seconds), i + neighbours + 1))
        candidates = [j for j in window if seconds[j] != text]
        if not candidates:
            raise DataError(f"no line near line {i + 1} has another text than {text!r}")
        chosen.append(min(candidates, key=lambda j: (abs(len(seconds[j]) - len(text)), abs(j - i))))
    return chosen


def examples(lines: Sequence[Line]) -> list[Example]:
    """Each aligned line as a translation and with its hard negative as other."""
    negatives = hard_negatives([second for _, second in lines])
    return [
        example
        for (first, second), j in zip(lines, negatives, strict=True)
        for example in ((first, second, POSITIVE), (first, lines[j][1], NEGATIVE))
    ]


def unseen(held_out: Sequence[Line], train: Sequence[Line]) -> list[Line]:
    """The held-out lines neither of whose texts occurs in the training lines."""
    seen = {text for line in train for text in line}
    return [line for line in held_out if not seen.intersection(line)]


def write_task(corpus: str | os.PathLike, out: str | os.PathLike) -> dict[str, dict[str, int]]:
    """Writes `out/<l1>-<l2>/{train,test}.tsv` for every pair file of `corpus/parallel/`;
    returns the number of examples of each file, by folder and split."""
    training = ParallelSource.from_dir(Path(corpus) / "parallel")
    held_out = ParallelSource.from_dir(Path(corpus) / "held_out" / "parallel", pairs=training.pairs)
    counts = {}
    for pair in training.pairs:
        train = _lines(training, pair)
        splits = {"train": train, "test": unseen(_lines(held_out, pair), train)}
        name = "-".join(pair)
        (Path(out) / name).mkdir(parents=True, exist_ok=True)
        counts[name] = {}
        for split, lines in splits.items():
            try:
                rows = examples(lines)
            except DataError as error:
                raise DataError(f"{name}, {split} lines: {error}") from None
            with open(Path(out) / name / f"{split}.tsv", "w", encoding="utf-8", newline="\n") as f:
                f.writelines("\t".join(row) + "\n" for row in rows)
            counts[name][split] = len(rows)
    return counts


def _lines(source: ParallelSource, pair: tuple[str, str]) -> list[Line]:
    return [source.line(pair, i) for i in range(source.num_lines(pair))]
