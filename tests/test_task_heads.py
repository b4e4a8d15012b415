"""Token classification and extractive QA on every backbone, against Hugging Face.

From the same weights (ours, exported with our converter and loaded by the family's transformers
task class) and the same batches, our fine-tuning step (`training.step` with the task losses,
AdamW as pre-training's) and torch's (`torch.optim.AdamW`, HF's linear warm-up/decay schedule,
`clip_grad_norm_`, no decay on biases and LayerNorms) give the same loss and gradient norm at
every step of 20, and the same parameters after the last: XLM-R, ModernBERT and BERT (with token
types on the second part of each row), each task kind. The batches hold what the rules are
about: tokens without a label, padding rows HF never sees (its batch is the real rows), QA
answers past the row's end (HF's clamp ignores them) and before its start (clamped to `<s>`).
With gradient accumulation over micro-batches of unequal counts, XLM-R gives HF's full batch.
The fine-tuned models export to the transformers classes with our logits, and read back exactly;
the losses match hand-computed values; token types change nothing where a batch has none.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import tempfile

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers.loss.loss_utils import ForQuestionAnsweringLoss  # noqa: E402
from transformers.trainer_pt_utils import get_parameter_names  # noqa: E402

from xlpretrain import (  # noqa: E402
    backbones,
    masks,
    tasks,  # noqa: E402
)
from xlpretrain.convert import Pretrained, read_hf_task, write_hf_task  # noqa: E402
from xlpretrain.convert.hf import head_of  # noqa: E402
from xlpretrain.model.encoder import MaskedLM  # noqa: E402
from xlpretrain.objectives import task_losses  # noqa: E402
from xlpretrain.tasks.declaration import Head  # noqa: E402
from xlpretrain.training.optim import adamw_from  # noqa: E402
from xlpretrain.training.sections import OptimizerSettings  # noqa: E402
from xlpretrain.training.step import init_state, make_train_step  # noqa: E402

SEQUENCE_CLASSIFICATION = tasks.classification.KIND.name
TOKEN_CLASSIFICATION = tasks.tagging.KIND.name
QUESTION_ANSWERING = tasks.qa.KIND.name
STEPS = 20


def task_model(kind, config, task_head, num_labels):
    """The module of task kind `kind` as fine-tuning builds it (`TaskKind.module`)."""
    return tasks.get(kind).module(Head(config, task_head, num_labels))


ROWS, PADDING_ROWS, LENGTH = 4, 2, 12  # real rows (HF's batch), then rows of padding (ours)
MARKER = 3  # the id an answer starts at (the random ids are 4 and up)
LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
OPTIM = OptimizerSettings(
    learning_rate=3e-3, warmup_steps=4, steps=STEPS, b1=0.9, b2=0.98, eps=1e-6,
    weight_decay=0.5, clip_norm=0.5,
)  # fmt: skip
RTOL = 1e-5  # as tests/test_hf_training_parity.py: float32 in both
PARAM_ATOL = 2e-6
# QA's output bias, and (in XLM-R's and BERT's linear head) the last layer's LayerNorm bias,
# shift all of a row's start (end) logits alike, which a softmax ignores: their gradient is 0
# up to rounding, which Adam turns into steps of up to lr · noise / eps (~3e-6 here), different
# in each implementation.
SHIFTS = ("qa_outputs.bias", "classifier.bias", "encoder.layer.1.output.LayerNorm.bias")
SHIFT_ATOL = 1e-4
LOGIT_TOLERANCE = 1e-5  # of the logits' scale, as tests/test_modernbert.py compares
LOSSES = {
    TOKEN_CLASSIFICATION: (task_losses.tagging_loss, task_losses.labelled_tokens),
    QUESTION_ANSWERING: (task_losses.span_loss, task_losses.answer_boundaries),
}
SHAPE = dict(vocab_size=64, hidden_size=32, num_heads=4, mlp_dim=48, max_positions=64)
CONFIGS = {
    "xlmr": dict(num_layers=2),
    "bert": dict(num_layers=2, layer_norm_eps=1e-12),
    # Global every 2nd layer, the others local with a window that bites in 12-token rows.
    "modernbert": dict(
        num_layers=3,
        absolute_positions=False,
        local_window=4,
        global_every=2,
        rope_theta=500.0,
        local_rope_theta=80.0,
    ),
}
FAMILIES = tuple(CONFIGS)
KINDS = (TOKEN_CLASSIFICATION, QUESTION_ANSWERING)


def our_config(family: str):
    no_dropout = dict(dropout_rate=0.0, attention_dropout_rate=0.0)
    return backbones.get(family).config(**SHAPE, **CONFIGS[family], **no_dropout)


def initial_params(family: str, kind: str, seed: int = 0) -> dict:
    """The task module's initial params, every one moved off its initial value (biases off 0,
    norms off 1) so that a weight mapped to the wrong place shows. A copy of `_initial_params`'
    (an eager `init` is seconds of small compiles, and most are asked for by several tests)."""
    return jax.tree.map(np.copy, _initial_params(family, kind, seed))


@functools.cache
def _initial_params(family: str, kind: str, seed: int) -> dict:
    config = our_config(family)
    module = task_model(kind, config, backbones.get(family).task_head, len(LABELS))
    params = nn.unbox(
        module.init(jax.random.key(seed), make_batch(family, kind, seed)[0])["params"]
    )
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: np.asarray(x + rng.normal(0, 0.05, x.shape), np.float32), params)


# --- batches --------------------------------------------------------------------------------


def make_batch(family: str, kind: str, seed: int) -> tuple[dict, dict]:
    """(ours, HF's inputs) of one step: `ROWS` rows `<s> … </s>` of random ids, then
    `PADDING_ROWS` rows of padding that only ours has. Tagging rows are padded to `LENGTH` and
    about a third of their tokens (and `<s>`, `</s>`) have no label; QA rows are whole (see
    `task_losses` on padding), one answer in four is past the row's end and one in eight
    starts and ends before it. BERT's rows have token type 1 from a point on. What is right is
    learnable (a label is the token's id modulo the labels; an answer starts at `MARKER`), so
    that 20 steps lower the loss."""
    rng = np.random.default_rng(1000 + seed)
    rows = ROWS + PADDING_ROWS
    ids = np.full((rows, LENGTH), 1, np.int32)  # <pad>
    real = np.zeros((rows, LENGTH), bool)
    types = np.zeros((rows, LENGTH), np.int32)
    for row in range(ROWS):
        length = LENGTH if kind == QUESTION_ANSWERING else int(rng.integers(5, LENGTH + 1))
        ids[row, :length] = [0, *rng.integers(MARKER + 1, SHAPE["vocab_size"], length - 2), 2]
        real[row, :length] = True
        types[row, int(rng.integers(1, length)) : length] = 1
    ours = {
        "input_ids": ids,
        "segment_ids": real.astype(np.int32),
        "positions": np.where(real, 2 + np.arange(LENGTH), 1).astype(np.int32),
    }
    if backbones.get(family).features["token_type_rows"] == 2:
        ours["token_types"] = types
    if kind == TOKEN_CLASSIFICATION:
        weights = real & (rng.random((rows, LENGTH)) < 0.7)
        weights[:, 0] = False
        weights[np.arange(rows), real.sum(1) - 1] = False  # </s> (padding rows: nothing)
        ours.update(labels=ids % len(LABELS), label_weights=weights.astype(np.float32))
    else:
        ours.update(answers(ids, rng))
    return ours, hf_inputs(ours)


def answers(ids: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Start and end positions of the real rows' answers (`MARKER` written at each start in
    the row), and `pred_weights`."""
    rows = len(ids)
    start = rng.integers(1, LENGTH - 3, rows)
    end = start + rng.integers(0, 3, rows)
    past = rng.random(rows) < 0.25
    before = ~past & (rng.random(rows) < 0.125)
    if (past | before)[:ROWS].all():  # HF's mean over no answer is NaN
        past[0] = before[0] = False
    for row in np.flatnonzero(~past & ~before)[:ROWS]:
        ids[row, start[row]] = MARKER
    start, end = np.where(past, LENGTH + 1, start), np.where(past, LENGTH + 3, end)
    start, end = np.where(before, -2, start), np.where(before, -1, end)
    return {
        "start_positions": start.astype(np.int32),
        "end_positions": end.astype(np.int32),
        "pred_weights": (np.arange(rows) < ROWS).astype(np.float32),
    }


def hf_inputs(ours: dict) -> dict:
    """Our batch as the HF class reads it: the real rows, the padding mask, token types, and
    labels -100 on tokens without one."""
    long = lambda x: torch.tensor(np.asarray(x)[:ROWS], dtype=torch.long)  # noqa: E731
    inputs = {"input_ids": long(ours["input_ids"]), "attention_mask": long(ours["segment_ids"])}
    if "token_types" in ours:
        inputs["token_type_ids"] = long(ours["token_types"])
    if "labels" in ours:
        inputs["labels"] = long(np.where(ours["label_weights"] > 0, ours["labels"], -100))
    else:
        inputs.update(
            start_positions=long(ours["start_positions"]), end_positions=long(ours["end_positions"])
        )
    return inputs


# --- training both ways ---------------------------------------------------------------------


@dataclasses.dataclass
class Trained:
    losses: list[float]
    norms: list[float]
    params: dict  # HF names (ours exported) → values after the last step


def hf_state(family: str, kind: str, params: dict) -> dict[str, np.ndarray]:
    converter = backbones.get(family).hf_converter()
    return converter.task_params_to_hf(params, our_config(family), kind)


def our_training(family: str, kind: str, params: dict, batches, grad_accum: int = 1):
    """Our step, jitted, over the batches: (Trained, final params)."""
    config = our_config(family)
    module = task_model(kind, config, backbones.get(family).task_head, len(LABELS))
    loss, count = LOSSES[kind]
    optimizer = adamw_from(OPTIM)
    step = make_train_step(
        module, {"task": loss}, {"task": 1.0}, optimizer, OPTIM.learning_rates(), grad_accum,
        {"task": count},
    )  # fmt: skip
    step = jax.jit(step)
    state = init_state(params, optimizer, jax.random.key(0))
    losses, norms = [], []
    for ours, _ in batches:
        state, metrics = step(state, {"task": ours})
        assert bool(metrics["finite"])
        losses.append(float(metrics["loss"]))
        norms.append(float(metrics["grad_norm"]))
    final = jax.device_get(state.params)
    return Trained(losses, norms, hf_state(family, kind, final)), final


def hf_model(family: str, kind: str, folder, train: bool):
    architecture = backbones.get(family).hf_task_architecture(kind)
    model, info = getattr(transformers, architecture).from_pretrained(
        folder, attn_implementation="eager", output_loading_info=True
    )
    assert not any(info.values()), info  # every tensor read, none missing
    return model.train(train)


def hf_training(family: str, kind: str, folder, batches) -> Trained:
    """The transformers task class from our exported step-0 weights, trained as HF trains."""
    model = hf_model(family, kind, folder, train=True)
    decayed = set(get_parameter_names(model, [torch.nn.LayerNorm], ["bias"]))
    named = dict(model.named_parameters())
    groups = [
        {"params": [p for n, p in named.items() if (n in decayed) == decays], "weight_decay": rate}
        for decays, rate in ((True, OPTIM.weight_decay), (False, 0.0))
    ]
    optimizer = torch.optim.AdamW(groups, lr=OPTIM.learning_rate, betas=(OPTIM.b1, OPTIM.b2),
                                  eps=OPTIM.eps)  # fmt: skip
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, OPTIM.warmup_steps, STEPS)
    losses, norms = [], []
    for _, inputs in batches:
        loss = model(**inputs).loss
        optimizer.zero_grad()
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), OPTIM.clip_norm)))
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
    buffers = {name for name, _ in model.named_buffers()}
    final = {n: t.detach().numpy() for n, t in model.state_dict().items() if n not in buffers}
    return Trained(losses, norms, final)


def assert_same_training(ours: Trained, theirs: Trained, kind: str) -> None:
    np.testing.assert_allclose(ours.norms, theirs.norms, rtol=RTOL)
    np.testing.assert_allclose(ours.losses, theirs.losses, rtol=RTOL)
    assert set(ours.params) == set(theirs.params)
    for name, value in theirs.params.items():
        shift = kind == QUESTION_ANSWERING and name.endswith(SHIFTS)
        atol = SHIFT_ATOL if shift else PARAM_ATOL
        np.testing.assert_allclose(ours.params[name], value, rtol=RTOL, atol=atol, err_msg=name)


@dataclasses.dataclass
class Run:
    family: str
    kind: str
    batches: list
    initial: dict
    final: dict
    ours: Trained
    theirs: Trained


@functools.cache
def trained(family: str, kind: str) -> Run:
    """Both trainings of `family`'s `kind`, once per session."""
    batches = [make_batch(family, kind, seed) for seed in range(STEPS)]
    initial = initial_params(family, kind)
    with tempfile.TemporaryDirectory() as scratch:
        folder = pathlib.Path(scratch) / "step0"
        write_task(family, kind, initial, folder)
        theirs = hf_training(family, kind, folder, batches)
    ours, final = our_training(family, kind, initial, batches)
    return Run(family, kind, batches, initial, final, ours, theirs)


@pytest.fixture(params=[(f, k) for f in FAMILIES for k in KINDS], ids="-".join)
def run(request) -> Run:
    return trained(*request.param)


def write_task(family: str, kind: str, params: dict, folder) -> None:
    pretrained = Pretrained(our_config(family), params["backbone"])
    write_hf_task(pretrained, head_of(params), kind, LABELS, folder)


def test_fine_tuning_matches_hugging_face_step_for_step(run):
    assert min(run.theirs.norms) > OPTIM.clip_norm  # clipping acted on every step
    assert_same_training(run.ours, run.theirs, run.kind)
    first, last = np.mean(run.ours.losses[:5]), np.mean(run.ours.losses[-5:])
    assert last < 0.95 * first  # it learned: the steps compared are updates


def test_the_batches_hold_what_the_rules_are_about(run):
    ours = [b for b, _ in run.batches]
    if run.kind == TOKEN_CLASSIFICATION:
        unlabelled = sum(
            int(((b["segment_ids"] > 0) & (b["label_weights"] == 0)).sum()) for b in ours
        )
        assert unlabelled > 50 and sum(int((b["segment_ids"] == 0).sum()) for b in ours) > 100
    else:
        starts = np.concatenate([b["start_positions"][:ROWS] for b in ours])
        assert (starts >= LENGTH).sum() >= 5 and (starts < 0).sum() >= 2
    has_types = "token_types" in ours[0]
    assert has_types == (run.family == "bert")
    if has_types:
        assert sum(int(b["token_types"].sum()) for b in ours) > 100


@pytest.mark.parametrize("kind", KINDS)
def test_accumulated_micro_batches_match_hugging_faces_full_batch(kind):
    """Micro-batches of unequal counts (labelled tokens; kept answer boundaries) weighted by
    their share of the step's: XLM-R with `grad_accum=2` gives HF's full batch."""
    batches = [make_batch("xlmr", kind, seed) for seed in range(STEPS)]
    halves = [{k: v[i::2] for k, v in b.items()} for b, _ in batches for i in (0, 1)]
    if kind == TOKEN_CLASSIFICATION:
        counts = [half["label_weights"].sum() for half in halves]
    else:  # both boundaries of each real row whose answer is not past its end
        counts = [2 * ((h["start_positions"] < LENGTH) * h["pred_weights"]).sum() for h in halves]
    assert len(set(counts)) >= 3  # the micro-batches' shares of the step differ
    ours, _ = our_training("xlmr", kind, initial_params("xlmr", kind), batches, grad_accum=2)
    assert_same_training(ours, trained("xlmr", kind).theirs, kind)


# --- export and import ----------------------------------------------------------------------


def our_outputs(family: str, kind: str, params: dict, batch: dict) -> np.ndarray:
    module = task_model(kind, our_config(family), backbones.get(family).task_head, len(LABELS))
    out = module.apply({"params": params}, batch)
    return np.stack(out, -1) if kind == QUESTION_ANSWERING else np.asarray(out)


def hf_outputs(model, kind: str, inputs: dict) -> np.ndarray:
    inputs = {
        k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask", "token_type_ids")
    }
    with torch.no_grad():
        out = model(**inputs)
    if kind == QUESTION_ANSWERING:
        return np.stack([out.start_logits.numpy(), out.end_logits.numpy()], -1)
    return out.logits.numpy()


def test_a_fine_tuned_model_exports_with_our_logits_and_reads_back(run, tmp_path):
    write_task(run.family, run.kind, run.final, tmp_path / "hf")
    model = hf_model(run.family, run.kind, tmp_path / "hf", train=False)
    labels = LABELS if run.kind == TOKEN_CLASSIFICATION else ["LABEL_0", "LABEL_1"]
    assert model.config.id2label == dict(enumerate(labels)) and model.config.num_labels == len(
        labels
    )
    assert model.config.label2id == {label: i for i, label in enumerate(labels)}
    ours, inputs = make_batch(run.family, TOKEN_CLASSIFICATION, seed=99)  # padded rows
    got = our_outputs(run.family, run.kind, run.final, ours)[:ROWS]
    want = hf_outputs(model, run.kind, inputs)
    real = inputs["attention_mask"].numpy().astype(bool)
    scale = np.abs(want[real]).max()
    np.testing.assert_allclose(got[real], want[real], rtol=0, atol=LOGIT_TOLERANCE * scale)

    back = read_hf_task(tmp_path / "hf")
    assert (back.kind, back.labels, back.config) == (
        run.kind, tuple(LABELS) if run.kind == TOKEN_CLASSIFICATION else (), our_config(run.family)
    )  # fmt: skip
    assert_same_weights(run, back.params)
    # A folder transformers itself saved reads the same.
    model.save_pretrained(tmp_path / "saved")
    assert_same_weights(run, read_hf_task(tmp_path / "saved").params)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_sequence_classifier_exports_with_our_logits_and_reads_back(family, tmp_path):
    """XNLI's and PAWS-X's classifier (`PairClassifier`, its family's head on the first token:
    XLM-R's classification head, BERT's pooler and classifier, ModernBERT's prediction head)
    as the family's `…ForSequenceClassification`: its logits on padded rows with token types
    are ours, and it reads back to the same weights. (Not trained here: its encoder is the other
    kinds', whose training the tests above compare step by step.)"""
    params = initial_params(family, SEQUENCE_CLASSIFICATION)
    write_task(family, SEQUENCE_CLASSIFICATION, params, tmp_path / "hf")
    model = hf_model(family, SEQUENCE_CLASSIFICATION, tmp_path / "hf", train=False)
    assert model.config.id2label == dict(enumerate(LABELS))
    ours, inputs = make_batch(family, TOKEN_CLASSIFICATION, seed=7)
    got = our_outputs(family, SEQUENCE_CLASSIFICATION, params, ours)[:ROWS]
    want = hf_outputs(model, SEQUENCE_CLASSIFICATION, inputs)
    assert got.shape == want.shape == (ROWS, len(LABELS))
    np.testing.assert_allclose(got, want, rtol=0, atol=LOGIT_TOLERANCE * np.abs(want).max())
    back = read_hf_task(tmp_path / "hf")
    assert (back.kind, back.labels) == (SEQUENCE_CLASSIFICATION, tuple(LABELS))
    assert jax.tree.structure(back.params) == jax.tree.structure(params)
    want = hf_state(family, SEQUENCE_CLASSIFICATION, params)
    for name, value in hf_state(family, SEQUENCE_CLASSIFICATION, back.params).items():
        np.testing.assert_array_equal(value, want[name], err_msg=name)


def assert_same_weights(run: Run, params: dict) -> None:
    """`params` are the run's final ones: the same tree, and every weight HF has equal (not
    ModernBERT's first attention norm, which HF lacks and its first layer ignores)."""
    assert jax.tree.structure(params) == jax.tree.structure(run.final)
    want = hf_state(run.family, run.kind, run.final)
    for name, value in hf_state(run.family, run.kind, params).items():
        np.testing.assert_array_equal(value, want[name], err_msg=name)


def test_a_folder_of_another_task_class_is_refused(tmp_path):
    params = initial_params("xlmr", QUESTION_ANSWERING)
    write_task("xlmr", QUESTION_ANSWERING, params, tmp_path / "hf")
    config = (tmp_path / "hf" / "config.json").read_text()
    (tmp_path / "hf" / "config.json").write_text(
        config.replace("XLMRobertaForQuestionAnswering", "XLMRobertaForMultipleChoice")
    )
    with pytest.raises(ValueError, match="names no task class this family converts"):
        read_hf_task(tmp_path / "hf")


# --- the losses by hand ---------------------------------------------------------------------


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return (
        x
        - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - x.max(-1, keepdims=True)
    )


def test_token_loss_is_the_mean_over_labelled_tokens():
    logits = np.array([[[2.0, 0.0, -1.0], [0.5, 0.5, 3.0], [1.0, 2.0, 0.0]]], np.float32)
    labels = np.array([[0, -100, 1]])  # the middle token has no label (HF's -100)
    weights = np.array([[1.0, 0.0, 1.0]], np.float32)
    loss, accuracy, count = task_losses.token_cross_entropy(logits, labels, weights)
    logp = log_softmax(logits)
    expected = -(logp[0, 0, 0] + logp[0, 2, 1]) / 2
    assert float(count) == 2 and float(accuracy) == 1.0
    np.testing.assert_allclose(float(loss), expected, rtol=1e-6)
    hf = torch.nn.CrossEntropyLoss()(torch.tensor(logits[0]), torch.tensor(labels[0]))
    np.testing.assert_allclose(float(loss), float(hf), rtol=1e-6)


def test_span_loss_clamps_as_hugging_face_over_the_window_or_its_tokens():
    """Row 0: start 1, end 3. Row 1: start -3 (→ 0, `<s>`), end 2. Row 2: past the end (both
    ignored). Row 3: a padding row (pred_weights 0). Row 4, 4 tokens then padding: start 1,
    end on its padding (kept over the window, HF's; ignored over the tokens)."""
    rng = np.random.default_rng(0)
    start, end = rng.normal(size=(2, 5, 6)).astype(np.float32)
    segment = np.ones((5, 6), np.int32)
    segment[3] = 0
    segment[4, 4:] = 0
    batch = {
        "segment_ids": segment,
        "start_positions": np.array([1, -3, 6, 0, 1]),
        "end_positions": np.array([3, 2, 9, 0, 5]),
        "pred_weights": np.array([1, 1, 1, 0, 1], np.float32),
    }
    # HF's loss of the three whole rows is ours: its clamp, its ignored index.
    whole = {key: value[:3] for key, value in batch.items()}
    loss, _, count = task_losses.span_cross_entropy(start[:3], end[:3], whole)
    s, e = log_softmax(start), log_softmax(end)
    nll = -(s[0, 1] + e[0, 3] + s[1, 0] + e[1, 2])
    assert float(count) == 4
    np.testing.assert_allclose(float(loss), nll / 4, rtol=1e-6)
    hf = ForQuestionAnsweringLoss(
        torch.tensor(start[:3]), torch.tensor(end[:3]),
        torch.tensor(whole["start_positions"]), torch.tensor(whole["end_positions"]),
    )  # fmt: skip
    np.testing.assert_allclose(float(loss), float(hf), rtol=1e-6)
    # With rows 3 and 4, over the whole window (no `answer_region`: HF's): row 4's start and
    # end over its 6 positions, padding included.
    loss, _, count = task_losses.span_cross_entropy(start, end, batch)
    assert float(count) == 6 == float(task_losses.answer_boundaries(batch))
    np.testing.assert_allclose(float(loss), (nll - s[4, 1] - e[4, 5]) / 6, rtol=1e-6)
    # Over the tokens: row 4's start over its 4 tokens, its padding no candidate.
    tokens = {**batch, "answer_region": segment}
    loss, _, count = task_losses.span_cross_entropy(start, end, tokens)
    assert float(count) == 5 == float(task_losses.answer_boundaries(tokens))
    row4 = log_softmax(start[4, :4])[1]
    np.testing.assert_allclose(float(loss), (nll - row4) / 5, rtol=1e-6)


def test_a_row_with_one_boundary_kept_counts_it_once():
    """Where a start is in the row and its end past it, the loss is the mean over the kept
    boundaries (HF averages starts and ends separately: the one documented difference)."""
    start, end = np.random.default_rng(1).normal(size=(2, 2, 4)).astype(np.float32)
    batch = {
        "segment_ids": np.ones((2, 4), np.int32),
        "start_positions": np.array([1, 2]),
        "end_positions": np.array([2, 7]),
        "pred_weights": np.ones(2, np.float32),
    }
    loss, _, count = task_losses.span_cross_entropy(start, end, batch)
    s, e = log_softmax(start), log_softmax(end)
    assert float(count) == 3
    np.testing.assert_allclose(float(loss), -(s[0, 1] + s[1, 2] + e[0, 2]) / 3, rtol=1e-6)


@pytest.mark.parametrize("family", ["xlmr", "bert"])
def test_qa_padding_is_hugging_faces_so_the_window_loss_is(family, tmp_path):
    """XTREME's QA loss runs its softmax over the padded window, padding's logits included, so
    a padding position's state must be the transformers class's: there padding attends to its
    row's tokens (`attention_mask` masks keys alone; `masks.padding_sees_row`). On padded rows
    every position's logits, and the loss over the window, are HF's."""
    params = initial_params(family, QUESTION_ANSWERING)
    tagged, _ = make_batch(family, TOKEN_CLASSIFICATION, seed=5)  # rows of 5 to 12 tokens
    ours = {key: tagged[key] for key in ("input_ids", "segment_ids", "positions", "token_types")
            if key in tagged}  # fmt: skip
    lengths = ours["segment_ids"].sum(1)
    assert (lengths[:ROWS] < LENGTH).sum() >= 2  # padding to read
    start = np.where(np.arange(len(lengths)) < ROWS, np.minimum(lengths - 3, 1 + np.arange(6)), 0)
    ours.update(
        start_positions=start.astype(np.int32),
        end_positions=(start + (start > 0)).astype(np.int32),
        pred_weights=(np.arange(len(lengths)) < ROWS).astype(np.float32),
    )
    write_task(family, QUESTION_ANSWERING, params, tmp_path / "hf")
    model = hf_model(family, QUESTION_ANSWERING, tmp_path / "hf", train=False)
    inputs = hf_inputs(ours)
    with torch.no_grad():
        out = model(**inputs)
    want = np.stack([out.start_logits.numpy(), out.end_logits.numpy()], -1)
    got = our_outputs(family, QUESTION_ANSWERING, params, ours)  # padding rows last
    scale = np.abs(want).max()
    np.testing.assert_allclose(got[:ROWS], want, rtol=0, atol=LOGIT_TOLERANCE * scale)
    loss, _, _ = task_losses.span_cross_entropy(got[..., 0], got[..., 1], ours)
    np.testing.assert_allclose(float(loss), float(out.loss), rtol=1e-5)


@pytest.mark.parametrize("region", [None, np.zeros((1, 4), np.int32)])
def test_a_padding_row_alone_gives_zero_and_finite_gradients(region):
    batch = {
        "segment_ids": np.zeros((1, 4), np.int32),
        "start_positions": np.array([0]),
        "end_positions": np.array([0]),
        "pred_weights": np.zeros(1, np.float32),
    }
    if region is not None:
        batch["answer_region"] = region

    def loss(logits):
        return task_losses.span_cross_entropy(logits[0], logits[1], batch)[0]

    value, grad = jax.value_and_grad(loss)(jnp.ones((2, 1, 4)))
    assert float(value) == 0.0 and np.isfinite(np.asarray(grad)).all()


# --- token types ----------------------------------------------------------------------------


def hidden_states(config, params, batch) -> np.ndarray:
    return np.asarray(
        MaskedLM(config).apply(
            {"params": params},
            batch["input_ids"],
            batch["positions"],
            mask_fn=masks.mmlm,
            mask_meta={"segment_ids": batch["segment_ids"], "positions": batch["positions"]},
            token_types=batch.get("token_types"),
        )
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_token_types_absent_or_zero_change_nothing(family):
    config = our_config(family)
    params = initial_params(family, TOKEN_CLASSIFICATION)["backbone"]
    batch, _ = make_batch(family, TOKEN_CLASSIFICATION, seed=5)
    batch.pop("token_types", None)
    plain = hidden_states(config, params, batch)
    zeros = hidden_states(
        config, params, {**batch, "token_types": np.zeros_like(batch["input_ids"])}
    )
    np.testing.assert_array_equal(zeros, plain)  # bit for bit
    ones = hidden_states(config, params, {**batch, "token_types": np.ones_like(batch["input_ids"])})
    if config.token_type_rows == 2:  # BERT reads them
        assert not np.allclose(ones, plain)
    else:  # one row (XLM-R) or none (ModernBERT): no other type to add
        np.testing.assert_array_equal(ones, plain)


def test_every_family_declares_its_task_classes_and_head():
    for name, backbone in backbones.REGISTRY.items():
        classes = [backbone.hf_task_architecture(kind) for kind in KINDS]
        assert all(hasattr(transformers, c) for c in classes), name
        assert backbone.task_head in ("linear", "transformed")
    assert backbones.get("modernbert").task_head == "transformed"
