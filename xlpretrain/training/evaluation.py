"""Evaluation during pre-training: held-out MLM loss and accuracy per objective, and
cross-lingual retrieval accuracy@1, every `eval.every_steps` steps.

The held-out batches are built once, by the run's own pipeline (same streams, row shapes and
masking) over `eval.mono_dir` / `eval.parallel_dir`, or where one is not named over the lines
held out of the training corpus (`eval.held_out_fraction`), with a seed of their own, so every
evaluation scores the same rows and the numbers are comparable across steps. They are scored
by each stage's objectives with dropout off, sharded like the training step and reduced over
all their predictions, as the training loss is. Retrieval embeds the first
`eval.retrieval_lines` pairs of each held-out pair file with the current parameters
(`xlpretrain.eval.retrieval`), and averages it over all files, over the files whose two languages
differ in script and over those within each script (`xlpretrain.eval.scripts`).

So that a number says whether the model learned anything, each comes with references that
need no training: for masked-token predictions what the training text's unigram model scores
on the same held-out labels, for retrieval the score of the parameters the run started from
(identical strings embed identically even in an untrained model, so same-script pairs score
far above chance without any learning, which the figure across scripts does not hide) and
chance.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from xlpretrain.convert.folder import DISCRIMINATOR, MASKED_LM, Pretrained
from xlpretrain.core.errors import ConfigError
from xlpretrain.data.corpora.corpus import CorpusSettings, configured_folder, held_out_folders
from xlpretrain.data.corpora.folders import MonolingualSource, ParallelSource
from xlpretrain.data.corpora.protocols import ParallelCorpus
from xlpretrain.data.pretraining.pipeline import Corpus, StepBatchBuilder
from xlpretrain.data.pretraining.streams import MONO, PARALLEL
from xlpretrain.data.tokenizer import Tokenizer
from xlpretrain.eval.scripts import group_label, group_means, language_scripts, script_groups
from xlpretrain.model.config import ModelConfig, ModelFamily
from xlpretrain.parallel.sharding import global_batch, under_mesh
from xlpretrain.training.plan import RunPlan
from xlpretrain.training.step import Training

log = logging.getLogger("xlpretrain")
# The unigram baseline counts the text of the first training batches: up to this many, until
# this many tokens (a large run's first batch is enough, and start-up stays short).
UNIGRAM_STEPS, UNIGRAM_TOKENS = 16, 1 << 20


def without_dropout(model):
    """The same module with every dropout rate 0 (a module's configs are its fields)."""
    quiet = {
        field.name: dataclasses.replace(value, dropout_rate=0.0, attention_dropout_rate=0.0)
        for field in dataclasses.fields(model)
        if isinstance(value := getattr(model, field.name), ModelConfig)
    }
    return model.clone(**quiet)


def held_out_corpus(
    settings: CorpusSettings, kinds, folders: tuple[str, str], parts: Corpus
) -> Corpus:
    """The held-out data of each corpus kind in `kinds`, with the training run's language ids:
    its held-out folder (`folders`: mono, parallel, from `held_out_folders`), or else the lines
    held out of the training corpus (`parts`, from `data.corpora.corpus.split_off_held_out`)."""
    options = dict(strict=settings.strict, max_line_bytes=settings.max_line_bytes)
    sources, (mono_folder, parallel_folder) = {}, folders
    for kind, folder, load, part in (
        (MONO, mono_folder, MonolingualSource.from_dir, parts.mono),
        (PARALLEL, parallel_folder, ParallelSource.from_dir, parts.parallel),
    ):
        if kind not in kinds:
            continue
        if folder:
            sources[kind] = load(configured_folder(f"eval.{kind}_dir", folder), **options)
            continue
        keys = part.languages if kind == MONO else part.pairs
        if not keys:
            raise ConfigError(
                f"config key 'eval.held_out_fraction': {settings.held_out_fraction} of the "
                f"{kind} training data holds out no line (every language has too few lines): "
                f"raise it, or name a held-out folder in eval.{kind}_dir"
            )
        sources[kind] = part
    corpus = Corpus(sources.get(MONO), sources.get(PARALLEL), list(parts.languages))
    unknown = sorted(
        {lang for source in sources.values() for lang in source.languages} - set(parts.languages)
    )
    if unknown:
        raise ValueError(
            f"eval data: languages {unknown} are not languages of the training corpus, so the "
            "model has no language id for them"
        )
    return corpus


def training_unigram(
    builder: StepBatchBuilder, steps: int, vocab_size: int, tokens: int = UNIGRAM_TOKENS
) -> np.ndarray:
    """Token counts of the text in the first training batches, every objective's rows (a
    masked token counted as its label, special tokens not at all), over every process: `steps`
    batches, or fewer once a process has counted `tokens`."""
    counts = np.zeros(vocab_size)
    for step in range(steps):
        if counts.sum() >= tokens:
            break
        for batch in builder.map(step).values():
            text = np.where(batch["is_masked"] > 0, batch["labels"], batch["input_ids"])
            counts += np.bincount(text[batch["segment_ids"] > 0], minlength=vocab_size)
    counts[builder.tokenizer.special_ids()] = 0
    if jax.process_count() > 1:
        counts = np.asarray(multihost_utils.process_allgather(counts)).sum(0)
    return counts


def unigram_baseline(batches: list[Mapping[str, np.ndarray]], counts: np.ndarray) -> dict:
    """What a model that ignores context scores on these batches' masked tokens: the
    training text's unigram distribution (add-one smoothed) as the prediction everywhere, its
    most frequent token as the guess. Summed over every process's rows."""
    log_p = np.log((counts + 1) / (counts.sum() + len(counts)))
    guess = int(np.argmax(counts))
    sums = np.zeros(3)
    for batch in batches:
        labels, weights = batch["pred_labels"].ravel(), batch["pred_weights"].ravel()
        hits = weights * (labels == guess)
        sums += [-(weights * log_p[labels]).sum(), hits.sum(), weights.sum()]
    if jax.process_count() > 1:
        sums = np.asarray(multihost_utils.process_allgather(sums)).sum(0)
    return {"loss": sums[0] / max(sums[2], 1.0), "accuracy": sums[1] / max(sums[2], 1.0)}


def chance_ranking(candidates: list[int]) -> dict[str, float]:
    """What scoring every candidate alike gives a ranking objective on batches of these many
    pairs (summed over processes): loss log N, accuracy 1/N, averaged over the pairs."""
    counts = np.array(candidates, np.float64)
    if jax.process_count() > 1:
        counts = np.asarray(multihost_utils.process_allgather(counts)).sum(0)
    counts = counts[counts > 0]
    pairs = max(counts.sum(), 1.0)
    return {
        "loss": float((counts * np.log(counts)).sum() / pairs),
        "accuracy": float(len(counts) / pairs),
    }


def make_eval_step(model, loss_fns: Mapping[str, Callable], rng: jax.Array) -> Callable:
    """`(params, batches) -> {objective: (loss · count, accuracy · count, count)}`."""

    def evaluate(params, batches):
        sums = {}
        for name, loss_fn in loss_fns.items():
            loss, metrics = loss_fn(params, batches[name], rng, model)
            count = metrics["count"]
            accuracy = metrics.get("accuracy", metrics.get(f"accuracy/{name}", jnp.nan))
            sums[name] = (loss * count, accuracy * count, count)
        return sums

    return evaluate


@dataclasses.dataclass
class Evaluator:
    """Scores the current parameters on the held-out data; called by the training loop."""

    plan: RunPlan
    batches: list[list[dict]]  # per stage: the held-out global batches
    steps: list[Callable]  # per stage: the jitted evaluation step
    retrieval: ParallelCorpus | None
    retrieval_lines: int
    retrieval_layer: int | None  # None: the middle layer
    model_config: ModelConfig
    tokenizer: Tokenizer
    languages: tuple[str, ...]
    family: ModelFamily
    # `across_scripts`, `within_<script>` → the stems of its pair files (`eval.scripts`).
    script_groups: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    # An `eval/*` key → its references by name ("unigram", "step 0", "chance").
    baselines: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)

    def __call__(self, params, stage: int) -> dict[str, float]:
        log.info(
            "evaluating on %d held-out batches%s",
            len(self.batches[stage]),
            f", retrieval on {len(self.retrieval.pairs)} pair files" if self.retrieval else "",
        )
        totals: dict[str, np.ndarray] = {}
        for batch in self.batches[stage]:
            for name, values in jax.device_get(self.steps[stage](params, batch)).items():
                totals[name] = totals.get(name, 0.0) + np.asarray(values, np.float64)
        scalars = {}
        for name, (loss, accuracy, count) in totals.items():
            scalars[f"eval/loss/{name}"] = loss / max(count, 1.0)
            scalars[f"eval/accuracy/{name}"] = accuracy / max(count, 1.0)
        if self.retrieval is not None:
            scalars.update(self._retrieval(params))
        return scalars

    def _retrieval(self, params) -> dict[str, float]:
        from xlpretrain.api import Model  # the inference wrapper, built on demand
        from xlpretrain.eval.alignment import retrieval_accuracy

        host = multihost_utils.process_allgather(params, tiled=True)
        kind = MASKED_LM
        if self.family is ModelFamily.ELECTRA:  # the discriminator's encoder
            host, kind = {k: host[k] for k in ("embeddings", "encoder")}, DISCRIMINATOR
        pretrained = Pretrained(self.model_config, host, self.tokenizer, self.languages, kind)
        result = retrieval_accuracy(
            Model(pretrained),
            self.retrieval,
            layer=self.retrieval_layer,
            max_lines=self.retrieval_lines,
        )
        means = {pair: s["mean"] for pair, s in result["pairs"].items()}
        groups = group_means(means, self.script_groups)
        scores = {f"eval/retrieval/{name}": value for name, value in {**means, **groups}.items()}
        return {"eval/retrieval": result["average"]["mean"], **scores}


def build_evaluator(
    plan: RunPlan,
    model,
    training: Training,
    held_out_parts: Corpus,
    tokenizer: Tokenizer,
    training_rows: StepBatchBuilder,
) -> Evaluator | None:
    """The run's evaluator, or None when `eval.every_steps` is 0. `held_out_parts` are the lines
    held out of the training corpus (`data.corpora.corpus.split_off_held_out`), evaluated where no
    held-out folder is named; `training_rows` (the run's batch builder) gives the unigram counts
    of the baselines."""
    settings, data = plan.evaluation, plan.corpus
    if settings.every_steps <= 0:
        return None
    folders = held_out_folders(data)
    held_out = held_out_corpus(data, plan.sources(), folders, held_out_parts)
    parallel_folder = folders[1]
    quiet = without_dropout(model)
    batches, steps, baselines = [], [], {}
    unigram = training_unigram(training_rows, UNIGRAM_STEPS, model.config.vocab_size)
    for index, stage in enumerate(plan.stages):
        builder = plan.batch_builder(held_out, tokenizer, held_out_stage=index)
        local = [builder.map(batch) for batch in range(settings.batches)]
        batches.append([global_batch(batch, training.batch_sharding) for batch in local])
        for name in stage.weights:
            if not plan.stage_streams[index][name].masked:  # nothing to predict: ranking
                count = plan.objectives[name].count(plan.contexts[name])
                figures = chance_ranking([int(count(b[name])) for b in local])
                reference = "chance"
            elif plan.objectives[name].family is ModelFamily.MASKED_LM:
                figures, reference = unigram_baseline([b[name] for b in local], unigram), "unigram"
            else:
                continue
            for what, value in figures.items():
                baselines[f"eval/{what}/{name}"] = {reference: value}
        loss_fns = {name: plan.objectives[name].loss(plan.contexts[name]) for name in stage.weights}
        step = make_eval_step(quiet, loss_fns, jax.random.key(plan.sampling.seed))
        steps.append(
            jax.jit(
                under_mesh(training.mesh, plan.mesh.rules, step),
                in_shardings=(training.state_shardings.params, training.batch_sharding),
            )
        )
    retrieval, groups = None, {}
    if settings.retrieval_lines > 0 and (held_out.parallel or parallel_folder):
        retrieval = held_out.parallel or ParallelSource.from_dir(
            parallel_folder, strict=data.strict, max_line_bytes=data.max_line_bytes
        )
        scripts = language_scripts(retrieval, settings.retrieval_lines)
        groups = script_groups(retrieval.pairs, scripts)
        chances = {
            f"{a}-{b}": 1 / n
            for a, b in retrieval.pairs
            if (n := min(retrieval.num_lines((a, b)), settings.retrieval_lines))
        }
        baselines["eval/retrieval"] = {"chance": float(np.mean(list(chances.values())))}
        for name, chance in group_means(chances, groups).items():
            baselines[f"eval/retrieval/{name}"] = {"chance": chance}
        log.info("retrieval by script: %s", describe_scripts(scripts, groups))
    family = next(iter(plan.objectives.values())).family
    evaluator = Evaluator(
        plan,
        batches,
        steps,
        retrieval,
        settings.retrieval_lines,
        None if settings.retrieval_layer < 0 else settings.retrieval_layer,
        model.config,
        tokenizer,
        tuple(held_out_parts.languages),
        family,
        groups,
        baselines,
    )
    if retrieval is not None:
        log.info(
            "measuring retrieval at step 0 on %d held-out pair files (up to %d lines each), "
            "the reference for later evaluations",
            len(retrieval.pairs),
            settings.retrieval_lines,
        )
        start = evaluator._retrieval(training.state.params)
        for key in [k for k in baselines if k.startswith("eval/retrieval")]:
            baselines[key] = {"step 0": start[key], **baselines[key]}
    log.info(
        "evaluating every %d steps on %d held-out batches per stage%s; references: %s",
        settings.every_steps,
        settings.batches,
        f", retrieval on {len(retrieval.pairs)} pair files" if retrieval else "",
        ", ".join(
            f"{key.removeprefix('eval/')} {value:.4f} ({name})"
            for key, references in baselines.items()
            for name, value in references.items()
        ),
    )
    return evaluator


def describe_scripts(scripts: Mapping[str, str | None], groups: Mapping[str, list[str]]) -> str:
    """ "across scripts 17 pairs, within Latin 22 pairs; Arab: ar fa, Latn: de en" (the
    languages by the script their held-out text is in), so a reader can check the grouping."""
    by_script: dict[str, list[str]] = {}
    for lang, code in sorted(scripts.items()):
        by_script.setdefault(code or "none", []).append(lang)
    counts = ", ".join(f"{group_label(name)} {len(stems)} pairs" for name, stems in groups.items())
    languages = ", ".join(f"{code}: {' '.join(langs)}" for code, langs in sorted(by_script.items()))
    return f"{counts or 'no pair in a script'}; {languages}"
