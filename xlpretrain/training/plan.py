"""The run plan: what a config means for a run, resolved once by `resolve`, the only reader of
the raw config.

`resolve` checks every key (`config.check_config`), then resolves and checks what the keys mean
together: the stages (objectives, weights, trainable parameters, global rows per objective),
every objective's typed settings (`objectives.declaration.Context`) and stream at its row length,
hence its prediction and placeholder slots and every batch's shapes, the data settings that
anneal with the step, and the typed sections the rest of the run reads — the model, the
corpus, sampling, the optimizer and its schedule, the loop, evaluation and the mesh. The
trainer, the step, evaluation, the input pipeline, `bench` and `aot` read the plan and never
the config, so the batch `aot` sizes is the batch training feeds. The config itself goes no
further than `RunPlan.record`: `config.json`'s content, to be written and compared, not read.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import ml_collections

from xlpretrain import backbones
from xlpretrain import objectives as objectives_lib
from xlpretrain.backbones.settings import SHARED
from xlpretrain.core.errors import check
from xlpretrain.data.corpora.corpus import (
    CorpusSettings,
    TfdsSettings,
    held_out_shares,
)
from xlpretrain.data.corpora.held_out import DEFAULT_FRACTION
from xlpretrain.data.corpora.run_tokenizer import tokenizer_vocab_size
from xlpretrain.data.pretraining.anneal import Anneal
from xlpretrain.data.pretraining.pipeline import Corpus, StepBatchBuilder
from xlpretrain.data.pretraining.streams import Phase, StreamSpec, phase_index
from xlpretrain.data.tokenizer import SpecialIds, Tokenizer
from xlpretrain.model.config import ModelConfig
from xlpretrain.objectives.declaration import Context, MaskRates, Objective
from xlpretrain.training.config import check_config, listed
from xlpretrain.training.record import ConfigRecord
from xlpretrain.training.sections import (
    LoopSettings,
    MeshSettings,
    OptimizerSettings,
    PipelineSettings,
)
from xlpretrain.training.stages import Stage, stages
from xlpretrain.training.workdir import ResumeTerms

FieldShapes = dict[str, tuple[tuple[int, ...], type]]
EVAL_SEED_OFFSET = 7919  # held-out rows never repeat the training stream's draws


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How step batches are drawn (`train.seed`, `data.*_alpha`, `data.pack`,
    `data.tlm_reset_positions`); the settings that anneal are the plan's `anneal`."""

    seed: int
    mono_alpha: float
    parallel_alpha: float
    pack: bool
    reset_positions: bool


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """`eval.*` beside the held-out data (which is the corpus's: `CorpusSettings`)."""

    every_steps: int  # 0: no evaluation during training
    batches: int  # held-out batches per stage
    retrieval_lines: int  # 0: no retrieval
    retrieval_layer: int  # -1: the middle layer


def corpus_settings(config: Mapping[str, Any]) -> CorpusSettings:
    """The corpus section of a config read as a mapping: a `ConfigDict`, or a record's tree
    (the resume guard compares which lines a saved config and the new one hold out)."""
    data, evaluation = config["data"], config["eval"]
    return CorpusSettings(
        store=data["store"],
        mono_dir=data["mono_dir"],
        parallel_dir=data["parallel_dir"],
        mono_tfds=TfdsSettings(**data["mono_tfds"]),
        parallel_tfds=TfdsSettings(
            **{
                **data["parallel_tfds"],
                "language_keys": tuple(data["parallel_tfds"]["language_keys"]),
            }
        ),
        strict=data["strict"],
        max_line_bytes=data["max_line_bytes"],
        demo_languages=data["demo_languages"],
        tokenizer_path=config["tokenizer"]["path"],
        sentences_per_language=config["tokenizer"]["sentences_per_language"],
        character_coverage=config["tokenizer"]["character_coverage"],
        init_checkpoint=config["init"]["checkpoint"],
        seed=config["train"]["seed"],
        evaluates=evaluation["every_steps"] > 0,
        eval_mono_dir=evaluation["mono_dir"],
        eval_parallel_dir=evaluation["parallel_dir"],
        held_out_fraction=evaluation.get("held_out_fraction", DEFAULT_FRACTION),
    )


@dataclasses.dataclass(frozen=True)
class RunPlan:
    stages: tuple[Stage, ...]
    objectives: Mapping[str, Objective]  # every objective some stage trains
    contexts: Mapping[str, Context]  # each one's typed settings
    # Per stage, each of its objectives' stream: its row length in that stage, its prediction
    # slots sized for the highest mask rate of the stage's steps.
    stage_streams: tuple[Mapping[str, StreamSpec], ...]
    model: ModelConfig  # the encoder (no language table: `model_config` adds the data's)
    language_embeddings: bool  # `model.language_embeddings`
    mask_rates: MaskRates  # `data.*_mask_rate`, as every objective's context has them
    # `data.batch_size` and `data.max_length`: the rows and row length of an objective that
    # sets none of its own, which `bench`'s PyTorch peer runs.
    batch_size: int
    max_length: int
    corpus: CorpusSettings
    sampling: Sampling
    pipeline: PipelineSettings
    optim: OptimizerSettings
    loop: LoopSettings
    evaluation: EvalSettings
    mesh: MeshSettings
    profile: tuple[int, int] | None  # `train.profile_steps`: [start, end) traced
    record: ConfigRecord  # the config as `config.json` records it: written, compared, not read
    anneal: Anneal | None = None  # `data.anneal`; streams are sized for its highest mask rates
    # `init.changes` without `model.`: settings a warm start changes from its checkpoint's
    init_changes: tuple[str, ...] = ()

    def model_config(self, num_languages: int, kernel_platform: str = "") -> ModelConfig:
        """The encoder of a run over `num_languages` languages (its language-embedding table,
        if `model.language_embeddings`), its kernels built for `kernel_platform` ('cpu',
        'gpu', 'tpu'; empty: this host's)."""
        return dataclasses.replace(
            self.model,
            num_languages=num_languages if self.language_embeddings else 0,
            kernel_platform=kernel_platform,
        )

    def with_vocab_size(self, vocab_size: int) -> RunPlan:
        """The plan of `model.vocab_size` = `vocab_size` (the tokenizer's, where the config
        gave 0), which its record keeps."""
        model = dataclasses.replace(self.model, vocab_size=vocab_size)
        record = self.record.with_value("model.vocab_size", vocab_size)
        contexts = {n: dataclasses.replace(c, model=model) for n, c in self.contexts.items()}
        return dataclasses.replace(self, model=model, contexts=contexts, record=record)

    def with_special_ids(self, special: SpecialIds) -> RunPlan:
        """The plan whose objectives know the special ids of the run's tokenizer, once it is
        loaded (`Context.special`)."""
        contexts = {n: dataclasses.replace(c, special=special) for n, c in self.contexts.items()}
        return dataclasses.replace(self, contexts=contexts)

    def sized(self, workdir: str | None) -> RunPlan:
        """The plan with `model.vocab_size` 0 replaced by the size of the tokenizer the run
        uses (`data.corpora.run_tokenizer.tokenizer_vocab_size`); unchanged where the config
        gives one."""
        if self.model.vocab_size:
            return self
        return self.with_vocab_size(tokenizer_vocab_size(self.corpus, workdir))

    def check_batch_divides(self, mesh_shape: Mapping[str, int]) -> None:
        """Every stream's micro-batch (its rows / grad_accum) splits evenly over the
        data-parallel devices of a mesh of `mesh_shape`: checked once the mesh is known,
        before compiling."""
        for stage in self.stages:
            for name, rows in stage.rows.items():
                self.mesh.check_rows_divide(
                    stage.rows_keys[name], rows, self.loop.grad_accum, mesh_shape, f" ({name})"
                )

    def batch_builder(
        self, corpus: Corpus, tokenizer: Tokenizer, held_out_stage: int | None = None
    ) -> StepBatchBuilder:
        """This process's step-batch builder: the whole input pipeline but the grain plumbing.
        For training, every stage's streams from the run's seed, the data settings annealed
        with the step; for `held_out_stage`, that stage's streams and rows at every index,
        from a seed of their own, the data settings as training ends (evaluation's batches)."""
        phases, seed, anneal = self.phases, self.sampling.seed, self.anneal
        if held_out_stage is not None:
            phases = [dataclasses.replace(phases[held_out_stage], start_step=0)]
            seed += EVAL_SEED_OFFSET
            anneal = anneal.settled() if anneal else None
        return StepBatchBuilder(
            corpus,
            tokenizer,
            phases,
            seed=seed,
            mono_alpha=self.sampling.mono_alpha,
            parallel_alpha=self.sampling.parallel_alpha,
            pack=self.sampling.pack,
            reset_positions=self.sampling.reset_positions,
            process_index=jax.process_index(),
            process_count=jax.process_count(),
            anneal=anneal,
        )

    @functools.cached_property
    def phases(self) -> list[Phase]:
        """The stages as the input pipeline sees them: from which step on which rows of which
        length are drawn (built once: the loop asks for a step's stage every step)."""
        return [
            Phase(stage.start_step, stage.rows, streams)
            for stage, streams in zip(self.stages, self.stage_streams, strict=True)
        ]

    def stage_index(self, step: int) -> int:
        """The stage that logged step `step` (1-based) belongs to."""
        return phase_index(self.phases, step)

    def describe_stage(self, stage: int) -> str:
        """`stage 2/2: mmlm 1, tlm 1, btmlm 1; new: btmlm; `loss` sums these; rows × tokens:
        mmlm 4 × 256 (was 8 × 128): new shapes, its step compiles`, announced as it starts:
        the logged `loss` is the weighted sum over exactly these objectives, and where an
        objective's rows change shape (context extension) the new step compiles first."""
        weights = self.stages[stage].weights
        named = ", ".join(f"{name} {weight:g}" for name, weight in weights.items())
        previous = self.stages[stage - 1].weights if stage else weights
        changed = "".join(
            f"; {what}: {', '.join(names)}"
            for what, names in (
                ("new", [n for n in weights if n not in previous]),
                ("dropped", [n for n in previous if n not in weights]),
            )
            if names
        )
        line = f"stage {stage + 1}/{len(self.stages)}: {named}{changed}; `loss` sums these"
        shapes, before = self._row_shapes(stage), self._row_shapes(stage - 1) if stage else {}
        reshaped = ", ".join(
            f"{name} {rows} × {length} (was {before[name][0]} × {before[name][1]})"
            for name, (rows, length) in shapes.items()
            if name in before and before[name] != (rows, length)
        )
        if reshaped:
            line += f"; rows × tokens: {reshaped}: new shapes, its step compiles"
        return line

    def _row_shapes(self, stage: int) -> dict[str, tuple[int, int]]:
        """(global rows, tokens per row) of each objective of `stage`."""
        streams = self.stage_streams[stage]
        return {n: (rows, streams[n].max_length) for n, rows in self.stages[stage].rows.items()}

    def starts_training_others(self, step: int) -> bool:
        """Whether `step` is the first of a stage that trains other parameters than the last."""
        stage, before = self.stage_index(step), self.stage_index(step - 1)
        return stage != before and self.stages[stage].trainable != self.stages[before].trainable

    def stage_objectives(self, stage: int) -> dict[str, Objective]:
        return {name: self.objectives[name] for name in self.stages[stage].weights}

    def sources(self) -> dict[str, list[str]]:
        """The corpus kinds (monolingual, parallel) the run's streams read, each with the
        objectives that read it."""
        readers: dict[str, set[str]] = {}
        for streams in self.stage_streams:
            for name, stream in streams.items():
                for kind in stream.sources():
                    readers.setdefault(kind, set()).add(name)
        return {kind: sorted(readers[kind]) for kind in sorted(readers)}

    def batch_shapes(self, stage: int) -> dict[str, FieldShapes]:
        """(shape, dtype) of every field of a step's global batch in `stage`, per objective."""
        streams = self.stage_streams[stage]
        rows = self.stages[stage].rows
        return {name: streams[name].batch_shapes(count) for name, count in rows.items()}

    def abstract_batches(
        self, stage: int, sharding: jax.sharding.Sharding
    ) -> dict[str, dict[str, jax.ShapeDtypeStruct]]:
        """`batch_shapes(stage)` as placed arrays' stand-ins, for compiling ahead of time."""
        return {
            name: {
                field: jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
                for field, (shape, dtype) in fields.items()
            }
            for name, fields in self.batch_shapes(stage).items()
        }


def _contexts(
    cfg: ml_collections.ConfigDict, rates: MaskRates, model: ModelConfig, names
) -> dict[str, Context]:
    """Each objective's typed settings: the mask rates, the model and its own section."""
    contexts = {}
    for name in names:
        section = objectives_lib.get(name).section
        own = section.read(cfg[section.name]) if section else None
        contexts[name] = Context(rates, model, cfg.model.language_embeddings, own)
    return contexts


def _first_position(model: ModelConfig) -> str:
    if not model.positions_from:
        return ""
    return f" (positions start at {model.positions_from}, after the padding position)"


def _stage_streams(
    stage: Stage,
    last_step: int,
    objectives: Mapping[str, Objective],
    contexts: Mapping[str, Context],
    anneal: Anneal | None,
    model: ModelConfig,
) -> dict[str, StreamSpec]:
    """The streams of `stage` (to logged step `last_step`): each objective's at the stage's
    row length, sized for the highest mask rate of its steps."""
    streams = {}
    for name, length in stage.lengths.items():
        check(
            length <= model.longest_row,
            stage.lengths_keys[name],
            f"{length} ({name}) is longer than the {model.longest_row} tokens "
            f"model.max_positions={model.max_positions} allow{_first_position(model)}",
        )
        spec = objectives[name].stream_spec(contexts[name]).at_length(length)
        if anneal is not None:
            spec = spec.sized_for(anneal, stage.start_step, last_step)
        streams[name] = spec
    return streams


def _model(section: ml_collections.ConfigDict) -> ModelConfig:
    """The run's encoder (no language table: `RunPlan.model_config` adds the data's), built by
    its backbone from the typed settings: the keys every backbone reads and its own section's."""
    backbone = backbones.get(section.architecture)
    return backbone.model_config(SHARED.read(section), backbone.section.read(section))


def _check_model(model: ml_collections.ConfigDict) -> None:
    check(
        model.hidden_size % model.num_heads == 0,
        "model.hidden_size",
        f"{model.hidden_size} is not divisible by model.num_heads={model.num_heads}",
    )
    backbones.get(model.architecture).check(model)


def _profile_window(spec: str) -> tuple[int, int] | None:
    if not spec:
        return None
    start, end = spec.split(":")
    return int(start), int(end)


def resolve(cfg: ml_collections.ConfigDict) -> RunPlan:
    """The plan of a pre-training config, or `ConfigError` naming the first key that is
    unknown, mistyped, out of range, or at odds with the rest of the run."""
    check_config(cfg)
    _check_model(cfg.model)
    run_stages = tuple(stages(cfg))
    active = {name: objectives_lib.get(name) for s in run_stages for name in s.weights}
    model = _model(cfg.model)
    rates = MaskRates(
        cfg.data.mono_mask_rate, cfg.data.parallel_mask_rate, cfg.data.camlm_mask_rate
    )
    contexts = _contexts(cfg, rates, model, sorted(active))
    for name in sorted(active):  # what each enabled objective declares it cannot do without
        for requirement in active[name].requires:
            check(requirement.holds(contexts[name]), requirement.key, requirement.message)
    anneal = Anneal.from_config(cfg.data.anneal, cfg.train.steps) if cfg.data.anneal else None
    ends = [stage.start_step - 1 for stage in run_stages[1:]] + [cfg.train.steps]
    stage_streams = tuple(
        _stage_streams(stage, last, active, contexts, anneal, model)
        for stage, last in zip(run_stages, ends, strict=True)
    )
    for stage in run_stages:
        for name, rows in stage.rows.items():
            check(
                rows % cfg.train.grad_accum == 0,
                "train.grad_accum",
                f"{stage.rows_keys[name]}={rows} ({name}) is not divisible by "
                f"{cfg.train.grad_accum}",
            )
    check(
        cfg.eval.retrieval_layer <= cfg.model.num_layers,
        "eval.retrieval_layer",
        f"{cfg.eval.retrieval_layer}: the model has {cfg.model.num_layers} layers",
    )
    for name in sorted(active):
        check(
            not active[name].whole_batch or cfg.train.grad_accum == 1,
            "train.grad_accum",
            f"{cfg.train.grad_accum}: {name} scores every pair against every other of the whole "
            "batch, which micro-batches would split into smaller batches; set 1",
        )
    by_family: dict[str, list[str]] = {}
    for name in sorted(active):
        by_family.setdefault(active[name].family.value, []).append(name)
    check(
        len(by_family) <= 1,
        "objectives",
        f"objectives of different model families do not mix in one run: {by_family} "
        "(replaced-token detection trains its own generator/discriminator pair)",
    )
    return RunPlan(
        stages=run_stages,
        objectives=active,
        contexts=contexts,
        stage_streams=stage_streams,
        model=model,
        language_embeddings=cfg.model.language_embeddings,
        mask_rates=rates,
        batch_size=cfg.data.batch_size,
        max_length=cfg.data.max_length,
        corpus=corpus_settings(cfg),
        sampling=Sampling(
            cfg.train.seed,
            cfg.data.mono_alpha,
            cfg.data.parallel_alpha,
            cfg.data.pack,
            cfg.data.tlm_reset_positions,
        ),
        pipeline=PipelineSettings.of(cfg),
        optim=OptimizerSettings.of(cfg),
        loop=LoopSettings.of(cfg),
        evaluation=EvalSettings(
            cfg.eval.every_steps,
            cfg.eval.batches,
            cfg.eval.retrieval_lines,
            cfg.eval.retrieval_layer,
        ),
        mesh=MeshSettings.of(cfg),
        profile=_profile_window(cfg.train.profile_steps),
        record=ConfigRecord.of(json.loads(cfg.to_json_best_effort())),
        anneal=anneal,
        init_changes=tuple(key.removeprefix("model.") for key in listed(cfg.init.changes)),
    )


def resolve_record(record: ConfigRecord) -> RunPlan:
    """The plan of a recorded config (`RunPlan.record`): what a run hands to another process
    (`bench`'s store measurement), which a plan cannot be (its objectives hold functions)."""
    return resolve(ml_collections.ConfigDict(record.tree()))


def resume_terms(record: ConfigRecord, kinds: Iterable[str]) -> ResumeTerms:
    """What the resume guard compares of a pre-training config beside its keys, from its
    record, the new run's or the saved one a checkpoint was trained with: each section as
    `resolve` builds it (a saved config that the current keys would refuse still compares),
    the held-out share of each corpus kind in `kinds` (the new run's, `RunPlan.sources`)."""
    config = record.tree()
    points = [*config.get("schedule", ()), *config.get("data", {}).get("anneal", ())]
    return ResumeTerms(
        optim=OptimizerSettings.of(config),
        resume_with_changes=config["train"]["resume_with_changes"],
        moves_with_steps=any(
            isinstance(point, dict)
            and isinstance(point.get("start_step", point.get("step")), float)
            for point in points
        ),
        derived=held_out_shares(corpus_settings(config), kinds),
    )
