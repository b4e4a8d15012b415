"""Sentence-pair classification fine-tuning (XNLI, PAWS-X) as a library, on pre-training's loop.

`build` a run from its plan (`xlpretrain.training.finetune_plan.resolve_finetuning`) — the
pre-trained model (`init.path`: a training workdir or a checkpoint folder), the pairs of one
training language and of every evaluation language (`xlpretrain.data.pairs`), a
`PairClassifier` sharded over the mesh by the logical rules, its optimizer — then `run` it on
`xlpretrain.training.loop`, the loop pre-training runs on: gradient accumulation, checkpoints
of the state and the input iterator with exact resume, preemption, divergence, metrics, and
accuracy on every evaluation language each `eval.every_steps` steps.
At the end, accuracy on the training pairs and on every evaluation language (zero-shot
transfer), each beside chance (its file's majority-label share), goes to `WORKDIR/results.json`
and closes the log. `python -m xlpretrain.eval.finetune` is its command line.

Optimisation: pre-training's clipped AdamW (`xlpretrain.training.optim.adamw_from`), linear
warm-up over the first `optim.warmup_fraction` of the steps then linear decay, times a
layer-wise learning-rate decay (ERNIE-M, ELECTRA): the head learns at the full rate, encoder
layer i (0-based) at `layer_decay ** (num_layers - i)`, the embeddings at
`layer_decay ** (num_layers + 1)`, so the lower, more general layers move least.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import traverse_util

from xlpretrain import backbones
from xlpretrain.convert import folder
from xlpretrain.core.errors import ConfigError
from xlpretrain.data.pairs import (
    TASK,
    Encoded,
    PairBatches,
    PairSet,
    encode_pairs,
    read_pairs,
)
from xlpretrain.data.sources import DataError, format_stats, parse_pair
from xlpretrain.model.task_heads import PairClassifier
from xlpretrain.objectives.declaration import predictions
from xlpretrain.objectives.task_losses import classification_loss
from xlpretrain.training import loop
from xlpretrain.training import workdir as workdir_lib
from xlpretrain.training.finetune_plan import FineTunePlan, TaskData, resume_terms
from xlpretrain.training.optim import adamw_from, parameter_path
from xlpretrain.training.prediction import Predictor, make_predictor
from xlpretrain.training.sections import OptimizerSettings
from xlpretrain.training.step import Training, TrainState, make_train_step, sharded_training
from xlpretrain.training.workdir import check_workdir, save_config

log = logging.getLogger("xlpretrain")
Params = Any


# --- data -------------------------------------------------------------------------------------


@dataclasses.dataclass
class Task:
    """The training pairs, the evaluation pairs per language and the label names."""

    train: Encoded
    evaluation: dict[str, Encoded]
    labels: list[str]


def folder_languages(name: str) -> tuple[str, str]:
    """The languages of a data folder's premises and hypotheses: `<l1>-<l2>` one each, as
    parallel files are named (`translation_pairs`); any other name (`en`, `zh-Hant-TW`) one for
    both (XNLI)."""
    try:
        return parse_pair(name)
    except DataError:
        return name, name


def load_task(data: TaskData, pretrained: folder.Pretrained, plug_in: bool) -> Task:
    """Reads `data.dir/<lang>/<split>.tsv` and tokenizes it for the pre-trained model."""
    if not os.path.isdir(data.dir):
        raise DataError(f"config key 'data.dir': no folder {data.dir}")
    languages = list(data.eval_languages) or sorted(
        name
        for name in os.listdir(data.dir)
        if os.path.isfile(os.path.join(data.dir, name, f"{data.eval_split}.tsv"))
    )
    if not languages:
        raise DataError(f"no <lang>/{data.eval_split}.tsv file in {data.dir}")
    train = read_pairs(os.path.join(data.dir, data.train_language, f"{data.train_split}.tsv"))
    evaluation = {
        lang: read_pairs(os.path.join(data.dir, lang, f"{data.eval_split}.tsv"))
        for lang in languages
    }
    stats = {"train": train.stats, **{lang: s.stats for lang, s in evaluation.items()}}
    for line in format_stats(stats):
        log.info("data: %s", line)

    labels = list(data.labels) or sorted(set(train.labels))
    label_ids = {label: i for i, label in enumerate(labels)}
    lang_index = {lang: i for i, lang in enumerate(pretrained.languages)}

    def encode(pairs: PairSet, name: str) -> Encoded:
        languages = folder_languages(name)
        unknown = [lang for lang in languages if lang not in lang_index]
        if pretrained.config.num_languages and unknown:
            raise DataError(
                f"data folder {name!r}: {unknown[0]!r} is not among the model's languages "
                f"{list(pretrained.languages)}; a model with language embeddings needs folders "
                "named by its codes, <lang> or <l1>-<l2>"
            )
        return encode_pairs(
            pairs,
            pretrained.tokenizer,
            label_ids,
            max_length=data.max_length,
            plug_in=plug_in,
            lang_ids=(lang_index.get(languages[0], 0), lang_index.get(languages[1], 0)),
            layout=backbones.of(pretrained.config).pair_layout,
        )

    return Task(
        encode(train, data.train_language),
        {lang: encode(pairs, lang) for lang, pairs in evaluation.items()},
        labels,
    )


# --- optimisation -----------------------------------------------------------------------------


def layer_decay_factors(params: Params, num_layers: int, decay: float) -> Params:
    """Learning-rate multipliers per parameter, shaped to broadcast against it.

    Outside `backbone/`: 1. `backbone/encoder/layers/*` (stacked, layer on axis 0): layer i
    gets `decay ** (num_layers - i)`. The rest of the backbone (embeddings, tables shared by all
    layers): `decay ** (num_layers + 1)`.
    """
    per_layer = decay ** (num_layers - np.arange(num_layers, dtype=np.float64))

    def factor(path, leaf) -> np.ndarray:
        name = parameter_path(path)
        if not name.startswith("backbone/"):
            return np.float32(1.0)
        if name.startswith("backbone/encoder/layers/"):
            return per_layer.reshape((-1,) + (1,) * (leaf.ndim - 1)).astype(np.float32)
        return np.float32(decay ** (num_layers + 1))

    return jax.tree_util.tree_map_with_path(factor, params)


def scale_updates(factors: Params) -> optax.GradientTransformation:
    """Multiplies each update by its factor. After AdamW (update −lr·(m̂/√v̂ + wd·p)) this is
    exactly a per-parameter learning rate, including per layer of a stacked array."""
    return optax.stateless(lambda updates, _: jax.tree.map(jnp.multiply, updates, factors))


def make_finetune_optimizer(
    optim: OptimizerSettings, params: Params, num_layers: int
) -> optax.GradientTransformation:
    """Pre-training's clipped AdamW on its schedule (the warm-up a fraction of `train.steps`),
    then the layer-wise decay. `params` may be abstract: only paths and ranks are read."""
    factors = layer_decay_factors(params, num_layers, optim.layer_decay)
    return optax.chain(adamw_from(optim), scale_updates(factors))


# --- model, step, evaluation ------------------------------------------------------------------


def resolve_plug_in(setting: str, cross_attention: bool) -> bool:
    """Whether to plug VECO's cross-attention in, for `model.plug_in` and the model."""
    if setting == "in" and not cross_attention:
        raise ConfigError("config key 'model.plug_in': 'in' needs a cross-attention (VECO) model")
    return setting == "in" or (setting == "auto" and cross_attention)


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
            raise ValueError(f"{name}: the classifier needs {fresh.shape}, {source} has {has}")
        host = np.asarray(value, fresh.dtype)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    params = jax.tree_util.tree_map_with_path(
        take, training.state.params, training.state_shardings.params
    )
    return dataclasses.replace(training, state=training.state.replace(params=params))


@dataclasses.dataclass
class Accuracy:
    """Accuracy (argmax class = label, dropout off) of parameters on encoded pairs."""

    predict: Predictor  # the argmax class of each row

    def __call__(self, params: Params, data: Encoded) -> float:
        return float(np.mean(self.predict(params, data) == data.label_ids))


def make_accuracy(
    classifier: PairClassifier, training: Training, rules, batch_size: int
) -> Accuracy:
    def argmax(params, batch):
        return classifier.apply({"params": params}, batch).argmax(-1)

    return Accuracy(make_predictor(argmax, training, rules, batch_size))


# --- the run ----------------------------------------------------------------------------------


def resumable_workdir(workdir: str, plan: FineTunePlan) -> tuple[str, int | None]:
    """The workdir, absolute and checked, and the step a run resumes from (None: it starts),
    refused where the recorded config differs in a term that changes the run."""
    workdir = os.path.abspath(workdir)
    check_workdir(workdir)
    resume_step = loop.checkpointer(workdir, plan.loop).latest_step()
    if resume_step is not None:
        workdir_lib.check_resume(workdir, plan.record, resume_step, resume_terms)
    return workdir, resume_step


def fine_tuning_training(
    plan: FineTunePlan,
    mesh: jax.sharding.Mesh,
    module: nn.Module,
    rows: Any,
    loss: Any,
    count: Any,
    pretrained: Params,
    batch_size: int,
) -> tuple[Training, PairBatches]:
    """A fine-tuning run's sharded state, with the pre-trained encoder in `module`'s
    `backbone` and a new head, its step (`loss`, a mean over `count` items), and its batches
    of the encoded training `rows`: what every fine-tuning program trains with (`plan` a
    `FineTunePlan` or a `task_plan.TaskPlan`: their `optim`, `loop`, `mesh`, `init_path`)."""
    example = rows.batch(np.zeros(1, np.int64))

    def init_params(rng):
        return module.init(rng, example)["params"]

    abstract = jax.eval_shape(lambda rng: nn.unbox(init_params(rng)), jax.random.key(0))
    num_layers = module.config.num_layers
    optimizer = make_finetune_optimizer(plan.optim, abstract, num_layers)
    step = make_train_step(
        module,
        {TASK: loss},
        {TASK: 1.0},
        optimizer,
        plan.optim.learning_rates(),
        plan.loop.grad_accum,
        counts={TASK: count},
    )
    training = sharded_training(
        mesh,
        plan.mesh.rules,
        init_params,
        optimizer,
        [step],
        plan.loop.seed,
        prng_impl=plan.loop.prng_impl,
    )
    training = with_backbone(training, pretrained, plan.init_path)
    batches = PairBatches(
        rows,
        batch_size,
        plan.loop.seed,
        process_index=jax.process_index(),
        process_count=jax.process_count(),
    )
    return training, batches


@dataclasses.dataclass
class FineTuning:
    """Everything a fine-tuning run builds before its first step; `run()` drives it."""

    plan: FineTunePlan
    workdir: str
    task: Task
    plug_in: bool
    training: Training
    batches: PairBatches
    accuracy: Accuracy


def build(plan: FineTunePlan, workdir: str, devices: list[jax.Device] | None = None) -> FineTuning:
    """Builds the run of `plan` on `devices` (default: all)."""
    mesh = plan.mesh.make(devices)
    plan.check_batch_divides(dict(mesh.shape))
    pretrained = folder.read(plan.init_path)
    if pretrained.tokenizer is None:
        raise FileNotFoundError(f"{plan.init_path} has no tokenizer (tokenizer.model or .json)")
    workdir, resume_step = resumable_workdir(workdir, plan)
    config = plan.model.applied_to(pretrained.config)
    plug_in = resolve_plug_in(plan.model.plug_in, config.cross_attention)
    task = load_task(plan.data, pretrained, plug_in)
    classifier = PairClassifier(
        config, len(task.labels), plug_in=plug_in, task_head=backbones.of(config).task_head
    )
    log.info(
        "fine-tuning %s (cross-attention plugged %s) on %d %s pairs, labels %s",
        plan.init_path,
        "in" if plug_in else "out",
        len(task.train),
        plan.data.train_language,
        task.labels,
    )

    training, batches = fine_tuning_training(
        plan, mesh, classifier, task.train, classification_loss, predictions,
        pretrained.params, plan.data.batch_size,
    )  # fmt: skip
    accuracy = make_accuracy(classifier, training, plan.mesh.rules, plan.data.batch_size)
    save_config(workdir, plan.record, resume_step or 0)  # last: a failed start changes none
    return FineTuning(plan, workdir, task, plug_in, training, batches, accuracy)


def run(tuning: FineTuning) -> dict | None:
    """Trains on the shared loop from the workdir's newest readable checkpoint (or step 0) to
    `train.stop_at` or `train.steps`, then measures accuracy on the training pairs and every
    evaluation language and writes `WORKDIR/results.json`. Returns the results, or None when a
    preemption notice stopped the run early (the checkpoint is saved; run again to resume)."""
    plan, task = tuning.plan, tuning.task

    def evaluate(params, _stage: int) -> dict[str, float]:
        scores = {lang: tuning.accuracy(params, data) for lang, data in task.evaluation.items()}
        log.info("held-out accuracy: %s", " ".join(f"{k} {v:.3f}" for k, v in scores.items()))
        return {
            "eval/accuracy": float(np.mean(list(scores.values()))),
            **{f"eval/accuracy/{lang}": score for lang, score in scores.items()},
        }

    state: TrainState = loop.run(
        loop.Loop(
            tuning.workdir,
            tuning.training,
            plan.pipeline.dataset(tuning.batches, plan.loop.steps),
            loop.checkpointer(tuning.workdir, plan.loop),
            **loop.settings(plan.loop),
            evaluate=evaluate if plan.loop.eval_every else None,
            run_config=plan.record.tree(),
        )
    )
    step = int(state.step)
    if step < plan.loop.end_step:
        return None

    languages = {
        lang: {
            "accuracy": tuning.accuracy(state.params, data),
            "chance": data.majority_rate(),
            "n": len(data),
        }
        for lang, data in task.evaluation.items()
    }
    results = {
        "train_language": plan.data.train_language,
        "labels": task.labels,
        "plug_in": tuning.plug_in,
        "steps": step,
        "train_accuracy": tuning.accuracy(state.params, task.train),
        "train_chance": task.train.majority_rate(),
        "languages": languages,
        "average": float(np.mean([r["accuracy"] for r in languages.values()])),
        "average_chance": float(np.mean([r["chance"] for r in languages.values()])),
    }
    log.info(
        "accuracy on the %d training pairs: %.4f (chance %.4f)",
        len(task.train),
        results["train_accuracy"],
        results["train_chance"],
    )
    for lang, result in languages.items():
        log.info(
            "accuracy %s: %.4f (chance %.4f, %d pairs%s)",
            lang,
            result["accuracy"],
            result["chance"],
            result["n"],
            "; the training language" if lang == plan.data.train_language else "",
        )
    log.info(
        "average over %d languages: %.4f (chance %.4f)",
        len(languages),
        results["average"],
        results["average_chance"],
    )
    if jax.process_index() == 0:
        with open(os.path.join(tuning.workdir, "results.json"), "w") as f:
            json.dump(results, f, indent=2)
    return results
