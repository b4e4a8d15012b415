"""XTREME's data on disk (`xlpretrain.data.xtreme`): the layout `find_task` checks, every reader
on the fixture tree of `tests/xtreme_fixtures.py` (counts and exact fields), bad lines counted in
training files and an error naming file:line in references, and the submission writers against
lines of google-research/xtreme's mock_test_data, read back the way its evaluate.py reads."""

import json
import re

import pytest

from tests import xtreme_fixtures as fx
from xlpretrain.data.corpora.sources import DataError
from xlpretrain.data.finetuning.task_examples import Answer, PairExample, QAExample, TaggedSentence
from xlpretrain.data.xtreme import (
    find_task,
    read_bucc,
    read_pair_file,
    read_split,
    read_squad_file,
    read_tagged_file,
    read_tatoeba,
    read_translated_pairs,
    submission_path,
    task_languages,
    write_id_pairs,
    write_label_lines,
    write_labels,
    write_qa_predictions,
    write_squad_file,
    write_tag_lines,
)

XNLI_LABELS = ("contradiction", "entailment", "neutral")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return fx.write_xtreme_dir(tmp_path_factory.mktemp("xtreme") / "download")


def files(root, task):
    return find_task(root, task, languages=fx.LANGUAGES[task])


def names(root, paths):
    return [str(path.relative_to(root)) for path in paths]


# evaluate.py's readers of a submission (read_label, read_tag, read_squad), ported.
def evaluate_read_label(path):
    return [line.strip() for line in open(path)]


def evaluate_read_tag(path):
    labels, example = [], []
    for line in open(path):
        if line.strip():
            example.append(line.strip())
        else:
            labels.append(example)
            example = []
    return labels + [example] if example else labels


def evaluate_read_squad(path):
    content = json.load(open(path))
    return content["data"] if "data" in content else content


# ---------------------------------------------------------------------------------------------
# Layout


def test_find_task_gives_each_tasks_files(root):
    xnli = files(root, "xnli")
    assert names(root, xnli.train) == ["xnli/train-en.tsv"]
    assert names(root, xnli.dev) == ["xnli/dev-en.tsv"]
    assert {lang: names(root, p) for lang, p in xnli.test.items()} == {
        "en": ["xnli/test-en.tsv"],
        "de": ["xnli/test-de.tsv"],
        "zh": ["xnli/test-zh.tsv"],
    }
    assert sorted(xnli.dev_by_language) == ["de", "en", "zh"]
    assert names(root, xnli.translate_train["zh"]) == ["xnli/translate-train/en-zh-translated.tsv"]
    assert sorted(xnli.translate_train) == ["de", "zh"]

    mlqa = files(root, "mlqa")
    assert names(root, mlqa.train) == ["squad/train-v1.1.json"]
    assert names(root, mlqa.dev) == ["squad/dev-v1.1.json"]
    assert names(root, mlqa.test["zh"]) == ["mlqa/MLQA_V1/test/test-context-zh-question-zh.json"]
    assert names(root, mlqa.dev_by_language["de"]) == [
        "mlqa/MLQA_V1/dev/dev-context-de-question-de.json"
    ]
    assert names(root, mlqa.translate_train["de"]) == [
        "squad/translate-train/squad.translate.train.en-de.json"
    ]

    tydiqa = files(root, "tydiqa")
    assert names(root, tydiqa.train) == [
        "tydiqa/tydiqa-goldp-v1.1-train/tydiqa.goldp.en.train.json"
    ]
    assert tydiqa.dev is None  # XTREME ships no English dev with answers: its dev is the test
    assert names(root, tydiqa.test["bn"]) == [
        "tydiqa/tydiqa-goldp-v1.1-dev/tydiqa.goldp.bn.dev.json"
    ]

    bucc = files(root, "bucc2018")
    assert bucc.train is None and bucc.dev is None
    assert names(root, bucc.test["zh"]) == ["bucc2018/zh-en.test.zh", "bucc2018/zh-en.test.en"]
    assert names(root, bucc.dev_by_language["de"]) == [
        "bucc2018/de-en.dev.de",
        "bucc2018/de-en.dev.en",
        "bucc2018/de-en.dev.gold",
    ]
    tatoeba = files(root, "tatoeba")
    assert names(root, tatoeba.test["de"]) == ["tatoeba/de-en.de", "tatoeba/de-en.en"]
    panx = files(root, "panx")
    assert panx.translate_train == {}  # XTREME ships none for the tagging tasks
    assert names(root, panx.test["ar"]) == ["panx/test-ar.tsv"]


def test_language_lists_are_evaluates():
    assert task_languages("pawsx") == ("de", "en", "es", "fr", "ja", "ko", "zh")
    assert task_languages("xquad", "xtreme-r")[-1] == "ro"
    assert len(task_languages("panx")) == 40 and len(task_languages("panx", "xtreme-r")) == 48
    assert len(task_languages("udpos")) == 33 and len(task_languages("udpos", "xtreme-r")) == 38
    assert len(task_languages("tatoeba")) == 36 and len(task_languages("tatoeba", "xtreme-r")) == 41
    with pytest.raises(ValueError, match="pawsx is not an XTREME-R task"):
        task_languages("pawsx", "xtreme-r")
    with pytest.raises(ValueError, match="unknown XTREME task 'xnil'"):
        find_task("/nowhere", "xnil")


def one_line_error(call) -> str:
    with pytest.raises(DataError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_panx_folder_names_the_manual_step(tmp_path):
    fx.write_xtreme_dir(tmp_path, ("xnli",))
    message = one_line_error(lambda: find_task(tmp_path, "panx"))
    assert f"no folder {tmp_path / 'panx'} for panx: expected panx/train-en.tsv, " in message
    assert "panx/test-{lang}.tsv" in message
    assert "AmazonPhotos.zip" in message and "download_data.sh" in message


def test_missing_files_are_named(tmp_path):
    fx.write_xtreme_dir(tmp_path, ("xnli", "xquad"))  # no squad/: xquad's training data
    (tmp_path / "xnli" / "test-zh.tsv").unlink()
    message = one_line_error(lambda: files(tmp_path, "xnli"))
    assert message.startswith(f"{tmp_path}: xnli is missing xnli/test-zh.tsv (")
    message = one_line_error(lambda: files(tmp_path, "xquad"))
    assert "xquad is missing squad/train-v1.1.json, squad/dev-v1.1.json" in message
    # By default every XTREME language is asked for.
    message = one_line_error(lambda: find_task(tmp_path, "xnli"))
    assert "xnli/test-ar.tsv, xnli/test-bg.tsv" in message and "xnli/test-en.tsv" not in message


# ---------------------------------------------------------------------------------------------
# Readers on the fixture tree


def as_written(text: str) -> str:
    """A field as csv.writer(delimiter="\\t") writes it (quoted, its quotes doubled, where it
    holds a quote), which XTREME's reader (quotechar=None) keeps."""
    return f'"{text.replace(chr(34), 2 * chr(34))}"' if '"' in text else text


def test_pair_files(root):
    xnli = files(root, "xnli")
    train, stats = read_pair_file(xnli.train[0], training=True, labels=XNLI_LABELS)
    rows = fx.PAIRS["xnli"]["en"] + [fx.EXTRA_PAIR["xnli"]]
    assert train == [PairExample(as_written(a), as_written(b), c) for a, b, c in rows]
    assert train[1].text_a == '"He said ""no"" twice."'  # as csv.writer wrote it (quotechar=None)
    assert (stats.total, stats.used, stats.skipped) == (4, 4, 0)
    dev, _ = read_pair_file(xnli.dev_by_language["zh"][0], training=False, labels=XNLI_LABELS)
    zh = fx.PAIRS["xnli"]["zh"]
    assert dev == [PairExample(as_written(a), as_written(b), c) for a, b, c in zh]
    test, _ = read_pair_file(xnli.test["zh"][0], training=False, labels=XNLI_LABELS)
    assert test == [PairExample(as_written(a), as_written(b), None) for a, b, _ in zh[::-1]]
    translated, stats = read_translated_pairs(xnli.translate_train["de"][0], labels=XNLI_LABELS)
    assert translated == [PairExample(*row) for row in fx.PAIRS["xnli"]["de"]]  # contradictory
    assert stats.used == 3

    pawsx = files(root, "pawsx")
    test, _ = read_pair_file(pawsx.test["de"][0], training=False, labels=("0", "1"))
    assert [(e.text_a, e.label) for e in test] == [
        ("Tom verkaufte Anna ein Auto.", None),
        ("Paris ist die Hauptstadt Frankreichs.", None),
    ]


def test_tagged_files(root):
    panx = files(root, "panx")
    train, stats = read_tagged_file(panx.train[0], training=True)
    expected = fx.TAGGED["panx"]["en"] + [fx.EXTRA_TAGGED["panx"]]
    assert train == [TaggedSentence(*sentence) for sentence in expected]
    assert train[0].words[5] == "12:30"  # no `lang:` prefix is cut twice
    assert (stats.total, stats.used) == (16, 16)  # word lines; separators are not counted
    test, _ = read_tagged_file(panx.test["ar"][0], training=False)
    assert test == [TaggedSentence(words, None) for words, _ in fx.TAGGED["panx"]["ar"][::-1]]
    udpos = files(root, "udpos")
    dev, _ = read_tagged_file(udpos.dev_by_language["zh"][0], training=False)
    assert dev == [TaggedSentence(*sentence) for sentence in fx.TAGGED["udpos"]["zh"]]


def test_squad_files(root):
    xquad = files(root, "xquad")
    train, stats = read_squad_file(xquad.train[0], training=True)
    assert [(e.id, e.answers) for e in train] == [
        ("s-train-1", (Answer("Paris", 0),)),
        ("s-train-2", (Answer("two million", 38),)),
        ("s-train-3", (Answer("Africa", 23),)),
    ]
    assert train[0].context == train[1].context  # two questions of one paragraph
    assert (stats.total, stats.used) == (3, 3)
    dev, _ = read_squad_file(xquad.dev[0], training=False)
    assert dev[1] == QAExample(
        "s-dev-2",
        "Berlin is the capital of what?",
        "Berlin is the capital of Germany.",
        (Answer("Germany", 25), Answer("of Germany", 22)),
    )
    test, _ = read_squad_file(xquad.test["zh"][0], training=False)
    assert test == [QAExample(q.id, q.question, q.context) for q in fx.gold("xquad", "zh")]
    mlqa = files(root, "mlqa")
    dev, _ = read_squad_file(mlqa.dev_by_language["zh"][0], training=False)
    assert [(e.id, e.answers) for e in dev] == [
        ("dev-mlqa-zh-0", (Answer("北京", 0),)),
        ("dev-mlqa-zh-1", (Answer("华北平原", 11),)),
    ]
    tydiqa = files(root, "tydiqa")
    train, _ = read_squad_file(tydiqa.train[0], training=True)
    assert [e.id for e in train] == ["0", "0", "0"]  # as tydiqa_preprocess cuts them
    test, _ = read_squad_file(tydiqa.test["bn"][0], training=False)
    assert [(e.id, e.answers) for e in test] == [("bengali-7000-0", ()), ("bengali-7000-1", ())]
    translated, _ = read_squad_file(xquad.translate_train["de"][0], training=True)
    assert [e.id for e in translated] == ["s-train-1-de", "s-train-2-de", "s-train-3-de"]


def test_retrieval_files(root):
    bucc = files(root, "bucc2018")
    dev = read_bucc(*bucc.dev_by_language["zh"])
    assert dev.source == {
        "zh-000000001": "狗在叫。",
        "zh-000000002": "今天下雨。",
        "zh-000000003": "我喜欢咖啡。",
    }
    assert list(dev.english)[0] == "en-000000001"
    assert dev.gold == (("zh-000000001", "en-000000002"), ("zh-000000002", "en-000000001"))
    assert read_bucc(*bucc.test["de"]).gold is None
    tatoeba = read_tatoeba(*files(root, "tatoeba").test["de"])
    assert tatoeba.source == ("Ich bin müde.", "Wo ist der Bahnhof?", "Danke schön.")
    assert tatoeba.english == ("I am tired.", "Thank you very much.", "Where is the station?")


def test_read_split_picks_the_reader_and_the_rule(root):
    xnli = files(root, "xnli")
    train, stats = read_split(xnli, "train")
    assert len(train) == 4 and stats.path.endswith("xnli/train-en.tsv")
    assert read_split(xnli, "train", "en")[0] == train
    assert read_split(xnli, "dev")[0] == read_split(xnli, "dev", "en")[0]
    assert [e.label for e in read_split(xnli, "test", "zh")[0]] == [None, None, None]
    assert read_split(xnli, "translate-train", "de")[0][1].label == "contradiction"
    panx = files(root, "panx")
    assert read_split(panx, "dev", "ar")[0][0].words == ("زار", "أوباما", "باريس", ".")
    xquad = files(root, "xquad")
    assert [e.id for e in read_split(xquad, "dev")[0]] == ["s-dev-1", "s-dev-2"]
    assert len(read_split(xquad, "translate-train", "de")[0]) == 3
    assert read_split(files(root, "mlqa"), "dev", "zh")[0][0].answers == (Answer("北京", 0),)

    message = one_line_error(lambda: read_split(panx, "translate-train", "de"))
    assert message == f"{root}: panx has no translate-train files for de"
    assert "tydiqa has no dev files" in one_line_error(
        lambda: read_split(files(root, "tydiqa"), "dev")
    )
    with pytest.raises(ValueError, match="xnli training data is English, not 'de'"):
        read_split(xnli, "train", "de")
    in_language, _ = read_split(panx, "train", "de")  # XTREME ships PAN-X's in every language
    assert [s.words for s in in_language] == [s[0] for s in fx.TAGGED["panx"]["de"][1:]]
    message = one_line_error(lambda: read_split(panx, "train", "ar"))
    assert message == f"{root}: panx has no train files for ar"
    with pytest.raises(ValueError, match="test needs a language"):
        read_split(xnli, "test")
    with pytest.raises(ValueError, match="unknown split 'valid'"):
        read_split(xnli, "valid", "de")
    with pytest.raises(ValueError, match="bucc2018 has no fine-tuning splits"):
        read_split(files(root, "bucc2018"), "test", "de")


def test_read_split_counts_in_training_files_and_raises_in_references(tmp_path):
    fx.write_xtreme_dir(tmp_path, ("xnli",))
    for name in ("train-en.tsv", "test-de.tsv", "dev-de.tsv"):
        with open(tmp_path / "xnli" / name, "ab") as f:
            f.write(b"one field\r\n")
    xnli = files(tmp_path, "xnli")
    assert read_split(xnli, "train")[1].examples == {"bad_fields": [5]}
    for split in ("test", "dev"):
        message = one_line_error(lambda split=split: read_split(xnli, split, "de"))
        assert message.startswith(f"{tmp_path / 'xnli' / f'{split}-de.tsv'}:4: 1 fields")


# ---------------------------------------------------------------------------------------------
# Bad lines: counted in training files, an error naming file:line in references

GOOD = "A cat sleeps.\tAn animal rests.\tentailment\r\n"
BAD_PAIR_LINES = {
    "empty": b"  \r\n",
    "invalid_utf8": b"caf\xe9\tx\tneutral\n",
    "two fields": b"a\tb\n",
    "four fields": b"a\tb\tneutral\textra\n",
    "blank field": b" \tb\tneutral\n",
    "unknown label": b"a\tb\tmaybe\n",
    "quotes": b'"a"b\tc\tneutral\n',
}
GOOD_PAIR_LINES = ("blank field", "quotes")  # as XTREME reads them


def test_pair_training_file_counts_bad_lines(tmp_path):
    path = tmp_path / "train-en.tsv"
    path.write_bytes(GOOD.encode() + b"".join(BAD_PAIR_LINES.values()) + GOOD.encode())
    examples, stats = read_pair_file(path, training=True, labels=XNLI_LABELS)
    # A blank sentence is trained on, and quotes are text (XTREME's reader, quotechar=None).
    assert examples[1:3] == [PairExample(" ", "b", "neutral"), PairExample('"a"b', "c", "neutral")]
    assert len(examples) == 4
    assert (stats.total, stats.used, stats.empty, stats.invalid_utf8, stats.bad_fields) == (
        9,
        4,
        1,
        1,
        3,
    )
    assert stats.examples == {"empty": [2], "invalid_utf8": [3], "bad_fields": [4, 5, 7]}
    path.write_bytes(b"".join(v for k, v in BAD_PAIR_LINES.items() if k not in GOOD_PAIR_LINES))
    assert "has no usable line" in one_line_error(
        lambda: read_pair_file(path, training=True, labels=XNLI_LABELS)
    )


@pytest.mark.parametrize("name", [n for n in BAD_PAIR_LINES if n not in GOOD_PAIR_LINES])
def test_pair_reference_bad_line_is_an_error(tmp_path, name):
    path = tmp_path / "test-de.tsv"
    path.write_bytes(GOOD.encode() * 2 + BAD_PAIR_LINES[name] + GOOD.encode())
    message = one_line_error(lambda: read_pair_file(path, training=False, labels=XNLI_LABELS))
    assert message.startswith(f"{path}:3: ")


def test_pair_reference_keeps_its_field_count(tmp_path):
    path = tmp_path / "test-de.tsv"
    path.write_bytes(b"a\tb\r\nc\td\r\n" + GOOD.encode())
    message = one_line_error(lambda: read_pair_file(path, training=False, labels=XNLI_LABELS))
    assert message == f"{path}:3: 3 fields, expected 2"


def test_reference_pairs_may_have_a_blank_sentence(tmp_path):
    """A reference's every line is an example to predict, a blank sentence too."""
    path = tmp_path / "test-de.tsv"
    path.write_text("a\t\r\nb\tc\r\n\t\r\n")
    examples, _ = read_pair_file(path, training=False)
    assert examples == [PairExample("a", "", None), PairExample("b", "c", None)] + [
        PairExample("", "", None)
    ]


def test_translate_train_counts_malformed_rows(tmp_path):
    path = tmp_path / "en-de-translated.tsv"
    path.write_bytes(
        b"a\tb\tc\td\tcontradictory\n"
        b"a\tb\tc\td\n"  # 4 fields
        b"a\tb\tc\td\tparaphrase\n"  # not a label
        b"a\tb\t\td\tneutral\n"  # blank field
        b"a\tb\te\tf\tneutral\n"
    )
    examples, stats = read_translated_pairs(path, labels=XNLI_LABELS)
    assert examples == [PairExample("c", "d", "contradiction"), PairExample("e", "f", "neutral")]
    assert (stats.total, stats.bad_fields, stats.examples) == (5, 3, {"bad_fields": [2, 3, 4]})


TAGGED_TRAIN = (
    b"Anna\tB-PER\n"  # 1
    b"sleeps\n"  # 2 no label: O, as utils_preprocess.py reads it
    b"\n"  # 3 separator
    b"caf\xe9\tO\n"  # 4 invalid UTF-8: the sentence is left empty and dropped
    b"\n"
    b"\n"  # 6: a run of separators is one
    b"-DOCSTART-\tO\n"  # 7 separator, as utils_tag reads it
    b"Rome\tB-LOC\tX\n"  # 8 three items: O
    b"is\t \n"  # 9 blank label: O
    b"New\xc2\xa0York\tB-LOC\n"  # 10 a no-break space: "New", O
    b"big\tO\n"  # 11
)


def test_tagged_training_file_counts_bad_lines(tmp_path):
    path = tmp_path / "train-en.tsv"
    path.write_bytes(TAGGED_TRAIN)
    sentences, stats = read_tagged_file(path, training=True)
    assert sentences == [
        TaggedSentence(("Anna", "sleeps"), ("B-PER", "O")),
        TaggedSentence(("Rome", "is", "New", "big"), ("O", "O", "O", "O")),
    ]
    assert (stats.total, stats.used, stats.invalid_utf8, stats.bad_fields) == (7, 6, 1, 0)
    assert stats.examples == {"invalid_utf8": [4]}
    udpos, _ = read_tagged_file(path, training=True, default_label="X")
    assert udpos[1].labels == ("X", "X", "X", "O")


@pytest.mark.parametrize(
    "content, line",
    [
        (b"Anna\tB-PER\nsleeps\n", 2),  # unlabelled line in a labelled file
        (b"Anna\nsleeps\tO\n", 2),  # labelled line in an unlabelled file
        (b"Anna\n\nRome\tB-LOC\tX\n", 3),  # three fields
        (b"Anna\tB-PER\nis\t\n", 2),  # blank label
        (b"Anna\n\ncaf\xe9\n", 3),  # invalid UTF-8
    ],
)
def test_tagged_reference_bad_line_is_an_error(tmp_path, content, line):
    path = tmp_path / "test-de.tsv"
    path.write_bytes(content)
    assert one_line_error(lambda: read_tagged_file(path, training=False)).startswith(
        f"{path}:{line}: "
    )


def squad(*questions, context="Paris is the capital of France."):
    return {"data": [{"paragraphs": [{"context": context, "qas": list(questions)}]}]}


def question(qid, answers, text="Which city?"):
    return {"id": qid, "question": text, "answers": answers}


PARIS = [{"text": "Paris", "answer_start": 0}]
BAD_QUESTIONS = {
    "misplaced answer": question("q2", [{"text": "Paris", "answer_start": 3}]),
    "placeholder answer": question("q3", [{"text": "", "answer_start": 0}]),
    "no id": {"question": "Which city?", "answers": PARIS},
    "answer_start not an integer": question("q5", [{"text": "Paris", "answer_start": "0"}]),
}


def test_squad_training_file_counts_bad_questions(tmp_path):
    path = tmp_path / "train.json"
    path.write_text(json.dumps(squad(question("q1", PARIS), *BAD_QUESTIONS.values())))
    examples, stats = read_squad_file(path, training=True)
    assert [e.id for e in examples] == ["q1"]
    assert (stats.total, stats.used, stats.bad_fields) == (5, 1, 4)
    assert stats.examples == {"bad_fields": [2, 3, 4, 5]}


@pytest.mark.parametrize("name", [n for n in BAD_QUESTIONS if n != "placeholder answer"])
def test_squad_reference_bad_question_is_an_error(tmp_path, name):
    path = tmp_path / "test.json"
    path.write_text(json.dumps(squad(question("q1", PARIS), BAD_QUESTIONS[name])))
    message = one_line_error(lambda: read_squad_file(path, training=False))
    assert message.startswith(f"{path}: question 2: ")


def test_squad_reference_errors(tmp_path):
    path = tmp_path / "test.json"
    path.write_text(json.dumps(squad(question("q1", PARIS), question("q1", PARIS))))
    assert "question 2: id 'q1': id 'q1' given twice" in one_line_error(
        lambda: read_squad_file(path, training=False)
    )
    path.write_text('{"data": [\n  {"paragraphs": [}\n]}')
    assert one_line_error(lambda: read_squad_file(path, training=True)).startswith(
        f"{path}:2: not valid json"
    )
    path.write_text(json.dumps({"data": [{"paragraphs": [{"qas": []}]}]}))
    assert "not SQuAD json (article 0 paragraph 0" in one_line_error(
        lambda: read_squad_file(path, training=True)
    )


def test_retrieval_bad_lines_are_errors(tmp_path):
    source, english, gold = tmp_path / "de-en.dev.de", tmp_path / "de-en.dev.en", tmp_path / "g"
    source.write_text("de-1\tEins.\nde-2\tZwei.\n")
    english.write_text("en-1\tOne.\nen-2 Two.\n")
    assert one_line_error(lambda: read_bucc(source, english)).startswith(f"{english}:2: ")
    english.write_text("en-1\tOne.\nen-1\tTwo.\n")
    assert "ID 'en-1' is also on line 1" in one_line_error(lambda: read_bucc(source, english))
    english.write_text("en-1\tOne.\nen-2\tTwo.\n")
    gold.write_text("de-1\ten-2\nde-2\ten-3\n")
    message = one_line_error(lambda: read_bucc(source, english, gold))
    assert message == f"{gold}:2: ID 'en-3' is not in {english}"
    tatoeba = tmp_path / "de-en.en"
    tatoeba.write_bytes(b"One.\nT\xffwo.\n")
    assert one_line_error(lambda: read_tatoeba(source, tatoeba)).startswith(f"{tatoeba}:2: ")
    tatoeba.write_text("One.\n")
    assert "has 2 lines but" in one_line_error(lambda: read_tatoeba(source, tatoeba))


# ---------------------------------------------------------------------------------------------
# Submission writers: lines of google-research/xtreme's mock_test_data, copied as the format

MOCK_XNLI_LABELS = "contradiction\nentailment\nneutral\n"  # labels/xnli/test-ar.tsv
MOCK_PAWSX_LABELS = "1\n0\n0\n"  # labels/pawsx/test-de.tsv
MOCK_TATOEBA = "669\n982\n957\n"  # labels/tatoeba/test-ar.tsv
MOCK_PANX = "O\nO\nB-ORG\nI-ORG\nI-ORG\nI-ORG\nO\n\nO\nB-LOC\nI-LOC\n"  # labels/panx/test-ar.tsv
MOCK_BUCC = "zh-000000033\ten-000005983\nzh-000000231\ten-000047360\n"  # labels/bucc2018/test-zh
MOCK_XQUAD_PREDICTIONS = (  # predictions/xquad/test-ar.json
    '{\n    "56beb4343aeaaa14008c925b": "308",\n    "56beb4343aeaaa14008c925c": "136"\n}\n'
)
MOCK_XQUAD_LABELS = {  # labels/xquad/test-ar.json: its first question, the context cut short
    "data": [
        {
            "paragraphs": [
                {
                    "context": " لم يتخلى فريق بانثرز سوى عن 308 نقطة",
                    "qas": [
                        {
                            "answers": [{"answer_start": 29, "text": "308"}],
                            "id": "56beb4343aeaaa14008c925b",
                            "question": "كم نقطة تخلى عنها دفاع البانثرز؟",
                        }
                    ],
                }
            ]
        }
    ],
    "version": "1.1",
}


def test_writers_write_mock_test_data_lines(tmp_path):
    path = tmp_path / "f"
    write_label_lines(path, ["contradiction", "entailment", "neutral"])
    assert path.read_text() == MOCK_XNLI_LABELS
    write_label_lines(path, ["1", "0", "0"])
    assert path.read_text() == MOCK_PAWSX_LABELS
    write_label_lines(path, [669, 982, 957])
    assert path.read_text() == MOCK_TATOEBA
    write_tag_lines(
        path, [["O", "O", "B-ORG", "I-ORG", "I-ORG", "I-ORG", "O"], ["O", "B-LOC", "I-LOC"]]
    )
    assert path.read_text() == MOCK_PANX
    write_id_pairs(path, [("zh-000000033", "en-000005983"), ("zh-000000231", "en-000047360")])
    assert path.read_text() == MOCK_BUCC
    write_qa_predictions(
        path, {"56beb4343aeaaa14008c925b": "308", "56beb4343aeaaa14008c925c": "136"}
    )
    assert path.read_text() == MOCK_XQUAD_PREDICTIONS
    qas = MOCK_XQUAD_LABELS["data"][0]["paragraphs"][0]
    example = QAExample(
        "56beb4343aeaaa14008c925b",
        "كم نقطة تخلى عنها دفاع البانثرز؟",
        qas["context"],
        (Answer("308", 29),),
    )
    write_squad_file(path, [example])
    assert json.loads(path.read_text()) == MOCK_XQUAD_LABELS
    assert read_squad_file(path, training=False)[0] == [example]


def test_submission_paths(tmp_path):
    assert submission_path(tmp_path, "predictions", "xquad", "de") == (
        tmp_path / "predictions" / "xquad" / "test-de.json"
    )
    assert submission_path(tmp_path, "labels", "panx", "ar") == (
        tmp_path / "labels" / "panx" / "test-ar.tsv"
    )
    with pytest.raises(ValueError, match="folder must be one of"):
        submission_path(tmp_path, "gold", "panx", "ar")


def test_labels_folder_round_trips_through_evaluates_readers(tmp_path):
    out = fx.write_labels_dir(tmp_path)
    labels = out / "labels"
    assert sorted(p.name for p in labels.iterdir()) == sorted(
        task for task in fx.TASKS if fx.LANGUAGES[task]
    )
    assert evaluate_read_label(labels / "xnli" / "test-zh.tsv") == [
        "neutral",
        "contradiction",
        "entailment",
    ]
    assert evaluate_read_tag(labels / "panx" / "test-ar.tsv") == [
        ["O", "O", "B-ORG"],
        ["O", "B-PER", "B-LOC", "O"],
    ]
    assert evaluate_read_label(labels / "bucc2018" / "test-de.tsv") == [
        "de-000000001\ten-000000003",
        "de-000000002\ten-000000001",
    ]
    # The English side sorted: "I am tired." (0), "Thank you very much." (2), "Where is ..." (1).
    assert evaluate_read_label(labels / "tatoeba" / "test-de.tsv") == ["0", "2", "1"]
    for task in ("xquad", "mlqa", "tydiqa"):
        for lang in fx.LANGUAGES[task]:
            path = submission_path(out, "labels", task, lang)
            assert read_squad_file(path, training=False)[0] == fx.gold(task, lang)
            first = evaluate_read_squad(path)[0]["paragraphs"][0]["qas"][0]
            assert first["answers"][0]["text"] == fx.gold(task, lang)[0].answers[0].text


def test_test_files_round_trip_through_the_writer(root, tmp_path):
    """An unlabelled question is written with XTREME's placeholder and read back unlabelled."""
    examples, _ = read_squad_file(files(root, "tydiqa").test["fi"][0], training=False)
    write_squad_file(tmp_path / "t.json", examples)
    assert read_squad_file(tmp_path / "t.json", training=False)[0] == examples
    assert json.loads((tmp_path / "t.json").read_text())["data"][0]["paragraphs"][0]["qas"][0][
        "answers"
    ] == [{"answer_start": 0, "text": ""}]


def test_writers_refuse_what_a_line_cannot_hold(tmp_path):
    path = tmp_path / "f"
    for label in ["a\tb", "a\nb", "", " a"]:
        with pytest.raises(ValueError, match="cannot be written as one field"):
            write_label_lines(path, [label])
    with pytest.raises(ValueError, match="sentence 1 has no tags"):
        write_tag_lines(path, [["O"], []])
    with pytest.raises(ValueError, match=re.escape("labels need labelled PairExamples")):
        write_labels(tmp_path, "xnli", "de", [PairExample("a", "b", None)])
    with pytest.raises(ValueError, match="labels need labelled QAExamples"):
        write_labels(tmp_path, "xquad", "de", [QAExample("q", "?", "c")])
    with pytest.raises(ValueError, match="need a BuccSplit with its gold"):
        write_labels(tmp_path, "bucc2018", "de", [])
