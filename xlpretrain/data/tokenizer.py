"""Tokenizers of two kinds behind one interface, and training a SentencePiece model.

Everything past the tokenizer (packing, masking, the store, the converters, ``xlpretrain.load``)
reads a ``Tokenizer``: ``encode``/``decode`` and the special ids by role, ``bos_id`` (what
starts a unit: CLS where the tokenizer has one), ``eos_id`` (what ends one: SEP), ``pad_id``,
``unk_id`` and ``mask_id``, so no id is assumed. ``Tokenizer.load`` picks the kind from the
file: a ``.json`` is a Hugging Face ``tokenizer.json`` (``HFTokenizer``, e.g. mmBERT's or
ModernBERT's, whose special ids are wherever its own files put them), anything else a
SentencePiece model (``SentencePieceTokenizer``). A workdir, a checkpoint folder and a store
keep the tokenizer under its kind's ``FILE`` (``tokenizer_file`` finds it).

A SentencePiece model is seen through XLM-R's (fairseq) id layout, because XLM-R checkpoints
index their embedding matrix with fairseq's dictionary, not with raw SentencePiece ids:

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

import abc
import dataclasses
import io
import json
import os
import re
import statistics
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm
import tokenizers


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    """A tokenizer's special ids by role, for code that holds no tokenizer (a step function's
    statistics, a benchmark's synthetic rows, an export's ``config.json``)."""

    bos: int  # starts every unit (`<s>`, `[CLS]`)
    pad: int
    eos: int  # ends every unit (`</s>`, `[SEP]`)
    unk: int
    mask: int
    others: tuple[int, ...] = ()  # further special tokens: never predicted, never drawn

    def all(self) -> np.ndarray:
        """Every special id, int32: the roles (bos, pad, eos, unk, mask), then the others."""
        roles = (self.bos, self.pad, self.eos, self.unk, self.mask, *self.others)
        return np.array(list(dict.fromkeys(roles)), np.int32)


class Tokenizer(abc.ABC):
    """What the rest of xlpretrain reads of a tokenizer (see the module docstring)."""

    FILE: str  # its name in a workdir, a checkpoint folder and a store
    special: SpecialIds
    vocab_size: int  # every id is below it, the special ones included

    @staticmethod
    def load(path: str | os.PathLike) -> Tokenizer:
        """The tokenizer in ``path``: a ``tokenizer.json`` (any ``.json``) or a SentencePiece
        model (e.g. XLM-R's ``sentencepiece.bpe.model``). A file that is neither is a
        ``ValueError`` naming it."""
        if Path(path).suffix == ".json":
            return HFTokenizer.from_file(path)
        return SentencePieceTokenizer(Path(path).read_bytes(), str(path))

    @property
    def bos_id(self) -> int:
        return self.special.bos

    @property
    def pad_id(self) -> int:
        return self.special.pad

    @property
    def eos_id(self) -> int:
        return self.special.eos

    @property
    def unk_id(self) -> int:
        return self.special.unk

    @property
    def mask_id(self) -> int:
        return self.special.mask

    def special_ids(self) -> np.ndarray:
        """Every special id (roles first: bos, pad, eos, unk, mask), int32: never masked."""
        return self.special.all()

    @abc.abstractmethod
    def save(self, path: str | os.PathLike) -> None:
        """Writes the tokenizer as ``path`` (named ``FILE`` in a workdir), so a run's tokenizer
        travels with its checkpoints."""

    @abc.abstractmethod
    def encode(self, text: str) -> np.ndarray:
        """Token ids of ``text`` as int32, without special tokens (the task builder adds them)."""

    @abc.abstractmethod
    def encode_batch(
        self, texts: Sequence[str], *, num_threads: int | None = None
    ) -> list[np.ndarray]:
        """``[encode(t) for t in texts]``, tokenized by the library's thread pool.

        ``num_threads=None`` uses its default (all cores); pass a small number inside
        data-loader worker processes so they do not oversubscribe the host.
        """

    @abc.abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; special ids (``<unk>`` included) are skipped."""

    @abc.abstractmethod
    def id_to_piece(self, i: int) -> str:
        """The piece behind id ``i`` (a special id gives its token, e.g. ``<s>``)."""

    def tokens_text(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` as transformers v2's ``convert_tokens_to_string`` writes it (what
        SQuAD's ``get_final_text`` looks for): ``decode``, but for a WordPiece decoder's
        clean-up of spaces before punctuation, which v2's BERT tokenizer does not do."""
        return self.decode(ids)

    def _valid(self, ids: Sequence[int]) -> np.ndarray:
        """``ids`` as int64, checked to lie in the vocabulary, without the special ones."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.vocab_size}), got {ids}")
        return ids[~np.isin(ids, self.special_ids())]

    def _check_id(self, i: int) -> None:
        if not 0 <= i < self.vocab_size:
            raise IndexError(f"token id {i} out of range [0, {self.vocab_size})")


class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece model seen through XLM-R's id layout (see the module docstring)."""

    FILE = "tokenizer.model"

    def __init__(self, model_proto: bytes, source: str = FILE) -> None:
        """Wraps a serialized SentencePiece ``ModelProto`` (the bytes of a ``.model`` file);
        ``source``: the file's path, for errors."""
        self._init(model_proto, source)

    @staticmethod
    def layout(vocab_size: int) -> SpecialIds:
        """The special ids of every SentencePiece model of ``vocab_size`` ids (XLM-R's)."""
        return SpecialIds(bos=0, pad=1, eos=2, unk=3, mask=vocab_size - 1)

    def _init(self, model_proto: bytes, source: str = FILE) -> None:
        if not model_proto:  # parses as a model of no pieces, which logs at every call
            raise ValueError(f"{source}: not a SentencePiece model (an empty file)")
        try:
            sp = spm.SentencePieceProcessor(model_proto=model_proto)
        except RuntimeError as error:  # sentencepiece's C++ errors, e.g. bytes it cannot parse
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise ValueError(f"{source}: not a SentencePiece model ({first})") from None
        # The +1 shift is only collision-free if spm ids 0..2 are exactly its unk/bos/eos.
        if (sp.unk_id(), sp.bos_id(), sp.eos_id()) != (0, 1, 2):
            raise ValueError(
                f"{source}: a SentencePiece model must have unk/bos/eos at ids 0/1/2 (XLM-R "
                f"layout), got {sp.unk_id()}/{sp.bos_id()}/{sp.eos_id()}; retrain with "
                "unk_id=0, bos_id=1, eos_id=2, pad_id=-1 (train_tokenizer does this)"
            )
        self._model_proto = bytes(model_proto)
        self._sp = sp
        self.vocab_size = sp.GetPieceSize() + 2  # + <pad> + <mask>
        self.special = self.layout(self.vocab_size)
        # spm id -> our id, one vectorised gather per encode.
        to_ours = np.arange(1, sp.GetPieceSize() + 1, dtype=np.int32)
        to_ours[[0, 1, 2]] = [self.unk_id, self.bos_id, self.eos_id]
        self._to_ours = to_ours

    def save(self, path: str | os.PathLike) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self._model_proto)

    # Pickled as the model bytes: grain worker processes rebuild the processor on their side.
    def __getstate__(self) -> dict[str, bytes]:
        return {"model_proto": self._model_proto}

    def __setstate__(self, state: dict[str, bytes]) -> None:
        self._init(state["model_proto"])

    def encode(self, text: str) -> np.ndarray:
        return self._to_ours[np.asarray(self._sp.EncodeAsIds(text), dtype=np.int64)]

    def encode_batch(
        self, texts: Sequence[str], *, num_threads: int | None = None
    ) -> list[np.ndarray]:
        kwargs = {} if num_threads is None else {"num_threads": num_threads}
        batch = self._sp.Encode(list(texts), out_type=int, **kwargs)
        return [self._to_ours[np.asarray(ids, dtype=np.int64)] for ids in batch]

    def decode(self, ids: Sequence[int]) -> str:
        return self._sp.DecodeIds((self._valid(ids) - 1).tolist())

    def id_to_piece(self, i: int) -> str:
        self._check_id(i)
        s = self.special
        specials = {s.bos: "<s>", s.pad: "<pad>", s.eos: "</s>", s.unk: "<unk>", s.mask: "<mask>"}
        return specials.get(i) or self._sp.IdToPiece(i - 1)


# Where a tokenizer.json's special tokens are named, by role: the keys of the files beside it
# (`HFTokenizer.SIDE_FILES`), the first one set wins (an encoder's units are [CLS] x [SEP], so
# CLS and SEP come before BOS and EOS); failing those, its added special tokens spelled so.
ROLE_KEYS = {
    "bos": ("cls_token", "bos_token"),
    "pad": ("pad_token",),
    "eos": ("sep_token", "eos_token"),
    "unk": ("unk_token",),
    "mask": ("mask_token",),
}
ROLE_SPELLINGS = {
    "bos": ("[CLS]", "<s>", "<cls>", "<bos>"),
    "pad": ("[PAD]", "<pad>"),
    "eos": ("[SEP]", "</s>", "<sep>", "<eos>"),
    "unk": ("[UNK]", "<unk>"),
    "mask": ("[MASK]", "<mask>"),
}


class HFTokenizer(Tokenizer):
    """A Hugging Face ``tokenizer.json`` (``tokenizers``), its special ids found by role.

    A role's token is the first of: the keys of ``tokenizer_config.json``, then of
    ``special_tokens_map.json``, beside it (``ROLE_KEYS``); the tokenizer's own structure: its
    post-processor's first and last special token (CLS, SEP), its model's unknown token, its
    padding's token; an added special token spelled as the role is (``ROLE_SPELLINGS``). A
    role none of them names is an error naming the file. ``save`` writes ``tokenizer.json`` as
    read and a ``tokenizer_config.json`` naming every role, so a copy resolves the same ids.
    """

    FILE = "tokenizer.json"
    CONFIG = "tokenizer_config.json"
    SIDE_FILES = (CONFIG, "special_tokens_map.json")

    def __init__(
        self, text: str, configs: Mapping[str, Mapping] | None = None, source: str = FILE
    ) -> None:
        """``text``: a ``tokenizer.json``; ``configs``: the side files' contents by name;
        ``source``: the file's path, for errors."""
        self._text = text
        data = _json(text, source)
        try:
            self._backend = tokenizers.Tokenizer.from_str(text)
        except Exception as error:  # tokenizers raises a bare Exception for what it cannot read
            raise ValueError(
                f"{source}: JSON, but not a Hugging Face tokenizer.json ({error})"
            ) from None
        self._tokens = _role_tokens(data, configs or {}, source)
        ids = {}
        for role, token in self._tokens.items():
            ids[role] = self._backend.token_to_id(token)
            if ids[role] is None:
                raise ValueError(f"{source}: its {role} token {token!r} is not in its vocabulary")
        added = self._backend.get_added_tokens_decoder()
        others = sorted(i for i, t in added.items() if t.special and i not in ids.values())
        self.special = SpecialIds(**ids, others=tuple(others))
        self.vocab_size = max(self._backend.get_vocab(with_added_tokens=True).values()) + 1

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> HFTokenizer:
        """``path`` (a ``tokenizer.json``) with the side files beside it."""
        path = Path(path)
        configs = {
            name: _json(_text(path.parent / name), path.parent / name)
            for name in cls.SIDE_FILES
            if (path.parent / name).is_file()
        }
        return cls(_text(path), configs, str(path))

    def _config(self) -> dict[str, str]:
        """``tokenizer_config.json`` naming every role, under each of its keys."""
        config = {"tokenizer_class": "PreTrainedTokenizerFast"}
        for role, keys in ROLE_KEYS.items():
            config.update(dict.fromkeys(keys, self._tokens[role]))
        return config

    def save(self, path: str | os.PathLike) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self._text.encode("utf-8"))
        config = json.dumps(self._config(), indent=2, ensure_ascii=False) + "\n"
        (path.parent / self.CONFIG).write_text(config, encoding="utf-8")

    # Pickled as text: grain worker processes rebuild the tokenizer on their side.
    def __getstate__(self) -> dict:
        return {"text": self._text, "config": self._config()}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["text"], {self.CONFIG: state["config"]})

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._backend.encode(text, add_special_tokens=False).ids, np.int32)

    def encode_batch(
        self, texts: Sequence[str], *, num_threads: int | None = None
    ) -> list[np.ndarray]:
        # tokenizers' thread pool is the process's and takes no cap per call: a cap encodes
        # on this thread alone.
        if num_threads is not None:
            return [self.encode(text) for text in texts]
        batch = self._backend.encode_batch(list(texts), add_special_tokens=False)
        return [np.asarray(encoding.ids, np.int32) for encoding in batch]

    def decode(self, ids: Sequence[int]) -> str:
        return self._backend.decode(self._valid(ids).tolist(), skip_special_tokens=True)

    def id_to_piece(self, i: int) -> str:
        self._check_id(i)
        return self._backend.id_to_token(i) or ""

    def tokens_text(self, ids: Sequence[int]) -> str:
        decoder = self._backend.decoder
        if not isinstance(decoder, tokenizers.decoders.WordPiece) or not decoder.cleanup:
            return self.decode(ids)
        tokens = [self.id_to_piece(i) for i in self._valid(ids).tolist()]
        return tokenizers.decoders.WordPiece(decoder.prefix, cleanup=False).decode(tokens)


FILES = (SentencePieceTokenizer.FILE, HFTokenizer.FILE)  # one in a workdir, folder or store


def tokenizer_file(folder: str | os.PathLike) -> Path | None:
    """The tokenizer a workdir, checkpoint folder or store keeps (either kind's ``FILE``), or
    None; a folder with both is refused, as which one its ids come from would be a guess."""
    found = [Path(folder) / name for name in FILES if (Path(folder) / name).is_file()]
    if len(found) > 1:
        raise ValueError(
            f"{folder} holds both {found[0].name} and {found[1].name}: keep the one its ids "
            "come from"
        )
    return found[0] if found else None


def _text(path: Path) -> str:
    """The UTF-8 text of a JSON file, read as bytes (not text mode: a copy must keep the
    file's bytes, a store's fingerprint); other bytes are an error naming it."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not JSON (not UTF-8 text: {error})") from None


def _json(text: str, source: str | os.PathLike) -> object:
    """``text`` parsed; text that is no JSON is an error naming ``source``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{source}: not JSON ({error})") from None


def _role_tokens(data: Mapping, configs: Mapping[str, Mapping], source: str) -> dict[str, str]:
    """Each role's token in a parsed ``tokenizer.json`` (see ``HFTokenizer``)."""
    own = _structural_tokens(data)
    special = {t["content"] for t in data.get("added_tokens", []) if t.get("special")}
    tokens = {}
    for role, keys in ROLE_KEYS.items():
        named = [
            _content(configs[name].get(key))
            for name in HFTokenizer.SIDE_FILES
            if name in configs
            for key in keys
        ]
        spelled = [t for t in ROLE_SPELLINGS[role] if t in special]
        found = next((t for t in [*named, own.get(role), *spelled] if t), None)
        if found is None:
            raise ValueError(
                f"{source}: no {role} token ({' or '.join(keys)}): name it in a "
                f'{HFTokenizer.CONFIG} beside it, e.g. {{"{keys[0]}": "..."}}'
            )
        tokens[role] = found
    return tokens


def _content(value) -> str | None:
    """A side file's token: a string, or an ``AddedToken`` as a dict; None if unset."""
    return value.get("content") if isinstance(value, Mapping) else value


def _structural_tokens(data: Mapping) -> dict[str, str]:
    """The roles a ``tokenizer.json`` gives by its structure: CLS and SEP from its
    post-processor, the model's unknown token, the padding's token."""
    tokens = {}
    model = data.get("model") or {}
    if isinstance(model.get("unk_token"), str):
        tokens["unk"] = model["unk_token"]
    elif isinstance(model.get("unk_id"), int):  # Unigram: an index into its vocabulary
        tokens["unk"] = model["vocab"][model["unk_id"]][0]
    if (data.get("padding") or {}).get("pad_token"):
        tokens["pad"] = data["padding"]["pad_token"]
    processors = [data.get("post_processor") or {}]
    while processors:
        processor = processors.pop()
        processors.extend(processor.get("processors") or [])  # a Sequence of processors
        if "cls" in processor and "sep" in processor:  # BertProcessing, RobertaProcessing
            tokens.update(bos=processor["cls"][0], eos=processor["sep"][0])
        template = processor.get("single") or []  # TemplateProcessing: e.g. [CLS] $A [SEP]
        named = processor.get("special_tokens") or {}
        for role, piece in (("bos", template[:1]), ("eos", template[-1:])):
            if piece and "SpecialToken" in piece[0]:
                name = piece[0]["SpecialToken"]["id"]
                tokens[role] = (named.get(name) or {}).get("tokens", [name])[0]
    return tokens


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
) -> SentencePieceTokenizer:
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
    tokenizer = SentencePieceTokenizer(writer.getvalue())
    tokenizer.save(model_path)
    return tokenizer


class VocabularySizeError(ValueError):
    """The training sample cannot give a SentencePiece model of the size asked for.

    ``str()`` names the way out in `train_tokenizer`'s arguments; ``remedy(names)`` in a
    caller's own spelling of them (config keys, command-line flags), so that what a message
    suggests always exists where the user reads it."""

    def __init__(self, vocab_size: int, bound: int, too_large: bool, sample: str) -> None:
        self.vocab_size, self.bound, self.too_large, self.sample = (
            vocab_size,
            bound,
            too_large,
            sample,
        )
        super().__init__(self.remedy(_ARGUMENTS))

    def remedy(self, names: Mapping[str, str]) -> str:
        """The message with ``names[setting]`` for each of ``vocab_size``,
        ``sentences_per_language`` and ``character_coverage``."""
        size = names["vocab_size"]
        if self.too_large:
            return (
                f"vocab_size={self.vocab_size} is too large for {self.sample}: it supports at "
                f"most vocab_size={self.bound}. Lower {size}, or give it more text (more "
                f"sentences, or a larger {names['sentences_per_language']})."
            )
        return (
            f"vocab_size={self.vocab_size} is too small for {self.sample}: its characters alone "
            f"need vocab_size >= {self.bound}. Raise {size}, or lower "
            f"{names['character_coverage']} so that rare characters become <unk>."
        )


_ARGUMENTS = {k: k for k in ("vocab_size", "sentences_per_language", "character_coverage")}


def _vocab_size_error(
    error: RuntimeError, vocab_size: int, num_sentences: int, num_languages: int
) -> VocabularySizeError | None:
    """SentencePiece's vocabulary-size failures, restated in our ids."""
    sample = f"the tokenizer training sample ({num_sentences} sentences, {num_languages} languages)"
    if too_high := re.search(r"Vocabulary size too high.*value <= (\d+)", str(error)):
        return VocabularySizeError(vocab_size, int(too_high.group(1)) + 2, True, sample)
    if too_low := re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(error)):
        return VocabularySizeError(vocab_size, int(too_low.group(1)) + 2, False, sample)
    return None
