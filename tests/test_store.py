"""The prepared store (`python -m xlpretrain.data.prepare`, `data.store`): rows built from it
are the rows built from the text folders it was prepared from; its bytes do not depend on how
the work was split; a re-run finishes a half-written store; a store that cannot be used is one
clear error naming the file."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests.tiny import prepare_store, run_config, step_batch_builder, udhr_subset
from xlpretrain.data import prepare as prepare_lib
from xlpretrain.data.corpora import store as store_lib
from xlpretrain.data.corpora.folders import MonolingualSource, ParallelSource
from xlpretrain.data.corpora.sources import DataError
from xlpretrain.data.prepare import __main__ as prepare_cli
from xlpretrain.data.pretraining.pipeline import Corpus, language_vocabulary
from xlpretrain.data.pretraining.row_kinds import SegmentPairs, Segments, TranslationPairs
from xlpretrain.data.pretraining.streams import MONO, PARALLEL, StreamSpec
from xlpretrain.data.tokenizer import Tokenizer
from xlpretrain.training import trainer as trainer_lib
from xlpretrain.training.metrics import read_metrics
from xlpretrain.training.plan import resolve

LANGUAGES = ("eng", "deu_1996", "fra", "rus", "cmn_hans", "arb")
SHARD_MB = 4 / 1024  # about 4 KB of input per shard: several shards per file
STREAMS = {
    "mmlm": StreamSpec(Segments(), {MONO: 0.15}),
    "tlm": StreamSpec(TranslationPairs(), {PARALLEL: 0.25}),
    "veco": StreamSpec(SegmentPairs(), {PARALLEL: 0.15}),
    "veco_mono": StreamSpec(SegmentPairs(mono_fraction=1.0), {MONO: 0.15}),
}


@pytest.fixture(scope="module")
def folders(udhr, tmp_path_factory) -> pathlib.Path:
    """Six UDHR languages and their English pairs, with bad lines of every kind in one file."""
    root = udhr_subset(udhr, tmp_path_factory.mktemp("corpus"), LANGUAGES)
    with open(root / "mono" / "fra.txt", "ab") as f:
        f.write(b"\n  \nbad \xff byte\n" + b"x" * 2000 + b"\nfin.\n")
    with open(root / "parallel" / "eng-fra.tsv", "ab") as f:
        f.write(b"one field only\n")
    return root


def prepare(folders, out, tokenizer, **options) -> dict | None:
    return prepare_store(folders, out, tokenizer, shard_mb=SHARD_MB, max_line_bytes=1000, **options)


@pytest.fixture(scope="module")
def store(folders, udhr_tokenizer_path, tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("store") / "store"
    prepare(folders, out, udhr_tokenizer_path)
    return out


def tree(root: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_rows_from_the_store_are_the_rows_from_the_folders(folders, store, udhr_tokenizer_path):
    """Every stream kind (packed segments, pairs, VECO's segment pairs from both kinds), several
    steps: the same arrays, so the store changes where tokens come from, not the training."""
    tokenizer = Tokenizer.load(udhr_tokenizer_path)
    options = dict(max_line_bytes=1000)
    mono = MonolingualSource.from_dir(folders / "mono", **options)
    parallel = ParallelSource.from_dir(folders / "parallel", **options)
    from_folders = Corpus(mono, parallel, language_vocabulary(mono, parallel))
    stored_mono, stored_parallel = store_lib.open_store(store, (MONO, PARALLEL))
    from_store = Corpus(stored_mono, stored_parallel, from_folders.languages)
    assert language_vocabulary(stored_mono, stored_parallel) == from_folders.languages
    for kind, source in ((MONO, mono), (PARALLEL, parallel)):
        stored = stored_mono if kind == MONO else stored_parallel
        for key, stats in source.stats.items():  # bad lines counted as the folder scan does
            got = stored.stats[key]
            assert (got.total, got.used, got.empty, got.invalid_utf8, got.too_long,
                    got.bad_fields) == (stats.total, stats.used, stats.empty, stats.invalid_utf8,
                                        stats.too_long, stats.bad_fields), key  # fmt: skip
    assert mono.stats["fra"].skipped == 4 and parallel.stats[("eng", "fra")].bad_fields == 1
    assert len(stored_mono._file("eng").paths) > 1  # the comparison crosses shard boundaries
    folder_rows = step_batch_builder(from_folders, tokenizer, STREAMS, 8, seed=5)
    store_rows = step_batch_builder(from_store, tokenizer, STREAMS, 8, seed=5)
    for step in range(4):
        expected, got = folder_rows.map(step), store_rows.map(step)
        for name in STREAMS:
            for field, value in expected[name].items():
                np.testing.assert_array_equal(got[name][field], value, err_msg=f"{name}/{field}")
    assert stored_mono.line("eng", 3) == tokenizer.decode(tokenizer.encode(mono.line("eng", 3)))


def test_workers_and_job_arrays_write_the_same_store(folders, store, udhr_tokenizer_path, tmp_path):
    prepare(folders, tmp_path / "workers", udhr_tokenizer_path, workers=2)
    assert tree(tmp_path / "workers") == tree(store)
    assert prepare(folders, tmp_path / "jobs", udhr_tokenizer_path, shard=(1, 2)) is None
    assert not (tmp_path / "jobs" / store_lib.MANIFEST).exists()  # job 0's shards are missing
    prepare(folders, tmp_path / "jobs", udhr_tokenizer_path, shard=(0, 2))
    assert tree(tmp_path / "jobs") == tree(store)


def test_an_apache_beam_pipeline_writes_the_same_store(
    folders, store, udhr_tokenizer_path, tmp_path
):
    """The DirectRunner, with several workers, from the command line: in this environment if
    it has Beam, else in the one `XLPRETRAIN_BEAM_PYTHON` names (CI builds one, as Beam pins
    protobuf < 7, under which transformers cannot convert tokenizers)."""
    python = os.environ.get("XLPRETRAIN_BEAM_PYTHON")
    if not python:
        pytest.importorskip(
            "apache_beam",
            reason="needs the beam extra (pip install -e '.[beam]', which the test extra "
            "leaves out), here or in the environment XLPRETRAIN_BEAM_PYTHON names",
        )
    out = tmp_path / "beam"
    command = [python or sys.executable, "-m", "xlpretrain.data.prepare", f"--out={out}",
               f"--mono_dir={folders / 'mono'}", f"--parallel_dir={folders / 'parallel'}",
               f"--tokenizer={udhr_tokenizer_path}", "--max_line_bytes=1000",
               f"--shard_mb={SHARD_MB}", "--beam", "--runner=DirectRunner",
               "--direct_num_workers=2", "--direct_running_mode=multi_threading"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert tree(out) == tree(store)


def test_a_rerun_keeps_finished_shards_and_redoes_half_written_ones(
    folders, store, udhr_tokenizer_path, tmp_path
):
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    # As if killed: no manifest, one shard without its finishing JSON, a temporary file.
    (copy / store_lib.MANIFEST).unlink()
    (copy / "mono" / "eng" / "00001.json").unlink()
    (copy / "mono" / "eng" / "00001.array_record").write_bytes(b"half")
    (copy / "mono" / "eng" / "00002.array_record.tmp123").write_bytes(b"torn")
    torn = copy / "mono" / "deu_1996" / "00000.array_record"  # its JSON kept: redone by size
    torn.write_bytes(torn.read_bytes()[:-10])
    kept = copy / "mono" / "rus" / "00000.array_record"
    before = kept.stat().st_mtime_ns
    prepare(folders, copy, udhr_tokenizer_path)
    (copy / "mono" / "eng" / "00002.array_record.tmp123").unlink()  # left for a human to see
    assert tree(copy) == tree(store)
    assert kept.stat().st_mtime_ns == before
    # Other settings make other shards: none is kept.
    prepare_lib.prepare(
        out=str(copy), mono_dir=str(folders / "mono"), parallel_dir=str(folders / "parallel"),
        tokenizer=str(udhr_tokenizer_path), shard_mb=SHARD_MB, max_line_bytes=5000,
    )  # fmt: skip
    assert kept.stat().st_mtime_ns != before
    manifest = json.loads((copy / store_lib.MANIFEST).read_text())
    assert manifest[MONO]["fra"]["skipped"]["too_long"] == 0


def test_a_store_that_cannot_be_used_is_an_error_naming_the_file(store, tmp_path):
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    manifest_path = copy / store_lib.MANIFEST
    manifest = json.loads(manifest_path.read_text())

    manifest_path.write_text(json.dumps({**manifest, "format": "xlpretrain-store/0"}))
    with pytest.raises(store_lib.StoreError, match=f"{manifest_path}: format 'xlpretrain-store/0'"):
        store_lib.open_store(copy, (MONO,))
    manifest_path.write_text("{not json")
    with pytest.raises(store_lib.StoreError, match=f"{manifest_path} cannot be read"):
        store_lib.open_store(copy, (MONO,))
    manifest_path.write_text(json.dumps(manifest))

    shard = copy / "mono" / "rus" / "00000.array_record"
    data = shard.read_bytes()
    shard.unlink()
    with pytest.raises(store_lib.StoreError, match=f"{shard} is missing from the store"):
        store_lib.open_store(copy, (MONO,))
    shard.write_bytes(data[:-100])  # a torn copy: found at start-up
    with pytest.raises(store_lib.StoreError, match=f"{shard} has {len(data) - 100} bytes, but"):
        store_lib.open_store(copy, (MONO,))
    # Damage that keeps the size: found by --verify before a run, or at the shard's first read.
    shard.write_bytes(b"\0" * len(data))
    mono, _ = store_lib.open_store(copy, (MONO,))
    with pytest.raises(store_lib.StoreError, match=f"{shard} holds 0 records, but the manifest"):
        mono.tokens("rus", 0, None)
    damaged = bytearray(data)
    damaged[200:264] = b"\xff" * 64  # inside the first chunk of records
    shard.write_bytes(bytes(damaged))
    mono, _ = store_lib.open_store(copy, (MONO,))
    with pytest.raises(store_lib.StoreError, match=f"{shard} cannot be read as ArrayRecord"):
        mono.tokens("rus", 0, None)
    verify = [sys.executable, "-m", "xlpretrain.data.prepare", "--verify", f"--out={copy}"]
    result = subprocess.run(verify, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert f"{shard} has the manifest's size but not its SHA-256" in result.stdout
    (error,) = result.stderr.splitlines()
    assert error.startswith("xlpretrain.data.prepare: error: 1 of ") and "shards differ" in error
    shard.write_bytes(data)
    result = subprocess.run(verify, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "shards match the manifest" in result.stdout, result.stderr

    mono_only = dict(manifest)
    del mono_only[PARALLEL]
    manifest_path.write_text(json.dumps(mono_only))
    with pytest.raises(store_lib.StoreError, match="holds no parallel data.*--parallel_dir"):
        store_lib.open_store(copy, (MONO, PARALLEL))

    other = tmp_path / "other.model"
    other.write_bytes(b"not the store's tokenizer")
    with pytest.raises(store_lib.StoreError, match="ids come from a tokenizer with SHA-256"):
        store_lib.check_tokenizer(store, other)
    with pytest.raises(store_lib.StoreError, match="no such folder"):
        store_lib.open_store(tmp_path / "nothing", (MONO,))


def test_verify_says_what_repairs_the_store_and_it_does(store, folders, udhr_tokenizer_path,
                                                        tmp_path, capsys):  # fmt: skip
    """Preparing again redoes the pieces of a torn shard, so that is all --verify asks; it keeps
    a shard whose bytes changed but not its size (a run checks sizes), so for that --verify asks
    to delete it first."""
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    torn, changed = sorted((copy / "mono").rglob("*.array_record"))[:2]

    def verify() -> tuple[list[str], str]:
        with pytest.raises(SystemExit) as stop:
            prepare_cli.main(["--verify", f"--out={copy}"])
        out, err = capsys.readouterr()
        assert stop.value.code == 1 and err.count("\n") == 1, err
        return out.splitlines(), err

    torn.write_bytes(torn.read_bytes()[:-10])
    problems, advice = verify()
    assert len(problems) == 1 and problems[0].startswith(f"{torn} has ")
    assert advice.endswith("run the same prepare command again: it redoes just their pieces\n")
    prepare(folders, copy, udhr_tokenizer_path)
    assert tree(copy) == tree(store)

    changed.write_bytes(bytes(reversed(changed.read_bytes())))
    problems, advice = verify()
    assert problems == [f"{changed} has the manifest's size but not its SHA-256: its bytes changed"]
    assert "delete the 1 whose SHA-256 differs, then run the same prepare command again" in advice
    prepare(folders, copy, udhr_tokenizer_path)
    assert tree(copy) != tree(store)  # preparing again alone keeps it, as the advice says
    changed.unlink()
    prepare(folders, copy, udhr_tokenizer_path)
    assert tree(copy) == tree(store)


def test_prepare_train_and_resume_on_the_store_equal_training_on_the_folders(
    folders, udhr_tokenizer_path, tmp_path
):
    """The command line prepares a store (training its own tokenizer), a run on it stops at
    step 4 and resumes; its losses are those of one uninterrupted run on the text folders with
    the store's tokenizer."""
    out = tmp_path / "store"
    command = [sys.executable, "-m", "xlpretrain.data.prepare", f"--out={out}",
               f"--mono_dir={folders / 'mono'}", f"--parallel_dir={folders / 'parallel'}",
               "--vocab_size=1002", "--max_line_bytes=1000", f"--shard_mb={SHARD_MB}"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"--config.data.store={out}" in result.stdout and "mono fra: " in result.stdout

    def train(workdir, **overrides):
        cfg = run_config(data__max_line_bytes=1000, model__vocab_size=1002, **overrides)
        trainer = trainer_lib.build(resolve(cfg), str(workdir), jax.devices()[:1])
        try:
            trainer_lib.run(trainer)
        finally:
            trainer.checkpointer.close()
        return {r["step"]: r["loss"] for r in read_metrics(workdir)}

    stored = train(tmp_path / "run", data__store=str(out), train__stop_at=4)
    assert sorted(stored) == [1, 2, 3, 4]
    assert (tmp_path / "run" / "tokenizer.model").read_bytes() == (
        out / "tokenizer.model"
    ).read_bytes()
    stored = train(tmp_path / "run", data__store=str(out))
    folders_run = train(
        tmp_path / "folders",
        data__mono_dir=str(folders / "mono"),
        data__parallel_dir=str(folders / "parallel"),
        tokenizer__path=str(out / "tokenizer.model"),
    )
    assert stored.keys() == folders_run.keys()
    np.testing.assert_allclose(list(stored.values()), list(folders_run.values()), rtol=1e-6)
    assert os.path.getsize(out / store_lib.MANIFEST) > 0


def test_jsonl_and_parquet_documents_are_stored_like_text_lines(
    folders, store, udhr_tokenizer_path, tmp_path
):
    """The same documents as JSON lines (with records that cannot be used, counted as
    `bad_fields`) and as Parquet rows (several row groups, so several shards) give the token
    ids of the text folder's lines, in order."""
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    mono = MonolingualSource.from_dir(folders / "mono", max_line_bytes=1000)
    inputs = tmp_path / "mono"
    inputs.mkdir()
    rus = [mono.line("rus", i) for i in range(mono.num_lines("rus"))]
    bad = ["{not json", json.dumps({"title": "no text"}), json.dumps({"text": 7}), "[1, 2]"]
    records = [
        json.dumps({"text": text, "id": n}, ensure_ascii=False) for n, text in enumerate(rus)
    ]
    (inputs / "rus.jsonl").write_text("\n".join(records[:3] + bad + records[3:]) + "\n")
    eng = [mono.line("eng", i) for i in range(mono.num_lines("eng"))]
    pq.write_table(pyarrow.table({"body": eng}), inputs / "eng.parquet", row_group_size=8)

    out = tmp_path / "store"
    with pytest.raises(DataError, match=f"{inputs / 'eng.parquet'}: no column 'text'"):
        prepare_lib.prepare(
            out=str(out), mono_dir=str(inputs), tokenizer=str(udhr_tokenizer_path),
            shard_mb=SHARD_MB / 4, max_line_bytes=1000, text_field="text",
        )  # fmt: skip
    (inputs / "rus.jsonl").write_text(
        "\n".join(r.replace('"text"', '"body"') for r in records[:3] + bad + records[3:]) + "\n"
    )
    prepare_lib.prepare(
        out=str(out), mono_dir=str(inputs), tokenizer=str(udhr_tokenizer_path),
        shard_mb=SHARD_MB / 4, max_line_bytes=1000, text_field="body",
    )  # fmt: skip
    ours, _ = store_lib.open_store(out, (MONO,))
    theirs, _ = store_lib.open_store(store, (MONO,))
    assert ours.stats["rus"].bad_fields == 4 and ours.stats["rus"].used == len(rus)
    assert len(ours._file("eng").paths) > 1
    for lang, texts in (("rus", rus), ("eng", eng)):
        assert ours.num_lines(lang) == theirs.num_lines(lang) == len(texts)
        for i in range(len(texts)):
            np.testing.assert_array_equal(ours.tokens(lang, i, None), theirs.tokens(lang, i, None))


def test_pairs_as_json_lines_and_parquet_rows_are_stored_like_tsv_lines(
    folders, store, udhr_tokenizer_path, tmp_path
):
    """A pair a JSON object or a Parquet row, its texts under the pair's codes (or the fields
    given): the token ids of the .tsv lines, and records without two texts counted."""
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    parallel = ParallelSource.from_dir(folders / "parallel", max_line_bytes=1000)
    pairs = {p: [parallel.line(p, i) for i in range(parallel.num_lines(p))] for p in
             [("eng", "rus"), ("eng", "cmn_hans")]}  # fmt: skip
    inputs = tmp_path / "parallel"
    inputs.mkdir()
    bad = ['{"eng": "one side"}', '{"eng": " ", "rus": ""}', '{"eng": "x", "rus": " "}', "[1]"]
    records = [json.dumps({"eng": a, "rus": b}, ensure_ascii=False) for a, b in pairs["eng", "rus"]]
    (inputs / "eng-rus.jsonl").write_text("\n".join(records[:2] + bad + records[2:]) + "\n")
    first, second = zip(*pairs["eng", "cmn_hans"], strict=True)
    pq.write_table(
        pyarrow.table({"eng": first, "cmn_hans": second}),
        inputs / "eng-cmn_hans.parquet",
        row_group_size=8,
    )
    out = tmp_path / "store"
    prepare_lib.prepare(
        out=str(out), parallel_dir=str(inputs), tokenizer=str(udhr_tokenizer_path),
        shard_mb=SHARD_MB / 4, max_line_bytes=1000,
    )  # fmt: skip
    _, ours = store_lib.open_store(out, (PARALLEL,))
    _, theirs = store_lib.open_store(store, (PARALLEL,))
    stats = ours.stats[("eng", "rus")]
    assert (stats.bad_fields, stats.empty, stats.used) == (3, 1, len(pairs["eng", "rus"]))
    assert len(ours._file(("eng", "cmn_hans")).paths) > 1
    for pair, texts in pairs.items():
        assert ours.num_lines(pair) == theirs.num_lines(pair) == len(texts)
        for i in range(len(texts)):
            for got, expected in zip(ours.token_pair(pair, i, None),
                                     theirs.token_pair(pair, i, None), strict=True):  # fmt: skip
                np.testing.assert_array_equal(got, expected)
    with pytest.raises(DataError, match="no column 'src', 'tgt'.*--pair_text_fields"):
        prepare_lib.prepare(
            out=str(tmp_path / "other"), parallel_dir=str(inputs),
            tokenizer=str(udhr_tokenizer_path), pair_text_fields=("src", "tgt"),
        )  # fmt: skip


def test_lines_in_blocks_of_a_record_come_back_in_order(folders, udhr_tokenizer_path, tmp_path):
    """Whole files in one shard each (so several blocks of `BLOCK` lines per shard): every
    line of every key, read in an order that jumps between blocks, is its text's encoding."""
    prepare_lib.prepare(
        out=str(tmp_path / "store"), mono_dir=str(folders / "mono"),
        parallel_dir=str(folders / "parallel"), tokenizer=str(udhr_tokenizer_path),
        shard_mb=1, max_line_bytes=1000,
    )  # fmt: skip
    tokenizer = Tokenizer.load(udhr_tokenizer_path)
    mono = MonolingualSource.from_dir(folders / "mono", max_line_bytes=1000)
    parallel = ParallelSource.from_dir(folders / "parallel", max_line_bytes=1000)
    stored_mono, stored_parallel = store_lib.open_store(tmp_path / "store", (MONO, PARALLEL))
    assert mono.num_lines("eng") > store_lib.BLOCK and len(stored_mono._file("eng").paths) == 1
    for lang in mono.languages:
        order = np.random.default_rng(0).permutation(mono.num_lines(lang))
        for i in order.tolist():
            expected = tokenizer.encode(mono.line(lang, i))
            np.testing.assert_array_equal(stored_mono.tokens(lang, i, None), expected)
    for pair in parallel.pairs:
        for i in reversed(range(parallel.num_lines(pair))):
            got = stored_parallel.token_pair(pair, i, None)
            for side, text in zip(got, parallel.line(pair, i), strict=True):
                np.testing.assert_array_equal(side, tokenizer.encode(text))


def test_a_vocabulary_the_sample_cannot_give_names_the_flags_that_give_it(folders, tmp_path):
    """`--vocab_size` too small for the sample's characters: the error names `prepare`'s own
    flags, and lowering `--character_coverage` as it suggests trains that size."""
    flags = [f"--mono_dir={folders / 'mono'}", "--vocab_size=300", "--sentences_per_language=50"]
    with pytest.raises(DataError) as error:
        prepare_cli.main([*flags, f"--out={tmp_path / 'store'}"])
    message = str(error.value)
    assert message.startswith("vocab_size=300 is too small for the tokenizer training sample")
    assert "Raise --vocab_size, or lower --character_coverage so that" in message
    prepare_cli.main([*flags, "--character_coverage=0.98", f"--out={tmp_path / 'covered'}"])
    assert Tokenizer.load(tmp_path / "covered" / "tokenizer.model").vocab_size == 300
