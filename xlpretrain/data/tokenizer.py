"""SentencePiece tokenizer with XLM-R's (fairseq) token-id layout, and training a new model.

XLM-R checkpoints index their embedding matrix with fairseq's dictionary, not with raw
SentencePiece ids, so the wrapper translates between the two:

===========================  =====================
SentencePiece id / piece      xlpretrain / XLM-R id
===========================  =====================
``<s>`` (spm bos, id 1)      0
(no spm piece) ``<pad>``     1
``</s>`` (spm eos, id 2)     2
``<unk>`` (spm unk, id 0)    3
piece with spm id i >= 3     i + 1
(no spm piece) ``<mask>``    ``vocab_size - 1``
===========================  =====================

so ``vocab_size = spm.GetPieceSize() + 2`` (250002 for XLM-R's 250000-piece model). This is
exactly Hugging Face ``XLMRobertaTokenizer`` (``fairseq_offset = 1``, ``<unk>`` -> 3,
``<mask>`` = ``len(sp_model) + 1``), so XLM-R's own ``sentencepiece.bpe.model`` loads as is.
Models made by :func:`train_tokenizer` use the same SentencePiece layout (unk/bos/eos = 0/1/2,
no pad piece), so every model goes through one mapping.
"""

from __future__ import annotations

import io
import os
import re
import statistics
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm


class Tokenizer:
    """A SentencePiece model seen through XLM-R's id layout (see the module docstring)."""

    FILE = "tokenizer.model"  # its name in a workdir, a checkpoint folder and a store

    BOS_ID = 0
    PAD_ID = 1
    EOS_ID = 2
    UNK_ID = 3

    def __init__(self, model_proto: bytes) -> None:
        """Wraps a serialized SentencePiece ``ModelProto`` (the bytes of a ``.model`` file)."""
        self._init(model_proto)

    def _init(self, model_proto: bytes) -> None:
        sp = spm.SentencePieceProcessor(model_proto=model_proto)
        # The +1 shift is only collision-free if spm ids 0..2 are exactly its unk/bos/eos.
        if (sp.unk_id(), sp.bos_id(), sp.eos_id()) != (0, 1, 2):
            raise ValueError(
                "SentencePiece model must have unk/bos/eos at ids 0/1/2 (XLM-R layout), got "
                f"{sp.unk_id()}/{sp.bos_id()}/{sp.eos_id()}; retrain with unk_id=0, bos_id=1, "
                "eos_id=2, pad_id=-1 (train_tokenizer does this)"
            )
        self._model_proto = bytes(model_proto)
        self._sp = sp
        # spm id -> our id, one vectorised gather per encode.
        to_ours = np.arange(1, sp.GetPieceSize() + 1, dtype=np.int32)
        to_ours[[0, 1, 2]] = [self.UNK_ID, self.BOS_ID, self.EOS_ID]
        self._to_ours = to_ours

    @classmethod
    def load(cls, path: str | os.PathLike) -> Tokenizer:
        """Loads a SentencePiece ``.model`` file (e.g. XLM-R's ``sentencepiece.bpe.model``)."""
        return cls(Path(path).read_bytes())

    def save(self, path: str | os.PathLike) -> None:
        """Writes the ``.model`` bytes, so a run's tokenizer travels with its checkpoints."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self._model_proto)

    # Pickled as the model bytes: grain worker processes rebuild the processor on their side.
    def __getstate__(self) -> dict[str, bytes]:
        return {"model_proto": self._model_proto}

    def __setstate__(self, state: dict[str, bytes]) -> None:
        self._init(state["model_proto"])

    @property
    def vocab_size(self) -> int:
        """Number of ids: SentencePiece pieces + ``<pad>`` + ``<mask>``."""
        return self._sp.GetPieceSize() + 2

    @property
    def mask_id(self) -> int:
        """``<mask>`` is the last id, as in fairseq / XLM-R."""
        return self.vocab_size - 1

    def special_ids(self) -> np.ndarray:
        """The five special ids (``<s>``, ``<pad>``, ``</s>``, ``<unk>``, ``<mask>``), int32."""
        return np.array(
            [self.BOS_ID, self.PAD_ID, self.EOS_ID, self.UNK_ID, self.mask_id], dtype=np.int32
        )

    def encode(self, text: str) -> np.ndarray:
        """Token ids of ``text`` as int32, without ``<s>``/``</s>`` (the task builder adds them)."""
        return self._to_ours[np.asarray(self._sp.EncodeAsIds(text), dtype=np.int64)]

    def encode_batch(
        self, texts: Sequence[str], *, num_threads: int | None = None
    ) -> list[np.ndarray]:
        """``[encode(t) for t in texts]``, but tokenized by SentencePiece's C++ thread pool.

        ``num_threads=None`` uses SentencePiece's default (all cores); pass a small number
        inside data-loader worker processes so they do not oversubscribe the host.
        """
        kwargs = {} if num_threads is None else {"num_threads": num_threads}
        batch = self._sp.Encode(list(texts), out_type=int, **kwargs)
        return [self._to_ours[np.asarray(ids, dtype=np.int64)] for ids in batch]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; the five special ids (``<unk>`` included) are skipped."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.vocab_size}), got {ids}")
        ids = ids[(ids > self.UNK_ID) & (ids != self.mask_id)]
        return self._sp.DecodeIds((ids - 1).tolist())

    def id_to_piece(self, i: int) -> str:
        """The piece behind id ``i`` (special ids give ``<s>``, ``<pad>``, ``</s>``, ...)."""
        if not 0 <= i < self.vocab_size:
            raise IndexError(f"token id {i} out of range [0, {self.vocab_size})")
        specials = {
            self.BOS_ID: "<s>",
            self.PAD_ID: "<pad>",
            self.EOS_ID: "</s>",
            self.UNK_ID: "<unk>",
            self.mask_id: "<mask>",
        }
        return specials.get(i) or self._sp.IdToPiece(i - 1)


def balanced_sample(
    texts_by_language: Mapping[str, Sequence[str]],
    sentences_per_language: int | None = None,
    seed: int = 0,
) -> list[str]:
    """The same number of sentences from every language, so no language dominates a vocabulary.

    Each language contributes ``min(n_l, sentences_per_language)`` of its non-blank sentences,
    drawn without replacement and kept in corpus order. ``None`` caps at the median language
    size: big languages are cut to the typical size without letting the smallest corpus
    shrink everyone's sample. Each language's draw depends only on ``seed`` and its own name
    and text, so adding a language leaves the others' samples unchanged.
    """
    pools = {
        lang: [t for t in texts if t.strip()] for lang, texts in sorted(texts_by_language.items())
    }
    if sentences_per_language is None:
        sizes = [len(p) for p in pools.values()]
        sentences_per_language = int(statistics.median(sizes)) if sizes else 0
    sample: list[str] = []
    for lang, pool in pools.items():
        if len(pool) <= sentences_per_language:
            sample.extend(pool)
            continue
        rng = np.random.default_rng([seed, zlib.crc32(lang.encode("utf-8"))])
        keep = np.sort(rng.choice(len(pool), size=sentences_per_language, replace=False))
        sample.extend(pool[i] for i in keep)
    return sample


def train_tokenizer(
    texts_by_language: Mapping[str, Sequence[str]],
    model_path: str | os.PathLike,
    vocab_size: int,
    *,
    sentences_per_language: int | None = None,
    seed: int = 0,
    model_type: str = "unigram",
    character_coverage: float = 0.9995,
) -> Tokenizer:
    """Trains a SentencePiece model on a language-balanced sample; writes it to ``model_path``.

    The model has ``vocab_size - 2`` pieces so that ``Tokenizer.vocab_size == vocab_size``
    once ``<pad>`` and ``<mask>`` are added, and the same unk/bos/eos layout as XLM-R's model.
    See :func:`balanced_sample` for ``sentences_per_language`` and ``seed``. Raises
    ``VocabularySizeError`` when the sample cannot support ``vocab_size`` (too little text for that
    many pieces, or more distinct characters than ``vocab_size`` at ``character_coverage``).
    """
    sample = balanced_sample(texts_by_language, sentences_per_language, seed)
    if not sample:
        raise ValueError("train_tokenizer needs at least one non-blank sentence")
    writer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sample),
            model_writer=writer,
            model_type=model_type,
            vocab_size=vocab_size - 2,
            character_coverage=character_coverage,
            unk_id=0,
            bos_id=1,
            eos_id=2,
            pad_id=-1,
            hard_vocab_limit=True,
            minloglevel=2,
        )
    except RuntimeError as e:
        error = _vocab_size_error(e, vocab_size, len(sample), len(texts_by_language))
        if error is None:
            raise
        raise error from e
    tokenizer = Tokenizer(writer.getvalue())
    tokenizer.save(model_path)
    return tokenizer


class VocabularySizeError(ValueError):
    """The training sample cannot give a SentencePiece model of the size asked for."""


def _vocab_size_error(
    error: RuntimeError, vocab_size: int, num_sentences: int, num_languages: int
) -> VocabularySizeError | None:
    """SentencePiece's vocabulary-size failures, restated in our ids with a way out."""
    corpus = f"the tokenizer training sample ({num_sentences} sentences, {num_languages} languages)"
    if too_high := re.search(r"Vocabulary size too high.*value <= (\d+)", str(error)):
        most = int(too_high.group(1)) + 2
        return VocabularySizeError(
            f"vocab_size={vocab_size} is too large for {corpus}: it supports at most "
            f"vocab_size={most}. Lower vocab_size, or give it more text (more sentences, or a "
            "larger sentences_per_language)."
        )
    if too_low := re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(error)):
        least = int(too_low.group(1)) + 2
        return VocabularySizeError(
            f"vocab_size={vocab_size} is too small for {corpus}: its characters alone need "
            f"vocab_size >= {least}. Raise vocab_size, or lower character_coverage so that "
            "rare characters become <unk>."
        )
    return None
