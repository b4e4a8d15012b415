"""A tiny XTREME_DIR: every task's files in exactly the layout google-research/xtreme's
download script leaves (see `xlpretrain.data.xtreme`), a few examples each, English train and
dev, two or three test languages per task with one in a non-Latin script.

The files are written the way XTREME's utils_preprocess.py writes them (csv.writer for XNLI and
PAWS-X, no labels in test files, QA test answers replaced by its placeholder, Tatoeba's English
side sorted), by code independent of the readers under test. `gold(task, lang)` gives the
labels XTREME keeps for a test, as the examples `write_labels` takes; `write_labels_dir`
writes them as a submission's `labels/` folder.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from xlpretrain.data.finetuning.task_examples import Answer, PairExample, QAExample, TaggedSentence
from xlpretrain.data.xtreme import BuccSplit, write_labels

# Each task's test languages here (squad is training data only).
LANGUAGES = {
    "xnli": ("en", "de", "zh"),
    "pawsx": ("en", "de", "zh"),
    "panx": ("en", "de", "ar"),
    "udpos": ("en", "de", "zh"),
    "squad": (),
    "xquad": ("en", "de", "zh"),
    "mlqa": ("en", "de", "zh"),
    "tydiqa": ("en", "bn", "fi"),
    "bucc2018": ("de", "zh"),
    "tatoeba": ("de", "zh"),
}
TASKS = tuple(LANGUAGES)

# Sentence pairs of each language: dev-{lang}.tsv in this order, test-{lang}.tsv reversed;
# train-en.tsv is the English ones and one more. Quotes exercise csv.writer's quoting.
PAIRS = {
    "xnli": {
        "en": [
            ("A man is playing a guitar.", "A person is making music.", "entailment"),
            ('He said "no" twice.', "He agreed at once.", "contradiction"),
            ("The shop opens at nine.", "The shop sells bread.", "neutral"),
        ],
        "de": [
            ("Ein Mann spielt Gitarre.", "Eine Person macht Musik.", "entailment"),
            ('Er sagte zweimal "nein".', "Er stimmte sofort zu.", "contradiction"),
            ("Der Laden öffnet um neun.", "Der Laden verkauft Brot.", "neutral"),
        ],
        "zh": [
            ("一个男人在弹吉他。", "有人在演奏音乐。", "entailment"),
            ('他说了两次"不"。', "他立刻同意了。", "contradiction"),
            ("商店九点开门。", "商店卖面包。", "neutral"),
        ],
    },
    "pawsx": {
        "en": [
            ("Paris is the capital of France.", "The capital of France is Paris.", "1"),
            ("Tom sold a car to Anna.", "Anna sold a car to Tom.", "0"),
        ],
        "de": [
            ("Paris ist die Hauptstadt Frankreichs.", "Die Hauptstadt Frankreichs ist Paris.", "1"),
            ("Tom verkaufte Anna ein Auto.", "Anna verkaufte Tom ein Auto.", "0"),
        ],
        "zh": [
            ("巴黎是法国的首都。", "法国的首都是巴黎。", "1"),
            ("汤姆把车卖给了安娜。", "安娜把车卖给了汤姆。", "0"),
        ],
    },
}
EXTRA_PAIR = {
    "xnli": ("Two dogs run in the park.", "Animals are outside.", "entailment"),
    "pawsx": ("The river flows north.", "North is where the river flows.", "1"),
}

# Tagged sentences: dev in this order, test reversed, train-en the English ones and one more.
# PAN-X's "12:30" keeps its colon: utils_preprocess cut the `en:` prefix before writing.
TAGGED = {
    "panx": {
        "en": [
            (("Barack", "Obama", "visited", "Paris", "at", "12:30", "."),
             ("B-PER", "I-PER", "O", "B-LOC", "O", "O", "O")),
            (("Google", "hired", "Anna", "."), ("B-ORG", "O", "B-PER", "O")),
        ],
        "de": [
            (("Angela", "Merkel", "wohnt", "in", "Berlin", "."),
             ("B-PER", "I-PER", "O", "O", "B-LOC", "O")),
            (("Siemens", "baut", "Züge", "."), ("B-ORG", "O", "O", "O")),
        ],
        "ar": [
            (("زار", "أوباما", "باريس", "."), ("O", "B-PER", "B-LOC", "O")),
            (("تعمل", "في", "غوغل"), ("O", "O", "B-ORG")),
        ],
    },
    "udpos": {
        "en": [
            (("The", "cat", "sleeps", "."), ("DET", "NOUN", "VERB", "PUNCT")),
            (("She", "reads", "books"), ("PRON", "VERB", "NOUN")),
        ],
        "de": [
            (("Die", "Katze", "schläft", "."), ("DET", "NOUN", "VERB", "PUNCT")),
            (("Sie", "liest", "Bücher"), ("PRON", "VERB", "NOUN")),
        ],
        "zh": [
            (("猫", "在", "睡觉", "。"), ("NOUN", "ADV", "VERB", "PUNCT")),
            (("她", "读", "书"), ("PRON", "VERB", "NOUN")),
        ],
    },
}  # fmt: skip
EXTRA_TAGGED = {
    "panx": (("Anna", "lives", "in", "Rome", "."), ("B-PER", "O", "O", "B-LOC", "O")),
    "udpos": (("Dogs", "bark", "loudly", "."), ("NOUN", "VERB", "ADV", "PUNCT")),
}

# Questions: (id, question, context, answer texts); each answer is found in its context.
SQUAD_TRAIN = [
    (
        "s-train-1",
        "What is the capital of France?",
        "Paris is the capital of France. About two million people live there.",
        ["Paris"],
    ),
    (
        "s-train-2",
        "How many people live in Paris?",
        "Paris is the capital of France. About two million people live there.",
        ["two million"],
    ),
    ("s-train-3", "Where is the Nile?", "The Nile is a river in Africa.", ["Africa"]),
]
SQUAD_DEV = [
    (
        "s-dev-1",
        "What is the capital of Germany?",
        "Berlin is the capital of Germany.",
        ["Berlin", "Berlin"],
    ),
    (
        "s-dev-2",
        "Berlin is the capital of what?",
        "Berlin is the capital of Germany.",
        ["Germany", "of Germany"],
    ),
]
QA_CONTEXTS = {
    "en": ("Rome is the capital of Italy. It lies on the Tiber.", ["Rome", "the Tiber"]),
    "de": ("Rom ist die Hauptstadt Italiens. Es liegt am Tiber.", ["Rom", "am Tiber"]),
    "zh": ("北京是中国的首都，位于华北平原。", ["北京", "华北平原"]),
    "bn": ("ঢাকা বাংলাদেশের রাজধানী। এটি বুড়িগঙ্গা নদীর তীরে।", ["ঢাকা", "বুড়িগঙ্গা"]),
    "fi": ("Helsinki on Suomen pääkaupunki. Se sijaitsee meren rannalla.", ["Helsinki", "meren"]),
}
QUESTIONS = ("Which city is named first?", "Where does it lie?")
TYDIQA_NAMES = {"en": "english", "bn": "bengali", "fi": "finnish"}

# BUCC: per language, each side's sentences by number and the gold (source, English) numbers.
BUCC = {
    "de": (
        ["Der Hund bellt.", "Es regnet heute.", "Ich mag Kaffee."],
        ["It is raining today.", "I like tea.", "The dog barks."],
        [(1, 3), (2, 1)],
    ),
    "zh": (
        ["狗在叫。", "今天下雨。", "我喜欢咖啡。"],
        ["It is raining today.", "The dog barks.", "I like tea."],
        [(1, 2), (2, 1)],
    ),
}
# Tatoeba: aligned sentences; on disk the English side is sorted.
TATOEBA = {
    "de": (["Ich bin müde.", "Wo ist der Bahnhof?", "Danke schön."],
           ["I am tired.", "Where is the station?", "Thank you very much."]),
    "zh": (["我累了。", "火车站在哪里？", "非常感谢。"],
           ["I am tired.", "Where is the train station?", "Thank you very much."]),
}  # fmt: skip


def write_xtreme_dir(root: str | Path, tasks: tuple[str, ...] | None = None) -> Path:
    """Writes the tiny XTREME_DIR for `tasks` (default: all) under `root`; returns `root`."""
    root = Path(root)
    for task in tasks or TASKS:
        _WRITERS[task](root / task, task)
    return root


def write_labels_dir(out: str | Path, tasks: tuple[str, ...] | None = None) -> Path:
    """Writes the gold of each test language as `out/labels/<task>/test-<lang>.*`; returns
    `out`."""
    for task in tasks or TASKS:
        for lang in LANGUAGES[task]:
            write_labels(out, task, lang, gold(task, lang))
    return Path(out)


def gold(task: str, lang: str) -> list | BuccSplit:
    """The gold of one test, in its file's order: what `write_labels` takes."""
    if task in PAIRS:
        return [PairExample(*row) for row in PAIRS[task][lang][::-1]]
    if task in TAGGED:
        return [TaggedSentence(*sentence) for sentence in TAGGED[task][lang][::-1]]
    if task in ("xquad", "mlqa", "tydiqa"):
        return [_qa_example(*q) for q in _test_questions(task, lang)]
    if task == "bucc2018":
        source, english, pairs = BUCC[lang]
        return BuccSplit(
            source={_bucc_id(lang, i): s for i, s in enumerate(source, 1)},
            english={_bucc_id("en", i): s for i, s in enumerate(english, 1)},
            gold=tuple((_bucc_id(lang, a), _bucc_id("en", b)) for a, b in pairs),
        )
    if task == "tatoeba":
        return [index for _, index in sorted(zip(TATOEBA[lang][1], range(3), strict=True))]
    raise ValueError(f"{task} has no test")


def _write_pairs(folder: Path, task: str) -> None:
    """As utils_preprocess.py's xnli/pawsx_preprocess: csv.writer rows, test without labels."""
    pairs = PAIRS[task]
    _csv(folder / "train-en.tsv", pairs["en"] + [EXTRA_PAIR[task]])
    for lang in LANGUAGES[task]:
        _csv(folder / f"dev-{lang}.tsv", pairs[lang])
        _csv(folder / f"test-{lang}.tsv", [row[:2] for row in pairs[lang][::-1]])
    for lang in LANGUAGES[task][1:]:  # the xtreme_translations bucket's translate-train files
        rows = [
            (*en[:2], *tr[:2], "contradictory" if tr[2] == "contradiction" else tr[2])
            for en, tr in zip(pairs["en"], pairs[lang], strict=True)
        ]
        _text(folder / "translate-train" / f"en-{lang}-translated.tsv", _lines(rows))


def _write_tagged(folder: Path, task: str) -> None:
    """As utils_preprocess.py's panx/udpos_preprocess: `word<TAB>tag` lines, a blank line
    between sentences, test files the words alone."""
    sentences = TAGGED[task]
    _text(folder / "train-en.tsv", _tagged(sentences["en"] + [EXTRA_TAGGED[task]], True))
    for lang in LANGUAGES[task]:
        _text(folder / f"dev-{lang}.tsv", _tagged(sentences[lang], True))
        _text(folder / f"test-{lang}.tsv", _tagged(sentences[lang][::-1], False))
    for lang in LANGUAGES[task][1:2]:  # in-language training data, here of one language
        _text(folder / f"train-{lang}.tsv", _tagged(sentences[lang][1:], True))


def _write_squad(folder: Path, task: str) -> None:
    """SQuAD v1.1 as downloaded: questions grouped by paragraph, with titles."""
    _json(folder / "train-v1.1.json", _squad(SQUAD_TRAIN, "1.1"))
    _json(folder / "dev-v1.1.json", _squad(SQUAD_DEV, "1.1"))
    translated = [(f"{q[0]}-de", q[1], q[2], q[3]) for q in SQUAD_TRAIN]
    _json(folder / "translate-train" / "squad.translate.train.en-de.json", _squad(translated))


def _write_xquad(folder: Path, task: str) -> None:
    for lang in LANGUAGES[task]:
        _json(folder / f"xquad.{lang}.json", _stripped(_test_questions(task, lang), "1.0"))


def _write_mlqa(folder: Path, task: str) -> None:
    for lang in LANGUAGES[task]:
        name = f"context-{lang}-question-{lang}.json"
        _json(folder / "MLQA_V1" / "test" / f"test-{name}", _stripped(_test_questions(task, lang)))
        dev = [(f"dev-{qid}", *rest) for qid, *rest in _test_questions(task, lang)]
        _json(folder / "MLQA_V1" / "dev" / f"dev-{name}", _squad(dev, 1.0))


def _write_tydiqa(folder: Path, task: str) -> None:
    """As tydiqa_preprocess: the whole train file, English's split out with ids cut to their
    last part, the dev files renamed and stripped of their answers (they are the test)."""
    train = [(f"english-{9000 + i}-0", *rest) for i, (_, *rest) in enumerate(SQUAD_TRAIN)]
    _json(folder / "tydiqa-goldp-v1.1-train" / "tydiqa-goldp-v1.1-train.json", _squad(train))
    english = [(qid.split("-")[-1], *rest) for qid, *rest in train]
    path = folder / "tydiqa-goldp-v1.1-train" / "tydiqa.goldp.en.train.json"
    _json(path, {"data": _squad(english)["data"], "version": "TyDiQA-GoldP-1.1-for-SQuAD-1.1"})
    for lang in LANGUAGES[task]:
        path = folder / "tydiqa-goldp-v1.1-dev" / f"tydiqa.goldp.{lang}.dev.json"
        _json(path, _stripped(_test_questions(task, lang), "TyDiQA-GoldP-1.1-for-SQuAD-1.1"))


def _write_bucc(folder: Path, task: str) -> None:
    """As download_bucc18: BUCC's training split renamed test (its gold deleted), its sample
    split renamed dev (here the same sentences, gold kept)."""
    for lang in LANGUAGES[task]:
        source, english, pairs = BUCC[lang]
        for split in ("test", "dev"):
            _text(folder / f"{lang}-en.{split}.{lang}", _numbered(lang, source))
            _text(folder / f"{lang}-en.{split}.en", _numbered("en", english))
        rows = [(_bucc_id(lang, a), _bucc_id("en", b)) for a, b in pairs]
        _text(folder / f"{lang}-en.dev.gold", _lines(rows))


def _write_tatoeba(folder: Path, task: str) -> None:
    """As tatoeba_preprocess: the source copied, the English side sorted."""
    for lang in LANGUAGES[task]:
        source, english = TATOEBA[lang]
        _text(folder / f"{lang}-en.{lang}", "".join(s + "\n" for s in source))
        _text(folder / f"{lang}-en.en", "".join(s + "\n" for s in sorted(english)))


_WRITERS = {
    "xnli": _write_pairs,
    "pawsx": _write_pairs,
    "panx": _write_tagged,
    "udpos": _write_tagged,
    "squad": _write_squad,
    "xquad": _write_xquad,
    "mlqa": _write_mlqa,
    "tydiqa": _write_tydiqa,
    "bucc2018": _write_bucc,
    "tatoeba": _write_tatoeba,
}


def _test_questions(task: str, lang: str) -> list[tuple[str, str, str, list[str]]]:
    context, answers = QA_CONTEXTS[lang]
    prefix = {"tydiqa": f"{TYDIQA_NAMES.get(lang)}-7000", "mlqa": f"mlqa-{lang}"}
    return [
        (f"{prefix.get(task, 'xq')}-{i}", question, context, [answer])
        for i, (question, answer) in enumerate(zip(QUESTIONS, answers, strict=True))
    ]


def _qa_example(qid: str, question: str, context: str, answers: list[str]) -> QAExample:
    return QAExample(qid, question, context, tuple(Answer(a, context.index(a)) for a in answers))


def _squad(questions: list, version: str | float = "1.1") -> dict:
    """Questions grouped into paragraphs by context, one article per paragraph."""
    paragraphs: dict[str, list] = {}
    for qid, question, context, answers in questions:
        spans = [{"answer_start": context.index(a), "text": a} for a in answers]
        paragraphs.setdefault(context, []).append(
            {"answers": spans, "id": qid, "question": question}
        )
    data = [
        {"title": f"Article {i}", "paragraphs": [{"context": context, "qas": qas}]}
        for i, (context, qas) in enumerate(paragraphs.items())
    ]
    return {"data": data, "version": version}


def _stripped(questions: list, version: str | float = 1.0) -> dict:
    """As remove_qa_test_annotations: one article per question, answers replaced."""
    data = [
        {
            "paragraphs": [
                {
                    "context": context,
                    "qas": [
                        {"answers": [{"answer_start": 0, "text": ""}], "question": q, "id": qid}
                    ],
                }
            ]
        }
        for qid, q, context, _ in questions
    ]
    return {"data": data, "version": version}


def _bucc_id(lang: str, number: int) -> str:
    return f"{lang}-{number:09d}"


def _numbered(lang: str, sentences: list[str]) -> str:
    return _lines([(_bucc_id(lang, i), s) for i, s in enumerate(sentences, 1)])


def _tagged(sentences: list, labelled: bool) -> str:
    return "\n".join(
        "".join(f"{w}\t{t}\n" if labelled else f"{w}\n" for w, t in zip(*sentence, strict=True))
        for sentence in sentences
    )


def _lines(rows: list) -> str:
    return "".join("\t".join(row) + "\n" for row in rows)


def _csv(path: Path, rows: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        csv.writer(f, delimiter="\t").writerows(rows)


def _json(path: Path, content: dict) -> None:
    _text(path, json.dumps(content))


def _text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
