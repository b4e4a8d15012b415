"""The demo corpus's country lines read back into their fields, from the corpus text alone.

`cldr` writes one line per territory, ``head: group; group; ….``: the territory's name, then
the non-empty ones of four groups in this order: the languages spoken there, its currencies,
its cities (one per time zone) and its time zones, each group a list in the locale's own list
pattern ("Catalan, Spanish, and French", "カタロニア語、スペイン語、フランス語"). Empty groups are
left out, so the text alone does not say which group is which; the parallel files do: each
territory whose name and currencies every language has is a parallel item ``head: currencies``
(both splits hold such items; the English column is the same in every pair file). A line whose
``head: group`` is such an item has its currencies found; the group before them (if any) is the
languages, those after are the cities and then the time zones (a territory with time zones
always has cities: every zone has a city). Lines where this does not come out unambiguously are
left out.

The items of a list are found with the locale's list separators, read off the corpus too: the
weekday line ``Monday, Tuesday, …, and Sunday`` (its names are parallel items) gives the
separators of a long list, and the most common text between two language names in a two-item
languages group gives the two-item one ("English and Portuguese"; English, Persian, Indonesian,
Lao and Thai differ there). A split list counts only if its items are names the locale's
parallel items have (languages, currencies, time zones) or, for cities, only if it has as many
items as the English line; otherwise the field's `items` is None.

Nothing here imports Babel: the same snapshot gives the same fields whatever Babel is installed.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path

from xlpretrain.data.corpora.sources import DataError

KINDS = ("territory", "languages", "currencies", "cities", "time_zones")
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MAX_TWO_SEPARATOR = 12  # characters; longer texts between two names are not a separator
Span = tuple[int, int]  # [start, end) characters of a line


@dataclasses.dataclass(frozen=True)
class Field:
    """One field of a country line: its kind (`KINDS`), its span in the line and, where the
    list could be split and checked, the spans of its items (one item for the territory)."""

    kind: str
    span: Span
    items: tuple[Span, ...] | None


@dataclasses.dataclass(frozen=True)
class CountryLine:
    """A country line of one language with its fields in the line's order; `key` is the
    territory's English parallel item (``Andorra: Euro``), the same in every language."""

    text: str
    key: str
    fields: tuple[Field, ...]

    def field(self, kind: str) -> Field | None:
        return next((f for f in self.fields if f.kind == kind), None)

    def part(self, span: Span) -> str:
        return self.text[span[0] : span[1]]


@dataclasses.dataclass(frozen=True)
class ListSeparators:
    """A locale's list pattern as separators: ``a{first}b{middle}c…{last}z`` for three or
    more items, ``a{two}b`` for two."""

    first: str
    middle: str
    last: str
    two: str

    def splits(self, text: str) -> list[list[Span]]:
        """The readings of a list, as item spans: three or more items if the long pattern
        fits, two if the two-item separator occurs once, and the whole text as one item (a
        separator may also occur inside a name: Arabic's `` و`` before a word with و)."""
        readings = []
        cut = text.rfind(self.last)
        first = text.find(self.first, 0, max(cut, 0))
        if cut > 0 and first > 0:
            parts = [text[:first], *text[first + len(self.first) : cut].split(self.middle)]
            readings.append([*parts, text[cut + len(self.last) :]])
        if text.count(self.two) == 1:
            readings.append(text.split(self.two))
        return [_spans(text, parts) for parts in readings if all(parts)] + [[(0, len(text))]]


def _spans(text: str, parts: list[str]) -> list[Span]:
    """The spans of `parts`, found in order in `text`."""
    spans, at = [], 0
    for part in parts:
        start = text.index(part, at)
        spans.append((start, start + len(part)))
        at = start + len(part)
    return spans


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 corpus file (lines end with ``\\n``; the last may not)."""
    text = path.read_text(encoding="utf-8")
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


@cache
def parallel_items(corpus: Path, lang: str) -> dict[str, str]:
    """English text -> `lang`'s text of every parallel item of both splits (English's own
    column for ``en``)."""
    items: dict[str, str] = {}
    others = sorted(p.stem.split("-", 1)[1] for p in (corpus / "parallel").glob("en-*.tsv"))
    name = f"en-{lang if lang != 'en' else others[0]}.tsv"
    for folder in (corpus / "parallel", corpus / "held_out" / "parallel"):
        path = folder / name
        for number, line in enumerate(read_lines(path), 1):
            english, sep, other = line.partition("\t")
            if not sep:
                raise DataError(f"{path}:{number}: not a tab-separated pair")
            items[english] = other if lang != "en" else english
    return items


def separators(corpus: Path, lang: str) -> ListSeparators:
    """`lang`'s list separators, read off its weekday line and its two-item language lists."""
    items = parallel_items(corpus, lang)
    days = [items.get(day) for day in _WEEKDAYS]
    lines = _all_mono(corpus, lang)
    gaps = next((g for line in lines if (g := _gaps(line, days)) is not None), None)
    if gaps is None or len(set(gaps[1:-1])) != 1:
        raise DataError(f"{corpus}/mono/{lang}.txt: no weekday line gives the list separators")
    names = set(items.values())
    twos = Counter(
        text[i:j]
        for line in lines
        for text in _languages_group(line, names)
        for i, j in _two_name_gaps(text, names)
    )
    if not twos:
        raise DataError(f"{corpus}/mono/{lang}.txt: no two-language list gives its separator")
    return ListSeparators(gaps[0], gaps[1], gaps[-1], twos.most_common(1)[0][0])


def _all_mono(corpus: Path, lang: str) -> list[str]:
    return [
        *read_lines(corpus / "mono" / f"{lang}.txt"),
        *read_lines(corpus / "held_out" / "mono" / f"{lang}.txt"),
    ]


def _gaps(line: str, names: Sequence[str | None]) -> list[str] | None:
    """The texts between `names` if `line` is exactly those names in order with text between."""
    if None in names or not line.startswith(names[0]) or not line.endswith(names[-1]):
        return None
    gaps, at = [], len(names[0])
    for name in names[1:]:
        found = line.find(name, at + 1)
        if found < 0:
            return None
        gaps.append(line[at:found])
        at = found + len(name)
    return gaps if at == len(line) else None


def _two_name_gaps(text: str, names: set[str]) -> Iterable[Span]:
    """Spans of short texts between a name that begins `text` and one that ends it."""
    for i in range(1, len(text)):
        if text[:i] in names:
            for j in range(i + 1, min(len(text), i + 1 + _MAX_TWO_SEPARATOR)):
                if text[j:] in names:
                    yield i, j


def _languages_group(line: str, names: set[str]) -> list[str]:
    """The languages group of a country line, if it has one (for reading separators)."""
    found = _anchor(line, names)
    return [found[1][0]] if found is not None and found[2] == 1 else []


def _anchor(line: str, names: set[str]) -> tuple[int, list[str], int] | None:
    """(end of the head, the groups, the currencies group's index) of a country line whose
    ``head: group`` is a parallel item; None if none or several readings fit."""
    if not line.endswith("."):
        return None
    readings = []
    at = line.find(": ")
    while at > 0:
        groups = line[at + 2 : -1].split("; ")
        for index, group in enumerate(groups):
            if f"{line[:at]}: {group}" in names and index <= 1 and len(groups) - index <= 3:
                readings.append((at, groups, index))
        at = line.find(": ", at + 1)
    return readings[0] if len(readings) == 1 else None


def country_lines(corpus: Path, lang: str, *, held_out: bool) -> list[CountryLine]:
    """The country lines of `lang`'s monolingual file of one split, in file order, with their
    fields; lines that are not country lines, or not read unambiguously, are left out."""
    items = parallel_items(corpus, lang)
    keys = {other: english for english, other in items.items()}
    seps = separators(corpus, lang)
    english = None if lang == "en" else english_lines(corpus)
    names = set(keys)
    folder = corpus / "held_out" / "mono" if held_out else corpus / "mono"
    lines = []
    for text in read_lines(folder / f"{lang}.txt"):
        found = _anchor(text, names)
        if found is None:
            continue
        head_end, groups, currency = found
        key = keys[f"{text[:head_end]}: {groups[currency]}"]
        kinds = ["languages"] * currency + ["currencies", "cities", "time_zones"]
        fields = [Field("territory", (0, head_end), ((0, head_end),))]
        start = head_end + 2
        for kind, group in zip(kinds, groups, strict=False):
            span = (start, start + len(group))
            fields.append(Field(kind, span, _items(group, span, kind, seps, names, english, key)))
            start = span[1] + 2
        lines.append(CountryLine(text, key, tuple(fields)))
    return lines


def _items(
    group: str,
    span: Span,
    kind: str,
    seps: ListSeparators,
    names: set[str],
    english: dict[str, CountryLine] | None,
    key: str,
) -> tuple[Span, ...] | None:
    """The item spans of a group in line coordinates: the first reading whose items are all
    names of the locale's parallel items, else (cities, or names the parallel items lack) the
    first with as many items as the English line's field; English cities are the reference.
    None if no reading is checked."""
    readings = seps.splits(group)
    checked = next((r for r in readings if all(group[a:b] in names for a, b in r)), None)
    if checked is None and english is None:
        checked = readings[0] if kind == "cities" else None
    elif checked is None:
        field = english[key].field(kind) if key in english else None
        if field is not None and field.items is not None:
            checked = next((r for r in readings if len(r) == len(field.items)), None)
    return None if checked is None else tuple((span[0] + a, span[0] + b) for a, b in checked)


@cache
def english_lines(corpus: Path) -> dict[str, CountryLine]:
    """Every English country line, of both splits, by its key: the English line of a
    territory whichever split another language holds it out in."""
    both = [
        *country_lines(corpus, "en", held_out=False),
        *country_lines(corpus, "en", held_out=True),
    ]
    return {line.key: line for line in both}


def languages(corpus: Path) -> list[str]:
    """The corpus's languages, sorted (English and those of its ``parallel/en-*.tsv`` files)."""
    return sorted(["en", *(p.stem.split("-", 1)[1] for p in (corpus / "parallel").glob("en-*"))])
