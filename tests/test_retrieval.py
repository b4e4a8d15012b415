"""Cross-lingual retrieval on a tiny pre-trained workdir: accuracy@1 both ways per pair file,
identical columns retrieve perfectly, language codes, the CLI and its errors; the same on
Tatoeba's file layout, and bitext-mining F1 on a BUCC-style set (the measures without a
model: test_mining.py)."""

import dataclasses
import json
import pathlib
import re
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

import xlpretrain
from tests.test_train import run as pretrain
from xlpretrain.api import Model
from xlpretrain.convert import folder
from xlpretrain.data.corpora.folders import ParallelSource
from xlpretrain.data.corpora.sources import DataError
from xlpretrain.eval import alignment
from xlpretrain.eval.retrieval import __main__ as retrieval

REPO = pathlib.Path(__file__).resolve().parents[1]
UDHR_PAIRS = ("eng-cmn_hans", "eng-deu_1996", "eng-fra")


@pytest.fixture(scope="module")
def workdir(udhr_run_config, tmp_path_factory) -> pathlib.Path:
    """A 2-layer model pre-trained with MMLM + TLM for a few steps."""
    path = tmp_path_factory.mktemp("pretrained")
    pretrain(udhr_run_config(train__steps=4), path, jax.devices()[:1])
    return path


@pytest.fixture(scope="module")
def model(workdir) -> Model:
    return xlpretrain.load(workdir)


@pytest.fixture(scope="module")
def data(udhr, tmp_path_factory) -> pathlib.Path:
    """`parallel/`: three UDHR pair files, and `eng-eng.tsv` whose two columns are the same
    (distinct) English paragraphs, plus one line without a tab."""
    root = tmp_path_factory.mktemp("retrieval")
    (root / "parallel").mkdir()
    for stem in UDHR_PAIRS:
        shutil.copy(udhr / "parallel" / f"{stem}.tsv", root / "parallel")
    source = ParallelSource.from_dir(udhr / "parallel", pairs=["eng-fra"])
    english = [source.line(("eng", "fra"), i)[0] for i in range(source.num_lines(("eng", "fra")))]
    assert len(set(english)) == len(english) > 30
    lines = [f"{text}\t{text}\n" for text in english] + ["a line without a tab\n"]
    (root / "parallel" / "eng-eng.tsv").write_text("".join(lines))
    return root


def test_accuracy_per_pair_both_ways_and_identical_columns(model, data):
    results = alignment.retrieval_accuracy(model, ParallelSource.from_dir(data / "parallel"))
    assert list(results["pairs"]) == ["eng-cmn_hans", "eng-deu_1996", "eng-eng", "eng-fra"]
    assert results["layer"] == 1 and results["pooling"] == "mean"  # the middle of 2 layers
    for stem, scores in results["pairs"].items():
        for key in ("l1_to_l2", "l2_to_l1", "mean"):
            assert 0.0 <= scores[key] <= 1.0, (stem, key)
        assert scores["n"] == 40, stem
    identical = results["pairs"]["eng-eng"]
    assert identical["l1_to_l2"] == identical["l2_to_l1"] == 1.0
    assert identical["skipped"] == 1 and results["pairs"]["eng-fra"]["skipped"] == 0
    means = [scores["l1_to_l2"] for scores in results["pairs"].values()]
    assert results["average"]["l1_to_l2"] == pytest.approx(sum(means) / len(means))

    first = alignment.retrieval_accuracy(
        model, ParallelSource.from_dir(data / "parallel", pairs=["eng-eng"]), max_lines=5, layer=0
    )
    assert first["layer"] == 0 and first["pairs"]["eng-eng"]["n"] == 5


def test_language_codes_go_to_models_with_language_embeddings(model, data):
    source = ParallelSource.from_dir(data / "parallel", pairs=["eng-fra"])

    @dataclasses.dataclass
    class Spy:
        config: object
        calls: list

        def encode(self, texts, langs=None, **options):
            self.calls.append(langs)
            return model.encode(texts, **options)

    plain = Spy(model.config, [])
    alignment.retrieval_accuracy(plain, source, max_lines=3)
    assert plain.calls == [None, None]
    with_languages = Spy(dataclasses.replace(model.config, num_languages=2), [])
    alignment.retrieval_accuracy(with_languages, source, max_lines=3)
    assert with_languages.calls == ["eng", "fra"]


def test_cli_json_is_keyed_by_file_stem_and_the_table_lists_every_pair(
    workdir, model, data, tmp_path, capsys
):
    command = [sys.executable, "-m", "xlpretrain.eval.retrieval", "--workdir", str(workdir)]
    result = subprocess.run(
        [*command, "--data", str(data), "--json", "--pairs", "eng-eng,eng-fra"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = json.loads(result.stdout)
    assert set(output["pairs"]) == {"eng-eng", "eng-fra"}
    assert output["pairs"]["eng-eng"]["l1_to_l2"] == 1.0
    assert "skipped 1" in result.stderr  # the line without a tab, reported

    # A checkpoint folder works as --workdir, and --data may be the parallel/ folder itself.
    folder.write(folder.Pretrained(model.config, model.params, model.tokenizer), tmp_path / "ckpt")
    retrieval.main(
        [
            "--workdir",
            str(tmp_path / "ckpt"),
            "--data",
            str(data / "parallel"),
            "--pairs",
            "eng-fra",
        ]
    )
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "retrieval accuracy@1, layer 1, mean pooling"
    assert table[2].split()[0] == "eng-fra" and table[-1].split()[0] == "average"
    fra = output["pairs"]["eng-fra"]
    assert table[2].split()[1:4] == [f"{fra[k]:.4f}" for k in ("l1_to_l2", "l2_to_l1", "mean")]


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "data path .*/missing does not exist"),
        ("empty", "holds neither a parallel/ folder nor <l1>-<l2>.tsv files"),
        ("empty parallel/", r"no \*.tsv file in data folder .*/parallel"),
    ],
)
def test_missing_or_empty_data_is_a_clear_error(workdir, tmp_path, case, message):
    path = tmp_path / "missing" if case == "missing" else tmp_path
    if case == "empty parallel/":
        (tmp_path / "parallel").mkdir()
    with pytest.raises(DataError, match=message):
        retrieval.main(["--workdir", str(workdir), "--data", str(path)])


# --- The public benchmarks' layouts: Tatoeba and BUCC ----------------------------------------


def english_and_french(data) -> tuple[list[str], list[str]]:
    """The eng-fra pair file's two columns (40 lines)."""
    source = ParallelSource.from_dir(data / "parallel", pairs=["eng-fra"])
    lines = [source.line(("eng", "fra"), i) for i in range(source.num_lines(("eng", "fra")))]
    return [eng for eng, _ in lines], [fra for _, fra in lines]


def test_tatoeba_files_score_as_their_tsv_does(workdir, data, tmp_path, capsys):
    """`tatoeba.fra-eng.{fra,eng}` hold eng-fra.tsv's columns, l1 first: the same scores, the
    directions swapped. `tatoeba.enx-eng` has identical sides: every line retrieves its own."""
    english, french = english_and_french(data)
    for stem, first, second in (("fra-eng", french, english), ("enx-eng", english, english)):
        l1, l2 = stem.split("-")
        (tmp_path / f"tatoeba.{stem}.{l1}").write_text("".join(f"{t}\n" for t in first))
        (tmp_path / f"tatoeba.{stem}.{l2}").write_text("".join(f"{t}\n" for t in second))
    command = ["--workdir", str(workdir), "--data", str(tmp_path), "--json"]
    retrieval.main([*command, "--format", "tatoeba"])
    tatoeba = json.loads(capsys.readouterr().out)
    retrieval.main(["--workdir", str(workdir), "--data", str(data), "--json", "--pairs", "eng-fra"])
    tsv = json.loads(capsys.readouterr().out)["pairs"]["eng-fra"]

    assert list(tatoeba["pairs"]) == ["enx-eng", "fra-eng"]
    fra = tatoeba["pairs"]["fra-eng"]
    assert (fra["l1_to_l2"], fra["l2_to_l1"], fra["n"]) == (tsv["l2_to_l1"], tsv["l1_to_l2"], 40)
    assert tatoeba["pairs"]["enx-eng"]["mean"] == 1.0
    assert tatoeba["average"]["mean"] == pytest.approx((fra["mean"] + 1.0) / 2)


def write_bucc_set(folder, data) -> None:
    """`xx-en.sample`: 30 English paragraphs a side, 20 of them on both sides (the gold pairs),
    the English side shuffled, so that nothing is aligned by position."""
    english, _ = english_and_french(data)
    xx = [(f"xx-{i:09d}", english[i]) for i in range(30)]
    en = [(f"en-{i:09d}", english[i]) for i in range(10, 40)]
    order = np.random.default_rng(0).permutation(len(en))
    en = [en[i] for i in order]
    gold = [f"xx-{i:09d}\ten-{i:09d}" for i in range(10, 30)]
    for suffix, lines in (("xx", xx), ("en", en)):
        (folder / f"xx-en.sample.{suffix}").write_text("".join(f"{i}\t{t}\n" for i, t in lines))
    (folder / "xx-en.sample.gold").write_text("".join(f"{line}\n" for line in gold))


def test_bucc_mining_cli_reports_f1_at_the_best_and_at_a_given_threshold(
    workdir, model, data, tmp_path, capsys
):
    write_bucc_set(tmp_path, data)
    command = ["--workdir", str(workdir), "--data", str(tmp_path), "--format", "bucc"]
    retrieval.main([*command, "--json"])
    best = json.loads(capsys.readouterr().out)
    assert (best["layer"], best["pooling"], best["margin_neighbours"]) == (1, "mean", 4)
    assert best["threshold_from"] == "gold"
    scores = best["sets"]["xx-en.sample"]
    assert (scores["gold"], scores["n_l1"], scores["n_l2"]) == (20, 30, 30)
    assert scores["mined"] <= scores["candidates"] <= 30
    # The gold pairs are identical sentences (cosine 1), each other's best candidates: all mined.
    assert scores["f1"] == pytest.approx(
        2 * scores["precision"] * scores["recall"] / (scores["precision"] + scores["recall"])
    )
    assert scores["recall"] == 1.0

    # The best threshold, given, mines the same pairs.
    retrieval.main([*command, "--json", "--threshold", str(scores["threshold"])])
    given = json.loads(capsys.readouterr().out)
    assert given["threshold_from"] == "given"
    assert given["sets"]["xx-en.sample"] == pytest.approx(scores)

    retrieval.main(command)
    table = capsys.readouterr().out.splitlines()
    assert table[0] == (
        "bitext mining, layer 1, mean pooling, ratio margin k=4, threshold best on each set's gold"
    )
    assert table[2].split()[:4] == ["xx-en.sample"] + [
        f"{scores[key]:.4f}" for key in ("precision", "recall", "f1")
    ]


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--format", "tatoeba"], "no tatoeba.<l1>-<l2>.<l1> and tatoeba.<l1>-<l2>.<l2> files"),
        (["--format", "bucc"], r"no <l1>-<l2>.<split>.gold file in"),
        (["--threshold", "1.1"], "--threshold applies to --format bucc only"),
        ([], "for Tatoeba or BUCC files, pass --format tatoeba or --format bucc"),
    ],
)
def test_benchmark_format_errors(workdir, tmp_path, capsys, arguments, message):
    (tmp_path / "notes.txt").write_text("nothing to score\n")
    command = ["--workdir", str(workdir), "--data", str(tmp_path), *arguments]
    if arguments[:1] == ["--threshold"]:
        with pytest.raises(SystemExit) as exit_info:
            retrieval.main(command)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    else:
        with pytest.raises(DataError, match=re.escape(message)):
            retrieval.main(command)
