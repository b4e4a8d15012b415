"""Cross-lingual retrieval on a tiny pre-trained workdir: accuracy@1 both ways per pair file,
identical columns retrieve perfectly, language codes, the CLI and its errors."""

import dataclasses
import json
import pathlib
import shutil
import subprocess
import sys

import jax
import pytest

import xlpretrain
from tests.test_train import run as pretrain
from xlpretrain.api import Model
from xlpretrain.convert import folder
from xlpretrain.data.folders import ParallelSource
from xlpretrain.data.sources import DataError
from xlpretrain.eval import alignment, retrieval

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
