"""The demo corpus's builder: a small, real multilingual corpus made offline from the CLDR data
that ``babel`` ships.

CLDR translates the same items (names of territories, languages, scripts, currencies and time
zones; months and weekdays; unit and relative-time phrases; dates) into every locale, keyed by
locale-independent codes. Keys therefore align the locales, which gives parallel data for free.
The layout is exactly that of a user corpus:

* ``mono/<lang>.txt``: one document per line. A document groups related items in that
  language, joined with the locale's own list pattern, e.g. a country with the languages
  spoken there, its currency, cities and time zones; a run of language names; a unit in
  several plural forms.
* ``parallel/en-<lang>.tsv``: ``english<TAB>other`` per line, one short CLDR item (a country
  with its currency, a language name, a date, ...) rendered in both locales. Only items that
  every selected language translates are used, and each English text once, so all
  ``en-*.tsv`` files share the same English column, line by line.
* ``held_out/mono`` and ``held_out/parallel``: the same layout, for evaluation. Every
  ``HELD_OUT_EVERY``-th document of each language and every ``HELD_OUT_EVERY``-th parallel item
  (the same items in every pair file) are held out of training; the held-out pairs are never
  seen as pairs, though their names may occur inside training documents.

The build is deterministic (fixed reference dates, sorted keys) for one Babel release, but each
release ships newer CLDR data, which changes the text and even the languages chosen: that is why
the demo corpus trains from the snapshot ``demo_corpus`` ships, and this builder runs only when
asked (``--from-babel``, or a language count other than the snapshot's).
"""

from __future__ import annotations

import datetime
import re
from collections import Counter
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from babel import Locale, localedata
from babel.core import get_global
from babel.dates import format_date, format_timedelta
from babel.lists import format_list
from babel.numbers import get_territory_currencies

HELD_OUT_EVERY = 10  # one document, one parallel item in ten is held out
FOLDERS = ("mono", "parallel", "held_out/mono", "held_out/parallel")

# Fixed so that the output never depends on the day it is built.
_CURRENCY_DATE = datetime.date(2025, 1, 1)
_DATES = [datetime.date(2025, month, day) for month in range(1, 13) for day in (1, 10, 20)]
# One count per CLDR plural category that matters in practice (one / two / few / many / other).
_UNIT_COUNTS = (1, 2, 5, 11, 100)
_RELATIVE_UNITS = {
    "second": 1,
    "minute": 60,
    "hour": 3600,
    "day": 86400,
    "week": 7 * 86400,
    "month": 30 * 86400,
    "year": 365 * 86400,
}
_RELATIVE_COUNTS = (1, 3, -1, -3)
_CHUNK = 12  # names per "list" document
_MAX_SPOKEN = 8  # languages listed per country
_MIN_SPOKEN_PERCENT = 1.0
_OFFICIAL = ("official", "de_facto_official")
# Characters that would split a line or a TSV field (everything str.splitlines() breaks on).
_BREAKS = re.compile(r"[\t\n\r\v\f\x1c-\x1e\x85\u2028\u2029]+| {2,}")

Key = tuple[str, ...]


def write_corpus(root: Path, num_languages: int, min_entries: int) -> None:
    """Writes the corpus of ``num_languages`` languages (see ``select_languages``) under
    ``root``, in the folders ``FOLDERS``."""
    languages = select_languages(num_languages, min_entries)
    for name in FOLDERS:
        (root / name).mkdir(parents=True)
    for lang in languages:
        _write_split(root, f"mono/{lang}.txt", _documents(lang))
    items = {lang: _items(lang) for lang in languages}
    # Keys every language has; an English text only once ("Thai" the language and the script).
    first_key: dict[str, Key] = {}
    for key in sorted(set.intersection(*(set(i) for i in items.values()))):
        first_key.setdefault(items["en"][key], key)
    for lang in languages:
        if lang != "en":
            pairs = [f"{items['en'][k]}\t{items[lang][k]}" for k in first_key.values()]
            _write_split(root, f"parallel/en-{lang}.tsv", pairs)


def _write_split(root: Path, name: str, lines: list[str]) -> None:
    """Every ``HELD_OUT_EVERY``-th distinct line to ``held_out/name``, the others to ``name``."""
    lines = list(dict.fromkeys(lines))  # a repeated document would leak into the held-out
    out = {i for i in range(len(lines)) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1}
    _write_lines(root / name, [line for i, line in enumerate(lines) if i not in out])
    _write_lines(root / "held_out" / name, [line for i, line in enumerate(lines) if i in out])


def _write_lines(path: Path, lines: list[str]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(line + "\n" for line in lines)


# --------------------------------------------------------------------------- language choice


def select_languages(num_languages: int, min_entries: int) -> list[str]:
    """English (the pivot of the parallel files), then the best-ranked official language of every
    other script, then the best-ranked of the rest, ranking by the number of territories where a
    language is official, then by how much CLDR data its locale has. A language qualifies if its
    locale translates at least ``min_entries`` of the names English has (territories, languages,
    scripts, currencies, time zones and units: about 1800), which keeps thinly covered locales out
    and the parallel files, limited to items every language has, large."""
    official = Counter(
        lang.split("_")[0]
        for spoken in get_global("territory_languages").values()
        for lang, info in spoken.items()
        if info.get("official_status") in _OFFICIAL
    )
    likely = get_global("likely_subtags")
    # Base locales with their own data: not e.g. nb/nn (inherit from no) or ht (from fr_HT).
    inherits = get_global("parent_exceptions")
    codes = [
        c
        for c in localedata.locale_identifiers()
        if "_" not in c and c != "root" and c in likely and c not in inherits
    ]

    def script(code: str) -> str:
        return likely[code].split("_")[1]

    def eligible(code: str) -> bool:
        return _richness(code) >= min_entries

    chosen = ["en"]
    for code in _ranked([c for c in codes if official[c]], official):  # one per script
        if len(chosen) == num_languages:
            break
        if script(code) not in {script(c) for c in chosen} and eligible(code):
            chosen.append(code)
    for code in _ranked(codes, official):  # then the strongest of the rest
        if len(chosen) == num_languages:
            break
        if code not in chosen and eligible(code):
            chosen.append(code)
    if len(chosen) < num_languages:
        raise ValueError(
            f"only {len(chosen)} CLDR languages translate >= {min_entries} names; "
            f"lower num_languages ({num_languages}) or min_entries"
        )
    return sorted(chosen)


def _ranked(codes: list[str], official: Counter[str]) -> Iterator[str]:
    """By territories where official, then by data; lazily, one group of equals at a time."""
    for count in sorted({official[c] for c in codes}, reverse=True):
        group = [c for c in codes if official[c] == count]
        yield from sorted(group, key=lambda c: (-_richness(c), c))


@cache
def _richness(code: str) -> int:
    """How many of English's names (territories, languages, scripts, currencies, time zones,
    units) the locale translates: a cheap measure of its CLDR coverage."""
    data, english = Locale.parse(code)._data, Locale("en")._data
    units = data["unit_patterns"]
    long_units = sum(1 for u in english["unit_patterns"] if u in units and "long" in units[u])
    return long_units + sum(
        len(set(english[k]) & set(data[k]))
        for k in ("territories", "languages", "scripts", "currency_names", "meta_zones")
    )


# ------------------------------------------------------------------------------ the texts


def _clean(text: str) -> str:
    return _BREAKS.sub(" ", text).strip()


@cache
def _atoms(code: str) -> dict[Key, str]:
    """Every CLDR item the locale translates, by a locale-independent key.

    Only the locale's own data counts: values it would merely inherit from CLDR's root
    (placeholder month names ``M01``, ``+3 d`` relative times, ...) are left out. Cities are
    the exception: CLDR's own fallback (the time-zone id's city) is the correct name.
    """
    loc, root = Locale.parse(code), Locale("root")
    atoms: dict[Key, str] = {}
    for kind, names in (
        ("territory", loc.territories),
        ("language", loc.languages),
        ("script", loc.scripts),
        ("currency", loc.currencies),
    ):
        atoms.update(((kind, k), v) for k, v in names.items())
    for mz, names in loc._data["meta_zones"].items():
        long = names.get("long", {})
        if name := long.get("generic") or long.get("standard"):
            atoms["metazone", mz] = name
    for zone in get_global("zone_territories"):
        city = loc.time_zones.get(zone, {}).get("city")
        atoms["city", zone] = city or zone.rsplit("/", 1)[-1].replace("_", " ")
    for unit, patterns in loc._data["unit_patterns"].items():
        for n in _UNIT_COUNTS:
            # babel's format_unit, minus its number formatting: a small int is str(n) in every
            # locale (latn digits, no grouping), and this runs thousands of times per build.
            if pattern := patterns.get("long", {}).get(loc.plural_form(n)):
                atoms["unit", unit, str(n)] = pattern.format(n)
    if dict(loc.months["format"]["wide"]) != dict(root.months["format"]["wide"]):
        for width in ("wide", "abbreviated"):
            for m, name in loc.months["format"][width].items():
                atoms["month", width, str(m)] = name
            for d, name in loc.days["format"][width].items():
                atoms["day", width, str(d)] = name
        atoms.update((("quarter", str(q)), v) for q, v in loc.quarters["format"]["wide"].items())
        atoms.update((("era", str(e)), v) for e, v in loc.eras["wide"].items())
        atoms.update((("date", d.isoformat()), format_date(d, "full", loc)) for d in _DATES)
    for unit, seconds in _RELATIVE_UNITS.items():
        for n in _RELATIVE_COUNTS:
            delta = datetime.timedelta(seconds=n * seconds)
            text = format_timedelta(delta, add_direction=True, locale=loc)
            if text != format_timedelta(delta, add_direction=True, locale=root):
                atoms["relative", unit, str(n)] = text
    return {k: t for k, v in atoms.items() if (t := _clean(v))}


def _join(atoms: dict[Key, str], keys: list[Key], loc: Locale) -> str:
    """The available items among ``keys``, as the locale writes a list ("a, b and c")."""
    return format_list([atoms[k] for k in keys if k in atoms], locale=loc)


@cache
def _country_groups(territory: str) -> list[list[Key]]:
    """Keys describing one country: languages spoken, currencies, cities, time zones."""
    spoken = sorted(
        get_global("territory_languages")[territory].items(),
        key=lambda kv: (-(kv[1].get("population_percent") or 0.0), kv[0]),
    )
    languages = [
        ("language", lang)
        for lang, info in spoken
        if info.get("official_status") in _OFFICIAL
        or (info.get("population_percent") or 0.0) >= _MIN_SPOKEN_PERCENT
    ][:_MAX_SPOKEN]
    currencies = [
        ("currency", c) for c in get_territory_currencies(territory, start_date=_CURRENCY_DATE)
    ]
    zones = _zones_by_territory().get(territory, [])
    metazones = sorted({mz for z in zones if (mz := get_global("meta_zones").get(z))})
    return [
        languages,
        currencies,
        [("city", z) for z in zones],
        [("metazone", mz) for mz in metazones],
    ]


@cache
def _zones_by_territory() -> dict[str, list[str]]:
    zones: dict[str, list[str]] = {}
    for zone, territory in sorted(get_global("zone_territories").items()):
        zones.setdefault(territory, []).append(zone)
    return zones


@cache
def _countries() -> list[str]:
    return sorted(t for t in get_global("territory_languages") if len(t) == 2 and t.isalpha())


@cache
def _documents(code: str) -> list[str]:
    """The monolingual documents of one language, one string each, in a fixed order."""
    atoms, loc = _atoms(code), Locale.parse(code)
    docs = []
    for territory in _countries():
        head = atoms.get(("territory", territory))
        groups = [_join(atoms, keys, loc) for keys in _country_groups(territory)]
        if head and any(groups):
            docs.append(head + ": " + "; ".join(g for g in groups if g) + ".")
    countries = set(_countries())
    lists: list[list[Key]] = [
        sorted(k for k in atoms if k[0] == "territory" and k[1] not in countries),
        sorted(k for k in atoms if k[0] == "language"),
        sorted(k for k in atoms if k[0] == "script"),
        sorted(k for k in atoms if k[0] == "currency"),
        sorted(k for k in atoms if k[0] == "metazone"),
    ]
    for keys in lists:
        docs.extend(_join(atoms, keys[i : i + _CHUNK], loc) for i in range(0, len(keys), _CHUNK))
    docs.extend(_join(atoms, _unit_keys(unit), loc) for unit in _units(atoms))
    for width in ("wide", "abbreviated"):
        docs.append(_join(atoms, [("month", width, str(m)) for m in range(1, 13)], loc))
        docs.append(_join(atoms, [("day", width, str(d)) for d in range(7)], loc))
    docs.append(_join(atoms, [("quarter", str(q)) for q in range(1, 5)], loc))
    docs.append(_join(atoms, [("era", "0"), ("era", "1")], loc))
    for month in range(1, 13):
        dates = [("date", d.isoformat()) for d in _DATES if d.month == month]
        docs.append(_join(atoms, dates, loc))
    for unit in _RELATIVE_UNITS:
        docs.append(_join(atoms, [("relative", unit, str(n)) for n in _RELATIVE_COUNTS], loc))
    return [d for d in docs if d]


@cache
def _items(code: str) -> dict[Key, str]:
    """Short translation units for the parallel files: one CLDR item (group) per key."""
    atoms, loc = _atoms(code), Locale.parse(code)
    items: dict[Key, str] = {}
    for territory in _countries():
        currencies = _country_groups(territory)[1]
        keys = [("territory", territory), *currencies]
        if all(k in atoms for k in keys):  # all or nothing, so both sides say the same
            head = atoms[keys[0]]
            items["country", territory] = (
                f"{head}: {_join(atoms, currencies, loc)}" if currencies else head
            )
    for key, text in atoms.items():
        if key[0] in ("language", "script", "currency", "metazone", "date", "relative") or (
            key[0] in ("month", "day") and key[1] == "wide"
        ):
            items[key] = text
    for unit in _units(atoms):
        if all(k in atoms for k in _unit_keys(unit)):
            items["unit", unit] = _join(atoms, _unit_keys(unit), loc)
    return items


def _units(atoms: dict[Key, str]) -> list[str]:
    return sorted({k[1] for k in atoms if k[0] == "unit"})


def _unit_keys(unit: str) -> list[Key]:
    return [("unit", unit, str(n)) for n in _UNIT_COUNTS]
