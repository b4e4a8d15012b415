"""Extractive questions (SQuAD v1.1, XQuAD, MLQA, TyDiQA-GoldP) as windows of their context, and
the windows' start/end logits back as one answer text per question: XTREME's
`third_party/processors/squad.py` and the `compute_predictions_logits` / `get_final_text` of
Hugging Face transformers v2 (`data/metrics/squad_metrics.py`, from google-research/bert's
`run_squad.py`) that its `run_squad.py` calls, ported (Apache-2.0).

The context is split on whitespace into "doc words" (a zh/ja/th context is few, long words), each
word tokenized on its own; the question is cut to `max_query_length` tokens; the context's tokens
are laid out in windows of at most `max_length` tokens with the question, `doc_stride` tokens
apart: `<s> q </s></s> c </s>` for a family of two separators, `[CLS] q [SEP] c [SEP]` (token
type 1 on `c [SEP]` where the family has token types) otherwise. A token belongs to the window
where it has the most context on both sides (`max_context`); only there may an answer start.

Training (SQuAD v1.1 as XTREME trains it): the first answer's tokens, narrowed to the sub-tokens
that spell the answer where they can be found; every window is trained, one without the whole
answer pointing both ends at its first token (the `<s>`/`[CLS]` at index 0); a question whose
answer text is not in its context's words is dropped (`QAWindows.skipped`).

Decoding: the best-scoring span over all windows of a question (start ≤ end, both in the
context, the start in its max-context window, at most `max_answer_length` tokens, among the
`n_best_size` best starts and ends of each window), its text found in the original context by
`get_final_text`'s character alignment, as XTREME runs it (`answer_text="words"`, the default):
where the predicted tokens' text cannot be found in the basic tokenization of the words they
lie in, the answer is those *whole* words: `get_final_text` returns `orig_text` then, in the
transformers commit XTREME's `install_tools.sh` pins (cefd51c5, pinned 2020-04-20) as in the
releases 2.8.0 (2020-04-06) and 2.9.0 (2020-05-07), and XTREME's `third_party/run_squad.py`
calls that `compute_predictions_logits` unchanged. That happens to an XLM-R span inside a
whitespace-free word (zh, ja: the tokens spell "北京市", the basic tokenizer "北 京 市"), next
to punctuation ("Mr. Smith" of the words "Mr. Smith.", spelled "Mr . Smith ."), in a number
("$5.50" of "$5.50.", spelled "$ 5 . 50 ."). `answer_text="characters"` looks such a span up
once more with spaces ignored on both sides, so it answers the span's own characters. Users of
XTREME's code report MLQA zh F1 of 17-19 for XLM-R, far below the paper's and the other
languages' (google-research/xtreme#38, huggingface/transformers#3510); the fix suggested
there, `final_text = tok_text` for zh, is in neither XTREME's code nor transformers'.
Lower-casing models (`do_lower_case`) are not supported: XTREME's are cased.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from tokenizers import normalizers, pre_tokenizers

from xlpretrain.data.finetuning.task_examples import Answer, PairLayout, QAExample
from xlpretrain.data.finetuning.task_rows import Batch, row_batch
from xlpretrain.data.tokenizer import Tokenizer

ANSWER_TEXTS = ("words", "characters")  # XTREME's; the span's own characters (see above)
NO_ANSWER = "empty"  # the reference's nonce answer when no span is valid (kept, odd as it is)
_WHITESPACE = frozenset(" \t\r\n\u202f")  # SQuAD's `_is_whitespace`, XTREME's U+202F included


def doc_words(context: str) -> tuple[list[str], list[int]]:
    """The context's whitespace-separated words and, per character, the index of the word it is
    in (a whitespace character: the word before it, -1 before the first)."""
    words: list[str] = []
    char_to_word = []
    after_space = True
    for c in context:
        if c in _WHITESPACE:
            after_space = True
        elif after_space:
            words.append(c)
            after_space = False
        else:
            words[-1] += c
        char_to_word.append(len(words) - 1)
    return words, char_to_word


@dataclasses.dataclass(frozen=True)
class QAWindows:
    """Windows as rows. Window w is of question `example_ids[w]`; its context tokens start at
    `context_starts[w]`; `token_words[w][t]` is the context word token t comes from (-1 outside
    the context), `max_context[w][t]` whether t has its most context in this window;
    `start_positions`/`end_positions` the training targets, `trained` whether there are any."""

    rows: list[np.ndarray]
    context_starts: np.ndarray
    token_words: list[np.ndarray]
    max_context: list[np.ndarray]
    example_ids: np.ndarray
    start_positions: np.ndarray
    end_positions: np.ndarray
    trained: bool
    skipped: tuple[str, ...]  # training questions dropped: the answer is not in the context
    max_length: int
    token_types: bool
    lang_id: int
    tokenizer: Tokenizer = dataclasses.field(repr=False)
    loss_over: str = "window"  # the loss's softmax: the whole window, or its "tokens"

    def __len__(self) -> int:
        return len(self.rows)

    def batch(self, indices: np.ndarray) -> Batch:
        """`[len(indices), max_length]` rows (index -1: padding) with `start_positions`,
        `end_positions`, `pred_weights` (1 for a training window, 0 otherwise) and
        `answer_region`, the positions the loss's softmax runs over (`loss_over`: every one of
        the window, as XTREME's `run_squad.py`, or its tokens)."""
        batch = row_batch(
            self.rows, indices, max_length=self.max_length, pad_id=self.tokenizer.pad_id,
            lang_id=self.lang_id, type_starts=self.context_starts if self.token_types else None,
        )  # fmt: skip
        real = indices >= 0
        safe = np.where(real, indices, 0)
        batch["start_positions"] = np.where(real, self.start_positions[safe], 0).astype(np.int32)
        batch["end_positions"] = np.where(real, self.end_positions[safe], 0).astype(np.int32)
        batch["pred_weights"] = (real & self.trained).astype(np.float32)
        if self.loss_over == "tokens":
            batch["answer_region"] = (batch["segment_ids"] > 0).astype(np.int32)
        else:
            batch["answer_region"] = np.ones_like(batch["segment_ids"], np.int32)
        return batch


def window_spans(num_tokens: int, capacity: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of each window over `num_tokens` context tokens: starts `doc_stride`
    apart until one reaches the end (as HF v2's overflowing tokens give them while
    `doc_stride` ≤ `capacity`; beyond it a step is one whole window, leaving no gap)."""
    spans, start = [], 0
    while True:
        length = min(num_tokens - start, capacity)
        spans.append((start, length))
        if start + length >= num_tokens:
            return spans
        start += min(length, doc_stride)


def max_context(spans: Sequence[tuple[int, int]], window: int) -> np.ndarray:
    """Per token of `window`: whether no other window gives it a better min(left, right)
    context + 0.01 · window length (the first best wins a tie): `_new_check_is_max_context`."""
    start, length = spans[window]
    positions = np.arange(start, start + length)
    best_score = np.full(length, -np.inf)
    best = np.full(length, -1)
    for w, (s, n) in enumerate(spans):
        inside = (positions >= s) & (positions < s + n)
        score = np.minimum(positions - s, s + n - 1 - positions) + 0.01 * n
        better = inside & (score > best_score)
        best_score = np.where(better, score, best_score)
        best = np.where(better, w, best)
    return best == window


def answer_tokens(
    example: QAExample,
    words: Sequence[str],
    char_to_word: Sequence[int],
    pieces: Sequence[np.ndarray],
    tokenizer: Tokenizer,
) -> tuple[int, int] | None:
    """The first answer's first and last context token, narrowed to the tokens that spell the
    answer (`_improve_answer_span`); None when the answer's text is not in its words (the
    reference drops the question)."""
    if not example.answers:
        raise ValueError(f"question {example.id}: a training question needs an answer")
    answer: Answer = example.answers[0]
    if not 0 <= answer.start < len(char_to_word):
        raise ValueError(
            f"question {example.id}: answer start {answer.start} outside its context of "
            f"{len(char_to_word)} characters"
        )
    first_word = char_to_word[answer.start]
    last_word = char_to_word[min(answer.start + len(answer.text), len(char_to_word)) - 1]
    if " ".join(words[first_word : last_word + 1]).find(" ".join(answer.text.split())) == -1:
        return None
    starts = np.cumsum([0] + [len(p) for p in pieces])
    first, last = int(starts[first_word]), int(starts[last_word + 1]) - 1
    doc = np.concatenate(pieces).tolist()
    target = tokenizer.encode(answer.text).tolist()
    for start in range(first, last + 1):
        for end in range(last, start - 1, -1):
            if doc[start : end + 1] == target:
                return start, end
    return first, last


def lay_out(
    prefix: np.ndarray,
    doc: np.ndarray,
    word_of_token: np.ndarray,
    answer: tuple[int, int] | None,
    *,
    eos: int,
    max_length: int,
    doc_stride: int,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]]:
    """Each window's row `prefix + context part + eos`, its tokens' context words (-1 outside),
    max-context flags and (start, end) targets: the answer's, (0, 0) where it is not whole
    inside or there is none (XTREME trains such a window to point at the `<s>`)."""
    offset = len(prefix)
    spans = window_spans(len(doc), max_length - offset - 1, doc_stride)
    outside = np.full(offset, -1)
    windows = []
    for w, (start, length) in enumerate(spans):
        part = slice(start, start + length)
        row = np.concatenate([prefix, doc[part], [eos]]).astype(np.int32)
        words = np.concatenate([outside, word_of_token[part], [-1]])
        flags = np.concatenate([np.zeros(offset, bool), max_context(spans, w), [False]])
        inside = answer is not None and start <= answer[0] and answer[1] < start + length
        target = (answer[0] - start + offset, answer[1] - start + offset) if inside else (0, 0)
        windows.append((row, words, flags, target))
    return windows


def encode_questions(
    examples: Sequence[QAExample],
    tokenizer: Tokenizer,
    *,
    layout: PairLayout,
    training: bool,
    max_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
    lang_id: int = 0,
    loss_over: str = "window",
) -> QAWindows:
    """Every question as windows of its context (see the module docstring; the defaults are
    XTREME's). `training`: with the first answer's targets; `loss_over`: `QAWindows.batch`."""
    bos, eos = tokenizer.bos_id, tokenizer.eos_id
    windows, example_ids, context_starts, skipped = [], [], [], []
    for e, example in enumerate(examples):
        words, char_to_word = doc_words(example.context)
        pieces = tokenizer.encode_batch(words, num_threads=1)
        word_of_token = np.repeat(np.arange(len(words)), [len(p) for p in pieces])
        if not len(word_of_token):
            raise ValueError(f"question {example.id}: its context has no tokens")
        answer = None
        if training:
            answer = answer_tokens(example, words, char_to_word, pieces, tokenizer)
            if answer is None:
                skipped.append(example.id)
                continue
        query = tokenizer.encode(example.question)[:max_query_length]
        prefix = np.array([bos, *query, *[eos] * layout.separators], np.int32)
        if max_length - len(prefix) - 1 < 1:
            raise ValueError(f"question {example.id}: max_length={max_length} leaves no context")
        these = lay_out(
            prefix, np.concatenate(pieces), word_of_token, answer, eos=eos,
            max_length=max_length, doc_stride=doc_stride,
        )  # fmt: skip
        windows += these
        example_ids += [e] * len(these)
        context_starts += [len(prefix)] * len(these)
    rows, token_words, flags, targets = zip(*windows, strict=True) if windows else ([],) * 4
    targets = np.array(targets, np.int64).reshape(-1, 2)
    return QAWindows(
        list(rows), np.array(context_starts, np.int64), list(token_words), list(flags),
        np.array(example_ids, np.int64), targets[:, 0], targets[:, 1], training, tuple(skipped),
        max_length, layout.token_types, lang_id, tokenizer, loss_over,
    )  # fmt: skip


_BASIC_NORMALIZER = normalizers.BertNormalizer(
    clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False
)
_BASIC_SPLITTER = pre_tokenizers.BertPreTokenizer()


def basic_tokens(text: str) -> list[str]:
    """BERT's basic tokenization, cased (transformers' `BasicTokenizer(do_lower_case=False)`):
    control characters dropped, whitespace and punctuation split, each CJK character a token."""
    normalized = _BASIC_NORMALIZER.normalize_str(text)
    return [token for token, _ in _BASIC_SPLITTER.pre_tokenize_str(normalized)]


def _strip_spaces(text: str) -> tuple[str, list[int]]:
    """`text` without its spaces, and where each of its characters was in `text`."""
    kept = [i for i, c in enumerate(text) if c != " "]
    return "".join(text[i] for i in kept), kept


def final_text(pred_text: str, orig_text: str, answer_text: str = "words") -> str:
    """The characters of `orig_text` (the predicted words, as in the context) that spell
    `pred_text` (the predicted tokens' text): `get_final_text`, cased; `orig_text` where it
    fails. `answer_text="characters"`: a failed search tried once more with spaces ignored
    (see the module docstring)."""
    if answer_text not in ANSWER_TEXTS:
        raise ValueError(f"answer_text {answer_text!r}: must be one of {ANSWER_TEXTS}")
    tok_text = " ".join(basic_tokens(orig_text))
    orig_ns, orig_at = _strip_spaces(orig_text)
    tok_ns, tok_at = _strip_spaces(tok_text)
    if len(orig_ns) != len(tok_ns):  # the alignment assumes one character for one
        return orig_text
    start = tok_text.find(pred_text)
    if start != -1:
        ns_of = {s: ns for ns, s in enumerate(tok_at)}
        first, last = ns_of.get(start), ns_of.get(start + len(pred_text) - 1)
    elif answer_text == "characters":
        spaceless = pred_text.replace(" ", "")
        first = tok_ns.find(spaceless) if spaceless else -1
        if first == -1:
            return orig_text
        last = first + len(spaceless) - 1
    else:
        return orig_text
    if first is None or last is None:
        return orig_text
    return orig_text[orig_at[first] : orig_at[last] + 1]


def span_text(ids: np.ndarray, tokenizer: Tokenizer) -> str | None:
    """The tokens' text as the reference writes it (`Tokenizer.tokens_text`: a WordPiece
    model's "Mr . Smith", not its decoder's "Mr. Smith"), whitespace collapsed; None with an
    `<unk>` among them, whose text is lost (the reference's `<unk>` string is then found
    nowhere, so it answers the words)."""
    if (np.asarray(ids) == tokenizer.unk_id).any():
        return None
    return " ".join(tokenizer.tokens_text(ids).split())


def best_indexes(logits: np.ndarray, n: int) -> np.ndarray:
    """The `n` highest logits' indices, best first, a tie in index order (`_get_best_indexes`)."""
    return np.argsort(-np.asarray(logits), kind="stable")[:n]


def decode_answers(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    windows: QAWindows,
    examples: Sequence[QAExample],
    n_best_size: int = 20,
    max_answer_length: int = 30,
    answer_text: str = "words",
) -> dict[str, str]:
    """Each question's answer text (`examples` as given to `encode_questions`; `answer_text`:
    `final_text`'s). The logits are
    `[len(windows), L]`, row w of window w over the whole batch row (L = `max_length`, as the
    reference's padded rows): padding's logits compete for the n best too, as there."""
    start_logits = np.asarray(start_logits, np.float64)
    end_logits = np.asarray(end_logits, np.float64)
    if start_logits.shape[0] != len(windows) or end_logits.shape[0] != len(windows):
        raise ValueError(f"{start_logits.shape[0]} rows of logits for {len(windows)} windows")
    best: dict[int, tuple[float, int, int, int]] = {}
    for w, row in enumerate(windows.rows):
        words, flags = windows.token_words[w], windows.max_context[w]
        e = int(windows.example_ids[w])
        for s in best_indexes(start_logits[w], n_best_size).tolist():
            for t in best_indexes(end_logits[w], n_best_size).tolist():
                valid = s < len(row) and t < len(row) and words[s] >= 0 and words[t] >= 0
                if not valid or not flags[s] or t < s or t - s + 1 > max_answer_length:
                    continue
                score = start_logits[w, s] + end_logits[w, t]
                if e not in best or score > best[e][0]:
                    best[e] = (score, w, s, t)
    answers = {}
    for e, example in enumerate(examples):
        if e not in best:
            answers[example.id] = NO_ANSWER
            continue
        _, w, s, t = best[e]
        words, _ = doc_words(example.context)
        token_words = windows.token_words[w]
        orig_text = " ".join(words[token_words[s] : token_words[t] + 1])
        pred_text = span_text(windows.rows[w][s : t + 1], windows.tokenizer)
        answers[example.id] = (
            orig_text if pred_text is None else final_text(pred_text, orig_text, answer_text)
        )
    return answers
