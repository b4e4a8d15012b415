"""Tests of the demo corpus's XTREME-format benchmark (`demo_xtreme`, from the country lines
`demo_country_lines` reads back): the files of google-research/xtreme's layout and formats
(its utils_preprocess.py and mock_test_data/labels), IOB2 tags, answers at their offsets, label
files matching the test files, every language present, balanced labels, the same bytes twice."""

import csv
import io
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from seqeval.metrics import f1_score

from xlpretrain.data import demo_corpus
from xlpretrain.data.demo_corpus import __main__ as demo_corpus_program
from xlpretrain.data.demo_corpus import demo_country_lines, demo_xtreme

TYPES = {"LOC", "LANG", "CUR", "TZ"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    demo_corpus.build_demo_corpus(root)
    return root


@pytest.fixture(scope="module")
def bench(corpus, tmp_path_factory) -> Path:
    """The benchmark as the command line writes it."""
    out = tmp_path_factory.mktemp("xtreme")
    demo_corpus_program.main(["--out", str(corpus), "--xtreme", str(out)])
    return out


@pytest.fixture(scope="module")
def languages(corpus) -> list[str]:
    return sorted(p.stem for p in (corpus / "mono").glob("*.txt"))


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_layout_every_language_and_sizes(bench, languages):
    """XTREME's file names: English train/dev, a test file per language of the corpus, labels in
    labels/<task>/test-<lang>; a few hundred training examples, at most 100 per test file."""
    assert len(languages) == 40
    expected = {"squad/train-v1.1.json", "squad/dev-v1.1.json"}
    for task in ("pawsx", "panx"):
        expected |= {f"{task}/train-en.tsv", f"{task}/dev-en.tsv"}
        expected |= {f"{task}/test-{lang}.tsv" for lang in languages}
        expected |= {f"labels/{task}/test-{lang}.tsv" for lang in languages}
    expected |= {f"xquad/xquad.{lang}.json" for lang in languages}
    expected |= {f"labels/xquad/test-{lang}.json" for lang in languages}
    for lang in set(languages) - {"en"}:
        expected |= {f"tatoeba/{lang}-en.{lang}", f"tatoeba/{lang}-en.en"}
        expected |= {f"labels/tatoeba/test-{lang}.tsv"}
    assert set(tree(bench)) == expected


def test_tatoeba_english_sorted_and_gold_the_line_of_its_translation(bench, corpus, languages):
    """As XTREME's Tatoeba after its preprocessing: the English side sorted, line i's gold the
    line of the other language holding the same territory's country line."""
    english = {line.text: line.key for line in demo_country_lines.english_lines(corpus).values()}
    for lang in set(languages) - {"en"}:
        source = (bench / "tatoeba" / f"{lang}-en.{lang}").read_text(encoding="utf-8").splitlines()
        targets = (bench / "tatoeba" / f"{lang}-en.en").read_text(encoding="utf-8").splitlines()
        gold = [
            int(x) for x in (bench / "labels" / "tatoeba" / f"test-{lang}.tsv").read_text().split()
        ]
        held_out = {
            line.text: line.key
            for line in demo_country_lines.country_lines(corpus, lang, held_out=True)
        }
        assert targets == sorted(targets) and len(source) == len(targets) == len(gold) >= 10
        assert sorted(gold) == list(range(len(source)))
        assert [held_out[source[g]] for g in gold] == [english[t] for t in targets]


def pawsx_rows(path: Path) -> list[list[str]]:
    """As XTREME's PAWS-X processor reads a file (transformers' DataProcessor._read_tsv)."""
    raw = path.read_bytes().decode("utf-8")
    assert raw.endswith("\r\n") and raw.count("\n") == raw.count("\r\n")  # csv.writer's lines
    with open(path, encoding="utf-8-sig") as f:
        return list(csv.reader(f, delimiter="\t", quotechar=None))


def csv_bytes(rows: list[list[str]]) -> bytes:
    buffer = io.StringIO(newline="")
    csv.writer(buffer, delimiter="\t").writerows(rows)
    return buffer.getvalue().encode("utf-8")


def groups(statement: str) -> tuple[str, Counter]:
    head, _, body = statement.partition(": ")
    assert body.endswith(".")
    return head, Counter(body[:-1].split("; "))


def test_pawsx_format_balance_and_meaning(bench, languages):
    """Train/dev rows `sentence1<TAB>sentence2<TAB>label`, test rows without the label, written
    as pawsx_preprocess's csv.writer writes them; labels balanced; a paraphrase restates the
    same fields in another order, a non-paraphrase differs in exactly one field."""
    files = [bench / "pawsx" / "train-en.tsv", bench / "pawsx" / "dev-en.tsv"]
    files += [bench / "pawsx" / f"test-{lang}.tsv" for lang in languages]
    for path in files:
        rows = pawsx_rows(path)
        assert path.read_bytes() == csv_bytes(rows), path.name
        if path.name.startswith("test-"):
            assert all(len(row) == 2 for row in rows), path.name
            label_file = bench / "labels" / "pawsx" / path.name
            labels = label_file.read_text(encoding="utf-8").split("\n")
            assert labels.pop() == "" and len(labels) == len(rows), path.name
        else:
            assert all(len(row) == 3 for row in rows), path.name
            labels = [row[2] for row in rows]
        assert set(labels) == {"0", "1"} and labels.count("1") * 2 == len(labels), path.name
        assert 20 <= len(rows) <= 100 or not path.name.startswith("test-"), path.name
        for (first, second, *_), label in zip(rows, labels, strict=True):
            (head, fields), (head2, fields2) = groups(first), groups(second)
            assert head == head2 and first != second
            if label == "1":
                assert fields == fields2
            else:
                assert sum((fields - fields2).values()) == 1 == sum((fields2 - fields).values())
    assert len(pawsx_rows(bench / "pawsx" / "train-en.tsv")) >= 200


def panx_blocks(path: Path) -> list[list[list[str]]]:
    """Sentences of tab-separated lines; one blank line between sentences, none at the end."""
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n") and not text.endswith("\n\n") and "\r" not in text
    return [[line.split("\t") for line in block.split("\n")] for block in text[:-1].split("\n\n")]


def iob2_ok(tags: list[str]) -> bool:
    """Each tag O, B-T or I-T with T a chosen type; I-T only after B-T or I-T."""
    previous = "O"
    for tag in tags:
        if tag != "O" and (tag[:2] not in ("B-", "I-") or tag[2:] not in TYPES):
            return False
        if tag.startswith("I-") and previous[2:] != tag[2:]:
            return False
        previous = tag
    return True


def test_panx_format_iob2_and_labels(bench, corpus, languages):
    """`word<TAB>tag` lines (train, dev), `word` lines (test) line for line with the labels'
    `tag` lines; words hold no whitespace and no `lang:` prefix, are the line's words (its
    characters in ja/zh/yue); tags are valid IOB2 with every type present in English."""
    seen = Counter()
    for split in ("train", "dev"):
        blocks = panx_blocks(bench / "panx" / f"{split}-en.tsv")
        assert all(len(row) == 2 for block in blocks for row in block)
        for block in blocks:
            assert iob2_ok([tag for _, tag in block]), block
            seen.update(tag[2:] for _, tag in block if tag != "O")
    assert set(seen) == TYPES and len(panx_blocks(bench / "panx" / "train-en.tsv")) >= 100
    for lang in languages:
        words = panx_blocks(bench / "panx" / f"test-{lang}.tsv")
        tags = panx_blocks(bench / "labels" / "panx" / f"test-{lang}.tsv")
        assert [len(b) for b in words] == [len(b) for b in tags] and 5 <= len(words) <= 100
        held_out = demo_country_lines.read_lines(corpus / "held_out" / "mono" / f"{lang}.txt")
        by_character = lang in ("ja", "zh", "yue")
        texts = {"".join(t.split()) if by_character else " ".join(t.split()) for t in held_out}
        for sentence, labels in zip(words, tags, strict=True):
            assert all(
                len(row) == 1 and row[0] and not row[0].startswith(f"{lang}:") for row in sentence
            )
            assert all(
                len(w[0].split()) == 1 and (len(w[0]) == 1 or not by_character) for w in sentence
            )
            assert ("" if by_character else " ").join(w[0] for w in sentence) in texts
            assert iob2_ok([row[0] for row in labels]), (lang, labels)
        gold = [[row[0] for row in labels] for labels in tags]
        assert f1_score(gold, gold) == 1.0  # seqeval, XTREME's scorer, reads our types


def line(text: str, spans: dict[str, list[tuple[int, int]]]) -> demo_country_lines.CountryLine:
    fields = [
        demo_country_lines.Field(kind, (items[0][0], items[-1][1]), tuple(items))
        for kind, items in spans.items()
    ]
    return demo_country_lines.CountryLine(text, "key", tuple(fields))


def test_a_word_takes_the_entity_it_overlaps_and_one_entity_only():
    """Words overlapping an entity are tagged with it (B- on its first word; "and French;" gives
    "and" O); a word over two entities (Thai's two-item list "AและB") leaves the line out."""
    text = "Andorra: Catalan and French; Euro."
    andorra = line(
        text, {"territory": [(0, 7)], "languages": [(9, 16), (21, 27)], "currencies": [(29, 33)]}
    )
    assert demo_xtreme.tagged_words(andorra, by_character=False) == [
        ("Andorra:", "B-LOC"),
        ("Catalan", "B-LANG"),
        ("and", "O"),
        ("French;", "B-LANG"),
        ("Euro.", "B-CUR"),
    ]
    assert [t for _, t in demo_xtreme.tagged_words(andorra, by_character=True)][:9] == [
        "B-LOC",
        *["I-LOC"] * 6,
        "O",
        "B-LANG",
    ]
    thai = line(
        "X: AและB; C.",
        {"territory": [(0, 1)], "languages": [(3, 4), (7, 8)], "currencies": [(10, 11)]},
    )
    assert demo_xtreme.tagged_words(thai, by_character=False) is None
    unsplit = demo_country_lines.Field("cities", (0, 1), None)
    assert (
        demo_xtreme.tagged_words(demo_country_lines.CountryLine("X", "k", (unsplit,)), False)
        is None
    )


def qa_examples(data: dict):
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield paragraph["context"], qa


def test_xquad_answers_at_their_offsets(bench):
    """SQuAD v1.1 JSON; every answer_start points at the answer's text in its context, and the
    answer is the currencies field of the line headed by the question (`question: …; answer`)."""
    files = [bench / "squad" / "train-v1.1.json", bench / "squad" / "dev-v1.1.json"]
    files += sorted((bench / "labels" / "xquad").iterdir())
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        assert data["version"] == "1.1"
        examples = list(qa_examples(data))
        assert len({qa["id"] for _, qa in examples}) == len(examples) >= 20, path.name
        for context, qa in examples:
            (answer,) = qa["answers"]
            start, text = answer["answer_start"], answer["text"]
            assert text and context[start : start + len(text)] == text, (path.name, qa)
            head = context.rfind(qa["question"] + ": ", 0, start)
            assert head == 0 or context[head - 2 : head] == ". ", (path.name, qa)
            languages = context[head + len(qa["question"]) + 2 : start]  # the group before
            assert languages == "" or (languages.endswith("; ") and languages.count("; ") == 1)
            assert context[start + len(text)] in ";.", (path.name, qa)
    assert len(list(qa_examples(json.loads((files[0]).read_text())))) >= 200


def test_xquad_test_files_have_their_answers_removed(bench, languages):
    """xquad.<lang>.json as XTREME's remove_qa_test_annotations leaves it: one entry per
    question, a blank answer, the labels' questions, contexts and ids in the same order."""
    for lang in languages:
        test = json.loads((bench / "xquad" / f"xquad.{lang}.json").read_text(encoding="utf-8"))
        labels = json.loads((bench / "labels" / "xquad" / f"test-{lang}.json").read_text())
        assert list(test) == ["data", "version"] and test["version"] == "1.1"
        assert all(
            len(a["paragraphs"]) == 1 == len(a["paragraphs"][0]["qas"]) for a in test["data"]
        )
        blank = [{"answer_start": 0, "text": ""}]
        assert all(qa["answers"] == blank for _, qa in qa_examples(test))
        assert [(c, qa["question"], qa["id"]) for c, qa in qa_examples(test)] == [
            (c, qa["question"], qa["id"]) for c, qa in qa_examples(labels)
        ]
        assert len(test["data"]) <= 100


def test_the_same_bytes_twice(bench, corpus, tmp_path):
    """In another process with another hash seed too; another seed draws other examples."""
    code = (
        "import sys; from xlpretrain.data.demo_corpus import demo_xtreme as d; "
        "d.write_benchmark(*sys.argv[1:])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    subprocess.run([sys.executable, "-c", code, str(corpus), str(tmp_path)], check=True, env=env)
    assert tree(tmp_path) == tree(bench)
    demo_xtreme.write_benchmark(corpus, tmp_path / "other", seed=1)
    assert tree(tmp_path / "other") != tree(bench)


def test_list_separators_are_read_off_the_corpus(corpus):
    """The locale's list pattern (CLDR's, as the snapshot was built) from its own lines."""
    seps = demo_country_lines.separators
    assert seps(corpus, "en") == demo_country_lines.ListSeparators(", ", ", ", ", and ", " and ")
    assert seps(corpus, "th") == demo_country_lines.ListSeparators(" ", " ", " และ", "และ")
    assert seps(corpus, "zh").last == "和"
    en = demo_country_lines.ListSeparators(", ", ", ", ", and ", " and ")
    assert en.splits("A, B, and C")[0] == [(0, 1), (3, 4), (10, 11)]
    assert en.splits("A and B")[0] == [(0, 1), (6, 7)]
    assert en.splits("A") == [[(0, 1)]]


def test_country_lines_read_back_into_their_fields(corpus):
    """The groups' kinds follow from the currencies (anchored on the parallel items): in
    English every time-zone item ends in "Time" and no city does; Andorra reads as written."""
    lines = demo_country_lines.country_lines(corpus, "en", held_out=False)
    assert len(lines) >= 200
    items = {
        kind: [
            line.part(s)
            for line in lines
            for f in line.fields
            if f.kind == kind
            for s in f.items or ()
        ]
        for kind in ("cities", "time_zones")
    }
    assert len(items["time_zones"]) >= 200 and all(t.endswith(" Time") for t in items["time_zones"])
    assert len(items["cities"]) >= 200 and not any(t.endswith(" Time") for t in items["cities"])
    (andorra,) = [line for line in lines if line.key == "Andorra: Euro"]
    assert [(f.kind, [andorra.part(s) for s in f.items]) for f in andorra.fields] == [
        ("territory", ["Andorra"]),
        ("languages", ["Catalan", "Spanish", "French"]),
        ("currencies", ["Euro"]),
        ("cities", ["Andorra"]),
        ("time_zones", ["Central European Time"]),
    ]
