"""XNLI's and PAWS-X's sentence-pair files.

`{split}-{lang}.tsv` (XTREME's utils_preprocess.py, `xnli_preprocess` / `pawsx_preprocess`):
no header (the preprocessing drops the source's), one `sentence1<TAB>sentence2<TAB>label` row
per line, the test split without its label (`sentence1<TAB>sentence2`). They are written by
Python's `csv.writer(delimiter='\\t')`, so lines end in CRLF and a field holding a `"` is
quoted with its quotes doubled. XTREME's run_classify.py reads them back with transformers'
`DataProcessor._read_tsv` (`csv.reader(delimiter="\\t", quotechar=None)`, `utf-8-sig`), which
undoes no quoting: the model sees `"He said ""no"" twice ."` as written, and so it is read
here (tab-split, a leading byte-order mark dropped). As there, a sentence may be blank in any
split (`xnli.py`/`pawsx.py` take `line[0]`, `line[1]` as they are), training rows included.
XNLI's source label `contradictory` is `contradiction`, as the preprocessing and the
translate-train reader map it.

Translate-train files (`en-{lang}-translated.tsv` from the xtreme_translations bucket, which the
download script does not fetch) hold five unquoted fields, `english1 english2 sentence1
sentence2 label`, no header; some rows are malformed (the TFDS reader of the same files skips
rows whose label is not a label), and are skipped and counted here.
"""

from __future__ import annotations

import os
from collections.abc import Collection

from xlpretrain.data.corpora.sources import FileStats
from xlpretrain.data.finetuning.task_examples import PairExample
from xlpretrain.data.xtreme.lines import BadLines, decoded_lines

__all__ = ["read_pair_file", "read_translated_pairs"]

LABEL_ALIASES = {"contradictory": "contradiction"}


def read_pair_file(
    path: str | os.PathLike, *, training: bool, labels: Collection[str] | None = None
) -> tuple[list[PairExample], FileStats]:
    """The pairs of a `{split}-{lang}.tsv` file, in file order.

    A training file (`training=True`) skips and counts lines that are not UTF-8, empty (no tab,
    nothing but spaces), not three fields, or not labelled (when `labels` is given, with one of
    `labels`); a blank sentence is trained on, as XTREME does. A reference (dev, test) is two
    fields per line (unlabelled) or three throughout, a label from `labels`; a sentence may be
    blank, both may (the row is still predicted); anything else is an error naming file:line.
    """
    bad = BadLines(path, training=training)
    examples: list[PairExample] = []
    width = None  # a reference's field count, fixed by its first line
    seen = 0
    for number, text in decoded_lines(path, bad):
        seen += 1
        if number == 1:
            text = text.removeprefix("\ufeff")  # utf-8-sig
        fields = text.split("\t")  # quotechar=None: quotes are the text's
        if "\t" not in text and not text.strip():
            bad.found(number, "empty", "empty line")
        elif training and len(fields) != 3:
            bad.found(number, "bad_fields", f"{len(fields)} fields, expected 3")
        elif not training and (len(fields) not in (2, 3) or width not in (None, len(fields))):
            expected = width or "2 or 3"
            bad.found(number, "bad_fields", f"{len(fields)} fields, expected {expected}")
        elif len(fields) == 3 and not _known(_label(fields[2]), labels):
            bad.found(number, "bad_fields", f"label {fields[2]!r} is not one of {labels}")
        else:
            width = len(fields)
            label = _label(fields[2]) if width == 3 else None
            examples.append(PairExample(fields[0], fields[1], label))
    return examples, bad.stats(seen, len(examples))


def read_translated_pairs(
    path: str | os.PathLike, *, labels: Collection[str] | None = None
) -> tuple[list[PairExample], FileStats]:
    """The translated pairs of a translate-train file (training data: bad lines are skipped and
    counted): each line's third and fourth field, labelled with its fifth."""
    bad = BadLines(path, training=True)
    examples: list[PairExample] = []
    seen = 0
    for number, text in decoded_lines(path, bad):
        seen += 1
        fields = text.split("\t")
        if not text.strip():
            bad.found(number, "empty", "empty line")
        elif len(fields) != 5 or not all(field.strip() for field in fields):
            bad.found(number, "bad_fields", "expected 5 non-blank fields")
        elif not _known(_label(fields[4]), labels):
            bad.found(number, "bad_fields", f"label {fields[4]!r} is not one of {labels}")
        else:
            examples.append(PairExample(fields[2], fields[3], _label(fields[4])))
    return examples, bad.stats(seen, len(examples))


def _known(label: str, labels: Collection[str] | None) -> bool:
    return bool(label) and (labels is None or label in labels)


def _label(field: str) -> str:
    label = field.strip()
    return LABEL_ALIASES.get(label, label)
