"""The run's corpus, as its config names it: folders, TFDS datasets, a prepared store or the
built-in demo corpus, and the share of it held out for evaluation. Its tokenizer, which the same
settings name, is `run_tokenizer`'s."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable, Mapping, Sequence

from xlpretrain.core.errors import ConfigError
from xlpretrain.data import demo_corpus
from xlpretrain.data.corpora import store as store_lib
from xlpretrain.data.corpora.folders import MonolingualSource, ParallelSource
from xlpretrain.data.corpora.held_out import (
    DEFAULT_FRACTION,
    LineSplit,
    MonolingualPart,
    ParallelPart,
)
from xlpretrain.data.corpora.protocols import MonolingualCorpus, ParallelCorpus
from xlpretrain.data.corpora.sources import format_stats
from xlpretrain.data.pretraining.pipeline import Corpus, language_vocabulary
from xlpretrain.data.pretraining.streams import MONO, PARALLEL

log = logging.getLogger("xlpretrain")


@dataclasses.dataclass(frozen=True)
class TfdsSettings:
    """`data.mono_tfds` / `data.parallel_tfds`: a TFDS dataset read by random access."""

    name: str = ""
    split: str = "train"
    data_dir: str = ""
    text_key: str = "text"  # monolingual: the text feature
    language_key: str = "language"  # monolingual: a string feature; or set `language`
    language: str = ""  # the language of a single-language dataset
    pair: str = ""  # parallel: "l1-l2", every record is this pair
    language_keys: tuple[str, ...] = ()  # parallel: or two string features naming its pair
    source_key: str = ""
    target_key: str = ""


@dataclasses.dataclass(frozen=True)
class CorpusSettings:
    """Where a run's text, tokenizer and held-out data come from, as its plan resolves them
    (`data.*` sources, `tokenizer.*`, `init.checkpoint`, `eval.*` held-out data)."""

    store: str = ""
    mono_dir: str = ""
    parallel_dir: str = ""
    mono_tfds: TfdsSettings = TfdsSettings()
    parallel_tfds: TfdsSettings = TfdsSettings()
    strict: bool = False
    max_line_bytes: int = 1_000_000
    demo_languages: int = 40
    tokenizer_path: str = ""
    sentences_per_language: int = 2000
    character_coverage: float = 0.9995
    init_checkpoint: str = ""
    seed: int = 0  # `train.seed`: the tokenizer's sample and the held-out lines
    evaluates: bool = False  # `eval.every_steps` > 0
    eval_mono_dir: str = ""
    eval_parallel_dir: str = ""
    held_out_fraction: float = DEFAULT_FRACTION

    @property
    def uses_demo_corpus(self) -> bool:
        """No corpus is configured, so the run trains on the built-in demo corpus."""
        return not (
            self.store
            or self.mono_dir
            or self.parallel_dir
            or self.mono_tfds.name
            or self.parallel_tfds.name
        )


def demo_folders(settings: CorpusSettings) -> demo_corpus.DemoFolders:
    """The demo corpus of `data.demo_languages` languages, built on first use (cached)."""
    return demo_corpus.build_demo_corpus(
        demo_corpus.default_demo_cache_dir(), num_languages=settings.demo_languages
    )


def held_out_folders(settings: CorpusSettings) -> tuple[str, str]:
    """`eval.mono_dir` and `eval.parallel_dir`; where one is empty and the run trains on the
    demo corpus, the demo's held-out folder instead."""
    mono, parallel = settings.eval_mono_dir, settings.eval_parallel_dir
    if settings.uses_demo_corpus and not (mono and parallel):
        folders = demo_folders(settings)
        mono, parallel = (
            mono or str(folders.held_out_mono),
            parallel or str(folders.held_out_parallel),
        )
    return mono, parallel


def held_out_splits(settings: CorpusSettings, kinds: Iterable[str]) -> dict[str, LineSplit]:
    """The corpus kinds among `kinds` (those the run reads) of which evaluation holds out
    `eval.held_out_fraction` of the training lines: those it evaluates with no held-out folder
    of their own."""
    if not settings.evaluates or settings.uses_demo_corpus:
        return {}
    split = LineSplit(settings.held_out_fraction, settings.seed)
    folders = {MONO: settings.eval_mono_dir, PARALLEL: settings.eval_parallel_dir}
    return {kind: split for kind in sorted(kinds) if not folders[kind]}


def held_out_shares(settings: CorpusSettings, kinds: Iterable[str]) -> dict[str, float]:
    """The share of each kind of training data in `kinds` that evaluation holds out (0: none),
    as the resume guard compares them: `eval.*` keys are resume-neutral, but together they
    decide which lines a run trains on."""
    splits = held_out_splits(settings, kinds)
    return {
        f"share of the {kind} training data held out (eval.*)": (
            splits[kind].fraction if kind in splits else 0.0
        )
        for kind in sorted(kinds)
    }


def split_off_held_out(corpus: Corpus, splits: Mapping[str, LineSplit]) -> tuple[Corpus, Corpus]:
    """(the lines training reads, the held-out lines) of `corpus`: each kind in `splits` is cut
    in two by its split, the others are all training's. Both keep the corpus's language ids."""
    parts = {}
    for kind, source, part in (
        (MONO, corpus.mono, MonolingualPart),
        (PARALLEL, corpus.parallel, ParallelPart),
    ):
        if kind in splits and source is not None:
            train, held = part(source, splits[kind], False), part(source, splits[kind], True)
            parts[kind] = (train, held)
            lines = sum(held.num_lines(key) for key in held.stats)
            total = sum(source.num_lines(key) for key in train.stats)
            log.info(
                "%s data: %d of %d lines held out for evaluation (eval.held_out_fraction=%g, "
                "by line, seed %d); %d of %d %s evaluated",
                kind,
                lines,
                total,
                splits[kind].fraction,
                splits[kind].seed,
                len(held.stats),
                len(train.stats),
                "languages" if kind == MONO else "pairs",
            )
    training = Corpus(
        parts[MONO][0] if MONO in parts else corpus.mono,
        parts[PARALLEL][0] if PARALLEL in parts else corpus.parallel,
        corpus.languages,
    )
    held_out = Corpus(
        parts[MONO][1] if MONO in parts else None,
        parts[PARALLEL][1] if PARALLEL in parts else None,
        corpus.languages,
    )
    return training, held_out


def configured_folder(key: str, path: str) -> str:
    """`path`, the value of config key `key`, if it is a folder; else an error naming both."""
    if not os.path.isdir(path):
        what = "is a file, not a folder" if os.path.exists(path) else "no such folder"
        raise ConfigError(f"config key '{key}': {what}: {path}")
    return path


def load_corpus(data: CorpusSettings, readers: Mapping[str, Sequence[str]]) -> Corpus:
    """The sources the active objectives need (`readers`: corpus kind → the objectives that
    read it): folders, TFDS datasets, or — when nothing is configured — the demo corpus."""
    if data.store:
        return _load_store(data, readers)
    mono_tfds, parallel_tfds = data.mono_tfds, data.parallel_tfds
    for kind, folder, tfds_name in (
        ("mono", data.mono_dir, mono_tfds.name),
        ("parallel", data.parallel_dir, parallel_tfds.name),
    ):
        if folder and tfds_name:
            raise ConfigError(f"config key 'data.{kind}_tfds.name': set it or data.{kind}_dir")
    mono_dir, parallel_dir = data.mono_dir, data.parallel_dir
    if data.uses_demo_corpus:
        folders = demo_folders(data)
        mono_dir, parallel_dir = str(folders.mono), str(folders.parallel)
        log.info("no corpus configured: using the demo corpus in %s", os.path.dirname(mono_dir))
    options = dict(strict=data.strict, max_line_bytes=data.max_line_bytes)
    mono = parallel = None
    if MONO in readers:
        mono = _source(MONO, mono_tfds, mono_dir, readers[MONO], options)
    if PARALLEL in readers:
        parallel = _source(PARALLEL, parallel_tfds, parallel_dir, readers[PARALLEL], options)
    return Corpus(mono, parallel, language_vocabulary(mono, parallel))


# Per corpus kind: its folder source, and what the folder holds (for the error when none is set).
_FOLDERS = {
    MONO: (MonolingualSource, "monolingual data: set it to a folder of <lang>.txt files"),
    PARALLEL: (ParallelSource, "parallel data: set it to a folder of <l1>-<l2>.tsv files"),
}


def _source(
    kind: str, tfds: TfdsSettings, folder: str, readers: Sequence[str], options: dict
) -> MonolingualCorpus | ParallelCorpus:
    """The `kind` corpus that the objectives `readers` read, logged: the TFDS dataset
    `data.<kind>_tfds`, else the folder `data.<kind>_dir`."""
    folder_source, holds = _FOLDERS[kind]
    if tfds.name:
        source = _tfds_source(kind, tfds, options)
    elif folder:
        source = folder_source.from_dir(configured_folder(f"data.{kind}_dir", folder), **options)
    else:
        raise ConfigError(
            f"config key 'data.{kind}_dir': {', '.join(readers)} read {holds} "
            f"(or data.{kind}_tfds.name)"
        )
    _log_stats(kind, source)
    return source


def _tfds_source(
    kind: str, tfds: TfdsSettings, options: dict
) -> MonolingualCorpus | ParallelCorpus:
    """The TFDS dataset `data.<kind>_tfds`; TFDS is an optional extra, imported only here."""
    from xlpretrain.data.corpora import tfds_source

    common = dict(split=tfds.split, data_dir=tfds.data_dir or None, **options)
    if kind == MONO:
        return tfds_source.TfdsMonolingualSource.from_tfds(
            tfds.name,
            text_key=tfds.text_key,
            language_key=tfds.language_key or None,
            language=tfds.language or None,
            **common,
        )
    return tfds_source.TfdsParallelSource.from_tfds(
        tfds.name,
        pair=tfds.pair or None,
        language_keys=tfds.language_keys or None,
        source_key=tfds.source_key or None,
        target_key=tfds.target_key or None,
        **common,
    )


def _log_stats(kind: str, source) -> None:
    """The data report of a source: a file left out of the corpus is a warning, the rest info."""
    for line in format_stats(source.stats):
        (log.warning if ": no usable lines" in line else log.info)("%s data: %s", kind, line)


def _load_store(data: CorpusSettings, readers: Mapping[str, Sequence[str]]) -> Corpus:
    """The kinds of data the objectives read, from the prepared store `data.store`."""
    others = {
        "mono_dir": data.mono_dir,
        "parallel_dir": data.parallel_dir,
        "mono_tfds.name": data.mono_tfds.name,
        "parallel_tfds.name": data.parallel_tfds.name,
    }
    for key, value in others.items():
        if value:
            raise ConfigError(f"config key 'data.{key}': set it or data.store, not both")
    mono, parallel = store_lib.open_store(data.store, readers)
    for kind, source in ((MONO, mono), (PARALLEL, parallel)):
        if source is not None:
            _log_stats(kind, source)
    log.info("data: the prepared store %s", os.path.abspath(data.store))
    return Corpus(mono, parallel, language_vocabulary(mono, parallel))
