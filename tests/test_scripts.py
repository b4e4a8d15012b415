"""Retrieval by script: each language's script read from its text (ISO 15924, the Unicode
Script property of most of its characters), and pair files grouped into those across scripts
and those within each script."""

import pytest

from xlpretrain.eval.scripts import (
    group_label,
    group_means,
    language_scripts,
    script_counts,
    script_groups,
)


class Pairs:
    """A `ParallelCorpus` of hand-written lines: `{(l1, l2): [(text1, text2), ...]}`."""

    def __init__(self, files):
        self.files = files
        self.pairs = list(files)
        self.languages = sorted({lang for pair in files for lang in pair})

    def num_lines(self, pair):
        return len(self.files[pair])

    def line(self, pair, index):
        return self.files[pair][index]


# Names and numbers in Latin letters and digits inside other scripts' lines, as in real data.
CORPUS = Pairs(
    {
        ("en", "de"): [("Germany 1990", "Deutschland 1990"), ("the cat", "die Katze")],
        ("en", "ru"): [("Russia", "Россия"), ("iPhone 15 price", "цена iPhone 15")],
        ("ru", "uk"): [("кошка", "кішка"), ("Москва", "Москва")],
        ("de", "uk"): [("Kiew", "Київ")],
        ("en", "ja"): [
            ("Tokyo", "東京"),
            ("coffee cup", "コーヒーカップ"),
            ("Tokyo Tower", "東京タワー"),
        ],
        ("en", "xx"): [("one", "1"), ("two", "2")],  # digits only: no script
    }
)


def test_a_language_is_in_the_script_most_of_its_characters_are():
    assert script_counts(["цена iPhone 15"]) == {"Cyrl": 4, "Latn": 6}
    scripts = language_scripts(CORPUS)
    # ru's Latin names in en-ru do not outweigh its Cyrillic over all its files; Japanese
    # counts as the script it has most characters of (Katakana here, not Han).
    assert scripts == {
        "de": "Latn", "en": "Latn", "ja": "Kana", "ru": "Cyrl", "uk": "Cyrl", "xx": None,
    }  # fmt: skip
    # Only the lines scored count (`max_lines`: retrieval's first lines of each file).
    few = Pairs({("en", "ru"): [("x", "abc"), ("y", "где это")]})
    assert language_scripts(few)["ru"] == "Cyrl" and language_scripts(few, 1)["ru"] == "Latn"


def test_pairs_group_across_scripts_and_within_each_script():
    groups = script_groups(CORPUS.pairs, language_scripts(CORPUS))
    assert groups == {
        "across_scripts": ["en-ru", "de-uk", "en-ja"],
        "within_cyrillic": ["ru-uk"],
        "within_latin": ["en-de"],
    }  # en-xx: xx has no script, so the pair is in no group
    scores = {"en-de": 0.9, "en-ru": 0.1, "ru-uk": 0.8, "de-uk": 0.2, "en-ja": 0.3, "en-xx": 1.0}
    means = group_means(scores, groups)
    assert means == pytest.approx(
        {"across_scripts": 0.2, "within_cyrillic": 0.8, "within_latin": 0.9}
    )
    assert [group_label(name) for name in means] == [
        "across scripts", "within Cyrillic", "within Latin",
    ]  # fmt: skip
    assert group_label("within_old_italic") == "within Old Italic"
