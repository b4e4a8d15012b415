"""Default configuration and the checks of its keys.

Every config file starts from `default_config()`; `check_config()` then rejects any key the
defaults do not know, any value of the wrong type and any value out of range, naming the key.
Catching a typo at start-up is cheaper than discovering after a day of training that
`optim.warmup_step` was silently ignored. What keys mean together (stages, streams, the model
an objective needs) is checked as the run plan resolves them (`xlpretrain.training.plan`).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import ml_collections

from xlpretrain import backbones
from xlpretrain.backbones import modernbert, xlmr
from xlpretrain.backbones.settings import SHARED
from xlpretrain.core.errors import INSTALL, ConfigError, check
from xlpretrain.core.settings import Section
from xlpretrain.data.corpora import held_out
from xlpretrain.objectives import REGISTRY
from xlpretrain.training.config_keys import (
    Ranges,
    check_keys,
    non_negative,
    one_of,
    positive,
    type_ok,
)
from xlpretrain.training.sections import DECAY_SHAPES, PRNG_IMPLS, SCHEDULES
from xlpretrain.training.stages import start_step

# Objectives a config may name: each objective's declaration is the one place that says so.
KNOWN_OBJECTIVES = tuple(REGISTRY)
# What `init.changes` may name: the model keys a warm start otherwise takes as its checkpoint's.
CHANGEABLE = tuple(f"model.{name}" for name in backbones.function_settings())

# Logical axis → mesh axes, for parameters and activations alike (xlpretrain.parallel.sharding).
DEFAULT_LOGICAL_AXIS_RULES = (
    ("batch", ("data", "fsdp")),
    ("length", None),
    ("activation_embed", None),  # the residual stream's hidden axis between layers
    ("embed", "fsdp"),
    ("mlp", "tensor"),
    ("heads", "tensor"),
    ("kv", None),
    ("vocab", "tensor"),
    ("layers", None),
    ("positions", None),
    ("languages", None),
)


def loop_section(
    *, steps: int, log_every: int, checkpoint_every: int, keep: int
) -> ml_collections.ConfigDict:
    """The `train` keys the training loop reads (`xlpretrain.training.loop`), shared by
    pre-training and fine-tuning so a run is steered, resumed and stopped the same way whatever
    the task."""
    train = ml_collections.ConfigDict()
    train.steps = steps  # the run's length: the LR schedule is built from it
    train.stop_at = -1  # halt after this step with a checkpoint (-1: run to `steps`)
    train.log_every = log_every
    train.checkpoint_every = checkpoint_every
    train.keep_checkpoints = keep
    train.async_checkpointing = True
    train.seed = 0
    # Dropout's random bits: a jax.random implementation (threefry2x32, JAX's default, the
    # same bits however the batch is sharded; threefry4x32; rbg or unsafe_rbg, XLA's
    # RngBitGenerator). Parameters are initialised with threefry2x32 whatever this says; what
    # each costs: docs/performance.md.
    train.prng_impl = "threefry2x32"
    train.grad_accum = 1  # micro-batches per step; gradients equal the full batch's
    # A step whose loss or gradient norm is not finite skips its update; this many in a row stop
    # the run with an error, leaving the last checkpoint (0: never stop).
    train.max_bad_steps = 5
    # When no checkpoint in WORKDIR/checkpoints can be restored: False stops with an error
    # (nothing is silently thrown away), True starts again from step 0.
    train.allow_fresh_start = False
    # A resumed run whose config changes keys outside `workdir.RESUME_NEUTRAL` (the schedule, the
    # objectives, the data, the model) stops unless this is True (xlpretrain/training/workdir.py).
    train.resume_with_changes = False
    # Weights & Biases: also log every record to this project ("": off; the wandb extra).
    # The run is named after the workdir and resumed with it; WANDB_MODE=offline works.
    train.wandb_project = ""
    return train


def mesh_section() -> ml_collections.ConfigDict:
    """The device mesh (`data × fsdp × tensor`) and the logical axis rules placed on it."""
    mesh = ml_collections.ConfigDict()
    mesh.data = -1  # -1: the devices the other axes leave
    mesh.fsdp = 1
    mesh.tensor = 1
    mesh.rules = DEFAULT_LOGICAL_AXIS_RULES
    return mesh


def default_config() -> ml_collections.ConfigDict:
    """Every key a run may set, with defaults; config files override these."""
    cfg = ml_collections.ConfigDict()

    cfg.train = loop_section(steps=1000, log_every=10, checkpoint_every=500, keep=3)
    cfg.train.profile_steps = ""  # "START:END" writes a jax.profiler trace to WORKDIR/profile
    # Regular expression on parameter paths ("encoder/layers/cross_attention/query/kernel"):
    # only matching parameters are updated; "" trains all. A schedule stage may override it.
    cfg.train.trainable = ""

    # Evaluation during training (xlpretrain/training/evaluation.py): every `every_steps` steps,
    # each active objective's loss and accuracy on `batches` held-out batches (dropout off), and
    # retrieval accuracy@1 on the first `retrieval_lines` held-out pairs of each language pair;
    # logged as eval/* with that step's metrics, and at the last step. Held-out data comes from
    # these folders (same layout as data.*_dir); where one is empty, `held_out_fraction` of
    # the training corpus's lines (a fixed share of each language, chosen by line with
    # train.seed; xlpretrain/data/corpora/held_out.py) is held out of training and evaluated
    # instead.
    # On the demo corpus (no corpus configured), the demo's held-out folders.
    cfg.eval = ml_collections.ConfigDict()
    cfg.eval.every_steps = 0  # 0: no evaluation during training
    cfg.eval.mono_dir = ""
    cfg.eval.parallel_dir = ""
    cfg.eval.held_out_fraction = held_out.DEFAULT_FRACTION  # a multiple of 0.001 in (0, 0.5]
    cfg.eval.batches = 4
    cfg.eval.retrieval_lines = 1000  # 0: no retrieval
    # The layer whose mean-pooled states retrieval compares (0: the embeddings; -1: the middle
    # one, where an MLM-trained encoder aligns languages best; num_layers: the last, which
    # `xlco` trains).
    cfg.eval.retrieval_layer = -1

    cfg.data = ml_collections.ConfigDict()
    # A store prepared by `python -m xlpretrain.data.prepare` (token ids, read by random
    # access; its tokenizer is the run's): instead of the folders and TFDS datasets below.
    cfg.data.store = ""
    cfg.data.mono_dir = ""  # folder of <lang>.txt; empty: the built-in demo corpus
    cfg.data.parallel_dir = ""  # folder of <l1>-<l2>.tsv; empty: the built-in demo corpus
    # TFDS datasets (ArrayRecord, read by random access through tfds.data_source) instead of
    # the folders: set `name` (e.g. "my_corpus/en:1.0.0").
    cfg.data.mono_tfds = ml_collections.ConfigDict()
    cfg.data.mono_tfds.name = ""
    cfg.data.mono_tfds.split = "train"
    cfg.data.mono_tfds.data_dir = ""
    cfg.data.mono_tfds.text_key = "text"
    cfg.data.mono_tfds.language_key = "language"  # a string feature; or set `language`
    cfg.data.mono_tfds.language = ""  # the language of a single-language dataset
    cfg.data.parallel_tfds = ml_collections.ConfigDict()
    cfg.data.parallel_tfds.name = ""
    cfg.data.parallel_tfds.split = "train"
    cfg.data.parallel_tfds.data_dir = ""
    cfg.data.parallel_tfds.pair = ""  # "l1-l2": every record is this pair (TFDS translate layout)
    cfg.data.parallel_tfds.language_keys = ()  # or two string features naming each record's pair
    cfg.data.parallel_tfds.source_key = ""  # text features; default: the pair's codes, or
    cfg.data.parallel_tfds.target_key = ""  # "source"/"target" with language_keys
    cfg.data.max_length = 128
    cfg.data.batch_size = 32  # global rows per objective and step (see `schedule` below)
    cfg.data.mono_alpha = 0.3
    cfg.data.parallel_alpha = 0.3
    # Settings that change with the step (xlpretrain/data/pretraining/anneal.py): points such as
    # {"step": 0.5, "mono_alpha": 0.5, "mono_mask_rate": 0.15}, linear between them, of
    # mono_alpha, parallel_alpha, mono_mask_rate and parallel_mask_rate (the mask rate of rows
    # drawn from that kind of corpus); the settings above hold for what no point gives.
    cfg.data.anneal = ()
    # Bad lines (and files with no usable line) raise instead of being skipped and counted.
    cfg.data.strict = False
    cfg.data.max_line_bytes = 1_000_000
    cfg.data.pack = True  # several segments (or pairs) per row, attention confined to each
    cfg.data.mono_mask_rate = 0.15
    cfg.data.parallel_mask_rate = 0.15
    cfg.data.camlm_mask_rate = cfg.data.get_ref("parallel_mask_rate")  # default: TLM's
    cfg.data.tlm_reset_positions = False  # XLM resets positions for the second sentence
    cfg.data.num_workers = 0  # grain worker processes (0: build batches in the main process)
    cfg.data.prefetch = 2  # batches built ahead of the step
    # The demo corpus (no corpus set): 40 is the snapshot the package ships, the same bytes
    # everywhere; another count is built from the installed Babel's CLDR data.
    cfg.data.demo_languages = 40
    # Per-objective row length and global batch, e.g. {"veco_mono": {"max_length": 512}}.
    cfg.data.per_objective = ml_collections.ConfigDict()

    cfg.tokenizer = ml_collections.ConfigDict()
    # A SentencePiece model or a Hugging Face tokenizer.json; empty: train a SentencePiece model
    # into WORKDIR/tokenizer.model.
    cfg.tokenizer.path = ""
    cfg.tokenizer.sentences_per_language = 2000
    # The share of the sample's characters the trained model covers; the rarest of the rest
    # become <unk>. SentencePiece's default, which its authors recommend for text with large
    # character sets (Chinese, Japanese); XLM-R's paper does not say what its model used. Lower
    # it (e.g. 0.999) when many scripts meet a small model.vocab_size; 1.0 keeps every character.
    cfg.tokenizer.character_coverage = 0.9995

    cfg.model = model_section()

    cfg.optim = ml_collections.ConfigDict()
    cfg.optim.learning_rate = 5e-4
    cfg.optim.warmup_steps = 100
    cfg.optim.b1 = 0.9
    cfg.optim.b2 = 0.98
    cfg.optim.eps = 1e-6
    cfg.optim.weight_decay = 0.01
    cfg.optim.clip_norm = 1.0  # global-norm clipping; 0 disables
    # linear: warm-up, then linearly to 0 at train.steps (the seed papers'); wsd: warm-up,
    # stable, then to 0 over the last `decay_steps` steps along `decay_shape` (0: no decay), so
    # a longer train.steps only lengthens the stable part (ModernBERT, mmBERT). The decay may
    # instead be `decay_fraction` of train.steps (one of the two is 0); either must fit after
    # the warm-up (sections.decay_length).
    cfg.optim.schedule = "linear"
    cfg.optim.decay_steps = 0
    cfg.optim.decay_fraction = 0.0
    cfg.optim.decay_shape = "linear"  # linear | cosine | 1-sqrt

    cfg.mesh = mesh_section()

    # Each objective's own section (btmlm, veco, xlm_e), as its declaration defines it.
    for section in objective_sections().values():
        cfg[section.name] = ml_collections.ConfigDict(section.defaults)

    cfg.init = ml_collections.ConfigDict()
    # A model to start from: a converted checkpoint folder (python -m xlpretrain.convert from-hf
    # …) or a training workdir. Shared parameters load; new ones are initialised and logged.
    cfg.init.checkpoint = ""
    # The run's model settings must be the checkpoint's where they change what its weights
    # compute (a window, a rotary base, …: xlpretrain/training/warm_start.py), except those
    # named here, comma-separated ("model.rope_theta"), which the run changes on purpose.
    cfg.init.changes = ""

    # Every objective has a weight (0 = off), so `--config.objectives.tlm=1` turns one on.
    cfg.objectives = ml_collections.ConfigDict({name: 0.0 for name in KNOWN_OBJECTIVES})
    cfg.objectives.mmlm = 1.0
    # Staged runs: a tuple of {start_step, objectives: {name: weight}[, trainable: pattern]
    # [, batch_size: {name: rows}][, max_length: {name: tokens}]}; when set, `objectives` must
    # be empty. Stage i runs from logged step start_step (the first stage starts at 0); a float
    # start_step in (0, 1) is a fraction of train.steps, so it follows --config.train.steps.
    # An objective's rows in a stage: the stage's batch_size, else
    # data.per_objective.NAME.batch_size, else data.batch_size; a step's global batch is their
    # sum over the stage's objectives. Its row length likewise: the stage's max_length, else
    # data.per_objective.NAME.max_length, else data.max_length (context extension: a stage of
    # longer rows, whose new shapes compile its step again, announced as the stage starts).
    cfg.schedule = ()
    return cfg


# Where config.json has listed each backbone's own keys among those every backbone reads since
# before backbones declared them (the shipped records keep that order): XLM-R's (and BERT's)
# after `model.cross_attention`, ModernBERT's after `model.layer_norm_eps`. Another backbone's
# follow the keys every backbone reads.
SECTION_PLACES = {
    xlmr.SECTION.values: "cross_attention",
    modernbert.SECTION.values: "layer_norm_eps",
}


def model_section() -> ml_collections.ConfigDict:
    """`model.*`: the backbone (`model.architecture`), the keys every backbone reads
    (`backbones.settings.SHARED`) and each backbone's own (`Backbone.section`), with their
    defaults, as the declarations define them."""
    last = list(SHARED.defaults)[-1]
    placed: dict[str, list[Section]] = {}
    for section in backbones.sections():
        placed.setdefault(SECTION_PLACES.get(section.values, last), []).append(section)
    # xlmr (XLM-R's post-LN layers, learned positions) | modernbert (ModernBERT / mmBERT:
    # pre-norm, no biases, rotary positions, GeGLU, local/global attention; set
    # absolute_positions False): xlpretrain/model/modern.py | bert (BERT / mBERT: XLM-R's
    # layers, two token types, positions from row 0). Declared in xlpretrain/backbones/.
    keys: dict[str, Any] = {"architecture": "xlmr"}
    for key, value in SHARED.defaults.items():
        keys[key] = value
        for section in placed.get(key, ()):
            keys.update(section.defaults)
    return ml_collections.ConfigDict(keys)


def model_ranges() -> Ranges:
    """The allowed values of `model.*`: the keys every backbone reads and each one's own."""
    ranges = dict(SHARED.qualified_ranges())
    for section in backbones.sections():
        ranges.update(section.qualified_ranges())
    return ranges


def objective_sections() -> dict[str, Section]:
    """The objectives' own config sections by name (one per section, however many share it)."""
    return {o.section.name: o.section for o in REGISTRY.values() if o.section}


# The ranges of `loop_section`'s and `mesh_section`'s keys, for every task that has them.
LOOP_RANGES: Ranges = {
    "train.steps": (positive, "must be > 0"),
    "train.log_every": (positive, "must be > 0"),
    "train.checkpoint_every": (positive, "must be > 0"),
    "train.keep_checkpoints": (positive, "must be > 0"),
    "train.max_bad_steps": (lambda v: v >= 0, "must be >= 0 (0: never stop)"),
    "train.grad_accum": (positive, "must be > 0"),
    "train.seed": (non_negative, "must be >= 0"),
    "train.prng_impl": (
        lambda v: v in PRNG_IMPLS,
        f"must be one of {', '.join(PRNG_IMPLS)}",
    ),
}
MESH_RANGES: Ranges = {
    "mesh.data": (lambda v: v == -1 or v > 0, "must be > 0 or -1"),
    "mesh.fsdp": (lambda v: v == -1 or v > 0, "must be > 0 or -1"),
    "mesh.tensor": (lambda v: v == -1 or v > 0, "must be > 0 or -1"),
}

_RANGES: Ranges = {
    "eval.every_steps": (non_negative, "must be >= 0"),
    "eval.batches": (positive, "must be >= 1"),
    "eval.held_out_fraction": (
        lambda v: v <= 0.5 and held_out.is_share(v),
        "must be a multiple of 0.001 in (0, 0.5]",
    ),
    "eval.retrieval_lines": (non_negative, "must be >= 0"),
    "eval.retrieval_layer": (lambda v: v >= -1, "must be -1 (the middle layer) or a layer >= 0"),
    "data.max_length": (lambda v: v >= 8, "must be >= 8"),
    "data.batch_size": (positive, "must be > 0"),
    "data.mono_alpha": (non_negative, "must be >= 0"),
    "data.parallel_alpha": (non_negative, "must be >= 0"),
    "data.max_line_bytes": (positive, "must be > 0"),
    "data.mono_mask_rate": (lambda v: 0.0 < v < 1.0, "must be in (0, 1)"),
    "data.parallel_mask_rate": (lambda v: 0.0 < v < 1.0, "must be in (0, 1)"),
    "data.camlm_mask_rate": (lambda v: 0.0 < v < 1.0, "must be in (0, 1)"),
    "data.num_workers": (non_negative, "must be >= 0"),
    "data.prefetch": (non_negative, "must be >= 0"),
    "data.demo_languages": (lambda v: v >= 2, "must be >= 2"),
    "tokenizer.sentences_per_language": (positive, "must be > 0"),
    "tokenizer.character_coverage": (lambda v: 0.0 < v <= 1.0, "must be in (0, 1]"),
    "model.architecture": (
        one_of(*backbones.NAMES),
        f"must be one of {', '.join(backbones.NAMES)}",
    ),
    "init.changes": (
        lambda v: set(listed(v)) <= set(CHANGEABLE),
        f"must name keys among {', '.join(CHANGEABLE)}, comma-separated",
    ),
    "optim.learning_rate": (positive, "must be > 0"),
    "optim.warmup_steps": (non_negative, "must be >= 0"),
    "optim.b1": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
    "optim.b2": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
    "optim.eps": (positive, "must be > 0"),
    "optim.weight_decay": (non_negative, "must be >= 0"),
    "optim.clip_norm": (non_negative, "must be >= 0 (0 disables clipping)"),
    "optim.schedule": (one_of(*SCHEDULES), f"must be one of {', '.join(SCHEDULES)}"),
    "optim.decay_steps": (non_negative, "must be >= 0 (0: no decay)"),
    "optim.decay_fraction": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1) (0: optim.decay_steps)"),
    "optim.decay_shape": (one_of(*DECAY_SHAPES), f"must be one of {', '.join(DECAY_SHAPES)}"),
    **LOOP_RANGES,
    **MESH_RANGES,
}


def listed(value: str) -> tuple[str, ...]:
    """The keys of a comma-separated list ("model.a, model.b"), as `init.changes` gives them."""
    return tuple(key.strip() for key in value.split(",") if key.strip())


def check_config(cfg: ml_collections.ConfigDict) -> None:
    """Raises `ConfigError` naming the first unknown, mistyped or out-of-range key."""
    check_keys(
        cfg,
        default_config(),
        {
            **_RANGES,
            **model_ranges(),
            **{
                key: allowed
                for section in objective_sections().values()
                for key, allowed in section.qualified_ranges().items()
            },
        },
        own_checks={
            "objectives.": lambda path, value: _check_weight(path, path.split(".", 1)[1], value),
            "schedule": lambda _path, _value: _check_schedule(cfg),
            "data.per_objective.": _check_override,
            "data.anneal": lambda _path, _value: _check_anneal(cfg),
        },
    )
    if cfg.schedule:
        check(
            not any(w > 0 for w in cfg.objectives.values()),
            "objectives",
            "set either objective weights or a schedule, not both",
        )
    else:
        check(len(cfg.objectives) > 0, "objectives", "at least one objective is required")
        check(any(w > 0 for w in cfg.objectives.values()), "objectives", "all weights are zero")
    check_stop_at(cfg.train)
    if cfg.train.profile_steps:
        parts = cfg.train.profile_steps.split(":")
        check(
            len(parts) == 2 and all(p.isdigit() for p in parts) and int(parts[0]) < int(parts[1]),
            "train.profile_steps",
            f"expected 'START:END' with START < END, got {cfg.train.profile_steps!r}",
        )


def check_stop_at(train: ml_collections.ConfigDict) -> None:
    """`train.stop_at` is -1 or a step of the run; a W&B project needs wandb installed (both
    `train` keys every task's loop reads, checked before anything is built)."""
    check(
        train.stop_at == -1 or 0 < train.stop_at <= train.steps,
        "train.stop_at",
        f"must be -1 or in [1, train.steps={train.steps}], got {train.stop_at}",
    )
    check(
        not train.wandb_project or importlib.util.find_spec("wandb") is not None,
        "train.wandb_project",
        f"{train.wandb_project!r} needs Weights & Biases, which is not installed: "
        f"{INSTALL['wandb']} (or leave the key empty)",
    )


def _check_weight(path: str, name: str, value: Any) -> None:
    check(name in KNOWN_OBJECTIVES, path, f"unknown objective; known: {KNOWN_OBJECTIVES}")
    check(type_ok(value, 1.0) and value >= 0, path, "weight must be a number >= 0")


def _check_override(path: str, value: Any) -> None:
    _, _, name, key = (path.split(".") + [""])[:4]
    check(name in KNOWN_OBJECTIVES, path, f"unknown objective; known: {KNOWN_OBJECTIVES}")
    check(key in ("max_length", "batch_size"), path, "only max_length and batch_size")
    check(isinstance(value, int) and value > 0, path, f"must be an int > 0, got {value!r}")


def _check_anneal(cfg: ml_collections.ConfigDict) -> None:
    from xlpretrain.data.pretraining.anneal import Anneal

    try:
        Anneal.from_config(cfg.data.anneal, cfg.train.steps)
    except ValueError as error:
        raise ConfigError(f"config key 'data.anneal': {error}") from None


STAGE_KEYS = {"start_step", "objectives", "trainable", "batch_size", "max_length"}


def _check_schedule(cfg: ml_collections.ConfigDict) -> None:
    previous = -1
    for i, stage in enumerate(cfg.schedule):
        key = f"schedule[{i}]"
        check(
            isinstance(stage, (dict, ml_collections.ConfigDict))
            and {"start_step", "objectives"} <= set(stage.keys())
            and set(stage.keys()) <= STAGE_KEYS,
            key,
            "a stage is {'start_step': int, 'objectives': {name: weight}[, 'trainable': str]"
            "[, 'batch_size': {name: rows}][, 'max_length': {name: tokens}]}",
        )
        value = stage["start_step"]
        check(
            (isinstance(value, int) and not isinstance(value, bool))
            or (isinstance(value, float) and 0.0 < value < 1.0),
            f"{key}.start_step",
            f"must be a step (int) or a fraction of train.steps in (0, 1), got {value!r}",
        )
        start = start_step(value, cfg.train.steps)
        check(
            start > previous,
            f"{key}.start_step",
            f"{value!r} (step {start}) must come after the previous stage's step {previous}",
        )
        check(i > 0 or start == 0, f"{key}.start_step", "the first stage starts at 0")
        for name, weight in stage["objectives"].items():
            _check_weight(f"{key}.objectives.{name}", name, weight)
        check(
            any(w > 0 for w in stage["objectives"].values()),
            f"{key}.objectives",
            "all weights are zero",
        )
        for field, least in (("batch_size", 1), ("max_length", 8)):
            for name, value in stage.get(field, {}).items():
                check(
                    stage["objectives"].get(name, 0) > 0,
                    f"{key}.{field}.{name}",
                    f"not an objective of this stage ({sorted(stage['objectives'])})",
                )
                check(
                    isinstance(value, int) and not isinstance(value, bool) and value >= least,
                    f"{key}.{field}.{name}",
                    f"must be an int >= {least}, got {value!r}",
                )
        previous = start
