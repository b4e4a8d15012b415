"""Extractive-QA answers scored as XTREME scores them: exact match and token F1 against the best
of a question's gold answers, after the normalisation of SQuAD v1.1's evaluation script (XQuAD,
TyDiQA-GoldP) or of MLQA's (per answer language).

Ported from google-research/xtreme's third_party/evaluate_squad.py and evaluate_mlqa.py
(Apache-2.0; themselves from allenai/bi-att-flow's SQuAD v1.1 script and
facebookresearch/MLQA's), the arithmetic in the same order so that the numbers are the same to
the last bit.
"""

from __future__ import annotations

import collections
import logging
import re
import string
import unicodedata
from collections.abc import Callable, Mapping, Sequence

log = logging.getLogger("xlpretrain")

Normalizer = Callable[[str], str]
# A question: its id and its gold answers' texts.
Question = tuple[str, Sequence[str]]

_SQUAD_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SQUAD_PUNCTUATION = frozenset(string.punctuation)

# Each answer language's articles, as MLQA's script removes them (None: it removes none).
_MLQA_ARTICLES: dict[str, re.Pattern[str] | None] = {
    "en": re.compile(r"\b(a|an|the)\b"),
    "es": re.compile(r"\b(un|una|unos|unas|el|la|los|las)\b"),
    "hi": None,
    "vi": re.compile(r"\b(của|là|cái|chiếc|những)\b"),
    "de": re.compile(r"\b(ein|eine|einen|einem|eines|einer|der|die|das|den|dem|des)\b"),
    # MLQA's '\sال^|ال': the first branch never matches ('^' after two characters), so every
    # "ال", also inside a word, becomes a space.
    "ar": re.compile(r"\sال^|ال"),
    "zh": None,
}
MLQA_LANGUAGES = tuple(_MLQA_ARTICLES)
# Chinese is split into characters (the CJK block MLQA's script names), the rest at whitespace.
_MIXED_SEGMENTATION = ("zh",)
_CJK = re.compile(r"[\u4e00-\u9fa5]")


def normalize_squad(text: str) -> str:
    """SQuAD v1.1: lower-cased, ASCII punctuation and English articles removed, whitespace
    collapsed."""
    text = "".join(ch for ch in text.lower() if ch not in _SQUAD_PUNCTUATION)
    return " ".join(_SQUAD_ARTICLES.sub(" ", text).split())


def _is_mlqa_punctuation(ch: str) -> bool:
    """MLQA's PUNCT: every Unicode punctuation character (category P*) and ASCII's."""
    return unicodedata.category(ch).startswith("P") or ch in _SQUAD_PUNCTUATION


def _mixed_segmentation(text: str) -> list[str]:
    """Each CJK character (or punctuation mark) a token, the text between split at
    whitespace."""
    tokens, run = [], ""
    for ch in text:
        if _CJK.search(ch) or _is_mlqa_punctuation(ch):
            tokens.extend(run.split())
            tokens.append(ch)
            run = ""
        else:
            run += ch
    tokens.extend(run.split())
    return tokens


def mlqa_normalizer(language: str) -> Normalizer:
    """MLQA's normalisation of answers in `language`: lower-cased, Unicode punctuation and the
    language's articles removed, tokens (zh: characters) joined by one space. Raises ValueError
    for a language MLQA's script does not know."""
    if language not in _MLQA_ARTICLES:
        raise ValueError(
            f"MLQA normalises answers in {', '.join(MLQA_LANGUAGES)} only, not {language!r}"
        )
    articles = _MLQA_ARTICLES[language]
    segment = _mixed_segmentation if language in _MIXED_SEGMENTATION else str.split

    def normalize(text: str) -> str:
        text = "".join(ch for ch in text.lower() if not _is_mlqa_punctuation(ch))
        if articles is not None:
            text = articles.sub(" ", text)
        return " ".join(token for token in segment(text) if token.strip())

    return normalize


def normalize_mlqa(text: str, language: str) -> str:
    return mlqa_normalizer(language)(text)


def exact_match(prediction: str, truth: str, normalize: Normalizer) -> bool:
    return normalize(prediction) == normalize(truth)


def token_f1(prediction: str, truth: str, normalize: Normalizer) -> float:
    """F1 of the bags of normalised tokens (0 when they share none)."""
    predicted, gold = normalize(prediction).split(), normalize(truth).split()
    same = sum((collections.Counter(predicted) & collections.Counter(gold)).values())
    if same == 0:
        return 0
    precision, recall = 1.0 * same / len(predicted), 1.0 * same / len(gold)
    return (2 * precision * recall) / (precision + recall)


def em_f1(
    questions: Sequence[Question], predictions: Mapping[str, str], normalize: Normalizer
) -> dict[str, float]:
    """`exact_match` and `f1` in percent over `questions`, each the best over its gold
    answers; a question without a prediction scores 0 (logged, as the scripts print it)."""
    if not questions:
        raise ValueError("no questions to score")
    exact = f1 = 0
    unanswered = [qid for qid, _ in questions if qid not in predictions]
    for qid, truths in questions:
        if qid in predictions:
            exact += max(exact_match(predictions[qid], truth, normalize) for truth in truths)
            f1 += max(token_f1(predictions[qid], truth, normalize) for truth in truths)
    if unanswered:
        log.warning(
            "%d of %d questions unanswered (scored 0), e.g. %s",
            len(unanswered),
            len(questions),
            unanswered[0],
        )
    return {"exact_match": 100.0 * exact / len(questions), "f1": 100.0 * f1 / len(questions)}
