"""Which writing system each language of a parallel corpus is in, read from its text, and
retrieval broken down by it: pairs across scripts, and pairs within each script.

Why the breakdown: identical strings (names, numbers) embed identically even in an untrained
encoder, so pairs in one script retrieve far above chance before any learning, and an average
over all pairs hides whether a model aligned anything. The pairs across scripts share no such
strings; their figure says what was learned.

A language's script is the Unicode Script property (an ISO 15924 code: `Latn`, `Cyrl`, `Hani`)
most of the characters of its text have, Common and Inherited ones (digits, punctuation,
combining marks) not counted. It comes from the text, not from the language code, so it holds
for any corpus and any code (`sr` is written in Cyrillic or Latin, `zh_Hant` in Han), and a
mixed writing system counts as its dominant part (Japanese as Katakana or Han, whichever its
text has more of). The property comes from fontTools' copy of Unicode's Scripts.txt (Python's
`unicodedata` does not expose it; fontTools comes with matplotlib).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from fontTools import unicodedata

if TYPE_CHECKING:
    from xlpretrain.data.corpora.protocols import ParallelCorpus

# Characters of every script (Zyyy: Common; Zinh: Inherited) or of none (Zzzz: Unknown).
_NO_SCRIPT = {"Zyyy", "Zinh", "Zzzz"}
ACROSS = "across_scripts"


def script_counts(texts: Iterable[str]) -> Counter:
    """ISO 15924 code → how many characters of `texts` are in that script."""
    counts: Counter = Counter()
    for text in texts:
        counts.update(unicodedata.script(ch) for ch in text)
    for code in _NO_SCRIPT:
        counts.pop(code, None)
    return counts


def language_scripts(source: ParallelCorpus, max_lines: int | None = None) -> dict[str, str | None]:
    """Language → the dominant script of its text in `source`, over the first `max_lines`
    pairs of every file it is a side of; None for a language whose text has no character of
    any one script."""
    counts: dict[str, Counter] = {lang: Counter() for lang in source.languages}
    for pair in source.pairs:
        lines = source.num_lines(pair)
        for index in range(lines if max_lines is None else min(lines, max_lines)):
            for lang, text in zip(pair, source.line(pair, index), strict=True):
                counts[lang].update(script_counts([text]))
    return {lang: c.most_common(1)[0][0] if c else None for lang, c in counts.items()}


def script_groups(
    pairs: Sequence[tuple[str, str]], scripts: Mapping[str, str | None]
) -> dict[str, list[str]]:
    """Group name → the stems (`l1-l2`) of its pairs: `across_scripts` for pairs whose two
    languages differ in script, `within_<script>` (`within_latin`) for pairs both in one. A
    pair with a language of no script is in no group; an empty group is left out."""
    groups: dict[str, list[str]] = {}
    for l1, l2 in pairs:
        first, second = scripts.get(l1), scripts.get(l2)
        if first is None or second is None:
            continue
        name = ACROSS if first != second else f"within_{script_name(first)}"
        groups.setdefault(name, []).append(f"{l1}-{l2}")
    return dict(sorted(groups.items()))


def script_name(code: str) -> str:
    """`Latn` → `latin`, `Hani` → `han`: the Unicode name of an ISO 15924 code, as a key."""
    return unicodedata.script_name(code).lower()


def group_means(scores: Mapping[str, float], groups: Mapping[str, Sequence[str]]) -> dict:
    """Each group's mean of `scores` (pair stem → score) over its pair files."""
    return {
        name: float(np.mean([scores[stem] for stem in stems])) for name, stems in groups.items()
    }


def group_label(name: str) -> str:
    """`across_scripts` → "across scripts", `within_latin` → "within Latin" (for people)."""
    if name == ACROSS:
        return "across scripts"
    return "within " + name.removeprefix("within_").replace("_", " ").title()
