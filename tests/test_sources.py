"""Tests of the random-access corpus sources: real UDHR data, messy synthetic files, errors,
and pickling into worker processes."""

import multiprocessing
import os
import pickle
import re
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from xlpretrain.data.corpora import folders, sources
from xlpretrain.data.corpora.folders import MonolingualSource, ParallelSource
from xlpretrain.data.corpora.sources import DataError, FileStats, format_stats

# A monolingual file with every kind of problem, scanned with max_line_bytes=32.
MESSY_TXT = b"".join(
    [
        b"first line\n",  # 1
        b"\n",  # 2 empty
        b"  \t \n",  # 3 empty
        b"caf\xc3\xa9 ok\r\n",  # 4
        b"bad \xff byte\n",  # 5 invalid UTF-8
        b"\xe2\x80\x83\xc2\xa0\xe3\x80\x80\n",  # 6 empty: em, no-break, ideographic spaces
        b"x" * 33 + b"\n",  # 7 too long
        b"truncated \xe4\xb8\n",  # 8 invalid UTF-8
        b"  indented\r\n",  # 9
        b"\r\n",  # 10 empty
        b"tab\tinside\n",  # 11
        b"y" * 32 + b"\r\n",  # 12 exactly max_line_bytes: kept
        b"\xff" * 200 + b"\n",  # 13 too long (and invalid: too long wins)
        b"last without newline",  # 14
    ]
)
MESSY_LINES = [
    "first line",
    "café ok",
    "  indented",
    "tab\tinside",
    "y" * 32,
    "last without newline",
]
MESSY_STATS = dict(
    total=14,
    used=6,
    empty=4,
    invalid_utf8=2,
    too_long=2,
    bad_fields=0,
    examples={"too_long": [7, 13], "invalid_utf8": [5, 8], "empty": [2, 3, 6, 10]},
)

MESSY_TSV = b"".join(
    [
        b"hello\thallo\n",  # 1
        b"one field only\n",  # 2 bad fields
        b"a\tb\tc\n",  # 3 bad fields
        b"\tmissing source\n",  # 4 bad fields
        b"missing target\t \r\n",  # 5 bad fields
        b"\n",  # 6 empty
        b"caf\xc3\xa9\tcoffee\r\n",  # 7
        b"\xff\tx\n",  # 8 invalid UTF-8
        b"x\t\xe3\x80\x80\n",  # 9 bad fields (ideographic space)
        b"last\tpair",  # 10
    ]
)
MESSY_PAIRS = [("hello", "hallo"), ("café", "coffee"), ("last", "pair")]


def write(folder: Path, name: str, data: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    return path


def fields(stats: FileStats) -> dict:
    return {k: v for k, v in vars(stats).items() if k != "path"}


# ---------------------------------------------------------------- real data (UDHR)


def test_udhr_monolingual_loads_every_language(udhr):
    source = MonolingualSource.from_dir(udhr / "mono")
    assert source.languages == sorted(p.stem for p in (udhr / "mono").glob("*.txt"))
    assert len(source.languages) == 528
    assert source.num_lines("eng") == 50
    for lang in ("eng", "007", "cmn_hans"):
        raw = (udhr / "mono" / f"{lang}.txt").read_bytes()
        assert source.num_lines(lang) == raw.count(b"\n")  # what `wc -l` says
        lines = raw.decode().split("\n")
        assert source.line(lang, 0) == lines[0]
        assert source.line(lang, source.num_lines(lang) - 1) == lines[-2]
    total = sum(map(source.num_lines, source.languages))
    assert source.summary() == [f"528 files: {total} of {total} lines used; skipped nothing"]


def test_udhr_parallel_loads_every_pair(udhr):
    source = ParallelSource.from_dir(udhr / "parallel")
    assert len(source.pairs) == 527
    assert all(l1 == "eng" for l1, _ in source.pairs)
    assert source.pairs == sorted(tuple(p.stem.split("-")) for p in (udhr / "parallel").glob("*"))
    assert len(source.languages) == 528 and "eng" in source.languages
    raw = (udhr / "parallel" / "eng-007.tsv").read_bytes()
    assert source.num_lines(("eng", "007")) == raw.count(b"\n") == 40
    first = raw.decode().split("\n")[0]
    assert source.line(("eng", "007"), 0) == tuple(first.split("\t"))
    assert source.line(("eng", "007"), 0)[0].startswith("All human beings are born free")
    assert all(s.used == s.total for s in source.stats.values())


def test_udhr_subsets(udhr):
    mono = MonolingualSource.from_dir(udhr / "mono", languages=["eng", "deu_1996", "eng"])
    assert mono.languages == ["deu_1996", "eng"]
    par = ParallelSource.from_dir(udhr / "parallel", pairs=["eng-008", ("eng", "007")])
    assert par.pairs == [("eng", "007"), ("eng", "008")]
    assert par.languages == ["007", "008", "eng"]


def test_udhr_pickle_is_small(udhr):
    source = MonolingualSource.from_dir(udhr / "mono")
    content = sum(p.stat().st_size for p in (udhr / "mono").glob("*.txt"))
    assert len(pickle.dumps(source)) < content / 4


# ---------------------------------------------------------------- messy data


def test_monolingual_classifies_every_line(tmp_path):
    path = write(tmp_path, "xx.txt", MESSY_TXT)
    write(tmp_path, "README.md", b"not data\n")
    source = MonolingualSource.from_dir(tmp_path, max_line_bytes=32)
    assert source.languages == ["xx"]
    assert source.stats["xx"] == FileStats(path=str(path), **MESSY_STATS)
    assert [source.line("xx", i) for i in range(source.num_lines("xx"))] == MESSY_LINES
    path = write(tmp_path, "yy.txt", b"ok\ntruncated at the end \xc3")
    stats = MonolingualSource.from_dir(tmp_path, languages=["yy"]).stats["yy"]
    assert stats == FileStats(str(path), 2, 1, invalid_utf8=1, examples={"invalid_utf8": [2]})


@pytest.mark.parametrize("chunk_bytes", [1, 40, 57, 100, 1000])
def test_chunked_scan_gives_the_same_result(tmp_path, monkeypatch, chunk_bytes):
    # Chunks are at least max_line_bytes + 2 = 34 bytes; 1 and 40 put line 13 (201 bytes) in
    # a chunk of its own, read as too long without being decoded.
    monkeypatch.setattr(folders, "_CHUNK_BYTES", chunk_bytes)
    write(tmp_path, "xx.txt", (MESSY_TXT + b"\n") * 3)
    source = MonolingualSource.from_dir(tmp_path, max_line_bytes=32)
    stats = source.stats["xx"]
    assert (stats.total, stats.used, stats.empty, stats.invalid_utf8, stats.too_long) == (
        42,
        18,
        12,
        6,
        6,
    )
    assert stats.examples == {
        "too_long": [7, 13, 21, 27, 35],
        "invalid_utf8": [5, 8, 19, 22, 33],
        "empty": [2, 3, 6, 10, 16],
    }
    assert [source.line("xx", i) for i in range(18)] == MESSY_LINES * 3


def test_whitespace_lines_are_empty_and_others_are_not(tmp_path):
    spaces = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace() and chr(c) != "\n"]
    kept = ["あいう", " x", "\u3000漢字", "\u2000\u2001.", "\u00e9", "\u1680\u1680-", "🙂"]
    text = "\n".join(spaces + [" \t\u3000\u00a0"] + kept) + "\n"
    write(tmp_path, "xx.txt", text.encode())
    source = MonolingualSource.from_dir(tmp_path)
    stats = source.stats["xx"]
    # '\r' alone is a line end's CR, so that line is empty too.
    assert (stats.empty, stats.used) == (len(spaces) + 1, len(kept))
    assert [source.line("xx", i) for i in range(len(kept))] == kept


def test_parallel_classifies_every_line(tmp_path):
    path = write(tmp_path, "en-de.tsv", MESSY_TSV)
    source = ParallelSource.from_dir(tmp_path)
    assert source.pairs == [("en", "de")]
    assert source.languages == ["de", "en"]
    assert fields(source.stats[("en", "de")]) == dict(
        total=10,
        used=3,
        empty=1,
        invalid_utf8=1,
        too_long=0,
        bad_fields=5,
        examples={"invalid_utf8": [8], "empty": [6], "bad_fields": [2, 3, 4, 5, 9]},
    )
    assert source.stats[("en", "de")].path == str(path)
    assert [source.line(("en", "de"), i) for i in range(3)] == MESSY_PAIRS
    assert source.line(["en", "de"], 1) == ("café", "coffee")


def test_format_stats(tmp_path):
    write(tmp_path, "xx.txt", MESSY_TXT)
    write(tmp_path, "yy.txt", b"clean\n")
    source = MonolingualSource.from_dir(tmp_path, max_line_bytes=32)
    assert source.summary() == format_stats(source.stats)
    assert source.summary() == [
        f"{tmp_path / 'xx.txt'}: skipped 8 of 14 lines: 2 too long (lines 7, 13), "
        "2 invalid UTF-8 (lines 5, 8), 4 empty (lines 2, 3, 6, 10)",
        "2 files: 7 of 15 lines used; skipped 2 too long, 2 invalid UTF-8, 4 empty",
    ]
    many = FileStats("p.tsv", total=100, used=90, bad_fields=10, examples={"bad_fields": [1, 2]})
    assert format_stats({("a", "b"): many})[0] == (
        "p.tsv: skipped 10 of 100 lines: 10 bad fields (lines 1, 2, …)"
    )


# ---------------------------------------------------------------- strict mode and errors


# One bad line (line 2) of each kind between two good ones: file, line, kind, strict message.
EMPTY, UTF8 = "empty or whitespace-only line", "invalid UTF-8"
FIELDS = "not exactly two non-empty tab-separated fields"
LONG = "line longer than max_line_bytes=64"
ONE_BAD_LINE = {
    "txt-empty": ("xx.txt", b"", "empty", EMPTY),
    "txt-whitespace": ("xx.txt", b" \t\xe3\x80\x80", "empty", EMPTY),
    "txt-crlf-empty": ("xx.txt", b"\r", "empty", EMPTY),
    "txt-invalid-utf8": ("xx.txt", b"bad \xc3\x28 byte", "invalid_utf8", UTF8),
    "txt-cut-utf8": ("xx.txt", b"cut \xe4\xb8", "invalid_utf8", UTF8),
    "txt-too-long": ("xx.txt", b"x" * 65, "too_long", LONG),
    "tsv-empty": ("en-de.tsv", b"", "empty", EMPTY),
    "tsv-1-field": ("en-de.tsv", b"one field", "bad_fields", FIELDS),
    "tsv-3-fields": ("en-de.tsv", b"a\tb\tc", "bad_fields", FIELDS),
    "tsv-blank-field": ("en-de.tsv", b"a\t ", "bad_fields", FIELDS),
    "tsv-invalid-utf8": ("en-de.tsv", b"\xff\tb", "invalid_utf8", UTF8),
    "tsv-too-long": ("en-de.tsv", b"a\t" + b"x" * 63, "too_long", LONG),
}


@pytest.mark.parametrize(
    "name,line,kind,message", list(ONE_BAD_LINE.values()), ids=list(ONE_BAD_LINE)
)
def test_each_bad_line_is_counted_or_in_strict_mode_an_error(tmp_path, name, line, kind, message):
    good = b"good\tline" if name.endswith(".tsv") else b"good line"
    path = write(tmp_path, name, good + b"\n" + line + b"\n" + good + b"\r\n")
    load = ParallelSource.from_dir if name.endswith(".tsv") else MonolingualSource.from_dir
    source = load(tmp_path, max_line_bytes=64)
    (stats,) = source.stats.values()
    assert (stats.path, stats.total, stats.used, getattr(stats, kind)) == (str(path), 3, 2, 1)
    assert stats.skipped == 1 and stats.examples == {kind: [2]}
    assert source.summary()[0].startswith(f"{path}: skipped 1 of 3 lines: 1 ")
    with pytest.raises(DataError) as error:
        load(tmp_path, max_line_bytes=64, strict=True)
    assert str(error.value) == f"{path}:2: {message} (strict mode)"


def test_crlf_and_final_line_without_newline_are_fine_in_strict_mode(tmp_path):
    write(tmp_path / "mono", "xx.txt", b"one\r\ntwo\r\nthree")
    mono = MonolingualSource.from_dir(tmp_path / "mono", strict=True)
    assert [mono.line("xx", i) for i in range(3)] == ["one", "two", "three"]
    write(tmp_path / "par", "en-de.tsv", b"a\tb\r\nc\td")
    par = ParallelSource.from_dir(tmp_path / "par", strict=True)
    assert [par.line(("en", "de"), i) for i in range(2)] == [("a", "b"), ("c", "d")]
    assert par.summary() == ["1 files: 2 of 2 lines used; skipped nothing"]


def test_strict_mode_names_file_and_line(tmp_path):
    path = write(tmp_path / "mono", "xx.txt", MESSY_TXT)
    with pytest.raises(DataError, match=re.escape(f"{path}:2: empty or whitespace-only line")):
        MonolingualSource.from_dir(tmp_path / "mono", strict=True, max_line_bytes=32)
    path.write_bytes(b"ok\nfine\n\xff\n")
    with pytest.raises(DataError, match=re.escape(f"{path}:3: invalid UTF-8")):
        MonolingualSource.from_dir(tmp_path / "mono", strict=True)
    path = write(tmp_path / "par", "en-de.tsv", MESSY_TSV)
    with pytest.raises(DataError, match=re.escape(f"{path}:2: not exactly two non-empty")):
        ParallelSource.from_dir(tmp_path / "par", strict=True)
    path.write_bytes(b"a\tb\r\nc\td")
    assert ParallelSource.from_dir(tmp_path / "par", strict=True).num_lines(("en", "de")) == 2


def test_folder_errors_name_the_path(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(DataError, match=re.escape(f"{missing} does not exist")):
        MonolingualSource.from_dir(missing)
    afile = write(tmp_path, "file.txt", b"x\n")
    with pytest.raises(DataError, match=re.escape(f"{afile} is not a directory")):
        ParallelSource.from_dir(afile)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError) as error:
        MonolingualSource.from_dir(empty)
    assert str(error.value) == (
        f"no *.txt file in data folder {empty} (monolingual data is one <lang>.txt file per "
        "language, e.g. en.txt); it is empty"
    )
    write(empty, "notes.md", b"x\n")
    write(empty, "en.txt.gz", b"x\n")
    (empty / "sub.txt").mkdir()
    with pytest.raises(DataError) as error:
        ParallelSource.from_dir(empty)
    assert str(error.value) == (
        f"no *.tsv file in data folder {empty} (parallel data is one <l1>-<l2>.tsv file per "
        "language pair, e.g. en-de.tsv); it holds only: en.txt.gz, notes.md, sub.txt"
    )
    for name in ("fra.txt", "deu.txt"):  # a monolingual folder named as the parallel one
        write(empty, name, b"x\n")
    with pytest.raises(DataError, match=r"pair, e\.g\. deu-en\.tsv\); it holds only: deu"):
        ParallelSource.from_dir(empty)
    for name in ("fra.txt", "deu.txt"):
        (empty / name).unlink()
    for i in range(5):
        write(empty, f"{i}.csv", b"x\n")
    with pytest.raises(
        DataError, match=re.escape("it holds only: 0.csv, 1.csv, 2.csv, 3.csv, 4.csv, …")
    ):
        MonolingualSource.from_dir(empty)


def test_file_without_usable_line_is_left_out_and_reported(tmp_path):
    en = write(tmp_path, "en.txt", b"fine\n\n")
    empty = write(tmp_path, "xx.txt", b"")
    bad = write(tmp_path, "yy.txt", b"\n  \n\xff\n\r\n")
    source = MonolingualSource.from_dir(tmp_path)
    assert source.languages == ["en"]  # so sampling never sees a language with 0 lines
    assert list(source.stats) == ["en", "xx", "yy"]
    assert source.summary() == [
        f"{en}: skipped 1 of 2 lines: 1 empty (line 2)",
        f"{empty}: no usable lines, file left out (the file is empty)",
        f"{bad}: no usable lines, file left out "
        "(1 invalid UTF-8 (line 3), 3 empty (lines 1, 2, 4))",
        "3 files: 1 of 6 lines used; skipped 1 invalid UTF-8, 4 empty; "
        "2 files with no usable lines left out",
    ]
    with pytest.raises(KeyError, match="'xx' is not in this source"):
        source.line("xx", 0)
    assert repr(source) == f"MonolingualSource(1 files, 1 lines, {tmp_path})"
    pair = write(tmp_path / "par", "en-xx.tsv", b"only one field\n")
    write(tmp_path / "par", "en-de.tsv", b"a\tb\n")
    par = ParallelSource.from_dir(tmp_path / "par")
    assert par.pairs == [("en", "de")] and par.languages == ["de", "en"]
    assert par.summary() == [
        f"{pair}: no usable lines, file left out (1 bad fields (line 1))",
        "2 files: 1 of 2 lines used; skipped 1 bad fields; 1 file with no usable lines left out",
    ]


def test_file_without_usable_line_is_an_error_in_strict_mode_or_when_named(tmp_path):
    write(tmp_path, "en.txt", b"fine\n")
    empty = write(tmp_path, "xx.txt", b"")
    message = f"language 'xx': no usable lines in {empty} (the file is empty; strict mode)"
    with pytest.raises(DataError, match=re.escape(message)):
        MonolingualSource.from_dir(tmp_path, strict=True)
    bad = write(tmp_path, "yy.txt", b"\n\xff\n")
    with pytest.raises(DataError, match=re.escape(f"{bad}:1: empty or whitespace-only line")):
        MonolingualSource.from_dir(tmp_path, strict=True, languages=["en", "yy"])
    with pytest.raises(DataError) as error:
        MonolingualSource.from_dir(tmp_path, languages=["en", "yy"])
    assert str(error.value) == (
        f"language 'yy': no usable lines in {bad} (1 invalid UTF-8 (line 2), 1 empty (line 1); "
        "it was asked for by name)"
    )
    assert MonolingualSource.from_dir(tmp_path, languages=["en"]).languages == ["en"]
    pair = write(tmp_path / "par", "en-xx.tsv", b"")
    message = f"language pair 'en-xx': no usable lines in {pair} (the file is empty; strict mode)"
    with pytest.raises(DataError, match=re.escape(message)):
        ParallelSource.from_dir(tmp_path / "par", strict=True)


def test_folder_without_any_usable_line_is_an_error(tmp_path):
    write(tmp_path, "en.txt", b"")
    last = write(tmp_path, "xx.txt", b" \n")
    with pytest.raises(DataError) as error:
        MonolingualSource.from_dir(tmp_path)
    assert str(error.value) == (
        f"no usable lines in any of the 2 *.txt files in data folder {tmp_path} "
        f"(e.g. {last}: 1 empty (line 1))"
    )


def test_selection_and_naming_errors(tmp_path):
    write(tmp_path / "mono", "en.txt", b"fine\n")
    with pytest.raises(DataError, match=re.escape(f"language 'zz' not found in {tmp_path}")):
        MonolingualSource.from_dir(tmp_path / "mono", languages=["en", "zz"])
    with pytest.raises(TypeError, match="not the string"):
        MonolingualSource.from_dir(tmp_path / "mono", languages="en")
    write(tmp_path / "par", "en-de.tsv", b"a\tb\n")
    with pytest.raises(DataError, match="language pair 'en-fr' not found"):
        ParallelSource.from_dir(tmp_path / "par", pairs=[("en", "fr")])
    bad = write(tmp_path / "par", "zh-Hant-en.tsv", b"a\tb\n")
    message = f"from 'zh-Hant-en' (file {bad}): expected '<l1>-<l2>' with exactly one '-'"
    with pytest.raises(DataError, match=re.escape(message)):
        ParallelSource.from_dir(tmp_path / "par")
    bad.rename(tmp_path / "par" / "en-.tsv")
    with pytest.raises(DataError, match="cannot parse a language pair from 'en-'"):
        ParallelSource.from_dir(tmp_path / "par")


def test_lookup_errors(tmp_path):
    write(tmp_path, "en.txt", b"a\nb\n")
    source = MonolingualSource.from_dir(tmp_path)
    with pytest.raises(KeyError, match="'fr' is not in this source"):
        source.line("fr", 0)
    with pytest.raises(IndexError, match="line 2 out of range"):
        source.line("en", 2)
    with pytest.raises(IndexError):
        source.line("en", -1)


# ---------------------------------------------------------------- pickling, processes


def test_pickled_source_reads_in_a_spawned_process(tmp_path):
    marker = "unique-marker-7f3a"
    lines = [f"{marker} line {i}: " + "ünïcödé " * 10 for i in range(5000)]
    path = write(tmp_path, "en.txt", ("\n".join(lines) + "\n").encode())
    write(tmp_path, "de.txt", b"eins\nzwei\n")
    source = MonolingualSource.from_dir(tmp_path)
    assert source.line("en", 0) == lines[0]  # opens the mmap, which must not be pickled
    data = pickle.dumps(source)
    assert marker.encode() not in data
    assert len(data) < path.stat().st_size / 4
    assert pickle.loads(data).line("en", 4999) == lines[4999]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        got = [pool.submit(source.line, "en", i) for i in (0, 1234, 4999)]
        got.append(pool.submit(source.line, "de", 1))
        assert [f.result() for f in got] == [lines[0], lines[1234], lines[4999], "zwei"]


# ---------------------------------------------------------------- files changed mid-run


def fresh_copy(source):
    """The source as a grain worker process gets it: pickled, so it reopens files by path."""
    return pickle.loads(pickle.dumps(source))


def test_removed_file_reads_on_where_open_and_is_an_error_where_reopened(tmp_path):
    path = write(tmp_path, "en.txt", b"one\ntwo\n")
    source = MonolingualSource.from_dir(tmp_path)
    worker = fresh_copy(source)
    assert source.line("en", 0) == "one"  # opened: the mapping keeps the data alive
    path.unlink()
    assert source.line("en", 1) == "two"
    message = f"{path} was removed after it was indexed at start: restart the run to re-index"
    with pytest.raises(DataError, match=re.escape(message)):
        worker.line("en", 1)


def test_replaced_file_reads_on_where_open_and_is_an_error_where_reopened(tmp_path):
    path = write(tmp_path, "en-de.tsv", b"a\tb\nc\td\n")
    source = ParallelSource.from_dir(tmp_path)
    worker = fresh_copy(source)
    assert source.line(("en", "de"), 0) == ("a", "b")
    new = write(tmp_path, "new.tmp", b"c\td\na\tb\n")  # same size, other lines
    new.replace(path)  # how tools update files atomically: a new inode at the old path
    assert source.line(("en", "de"), 1) == ("c", "d")  # still the scanned file
    message = f"{path} was replaced by another file after it was indexed at start"
    with pytest.raises(DataError, match=re.escape(message)):
        worker.line(("en", "de"), 0)


@pytest.mark.parametrize("reopen", [False, True])
def test_file_rewritten_in_place_is_an_error(tmp_path, reopen):
    path = write(tmp_path, "en.txt", b"one\ntwo\n")
    scanned_mtime_ns = path.stat().st_mtime_ns
    source = MonolingualSource.from_dir(tmp_path)
    assert source.line("en", 0) == "one"
    reader = fresh_copy(source) if reopen else source
    path.write_bytes(b"three\n")
    message = f"{path} was modified after it was indexed at start (8 -> 6 bytes): its line index"
    with pytest.raises(DataError, match=re.escape(message)):
        reader.line("en", 0)
    path.write_bytes(b"uno\ndos\n")  # the scanned size again, other lines
    # Set the time explicitly: writes within one clock tick can share a modification time.
    os.utime(path, ns=(scanned_mtime_ns, scanned_mtime_ns + 10**9))
    message = f"{path} was modified after it was indexed at start (same size, new modification"
    with pytest.raises(DataError, match=re.escape(message)):
        reader.line("en", 1)


TRUNCATE = """
import sys
from xlpretrain.data.corpora.folders import MonolingualSource
from xlpretrain.data.corpora.sources import DataError

source = MonolingualSource.from_dir(sys.argv[1])
fresh = MonolingualSource.from_dir(sys.argv[1])
assert source.line("en", 0).startswith("x")  # the file is mapped now
with open(sys.argv[1] + "/en.txt", "r+b") as f:
    f.truncate(10)
for reader in (source, fresh):
    try:
        reader.line("en", 1)  # past the end of the truncated file: SIGBUS if read
    except DataError as error:
        print(error)
"""


def test_truncated_file_is_an_error_not_a_crash(tmp_path):
    # A read of a truncated mmap kills the process with SIGBUS; a subprocess keeps a broken
    # check from taking pytest down with it.
    path = write(tmp_path, "en.txt", b"x" * 10_000 + b"\n" + b"y" * 10_000 + b"\n")
    result = subprocess.run(
        [sys.executable, "-c", TRUNCATE, str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 0, f"exit status {result.returncode}: {result.stderr[-2000:]}"
    message = f"{path} was modified after it was indexed at start (20002 -> 10 bytes)"
    stale = "its line index no longer matches; restart the run to re-index the data"
    assert result.stdout.splitlines() == [f"{message}: {stale}"] * 2


PROTOCOL_CASES = [
    ("MonolingualSource", "MonolingualCorpus"),
    ("TfdsMonolingualSource", "MonolingualCorpus"),
    ("ParallelSource", "ParallelCorpus"),
    ("TfdsParallelSource", "ParallelCorpus"),
    ("StoreMonolingual", "MonolingualCorpus"),
    ("StoreParallel", "ParallelCorpus"),
]


@pytest.mark.parametrize("backend, protocol", PROTOCOL_CASES)
def test_every_backend_implements_its_corpus_protocol(backend, protocol):
    """Folder and TFDS sources alike have every member the readers use (a new backend that
    forgets one fails here); `stats` is set per instance by the shared base."""
    from xlpretrain.data.corpora import protocols, store, tfds_source

    cls = next(c for m in (folders, tfds_source, store) if (c := getattr(m, backend, None)))
    wanted = getattr(protocols, protocol)
    members = {n for n in vars(wanted) if not n.startswith("_")} | set(wanted.__annotations__)
    missing = sorted(m for m in members - {"stats"} if not hasattr(cls, m))
    assert not missing, f"{backend} lacks {missing}"
    assert issubclass(cls, sources.MonolingualBase if "Mono" in protocol else sources.ParallelBase)


def test_folder_sources_are_corpora(tmp_path):
    from xlpretrain.data.corpora.protocols import MonolingualCorpus, ParallelCorpus

    (tmp_path / "mono").mkdir()
    (tmp_path / "mono" / "eng.txt").write_text("one\ntwo\n")
    (tmp_path / "par").mkdir()
    (tmp_path / "par" / "eng-deu.tsv").write_text("one\teins\n")
    mono = folders.MonolingualSource.from_dir(tmp_path / "mono")
    parallel = folders.ParallelSource.from_dir(tmp_path / "par")
    assert isinstance(mono, MonolingualCorpus) and not isinstance(mono, ParallelCorpus)
    assert isinstance(parallel, ParallelCorpus)
    assert parallel.line(("eng", "deu"), 0) == ("one", "eins") and mono.num_lines("eng") == 2
