"""The run's tokenizer, as its config names it: the configured one (a SentencePiece model or a
`tokenizer.json`), the workdir's own, the store's, a checkpoint's, or a SentencePiece model
trained on a balanced sample of the corpus. Kept apart from loading the corpus (`corpus`), which
the same settings name: which ids a run trains on is its own decision, with its own errors."""

from __future__ import annotations

import logging
import os

import jax
from jax.experimental import multihost_utils

from xlpretrain.core.errors import ConfigError
from xlpretrain.data.corpora import store as store_lib
from xlpretrain.data.corpora.corpus import CorpusSettings
from xlpretrain.data.pretraining.pipeline import Corpus
from xlpretrain.data.tokenizer import (
    FILES,
    SentencePieceTokenizer,
    Tokenizer,
    VocabularySizeError,
    tokenizer_file,
    train_tokenizer,
)

log = logging.getLogger("xlpretrain")


def _existing_tokenizer(settings: CorpusSettings, workdir: str | None) -> tuple[str, str]:
    """(what names it, its path) of the tokenizer a run starting now uses: the
    `tokenizer.path`, the workdir's own (a resumed run's), the store's, the `init.checkpoint`'s
    (its ids are the model's); ("", "") when the run trains one. `workdir` None: a program with
    no workdir (`bench`, `aot`)."""
    if settings.tokenizer_path:
        return "tokenizer.path", settings.tokenizer_path
    if workdir is not None and (own := _kept(workdir, "the workdir")):
        return "the workdir", own
    if settings.store:
        return "data.store", _kept(settings.store, "config key 'data.store'") or settings.store
    checkpoint = settings.init_checkpoint
    pretrained = (
        _kept(checkpoint, "config key 'init.checkpoint'") if os.path.isdir(checkpoint) else ""
    )
    return ("init.checkpoint", pretrained) if pretrained else ("", "")


def _kept(folder: str, key: str) -> str:
    """The tokenizer `folder` keeps (`tokenizer_file`), or ""."""
    try:
        found = tokenizer_file(folder)
    except ValueError as error:
        raise ConfigError(f"{key}: {error}") from None
    return str(found) if found else ""


def _load(key: str, path: str) -> Tokenizer:
    if os.path.isdir(path):  # a store that keeps no tokenizer
        raise ConfigError(f"config key '{key}': {path} has no {' or '.join(FILES)}")
    if not os.path.isfile(path):
        raise ConfigError(f"config key '{key}': no file {path}")
    try:
        return Tokenizer.load(path)
    except ValueError as error:  # a file that is no tokenizer of ours, e.g. a role it lacks
        raise ConfigError(f"config key '{key}': {error}") from None


def tokenizer_vocab_size(settings: CorpusSettings, workdir: str | None) -> int:
    """The size of the tokenizer a run with `model.vocab_size` 0 uses, so that a store or a
    trained SentencePiece model sets the model's vocabulary (`load_tokenizer` checks that a
    size given matches). `workdir` None: a program that sizes a model without one (`bench`,
    `aot`)."""
    key, path = _existing_tokenizer(settings, workdir)
    if not path:
        checkpoint = settings.init_checkpoint
        has_none = f" ({checkpoint} has no {' or '.join(FILES)})" * bool(checkpoint)
        raise ConfigError(
            "config key 'model.vocab_size': 0 takes the size of the run's tokenizer, but the run "
            f"trains one (no tokenizer.path or data.store{has_none}): set the size to "
            "train, e.g. --config.model.vocab_size=8002"
        )
    size = _load(key, path).vocab_size
    log.info("model.vocab_size: %d, the size of the tokenizer %s", size, path)
    return size


def load_tokenizer(
    settings: CorpusSettings, workdir: str, corpus: Corpus, vocab_size: int
) -> Tokenizer:
    """The run's tokenizer (`_existing_tokenizer`, kept in the workdir), or a new one of
    `vocab_size` ids (`model.vocab_size`) trained on a balanced sample of `corpus` into the
    workdir."""
    key, path = _existing_tokenizer(settings, workdir)
    if path:
        tokenizer = _load(key, path)
        if settings.store and key != "data.store":  # the store's ids are the run's
            store_lib.check_tokenizer(settings.store, path)
        if jax.process_index() == 0 and not _kept(workdir, "the workdir"):
            tokenizer.save(os.path.join(workdir, tokenizer.FILE))
    else:
        path = own = os.path.join(workdir, SentencePieceTokenizer.FILE)
        if jax.process_index() == 0:
            log.info("training a %d-id SentencePiece model on the corpus", vocab_size)
            per_language = settings.sentences_per_language
            try:
                train_tokenizer(
                    _tokenizer_sample(corpus, per_language),
                    own,
                    vocab_size,
                    sentences_per_language=per_language,
                    seed=settings.seed,
                    character_coverage=settings.character_coverage,
                )
            except VocabularySizeError as error:
                raise ConfigError(
                    f"config key 'model.vocab_size': {error.remedy(_CONFIG_KEYS)}"
                ) from None
        multihost_utils.sync_global_devices("tokenizer trained")
        tokenizer = Tokenizer.load(own)
    if tokenizer.vocab_size != vocab_size:
        raise ConfigError(
            f"config key 'model.vocab_size': {vocab_size}, but the tokenizer {path} "
            f"has {tokenizer.vocab_size} ids: set --config.model.vocab_size="
            f"{tokenizer.vocab_size} (or 0, which takes the tokenizer's size)"
        )
    return tokenizer


# How a run's config spells the tokenizer's settings, for the remedies errors suggest.
_CONFIG_KEYS = {
    "vocab_size": "--config.model.vocab_size",
    "sentences_per_language": "--config.tokenizer.sentences_per_language",
    "character_coverage": "--config.tokenizer.character_coverage",
}


def _tokenizer_sample(corpus: Corpus, per_language: int) -> dict[str, list[str]]:
    texts: dict[str, list[str]] = {}
    if corpus.mono is not None:
        for lang in corpus.mono.languages:
            n = min(corpus.mono.num_lines(lang), per_language)
            texts.setdefault(lang, []).extend(corpus.mono.line(lang, i) for i in range(n))
    if corpus.parallel is not None:
        for pair in corpus.parallel.pairs:
            n = min(corpus.parallel.num_lines(pair), per_language)
            for i in range(n):
                for lang, text in zip(pair, corpus.parallel.line(pair, i), strict=True):
                    texts.setdefault(lang, []).append(text)
    return texts
