"""Questions as context windows and their logits back as answer texts
(xlpretrain.data.finetuning.qa_windows) against XTREME's `processors/squad.py` and transformers v2's
`compute_predictions_logits` / `get_final_text`."""

import numpy as np
import pytest

from tests import task_tokenizer
from xlpretrain.data.finetuning.qa_windows import (
    NO_ANSWER,
    basic_tokens,
    decode_answers,
    doc_words,
    encode_questions,
    final_text,
    max_context,
    window_spans,
)
from xlpretrain.data.finetuning.task_examples import Answer, PairLayout, QAExample
from xlpretrain.data.pretraining.examples import FIRST_POSITION, PAD_POSITION

XLMR = PairLayout(separators=2, token_types=False)
BERT = PairLayout(separators=1, token_types=True)
ZH = "北京大学位于北京市海淀区，成立于1898年。"
EN = "Paris is the capital of France, said Mr. Smith."


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return task_tokenizer.train(tmp_path_factory.mktemp("task_tokenizer"))


def pieces(tokenizer, ids):
    return [tokenizer.id_to_piece(int(i)) for i in ids]


def hf_v2_spans(n, capacity, stride):
    """The windows HF v2's `encode_plus(..., stride=capacity - stride,
    return_overflowing_tokens=True)` loop in XTREME's squad.py makes."""
    spans = []
    while len(spans) * stride < n:
        start = len(spans) * stride
        spans.append((start, min(n - start, capacity)))
        if n - start <= capacity:  # no overflowing tokens: the loop breaks
            break
    return spans


def test_doc_words():
    """SQuAD's whitespace words (U+202F too); a space maps to the word before it."""
    words, char_to_word = doc_words(" ab  c\u202fd\u00a0e")
    assert words == ["ab", "c", "d\u00a0e"]
    assert char_to_word == [-1, 0, 0, 0, 0, 1, 1, 2, 2, 2]


def test_windows_cover_the_context():
    """Windows `doc_stride` apart until one reaches the end, as XTREME's loop makes them; each
    token lies in some window and has its max context in exactly one."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        capacity = int(rng.integers(1, 12))
        stride = int(rng.integers(1, capacity + 1))
        n = int(rng.integers(1, 60))
        spans = window_spans(n, capacity, stride)
        assert spans == hf_v2_spans(n, capacity, stride)
        covered = np.zeros(n, int)
        owners = np.zeros(n, int)
        for w, (start, length) in enumerate(spans):
            covered[start : start + length] += 1
            owners[start : start + length] += max_context(spans, w)
        assert covered.min() >= 1 and (owners == 1).all()


def test_max_context_hand_case():
    """`_new_check_is_max_context` on (0,4), (3,4), (6,4): token 3 ties at 0.04 between the
    first two windows and goes to the first, token 6 likewise to the second."""
    spans = [(0, 4), (3, 4), (6, 4)]
    assert max_context(spans, 0).tolist() == [True, True, True, True]
    assert max_context(spans, 1).tolist() == [False, True, True, True]
    assert max_context(spans, 2).tolist() == [False, True, True, True]


@pytest.mark.parametrize("layout", [XLMR, BERT], ids=["xlmr", "bert"])
def test_row_layout(tokenizer, layout):
    """`<s> q </s></s> c </s>` (XLM-R) or `[CLS] q [SEP] c [SEP]` with token type 1 on `c [SEP]`
    (BERT); the question cut to max_query_length; the row's tokens continuous."""
    example = QAExample("q1", "Where is the capital of France?", EN)
    windows = encode_questions(
        [example], tokenizer, layout=layout, training=False, max_length=64, max_query_length=5
    )
    query = tokenizer.encode(example.question)[:5].tolist()
    context = np.concatenate([tokenizer.encode(w) for w in EN.split()]).tolist()
    bos, eos = tokenizer.bos_id, tokenizer.eos_id
    row = [bos, *query, *[eos] * layout.separators, *context, eos]
    assert len(windows) == 1 and windows.rows[0].tolist() == row
    start = 1 + len(query) + layout.separators
    assert windows.context_starts[0] == start
    batch = windows.batch(np.array([0, -1]))
    n = len(row)
    types = [0] * start + [1] * (n - start) if layout.token_types else [0] * n
    assert batch["token_types"][0, :n].tolist() == types and not batch["token_types"][1].any()
    assert batch["positions"][0, :n].tolist() == list(range(FIRST_POSITION, FIRST_POSITION + n))
    assert (batch["positions"][0, n:] == PAD_POSITION).all()
    assert (batch["input_ids"][1] == tokenizer.pad_id).all() and not batch["segment_ids"][1].any()
    assert not batch["pred_weights"].any()  # no targets outside training
    words = windows.token_words[0]
    assert (words[:start] == -1).all() and words[-1] == -1
    assert words[start:].max() == len(EN.split()) - 1


def random_examples(rng, count):
    """Questions over contexts of random English words, each answered by 1 or 2 whole words."""
    vocabulary = " ".join(task_tokenizer.EN).split()
    examples = []
    for i in range(count):
        words = list(rng.choice(vocabulary, size=int(rng.integers(5, 40))))
        first = int(rng.integers(len(words)))
        last = min(first + int(rng.integers(2)), len(words) - 1)
        start = len(" ".join(words[:first])) + (first > 0)
        text = " ".join(words[first : last + 1])
        context = " ".join(words)
        assert context[start : start + len(text)] == text
        examples.append(QAExample(f"r{i}", "Paris?", context, (Answer(text, start),)))
    return examples


def test_random_answers_found_and_decoded(tokenizer):
    """Every answer lies in some training window, at its words' tokens, and windows without it
    point at index 0; gold logits in a window where the answer starts with max context decode
    to the answer's text exactly."""
    rng = np.random.default_rng(1)
    examples = random_examples(rng, 60)
    kw = dict(layout=XLMR, max_length=40, doc_stride=7)
    train = encode_questions(examples, tokenizer, training=True, **kw)
    test = encode_questions(examples, tokenizer, training=False, **kw)
    assert not train.skipped and len(train) == len(test) > len(examples)
    assert train.batch(np.arange(len(train)))["pred_weights"].all()
    start_logits = np.zeros((len(test), 40))
    end_logits = np.zeros((len(test), 40))
    for e, example in enumerate(examples):
        answer = example.answers[0]
        words, char_to_word = doc_words(example.context)
        first, last = char_to_word[answer.start], char_to_word[answer.start + len(answer.text) - 1]
        gold = np.concatenate([tokenizer.encode(w) for w in words[first : last + 1]]).tolist()
        found = [
            w
            for w in np.flatnonzero(train.example_ids == e)
            if (train.start_positions[w], train.end_positions[w]) != (0, 0)
        ]
        assert found, example
        for w in np.flatnonzero(train.example_ids == e):
            s, t = train.start_positions[w], train.end_positions[w]
            if w in found:
                assert train.rows[w][s : t + 1].tolist() == gold
                assert (train.token_words[w][s], train.token_words[w][t]) == (first, last)
            else:
                assert (s, t) == (0, 0)
        owner = [w for w in found if test.max_context[w][train.start_positions[w]]][0]
        start_logits[owner, train.start_positions[owner]] = 10.0
        end_logits[owner, train.end_positions[owner]] = 10.0
    answers = decode_answers(start_logits, end_logits, test, examples)
    assert answers == {x.id: x.answers[0].text for x in examples}


def gold_logits(windows, start, end, length=48):
    """Logits of one window that point at tokens `start`..`end`."""
    start_logits = np.zeros((len(windows), length))
    end_logits = np.zeros((len(windows), length))
    start_logits[0, start] = end_logits[0, end] = 10.0
    return start_logits, end_logits


@pytest.mark.parametrize(
    ("context", "span", "words", "characters"),
    [
        (ZH, ["北京市"], ZH, "北京市"),  # inside a run of no spaces: XTREME answers the run
        (ZH, ["大学位于", "北京市"], ZH, "大学位于北京市"),
        (ZH, ["▁北京"], ZH, "北京"),
        (EN, ["▁", "M", "r", ".", "▁Smith"], "Mr. Smith.", "Mr. Smith"),  # "Mr . Smith ."
        (EN, ["▁", "F", "r", "an", "c", "e", ","], "France,", "France,"),
        (EN, ["▁", "F", "r", "an", "c", "e"], "France", "France"),
        (EN, ["▁capital"], "capital", "capital"),
    ],
)
def test_gold_span_decodes_to_its_text(tokenizer, context, span, words, characters):
    """The tokens of a span decode to its characters of the context where `get_final_text`
    aligns them, else (`answer_text="words"`, XTREME's) to its whole words: inside a
    whitespace-free Chinese word, next to punctuation; `"characters"` answers the span's own
    characters there. The tokens are looked up by piece in the row."""
    example = QAExample("q", "Paris?", context)
    windows = encode_questions([example], tokenizer, layout=XLMR, training=False, max_length=48)
    row = pieces(tokenizer, windows.rows[0])
    starts = [
        i for i in range(windows.context_starts[0], len(row)) if row[i : i + len(span)] == span
    ]
    start = starts[-1]  # the Chinese run's second 北京 is its own piece: take the last match
    logits = gold_logits(windows, start, start + len(span) - 1)
    assert decode_answers(*logits, windows, [example]) == {"q": words}
    for answer_text, expected in [("words", words), ("characters", characters)]:
        answers = decode_answers(*logits, windows, [example], answer_text=answer_text)
        assert answers == {"q": expected}


@pytest.mark.parametrize(
    ("context", "span"),
    [
        (ZH, "北京市"),  # one token a character: the reference's own case
        (EN, "Mr. Smith"),  # as v2's BERT tokenizer, "Mr . Smith" (the decoder: "Mr. Smith")
        (EN, "France,"),  # F ##r ##a ##n ##c ##e ,
        (EN, "capital of"),
    ],
)
def test_wordpiece_span_decodes_to_its_text(context, span):
    """The same through a cased WordPiece tokenizer.json (mBERT's kind) and BERT's layout,
    with either `answer_text`: its tokens' text is the basic tokenizer's, so `get_final_text`
    aligns it; the span's tokens are those of its text."""
    tokenizer = task_tokenizer.wordpiece()
    example = QAExample("q", "Paris?", context)
    windows = encode_questions([example], tokenizer, layout=BERT, training=False, max_length=48)
    row, target = windows.rows[0].tolist(), tokenizer.encode(span).tolist()
    assert pieces(tokenizer, [row[0], row[-1]]) == ["[CLS]", "[SEP]"]
    c = windows.context_starts[0]
    start = next(i for i in range(c, len(row)) if row[i : i + len(target)] == target)
    logits = gold_logits(windows, start, start + len(target) - 1)
    for answer_text in ("words", "characters"):
        answers = decode_answers(*logits, windows, [example], answer_text=answer_text)
        assert answers == {"q": span}


def test_unknown_token_answers_the_words(tokenizer):
    """A span with an `<unk>` (whose text is lost) answers its whole words, as the reference
    does when the `<unk>` string is found nowhere: `<unk> l l e r` of "Müller" is "Müller", not
    the "ller" that the tokens without it spell."""
    example = QAExample("q", "Paris?", "Paris Müller Berlin")
    windows = encode_questions([example], tokenizer, layout=XLMR, training=False, max_length=48)
    row = windows.rows[0].tolist()
    unk = row.index(tokenizer.unk_id, windows.context_starts[0])
    answers = decode_answers(*gold_logits(windows, unk, unk + 4), windows, [example])
    assert answers == {"q": "Müller"}


def test_invalid_spans_excluded(tokenizer):
    """Spans longer than max_answer_length, with the end before the start, or starting in the
    question, are never answers; the best remaining one is; none left gives the reference's
    nonce answer "empty"; only the n_best_size best starts and ends are candidates."""
    example = QAExample("q", "Paris?", EN)
    windows = encode_questions([example], tokenizer, layout=XLMR, training=False, max_length=48)
    row = pieces(tokenizer, windows.rows[0])
    c = windows.context_starts[0]
    capital = row.index("▁capital")
    start_logits, end_logits = gold_logits(windows, c, c + 5)  # "Paris is the", 6 tokens
    start_logits[0, capital] = end_logits[0, capital] = 9.0
    answer = decode_answers(start_logits, end_logits, windows, [example], max_answer_length=6)
    assert answer == {"q": "Paris is the"}
    answer = decode_answers(start_logits, end_logits, windows, [example], max_answer_length=5)
    assert answer == {"q": "capital"}
    start_logits, end_logits = gold_logits(windows, capital, c)  # end before start: 20
    start_logits[0, c] = 5.0  # the best valid span: "Paris" at 15
    assert decode_answers(start_logits, end_logits, windows, [example]) == {"q": "Paris"}
    start_logits, end_logits = gold_logits(windows, 1, capital)  # start in the question
    assert decode_answers(start_logits, end_logits, windows, [example], n_best_size=1) == {
        "q": NO_ANSWER
    }
    assert decode_answers(start_logits, end_logits, windows, [example]) != {"q": NO_ANSWER}


def test_best_span_across_windows(tokenizer):
    """The best score over every window wins; a start outside its max-context window is not
    taken even with the best score."""
    # One token a word; windows of 6 tokens 2 apart: (0, 6), (2, 6), (4, 6), (6, 6).
    context = "Paris Berlin Smith capital Paris Berlin Smith capital Paris Berlin Smith capital"
    example = QAExample("q", "Paris?", context)
    windows = encode_questions(
        [example], tokenizer, layout=XLMR, training=False, max_length=12, doc_stride=2
    )
    assert len(windows) == 4
    start_logits = np.zeros((len(windows), 12))
    end_logits = np.zeros((len(windows), 12))

    def token(w, word):  # word `word`'s token in window w, and whether it has max context
        t = int(np.flatnonzero(windows.token_words[w] == word)[0])
        return t, bool(windows.max_context[w][t])

    (berlin, berlin_max), (paris, paris_max), (capital, capital_max) = (
        token(0, 1), token(1, 4), token(1, 7)
    )  # fmt: skip
    assert berlin_max and paris_max and not capital_max  # word 7: 2 left 2 right in window 2
    start_logits[0, berlin] = end_logits[0, berlin] = 5.0
    start_logits[1, paris] = end_logits[1, paris] = 6.0
    assert decode_answers(start_logits, end_logits, windows, [example]) == {"q": "Paris"}
    start_logits[0, berlin] = end_logits[0, berlin] = 7.0
    assert decode_answers(start_logits, end_logits, windows, [example]) == {"q": "Berlin"}
    start_logits[1], end_logits[1] = 0.0, 0.0
    start_logits[1, capital] = end_logits[1, capital] = 9.0  # not its max-context window
    assert decode_answers(start_logits, end_logits, windows, [example]) == {"q": "Berlin"}


def test_training_targets(tokenizer):
    """The answer's own tokens where its words hold them (`_improve_answer_span`): "France" of
    the word "France," without the comma. A Chinese answer inside a longer word trains on the
    whole word's tokens: the answer's own (`▁北京` …) are not among the word's, so the word's
    span stays (XTREME's behaviour, kept). A question whose answer text is not at its start is
    dropped."""
    france = QAExample("en", "Paris?", EN, (Answer("France", EN.index("France")),))
    chinese = QAExample("zh", "Paris?", ZH, (Answer("北京市", 6),))
    bad = QAExample("bad", "Paris?", EN, (Answer("Berlin", 0),))
    windows = encode_questions(
        [france, chinese, bad], tokenizer, layout=BERT, training=True, max_length=48
    )
    assert windows.skipped == ("bad",) and windows.example_ids.tolist() == [0, 1]
    s, t = windows.start_positions[0], windows.end_positions[0]
    assert windows.rows[0][s : t + 1].tolist() == tokenizer.encode("France").tolist()
    c = windows.context_starts[1]
    assert (windows.start_positions[1], windows.end_positions[1]) == (c, len(windows.rows[1]) - 2)
    batch = windows.batch(np.array([1, -1]))
    assert batch["start_positions"].tolist() == [c, 0] and batch["pred_weights"].tolist() == [1, 0]


def test_bad_input(tokenizer):
    with pytest.raises(ValueError, match="question q: answer start 99 outside"):
        encode_questions(
            [QAExample("q", "x", EN, (Answer("x", 99),))], tokenizer, layout=XLMR, training=True
        )
    with pytest.raises(ValueError, match="question q: a training question needs an answer"):
        encode_questions([QAExample("q", "x", EN)], tokenizer, layout=XLMR, training=True)
    with pytest.raises(ValueError, match="question q: its context has no tokens"):
        encode_questions([QAExample("q", "x", " ")], tokenizer, layout=XLMR, training=False)
    with pytest.raises(ValueError, match="question q: max_length=5 leaves no context"):
        encode_questions(
            [QAExample("q", "Paris", EN)], tokenizer, layout=XLMR, training=False, max_length=5
        )
    example = QAExample("q", "x", EN)
    windows = encode_questions([example], tokenizer, layout=XLMR, training=False)
    with pytest.raises(ValueError, match="2 rows of logits for 1 windows"):
        decode_answers(np.zeros((2, 384)), np.zeros((2, 384)), windows, [example])


def test_final_text():
    """`get_final_text`'s cases: the prediction's characters in the original words; the
    reference's own example; the original words when the alignment fails (a no-break space
    the basic tokenizer turns into a space), and when the prediction is not there at all; a
    span inside a word of no spaces: its words, or its characters; an unknown setting."""
    for answer_text in ("words", "characters"):
        assert final_text("Steve Smith", "Steve Smith's", answer_text) == "Steve Smith"
        assert final_text("Smith ' s", "Steve Smith's", answer_text) == "Smith's"
        assert final_text("b", "a\u00a0b", answer_text) == "a\u00a0b"
        assert final_text("Berlin", "Paris", answer_text) == "Paris"
    assert final_text("北京", "在北京大学") == "在北京大学"
    assert final_text("北京", "在北京大学", "characters") == "北京"
    with pytest.raises(ValueError, match="answer_text 'tokens': must be one of"):
        final_text("北京", "在北京大学", "tokens")


def test_basic_tokens_are_berts():
    """Our basic tokenization (tokenizers' BERT normalizer and pre-tokenizer) is transformers'
    cased `BasicTokenizer` (NFC-stable text: v2's did not normalize, today's does)."""
    legacy = pytest.importorskip("transformers.models.bert.tokenization_bert_legacy")
    basic = legacy.BasicTokenizer(do_lower_case=False)
    for text in [
        "北京大学位于 Mr. Smith's 1898年",
        "Hello,\u00a0world!\t(x)",
        "naïve café — «quoted» ¿qué?",
        "a\u200bb\x00c\ufffd",
        "東京に住む。ภาษาไทย",
        "$5+3=8 ^_^ |x| ~y `z`",
    ]:
        assert basic_tokens(text) == basic.tokenize(text), text
