"""Sentence-pair classification fine-tuning (XNLI, PAWS-X) with cross-lingual transfer.

`python -m xlpretrain.eval.finetune --config configs/finetune_pairs.py --workdir DIR
[--config.a.b=v]`

Trains a `PairClassifier` head on a pre-trained encoder (`init.path`: a training workdir or a
checkpoint folder) with the pairs of one language (`data.train_language`) and measures accuracy
on every evaluation language (zero-shot transfer). Writes `DIR/results.json`, the logged steps
to `DIR/metrics.jsonl` (and TensorBoard, as pre-training does) and the config to
`DIR/config.json`.

Data: `data.dir/<lang>/<split>.tsv`, one `premise<TAB>hypothesis<TAB>label` per line, no
header. Lines that are empty, not UTF-8 or not three non-blank fields are skipped and counted,
as the pre-training sources do.

A pair is one row. Plugged out (XLM-R): one segment `<s> x </s></s> y </s>`, positions
continuous from 2. Plugged in (VECO, needs a cross-attention model): two segments `<s> x </s>`
and `<s> y </s>` of one pair (`pair_ids` 1, `side` 0/1), positions from 2 in each, so each
side's s stream reads the other side's h stream.

Optimisation: pre-training's clipped AdamW (`xlpretrain.optim.adamw`), linear warm-up over the
first `optim.warmup_fraction` of the steps then linear decay, times a layer-wise learning-rate decay
(ERNIE-M, ELECTRA): the head learns at the full rate, encoder layer i (0-based) at
`layer_decay ** (num_layers - i)`, the embeddings at `layer_decay ** (num_layers + 1)`, so the
lower, more general layers move least.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import app, flags
from flax import traverse_util
from ml_collections import config_flags

import xlpretrain
from xlpretrain.api import Model
from xlpretrain.config import ConfigError, Ranges, check_keys
from xlpretrain.data.sources import DataError, FileStats, format_stats
from xlpretrain.metrics import MetricsWriter
from xlpretrain.model.classifier import PairClassifier
from xlpretrain.optim import adamw, parameter_path, warmup_linear_decay
from xlpretrain.tokenizer import Tokenizer

log = logging.getLogger("xlpretrain")

PLUG_IN = ("auto", "in", "out")
Batch = dict[str, np.ndarray]
Params = Any


def default_config() -> ml_collections.ConfigDict:
    """Every key a fine-tuning run may set; `configs/finetune_pairs.py` starts from this."""
    cfg = ml_collections.ConfigDict()
    cfg.init = ml_collections.ConfigDict()
    cfg.init.path = ""  # a pre-training workdir or an xlpretrain checkpoint folder (required)

    cfg.data = ml_collections.ConfigDict()
    cfg.data.dir = ""  # folder of <lang>/<split>.tsv files (required)
    cfg.data.train_language = "en"
    cfg.data.train_split = "train"
    cfg.data.eval_split = "test"
    cfg.data.eval_languages = ()  # empty: every <lang> folder with an <eval_split>.tsv
    cfg.data.labels = ()  # label strings in id order; empty: the training labels, sorted
    cfg.data.max_length = 128  # tokens per pair, special tokens included
    cfg.data.batch_size = 32

    cfg.model = ml_collections.ConfigDict()
    cfg.model.plug_in = "auto"  # VECO's cross-attention: in | out | auto (in if the model has it)
    cfg.model.dropout_rate = 0.1
    cfg.model.attention_dropout_rate = 0.1
    cfg.model.dtype = "float32"  # compute dtype; parameters stay float32

    cfg.optim = ml_collections.ConfigDict()
    cfg.optim.learning_rate = 2e-5
    cfg.optim.layer_decay = 0.8  # 1.0: every layer at the full rate
    cfg.optim.warmup_fraction = 0.1
    cfg.optim.b1 = 0.9
    cfg.optim.b2 = 0.999
    cfg.optim.eps = 1e-8
    cfg.optim.weight_decay = 0.01
    cfg.optim.clip_norm = 1.0  # global-norm clipping; 0 disables

    cfg.train = ml_collections.ConfigDict()
    cfg.train.steps = 10_000
    cfg.train.log_every = 100
    cfg.train.seed = 0
    return cfg


_RANGES: Ranges = {
    "init.path": (bool, "required: a pre-training workdir or checkpoint folder"),
    "data.dir": (bool, "required: a folder of <lang>/<split>.tsv files"),
    "data.train_language": (bool, "required"),
    "data.max_length": (lambda v: v >= 8, "must be >= 8"),
    "data.batch_size": (lambda v: v > 0, "must be > 0"),
    "model.plug_in": (lambda v: v in PLUG_IN, f"must be one of {PLUG_IN}"),
    "model.dropout_rate": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
    "model.attention_dropout_rate": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
    "model.dtype": (lambda v: v in ("float32", "bfloat16"), "must be 'float32' or 'bfloat16'"),
    "optim.learning_rate": (lambda v: v > 0, "must be > 0"),
    "optim.layer_decay": (lambda v: 0.0 < v <= 1.0, "must be in (0, 1]"),
    "optim.warmup_fraction": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
    "optim.clip_norm": (lambda v: v >= 0, "must be >= 0 (0 disables clipping)"),
    "train.steps": (lambda v: v > 0, "must be > 0"),
    "train.log_every": (lambda v: v > 0, "must be > 0"),
}


def validate(cfg: ml_collections.ConfigDict) -> None:
    """Raises `ConfigError` naming the first unknown, mistyped or out-of-range key, through
    pre-training's `check_keys`."""
    check_keys(cfg, default_config(), _RANGES)


# --- data -------------------------------------------------------------------------------------


@dataclasses.dataclass
class PairSet:
    """The usable lines of one `premise<TAB>hypothesis<TAB>label` file."""

    premises: list[str]
    hypotheses: list[str]
    labels: list[str]
    stats: FileStats


def read_pairs(path: str) -> PairSet:
    """Reads a labelled pair file; bad lines are skipped and counted in `stats`."""
    if not os.path.isfile(path):
        raise DataError(f"no file {path}")
    with open(path, "rb") as f:
        raw_lines = f.read().splitlines()
    premises, hypotheses, labels = [], [], []
    problems: dict[str, list[int]] = {"empty": [], "invalid_utf8": [], "bad_fields": []}
    for number, raw in enumerate(raw_lines, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            problems["invalid_utf8"].append(number)
            continue
        fields = line.split("\t")
        if not line.strip():
            problems["empty"].append(number)
        elif len(fields) != 3 or not all(field.strip() for field in fields):
            problems["bad_fields"].append(number)
        else:
            premises.append(fields[0])
            hypotheses.append(fields[1])
            labels.append(fields[2].strip())
    stats = FileStats(
        path=path,
        total=len(raw_lines),
        used=len(labels),
        **{kind: len(lines) for kind, lines in problems.items()},
        examples={kind: lines[:5] for kind, lines in problems.items() if lines},
    )
    if not labels:
        raise DataError(f"{path} has no usable line ({stats.problems() or 'the file is empty'})")
    return PairSet(premises, hypotheses, labels, stats)


def _truncate(a: int, b: int, budget: int) -> tuple[int, int]:
    """Lengths to keep: the longer side loses tokens first, neither goes below half."""
    if a + b <= budget:
        return a, b
    half = budget // 2
    if a <= half:
        return a, budget - a
    if b <= half:
        return budget - b, b
    return budget - half, half


@dataclasses.dataclass
class Encoded:
    """Tokenized pairs: `rows[i]` is a whole row, its second side starting at `splits[i]`."""

    rows: list[np.ndarray]
    splits: np.ndarray
    label_ids: np.ndarray
    lang_id: int
    max_length: int
    plug_in: bool

    def __len__(self) -> int:
        return len(self.rows)

    def batch(self, indices: np.ndarray) -> Batch:
        """A `[len(indices), max_length]` batch; index -1 is a padding row (weight 0)."""
        shape = (len(indices), self.max_length)
        batch = {
            "input_ids": np.full(shape, Tokenizer.PAD_ID, np.int32),
            "positions": np.full(shape, Tokenizer.PAD_ID, np.int32),  # as HF XLM-R pads them
            "segment_ids": np.zeros(shape, np.int32),
            "pair_ids": np.zeros(shape, np.int32),
            "side": np.zeros(shape, np.int32),
            "lang_ids": np.full(shape, self.lang_id, np.int32),
            "labels": np.zeros(len(indices), np.int32),
            "weights": np.zeros(len(indices), np.float32),
        }
        for row, index in enumerate(indices):
            if index < 0:
                continue
            ids, split = self.rows[index], self.splits[index]
            steps = np.arange(len(ids))
            second = steps >= split
            batch["input_ids"][row, : len(ids)] = ids
            batch["pair_ids"][row, : len(ids)] = 1
            batch["side"][row, : len(ids)] = second
            if self.plug_in:  # two segments, positions restarting at 2 in each
                batch["segment_ids"][row, : len(ids)] = 1 + second
                batch["positions"][row, : len(ids)] = 2 + np.where(second, steps - split, steps)
            else:
                batch["segment_ids"][row, : len(ids)] = 1
                batch["positions"][row, : len(ids)] = 2 + steps
            batch["labels"][row] = self.label_ids[index]
            batch["weights"][row] = 1.0
        return batch


def encode_pairs(
    pairs: PairSet,
    tokenizer: Tokenizer,
    label_ids: dict[str, int],
    *,
    max_length: int,
    plug_in: bool,
    lang_id: int = 0,
) -> Encoded:
    """Tokenizes every pair, truncated to `max_length` tokens with the 4 special ones:
    `<s> x </s></s> y </s>` plugged out, `<s> x </s>` + `<s> y </s>` plugged in."""
    unknown = sorted(set(pairs.labels) - set(label_ids))
    if unknown:
        raise DataError(
            f"{pairs.stats.path}: label(s) {unknown} are not among the labels {list(label_ids)}"
        )
    bos, eos = Tokenizer.BOS_ID, Tokenizer.EOS_ID
    rows, splits = [], []
    xs = tokenizer.encode_batch(pairs.premises)
    ys = tokenizer.encode_batch(pairs.hypotheses)
    for x, y in zip(xs, ys, strict=True):
        keep_x, keep_y = _truncate(len(x), len(y), max_length - 4)
        first = [bos, *x[:keep_x], eos]
        second = [bos if plug_in else eos, *y[:keep_y], eos]
        rows.append(np.array(first + second, np.int32))
        splits.append(len(first))
    labels = np.array([label_ids[label] for label in pairs.labels], np.int32)
    return Encoded(rows, np.array(splits), labels, lang_id, max_length, plug_in)


@dataclasses.dataclass
class Task:
    """The training pairs, the evaluation pairs per language and the label names."""

    train: Encoded
    evaluation: dict[str, Encoded]
    labels: list[str]


def load_task(cfg: ml_collections.ConfigDict, model: Model, plug_in: bool) -> Task:
    """Reads `data.dir/<lang>/<split>.tsv` and tokenizes it for `model`."""
    data = cfg.data
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
    lang_index = {lang: i for i, lang in enumerate(model.languages)}

    def encode(pairs: PairSet, lang: str) -> Encoded:
        if model.config.num_languages and lang not in lang_index:
            raise DataError(
                f"{lang!r} is not among the model's languages {model.languages}: models with "
                "language embeddings need data folders named by those codes"
            )
        return encode_pairs(
            pairs,
            model.tokenizer,
            label_ids,
            max_length=data.max_length,
            plug_in=plug_in,
            lang_id=lang_index.get(lang, 0),
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


def finetune_schedule(cfg: ml_collections.ConfigDict) -> optax.Schedule:
    """Pre-training's warm-up and linear decay, the warm-up a fraction of `train.steps`."""
    warmup = round(cfg.optim.warmup_fraction * cfg.train.steps)
    return warmup_linear_decay(cfg.optim.learning_rate, warmup, cfg.train.steps)


def make_finetune_optimizer(
    cfg: ml_collections.ConfigDict, params: Params, num_layers: int
) -> optax.GradientTransformation:
    """Pre-training's clipped AdamW on this schedule, then the layer-wise decay."""
    optim = cfg.optim
    tx = adamw(
        finetune_schedule(cfg),
        b1=optim.b1,
        b2=optim.b2,
        eps=optim.eps,
        weight_decay=optim.weight_decay,
        clip_norm=optim.clip_norm,
    )
    factors = layer_decay_factors(params, num_layers, optim.layer_decay)
    return optax.chain(tx, scale_updates(factors))


# --- model, training, evaluation --------------------------------------------------------------


def resolve_plug_in(setting: str, cross_attention: bool) -> bool:
    """Whether to plug VECO's cross-attention in, for `model.plug_in` and the model."""
    if setting == "in" and not cross_attention:
        raise ConfigError("config key 'model.plug_in': 'in' needs a cross-attention (VECO) model")
    return setting == "in" or (setting == "auto" and cross_attention)


def init_classifier(
    classifier: PairClassifier, pretrained: Params, example: Batch, rng: jax.Array
) -> Params:
    """A new head on the pre-trained backbone (an LM head, or a cross-attention plugged out,
    is left behind)."""
    initial = nn.unbox(jax.jit(classifier.init)(rng, example)["params"])
    flat = traverse_util.flatten_dict(pretrained, sep="/")

    def take(path, leaf) -> jax.Array:
        name = parameter_path(path)
        found = flat[name].shape if name in flat else None
        if found != leaf.shape:
            has = "no such parameter" if found is None else f"shape {found}"
            raise ValueError(f"{name}: the classifier needs {leaf.shape}, the model has {has}")
        return jnp.asarray(flat[name])

    backbone = jax.tree_util.tree_map_with_path(take, initial["backbone"])
    return {**initial, "backbone": backbone}


def _index_batches(count: int, batch_size: int, seed: int) -> Iterator[np.ndarray]:
    """Endless batches of example indices: a new permutation every epoch, read across."""
    rng = np.random.default_rng(seed)
    pending = np.zeros(0, np.int64)
    while True:
        while len(pending) < batch_size:
            pending = np.concatenate([pending, rng.permutation(count)])
        yield pending[:batch_size]
        pending = pending[batch_size:]


def train(
    cfg: ml_collections.ConfigDict,
    classifier: PairClassifier,
    params: Params,
    data: Encoded,
    workdir: str,
) -> Params:
    """`train.steps` jitted steps of cross-entropy on shuffled batches; returns the params."""
    tx = make_finetune_optimizer(cfg, params, classifier.config.num_layers)
    schedule = finetune_schedule(cfg)

    @jax.jit
    def step(params, opt_state, batch, rng):
        def loss_fn(params):
            logits = classifier.apply(
                {"params": params}, batch, deterministic=False, rngs={"dropout": rng}
            )
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"])
            return loss.mean(), logits

        (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        accuracy = (logits.argmax(-1) == batch["labels"]).mean()
        return optax.apply_updates(params, updates), opt_state, loss, accuracy

    opt_state = tx.init(params)
    rng = jax.random.key(cfg.train.seed + 1)
    batches = _index_batches(len(data), cfg.data.batch_size, cfg.train.seed)
    writer = MetricsWriter(workdir)
    try:
        for number in range(1, cfg.train.steps + 1):
            params, opt_state, loss, accuracy = step(
                params, opt_state, data.batch(next(batches)), jax.random.fold_in(rng, number)
            )
            if number % cfg.train.log_every == 0 or number == cfg.train.steps:
                scalars = {
                    "loss": float(loss),
                    "accuracy": float(accuracy),
                    "learning_rate": float(schedule(number - 1)),
                }
                writer.write(number, scalars)
                log.info(
                    "step %d/%d: loss %.4f, batch accuracy %.3f, learning rate %.3g",
                    number,
                    cfg.train.steps,
                    *scalars.values(),
                )
    finally:
        writer.close()
    return params


def evaluate(
    classifier: PairClassifier, params: Params, datasets: dict[str, Encoded], batch_size: int
) -> dict[str, float]:
    """Accuracy (argmax class = label, dropout off) on each dataset."""
    predict = jax.jit(lambda params, batch: classifier.apply({"params": params}, batch).argmax(-1))
    accuracies = {}
    for name, data in datasets.items():
        correct = 0.0
        for start in range(0, len(data), batch_size):
            indices = np.arange(start, min(start + batch_size, len(data)))
            batch = data.batch(np.pad(indices, (0, batch_size - len(indices)), constant_values=-1))
            hits = np.asarray(predict(params, batch)) == batch["labels"]
            correct += float((hits * batch["weights"]).sum())
        accuracies[name] = correct / len(data)
    return accuracies


def run(cfg: ml_collections.ConfigDict, workdir: str) -> dict:
    """Fine-tunes, evaluates every language, writes `workdir/results.json` and returns it."""
    validate(cfg)
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write(cfg.to_json_best_effort(indent=2))
    model = xlpretrain.load(cfg.init.path, dtype=cfg.model.dtype)
    if model.tokenizer is None:
        raise FileNotFoundError(f"{cfg.init.path} has no tokenizer.model")
    config = dataclasses.replace(
        model.config,
        dropout_rate=cfg.model.dropout_rate,
        attention_dropout_rate=cfg.model.attention_dropout_rate,
    )
    plug_in = resolve_plug_in(cfg.model.plug_in, config.cross_attention)
    task = load_task(cfg, model, plug_in)
    classifier = PairClassifier(config, num_labels=len(task.labels), plug_in=plug_in)
    log.info(
        "fine-tuning %s (cross-attention plugged %s) on %d %s pairs, labels %s",
        cfg.init.path,
        "in" if plug_in else "out",
        len(task.train),
        cfg.data.train_language,
        task.labels,
    )
    example = task.train.batch(np.zeros(1, np.int64))
    params = init_classifier(classifier, model.params, example, jax.random.key(cfg.train.seed))
    params = train(cfg, classifier, params, task.train, workdir)

    scores = evaluate(classifier, params, {"": task.train, **task.evaluation}, cfg.data.batch_size)
    train_accuracy = scores.pop("")
    languages = {
        lang: {"accuracy": scores[lang], "n": len(data)} for lang, data in task.evaluation.items()
    }
    results = {
        "train_language": cfg.data.train_language,
        "labels": task.labels,
        "plug_in": plug_in,
        "steps": cfg.train.steps,
        "train_accuracy": train_accuracy,
        "languages": languages,
        "average": float(np.mean([r["accuracy"] for r in languages.values()])),
    }
    log.info("accuracy on the training pairs: %.4f", results["train_accuracy"])
    for lang, result in languages.items():
        log.info("accuracy %s: %.4f (%d pairs)", lang, result["accuracy"], result["n"])
    log.info("average over %d languages: %.4f", len(languages), results["average"])
    with open(os.path.join(workdir, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    return results


def main(argv: Sequence[str]) -> None:
    del argv
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout
    )
    logging.getLogger("absl").setLevel(logging.WARNING)
    try:
        run(FLAGS.config, FLAGS.workdir)
    except (ConfigError, DataError, FileNotFoundError, ValueError) as error:
        log.error("%s: %s", type(error).__name__, error)
        sys.exit(1)


def define_flags() -> None:
    """The CLI's flags, defined only when run as a program (importing defines none)."""
    config_flags.DEFINE_config_file(
        "config", None, "Config file (configs/finetune_pairs.py[:ARG]).", lock_config=True
    )
    flags.DEFINE_string("workdir", None, "Output folder: results.json, metrics.jsonl, config.json.")
    flags.mark_flags_as_required(["config", "workdir"])


FLAGS = flags.FLAGS

if __name__ == "__main__":
    define_flags()
    app.run(main)
