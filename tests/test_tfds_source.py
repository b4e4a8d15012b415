"""TFDS sources on tiny datasets that the test builds in ArrayRecord format (nothing is
downloaded, no TensorFlow): languages, counts, read-back order, bad-record accounting, strict
mode, clear errors, pickling (also into a fresh process that never saw the builder classes)
and one batch of the grain pipeline built from them."""

import pickle
import subprocess
import sys

import numpy as np
import pytest

from tests.tiny import step_batch_builder
from xlpretrain.data.corpora import corpus as corpus_lib
from xlpretrain.data.corpora.protocols import MonolingualCorpus, ParallelCorpus
from xlpretrain.data.corpora.sources import DataError, format_stats
from xlpretrain.data.pretraining.pipeline import Corpus, language_vocabulary
from xlpretrain.data.pretraining.row_kinds import Segments, TranslationPairs
from xlpretrain.data.pretraining.streams import MONO, PARALLEL, StreamSpec
from xlpretrain.data.tokenizer import train_tokenizer

EXTRA = 'the tfds extra is not installed: pip install -e ".[tfds]"'
tfds = pytest.importorskip("tensorflow_datasets", reason=EXTRA)
pytest.importorskip("importlib_resources", reason=EXTRA)  # TFDS's builds need it (setup.py)

from xlpretrain.data.corpora.tfds_source import TfdsMonolingualSource, TfdsParallelSource  # noqa: E402
from xlpretrain.training.plan import corpus_settings  # noqa: E402

MAX_BYTES = 1000
DOCS = [  # (language, text): records 2, 3, 5 and 8 are bad
    ("en", "Hello, world. The sun is bright today."),
    ("de", "Hallo Welt. Die Sonne scheint heute hell."),
    ("en", ""),
    ("de", "x" * (MAX_BYTES + 1)),
    ("fr", "Bonjour le monde. Le soleil brille aujourd'hui."),
    ("en", b"not UTF-8: \xff"),
    ("de", "Guten Morgen, Welt. Wir gehen heute in die Stadt."),
    ("en", "Good morning, world. We go to the town today."),
    ("fr", " \t\u3000"),
    ("fr", "Salut, monde. Nous allons en ville aujourd'hui."),
]
PAIRS = [  # (source language, target language, source, target): records 2 and 3 are bad
    ("en", "de", "The cat sleeps.", "Die Katze schläft."),
    ("en", "fr", "The dog runs.", "Le chien court."),
    ("en", "de", "", "Leer."),
    ("en", "de", " ", ""),
    ("en", "de", "A small house.", "Ein kleines Haus."),
    ("en", "fr", "A tab\tinside.", "Une tabulation\tdedans."),
]
TRANSLATIONS = [("Guten Tag.", "Good day."), ("Danke.", "Thank you.")]


class _Builder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """A local dataset of `rows()` in generation order, with a 'train' split only."""

    VERSION = tfds.core.Version("1.0.0")
    FEATURES: dict = {}

    def _info(self) -> tfds.core.DatasetInfo:
        features = tfds.features.FeaturesDict(self.FEATURES)
        return tfds.core.DatasetInfo(builder=self, features=features, disable_shuffling=True)

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        yield from enumerate(self.rows())


class XlpretrainTestDocs(_Builder):
    FEATURES = {"text": tfds.features.Text(), "language": tfds.features.Text(), "n": np.int64}

    def rows(self):
        return [{"text": text, "language": lang, "n": i} for i, (lang, text) in enumerate(DOCS)]


class XlpretrainTestPairs(_Builder):
    FEATURES = {
        key: tfds.features.Text()
        for key in ("source", "target", "source_language", "target_language")
    }

    def rows(self):
        keys = ("source_language", "target_language", "source", "target")
        return [dict(zip(keys, row, strict=True)) for row in PAIRS]


class XlpretrainTestTranslation(_Builder):
    def _info(self) -> tfds.core.DatasetInfo:  # the TFDS layout: features named by language
        features = tfds.features.Translation(languages=("de", "en"))
        return tfds.core.DatasetInfo(builder=self, features=features, disable_shuffling=True)

    def rows(self):
        return [{"de": de, "en": en} for de, en in TRANSLATIONS]


class XlpretrainTestGrouped(_Builder):
    """Three languages, 400 documents each, stored one language after another."""

    FEATURES = {"text": tfds.features.Text(), "language": tfds.features.Text()}

    def rows(self):
        return [
            {"text": f"{lang} document number {i} of the grouped split.", "language": lang}
            for lang in ("aa", "bb", "cc")
            for i in range(400)
        ]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tfds")
    tfds.display_progress_bar(False)
    builders = (XlpretrainTestDocs, XlpretrainTestPairs, XlpretrainTestTranslation)
    for builder in (*builders, XlpretrainTestGrouped):
        builder(data_dir=path).download_and_prepare(file_format="array_record")
    return path


@pytest.fixture(scope="module")
def mono(data_dir):
    return TfdsMonolingualSource.from_tfds(
        "xlpretrain_test_docs", data_dir=data_dir, max_line_bytes=MAX_BYTES
    )


@pytest.fixture(scope="module")
def parallel(data_dir):
    return TfdsParallelSource.from_tfds(
        "xlpretrain_test_pairs",
        data_dir=data_dir,
        language_keys=("source_language", "target_language"),
    )


def test_monolingual_languages_counts_and_lines(mono):
    assert isinstance(mono, MonolingualCorpus)
    assert mono.languages == ["de", "en", "fr"]
    expected = {"en": [0, 7], "de": [1, 6], "fr": [4, 9]}  # usable records, in record order
    for lang, records in expected.items():
        assert mono.num_lines(lang) == len(records)
        assert [mono.line(lang, i) for i in range(len(records))] == [DOCS[r][1] for r in records]
    with pytest.raises(IndexError):
        mono.line("en", 2)
    with pytest.raises(KeyError, match="tfds:xlpretrain_test_docs/train"):
        mono.line("ja", 0)


def test_bad_records_are_counted_per_language(mono):
    en, de, fr = (mono.stats[lang] for lang in ("en", "de", "fr"))
    assert en.path == "tfds:xlpretrain_test_docs/train (en)"
    assert (en.total, en.used, en.empty, en.invalid_utf8) == (4, 2, 1, 1)
    assert en.examples == {"empty": [2], "invalid_utf8": [5]}  # record indices
    assert (de.total, de.used, de.too_long, de.examples) == (3, 2, 1, {"too_long": [3]})
    assert (fr.total, fr.used, fr.empty) == (3, 2, 1)
    assert format_stats(mono.stats)[-1] == (
        "3 files: 6 of 10 lines used; skipped 1 too long, 1 invalid UTF-8, 2 empty"
    )


def test_strict_mode_names_dataset_split_and_record(data_dir):
    with pytest.raises(DataError, match=r"tfds:xlpretrain_test_docs/train record 2: empty"):
        TfdsMonolingualSource.from_tfds("xlpretrain_test_docs", data_dir=data_dir, strict=True)
    with pytest.raises(DataError, match=r"record 3: text longer than max_line_bytes=1000"):
        TfdsMonolingualSource.from_tfds(
            "xlpretrain_test_docs",
            data_dir=data_dir,
            languages=["de"],
            strict=True,
            max_line_bytes=MAX_BYTES,
        )


def test_single_language_and_selection(data_dir):
    one = TfdsMonolingualSource.from_tfds(
        "xlpretrain_test_docs", data_dir=data_dir, language="xx", language_key=None
    )
    assert one.languages == ["xx"] and one.num_lines("xx") == 7  # the too-long one fits 1 MB
    assert one.line("xx", 2) == DOCS[3][1]
    fr = TfdsMonolingualSource.from_tfds(
        "xlpretrain_test_docs", data_dir=data_dir, languages=["fr"]
    )
    assert fr.languages == ["fr"] and list(fr.stats) == ["fr"]
    with pytest.raises(
        DataError, match=r"ja not found in tfds:xlpretrain_test_docs/train \(it has"
    ):
        TfdsMonolingualSource.from_tfds("xlpretrain_test_docs", data_dir=data_dir, languages=["ja"])
    with pytest.raises(ValueError, match="give language_key"):
        TfdsMonolingualSource.from_tfds(
            "xlpretrain_test_docs", data_dir=data_dir, language_key=None
        )


def test_parallel_pairs_lines_and_bad_records(parallel):
    assert isinstance(parallel, ParallelCorpus)
    assert parallel.pairs == [("en", "de"), ("en", "fr")]
    assert parallel.languages == ["de", "en", "fr"]
    assert parallel.num_lines(("en", "de")) == 2
    assert parallel.line(("en", "de"), 1) == ("A small house.", "Ein kleines Haus.")
    assert parallel.line("en-fr", 1) == PAIRS[5][2:]  # tabs inside a text are fine
    stats = parallel.stats[("en", "de")]
    assert (stats.total, stats.used, stats.bad_fields, stats.empty) == (4, 2, 1, 1)
    assert stats.examples == {"bad_fields": [2], "empty": [3]}


def test_parallel_fixed_pair_reads_translation_features(data_dir):
    source = TfdsParallelSource.from_tfds(
        "xlpretrain_test_translation", data_dir=data_dir, pair=("de", "en")
    )
    assert source.pairs == [("de", "en")]
    assert [source.line("de-en", i) for i in range(2)] == TRANSLATIONS
    reverse = TfdsParallelSource.from_tfds(
        "xlpretrain_test_translation",
        data_dir=data_dir,
        pair="en-de",
        source_key="en",
        target_key="de",
    )
    assert reverse.line(("en", "de"), 0) == ("Good day.", "Guten Tag.")
    with pytest.raises(ValueError, match="exactly one of pair and language_keys"):
        TfdsParallelSource.from_tfds("xlpretrain_test_translation", data_dir=data_dir)


def test_pickling_copies_the_index_and_reopens(mono, parallel, tmp_path):
    mono.line("en", 0)  # opened here: the open reader must not travel
    data = pickle.dumps(mono)
    assert len(data) < 4000
    copy = pickle.loads(data)
    assert [copy.line("fr", i) for i in range(2)] == [mono.line("fr", i) for i in range(2)]
    assert pickle.loads(pickle.dumps(parallel)).line("en-fr", 0) == PAIRS[1][2:]
    # A fresh process has never seen the builder classes: TFDS opens the prepared files.
    path = tmp_path / "source.pkl"
    path.write_bytes(data)
    read = f"import pickle; print(pickle.load(open({str(path)!r}, 'rb')).line('de', 1))"
    out = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == DOCS[6][1]


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("xlpretrain_no_such_dataset", {}, "'xlpretrain_no_such_dataset'.* not found"),
        ("xlpretrain_test_docs", {"split": "validation"}, "split 'validation'.*Unknown split"),
        ("xlpretrain_test_docs", {"text_key": "body"}, r"no feature 'body' \(its features: "),
        ("xlpretrain_test_docs", {"language_key": "lang"}, "no feature 'lang'"),
        ("xlpretrain_test_docs", {"text_key": "n"}, "record 0: feature 'n' is not a string"),
    ],
)
def test_clear_errors(data_dir, name, options, message):
    with pytest.raises(DataError, match=message):
        TfdsMonolingualSource.from_tfds(name, data_dir=data_dir, **options)


def test_unprepared_dataset_is_not_downloaded(tmp_path):
    with pytest.raises(DataError, match="is not prepared in .*tfds build xlpretrain_test_docs"):
        TfdsMonolingualSource.from_tfds("xlpretrain_test_docs", data_dir=tmp_path)
    assert not any(tmp_path.rglob("*.array_record*"))


def test_sources_feed_the_pipeline(mono, parallel, tmp_path):
    corpus = Corpus(mono, parallel, language_vocabulary(mono, parallel))
    texts = {lang: [mono.line(lang, i) for i in range(2)] for lang in mono.languages}
    for pair in parallel.pairs:
        for i in range(parallel.num_lines(pair)):
            for lang, text in zip(pair, parallel.line(pair, i), strict=True):
                texts[lang].append(text)
    tokenizer = train_tokenizer(texts, tmp_path / "tok.model", 60, character_coverage=1.0)
    streams = {
        "mmlm": StreamSpec(Segments(), {MONO: 0.15}),
        "tlm": StreamSpec(TranslationPairs(), {PARALLEL: 0.15}),
    }
    builder = step_batch_builder(corpus, tokenizer, streams, 4, max_length=32)
    batch = builder.map(0)
    assert batch["mmlm"]["input_ids"].shape == batch["tlm"]["input_ids"].shape == (4, 32)
    assert (batch["mmlm"]["segment_ids"] > 0).any() and (batch["tlm"]["side"] == 1).any()
    assert set(np.unique(batch["tlm"]["lang_ids"])) <= set(range(len(corpus.languages)))
    # What grain's worker processes do: unpickle the builder (with its sources) and map.
    again = pickle.loads(pickle.dumps(builder)).map(0)
    np.testing.assert_array_equal(again["tlm"]["input_ids"], batch["tlm"]["input_ids"])


def test_run_config_selects_tfds_sources(data_dir):
    from xlpretrain.data.pretraining.streams import MONO, PARALLEL
    from xlpretrain.training.config import ConfigError, default_config

    cfg = default_config()
    cfg.data.mono_tfds.name = "xlpretrain_test_docs"
    cfg.data.mono_tfds.data_dir = str(data_dir)
    cfg.data.parallel_tfds.name = "xlpretrain_test_translation"
    cfg.data.parallel_tfds.data_dir = str(data_dir)
    cfg.data.parallel_tfds.pair = "de-en"
    cfg.data.max_line_bytes = MAX_BYTES
    corpus = corpus_lib.load_corpus(corpus_settings(cfg), {MONO: ["mmlm"], PARALLEL: ["tlm"]})
    assert isinstance(corpus.mono, TfdsMonolingualSource)
    assert isinstance(corpus.parallel, TfdsParallelSource)
    assert corpus.parallel.line(("de", "en"), 1) == ("Danke.", "Thank you.")
    assert {"de", "en"} <= set(corpus.languages)
    cfg.data.mono_dir = "/some/folder"
    with pytest.raises(ConfigError, match="data.mono_tfds.name"):
        corpus_lib.load_corpus(corpus_settings(cfg), {MONO: ["mmlm"]})


def test_prepare_stores_tfds_records_as_the_sources_read_them(mono, parallel, data_dir, tmp_path):
    """TFDS datasets as `prepare` inputs: records naming their own language (or pair) go to
    that key's shards, a fixed pair's dataset to its pair; one record a piece, so keys span
    pieces. Every line is the TFDS source's line encoded (a pair's texts may hold tabs), the
    skipped records are counted as the sources count them, and the command line with worker
    processes writes the same bytes."""
    from xlpretrain.data import prepare as prepare_lib
    from xlpretrain.data.corpora import store as store_lib

    texts = {lang: [mono.line(lang, i) for i in range(2)] for lang in mono.languages}
    for pair in parallel.pairs:
        for i in range(parallel.num_lines(pair)):
            for lang, text in zip(pair, parallel.line(pair, i), strict=True):
                texts[lang].append(text)
    tokenizer_path = tmp_path / "tok.model"
    tokenizer = train_tokenizer(texts, tokenizer_path, 60, character_coverage=1.0)
    options = dict(data_dir=str(data_dir))
    inputs = dict(
        mono_tfds=[
            prepare_lib.tfds_input(
                MONO, "xlpretrain_test_docs", text_fields=("text",),
                language_fields=("language",), **options,
            ),
            # A slice, all of whose records are one language (its own language feature unread).
            prepare_lib.tfds_input(
                MONO, "xlpretrain_test_docs@train[:4]=xx", text_fields=("text",),
                language_fields=("language",), **options,
            ),
        ],
        parallel_tfds=[
            prepare_lib.tfds_input(
                PARALLEL, "xlpretrain_test_pairs",
                language_fields=("source_language", "target_language"), **options,
            ),
            prepare_lib.tfds_input(PARALLEL, "xlpretrain_test_translation@train=de-en", **options),
        ],
    )  # fmt: skip
    out = tmp_path / "store"
    prepare_lib.prepare(
        out=str(out), tokenizer=str(tokenizer_path), shard_mb=1e-9, max_line_bytes=MAX_BYTES,
        **inputs,
    )  # fmt: skip
    stored_mono, stored_parallel = store_lib.open_store(out, (MONO, PARALLEL))
    assert stored_mono.languages == [*mono.languages, "xx"] == ["de", "en", "fr", "xx"]
    stats = stored_mono.stats["xx"]  # records 0-3: two usable, one empty, one too long
    assert (stats.used, stats.empty, stats.too_long) == (2, 1, 1)
    for i in range(2):
        np.testing.assert_array_equal(
            stored_mono.tokens("xx", i, None), tokenizer.encode(DOCS[i][1])
        )
    assert len(stored_mono._file("en").paths) == 4  # records 0, 2, 5, 7: one piece each
    for lang in mono.languages:
        got, expected = stored_mono.stats[lang], mono.stats[lang]
        assert (got.total, got.used, got.empty, got.invalid_utf8, got.too_long) == (
            expected.total, expected.used, expected.empty, expected.invalid_utf8,
            expected.too_long,
        ), lang  # fmt: skip
        for i in range(mono.num_lines(lang)):
            np.testing.assert_array_equal(
                stored_mono.tokens(lang, i, None), tokenizer.encode(mono.line(lang, i))
            )
    translation = TfdsParallelSource.from_tfds(
        "xlpretrain_test_translation", data_dir=data_dir, pair="de-en"
    )
    assert stored_parallel.pairs == [("de", "en"), ("en", "de"), ("en", "fr")]
    assert stored_parallel.stats[("en", "de")].bad_fields == 1
    assert stored_parallel.stats[("en", "de")].empty == 1
    for source in (parallel, translation):
        for pair in source.pairs:
            for i in range(source.num_lines(pair)):
                got = stored_parallel.token_pair(pair, i, None)
                for side, text in zip(got, source.line(pair, i), strict=True):
                    np.testing.assert_array_equal(side, tokenizer.encode(text))
    assert "\t" in parallel.line(("en", "fr"), 1)[0]  # stored as two texts, not a TSV line

    command = [
        sys.executable, "-m", "xlpretrain.data.prepare", f"--out={tmp_path / 'cli'}",
        f"--tokenizer={tokenizer_path}", "--shard_mb=1e-9", f"--max_line_bytes={MAX_BYTES}",
        f"--tfds_data_dir={data_dir}", "--workers=2", "--mono_tfds=xlpretrain_test_docs",
        "--mono_tfds=xlpretrain_test_docs@train[:4]=xx",
        "--parallel_tfds=xlpretrain_test_pairs",
        "--pair_language_fields=source_language,target_language",
        "--parallel_tfds=xlpretrain_test_translation=de-en",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "parallel en-fr: 2 lines" in result.stdout

    def tree(root):
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    assert tree(tmp_path / "cli") == tree(out)


DOC_FIELDS = {"text_fields": ("text",), "language_fields": ("language",)}


@pytest.mark.parametrize(
    "kind, spec, fields, message",
    [
        (PARALLEL, "xlpretrain_test_pairs", {}, "give its pair .*--pair_language_fields"),
        (MONO, "xlpretrain_test_docs", {**DOC_FIELDS, "text_fields": ("body",)}, "feature 'body'"),
        (MONO, "xlpretrain_test_docs@validation", DOC_FIELDS, "split 'validation'"),
        (PARALLEL, "xlpretrain_test_translation=de_en", {}, "cannot parse a language pair"),
        (MONO, "xlpretrain_test_docs", {**DOC_FIELDS, "language_fields": ("n",)}, "'n' is not a"),
    ],
)  # fmt: skip
def test_prepare_names_what_is_wrong_with_a_tfds_input(
    data_dir, tmp_path, kind, spec, fields, message
):
    from xlpretrain.data import prepare as prepare_lib

    tokenizer = tmp_path / "tok.model"
    train_tokenizer({"en": [text for _, text in DOCS[:2]]}, tokenizer, 30, character_coverage=1.0)
    with pytest.raises(DataError, match=message):
        given = prepare_lib.tfds_input(kind, spec, data_dir=str(data_dir), **fields)
        prepare_lib.prepare(
            out=str(tmp_path / "store"), tokenizer=str(tokenizer), **{f"{kind}_tfds": [given]}
        )


@pytest.mark.parametrize(
    "kind, label",
    [(MONO, "../etc"), (MONO, "en/us"), (MONO, "zh Hans"), (PARALLEL, ("en", "zh-Hant"))],
)
def test_a_record_language_that_cannot_name_a_store_folder_is_refused(kind, label):
    from xlpretrain.data.prepare.readers import _record_key

    with pytest.raises(DataError, match="tfds:x/train record 3: language .* cannot name a store"):
        _record_key(kind, label, "tfds:x/train", 3)
    assert _record_key(PARALLEL, ("en", "zh_Hant"), "tfds:x/train", 3) == "en-zh_Hant"


def test_the_tokenizer_sample_of_a_split_grouped_by_language_has_every_language(data_dir):
    """Records naming their own language may come grouped: the sample reads pieces spread over
    the split (the first piece alone would be all 'aa')."""
    from xlpretrain.data.prepare import inputs, readers, vocabulary

    spec = inputs.tfds_input(
        MONO, "xlpretrain_test_grouped", text_fields=("text",), language_fields=("language",),
        data_dir=str(data_dir),
    )  # fmt: skip
    assert len(inputs.plan({}, [spec], 2000)) > vocabulary.SAMPLE_PIECES
    sample = vocabulary.tokenizer_sample({}, [spec], 1, readers.Reading())
    assert sorted(sample) == ["aa", "bb", "cc"] and all(len(v) == 1 for v in sample.values())


def test_a_held_out_share_splits_tfds_records_as_it_splits_text_lines(mono, parallel):
    """Evaluation's default held-out lines (xlpretrain/data/corpora/held_out.py) read TFDS records
    through the same protocol as folders: every record in exactly one part."""
    from xlpretrain.data.corpora.held_out import LineSplit, MonolingualPart, ParallelPart

    split, held_out = LineSplit(0.5, seed=0), 0
    for source, part, keys in (
        (mono, MonolingualPart, mono.languages),
        (parallel, ParallelPart, parallel.pairs),
    ):
        train, held = part(source, split, False), part(source, split, True)
        for key in keys:
            every = [source.line(key, i) for i in range(source.num_lines(key))]
            kept = [train.line(key, i) for i in range(train.num_lines(key))]
            taken = (
                [held.line(key, i) for i in range(held.num_lines(key))] if key in held.stats else []
            )
            assert sorted(kept + taken) == sorted(every), key
            held_out += len(taken)
    assert held_out > 0
