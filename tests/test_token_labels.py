"""Tagged sentences as rows and back (xlpretrain.data.finetuning.token_labels) against XTREME's
definition: `utils_tag.convert_examples_to_features` for a row,
`utils_preprocess.*_tokenize_preprocess` for splitting a long sentence, `run_tag.save_predictions`
for joining it back."""

import numpy as np
import pytest

from tests import task_tokenizer
from xlpretrain.data.finetuning.task_examples import PairLayout, TaggedSentence
from xlpretrain.data.finetuning.token_labels import decode_tags, encode_tagged, split_sentence
from xlpretrain.data.pretraining.examples import FIRST_POSITION, PAD_POSITION

XLMR = PairLayout(separators=2, token_types=False)
BERT = PairLayout(separators=1, token_types=True)
LABELS = {"O": 0, "B-LOC": 1, "I-LOC": 2, "B-PER": 3}
NAMES = list(LABELS)
IGNORE = -100  # run_tag's pad_token_label_id (CrossEntropyLoss's ignore_index)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return task_tokenizer.train(tmp_path_factory.mktemp("task_tokenizer"))


def xtreme_row(sentence, tokenizer, extra_sep):
    """`convert_examples_to_features` of one sentence that fits: ids and label ids, IGNORE on
    every sub-token but a word's first and on the special tokens."""
    tokens, labels = [], []
    for word, label in zip(sentence.words, sentence.labels, strict=True):
        pieces = tokenizer.encode(word).tolist() or [tokenizer.unk_id]
        tokens += pieces
        labels += [LABELS[label]] + [IGNORE] * (len(pieces) - 1)
    tail = 2 if extra_sep else 1
    ids = [tokenizer.bos_id, *tokens, *[tokenizer.eos_id] * tail]
    return ids, [IGNORE, *labels, *[IGNORE] * tail]


SENTENCE = TaggedSentence(
    words=("Mr.", "Smith", "jumps", "in", "Europe", "."),
    labels=("O", "B-PER", "O", "O", "B-LOC", "O"),
)


@pytest.mark.parametrize(
    ("kind", "layout"),
    [("sentencepiece", XLMR), ("sentencepiece", BERT), ("wordpiece", BERT)],
    ids=["xlmr", "bert-layout", "bert"],
)
def test_label_on_first_sub_token(tokenizer, kind, layout):
    """Each word's label on its first sub-token only, the others and the specials weight 0;
    XLM-R's row ends `</s></s>` (run_tag's sep_token_extra), BERT's `[SEP]`; for XLM-R's kind of
    tokenizer and mBERT's (`##` pieces)."""
    if kind == "wordpiece":
        tokenizer = task_tokenizer.wordpiece()
    rows = encode_tagged([SENTENCE], tokenizer, LABELS, max_length=32, layout=layout)
    ids, labels = xtreme_row(SENTENCE, tokenizer, extra_sep=layout.separators == 2)
    assert any(len(tokenizer.encode(w)) > 1 for w in SENTENCE.words)  # the case is tested
    batch = rows.batch(np.array([0]))
    n = len(ids)
    assert len(rows) == 1 and batch["input_ids"][0, :n].tolist() == ids
    weights = batch["label_weights"][0]
    assert weights[:n].tolist() == [float(label != IGNORE) for label in labels]
    assert not weights[n:].any()
    assert batch["labels"][0, :n][weights[:n] > 0].tolist() == [LABELS[x] for x in SENTENCE.labels]
    assert batch["positions"][0, :n].tolist() == list(range(FIRST_POSITION, FIRST_POSITION + n))
    assert (batch["positions"][0, n:] == PAD_POSITION).all()
    assert batch["segment_ids"][0].tolist() == [1] * n + [0] * (32 - n)
    assert not batch["token_types"].any()


def test_word_of_no_tokens_is_unk(tokenizer):
    """A word that tokenizes to nothing (a zero-width space) is one `<unk>` with its label, as
    XTREME's preprocessing writes it; so is an empty word."""
    assert tokenizer.encode("\u200b").size == 0
    sentence = TaggedSentence(("Paris", "\u200b", "", "Berlin"), ("B-LOC", "O", "O", "B-LOC"))
    rows = encode_tagged([sentence], tokenizer, LABELS, max_length=16, layout=BERT)
    paris = tokenizer.encode("Paris").tolist()
    assert rows.rows[0][1 + len(paris) : 3 + len(paris)].tolist() == [tokenizer.unk_id] * 2
    assert decode_tags(rows.label_ids, rows, NAMES) == [list(sentence.labels)]


def test_split_sentence_is_xtremes_greedy_split():
    """A word that would overflow the row starts the next row (budget 7: 3+3 | 3+2)."""
    pieces = [np.zeros(n) for n in (3, 3, 3, 2)]
    assert split_sentence(pieces, 7) == [range(0, 2), range(2, 4)]
    assert split_sentence(pieces, 11) == [range(0, 4)]
    assert split_sentence([np.zeros(1)] * 3, 1) == [range(0, 1), range(1, 2), range(2, 3)]


def test_long_sentence_every_word_labelled(tokenizer):
    """A sentence longer than a row becomes several rows, no word cut off: every row fits,
    the rows hold each word's first sub-token once in order, and decoding the gold label ids
    gives back one label per word, the gold ones (XTREME's split + save_predictions). A word
    longer than a whole row is one `<unk>`."""
    words = "The university of Europe was founded in London in 1898 by Mr. Smith .".split()
    words.insert(3, "jumpsjumpsjumpsjumps")  # more sub-tokens than a row holds
    labels = [NAMES[i % len(NAMES)] for i in range(len(words))]
    sentences = [TaggedSentence(tuple(words), tuple(labels)), SENTENCE]
    rows = encode_tagged(sentences, tokenizer, LABELS, max_length=10, layout=XLMR)
    assert len(tokenizer.encode("jumpsjumpsjumpsjumps")) > 10 - 3
    assert len(rows) > 3 and rows.sentence_ids.tolist()[-1] == 1
    assert all(len(r) <= 10 for r in rows.rows)
    ours = [w for w, s in zip(rows.word_ids, rows.sentence_ids, strict=True) if s == 0]
    first = np.concatenate([w[w >= 0] for w in ours])
    assert first.tolist() == list(range(len(words)))
    batch = rows.batch(np.arange(len(rows)))
    tags = decode_tags(batch["labels"], rows, NAMES)
    assert tags == [labels, list(SENTENCE.labels)]
    # The same through logits [N, L, C].
    logits = np.eye(len(NAMES))[batch["labels"]] * 5.0
    assert decode_tags(logits, rows, NAMES) == tags


def test_unlabelled_sentences_weigh_nothing(tokenizer):
    """A test file's sentence (labels None) is encoded and decoded, with no training weight."""
    sentence = TaggedSentence(SENTENCE.words, None)
    rows = encode_tagged([sentence], tokenizer, LABELS, max_length=32, layout=XLMR)
    batch = rows.batch(np.array([0, -1]))
    assert not batch["label_weights"].any()
    assert decode_tags(batch["labels"][:1], rows, NAMES) == [["O"] * len(SENTENCE.words)]


def test_padding_row_and_errors(tokenizer):
    rows = encode_tagged([SENTENCE], tokenizer, LABELS, max_length=32, layout=XLMR)
    batch = rows.batch(np.array([-1, 0]))
    assert (batch["input_ids"][0] == tokenizer.pad_id).all()
    assert not batch["segment_ids"][0].any() and not batch["label_weights"][0].any()
    assert (batch["input_ids"][1] == rows.batch(np.array([0]))["input_ids"][0]).all()
    with pytest.raises(ValueError, match=r"sentence 0: label\(s\) \['B-ORG'\]"):
        encode_tagged(
            [TaggedSentence(("x",), ("B-ORG",))], tokenizer, LABELS, max_length=8, layout=XLMR
        )
    with pytest.raises(ValueError, match="2 rows of predictions for 1 rows"):
        decode_tags(np.zeros((2, 32), int), rows, NAMES)
