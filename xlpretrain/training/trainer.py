"""Training as a library: `build` a run from its plan (`xlpretrain.training.plan.resolve`):
mesh, corpus, tokenizer, model, sharded state, input pipeline, checkpointer, evaluator; then
`run` it — resuming from the workdir's newest readable checkpoint, checkpointing on schedule
and on preemption, logging metrics, stopping on repeated non-finite steps.
`python -m xlpretrain.train` is its command line.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil

import jax

from xlpretrain import objectives as objectives_lib
from xlpretrain.convert import folder as convert_folder
from xlpretrain.data.corpora.corpus import (
    held_out_splits,
    load_corpus,
    split_off_held_out,
)
from xlpretrain.data.corpora.run_tokenizer import load_tokenizer
from xlpretrain.data.pretraining.pipeline import Corpus, StepBatchBuilder
from xlpretrain.data.pretraining.sampling import format_sampling_table
from xlpretrain.training import loop, warm_start
from xlpretrain.training import workdir as workdir_lib
from xlpretrain.training.checkpoint import Checkpointer
from xlpretrain.training.evaluation import Evaluator, build_evaluator
from xlpretrain.training.plan import RunPlan, resume_terms
from xlpretrain.training.step import Training, TrainState, setup_training
from xlpretrain.training.workdir import WorkdirError, check_workdir, save_config

log = logging.getLogger("xlpretrain")


def check_free_space(workdir: str, state, keep: int) -> None:
    """One checkpoint is the train state's bytes; Orbax holds ``keep`` of them and writes the
    next beside them before deleting the oldest. Stops a run that could not save its first."""
    one = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
    free = shutil.disk_usage(workdir).free
    if free < one:
        raise WorkdirError(
            f"workdir {workdir}: {free / 2**20:.1f} MiB free, but one checkpoint of this "
            f"model takes {one / 2**20:.1f} MiB (train.keep_checkpoints={keep} take "
            f"{(keep + 1) * one / 2**20:.1f} MiB)"
        )
    if free < (keep + 1) * one:
        log.warning(
            "workdir %s: %.1f MiB free; train.keep_checkpoints=%d checkpoints of %.1f MiB "
            "will not fit",
            workdir,
            free / 2**20,
            keep,
            one / 2**20,
        )


def _check_languages(workdir: str, languages: list[str]) -> None:
    """Language ids index the saved list: a resumed run must see the same languages."""
    path = os.path.join(workdir, "languages.json")
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        if saved != languages:
            raise ValueError(
                f"the corpus languages differ from those in {path} ({len(saved)} saved, "
                f"{len(languages)} now): language ids would change; use a new workdir"
            )
    elif jax.process_index() == 0:
        with open(path, "w") as f:
            json.dump(languages, f)


@dataclasses.dataclass
class Trainer:
    """Everything a run builds before its first step; `run()` drives it."""

    plan: RunPlan
    workdir: str
    training: Training
    builder: StepBatchBuilder
    checkpointer: Checkpointer
    evaluator: Evaluator | None = None


def finished(plan: RunPlan, workdir: str) -> str | None:
    """Why a run of `plan` in `workdir` has nothing left to do (its newest checkpoint is at its
    last step), or None: read from the checkpoint folder alone, before any data is scanned."""
    checkpointer = loop.checkpointer(workdir, plan.loop)
    try:
        return loop.finished(workdir, checkpointer.latest_step(), plan.loop)
    finally:
        checkpointer.close()


def check_resume(plan: RunPlan, workdir: str, step: int) -> None:
    """The resume guard (`workdir.check_resume`) for pre-training, which also compares the
    held-out shares of the corpus kinds the run reads, in the new config and the saved one."""
    kinds = plan.sources()
    workdir_lib.check_resume(workdir, plan.record, step, lambda record: resume_terms(record, kinds))


def build(plan: RunPlan, workdir: str, devices: list[jax.Device] | None = None) -> Trainer:
    """Builds the run of `plan` on `devices` (default: all)."""
    workdir = os.path.abspath(workdir)
    check_workdir(workdir)
    plan = plan.sized(workdir)
    checkpointer = loop.checkpointer(workdir, plan.loop)
    resume_step = checkpointer.latest_step()
    if resume_step is not None:
        check_resume(plan, workdir, resume_step)
    pretrained = None
    init_checkpoint = plan.corpus.init_checkpoint
    if init_checkpoint and resume_step is None:  # resuming ignores it
        pretrained = warm_start.read(init_checkpoint, plan.model, plan.init_changes)
    mesh = plan.mesh.make(devices)
    plan.check_batch_divides(mesh.shape)
    corpus, held_out = split_off_held_out(
        load_corpus(plan.corpus, plan.sources()), held_out_splits(plan.corpus, plan.sources())
    )
    _check_languages(workdir, corpus.languages)
    tokenizer = load_tokenizer(plan.corpus, workdir, corpus, plan.model.vocab_size)
    plan = plan.with_special_ids(tokenizer.special)

    model, init_params = objectives_lib.build_model(
        plan.model_config(len(corpus.languages)), plan.objectives, plan.contexts
    )
    if jax.process_index() == 0:
        convert_folder.record_family(
            workdir, objectives_lib.model_family(plan.objectives), plan.model
        )
    log.info("initialising the model and its optimizer state on %d device(s)", mesh.size)
    training = setup_training(plan, model, init_params, mesh)
    check_free_space(workdir, training.state, plan.loop.keep_checkpoints)
    if pretrained is not None:
        fresh = jax.device_get(training.state.params)
        params, _, _ = warm_start.merge(fresh, model.config, pretrained, init_checkpoint)
        params = jax.device_put(params, training.state_shardings.params)
        training = dataclasses.replace(training, state=training.state.replace(params=params))

    builder = plan.batch_builder(corpus, tokenizer)
    for title, counts, probabilities in _sampling_tables(builder, corpus):
        for line in format_sampling_table(counts, probabilities, title):
            log.info("%s", line)

    evaluator = build_evaluator(plan, model, training, held_out, tokenizer, builder)
    save_config(workdir, plan.record, resume_step or 0)  # last: a failed start changes none
    return Trainer(plan, workdir, training, builder, checkpointer, evaluator)


def _sampling_tables(builder: StepBatchBuilder, corpus: Corpus):
    if builder.mono_probabilities:
        counts = {lang: corpus.mono.num_lines(lang) for lang in corpus.mono.languages}
        yield "monolingual sampling (languages)", counts, builder.mono_probabilities
    if builder.parallel_probabilities:
        counts = {f"{a}-{b}": corpus.parallel.num_lines((a, b)) for a, b in corpus.parallel.pairs}
        probabilities = {f"{a}-{b}": p for (a, b), p in builder.parallel_probabilities.items()}
        yield "parallel sampling (language pairs)", counts, probabilities


def next_steps(workdir: str) -> list[str]:
    """What a finished pre-training run suggests: export it, measure what it learned."""
    return [
        f"python -m xlpretrain.convert to-hf {workdir} {workdir}/hf  (a Hugging Face model)",
        f"python -m xlpretrain.eval.retrieval --workdir {workdir} --data DATA  "
        "(cross-lingual retrieval on DATA/parallel/<l1>-<l2>.tsv)",
    ]


def run(trainer: Trainer) -> TrainState:
    """Trains from the newest readable checkpoint (or step 0) to `train.stop_at` or
    `train.steps` on the shared loop (`xlpretrain.training.loop`)."""
    plan = trainer.plan
    dataset = plan.pipeline.dataset(trainer.builder, plan.loop.steps)
    return loop.run(
        loop.Loop(
            trainer.workdir,
            trainer.training,
            dataset,
            trainer.checkpointer,
            **loop.settings(plan.loop),
            stage_of=plan.stage_index,
            describe_stage=plan.describe_stage,
            restarts_moments=plan.starts_training_others,
            staged=len(plan.stages) > 1,
            evaluate=trainer.evaluator,
            baselines=trainer.evaluator.baselines if trainer.evaluator else {},
            data_scalars=plan.anneal.at if plan.anneal else None,
            profile=plan.profile,
            next_steps=next_steps(trainer.workdir),
            run_config=plan.record.tree(),
            curves=True,
        )
    )
