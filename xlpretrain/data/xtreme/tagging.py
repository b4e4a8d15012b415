"""PAN-X's and UD-POS's tagged files, `{split}-{lang}.tsv`.

One `word<TAB>label` line per word, a blank line between sentences; the test split holds the
words alone (utils_preprocess.py writes test files without labels). PAN-X's source lines are
`lang:word<TAB>label`: `panx_preprocess` cuts everything up to the first `:` before writing
these files, so a `:` left in a word here belongs to the word and is kept. As XTREME's
utils_tag.py reads them, a line starting `-DOCSTART-` also ends a sentence; so does a line of
whitespace, and a run of separators is one.

Before training or predicting, XTREME's scripts rewrite every file with `utils_preprocess.py`'s
`panx_tokenize` / `udpos_tokenize`, which read a line as `line.strip().split()`: the word is its
first whitespace-separated item and the label its second when there are exactly two, else `O`
(PAN-X) or `X` (UD-POS). So it is read here: a word holding other whitespace than a tab
(U+00A0, U+2009, U+3000, as Python's `str.split` splits them) is its first piece, labelled with
the default; a training line without a label is trained on with the default. (The same step's
rules that need the tokenizer, a word of no or too many pieces as `<unk>` and a sentence cut at
`max_len` pieces, are `data.finetuning.token_labels`'.)
"""

from __future__ import annotations

import os

from xlpretrain.data.corpora.sources import FileStats
from xlpretrain.data.finetuning.task_examples import TaggedSentence
from xlpretrain.data.xtreme.lines import BadLines, decoded_lines

__all__ = ["DEFAULT_LABELS", "read_tagged_file"]

# The label `utils_preprocess.py` gives a line that is not exactly a word and a label.
DEFAULT_LABELS = {"panx": "O", "udpos": "X"}


def read_tagged_file(
    path: str | os.PathLike, *, training: bool, default_label: str = "O"
) -> tuple[list[TaggedSentence], FileStats]:
    """The sentences of a tagged file, in file order; `stats` counts word lines.

    Each word line is read as XTREME's preprocessing reads it (the module docstring), with
    `default_label` for a line that is not exactly two items. A training file skips and counts
    word lines that are not UTF-8 (the sentence keeps its other words); a sentence left with no
    word is dropped. In a reference (dev, test) every word line is one tab-separated field
    (unlabelled) or two throughout the file, a label not blank; anything else is an error
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
        items = text.split()  # utils_preprocess.py's line.strip().split()
        if not training and (len(fields) > 2 or labelled not in (None, len(fields) == 2)):
            expected = "1 or 2" if labelled is None else 1 + labelled
            bad.found(number, "bad_fields", f"{len(fields)} fields, expected {expected}")
        elif not training and len(fields) == 2 and not fields[1].strip():
            bad.found(number, "bad_fields", "blank label")
        else:
            labelled = True if training else len(fields) == 2
            words.append(items[0])
            labels.append(items[1] if len(items) == 2 else default_label)
            used += 1
    end_sentence()
    return sentences, bad.stats(seen, used)
