"""Tests of the built-in demo corpus: the shipped snapshot's bytes whatever Babel is installed,
languages and scripts covered, the user-corpus file format, key alignment of the parallel files,
real text, caching and recovery from an interrupted unpacking; the builder from Babel's CLDR
data (`cldr`), deterministic across processes."""

import hashlib
import os
import shutil
import subprocess
import sys
import unicodedata
from collections import Counter
from pathlib import Path

import pytest

from xlpretrain.data import demo_corpus
from xlpretrain.data.demo_corpus import cldr

# sha256 over the sorted (path, bytes) of the snapshot's files: what Babel 2.18 (CLDR 47) built,
# the corpus every figure in the README and docs was measured on.
DEMO_TREE_SHA256 = "8edeffc3341b88253183b4df42474a27c3a84f9ec6053fffb8f93084ab5ab907"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    folders = demo_corpus.build_demo_corpus(root)
    assert folders == (
        root / "mono",
        root / "parallel",
        root / "held_out" / "mono",
        root / "held_out" / "parallel",
    )
    return root


@pytest.fixture(scope="module")
def babel_corpus(tmp_path_factory) -> Path:
    """Five languages built from the installed Babel's CLDR data."""
    root = tmp_path_factory.mktemp("babel")
    demo_corpus.build_demo_corpus(root, num_languages=5)
    return root


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def tree_sha256(root: Path) -> str:
    digest = hashlib.sha256()
    for name, data in tree(root).items():
        if name != "DONE":
            digest.update(f"{name}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


def test_the_corpus_is_the_shipped_snapshot_and_needs_no_babel(corpus, tmp_path):
    """The default corpus is the snapshot's bytes, unpacked without importing Babel at all: the
    same for every Babel release (`.ci/run` also compares two releases' output)."""
    assert tree_sha256(corpus) == DEMO_TREE_SHA256
    code = (
        "import sys; sys.modules['babel'] = None\n"  # any `import babel` now raises
        "from xlpretrain.data import demo_corpus as d; d.build_demo_corpus(sys.argv[1])"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
    assert tree_sha256(tmp_path) == DEMO_TREE_SHA256


def test_a_damaged_snapshot_is_an_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(demo_corpus, "SNAPSHOT_SHA256", "0" * 64)
    with pytest.raises(demo_corpus.SnapshotError, match=r"demo_corpus_v2\.tar\.xz has sha256 "):
        demo_corpus.build_demo_corpus(tmp_path)
    assert not (tmp_path / "DONE").exists()


def read_lines(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n") and "\r" not in text
    lines = text[:-1].split("\n")
    assert len(text.splitlines()) == len(lines)  # no other line breaks hide in the text
    return lines


def dominant_script(text: str) -> str:
    letters = Counter(unicodedata.name(ch, "?").split()[0] for ch in text[:20_000] if ch.isalpha())
    return letters.most_common(1)[0][0]


def test_languages_and_scripts(corpus):
    languages = sorted(p.stem for p in (corpus / "mono").glob("*.txt"))
    assert len(languages) == 40 and "en" in languages
    assert all(code.isalpha() and code.islower() for code in languages)  # base CLDR codes
    scripts = {
        lang: dominant_script((corpus / "mono" / f"{lang}.txt").read_text(encoding="utf-8"))
        for lang in languages
    }
    assert len(set(scripts.values())) >= 6
    assert {
        "LATIN",
        "CYRILLIC",
        "GREEK",
        "ARABIC",
        "HEBREW",
        "DEVANAGARI",
        "CJK",
        "HANGUL",
        "THAI",
    } <= set(scripts.values())
    assert {scripts["de"], scripts["ru"], scripts["el"], scripts["zh"]} == {
        "LATIN",
        "CYRILLIC",
        "GREEK",
        "CJK",
    }


def test_mono_format(corpus):
    for path in sorted((corpus / "mono").glob("*.txt")):
        lines = read_lines(path)
        assert len(lines) >= 300, path.name
        assert all(line and line == line.strip() and "\t" not in line for line in lines)
        words = sorted(len(line.split()) for line in lines)
        if path.stem not in ("zh", "ja", "yue", "th", "lo"):  # scripts without spaces
            assert 5 <= words[len(words) // 2] <= 40, path.name


def test_parallel_format_and_alignment(corpus):
    languages = sorted(p.stem for p in (corpus / "mono").glob("*.txt"))
    files = sorted(p.name for p in (corpus / "parallel").iterdir())
    assert files == [f"en-{lang}.tsv" for lang in languages if lang != "en"]
    english = None
    for name in files:
        rows = [line.split("\t") for line in read_lines(corpus / "parallel" / name)]
        assert len(rows) >= 500
        assert all(len(row) == 2 and all(f and f == f.strip() for f in row) for row in rows)
        # Every file holds the same CLDR items in the same order: one English column.
        if english is None:
            english = [row[0] for row in rows]
            assert len(set(english)) == len(english)
        assert [row[0] for row in rows] == english, name
    de = dict(line.split("\t") for line in read_lines(corpus / "parallel" / "en-de.tsv"))
    fr = dict(line.split("\t") for line in read_lines(corpus / "parallel" / "en-fr.tsv"))
    assert de["January"] == "Januar" and fr["January"] == "janvier"
    assert de["Germany: Euro"] == "Deutschland: Euro"
    assert fr["Germany: Euro"] == "Allemagne: euro"


def test_a_tenth_is_held_out_the_same_items_in_every_pair_file(corpus):
    """Every tenth document and parallel item goes to held_out/, in the same layout; a held-out
    English item is held out of every pair file, so no held-out pair is trained on."""
    held_out = corpus / "held_out"
    for kind, pattern in (("mono", "*.txt"), ("parallel", "*.tsv")):
        names = sorted(p.name for p in (corpus / kind).glob(pattern))
        assert names == sorted(p.name for p in (held_out / kind).glob(pattern))
        for name in names:
            train, test = read_lines(corpus / kind / name), read_lines(held_out / kind / name)
            total = len(train) + len(test)
            assert len(test) == total // cldr.HELD_OUT_EVERY, name
            assert not set(train) & set(test), name
    english = {tuple(read_lines(held_out / "parallel" / name)[i].split("\t")[0] for i in (0, -1))
               for name in names}  # fmt: skip
    assert len(english) == 1
    trained = {line.split("\t")[0] for line in read_lines(corpus / "parallel" / "en-de.tsv")}
    tested = {line.split("\t")[0] for line in read_lines(held_out / "parallel" / "en-de.tsv")}
    assert len(tested) >= 100 and not trained & tested


def test_the_command_line_writes_the_corpus_where_asked(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "xlpretrain.data.demo_corpus", "--out", str(tmp_path / "demo"),
         "--languages", "3"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert f"held_out_parallel: {tmp_path / 'demo' / 'held_out' / 'parallel'}" in result.stdout
    assert len(list((tmp_path / "demo" / "mono").glob("*.txt"))) == 3
    bad = subprocess.run(
        [sys.executable, "-m", "xlpretrain.data.demo_corpus", "--out", str(tmp_path / "x"),
         "--languages", "1"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and "error: num_languages must be >= 2" in bad.stderr


def test_text_is_real(corpus):
    def mono(lang: str) -> str:  # training and held-out documents
        folders = (corpus / "mono", corpus / "held_out" / "mono")
        return "".join((f / f"{lang}.txt").read_text(encoding="utf-8") for f in folders)

    assert "Deutschland" in mono("de") and "Januar" in mono("de")
    assert "Allemagne" in mono("fr") and "janvier" in mono("fr")
    assert "Германия" in mono("ru") and "ドイツ" in mono("ja") and "Γερμανία" in mono("el")
    assert "Germany: German" in mono("en") and "Euro" in mono("en")


def test_the_babel_build_is_deterministic_across_processes(babel_corpus, tmp_path):
    """A fresh interpreter, with another string-hash seed, builds the same bytes."""
    code = (
        "import sys; from xlpretrain.data import demo_corpus as d\n"
        "d.build_demo_corpus(sys.argv[1], num_languages=5)"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=env)
    assert tree(tmp_path) == tree(babel_corpus)


def test_cached_build_is_not_rewritten(corpus, monkeypatch):
    mtimes = {p: p.stat().st_mtime_ns for p in corpus.rglob("*")}

    def fail(*args):
        raise AssertionError("cached corpus rebuilt")

    monkeypatch.setattr(demo_corpus, "_unpack", fail)
    assert demo_corpus.build_demo_corpus(corpus).mono == corpus / "mono"
    assert {p: p.stat().st_mtime_ns for p in corpus.rglob("*")} == mtimes


def test_interrupted_build_is_redone(corpus, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(corpus, copy)
    # As if killed mid-build: no stamp, a truncated file, a half-written build folder.
    (copy / "DONE").unlink()
    (copy / "mono" / "de.txt").write_text("Deutsch", encoding="utf-8")
    (copy / ".build-stale" / "mono").mkdir(parents=True)
    demo_corpus.build_demo_corpus(copy)
    assert tree(copy) == tree(corpus)
    assert not list(copy.glob(".build-*"))


def test_other_settings_rebuild_from_babel(corpus, babel_corpus, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(corpus, copy)
    mono, parallel, *_ = demo_corpus.build_demo_corpus(copy, num_languages=5)
    assert tree(copy) == tree(babel_corpus)
    languages = sorted(p.stem for p in mono.glob("*.txt"))
    assert len(languages) == 5 and "en" in languages
    assert len(list(parallel.glob("*.tsv"))) == 4
    # With few slots, every language is in a script of its own.
    scripts = {dominant_script((mono / f"{lang}.txt").read_text("utf-8")) for lang in languages}
    assert len(scripts) == 5
    with pytest.raises(ValueError, match="num_languages"):
        demo_corpus.build_demo_corpus(copy, num_languages=1)
    with pytest.raises(ValueError, match="min_entries"):
        demo_corpus.build_demo_corpus(copy, num_languages=400)


def test_the_tests_start_from_an_empty_cache(empty_cache, tmp_path_factory):
    """The README's and docs' commands the tests run read the demo corpus from this session's
    own cache folder, not one a former install or Babel release left in ~/.cache."""
    assert demo_corpus.default_demo_cache_dir() == empty_cache
    assert empty_cache.is_relative_to(tmp_path_factory.getbasetemp())


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("XLPRETRAIN_CACHE", str(tmp_path))
    assert demo_corpus.default_demo_cache_dir() == tmp_path
    monkeypatch.delenv("XLPRETRAIN_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path))
    expected = tmp_path / ".cache" / "xlpretrain" / "demo_corpus_v2"
    assert demo_corpus.default_demo_cache_dir() == expected
