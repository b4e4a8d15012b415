"""A user's own tasks in a folder (`xlpretrain.finetune.folder_source`), with the command pairs
fine-tune with: tagged sentences and SQuAD questions end to end, each scored per language by its
kind's metric; and the registry's promise — a new kind is its declaration and a line in
`tasks.KINDS`, a new task one `registry.register` — shown with a toy kind and a toy task that
touch nothing else."""

import dataclasses
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from xlpretrain import tasks
from xlpretrain.data.corpora.sources import DataError
from xlpretrain.data.finetuning.task_examples import Answer, QAExample
from xlpretrain.data.xtreme import write_squad_file
from xlpretrain.families import XLMR
from xlpretrain.finetune import folder_source, registry, schema, suite
from xlpretrain.finetune.plan import resolve
from xlpretrain.tasks import classification

REPO = pathlib.Path(__file__).resolve().parents[1]
NAMES = ("Anna", "Berlin", "Kenia", "Maria", "Paris", "Tokio")
WORDS = ("the", "house", "is", "near", "and", "river", "old", "city")


def tagged(seed: int, n: int, labelled: bool = True) -> str:
    """`n` sentences of XTREME's tagging format: a name is B-LOC, any other word O."""
    rng = np.random.default_rng(seed)
    blocks = []
    for _ in range(n):
        words = [str(rng.choice(NAMES if rng.random() < 0.3 else WORDS)) for _ in range(5)]
        tags = ["B-LOC" if w in NAMES else "O" for w in words]
        blocks.append(
            "\n".join(f"{w}\t{t}" if labelled else w for w, t in zip(words, tags, strict=True))
        )
    return "\n\n".join(blocks) + "\n"


def questions(seed: int, n: int) -> list[QAExample]:
    """`n` SQuAD questions whose answer is the name in the context."""
    rng = np.random.default_rng(seed)
    found = []
    for i in range(n):
        name = str(rng.choice(NAMES))
        context = f"the old city is near {name} and the river"
        found.append(
            QAExample(
                f"q{seed}-{i}", "where is the city", context, (Answer(name, context.index(name)),)
            )
        )
    return found


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory) -> pathlib.Path:
    """One folder holding a tagging task (`.tsv`) and a QA task (`.json`) in `en` (train, dev)
    and `de` (test)."""
    root = tmp_path_factory.mktemp("mine")
    for lang in ("en", "de"):
        (root / lang).mkdir()
    (root / "en" / "train.tsv").write_text(tagged(0, 24))
    (root / "en" / "dev.tsv").write_text(tagged(1, 6))
    (root / "de" / "test.tsv").write_text(tagged(2, 6))
    (root / "en" / "test.tsv").write_text(tagged(3, 5, labelled=False))  # predicted, not scored
    write_squad_file(root / "en" / "train.json", questions(0, 16))
    write_squad_file(root / "de" / "test.json", questions(1, 5))
    return root


def test_a_users_tagging_and_qa_folders_fine_tune_with_the_pairs_command(
    tiny_xlmr, user_dir, tmp_path
):
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "xlpretrain.finetune", "run",
        f"--config={REPO / 'configs' / 'finetune_pairs.py'}", f"--init={tiny_xlmr}",
        f"--data={user_dir}", f"--out={out}", "--tasks=tagging,extractive_qa",
        "--config.train.steps=3", "--config.train.log_every=1", "--config.eval.every_steps=3",
        "--config.tagging.batch_size=8", "--config.tagging.max_length=32",
        "--config.extractive_qa.batch_size=8", "--config.extractive_qa.max_length=48",
        "--config.qa.doc_stride=16", "--config.qa.max_query_length=8",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    tagging = json.loads((out / "tagging" / "results.json").read_text())
    assert tagging["kind"] == "token_classification" and tagging["train_language"] == "en"
    assert list(tagging["languages"]) == ["de"]  # en's test is unlabelled: predicted only
    assert tagging["languages"]["de"]["n"] == 6 and "chance" not in tagging["languages"]["de"]
    assert 0.0 <= tagging["languages"]["de"]["metric"] <= 100.0
    assert tagging["selected_step"] == 3 and tagging["dev"] is not None  # selected on en/dev
    for lang, sentences in (("de", 6), ("en", 5)):
        lines = (out / "predictions" / "tagging" / f"test-{lang}.tsv").read_text()
        blocks = lines.strip().split("\n\n")
        assert len(blocks) == sentences and all(len(b.split("\n")) == 5 for b in blocks)
        assert set(lines.split()) <= {"B-LOC", "O"}

    qa = json.loads((out / "extractive_qa" / "results.json").read_text())
    assert qa["kind"] == "question_answering" and qa["dev"] is None  # no en/dev.json
    assert qa["languages"]["de"]["n"] == 5 and 0.0 <= qa["languages"]["de"]["metric"] <= 100.0
    answers = json.loads((out / "predictions" / "extractive_qa" / "test-de.json").read_text())
    assert sorted(answers) == [f"q1-{i}" for i in range(5)]
    assert "tagging (token_classification), trained on en:" in done.stdout
    assert "extractive_qa (question_answering)" in done.stdout
    assert not (out / "labels").exists()  # a user's tasks are scored here, not by evaluate.py


def test_a_folder_without_its_files_is_named(tiny_xlmr, user_dir, tmp_path):
    cfg = schema.default_config()
    cfg.init.path, cfg.data.dir, cfg.tasks = str(tiny_xlmr), str(user_dir), "tagging"
    cfg.tagging.train_language = "fr"
    with pytest.raises(DataError, match=r"no file .*/fr/train.tsv \(word<TAB>tag a line"):
        suite.run(resolve(cfg), tmp_path / "a")
    cfg.tasks, cfg.tagging.train_language = "pairs", "en"
    with pytest.raises(DataError, match=r"en/train.tsv has no usable line .*bad fields"):
        suite.run(resolve(cfg), tmp_path / "b")  # a tagging file is no pair file
    cfg.protocol = "translate_train_all"
    with pytest.raises(Exception, match="translate_train_all trains on data .* not for pairs"):
        resolve(cfg)


def toy_kind() -> tasks.TaskKind:
    """A kind of its own: classification's rows, head and loss, scored as the share of
    examples whose predicted label has the gold label's first letter."""

    def first_letters(gold, predicted) -> float:
        return 100.0 * float(
            np.mean([g.label[0] == p[0] for g, p in zip(gold, predicted, strict=True)])
        )

    return dataclasses.replace(classification.KIND, name="toy_kind", score=first_letters)


def test_a_toy_kind_and_a_toy_task_touch_nothing_else(tiny_xlmr, tmp_path, monkeypatch):
    """The kind is a declaration and an entry of `tasks.KINDS`, the task one `register` call;
    the schema gives it a section, the plan a plan, the suite runs, writes and scores it."""
    monkeypatch.setattr(tasks, "KINDS", {**tasks.KINDS, "toy_kind": toy_kind()})
    monkeypatch.setattr(registry, "TASKS", dict(registry.TASKS))
    registry.register(
        registry.Task("toy", "toy_kind", folder_source.PAIRS, registry.write_label_lines,
                      dict(epochs=1.0, batch_size=8, max_length=32, seed=3))
    )  # fmt: skip
    data = tmp_path / "toy"
    for lang, n in (("en", 16), ("de", 4)):
        (data / lang).mkdir(parents=True)
        lines = [f"a{i} b\tc{i}\t{'yes' if i % 2 else 'no'}" for i in range(n)]
        (data / lang / ("train.tsv" if lang == "en" else "test.tsv")).write_text("\n".join(lines))
    cfg = schema.default_config()
    assert cfg.toy.seed == 3 and cfg.toy.train_language == "en"  # its section, its defaults
    cfg.init.path, cfg.data.dir, cfg.tasks = str(tiny_xlmr), str(data), "toy"
    plan = resolve(cfg)
    assert plan.task_plan("toy", 16).loop.steps == 2  # one epoch of 16 rows, 8 a step
    finished = suite.run(plan, tmp_path / "out")
    result = finished.tasks["toy"]
    assert result["kind"] == "toy_kind" and result["steps"] == 2
    assert result["languages"]["de"]["n"] == 4 and result["languages"]["de"]["chance"] == 50.0
    written = (tmp_path / "out" / "predictions" / "toy" / "test-de.tsv").read_text().split()
    assert len(written) == 4 and set(written) <= {"yes", "no"}
    assert result["languages"]["de"]["metric"] == toy_kind().score(
        [
            classification.PairExample(f"a{i} b", f"c{i}", "yes" if i % 2 else "no")
            for i in range(4)
        ],
        written,
    )


def test_every_kind_a_converter_exports_is_a_declared_kind():
    """The kinds are declared once (`tasks.KINDS`); a family's converter names the HF class of
    those it exports, by the kind's name, and builds the kind's own module to read its
    parameters (`hf.abstract_task_params`)."""
    from xlpretrain import backbones
    from xlpretrain.convert import hf

    for name in ("xlmr", "bert", "modernbert"):
        converter = backbones.get(name).hf_converter()
        assert set(converter.task_architectures) <= set(tasks.KINDS), name
        assert set(converter.task_head_rules) == set(converter.task_architectures), name
    config = XLMR.config(vocab_size=64, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32)
    tagger = hf.abstract_task_params(config, "token_classification", "linear", 3)
    assert tagger["head"]["classifier"]["kernel"].shape == (16, 3)
    with pytest.raises(ValueError, match="unknown task kind 'nosuch'"):
        hf.abstract_task_params(config, "nosuch", "linear", 3)
