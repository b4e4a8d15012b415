"""XTREME's retrieval tasks, BUCC 2018 and Tatoeba, predicted as its scripts do: no fine-tuning,
the pre-trained encoder's sentence embeddings at one layer (google-research/xtreme
`scripts/run_bucc2018.sh`, `run_tatoeba.sh`, `third_party/evaluate_retrieval.py`).

- Tatoeba: every English sentence of `{lang}-en.en` retrieves its cosine nearest source
  sentence of `{lang}-en.{lang}`; the prediction is that sentence's 0-based line (XTREME's
  `similarity_search` indexes the source side and queries it with the English one).
- BUCC: candidate pairs by the ratio margin (`eval.mining.text_candidates`, k = 4, both
  directions, one-to-one); the threshold is the one of best F1 on the dev split's gold, and the
  test split's candidates scoring at least that are the predicted pairs. (XTREME's released
  script optimises the threshold on the gold of the split it predicts, and ships no test gold;
  the dev split is what a threshold can honestly be chosen on.) As XTREME's
  `utils_retrieve.read_sent2id` maps the mined texts back to ids, a sentence whose text
  (stripped) occurs more than once on its side has no id, and every candidate pair holding it
  is dropped: such a sentence is never mined (`unique_candidates`).

XTREME embeds with the hidden state `specific_layer` of the last `num_layers` states
(`all_layer_outputs[-num_layers:]`, of the L + 1), which is state L + 1 − `num_layers` +
`specific_layer` here (`<task>.layer` counts states, 0 the embeddings): layer 7 of a 12-layer
model's last 12 is the state after the 8th layer; of a 24-layer model's last 12 (BUCC, whose
script passes no `--num_layers`), after the 20th.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np

from xlpretrain.eval.alignment import embed, normalise
from xlpretrain.eval.mining import Candidates, best_threshold, text_candidates

if TYPE_CHECKING:
    from xlpretrain.api import Model
    from xlpretrain.data.xtreme import BuccSplit, TatoebaSplit

__all__ = ["RetrievalSettings", "bucc_pairs", "tatoeba_indices", "unique_candidates"]
_SIMILARITY_ROWS = 1024  # query rows of the similarity matrix held at once


@dataclasses.dataclass(frozen=True)
class RetrievalSettings:
    """Which embedding a retrieval task compares: a hidden state (0 the embeddings' output)
    pooled by `mean` over the row's tokens or its first (`cls`), `batch_size` sentences at a
    time."""

    layer: int
    pooling: str
    batch_size: int


def tatoeba_indices(
    model: Model, split: TatoebaSplit, lang: str, settings: RetrievalSettings
) -> list[int]:
    """For each English sentence, in file order, the line of its nearest source sentence."""
    source = _embed(model, split.source, lang, settings)
    english = _embed(model, split.english, "en", settings)
    source, english = normalise(source, np.float32), normalise(english, np.float32)
    nearest = []
    for start in range(0, len(english), _SIMILARITY_ROWS):
        similarity = english[start : start + _SIMILARITY_ROWS] @ source.T
        nearest.extend(similarity.argmax(axis=1).tolist())
    return nearest


def bucc_pairs(
    model: Model, dev: BuccSplit, test: BuccSplit, lang: str, settings: RetrievalSettings
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], dict[str, Any]]:
    """The test split's mined `(source id, English id)` pairs, the dev split's mined at the
    same threshold (what the dev table scores), and the dev split's scores at the threshold
    chosen on its gold (`threshold`, `precision`, `recall`, `f1`, `mined`)."""
    if dev.gold is None:
        raise ValueError(f"BUCC {lang}: the dev split has no gold pairs to set a threshold on")
    dev_pairs, dev_scores = _candidates(model, dev, lang, settings)
    gold = set(dev.gold)
    correct = np.array([pair in gold for pair in dev_pairs], bool)
    if not correct.any():  # no gold pair among the candidates: mine nothing
        return [], [], {"threshold": None, "precision": 0.0, "recall": 0.0, "f1": 0.0, "mined": 0}
    chosen = best_threshold(dev_scores, correct, len(gold))
    test_pairs, test_scores = _candidates(model, test, lang, settings)
    return (
        _mined(test_pairs, test_scores, chosen["threshold"]),
        _mined(dev_pairs, dev_scores, chosen["threshold"]),
        chosen,
    )


def unique_candidates(
    ids: tuple[list[str], list[str]], texts: tuple[list[str], list[str]], candidates: Candidates
) -> tuple[list[tuple[str, str]], np.ndarray]:
    """The `(source id, English id)` of each candidate whose two sentences are each the only
    one of their text on their side, and those candidates' scores: `read_candidate2score`'s
    rule (`read_sent2id` drops every repeated text, so a pair holding one is never read)."""
    once = []
    for side in texts:
        counts = Counter(text.strip() for text in side)
        once.append(np.array([counts[text.strip()] == 1 for text in side], bool))
    l1, l2 = candidates.l1_rows, candidates.l2_rows
    keep = once[0][l1] & once[1][l2] if len(l1) else np.zeros(0, bool)
    pairs = [
        (ids[0][a], ids[1][b]) for a, b in zip(l1[keep].tolist(), l2[keep].tolist(), strict=True)
    ]
    return pairs, candidates.scores[keep]


def _mined(pairs: list[tuple[str, str]], scores: np.ndarray, threshold: float) -> list:
    return [pair for pair, keep in zip(pairs, (scores >= threshold).tolist(), strict=True) if keep]


def _embed(model: Model, texts, lang: str, settings: RetrievalSettings) -> np.ndarray:
    return embed(model, list(texts), lang, layer=settings.layer, pooling=settings.pooling)


def _candidates(model: Model, split: BuccSplit, lang: str, settings: RetrievalSettings):
    ids = (list(split.source), list(split.english))
    texts = (list(split.source.values()), list(split.english.values()))
    candidates = text_candidates(
        model, texts, (lang, "en"), layer=settings.layer, pooling=settings.pooling
    )
    return unique_candidates(ids, texts, candidates)
