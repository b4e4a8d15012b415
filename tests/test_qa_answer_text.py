"""A QA answer's text (`qa.answer_text`) side by side with XTREME's: `get_final_text` and the
tokens' text of `compute_predictions_logits` in transformers 2.8.0/2.9.0
(`transformers/data/metrics/squad_metrics.py`, both alike; XTREME's `install_tools.sh` pins a
commit between them, and its `third_party/run_squad.py` calls them unchanged), ported below.
`answer_text="words"` (the default) must answer what they answer on every span; "characters"
differs exactly where their alignment fails."""

import itertools

import numpy as np
import pytest

from tests import task_tokenizer
from xlpretrain.data.finetuning.qa_windows import (
    basic_tokens,
    decode_answers,
    doc_words,
    encode_questions,
    final_text,
)
from xlpretrain.data.finetuning.task_examples import PairLayout, QAExample

XLMR = PairLayout(separators=2, token_types=False)
BERT = PairLayout(separators=1, token_types=True)
CONTEXTS = (
    "北京大学位于北京市海淀区，成立于1898年。",
    "Paris is the capital of France, said Mr. Smith.",
    "北京是中国的首都。 Smith was born in London in 1898.",
    "Mr. Smith jumps over the fox in Paris Müller.",  # ü: an `<unk>` of the SentencePiece model
)


def reference_final_text(pred_text, orig_text):
    """transformers v2's `get_final_text(pred_text, orig_text, do_lower_case=False)`, its
    `BasicTokenizer(do_lower_case=False).tokenize` being `basic_tokens` (tests/test_qa_windows
    .py::test_basic_tokens_are_berts)."""

    def _strip_spaces(text):
        ns_chars = []
        ns_to_s_map = {}
        for i, c in enumerate(text):
            if c == " ":
                continue
            ns_to_s_map[len(ns_chars)] = i
            ns_chars.append(c)
        return "".join(ns_chars), ns_to_s_map

    tok_text = " ".join(basic_tokens(orig_text))
    start_position = tok_text.find(pred_text)
    if start_position == -1:
        return orig_text
    end_position = start_position + len(pred_text) - 1
    orig_ns_text, orig_ns_to_s_map = _strip_spaces(orig_text)
    tok_ns_text, tok_ns_to_s_map = _strip_spaces(tok_text)
    if len(orig_ns_text) != len(tok_ns_text):
        return orig_text
    tok_s_to_ns_map = {tok_index: i for i, tok_index in tok_ns_to_s_map.items()}
    orig_start_position = None
    if start_position in tok_s_to_ns_map:
        ns_start_position = tok_s_to_ns_map[start_position]
        if ns_start_position in orig_ns_to_s_map:
            orig_start_position = orig_ns_to_s_map[ns_start_position]
    if orig_start_position is None:
        return orig_text
    orig_end_position = None
    if end_position in tok_s_to_ns_map:
        ns_end_position = tok_s_to_ns_map[end_position]
        if ns_end_position in orig_ns_to_s_map:
            orig_end_position = orig_ns_to_s_map[ns_end_position]
    if orig_end_position is None:
        return orig_text
    return orig_text[orig_start_position : orig_end_position + 1]


def reference_answer(tok_tokens, orig_tokens, wordpiece):
    """`compute_predictions_logits`' text of a span: `convert_tokens_to_string` (v2's
    `XLMRobertaTokenizer`: pieces joined, "▁" a space; `BertTokenizer`: joined by spaces, " ##"
    removed), stripped and whitespace-collapsed, then `get_final_text` in the words."""
    if wordpiece:
        tok_text = " ".join(tok_tokens).replace(" ##", "").strip()
    else:
        tok_text = "".join(tok_tokens).replace("\u2581", " ").strip()
    tok_text = " ".join(tok_text.strip().split())
    return reference_final_text(tok_text, " ".join(orig_tokens))


@pytest.mark.parametrize(
    ("pred_text", "orig_text", "characters"),
    [
        ("北京市", "北京大学位于北京市海淀区。", "北京市"),  # XLM-R: no spaces between CJK
        ("北 京 市", "北京大学位于北京市海淀区。", "北京市"),  # mBERT: a token a character
        ("$5.50", "$5.50.", "$5.50"),  # the basic tokenizer: "$ 5 . 50 ."
        ("Mr. Smith", "Mr. Smith.", "Mr. Smith"),  # "Mr . Smith ."
        ("Steve Smith", "Steve Smith's", "Steve Smith"),  # the reference's own example
        ("capital of France", "capital of France,", "capital of France"),
        ("London", "London", "London"),
    ],
)
def test_final_text_side_by_side(pred_text, orig_text, characters):
    """`"words"` answers what transformers v2 does on each input; `"characters"` the span's
    own characters, which differ from the reference exactly where it cannot align them."""
    reference = reference_final_text(pred_text, orig_text)
    assert final_text(pred_text, orig_text) == reference
    assert final_text(pred_text, orig_text, "words") == reference
    assert final_text(pred_text, orig_text, "characters") == characters
    aligned = " ".join(basic_tokens(orig_text)).find(pred_text) != -1
    assert (reference == characters) == (aligned or characters == orig_text)


def every_span(tokenizer, layout, wordpiece, answer_text):
    """Each context's every span of up to 6 tokens: our answer and the reference's."""
    for context in CONTEXTS:
        example = QAExample("q", "Paris?", context)
        windows = encode_questions([example], tokenizer, layout=layout, training=False)
        row, token_words = windows.rows[0], windows.token_words[0]
        words, _ = doc_words(context)
        context_tokens = np.flatnonzero(token_words >= 0)
        for s, t in itertools.product(context_tokens, context_tokens):
            if not 0 <= t - s < 6:
                continue
            start_logits, end_logits = np.zeros((2, 1, 384))
            start_logits[0, s] = end_logits[0, t] = 10.0
            ours = decode_answers(
                start_logits, end_logits, windows, [example], answer_text=answer_text
            )["q"]
            pieces = [tokenizer.id_to_piece(int(i)) for i in row[s : t + 1]]
            reference = reference_answer(
                pieces, words[token_words[s] : token_words[t] + 1], wordpiece
            )
            yield context, pieces, ours, reference


def test_sentencepiece_spans_side_by_side(tmp_path):
    """XLM-R's kind: every span answers as XTREME's code does by default; with "characters",
    a span the reference answers in whole words (inside "北京大学位于…", before "Smith.")
    answers fewer characters of them instead."""
    tokenizer = task_tokenizer.train(tmp_path)
    spans = list(every_span(tokenizer, XLMR, wordpiece=False, answer_text="words"))
    assert len(spans) > 300
    for context, pieces, ours, reference in spans:
        assert ours == reference, (context, pieces)
    differ = 0
    for context, pieces, ours, reference in every_span(tokenizer, XLMR, False, "characters"):
        if ours != reference:
            differ += 1
            assert len(ours) < len(reference) and ours in reference, (context, pieces)
    assert differ > 50  # 87 of 486


def test_wordpiece_spans_side_by_side():
    """mBERT's kind (a token a CJK character, v2's BERT tokens' text "Mr . Smith"): the
    reference aligns every span but those with an `[UNK]` (of "Müller"), which answer their
    words, so both settings answer as it does."""
    tokenizer = task_tokenizer.wordpiece()
    for answer_text in ("words", "characters"):
        spans = list(every_span(tokenizer, BERT, wordpiece=True, answer_text=answer_text))
        assert len(spans) > 300
        for context, pieces, ours, reference in spans:
            assert ours == reference, (context, pieces)


def test_the_setting_defaults_to_xtreme():
    """`qa.answer_text`: "words" by default, in the run's config and in a task's settings (a
    workdir recorded before the key: its default); another value is refused by name."""
    from xlpretrain.core.errors import ConfigError
    from xlpretrain.finetune.schema import default_config, ranges
    from xlpretrain.tasks.qa import QASettings
    from xlpretrain.training.config_keys import check_keys

    cfg = default_config()
    assert cfg.qa.answer_text == QASettings().answer_text == "words"
    cfg.qa.answer_text = "tokens"
    with pytest.raises(ConfigError, match=r"qa.answer_text.*must be one of \('words'"):
        check_keys(cfg, default_config(), {"qa.answer_text": ranges()["qa.answer_text"]})
