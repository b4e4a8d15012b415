"""XTREME's official numbers (`python -m xlpretrain.finetune score`, and its old name `python -m
xlpretrain.eval.xtreme score`): on xtreme's own mock
submission, every key and value of the JSON that its evaluate.py writes, for XTREME and XTREME-R
(tests/data/xtreme_mock/README.md says how the expected files were made); MLQA's per-language
answer normalisation and SQuAD's exact match and F1 by hand; span F1 rather than tag accuracy;
tasks with fewer languages, folders the version does not know, bad inputs named by file; and
the command line end to end."""

import json
import math
import pathlib
import shutil
import subprocess
import sys

import pytest

from xlpretrain.eval.xtreme import answers, score, tables

REPO = pathlib.Path(__file__).resolve().parents[1]
MOCK = REPO / "tests" / "data" / "xtreme_mock"
# The tasks of the mock data that evaluate.py scores under XTREME-R: the others lack XTREME-R's
# added languages (it stops at the first missing file), pawsx and bucc2018 are not XTREME-R's.
XTREME_R_SCORABLE = ("xnli", "mewslix", "mlqa", "tydiqa", "pawsx", "bucc2018")


def expected(version: str) -> dict:
    return json.loads((MOCK / f"expected_{version}.json").read_text())


def assert_same_json(got: dict, want: dict, where: str = "") -> None:
    """The same keys in the same order, every number within 1e-6."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), (where, list(got), list(want))
        for key in want:
            assert_same_json(got[key], want[key], f"{where}/{key}")
    else:
        assert math.isclose(got, want, rel_tol=0, abs_tol=1e-6), (where, got, want)


def mock_subset(root: pathlib.Path, tasks) -> pathlib.Path:
    """A copy of the mock data holding only `tasks`."""
    for side in ("labels", "predictions"):
        for task in tasks:
            shutil.copytree(MOCK / side / task, root / side / task)
    return root


def write(path: pathlib.Path, text: str) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# --- evaluate.py's numbers on its mock data ----------------------------------------------------


def test_xtreme_on_the_mock_data_is_evaluate_py_s_json():
    report = score.score(MOCK / "predictions", MOCK / "labels", "xtreme")
    assert_same_json(report.results, expected("xtreme"))
    assert report.missing == {}
    assert report.ignored == ("mewslix/ (not an xtreme task)",)


def test_xtreme_r_on_the_mock_data_evaluate_py_can_score_is_its_json(tmp_path):
    root = mock_subset(tmp_path, XTREME_R_SCORABLE)
    report = score.score(root / "predictions", root / "labels", "xtreme-r")
    assert_same_json(report.results, expected("xtreme-r"))
    assert report.ignored == ("bucc2018/ (not an xtreme-r task)", "pawsx/ (not an xtreme-r task)")


def test_xtreme_r_scores_the_tasks_that_lack_its_added_languages_outside_the_groups():
    """evaluate.py stops at panx/test-qu.tsv; here each task scores the languages it has."""
    report = score.score(MOCK / "predictions", MOCK / "labels", "xtreme-r")
    assert report.missing == {
        "panx": ("qu", "pl", "uk", "az", "lt", "pa", "gu", "ro"),
        "udpos": ("lt", "pl", "uk", "wo", "ro"),
        "tatoeba": ("az", "lt", "pl", "uk", "ro"),
        "xquad": ("ro",),
    }
    for task, scores in expected("xtreme-r").items():
        assert_same_json(report.results[task], scores, task)
    for task in report.missing:  # XTREME's languages, the same averages
        assert_same_json(report.results[task], expected("xtreme")[task], task)
    assert not set(report.results) & {"all_task", *score.VERSIONS["xtreme-r"].groups}


# --- MLQA's and SQuAD's answers ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, language, normalised",
    [
        ("The cat!", "en", "cat"),
        ("la casa", "en", "la casa"),  # Spanish articles only in Spanish
        ("El perro de la casa", "es", "perro de casa"),
        ("Los niños y unas niñas", "es", "niños y niñas"),
        ("Der Hund und die Katze, ein Tier", "de", "hund und katze tier"),
        ("cái bàn của tôi là những", "vi", "bàn tôi"),
        ("الكتاب", "ar", "كتاب"),
        ("قال الرجل", "ar", "ق رجل"),  # every ال, inside a word too, as MLQA's regex does
        ("Hindi  text — here", "hi", "hindi text here"),  # Unicode punctuation, no articles
        ("«hola», dijo", "es", "hola dijo"),
        ("emf是电动势。", "zh", "emf 是 电 动 势"),  # characters; Latin runs at whitespace
        ("電動勢（英語：electromotive force）", "zh", "電 動 勢 英 語 electromotive force"),
        ("电动势 A the", "zh", "电 动 势 a the"),
    ],
)
def test_mlqa_normalises_each_language_as_its_script_does(text, language, normalised):
    assert answers.normalize_mlqa(text, language) == normalised


def test_squad_removes_english_articles_and_ascii_punctuation_only():
    assert answers.normalize_squad("The  Eiffel Tower!") == "eiffel tower"
    assert answers.normalize_squad("«El» perro") == "«el» perro"


def test_mlqa_refuses_a_language_it_has_no_normalisation_for():
    with pytest.raises(ValueError, match="not 'fr'"):
        answers.normalize_mlqa("le chat", "fr")


def test_squad_exact_match_and_f1_take_the_best_gold_answer_and_zero_for_the_unanswered():
    questions = [
        ("q1", ["Eiffel Tower", "the tower"]),  # "the Eiffel Tower": exact after normalising
        ("q2", ["Eiffel Tower"]),  # "Eiffel": P 1, R 1/2, F1 2/3
        ("q3", ["Paris"]),  # "London": nothing in common
        ("q4", ["Berlin"]),  # unanswered
    ]
    predictions = {"q1": "the Eiffel Tower", "q2": "Eiffel", "q3": "London"}
    scores = score.squad_em_f1(questions, predictions)
    assert scores["exact_match"] == pytest.approx(100 * 1 / 4)
    assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3) / 4)


def test_mlqa_exact_match_removes_the_answer_language_s_articles():
    questions = [("q", ["la casa"])]
    assert score.mlqa_em_f1(questions, {"q": "casa"}, "es")["exact_match"] == 100
    assert score.mlqa_em_f1(questions, {"q": "casa"}, "en")["exact_match"] == 0


# --- Other metrics -----------------------------------------------------------------------------


def test_span_f1_counts_whole_spans_not_tags():
    labels = [["B-PER", "I-PER", "O", "B-LOC"]]
    predictions = [["B-PER", "O", "O", "B-LOC"]]  # 3 of 4 tags, 1 of 2 spans
    tag_accuracy = score.accuracy(labels[0], predictions[0])["accuracy"]
    scores = score.span_f1(labels, predictions)
    assert tag_accuracy == 75
    assert scores == {"f1": 50, "precision": 50, "recall": 50}


def test_bucc_f1_compares_sets_of_pairs():
    gold = ["de-1\ten-1", "de-2\ten-2"]
    scores = score.bucc_f1(gold, ["de-2\ten-2", "de-1\ten-9", "de-2\ten-2"])
    assert scores["precision"] == 50 and scores["recall"] == 50  # 1 of 2 mined, of 2 gold
    assert score.bucc_f1(gold, [])["f1"] == 0


def test_mewslix_reciprocal_rank_of_the_gold_entity_in_the_first_20():
    gold = {"m1": ["Q1"], "m2": ["Q2 "], "m3": ["Q3"], "m4": ["Q4"]}
    predictions = {"m1": ["Q1"], "m2": ["Q9", "Q2"], "m3": [f"Q{i}" for i in range(5, 25)] + ["Q3"]}
    assert score.mewslix_map20(gold, predictions)["map@20"] == pytest.approx(100 * 1.5 / 4)


# --- Which files and folders are scored --------------------------------------------------------


def test_a_task_with_fewer_languages_scores_those_and_leaves_its_group(tmp_path):
    root = mock_subset(tmp_path, ["pawsx", "xnli"])
    for side in ("labels", "predictions"):
        for path in (root / side / "xnli").glob("test-*.tsv"):
            if path.stem not in ("test-en", "test-de"):
                path.unlink()
    report = score.score(root / "predictions", root / "labels")
    xnli = expected("xtreme")["xnli"]["accuracy"]
    assert report.results["xnli"]["accuracy"] == {"de": xnli["de"], "en": xnli["en"]}
    assert report.results["xnli"]["avg_accuracy"] == pytest.approx((xnli["de"] + xnli["en"]) / 2)
    assert len(report.missing["xnli"]) == 13
    assert "classification" not in report.results
    assert_same_json(report.results["pawsx"], expected("xtreme")["pawsx"])


def test_a_language_outside_the_version_s_list_is_scored_but_not_averaged(tmp_path):
    root = mock_subset(tmp_path, ["pawsx"])
    write(root / "labels" / "pawsx" / "test-xx.tsv", "1\n0\n")
    write(root / "predictions" / "pawsx" / "test-xx.tsv", "1\n1\n")
    write(root / "predictions" / "pawsx" / "test-yy.tsv", "1\n")  # no labels: not scored
    report = score.score(root / "predictions", root / "labels")
    assert report.results["pawsx"]["accuracy"]["xx"] == 50
    assert_same_json(
        {k: v for k, v in report.results["pawsx"].items() if k != "accuracy"},
        {k: v for k, v in expected("xtreme")["pawsx"].items() if k != "accuracy"},
    )
    assert report.ignored == ("pawsx/test-yy.tsv (only in predictions)",)


def test_unknown_task_folders_and_one_sided_ones_are_ignored(tmp_path):
    root = mock_subset(tmp_path, ["pawsx"])
    write(root / "labels" / "ner" / "test-en.tsv", "O\n")
    write(root / "predictions" / "ner" / "test-en.tsv", "O\n")
    shutil.copytree(MOCK / "labels" / "xnli", root / "labels" / "xnli")
    report = score.score(root / "predictions", root / "labels")
    assert list(report.results) == ["pawsx"]
    assert report.ignored == ("ner/ (not an xtreme task)", "xnli/ (only in labels)")


def test_xcopa_reads_each_line_s_label_and_lareqa_is_written_empty_as_evaluate_py_does(tmp_path):
    for side, labels in (("labels", "0 1 1 0"), ("predictions", "0 1 0 0")):
        rows = "".join(
            json.dumps({"label": int(label), "idx": i}) + "\n"
            for i, label in enumerate(labels.split())
        )
        write(tmp_path / side / "xcopa" / "test-et.jsonl", rows)
        write(tmp_path / side / "lareqa" / "test-en.json", "{}")
    report = score.score(tmp_path / "predictions", tmp_path / "labels", "xtreme-r")
    assert report.results["xcopa"]["accuracy"] == {"et": 75}
    assert report.results["lareqa"] == {}
    assert "lareqa/ (evaluate.py has no metric for it)" in report.ignored


# --- Bad inputs, named by file -----------------------------------------------------------------


def test_a_predictions_file_with_fewer_lines_than_its_labels_is_named(tmp_path):
    root = mock_subset(tmp_path, ["xnli"])
    path = root / "predictions" / "xnli" / "test-en.tsv"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))
    with pytest.raises(ValueError, match=r"xnli/test-en.tsv has 9 lines, .*/test-en.tsv has 10"):
        score.score(root / "predictions", root / "labels")


def test_a_sentence_with_another_number_of_tags_is_named_by_file_and_line(tmp_path):
    write(tmp_path / "labels" / "panx" / "test-en.tsv", "B-PER\nO\n\nO\nB-LOC\nO\n\n")
    write(tmp_path / "predictions" / "panx" / "test-en.tsv", "B-PER\nO\n\nO\nB-LOC\n\n")
    with pytest.raises(ValueError, match=r"predictions/panx/test-en.tsv:4: sentence 2 has 2 tags"):
        score.score(tmp_path / "predictions", tmp_path / "labels")


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"q1": "a",', r"test-en.json:1: not JSON"),
        ('{"q1": ["a"]}', r"test-en.json: expected a JSON object of question id: answer text"),
    ],
)
def test_unreadable_predictions_are_named(tmp_path, text, message):
    mock_subset(tmp_path, ["tydiqa"])
    write(tmp_path / "predictions" / "tydiqa" / "test-en.json", text)
    with pytest.raises(ValueError, match=message):
        score.score(tmp_path / "predictions", tmp_path / "labels")


def test_an_mlqa_language_without_a_normalisation_is_named_by_file(tmp_path):
    for side in ("labels", "predictions"):
        write(
            tmp_path / side / "mlqa" / "test-fr.json",
            (MOCK / side / "mlqa" / "test-en.json").read_text(),
        )
    with pytest.raises(
        ValueError, match=r"predictions/mlqa/test-fr.json: MLQA normalises .* not 'fr'"
    ):
        score.score(tmp_path / "predictions", tmp_path / "labels")


def test_a_missing_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="labels folder .*nowhere does not exist"):
        score.score(MOCK / "predictions", tmp_path / "nowhere")


# --- The command line --------------------------------------------------------------------------


def run(
    *arguments: str, code: str | None = None, program: str = "xlpretrain.finetune"
) -> subprocess.CompletedProcess:
    command = ["-c", code] if code else ["-m", program]
    return subprocess.run(
        [sys.executable, *command, *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def test_the_command_writes_evaluate_py_s_json_and_prints_a_table(tmp_path):
    output = tmp_path / "out" / "xtreme.json"
    flags = ["--predictions", str(MOCK / "predictions"), "--labels", str(MOCK / "labels")]
    done = run("score", *flags, "--output", str(output))
    assert done.returncode == 0, done.stderr
    assert_same_json(json.loads(output.read_text()), expected("xtreme"))
    assert f"wrote {output}" in done.stdout
    assert "all_task" in done.stdout and "ignored: mewslix/ (not an xtreme task)" in done.stdout


@pytest.mark.parametrize(
    "arguments, message",
    [
        ((), "no command: expected one of run, score"),
        (("train",), "unknown command 'train': expected one of run, score"),
        (("score", "--labels", "x", "--output", "y"), "--predictions must have a value"),
        (("score", "--predictions", "x", "--labels", "x", "--output", "y"), "folder x does not"),
    ],
)
def test_a_wrong_command_or_flag_is_one_line_and_exit_2(arguments, message):
    done = run(*arguments)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr


def test_the_old_program_scores_and_names_the_new_one_for_the_rest(tmp_path):
    """`python -m xlpretrain.eval.xtreme score` still scores (eval measures); its `run`, and
    `python -m xlpretrain.eval.finetune`, say in one line what replaced them (exit 2)."""
    output = tmp_path / "old.json"
    flags = ["--predictions", str(MOCK / "predictions"), "--labels", str(MOCK / "labels")]
    done = run("score", *flags, "--output", str(output), program="xlpretrain.eval.xtreme")
    assert done.returncode == 0, done.stderr
    assert_same_json(json.loads(output.read_text()), expected("xtreme"))
    for program, arguments in (
        ("xlpretrain.eval.xtreme", ("run",)),
        ("xlpretrain.eval.finetune", ()),
    ):
        moved = run(*arguments, "--config=x", program=program)
        assert moved.returncode == 2 and moved.stderr.count("\n") == 1, moved.stderr
        assert "moved: python -m xlpretrain.finetune run --config configs/" in moved.stderr


def test_without_seqeval_score_says_what_to_install(tmp_path):
    code = (
        "import runpy, sys; sys.modules['seqeval'] = None; "
        "sys.argv[0] = 'xtreme'; runpy.run_module('xlpretrain.finetune', run_name='__main__')"
    )
    flags = ["--predictions", str(MOCK / "predictions"), "--labels", str(MOCK / "labels")]
    done = run("score", *flags, "--output", str(tmp_path / "x.json"), code=code)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "needs seqeval, which is not installed: pip install seqeval" in done.stderr
    assert not (tmp_path / "x.json").exists()


def test_a_panels_average_line_is_the_metric_its_bars_show():
    """results.png: QA's bars are F1 in every language, so its line is evaluate.py's F1 average
    over the version's languages (`avg_f1`), not `avg_metric` (the mean of F1 and EM); a task
    whose JSON has no average of its metric draws no line."""
    from matplotlib.figure import Figure

    qa = {
        "f1": {"en": 80.0, "de": 60.0, "xx": 10.0},
        "exact_match": {"en": 70.0, "de": 50.0, "xx": 5.0},
        "avg_f1": 70.0,
        "avg_exact_match": 60.0,
        "avg_metric": 65.0,
    }
    axes = Figure().subplots()
    tables.panel(axes, "xquad", {"test": qa, "dev": {"f1": {"en": 90.0}}})
    assert [bar.get_height() for bar in axes.patches] == [80.0, 60.0, 10.0, 90.0]
    assert [list(line.get_ydata()) for line in axes.lines] == [[70.0, 70.0]]
