"""Row kinds are declarations: the input pipeline and the benchmark ask a stream's kind and never
branch on which kind it is, so a kind declared anywhere (here, a toy) is built, masked, shaped
and faked for the benchmark with no edit of theirs."""

import ast
import dataclasses
import pathlib

import numpy as np
import pytest

import xlpretrain.objectives  # noqa: F401  (every shipped kind declared, for the scan below)
from tests.tiny import step_batch_builder
from xlpretrain.bench import step as bench
from xlpretrain.data.corpora.folders import MonolingualSource, ParallelSource
from xlpretrain.data.pretraining.batch import SIDE_SOURCE
from xlpretrain.data.pretraining.examples import FIRST_POSITION, RowPacker
from xlpretrain.data.pretraining.pipeline import Corpus
from xlpretrain.data.pretraining.row_kinds import SegmentPairs, Segments
from xlpretrain.data.pretraining.streams import MONO, PARALLEL, RowKind, StreamSpec
from xlpretrain.data.tokenizer import Tokenizer

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "xlpretrain"
# The readers of every stream, whatever its kind: they ask the kind (`spec.kind.method(...)`).
KIND_BLIND = ("data/pretraining/pipeline.py", "bench/step.py")
KINDS_MODULE = "xlpretrain.data.pretraining.row_kinds"


def kind_names() -> set[str]:
    """The names of every declared row kind (the shipped ones and any objective's)."""
    found, todo = set(), [RowKind]
    while todo:
        for kind in todo.pop().__subclasses__():
            found.add(kind.__name__)
            todo.append(kind)
    return found - {"Copies"}  # the toy below


def kind_inspections(source: str) -> list[str]:
    """Where `source` looks at a stream's kind rather than asking it: `.kind` anywhere but as
    the object of a method call (`spec.kind.row(...)`), a row kind's name, an import of the
    shipped kinds."""
    tree = ast.parse(source)
    asked = {
        id(node.func.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    names = kind_names()
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and node.attr == "kind" and id(node) not in asked:
            found.append(f"line {line}: .kind read, not asked")
        elif isinstance(node, ast.Name) and node.id in names:
            found.append(f"line {line}: row kind {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in names:
            found.append(f"line {line}: row kind {node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == KINDS_MODULE:
            found.append(f"line {line}: imports the row kinds")
        elif isinstance(node, ast.Import) and any(a.name == KINDS_MODULE for a in node.names):
            found.append(f"line {line}: imports the row kinds")
    return found


@pytest.mark.parametrize("path", KIND_BLIND)
def test_the_pipeline_and_the_benchmark_never_branch_on_a_row_kind(path):
    found = kind_inspections((PACKAGE / path).read_text())
    assert not found, f"{path} inspects a stream's kind: " + "; ".join(found)


def test_the_scan_sees_a_branch_on_a_kind():
    """What the test above would catch, each a way the closed if/elif could come back."""
    assert kind_inspections("if spec.kind == SEGMENTS:\n    pass")
    assert kind_inspections("if isinstance(stream.kind, SegmentPairs):\n    pass")
    assert kind_inspections("from xlpretrain.data.pretraining.row_kinds import Segments")
    assert kind_inspections("match spec.kind:\n    case _:\n        pass")
    assert not kind_inspections("source, row = spec.kind.bind(name, spec, lines).row(lines)")


def copies_row(source, tokenizer, language, lang_id, rng, *, length, pack, copies):
    """One random line of `language`, `copies` times: `<s> x </s>` as segments of one unit."""
    del pack  # one line a row
    line = source.tokens(language, int(rng.integers(source.num_lines(language))), tokenizer)
    ids = np.concatenate([[tokenizer.bos_id], line[: length // copies - 2], [tokenizer.eos_id]])
    packer = RowPacker(length, tokenizer.pad_id)
    for copy in range(copies):
        positions = FIRST_POSITION + np.arange(len(ids))
        side, lang = np.full(len(ids), SIDE_SOURCE), np.full(len(ids), lang_id)
        packer.add(ids, positions, side, lang, same_pair=copy > 0)
    return packer.row


@dataclasses.dataclass(frozen=True)
class Copies(RowKind):
    """A toy kind, declared outside the data layer with an option of its own."""

    copies: int = 2

    def sources(self) -> frozenset[str]:
        return frozenset({MONO})

    def row(self, lines, stream, rng):
        return MONO, lines.monolingual(copies_row, rng, stream.max_length, copies=self.copies)


def test_a_new_row_kind_is_built_masked_and_benchmarked_without_an_edit(udhr, udhr_tokenizer_path):
    tokenizer = Tokenizer.load(udhr_tokenizer_path)
    mono = MonolingualSource.from_dir(udhr / "mono", languages=["eng", "fra"])
    stream = StreamSpec(Copies(copies=3), {MONO: 0.3}, max_length=48)
    builder = step_batch_builder(Corpus(mono, None, ["eng", "fra"]), tokenizer, {"toy": stream}, 4)
    batch = builder.map(0)["toy"]
    shapes = {name: (v.shape, v.dtype) for name, v in batch.items()}
    assert shapes == {n: (s, np.dtype(d)) for n, (s, d) in stream.batch_shapes(4).items()}
    original = np.where(batch["is_masked"] > 0, batch["labels"], batch["input_ids"])
    for r in range(4):
        copies = [original[r][batch["segment_ids"][r] == s] for s in (1, 2, 3)]
        assert len(copies[0]) > 2 and set(batch["pair_ids"][r][batch["segment_ids"][r] > 0]) == {1}
        for copy in copies[1:]:
            np.testing.assert_array_equal(copy, copies[0])
        real = batch["segment_ids"][r] > 0
        maskable = np.count_nonzero(real & ~np.isin(original[r], tokenizer.special_ids()))
        assert batch["pred_weights"][r].sum() == max(1, round(0.3 * maskable))  # its rate
    synthetic = bench.synthetic_batch(4, stream, tokenizer.vocab_size, np.random.default_rng(0))
    assert {name: (v.shape, v.dtype) for name, v in synthetic.items()} == shapes


def test_a_stream_has_a_mask_rate_for_each_corpus_its_kind_reads():
    with pytest.raises(ValueError, match=r"no mask rate for its rows from \['mono'\]"):
        StreamSpec(Segments(), {PARALLEL: 0.15})
    with pytest.raises(ValueError, match=r"mask rates of \['camlm'\]"):
        StreamSpec(Segments(), {MONO: 0.15, "camlm": 0.15})
    with pytest.raises(TypeError, match="expected a RowKind"):
        StreamSpec("mono", {MONO: 0.15})
    unmasked = StreamSpec(Segments(), {}, max_length=32)  # no rates: nothing masked
    assert not unmasked.masked and unmasked.prediction_slots == 1


def test_a_row_is_masked_at_the_rate_of_the_corpus_it_read(udhr, udhr_tokenizer_path):
    """VECO's mixed rows: a pair of two languages is bilingual, masked at the parallel rate;
    two adjacent lines of one language at the monolingual rate."""
    tokenizer = Tokenizer.load(udhr_tokenizer_path)
    mono = MonolingualSource.from_dir(udhr / "mono", languages=["eng", "fra"])
    parallel = ParallelSource.from_dir(udhr / "parallel", pairs=[("eng", "fra")])
    rates = {PARALLEL: 0.1, MONO: 0.5}
    stream = StreamSpec(SegmentPairs(mono_fraction=0.5, max_units=1), rates, max_length=64)
    corpus = Corpus(mono, parallel, ["eng", "fra"])
    batch = step_batch_builder(corpus, tokenizer, {"veco": stream}, 16).map(0)["veco"]
    seen = set()
    for r in range(16):
        real = batch["segment_ids"][r] > 0
        source = PARALLEL if len(set(batch["lang_ids"][r][real])) == 2 else MONO
        original = np.where(batch["is_masked"][r] > 0, batch["labels"][r], batch["input_ids"][r])
        maskable = np.count_nonzero(real & ~np.isin(original, tokenizer.special_ids()))
        assert batch["pred_weights"][r].sum() == max(1, round(rates[source] * maskable)), r
        seen.add(source)
    assert seen == {MONO, PARALLEL}
