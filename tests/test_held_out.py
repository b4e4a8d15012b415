"""Held-out data by default: with no held-out folder, evaluation holds out a fixed, seeded share
of the training corpus by line. Every line is in exactly one part; training never reads a
held-out line; evaluation reads nothing else; the same holds for text folders and prepared
stores; and a resumed run cannot silently move lines between the parts."""

import shutil

import jax
import numpy as np
import pytest

from tests.tiny import prepare_store, udhr_subset
from xlpretrain.data.corpora.folders import MonolingualSource, ParallelSource
from xlpretrain.data.corpora.held_out import BLOCK, LineSplit, MonolingualPart, ParallelPart
from xlpretrain.data.corpora.store import StoreMonolingual, StoreParallel
from xlpretrain.training import evaluation
from xlpretrain.training import trainer as trainer_lib
from xlpretrain.training.config import ConfigError
from xlpretrain.training.plan import resolve

LANGUAGES = ("eng", "fra", "deu_1996", "rus")
FRACTION = 0.2  # UDHR files have 40-50 lines: about ten held out of each
BOTH, MMLM = {"mmlm": 1.0, "tlm": 0.5}, {"mmlm": 1.0}


class Lines:
    """An in-memory corpus of `sizes[key]` lines per key, line i of key k reading "k i"."""

    def __init__(self, sizes):
        self.sizes = sizes
        self.stats = {key: None for key in sizes}

    @property
    def languages(self):
        return list(self.sizes)

    @property
    def pairs(self):
        return list(self.sizes)

    def num_lines(self, key):
        return self.sizes[key]

    def line(self, key, index):
        assert 0 <= index < self.sizes[key], (key, index)
        return f"{key} {index}"


def is_held_out(split: LineSplit, key, num_lines: int, index: int) -> bool:
    """Whether `split` holds out line `index` of `key` (of `num_lines`): its offset in its block
    is one of the held-out ones."""
    return index % BLOCK in split.offsets(key, num_lines)[0]


def lines_of(part, key) -> list[int]:
    return [int(part.line(key, i).split()[-1]) for i in range(part.num_lines(key))]


@pytest.mark.parametrize("size", [2, 7, 999, BLOCK, BLOCK + 1, 2 * BLOCK + 480])
def test_every_line_is_in_exactly_one_part(size):
    source = Lines({"xx": size})
    split = LineSplit(0.05, seed=3)
    train, held = MonolingualPart(source, split, False), MonolingualPart(source, split, True)
    kept = lines_of(train, "xx")
    held_lines = lines_of(held, "xx") if "xx" in held.languages else []
    assert sorted(kept + held_lines) == list(range(size))
    assert kept == sorted(kept) and held_lines == sorted(held_lines)
    assert all(is_held_out(split, "xx", size, i) for i in held_lines)
    assert not any(is_held_out(split, "xx", size, i) for i in kept)
    # A whole block holds out exactly its share.
    if size >= BLOCK:
        assert sum(i < BLOCK for i in held_lines) == 50


def test_the_split_is_fixed_by_its_seed_and_differs_by_key():
    source = Lines({"aa": 3000, "bb": 3000})
    first = MonolingualPart(source, LineSplit(0.01, seed=0), True)
    again = MonolingualPart(source, LineSplit(0.01, seed=0), True)
    other = MonolingualPart(source, LineSplit(0.01, seed=1), True)
    assert lines_of(first, "aa") == lines_of(again, "aa")
    assert lines_of(first, "aa") != lines_of(other, "aa")
    assert [i % BLOCK for i in lines_of(first, "aa")] != [i % BLOCK for i in lines_of(first, "bb")]


def test_a_key_too_small_to_spare_a_line_keeps_it_for_training():
    """A one-line pair file whose line falls on a held-out offset is not emptied: it trains
    and is not evaluated."""
    split = LineSplit(0.5, seed=0)
    sizes = {(f"l{i}", "en"): 1 for i in range(20)}
    train = ParallelPart(Lines(sizes), split, False)
    held = ParallelPart(Lines(sizes), split, True)
    assert train.pairs == list(sizes)
    assert all(train.num_lines(pair) == 1 for pair in sizes)
    assert held.pairs == []
    # The fallback was needed: in a larger file, the first line of some of these is held out.
    assert any(is_held_out(split, pair, BLOCK, 0) for pair in sizes)


@pytest.mark.parametrize("fraction", [0.0, 0.0333, 0.6])
def test_the_held_out_share_is_a_thousandth_multiple_up_to_a_half(fraction):
    from tests.tiny import run_config

    with pytest.raises(ConfigError, match="eval.held_out_fraction"):
        run_config(eval__every_steps=4, eval__held_out_fraction=fraction)


@pytest.fixture(scope="module")
def corpus(udhr, tmp_path_factory):
    return udhr_subset(udhr, tmp_path_factory.mktemp("corpus"), LANGUAGES)


@pytest.fixture(scope="module")
def store(corpus, udhr_tokenizer_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("store") / "store"
    prepare_store(corpus, out, udhr_tokenizer_path)
    return out


class Reads:
    """Records which line of which key every source of a kind is asked for."""

    def __init__(self, monkeypatch):
        self.lines: set[tuple] = set()
        for cls, method in (
            (MonolingualSource, "line"),
            (ParallelSource, "line"),
            (StoreMonolingual, "tokens"),
            (StoreParallel, "token_pair"),
        ):
            monkeypatch.setattr(cls, method, self._recording(getattr(cls, method)))

    def _recording(self, read):
        def recorded(source, key, index, *args):
            self.lines.add((str(source.path), key if isinstance(key, str) else tuple(key), index))
            return read(source, key, index, *args)

        return recorded

    def take(self) -> set[tuple]:
        taken, self.lines = self.lines, set()
        return taken


def no_unigram(builder, steps, vocab_size, tokens=0):
    """The unigram baseline's count of training batches, left out so that every line the
    evaluator's construction reads is one it evaluates."""
    return np.zeros(vocab_size)


def build_reading(cfg, workdir, monkeypatch):
    """(the run of `cfg` built in `workdir`, the recorder of what its sources read, the lines
    its construction read): with the unigram baseline's training batches left out, every one
    of those is a line the evaluator reads."""
    monkeypatch.setattr(evaluation, "training_unigram", no_unigram)
    reads = Reads(monkeypatch)
    trainer = trainer_lib.build(resolve(cfg), str(workdir), jax.devices()[:1])
    trainer.checkpointer.close()
    return trainer, reads, reads.take()


@pytest.mark.parametrize("backend", ["folders", "store"])
def test_training_never_reads_a_held_out_line_and_evaluation_reads_only_those(
    backend, corpus, store, udhr_run_config, tmp_path, monkeypatch
):
    cfg = udhr_run_config(eval__every_steps=4, eval__held_out_fraction=FRACTION)
    cfg.eval.retrieval_lines = 5
    if backend == "store":
        cfg.data.update(mono_dir="", parallel_dir="", store=str(store))
        cfg.tokenizer.path = ""
    else:
        cfg.data.update(mono_dir=str(corpus / "mono"), parallel_dir=str(corpus / "parallel"))
    trainer, reads, evaluated = build_reading(cfg, tmp_path / "run", monkeypatch)
    for step in range(16):
        trainer.builder.map(step)
    trained = reads.take()

    parts, split = trainer.builder.corpus, LineSplit(FRACTION, cfg.train.seed)

    def held_out(read) -> bool:
        _, key, index = read
        source = parts.mono.source if isinstance(key, str) else parts.parallel.source
        return is_held_out(split, key, source.num_lines(key), index)

    assert trained and not any(held_out(r) for r in trained)
    assert evaluated and all(held_out(r) for r in evaluated)
    # Every language and pair is evaluated, and retrieval embeds held-out pairs too.
    assert {key for _, key, _ in evaluated} == {*LANGUAGES, *parts.parallel.pairs}
    assert trainer.evaluator.retrieval.pairs == parts.parallel.pairs


def test_named_held_out_folders_are_all_that_evaluation_reads(
    corpus, udhr, udhr_run_config, tmp_path, monkeypatch
):
    """The other source of held-out data: folders of one's own, read alone, and nothing is
    held out of training."""
    train, elsewhere = tmp_path / "train", tmp_path / "held_out"
    shutil.copytree(corpus, train)
    for kind, name in (("mono", "spa.txt"), ("parallel", "eng-spa.tsv")):
        (elsewhere / kind).mkdir(parents=True)
        shutil.copy(udhr / kind / name, elsewhere / kind)
        shutil.copy(udhr / kind / name, train / kind)  # the run knows the language
    cfg = udhr_run_config(eval__every_steps=4)
    cfg.data.update(mono_dir=str(train / "mono"), parallel_dir=str(train / "parallel"))
    cfg.eval.update(mono_dir=str(elsewhere / "mono"), parallel_dir=str(elsewhere / "parallel"))
    trainer, _, evaluated = build_reading(cfg, tmp_path / "run", monkeypatch)
    assert evaluated and all(path.startswith(str(elsewhere)) for path, _, _ in evaluated)
    assert trainer.builder.corpus.mono.num_lines("spa") == 50  # nothing held out of training


def test_a_corpus_too_small_to_hold_out_a_line_says_which_key_to_set(
    udhr_run_config, udhr, tmp_path
):
    for kind in ("mono", "parallel"):
        (tmp_path / kind).mkdir()
    (tmp_path / "mono" / "eng.txt").write_text("one line only\n")
    (tmp_path / "parallel" / "eng-fra.tsv").write_text("a\tb\n")
    cfg = udhr_run_config(eval__every_steps=4, objectives={"mmlm": 1.0})
    cfg.data.update(mono_dir=str(tmp_path / "mono"), parallel_dir="")
    with pytest.raises(ConfigError, match="eval.held_out_fraction.*holds out no line"):
        trainer_lib.build(resolve(cfg), str(tmp_path / "run"), jax.devices()[:1])


@pytest.mark.parametrize(
    "change, objectives, refused",
    [
        ({"every_steps": 0}, BOTH, True),  # the held-out lines go back into training
        ({"held_out_fraction": 0.1}, BOTH, True),
        ({"mono_dir": "/held/mono", "parallel_dir": "/held/pairs"}, BOTH, True),
        ({"batches": 9, "every_steps": 50, "retrieval_lines": 3}, BOTH, False),
        # A run that reads no parallel data holds none out: naming a parallel folder moves no
        # training line; turning evaluation off still returns the mono lines to training.
        ({"parallel_dir": "/held/pairs"}, MMLM, False),
        ({"every_steps": 0}, MMLM, True),
    ],
)
def test_a_resumed_run_cannot_move_lines_between_training_and_evaluation(
    change, objectives, refused, udhr_run_config, tmp_path
):
    saved = udhr_run_config(eval__every_steps=4, objectives=objectives)
    (tmp_path / "config.json").write_text(saved.to_json_best_effort())
    resumed = udhr_run_config(eval__every_steps=4, objectives=objectives)
    resumed.eval.update(change)

    def resume():
        trainer_lib.check_resume(resolve(resumed), str(tmp_path), 4)

    if refused:
        with pytest.raises(ConfigError, match="held out"):
            resume()
    else:
        resume()
