"""`python -m xlpretrain.convert to-hf TASK_WORKDIR DST`: a task fine-tuned by `python -m
xlpretrain.finetune run` (tiny ModernBERT, the tiny XTREME_DIR's PAN-X, XQuAD, PAWS-X, 4
steps) exports as its family's transformers class of its kind, with the params selected on
English dev, its labels and its tokenizer: transformers' logits equal our module's on the task's
own rows. A half-finished workdir and a damaged record are refused in one line; a checkpoint
folder exports as before."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import flax.linen as nn
import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

import xlpretrain
from configs import xtreme as xtreme_config
from tests import xtreme_fixtures as fx
from xlpretrain import backbones, tasks
from xlpretrain.convert import folder, task_workdir
from xlpretrain.convert.__main__ import main as convert_main
from xlpretrain.data.tokenizer import Tokenizer
from xlpretrain.families import MODERNBERT
from xlpretrain.finetune import suite
from xlpretrain.finetune.plan import resolve
from xlpretrain.finetune.schema import check as check_run_config
from xlpretrain.model import init_params
from xlpretrain.tasks.declaration import Encoding, Head

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

REPO = pathlib.Path(__file__).resolve().parents[1]
TASKS = ("panx", "xquad", "pawsx")
STEPS = 4
MAX_LENGTH = 48
LOGIT_TOLERANCE = 1e-5  # of the logits' scale, as tests/test_task_heads.py compares
HF_CLASSES = {
    "pawsx": transformers.AutoModelForSequenceClassification,
    "panx": transformers.AutoModelForTokenClassification,
    "xquad": transformers.AutoModelForQuestionAnswering,
}


@pytest.fixture(scope="module")
def tiny_model(demo_json_tokenizer_path, tmp_path_factory) -> pathlib.Path:
    """A randomly initialised 2-layer ModernBERT with the demo corpus's tokenizer (its special
    tokens at the end of the vocabulary, as ModernBERT's are); no dropout, so that the
    selected step's parameters are the ones that score."""
    config = MODERNBERT.config(
        vocab_size=2002, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
        absolute_positions=False, max_positions=64,
        dropout_rate=0.0, attention_dropout_rate=0.0,
    )  # fmt: skip
    params = jax.tree.map(np.asarray, nn.unbox(init_params(config, jax.random.key(0))))
    path = tmp_path_factory.mktemp("model") / "model"
    tokenizer = Tokenizer.load(demo_json_tokenizer_path)
    folder.write(folder.Pretrained(config, params, tokenizer), path)
    return path


@pytest.fixture(scope="module")
def out(tiny_model, tmp_path_factory) -> pathlib.Path:
    """Each task fine-tuned for `STEPS` steps, evaluated on dev every 2 (selection on)."""
    data = fx.write_xtreme_dir(tmp_path_factory.mktemp("xtreme"), (*TASKS, "squad"))
    fx.write_labels_dir(data, TASKS)  # what the run scores its predictions against
    cfg = xtreme_config.get_config("demo")
    cfg.init.path, cfg.data.dir, cfg.tasks = str(tiny_model), str(data), ",".join(TASKS)
    cfg.train.update(steps=STEPS, log_every=2, checkpoint_every=2, async_checkpointing=False)
    cfg.eval.every_steps = 2
    for task in TASKS:
        cfg[task].update(batch_size=8, max_length=MAX_LENGTH, learning_rate=3e-3)
    check_run_config(cfg)
    out = tmp_path_factory.mktemp("out")
    assert suite.run(resolve(cfg), out) is not None
    return out


def selected(workdir: pathlib.Path) -> tuple[int, dict]:
    """The step `best.json` names and its params, read as the training side wrote them; the
    last step's where none was kept (every dev score 0: XTREME's final model predicts)."""
    if not (workdir / "best").exists():
        return STEPS, latest(workdir)
    best = json.loads((workdir / "best" / "best.json").read_text())
    params = ocp.StandardCheckpointer().restore(workdir / "best" / best["path"])
    return best["step"], jax.tree.map(np.asarray, params)


def latest(workdir: pathlib.Path) -> dict:
    state = workdir / "checkpoints" / str(STEPS) / "state"
    params = ocp.PyTreeCheckpointer().restore(state)["params"]
    return jax.tree.map(np.asarray, params)


def our_rows(task: str, workdir: pathlib.Path) -> tuple[dict, np.ndarray]:
    """The German test set's rows as the run encodes them, and which tokens are real."""
    record = task_workdir.read_record(workdir)
    section = tasks.get(record.kind).section  # QA's windows: their defaults
    encoding = Encoding(
        Tokenizer.load(workdir / "tokenizer.json"), record.labels,
        backbones.of(record.config).pair_layout, MAX_LENGTH,
        section.values() if section else None,
    )  # fmt: skip
    rows = tasks.get(record.kind).encode(fx.gold(task, "de"), encoding)
    batch = rows.batch(np.arange(len(rows)))
    return batch, batch["segment_ids"] > 0


def our_logits(workdir: pathlib.Path, params: dict, batch: dict) -> np.ndarray:
    record = task_workdir.read_record(workdir)
    head = Head(record.config, record.task_head, len(record.labels))
    out = tasks.get(record.kind).module(head).apply({"params": params}, batch)
    return np.stack(out, -1) if isinstance(out, tuple) else np.asarray(out)


def hf_logits(model, batch: dict, real: np.ndarray) -> np.ndarray:
    inputs = {
        "input_ids": torch.tensor(batch["input_ids"], dtype=torch.long),
        "attention_mask": torch.tensor(real.astype(np.int64)),
    }
    with torch.no_grad():
        out = model(**inputs)
    if hasattr(out, "start_logits"):
        return np.stack([out.start_logits.numpy(), out.end_logits.numpy()], -1)
    return out.logits.numpy()


def assert_same_logits(ours: np.ndarray, theirs: np.ndarray, real: np.ndarray) -> None:
    """Equal on the real tokens (HF leaves padding's undefined), to a share of their scale."""
    scale = np.abs(theirs[real]).max()
    np.testing.assert_allclose(ours[real], theirs[real], rtol=0, atol=LOGIT_TOLERANCE * scale)


@pytest.mark.parametrize("task", ["pawsx", "panx", "xquad"])
def test_a_task_workdir_exports_with_its_selected_params_and_labels(out, task, tmp_path, capsys):
    workdir = out / task
    step, params = selected(workdir)
    chosen = json.loads((out / "dev_results.json").read_text())["selected"][task]["en"]
    assert chosen["step"] == step
    if task != "xquad":  # so that exporting the latest params instead would show
        assert step != STEPS
    elif step == STEPS:  # the tiny model's QA F1 is 0 throughout: nothing kept, the final
        assert chosen["score"] == 0.0
    convert_main(["to-hf", str(workdir), str(tmp_path / "hf")])
    assert "wrote" in capsys.readouterr().out
    model = HF_CLASSES[task].from_pretrained(tmp_path / "hf").eval()
    record = task_workdir.read_record(workdir)
    labels = ["LABEL_0", "LABEL_1"] if task == "xquad" else list(record.labels)
    assert model.config.id2label == dict(enumerate(labels))
    assert model.config.label2id == {label: i for i, label in enumerate(labels)}
    if task == "panx":  # the training file's labels, sorted: the ids the run trained
        train = [*fx.TAGGED["panx"]["en"], fx.EXTRA_TAGGED["panx"]]
        assert labels == sorted({label for _, tags in train for label in tags})
    if task == "pawsx":
        assert labels == ["0", "1"]
    batch, real = our_rows(task, workdir)
    want = hf_logits(model, batch, real)
    if task == "pawsx":  # a label per row
        real = real[:, 0]
    assert_same_logits(our_logits(workdir, params, batch), want, real)
    if step != STEPS:
        other = our_logits(workdir, latest(workdir), batch)
        assert np.abs(other[real] - want[real]).max() > 100 * LOGIT_TOLERANCE * np.abs(want).max()
    # The tokenizer goes with it: transformers' own reads the same ids.
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    ours = Tokenizer.load(workdir / "tokenizer.json")
    assert tokenizer("Berlin ist schön")["input_ids"][1:-1] == list(ours.encode("Berlin ist schön"))


def test_a_workdir_without_selection_exports_its_latest_checkpoint(out, tmp_path):
    workdir = tmp_path / "panx"
    shutil.copytree(out / "panx", workdir)
    shutil.rmtree(workdir / "best")
    convert_main(["to-hf", str(workdir), str(tmp_path / "hf")])
    model = HF_CLASSES["panx"].from_pretrained(tmp_path / "hf").eval()
    batch, real = our_rows("panx", workdir)
    assert_same_logits(
        our_logits(workdir, latest(workdir), batch), hf_logits(model, batch, real), real
    )


def test_the_record_survives_the_pretrained_folder(out, tiny_model, tmp_path):
    """`task.json` and the tokenizer are the workdir's own: moving `init.path` away changes
    nothing, and the record is the config the run built."""
    record = task_workdir.read_record(out / "panx")
    assert record.kind == "token_classification" and record.task_head == MODERNBERT.task_head
    assert folder.different_settings(record.config, folder.read(tiny_model).config) == {}
    moved = tmp_path / "moved"
    shutil.move(tiny_model, moved)
    try:
        convert_main(["to-hf", str(out / "xquad"), str(tmp_path / "hf")])
    finally:
        shutil.move(moved, tiny_model)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == [
        "ModernBertForQuestionAnswering"
    ]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "xlpretrain.convert", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)


def test_refusals_are_one_line(out, tmp_path):
    half = tmp_path / "half"
    half.mkdir()
    shutil.copy(out / "panx" / "task.json", half)
    shutil.copy(out / "panx" / "config.json", half)
    (half / "checkpoints").mkdir()
    done = run_cli("to-hf", str(half), str(tmp_path / "a"))
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "holds no parameters yet" in done.stderr and not (tmp_path / "a").exists()
    for path in (out / "panx", out / "panx" / "checkpoints" / str(STEPS)):  # not pre-trained
        with pytest.raises(ValueError, match=r"panx is a fine-tuned task's workdir.*to-hf"):
            xlpretrain.load(path)
    (half / "task.json").write_text('{"kind": "token_classification"}')
    with pytest.raises(ValueError, match=r"half/task.json: not a task record"):
        convert_main(["to-hf", str(half), str(tmp_path / "c")])


def test_a_checkpoint_folder_exports_as_before(tiny_model, tmp_path):
    convert_main(["to-hf", str(tiny_model), str(tmp_path / "hf")])
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf_config["architectures"] == ["ModernBertForMaskedLM"]
