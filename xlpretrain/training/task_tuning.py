"""One fine-tuning task of any kind (`xlpretrain.tasks`) on pre-training's loop: train on one
language's examples, select the checkpoint on a development set, predict every test language.

`build` a run from its plan — the pre-trained model (`init.path`), the task kind's module sharded
over the mesh, its optimizer (fine-tuning's layer-wise decay) — and `run` it on
`xlpretrain.training.loop`: gradient accumulation, checkpoints with exact resume, preemption,
divergence, metrics. Each `eval.every_steps` steps (and at the end) the kind's own metric on the
development examples is logged; with `select` `best_then_final` the best parameters so far are
kept in `WORKDIR/best/` (XTREME's `--save_only_best_checkpoint`: its zero-shot protocol selects
on English dev; the final step is offered last, as `--eval_all_checkpoints` compares the final
model with the best), and the test languages are predicted with them; with `none`, the final
parameters predict (XTREME's QA).

"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import orbax.checkpoint as ocp

from xlpretrain import backbones
from xlpretrain.convert import folder, task_workdir
from xlpretrain.data.pairs import PairBatches
from xlpretrain.tasks import TaskKind
from xlpretrain.tasks.declaration import Encoding, Head, Rows, TaskSettings
from xlpretrain.training import loop
from xlpretrain.training.checkpoint import abstract_with_shardings
from xlpretrain.training.finetuning import (
    fine_tuning_training,
    resolve_plug_in,
    resumable_workdir,
)
from xlpretrain.training.prediction import Predictor, make_predictor
from xlpretrain.training.step import Training
from xlpretrain.training.task_plan import TaskPlan
from xlpretrain.training.workdir import save_config

log = logging.getLogger("xlpretrain")
BEST = task_workdir.BEST_DIR  # WORKDIR/best/: the parameters that scored best on dev


@dataclasses.dataclass(frozen=True)
class TaskExamples:
    """A task's examples: the training ones (one language, or translate-train's several), the
    development ones selection reads, each test language's, and each language's dev set
    (`devs`), predicted like a test for the dev table a run reports beside (or without) test."""

    train: Sequence[Any]
    dev: Sequence[Any]
    tests: Mapping[str, Sequence[Any]]
    train_language: str = "en"
    dev_language: str = "en"
    devs: Mapping[str, Sequence[Any]] = dataclasses.field(default_factory=dict)
    # The label set, in id order; () for the training examples' (`TaskKind.label_names`).
    labels: tuple[str, ...] = ()


@dataclasses.dataclass
class TaskTuning:
    """Everything a task's run builds before its first step; `run()` drives it."""

    plan: TaskPlan
    workdir: str
    kind: TaskKind
    examples: TaskExamples
    encoding: Encoding  # the test rows' (no training targets)
    train_rows: Rows
    training: Training
    batches: PairBatches
    predict: Predictor
    lang_ids: Mapping[str, int]  # a language's row of the model's language embeddings


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What a task reads before its plan: the pre-trained model, how its examples are encoded
    (the test rows' settings) and the training rows, whose count sets the steps of an epoch."""

    pretrained: folder.Pretrained
    encoding: Encoding
    train_rows: Rows
    lang_ids: Mapping[str, int]  # a language's row of the model's language embeddings


def prepare(
    init_path: str,
    kind: TaskKind,
    examples: TaskExamples,
    *,
    max_length: int,
    settings: TaskSettings,
    plug_in: str,
) -> Prepared:
    """Reads the pre-trained model at `init_path` and encodes the training examples.
    `plug_in`: `model.plug_in` (VECO's cross-attention for sentence pairs)."""
    pretrained = folder.read(init_path)
    if pretrained.tokenizer is None:
        raise FileNotFoundError(f"{init_path} has no tokenizer (tokenizer.model or .json)")
    backbone = backbones.of(pretrained.config)
    settings = dataclasses.replace(
        settings, plug_in=resolve_plug_in(plug_in, pretrained.config.cross_attention)
    )
    # A language's tokens carry its row of the model's language embeddings (0 without them, or
    # for a language it was not trained on).
    lang_ids = {lang: i for i, lang in enumerate(pretrained.languages)}
    encoding = Encoding(
        pretrained.tokenizer, examples.labels or kind.label_names(examples.train),
        backbone.pair_layout,
        max_length, settings, lang_id=lang_ids.get(examples.train_language, 0),
    )  # fmt: skip
    train_rows = kind.encode(examples.train, dataclasses.replace(encoding, training=True))
    if not len(train_rows):
        raise ValueError(f"{init_path}: none of the {len(examples.train)} training examples fits")
    return Prepared(pretrained, encoding, train_rows, lang_ids)


def build(
    plan: TaskPlan,
    workdir: str,
    kind: TaskKind,
    examples: TaskExamples,
    prepared: Prepared,
    devices: list[jax.Device] | None = None,
) -> TaskTuning:
    """Builds the run of `plan` on `devices` (default: all)."""
    mesh = plan.mesh.make(devices)
    plan.check_batch_divides(dict(mesh.shape))
    workdir, resume_step = resumable_workdir(workdir, plan)
    config = plan.model.applied_to(prepared.pretrained.config)
    encoding, train_rows = prepared.encoding, prepared.train_rows
    labels = encoding.labels
    head = Head(config, backbones.of(config).task_head, len(labels), encoding.settings)
    model = kind.module(head)
    log.info(
        "fine-tuning %s for %s (%s) on %d %s rows%s",
        plan.init_path,
        plan.task,
        kind.name,
        len(train_rows),
        examples.train_language,
        f", labels {list(labels)}" if labels else "",
    )

    training, batches = fine_tuning_training(
        plan, mesh, model, train_rows, kind.loss, kind.count, prepared.pretrained.params,
        plan.batch_size,
    )  # fmt: skip
    predict = make_predictor(
        lambda params, batch: kind.outputs(model, params, batch),
        training,
        plan.mesh.rules,
        plan.batch_size,
    )
    if jax.process_index() == 0:  # what an export needs beside the params (`to-hf`)
        record = task_workdir.TaskRecord(
            kind.name, labels, head.task_head, config, prepared.pretrained.languages
        )
        task_workdir.record_task(workdir, record, prepared.pretrained.tokenizer)
    save_config(workdir, plan.record, resume_step or 0)  # last: a failed start changes none
    return TaskTuning(
        plan, workdir, kind, examples, encoding, train_rows, training, batches, predict,
        prepared.lang_ids,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Encoded:
    """Examples of one language with their rows and the encoding that made them."""

    examples: Sequence[Any]
    rows: Rows
    encoding: Encoding


def encode(tuning: TaskTuning, examples: Sequence[Any], language: str) -> Encoded:
    """`examples` of `language` as rows to predict (no training targets)."""
    encoding = dataclasses.replace(tuning.encoding, lang_id=tuning.lang_ids.get(language, 0))
    return Encoded(examples, tuning.kind.encode(examples, encoding), encoding)


def predictions(tuning: TaskTuning, params, encoded: Encoded) -> list:
    """One prediction per example, as the submission file holds it."""
    outputs = tuning.predict(params, encoded.rows)
    return tuning.kind.decode(outputs, encoded.rows, encoded.examples, encoded.encoding)


class BestParams:
    """The parameters that scored best on the development set so far, in `WORKDIR/best/`:
    `step_<n>/` (Orbax) and `best.json` naming it, written after it, so a kill between the two
    leaves the previous best in force."""

    def __init__(self, workdir: str):
        self.folder = os.path.join(workdir, BEST)
        self.record = os.path.join(self.folder, "best.json")

    def read(self) -> dict | None:
        if not os.path.isfile(self.record):
            return None
        with open(self.record) as f:
            return json.load(f)

    def offer(self, params, step: int, score: float) -> bool:
        """Keeps `params` if `score` beats the best so far, strictly (a later equal score leaves
        the earlier kept, as run_classify.py's and run_tag.py's `>`); whether it did. The best
        starts at 0 there (`best_score = 0`): a score of 0 is never kept, so where every dev
        score is 0 the final parameters predict, as XTREME's final model does."""
        best = self.read()
        if score <= (0.0 if best is None else best["score"]):
            return False
        path = os.path.join(self.folder, f"step_{step}")
        if os.path.exists(path):
            shutil.rmtree(path)
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(path, params)
        checkpointer.wait_until_finished()
        if jax.process_index() == 0:
            with open(self.record + ".tmp", "w") as f:
                json.dump({"step": step, "score": score, "path": os.path.basename(path)}, f)
            os.replace(self.record + ".tmp", self.record)
            if best is not None and best["path"] != os.path.basename(path):
                shutil.rmtree(os.path.join(self.folder, best["path"]), ignore_errors=True)
        return True

    def restore(self, like, shardings):
        best = self.read()
        target = abstract_with_shardings(like, shardings)
        path = os.path.join(self.folder, best["path"])
        return ocp.StandardCheckpointer().restore(path, target)


def selected_step(best: BestParams, final_step: int) -> int:
    """The step whose parameters predict under `best_then_final`, once the final step was
    offered last: the kept one, or the final when none was."""
    kept = best.read()
    return final_step if kept is None else kept["step"]


def run(tuning: TaskTuning) -> dict | None:
    """Trains from the newest readable checkpoint (or step 0) to `train.stop_at` or
    `train.steps`, then predicts every test language (and each of `examples.devs`) with the
    selected parameters. Returns the results with the predictions (`"predictions"`: language →
    one per example; `"dev_predictions"` likewise), or None when it stopped short of
    `train.steps` (a preemption notice, `train.stop_at`: the checkpoint is saved; run again to
    resume)."""
    plan, kind, examples = tuning.plan, tuning.kind, tuning.examples
    best = BestParams(tuning.workdir)

    # Encoded once, for every evaluation; a task without a development set has none to score.
    dev = encode(tuning, examples.dev, examples.dev_language) if examples.dev else None

    def dev_score(params) -> float:
        return kind.score(examples.dev, predictions(tuning, params, dev))

    def evaluate(params, _stage: int) -> dict[str, float]:
        score = dev_score(params)
        log.info("%s: %.2f on the %s development set", plan.task, score, examples.dev_language)
        return {"eval/dev": score}

    scores: dict[int, float] = {}  # this invocation's evaluations

    def keep_best(params, step: int, scalars: Mapping[str, float]) -> None:
        scores[step] = scalars["eval/dev"]
        if best.offer(params, step, scalars["eval/dev"]):
            log.info("%s: the best on the development set so far (step %d)", plan.task, step)

    evaluates = bool(examples.dev) and plan.loop.eval_every > 0
    selects = plan.select == "best_then_final"
    state = loop.run(
        loop.Loop(
            tuning.workdir,
            tuning.training,
            plan.pipeline.dataset(tuning.batches, plan.loop.steps),
            loop.checkpointer(tuning.workdir, plan.loop),
            **loop.settings(plan.loop),
            evaluate=evaluate if evaluates else None,
            after_evaluate=keep_best if evaluates and selects else None,
            run_config=plan.record.tree(),
        )
    )
    step = int(state.step)
    if step < plan.loop.steps:  # preempted, or halted at `train.stop_at`: not finished
        return None
    params = state.params
    if evaluates and selects and selected_step(best, step) != step:  # the last was offered
        chosen = best.read()
        log.info("%s: predicting with step %d's parameters", plan.task, chosen["step"])
        params = best.restore(params, tuning.training.state_shardings.params)
    elif evaluates and selects and step in scores:
        chosen = {"step": step, "score": scores[step]}
    else:
        chosen = {"step": step, "score": dev_score(params) if examples.dev else None}
    predicted, dev_predicted = {}, {}
    for lang, test in examples.tests.items():
        log.info("%s: predicting %s (%d examples)", plan.task, lang, len(test))
        predicted[lang] = predictions(tuning, params, encode(tuning, test, lang))
    for lang, dev_set in examples.devs.items():
        log.info("%s: predicting %s dev (%d examples)", plan.task, lang, len(dev_set))
        dev_predicted[lang] = predictions(tuning, params, encode(tuning, dev_set, lang))
    results = {
        "task": plan.task,
        "kind": kind.name,
        "steps": step,
        "train_language": examples.train_language,
        "train_rows": len(tuning.train_rows),
        "selected_step": chosen["step"],
        "dev": chosen["score"],
    }
    return {**results, "predictions": predicted, "dev_predictions": dev_predicted}
