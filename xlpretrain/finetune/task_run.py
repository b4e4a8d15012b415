"""One fine-tuning run of a task of any kind (`xlpretrain.tasks`) on pre-training's loop:
prepare (read the pre-trained model, encode the training examples), build (the kind's module
with the pre-trained encoder in place, sharded over the mesh, its optimizer with layer-wise
decay), loop, select, predict.

`run` trains on `xlpretrain.training.loop`: gradient accumulation, checkpoints with exact resume,
preemption, divergence, metrics. Each `eval.every_steps` steps (and at the end) the kind's own
metric on the development examples is logged; with `select` `best_then_final` the best
parameters so far are kept in `WORKDIR/best/` (XTREME's `--save_only_best_checkpoint`: its
zero-shot protocol selects on English dev; the final step is offered last, as
`--eval_all_checkpoints` compares the final model with the best), and the test languages are
predicted with them; with `none`, the final parameters predict (XTREME's QA).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import traverse_util

from xlpretrain import backbones
from xlpretrain.convert import folder, task_workdir
from xlpretrain.core.errors import ConfigError
from xlpretrain.data.corpora.sources import DataError, parse_pair
from xlpretrain.finetune import plan as plan_lib
from xlpretrain.finetune.batches import TASK, RowBatches
from xlpretrain.finetune.examples import TaskExamples
from xlpretrain.finetune.layer_decay import make_finetune_optimizer
from xlpretrain.finetune.plan import TaskPlan
from xlpretrain.tasks import TaskKind
from xlpretrain.tasks.declaration import Encoding, Head, Rows
from xlpretrain.training import loop
from xlpretrain.training import workdir as workdir_lib
from xlpretrain.training.checkpoint import (
    abstract_with_shardings,
    save_replicated_arrays_from_one_replica_on_cpu,
)
from xlpretrain.training.optim import parameter_path
from xlpretrain.training.prediction import Predictor, make_predictor
from xlpretrain.training.step import Training, make_train_step, sharded_training
from xlpretrain.training.workdir import check_workdir, save_config

log = logging.getLogger("xlpretrain")
BEST = task_workdir.BEST_DIR  # WORKDIR/best/: the parameters that scored best on dev
Params = Any


def resolve_plug_in(setting: str, cross_attention: bool) -> bool:
    """Whether to plug VECO's cross-attention in, for `model.plug_in` and the model."""
    if setting == "in" and not cross_attention:
        raise ConfigError("config key 'model.plug_in': 'in' needs a cross-attention (VECO) model")
    return setting == "in" or (setting == "auto" and cross_attention)


def folder_languages(name: str) -> tuple[str, str]:
    """The languages of a pair's two sentences in a set named `name`: `<l1>-<l2>` one each, as
    parallel files are named (`translation_pairs`); any other name (`en`, `zh-Hant-TW`) one for
    both."""
    try:
        return parse_pair(name)
    except DataError:
        return name, name


@dataclasses.dataclass(frozen=True)
class LanguageIds:
    """The rows of the model's language embeddings a set's tokens carry, by the set's name: 0
    without language embeddings, or for a language the model was not trained on — unless the
    sets are named by the user (`TaskExamples.named_languages`), where that is an error."""

    languages: tuple[str, ...]  # the model's, in row order
    embedded: bool  # the model has language embeddings
    named: bool

    def __call__(self, name: str) -> tuple[int, int]:
        """The ids of the first and the second sentence's tokens (`folder_languages`)."""
        rows = {lang: i for i, lang in enumerate(self.languages)}
        pair = folder_languages(name)
        unknown = [lang for lang in pair if lang not in rows]
        if self.named and self.embedded and unknown:
            raise DataError(
                f"data folder {name!r}: {unknown[0]!r} is not among the model's languages "
                f"{list(self.languages)}; a model with language embeddings needs folders named "
                "by its codes, <lang> or <l1>-<l2>"
            )
        return rows.get(pair[0], 0), rows.get(pair[1], 0)


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
    batches: RowBatches
    predict: Predictor
    language_ids: LanguageIds


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What a task reads before its plan: the pre-trained model, how its examples are encoded
    (the test rows' settings) and the training rows, whose count sets the steps of an epoch."""

    pretrained: folder.Pretrained
    encoding: Encoding
    train_rows: Rows
    language_ids: LanguageIds


def prepare(
    init_path: str,
    kind: TaskKind,
    examples: TaskExamples,
    *,
    max_length: int,
    settings: object,
    plug_in: str,
) -> Prepared:
    """Reads the pre-trained model at `init_path` and encodes the training examples.
    `settings`: the kind's own (`TaskKind.section`'s values, or None); `plug_in`:
    `model.plug_in` (VECO's cross-attention for sentence pairs)."""
    pretrained = folder.read(init_path)
    if pretrained.tokenizer is None:
        raise FileNotFoundError(f"{init_path} has no tokenizer (tokenizer.model or .json)")
    backbone = backbones.of(pretrained.config)
    language_ids = LanguageIds(
        tuple(pretrained.languages),
        bool(pretrained.config.num_languages),
        examples.named_languages,
    )
    encoding = Encoding(
        pretrained.tokenizer, examples.labels or kind.label_names(examples.train),
        backbone.pair_layout,
        max_length, settings,
        plug_in=resolve_plug_in(plug_in, pretrained.config.cross_attention),
        lang_ids=language_ids(examples.train_language),
    )  # fmt: skip
    train_rows = kind.encode(examples.train, dataclasses.replace(encoding, training=True))
    if not len(train_rows):
        raise ValueError(f"{init_path}: none of the {len(examples.train)} training examples fits")
    return Prepared(pretrained, encoding, train_rows, language_ids)


def resumable_workdir(workdir: str, plan: TaskPlan) -> tuple[str, int | None]:
    """The workdir, absolute and checked, and the step a run resumes from (None: it starts),
    refused where the recorded config differs in a term that changes the run."""
    workdir = os.path.abspath(workdir)
    check_workdir(workdir)
    resume_step = loop.checkpointer(workdir, plan.loop).latest_step()
    if resume_step is not None:
        workdir_lib.check_resume(workdir, plan.record, resume_step, plan_lib.resume_terms)
    return workdir, resume_step


def with_backbone(training: Training, backbone: Params, source: str) -> Training:
    """The state with the pre-trained `backbone` in place of the fresh one, each array built
    shard by shard where the state's sharding puts it (no device holds the whole model, and
    every process reads only its shards); the head stays as initialised. An LM head, or a
    cross-attention plugged out, is left behind."""
    flat = traverse_util.flatten_dict(backbone, sep="/")

    def take(path, fresh, sharding):
        name = parameter_path(path)
        if not name.startswith("backbone/"):
            return fresh
        value = flat.get(name.removeprefix("backbone/"))
        found = None if value is None else tuple(value.shape)
        if found != tuple(fresh.shape):
            has = "no such parameter" if found is None else f"shape {found}"
            raise ValueError(f"{name}: the task's model needs {fresh.shape}, {source} has {has}")
        host = np.asarray(value, fresh.dtype)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    params = jax.tree_util.tree_map_with_path(
        take, training.state.params, training.state_shardings.params
    )
    return dataclasses.replace(training, state=training.state.replace(params=params))


def fine_tuning_training(
    plan: TaskPlan, mesh: jax.sharding.Mesh, module: nn.Module, kind: TaskKind, rows: Rows,
    pretrained: Params,
) -> tuple[Training, RowBatches]:  # fmt: skip
    """A task's sharded state, with the pre-trained encoder in `module`'s `backbone` and a new
    head, its step (the kind's loss, a mean over its count) and its batches of the encoded
    training `rows`."""
    example = rows.batch(np.zeros(1, np.int64))

    def init_params(rng):
        return module.init(rng, example)["params"]

    abstract = jax.eval_shape(lambda rng: nn.unbox(init_params(rng)), jax.random.key(0))
    optimizer = make_finetune_optimizer(plan.optim, abstract, module.config.num_layers)
    step = make_train_step(
        module, {TASK: kind.loss}, {TASK: 1.0}, optimizer, plan.optim.learning_rates(),
        plan.loop.grad_accum, counts={TASK: kind.count},
    )  # fmt: skip
    training = sharded_training(
        mesh, plan.mesh.rules, init_params, optimizer, [step], plan.loop.seed,
        prng_impl=plan.loop.prng_impl,
    )  # fmt: skip
    training = with_backbone(training, pretrained, plan.init_path)
    batches = RowBatches(
        rows, plan.batch_size, plan.loop.seed, jax.process_index(), jax.process_count()
    )
    return training, batches


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
    head = Head(config, backbones.of(config).task_head, len(labels), encoding.plug_in)
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
        plan, mesh, model, kind, train_rows, prepared.pretrained.params
    )
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
        prepared.language_ids,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Encoded:
    """Examples of one language with their rows and the encoding that made them."""

    examples: Sequence[Any]
    rows: Rows
    encoding: Encoding


def encode(tuning: TaskTuning, examples: Sequence[Any], language: str) -> Encoded:
    """`examples` of `language` as rows to predict (no training targets)."""
    encoding = dataclasses.replace(tuning.encoding, lang_ids=tuning.language_ids(language))
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
        save_replicated_arrays_from_one_replica_on_cpu()
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
    one per example; `"dev_predictions"` likewise; `"train_predictions"` where
    `examples.predict_train`), or None when it stopped short of
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
        "plug_in": tuning.encoding.plug_in,
        "steps": step,
        "train_language": examples.train_language,
        "train_rows": len(tuning.train_rows),
        "selected_step": chosen["step"],
        "dev": chosen["score"],
    }
    if examples.predict_train:
        train = encode(tuning, examples.train, examples.train_language)
        results["train_predictions"] = predictions(tuning, params, train)
    return {**results, "predictions": predicted, "dev_predictions": dev_predicted}
