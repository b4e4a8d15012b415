"""PAN-X's and UD-POS's tagged files, `{split}-{lang}.tsv`.

One `word<TAB>label` line per word, a blank line between sentences; the test split holds the
words alone (utils_preprocess.py writes test files without labels). PAN-X's source lines are
`lang:word<TAB>label`: `panx_preprocess` cuts everything up to the first `:` before writing
these files, so a `:` left in a word here belongs to the word and is kept. As XTREME's
utils_tag.py reads them, a line starting `-DOCSTART-` also ends a sentence; so does a line of
whitespace, and a run of separators is one.
"""

from __future__ import annotations

import os

from xlpretrain.data.sources import FileStats
from xlpretrain.data.task_examples import TaggedSentence
from xlpretrain.data.xtreme.lines import BadLines, decoded_lines

__all__ = ["read_tagged_file"]


def read_tagged_file(
    path: str | os.PathLike, *, training: bool
) -> tuple[list[TaggedSentence], FileStats]:
    """The sentences of a tagged file, in file order; `stats` counts word lines.

    A training file skips and counts word lines that are not UTF-8 or not two non-blank fields
    (the sentence keeps its other words, as XTREME's preprocessing drops a PAN-X line without its
    `lang:` prefix); a sentence left with no word is dropped. In a reference (dev, test) every
    word line is one field (unlabelled) or two throughout the file; anything else is an error
    naming file:line.
    """
    bad = BadLines(path, training=training)
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    labels: list[str] = []
    labelled = None  # whether a reference's lines carry labels, fixed by its first word line
    seen = used = 0

    def end_sentence() -> None:
        if words:
            sentences.append(TaggedSentence(tuple(words), tuple(labels) if labelled else None))
            words.clear()
            labels.clear()

    for number, text in decoded_lines(path, bad):
        if not text.strip() or text.startswith("-DOCSTART-"):
            end_sentence()
            continue
        seen += 1
        fields = text.split("\t")
        if training and (len(fields) != 2 or not all(field.strip() for field in fields)):
            bad.found(number, "bad_fields", "expected 2 non-blank fields, word and label")
        elif not training and (len(fields) > 2 or labelled not in (None, len(fields) == 2)):
            expected = "1 or 2" if labelled is None else 1 + labelled
            bad.found(number, "bad_fields", f"{len(fields)} fields, expected {expected}")
        elif len(fields) == 2 and not fields[1].strip():
            bad.found(number, "bad_fields", "blank label")
        else:
            labelled = len(fields) == 2
            words.append(fields[0])
            labels.append(fields[-1].strip())
            used += 1
    end_sentence()
    return sentences, bad.stats(seen, used)
