"""Training as a library: `build` a run from a validated config (mesh, corpus, tokenizer,
plan, model, sharded state, input pipeline, checkpointer, evaluator), then `run` it — resuming
from the workdir's newest readable checkpoint, checkpointing on schedule and on preemption,
logging metrics, stopping on repeated non-finite steps. `python -m xlpretrain.train` is its
command line.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import shutil

import jax
import ml_collections

from xlpretrain import objectives as objectives_lib
from xlpretrain.convert import folder as convert_folder
from xlpretrain.core.errors import ConfigError
from xlpretrain.data.corpus import (
    held_out_shares,
    held_out_splits,
    load_corpus,
    load_tokenizer,
    split_off_held_out,
    with_vocab_size,
)
from xlpretrain.data.pipeline import Corpus, StepBatchBuilder, make_dataset
from xlpretrain.data.sampling import format_sampling_table
from xlpretrain.data.tokenizer import Tokenizer
from xlpretrain.parallel.sharding import make_mesh
from xlpretrain.training import loop, warm_start
from xlpretrain.training.checkpoint import Checkpointer
from xlpretrain.training.config import RESUME_NEUTRAL, check_batch_divides, validate
from xlpretrain.training.evaluation import Evaluator, build_evaluator
from xlpretrain.training.optim import learning_rate_schedule
from xlpretrain.training.plan import RunPlan
from xlpretrain.training.step import Training, TrainState, setup_training
from xlpretrain.training.workdir import WorkdirError, check_resume, check_workdir, save_config

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

    cfg: ml_collections.ConfigDict
    plan: RunPlan
    workdir: str
    training: Training
    builder: StepBatchBuilder
    checkpointer: Checkpointer
    evaluator: Evaluator | None = None


def finished(cfg: ml_collections.ConfigDict, workdir: str) -> str | None:
    """Why a run of `cfg` in `workdir` has nothing left to do (its newest checkpoint is at its
    last step), or None: read from the checkpoint folder alone, before any data is scanned."""
    checkpointer = loop.checkpointer(workdir, cfg.train)
    try:
        return loop.finished(workdir, checkpointer.latest_step(), cfg.train)
    finally:
        checkpointer.close()


def build(
    cfg: ml_collections.ConfigDict, workdir: str, devices: list[jax.Device] | None = None
) -> Trainer:
    """Validates `cfg` and builds the run on `devices` (default: all)."""
    validate(cfg)
    workdir = os.path.abspath(workdir)
    check_workdir(workdir)
    cfg = with_vocab_size(cfg, workdir)
    plan = RunPlan.from_config(cfg)
    checkpointer = loop.checkpointer(workdir, cfg.train)
    resume_step = checkpointer.latest_step()
    if resume_step is not None:
        shares = functools.partial(held_out_shares, kinds=plan.sources())
        check_resume(workdir, cfg, resume_step, RESUME_NEUTRAL, learning_rate_schedule, shares)
    mesh = make_mesh(cfg.mesh.data, cfg.mesh.fsdp, cfg.mesh.tensor, devices)
    check_batch_divides(cfg, mesh.shape)
    corpus, held_out = split_off_held_out(
        load_corpus(cfg, plan.sources()), held_out_splits(cfg, plan.sources())
    )
    _check_languages(workdir, corpus.languages)
    pretrained = None
    if cfg.init.checkpoint and resume_step is None:  # resuming ignores it
        if not os.path.isdir(cfg.init.checkpoint):
            raise ConfigError(f"config key 'init.checkpoint': no folder {cfg.init.checkpoint}")
        pretrained = convert_folder.read(cfg.init.checkpoint)
    tokenizer = load_tokenizer(cfg, workdir, corpus)

    model, init_params = objectives_lib.build_model(cfg, plan.objectives, len(corpus.languages))
    if jax.process_index() == 0:
        convert_folder.record_family(workdir, objectives_lib.model_family(plan.objectives))
    training = setup_training(cfg, plan, model, init_params, mesh)
    check_free_space(workdir, training.state, cfg.train.keep_checkpoints)
    if pretrained is not None:
        fresh = jax.device_get(training.state.params)
        params, _, _ = warm_start.merge(fresh, model.config, pretrained, cfg.init.checkpoint)
        params = jax.device_put(params, training.state_shardings.params)
        training = dataclasses.replace(training, state=training.state.replace(params=params))

    builder = batch_builder(cfg, plan, corpus, tokenizer)
    for title, counts, probabilities in _sampling_tables(builder, corpus):
        for line in format_sampling_table(counts, probabilities, title):
            log.info("%s", line)

    evaluator = build_evaluator(cfg, plan, model, training, held_out, tokenizer, builder)
    save_config(workdir, cfg, resume_step or 0)  # last: a run that fails to start changes none
    return Trainer(cfg, plan, workdir, training, builder, checkpointer, evaluator)


def batch_builder(
    cfg: ml_collections.ConfigDict, plan: RunPlan, corpus: Corpus, tokenizer: Tokenizer
) -> StepBatchBuilder:
    """This process's step-batch builder for the plan's streams and stages, with the config's
    sampling and packing settings: the whole input pipeline but the grain plumbing."""
    return StepBatchBuilder(
        corpus,
        tokenizer,
        plan.streams,
        plan.phases,
        seed=cfg.train.seed,
        mono_alpha=cfg.data.mono_alpha,
        parallel_alpha=cfg.data.parallel_alpha,
        pack=cfg.data.pack,
        reset_positions=cfg.data.tlm_reset_positions,
        process_index=jax.process_index(),
        process_count=jax.process_count(),
        anneal=plan.anneal,
    )


def _sampling_tables(builder: StepBatchBuilder, corpus: Corpus):
    if builder.mono_probabilities:
        counts = {lang: corpus.mono.num_lines(lang) for lang in corpus.mono.languages}
        yield "monolingual sampling (languages)", counts, builder.mono_probabilities
    if builder.parallel_probabilities:
        counts = {f"{a}-{b}": corpus.parallel.num_lines((a, b)) for a, b in corpus.parallel.pairs}
        probabilities = {f"{a}-{b}": p for (a, b), p in builder.parallel_probabilities.items()}
        yield "parallel sampling (language pairs)", counts, probabilities


def _profile_window(spec: str) -> tuple[int, int] | None:
    if not spec:
        return None
    start, end = spec.split(":")
    return int(start), int(end)


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
    cfg = trainer.cfg
    dataset = make_dataset(
        trainer.builder,
        cfg.train.steps,
        num_workers=cfg.data.num_workers,
        prefetch=cfg.data.prefetch,
    )
    return loop.run(
        loop.Loop(
            trainer.workdir,
            trainer.training,
            dataset,
            trainer.checkpointer,
            **loop.settings(cfg.train),
            stage_of=trainer.plan.stage_index,
            describe_stage=trainer.plan.describe_stage,
            restarts_moments=trainer.plan.starts_training_others,
            staged=len(trainer.plan.stages) > 1,
            evaluate=trainer.evaluator,
            eval_every=cfg.eval.every_steps,
            baselines=trainer.evaluator.baselines if trainer.evaluator else {},
            data_scalars=trainer.plan.anneal.at if trainer.plan.anneal else None,
            profile=_profile_window(cfg.train.profile_steps),
            next_steps=next_steps(trainer.workdir),
            run_config=cfg.to_dict(),
        )
    )
