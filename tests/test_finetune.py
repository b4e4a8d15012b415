"""Fine-tuning on a user's pair folder (the `pairs` task of `python -m xlpretrain.finetune`): a
translation-detection task built from UDHR, fitted from the CLI and scored per language; the
demo corpus's translation-or-not task (held out, balanced, hard negatives) run as
docs/finetune.md runs it, with accuracy beside chance per pair; VECO's plug-in; the rows of both
modes; layer-wise decay on pre-training's optimizer; config errors (through pre-training's
`check_keys`) and data errors."""

import dataclasses
import json
import pathlib
import subprocess
import sys

import flax.linen as nn
import jax
import ml_collections
import numpy as np
import pytest

from xlpretrain.convert import folder
from xlpretrain.data import demo_corpus
from xlpretrain.data.corpora.folders import ParallelSource
from xlpretrain.data.corpora.sources import DataError
from xlpretrain.data.demo_corpus import __main__ as demo_corpus_cli
from xlpretrain.data.demo_corpus import translation_pairs
from xlpretrain.data.finetuning import pairs as pairs_lib
from xlpretrain.data.finetuning.task_examples import PairExample
from xlpretrain.data.tokenizer import Tokenizer
from xlpretrain.data.xtreme import read_pair_file
from xlpretrain.families import BERT
from xlpretrain.finetune import suite, task_run
from xlpretrain.finetune.batches import TASK, RowBatches
from xlpretrain.finetune.layer_decay import layer_decay_factors, make_finetune_optimizer
from xlpretrain.finetune.plan import resolve
from xlpretrain.finetune.schema import default_config
from xlpretrain.model import ModelConfig, init_params
from xlpretrain.tasks import classification
from xlpretrain.tasks.declaration import Encoding
from xlpretrain.training import config as config_lib
from xlpretrain.training.config import ConfigError
from xlpretrain.training.metrics import read_metrics
from xlpretrain.training.optim import adamw_from
from xlpretrain.training.sections import OptimizerSettings

REPO = pathlib.Path(__file__).resolve().parents[1]
TRAIN_LANGUAGE = "spa"
OTHER_LANGUAGES = ("fra", "rus")


@pytest.fixture(scope="module")
def veco_folder(udhr_tokenizer_path, tmp_path_factory) -> pathlib.Path:
    """A tiny randomly initialised model with VECO's cross-attention, as a checkpoint folder
    (pre-training it first would only add compile time: the tasks are learnt from scratch)."""
    config = ModelConfig(
        vocab_size=1002, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, cross_attention=True
    )
    params = jax.tree.map(np.asarray, nn.unbox(init_params(config, jax.random.key(0))))
    path = tmp_path_factory.mktemp("veco") / "model"
    folder.write(folder.Pretrained(config, params, Tokenizer.load(udhr_tokenizer_path)), path)
    return path


@pytest.fixture(scope="module")
def task_dir(udhr, tmp_path_factory) -> pathlib.Path:
    """Translation (or not) of English UDHR paragraphs, labels 'translation' / 'other'.

    `<lang>/test.tsv` pairs every English paragraph with its translation and with another
    paragraph's, so that only telling translations apart beats 0.5. `<lang>/train.tsv` (the
    training language only) uses every paragraph once, alternately with its own translation or
    another's, so a tiny model can fit it within a few dozen steps.
    """
    root = tmp_path_factory.mktemp("pairs")
    source = ParallelSource.from_dir(
        udhr / "parallel", pairs=[f"eng-{lang}" for lang in (TRAIN_LANGUAGE, *OTHER_LANGUAGES)]
    )
    for english, lang in source.pairs:
        lines = [source.line((english, lang), i) for i in range(source.num_lines((english, lang)))]
        n = len(lines)
        test = [
            f"{eng}\t{translation}\t{label}"
            for i, (eng, own) in enumerate(lines)
            for translation, label in ((own, "translation"), (lines[(i + 1) % n][1], "other"))
        ]
        (root / lang).mkdir()
        (root / lang / "test.tsv").write_text("\n".join(test) + "\n")
        if lang == TRAIN_LANGUAGE:
            odd = list(range(1, n, 2))
            train = [
                f"{eng}\t{own}\ttranslation"
                if i % 2 == 0
                else f"{eng}\t{lines[odd[(odd.index(i) + 1) % len(odd)]][1]}\tother"
                for i, (eng, own) in enumerate(lines)
            ]
            (root / lang / "train.tsv").write_text("\n".join(train) + "\n")
            (root / lang / "dev.tsv").write_text("\n".join(test[:40]) + "\n")
    return root


# Tuned on this task: a tiny model fits the 50 training pairs within 60 steps at this rate.
TASK_SETTINGS = {
    "pairs.train_language": TRAIN_LANGUAGE,
    "pairs.max_length": 64,
    "pairs.batch_size": 16,
    "pairs.learning_rate": 3e-3,
    "pairs.layer_decay": 0.9,
    "pairs.eval_every_steps": -1,
    "model.dropout_rate": 0.0,
    "model.attention_dropout_rate": 0.0,
    "train.steps": 60,
    "train.log_every": 20,
}


def task_config(init_path, data_dir, **overrides):
    cfg = default_config()
    cfg.tasks = "pairs"
    cfg.init.path = str(init_path)
    cfg.data.dir = str(data_dir)
    for key, value in {**TASK_SETTINGS, **overrides}.items():
        section, name = key.replace("__", ".").split(".")
        cfg[section][name] = value
    return cfg


def run(cfg, out, devices=None):
    """The `pairs` task's results (None: it stopped short)."""
    finished = suite.run(resolve(cfg), out, devices)
    return None if finished is None else finished.tasks["pairs"]


def defaults():
    """Fine-tuning's default config for the `pairs` task, with placeholders for the paths it
    requires (the optimizer tests read neither)."""
    cfg = default_config()
    cfg.init.path, cfg.data.dir, cfg.tasks = "model", "pairs", "pairs"
    return cfg


def test_fine_tuning_from_the_cli_fits_the_training_language_and_reports_every_language(
    veco_folder, task_dir, tmp_path
):
    """Plugged out (`model.plug_in=out`) on a model that has the cross-attention: it stays
    unused, as in VECO's plug-out fine-tuning."""
    command = [
        sys.executable, "-m", "xlpretrain.finetune", "run",
        "--config", str(REPO / "configs/finetune_pairs.py"), f"--init={veco_folder}",
        f"--data={task_dir}", f"--out={tmp_path}",
        *(f"--config.{key}={value}" for key, value in TASK_SETTINGS.items()),
        "--config.model.plug_in=out",
    ]  # fmt: skip
    process = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    results = json.loads((tmp_path / "pairs" / "results.json").read_text())
    assert results["plug_in"] is False and results["kind"] == "sequence_classification"
    assert set(results["languages"]) == {TRAIN_LANGUAGE, *OTHER_LANGUAGES}
    for lang, result in results["languages"].items():
        assert 0.0 <= result["metric"] <= 100.0 and result["chance"] == 50.0, lang
        assert result["n"] % 2 == 0 and result["n"] >= 80, lang  # both labels per paragraph
        assert f"{lang} " in process.stdout
        written = (tmp_path / "predictions" / "pairs" / f"test-{lang}.tsv").read_text().split()
        assert len(written) == result["n"] and set(written) <= {"other", "translation"}
    # 50 balanced pairs: chance is 50 %; with these settings seeds 0-7 all reach >= 94 %.
    assert results["train"]["metric"] >= 80.0 and results["train"]["chance"] == 50.0, results
    steps = [json.loads(line)["step"] for line in (tmp_path / "pairs" / "metrics.jsonl").open()]
    assert steps == [20, 40, 60]


@pytest.fixture(scope="module")
def demo_pairs(tmp_path_factory) -> pathlib.Path:
    """The demo corpus's translation-or-not task, written as docs/finetune.md writes it
    (`demo_corpus --out DIR --pairs PAIRS`; the corpus from the tests' cache)."""
    out = tmp_path_factory.mktemp("demo") / "pairs"
    demo_corpus_cli.main(["--out", str(demo_corpus.default_demo_cache_dir()), "--pairs", str(out)])
    return out


def read_tsv(path: pathlib.Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]


def test_demo_pairs_are_held_out_balanced_and_hard(demo_pairs):
    """Per pair file of the corpus, `train.tsv` is built from its training lines and `test.tsv`
    from its held-out lines, sharing no text; every line is once a translation and once other,
    and the other's hypothesis is the second side of a nearby line of the same file and split,
    none of whose neighbours is closer in length."""
    corpus = demo_corpus.default_demo_cache_dir()
    folders = sorted(p.name for p in demo_pairs.iterdir())
    assert folders == sorted(p.stem for p in (corpus / "parallel").glob("*.tsv"))
    assert len(folders) == 39
    for name in folders:
        files = {
            "train": corpus / "parallel" / f"{name}.tsv",
            "test": corpus / "held_out" / "parallel" / f"{name}.tsv",
        }
        texts = {}
        for split, source in files.items():
            rows = read_tsv(demo_pairs / name / f"{split}.tsv")
            lines = [tuple(line) for line in read_tsv(source)]
            positives = [(a, b) for a, b, label in rows if label == "translation"]
            negatives = [(a, b) for a, b, label in rows if label == "other"]
            assert len(positives) == len(negatives) == len(rows) / 2, (name, split)
            assert [a for a, _ in negatives] == [a for a, _ in positives]
            assert set(positives) <= set(lines) and len(set(positives)) == len(positives)
            if split == "train":
                assert positives == lines, name  # every training line is used
            else:  # every held-out line sharing no text with the training lines
                assert positives == [line for line in lines if not texts["train"] & set(line)]
            seconds = [b for _, b in positives]  # the lines used, in their order
            near = translation_pairs.NEIGHBOURS
            for i, ((first, own), (_, other)) in enumerate(zip(positives, negatives, strict=True)):
                window = seconds[max(0, i - near) : i + near + 1]
                assert other != own and other in window, (name, split, first)
                closest = min(abs(len(b) - len(own)) for b in window if b != own)
                assert abs(len(other) - len(own)) == closest, (name, split, first)
            texts[split] = {text for row in rows for text in row[:2]}
        assert not texts["train"] & texts["test"], name


def test_the_demo_example_reports_accuracy_beside_chance_per_pair(
    veco_folder, demo_pairs, tmp_path, caplog
):
    """docs/finetune.md's example (`configs/finetune_pairs.py:demo`, trained on en-de, every
    pair evaluated) on a tiny model, a few steps: results.json and the closing log give each
    pair's accuracy beside its chance, the majority label's share of its test file (50 % but
    for en-fr, whose test file here lacks ten of its negatives)."""
    sys.path.insert(0, str(REPO / "configs"))
    import finetune_pairs

    data = tmp_path / "pairs"
    data.mkdir()
    for pair in demo_pairs.iterdir():
        (data / pair.name).symlink_to(pair)
    (data / "en-fr").unlink()
    (data / "en-fr").mkdir()
    test = read_tsv(demo_pairs / "en-fr" / "test.tsv")
    test = [row for i, row in enumerate(test) if i >= 20 or row[2] == "translation"]
    (data / "en-fr" / "test.tsv").write_text("".join("\t".join(row) + "\n" for row in test))
    cfg = finetune_pairs.get_config("demo")
    cfg.init.path, cfg.data.dir, cfg.model.plug_in = str(veco_folder), str(data), "out"
    cfg.train.update(steps=4, log_every=2)
    with caplog.at_level("INFO", logger="xlpretrain"):
        results = run(cfg, tmp_path / "run")
    assert json.loads((tmp_path / "run" / "pairs" / "results.json").read_text()) == results
    assert results["train_language"] == "en-de"
    assert set(results) == {
        "task", "kind", "plug_in", "steps", "train_language", "train_rows", "selected_step", "dev",
        "train", "languages", "average", "average_chance",
    }  # fmt: skip
    assert results["train"]["chance"] == 50.0 and 0.0 <= results["train"]["metric"] <= 100.0
    assert len(results["languages"]) == 39
    for name, result in results["languages"].items():
        labels = [row[2] for row in read_tsv(data / name / "test.tsv")]
        chance = 100.0 * labels.count("translation") / len(labels)  # the majority label
        assert result["n"] == len(labels) and result["chance"] == chance, name
        assert (chance == 50.0) == (name != "en-fr") and 0.0 <= result["metric"] <= 100.0
        assert (
            f"pairs {name}: {result['metric']:.2f} (chance {chance:.2f}, {len(labels)} examples"
            in caplog.text
        )
    assert results["average_chance"] == np.mean(
        [r["chance"] for r in results["languages"].values()]
    )
    assert "(chance 50.00, 228 examples; the training language)" in caplog.text
    assert f"pairs: average over 39 languages {results['average']:.2f} (chance " in caplog.text


def test_a_pair_folder_gives_each_side_its_language(udhr_tokenizer_path):
    """A model with language embeddings reads folder `<l1>-<l2>` as premises in l1 and
    hypotheses in l2 (their ids in its languages.json), folder `<lang>` as both in lang, and
    refuses a user's folder naming a language it does not have (XTREME's: language 0)."""
    ids = task_run.LanguageIds(("de", "en", "fr"), embedded=True, named=True)
    assert ids("en-de") == (1, 0) and ids("en-fr") == (1, 2) and ids("fr") == (2, 2)
    assert task_run.folder_languages("zh-Hant-TW") == ("zh-Hant-TW", "zh-Hant-TW")
    with pytest.raises(DataError, match="data folder 'en-ru': 'ru' is not among the model's"):
        ids("en-ru")
    assert dataclasses.replace(ids, named=False)("en-ru") == (1, 0)
    encoding = Encoding(
        Tokenizer.load(udhr_tokenizer_path), ("no", "yes"), BERT.pair_layout, 32,
        lang_ids=ids("en-de"),
    )  # fmt: skip
    rows = classification.encode([PairExample("a b c", "x y", "yes")], encoding)
    batch, length = rows.batch(np.array([0])), len(rows.rows[0])
    sides = batch["side"][0, :length]
    assert sides.any() and (batch["lang_ids"][0, :length] == np.where(sides, 0, 1)).all()


# A few steps of VECO's plugged-in fine-tuning (`model.plug_in=auto`), French tested.
PLUGGED_IN = dict(train__steps=3, train__log_every=1, pairs__languages=("fra",))


@pytest.fixture(scope="module")
def one_device(veco_folder, task_dir, tmp_path_factory) -> tuple[dict, pathlib.Path]:
    """`PLUGGED_IN` run on one device: its results and output folder, which the plug-in test
    reads and the sharded run is compared with."""
    out = tmp_path_factory.mktemp("one")
    return run(task_config(veco_folder, task_dir, **PLUGGED_IN), out, jax.devices()[:1]), out


def test_plug_in_fine_tuning_of_a_cross_attention_model(one_device):
    results, _ = one_device
    assert results["plug_in"] is True  # model.plug_in=auto: the model has cross-attention
    assert list(results["languages"]) == ["fra"]
    assert 0.0 <= results["languages"]["fra"]["metric"] <= 100.0


def encode(tokenizer, firsts, seconds, max_length, plug_in, layout=None):
    extra = {"layout": layout} if layout else {}
    labels = np.zeros(len(firsts), np.int32)
    return pairs_lib.encode_texts(
        firsts, seconds, labels, tokenizer, max_length=max_length, plug_in=plug_in, **extra
    )


def test_rows_plugged_in_and_out(udhr_tokenizer_path):
    tokenizer = Tokenizer.load(udhr_tokenizer_path)
    x, y = (tokenizer.encode(text).tolist() for text in ("a b c d e f g h", "x y"))
    length = len(x) + len(y) + 4
    out = encode(tokenizer, ["a b c d e f g h"], ["x y"], 32, plug_in=False)
    row = out.batch(np.array([0, -1]))
    assert row["input_ids"][0, :length].tolist() == [0, *x, 2, 2, *y, 2]
    assert row["positions"][0, :length].tolist() == list(range(2, 2 + length))
    assert row["segment_ids"][0].tolist() == [1] * length + [0] * (32 - length)
    assert row["side"][0, :length].tolist() == [0] * (len(x) + 2) + [1] * (len(y) + 2)
    assert row["pred_weights"].tolist() == [1.0, 0.0] and row["input_ids"][1].tolist() == [1] * 32

    plugged = encode(tokenizer, ["a b c d e f g h"], ["x y"], 32, plug_in=True)
    row = plugged.batch(np.array([0]))
    first, second = len(x) + 2, len(y) + 2
    assert row["input_ids"][0, :length].tolist() == [0, *x, 2, 0, *y, 2]
    assert row["positions"][0, :length].tolist() == [*range(2, 2 + first), *range(2, 2 + second)]
    assert row["segment_ids"][0, :length].tolist() == [1] * first + [2] * second
    assert row["pair_ids"][0].tolist() == [1] * length + [0] * (32 - length)
    assert row["side"][0, :length].tolist() == [0] * first + [1] * second

    # BERT's layout: [CLS] x [SEP] y [SEP], token type 1 on y [SEP]; one token more for text.
    bert = encode(tokenizer, ["a b c d e f g h"], ["x y"], 32, False, layout=BERT.pair_layout)
    row = bert.batch(np.array([0]))
    assert row["input_ids"][0, : length - 1].tolist() == [0, *x, 2, *y, 2]
    assert row["token_types"][0].tolist() == [0] * (len(x) + 2) + [1] * (len(y) + 1) + [0] * (
        33 - length
    )
    assert not out.batch(np.array([0]))["token_types"].any()  # XLM-R's: none

    # Truncation to 10 tokens (6 + 4 special): the longer side gives up its tokens first, and
    # when both are longer than half, each keeps half.
    short = encode(tokenizer, ["a b c d e f g h"] * 2, ["yes", "x y"], 10, plug_in=False)
    yes = tokenizer.encode("yes").tolist()
    assert len(yes) == 2 and len(y) == 4
    assert short.rows[0].tolist() == [0, *x[:4], 2, 2, *yes, 2]
    assert short.rows[1].tolist() == [0, *x[:3], 2, 2, *y[:3], 2]


def pairs_optimizer(cfg, params, num_layers):
    """The `pairs` task's optimizer as its run builds it (100 training rows)."""
    return make_finetune_optimizer(resolve(cfg).task_plan("pairs", 100).optim, params, num_layers)


def test_layer_wise_decay_scales_each_stacked_layer():
    config = ModelConfig(vocab_size=16, hidden_size=8, num_layers=3, num_heads=2, mlp_dim=16)
    backbone = {k: v for k, v in folder.abstract_params(config).items() if k != "lm_head"}
    params = jax.tree.map(
        lambda s: np.ones(s.shape, np.float32),
        {"backbone": backbone, "head_out": {"kernel": jax.ShapeDtypeStruct((8, 2), np.float32)}},
    )
    factors = layer_decay_factors(params, num_layers=3, decay=0.5)
    query = factors["backbone"]["encoder"]["layers"]["attention"]["query"]["kernel"]
    np.testing.assert_allclose(query.ravel(), [0.125, 0.25, 0.5])  # layers 0, 1, 2: 0.5^(3-i)
    assert query.shape == (3, 1, 1, 1)
    assert factors["backbone"]["embeddings"]["word_embeddings"]["embedding"] == 0.5**4
    assert factors["head_out"]["kernel"] == 1.0

    # Through the optimizer: the updates with decay 0.5 are those without, times the factors.
    rng = np.random.default_rng(0)
    grads = jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32), params)

    def updates(decay):
        cfg = defaults()
        cfg.pairs.layer_decay, cfg.pairs.warmup_fraction = decay, 0.0
        tx = pairs_optimizer(cfg, params, 3)
        return tx.update(grads, tx.init(params), params)[0]

    decayed, full = jax.jit(lambda: (updates(0.5), updates(1.0)))()
    scaled = jax.tree.map(lambda u, f: u * f, full, factors)
    for got, want in zip(jax.tree.leaves(decayed), jax.tree.leaves(scaled), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)
    assert all(np.abs(u).max() > 0 for u in jax.tree.leaves(decayed))


def test_optimizer_is_pretrainings_with_warmup_as_a_fraction():
    """With no layer decay, the updates are pre-training's optimizer's (`adamw_from` its
    `optim` section) for the same numbers, its warm-up `<task>.warmup_fraction` × `train.steps`
    steps."""
    params = {
        "backbone": {"encoder": {"layers": {"kernel": np.ones((2, 3, 3), np.float32)}}},
        "head_out": {"kernel": np.ones((3, 2), np.float32), "bias": np.zeros(2, np.float32)},
    }
    cfg = defaults()
    cfg.pairs.layer_decay, cfg.pairs.warmup_fraction, cfg.train.steps = 1.0, 0.25, 8
    optim = resolve(cfg).task_plan("pairs", 100).optim
    pretraining = config_lib.default_config()
    pretraining.train.steps, pretraining.optim.warmup_steps = 8, 2
    for key in ("learning_rate", "weight_decay"):
        pretraining.optim[key] = cfg.pairs[key]
    for key in ("b1", "b2", "eps", "clip_norm"):
        pretraining.optim[key] = cfg.optim[key]
    txs = [
        make_finetune_optimizer(optim, params, num_layers=2),
        adamw_from(OptimizerSettings.of(pretraining)),
    ]
    states = [tx.init(params) for tx in txs]
    rng = np.random.default_rng(0)
    for _ in range(4):
        grads = jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32), params)
        (ours, states[0]), (theirs, states[1]) = (
            tx.update(grads, state, params) for tx, state in zip(txs, states, strict=True)
        )
        for got, want in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
            np.testing.assert_array_equal(got, want)
    assert all(np.abs(u).max() > 0 for u in jax.tree.leaves(ours))
    rates = [optim.learning_rates()(s) for s in (0, 1, 2, 8)]
    np.testing.assert_allclose(rates, np.array([0, 0.5, 1, 0]) * cfg.pairs.learning_rate, 1e-6)


def test_config_and_data_errors(veco_folder, task_dir, tmp_path):
    cfg = task_config(veco_folder, task_dir)
    cfg.pairs.layer_decy = 0.5
    with pytest.raises(ConfigError, match="'pairs.layer_decy': unknown key"):
        resolve(cfg)
    cfg = task_config(veco_folder, task_dir)
    cfg.objectives = ml_collections.ConfigDict({"mmlm": 1.0})  # a pre-training section
    with pytest.raises(ConfigError, match="'objectives': unknown section"):
        resolve(cfg)
    with pytest.raises(ConfigError, match="'pairs.layer_decay': must be in"):
        resolve(task_config(veco_folder, task_dir, pairs__layer_decay=1.5))
    mistyped = task_config(veco_folder, task_dir).to_dict()
    mistyped["train"]["steps"] = "60"
    with pytest.raises(ConfigError, match="'train.steps': expected int"):
        resolve(ml_collections.ConfigDict(mistyped))
    with pytest.raises(ConfigError, match="'train.grad_accum': pairs.batch_size=16 is not"):
        resolve(task_config(veco_folder, task_dir, train__grad_accum=3))
    with pytest.raises(ConfigError, match=r"'pairs.batch_size': 16 / train.grad_accum=2 = 8 rows"):
        plan = resolve(task_config(veco_folder, task_dir, train__grad_accum=2))
        plan.task_plan("pairs", 100).check_batch_divides({"data": 4, "fsdp": 4})
    with pytest.raises(ConfigError, match="'train.stop_at': must be -1 or in"):
        resolve(task_config(veco_folder, task_dir, train__stop_at=61))
    with pytest.raises(ConfigError, match="'data.dir': required"):
        resolve(task_config(veco_folder, ""))
    with pytest.raises(ConfigError, match="'pairs.train_language': required"):
        resolve(task_config(veco_folder, task_dir, pairs__train_language=""))
    with pytest.raises(ConfigError, match="'model.plug_in': 'in' needs a cross-attention"):
        task_run.resolve_plug_in("in", cross_attention=False)
    assert task_run.resolve_plug_in("auto", cross_attention=True)
    assert not task_run.resolve_plug_in("out", cross_attention=True)
    with pytest.raises(DataError, match=r"no file .*/deu/train.tsv \(sentence1<TAB>"):
        run(task_config(veco_folder, task_dir, pairs__train_language="deu"), tmp_path / "a")
    with pytest.raises(DataError, match="config key 'data.dir': no folder .*nosuch"):
        run(task_config(veco_folder, tmp_path / "nosuch"), tmp_path / "b")

    path = tmp_path / "bad.tsv"
    path.write_bytes(b"p\th\tyes\n\n\xff\xfe\th\tno\nonly two\tfields\np2\th2\tno\n")
    pairs, stats = read_pair_file(path, training=True)
    assert [(p.text_a, p.label) for p in pairs] == [("p", "yes"), ("p2", "no")]
    assert (stats.total, stats.empty, stats.invalid_utf8, stats.bad_fields) == (5, 1, 1, 1)


def test_each_epoch_reads_every_row_once_and_processes_split_the_rows():
    """A step's rows depend on (seed, step) alone: every row once per epoch in an order of the
    epoch's own, the same rows rebuilt in any order of steps, and two processes' rows together
    the one-process batch."""
    data = pairs_lib.Encoded(
        [np.array([0, i + 5, 2], np.int32) for i in range(10)],
        np.ones(10, np.int64),
        np.arange(10, dtype=np.int32) % 2,
        lang_ids=(0, 0),
        max_length=8,
        plug_in=False,
        pad_id=1,
    )

    def rows_of(batch):
        return (batch[TASK]["input_ids"][:, 1] - 5).tolist()

    batches = RowBatches(data, batch_size=4, seed=3)
    drawn = [rows_of(batches(step)) for step in range(5)]  # 20 rows: two epochs
    flat = sum(drawn, [])
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:]) == list(range(10))
    assert flat[:10] != flat[10:]  # each epoch has its own order
    fresh = RowBatches(data, batch_size=4, seed=3)
    assert [rows_of(fresh(step)) for step in (4, 2, 0)] == [drawn[4], drawn[2], drawn[0]]
    halves = [RowBatches(data, 4, 3, process_index=p, process_count=2) for p in (0, 1)]
    assert [rows_of(halves[0](s)) + rows_of(halves[1](s)) for s in range(5)] == drawn
    assert rows_of(RowBatches(data, 4, seed=4)(0)) != drawn[0]


def test_resumed_fine_tuning_equals_an_uninterrupted_one(veco_folder, task_dir, tmp_path):
    """Stopped after step 3 (`train.stop_at`) and run again, fine-tuning logs the losses of a
    run that never stopped and ends with its results: the state (dropout key included) and the
    input iterator are checkpointed together. The dev set is scored every `eval.every_steps`
    steps, and the best kept is the one that predicts."""
    settings = dict(
        train__steps=6,
        train__log_every=1,
        train__checkpoint_every=100,
        eval__every_steps=3,
        pairs__languages=("fra",),
        model__plug_in="out",
        model__dropout_rate=0.1,
    )
    whole = run(task_config(veco_folder, task_dir, **settings), tmp_path / "whole")
    halted = task_config(veco_folder, task_dir, train__stop_at=3, **settings)
    assert run(halted, tmp_path / "b") is None
    checkpoints = tmp_path / "b" / "pairs" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["3"]
    resumed = run(task_config(veco_folder, task_dir, **settings), tmp_path / "b")
    assert resumed == whole

    records = {name: read_metrics(tmp_path / name / "pairs") for name in ("whole", "b")}
    assert [r["step"] for r in records["b"]] == list(range(1, 7))
    for key in ("loss", "grad_norm", "accuracy/task", "learning_rate"):
        np.testing.assert_allclose(
            [r[key] for r in records["b"]], [r[key] for r in records["whole"]], rtol=1e-6
        )
    evaluated = [r for r in records["whole"] if "eval/dev" in r]
    assert [r["step"] for r in evaluated] == [3, 6]
    best = max(evaluated, key=lambda r: (r["eval/dev"], -r["step"]))
    assert (whole["selected_step"], whole["dev"]) == (best["step"], best["eval/dev"])


def test_sharded_accumulated_fine_tuning_equals_one_device(
    one_device, veco_folder, task_dir, tmp_path
):
    """On 2 × 2 × 2 devices (rows over data × fsdp, heads and MLP over tensor) with two
    micro-batches a step, VECO's plugged-in fine-tuning logs one device's losses, gradient
    norms and accuracies and ends with its results."""
    one, one_out = one_device
    sharded = task_config(
        veco_folder,
        task_dir,
        mesh__data=2,
        mesh__fsdp=2,
        mesh__tensor=2,
        train__grad_accum=2,
        **PLUGGED_IN,
    )
    assert run(sharded, tmp_path / "sharded") == one
    records = {
        name: read_metrics(out / "pairs")
        for name, out in (("one", one_out), ("sharded", tmp_path / "sharded"))
    }
    for key in ("loss", "grad_norm", "accuracy/task", "count/task"):
        np.testing.assert_allclose(
            [r[key] for r in records["sharded"]], [r[key] for r in records["one"]], rtol=2e-5
        )
