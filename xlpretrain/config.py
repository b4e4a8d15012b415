"""Default configuration and its validation.

Every config file starts from `default_config()`; `validate()` then rejects any key the defaults do
not know, any value of the wrong type and any value out of range, naming the key. Catching a typo
at start-up is cheaper than discovering after a day of training that `optim.warmup_step` was
silently ignored.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import ml_collections

# Objectives the training loop knows; later issues register more.
KNOWN_OBJECTIVES = ("mmlm", "tlm")

DEFAULT_LOGICAL_AXIS_RULES = (
    ("batch", ("data", "fsdp")),
    ("length", None),
    ("embed", "fsdp"),
    ("mlp", "tensor"),
    ("heads", "tensor"),
    ("kv", None),
    ("vocab", "tensor"),
    ("layers", None),
    ("positions", None),
    ("languages", None),
)


class ConfigError(ValueError):
    """A configuration value is unknown, mistyped or out of range."""


def default_config() -> ml_collections.ConfigDict:
    """Every key a run may set, with defaults; config files override these."""
    cfg = ml_collections.ConfigDict()

    cfg.train = ml_collections.ConfigDict()
    cfg.train.steps = 1000  # the run's length: the LR schedule is built from it
    cfg.train.stop_at = -1  # halt after this step with a checkpoint (-1: run to `steps`)
    cfg.train.log_every = 10
    cfg.train.checkpoint_every = 500
    cfg.train.keep_checkpoints = 3
    cfg.train.async_checkpointing = True
    cfg.train.seed = 0
    cfg.train.grad_accum = 1
    cfg.train.profile_steps = ""  # "START:END" writes a jax.profiler trace to WORKDIR/profile
    cfg.train.halt_on_nan = True

    cfg.data = ml_collections.ConfigDict()
    cfg.data.mono_dir = ""  # folder of <lang>.txt; empty: the built-in demo corpus
    cfg.data.parallel_dir = ""  # folder of <l1>-<l2>.tsv; empty: the built-in demo corpus
    cfg.data.max_length = 128
    cfg.data.batch_size = 32  # global, in sequences, per objective and step
    cfg.data.mono_alpha = 0.3
    cfg.data.parallel_alpha = 0.3
    cfg.data.strict = False  # bad lines raise instead of being skipped and counted
    cfg.data.max_line_bytes = 1_000_000
    cfg.data.pack = True  # several segments (or pairs) per row, attention confined to each
    cfg.data.mono_mask_rate = 0.15
    cfg.data.parallel_mask_rate = 0.15
    cfg.data.tlm_reset_positions = False  # XLM resets positions for the second sentence
    cfg.data.num_workers = 0  # grain worker processes (0: build batches in the main process)
    cfg.data.prefetch = 2  # batches built ahead of the step
    cfg.data.demo_languages = 40

    cfg.tokenizer = ml_collections.ConfigDict()
    cfg.tokenizer.path = ""  # a SentencePiece model; empty: train one into WORKDIR/tokenizer.model
    cfg.tokenizer.sentences_per_language = 2000

    cfg.model = ml_collections.ConfigDict()
    cfg.model.vocab_size = 250002
    cfg.model.hidden_size = 768
    cfg.model.num_layers = 12
    cfg.model.num_heads = 12
    cfg.model.mlp_dim = 3072
    cfg.model.max_positions = 514
    cfg.model.dropout_rate = 0.1
    cfg.model.attention_dropout_rate = 0.1
    cfg.model.language_embeddings = False  # XLM-style language embeddings added at the input
    cfg.model.dtype = "float32"  # compute dtype; parameters are always float32
    cfg.model.remat = "none"  # none | full | dots
    cfg.model.scan_layers = True
    cfg.model.attention = "xla"  # xla | cudnn

    cfg.optim = ml_collections.ConfigDict()
    cfg.optim.learning_rate = 5e-4
    cfg.optim.warmup_steps = 100
    cfg.optim.b1 = 0.9
    cfg.optim.b2 = 0.98
    cfg.optim.eps = 1e-6
    cfg.optim.weight_decay = 0.01
    cfg.optim.clip_norm = 1.0  # global-norm clipping; 0 disables

    cfg.mesh = ml_collections.ConfigDict()
    cfg.mesh.data = -1  # -1: the devices the other axes leave
    cfg.mesh.fsdp = 1
    cfg.mesh.tensor = 1
    cfg.mesh.rules = DEFAULT_LOGICAL_AXIS_RULES

    cfg.objectives = ml_collections.ConfigDict({"mmlm": 1.0})
    return cfg


def _check(cond: bool, key: str, message: str) -> None:
    if not cond:
        raise ConfigError(f"config key '{key}': {message}")


def _positive(v: Any) -> bool:
    return v > 0


def _non_negative(v: Any) -> bool:
    return v >= 0


def _probability(v: Any) -> bool:
    return 0.0 <= v <= 1.0


def _one_of(*choices: str) -> Callable[[Any], bool]:
    return lambda v: v in choices


# key -> (predicate, description of the allowed range)
_RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "train.steps": (_positive, "must be > 0"),
    "train.log_every": (_positive, "must be > 0"),
    "train.checkpoint_every": (_positive, "must be > 0"),
    "train.keep_checkpoints": (_positive, "must be > 0"),
    "train.grad_accum": (_positive, "must be > 0"),
    "data.max_length": (lambda v: v >= 8, "must be >= 8"),
    "data.batch_size": (_positive, "must be > 0"),
    "data.mono_alpha": (_non_negative, "must be >= 0"),
    "data.parallel_alpha": (_non_negative, "must be >= 0"),
    "data.max_line_bytes": (_positive, "must be > 0"),
    "data.mono_mask_rate": (lambda v: 0.0 < v < 1.0, "must be in (0, 1)"),
    "data.parallel_mask_rate": (lambda v: 0.0 < v < 1.0, "must be in (0, 1)"),
    "data.num_workers": (_non_negative, "must be >= 0"),
    "data.prefetch": (_non_negative, "must be >= 0"),
    "data.demo_languages": (lambda v: v >= 2, "must be >= 2"),
    "tokenizer.sentences_per_language": (_positive, "must be > 0"),
    "model.vocab_size": (lambda v: v >= 6, "must be >= 6 (5 special ids + 1 piece)"),
    "model.hidden_size": (_positive, "must be > 0"),
    "model.num_layers": (_positive, "must be > 0"),
    "model.num_heads": (_positive, "must be > 0"),
    "model.mlp_dim": (_positive, "must be > 0"),
    "model.max_positions": (_positive, "must be > 0"),
    "model.dropout_rate": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
    "model.attention_dropout_rate": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
    "model.dtype": (_one_of("float32", "bfloat16"), "must be 'float32' or 'bfloat16'"),
    "model.remat": (_one_of("none", "full", "dots"), "must be 'none', 'full' or 'dots'"),
    "model.attention": (_one_of("xla", "cudnn"), "must be 'xla' or 'cudnn'"),
    "optim.learning_rate": (_positive, "must be > 0"),
    "optim.warmup_steps": (_non_negative, "must be >= 0"),
    "optim.b1": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
    "optim.b2": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
    "optim.eps": (_positive, "must be > 0"),
    "optim.weight_decay": (_non_negative, "must be >= 0"),
    "optim.clip_norm": (_non_negative, "must be >= 0 (0 disables clipping)"),
    "mesh.data": (lambda v: v == -1 or v > 0, "must be > 0 or -1"),
    "mesh.fsdp": (lambda v: v == -1 or v > 0, "must be > 0 or -1"),
    "mesh.tensor": (lambda v: v == -1 or v > 0, "must be > 0 or -1"),
}


def _leaves(cfg: ml_collections.ConfigDict, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in cfg.items():
        path = f"{prefix}{key}"
        if isinstance(value, ml_collections.ConfigDict):
            yield from _leaves(value, path + ".")
        else:
            yield path, value


def _type_ok(value: Any, default: Any) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, (tuple, list)):
        return isinstance(value, (tuple, list))
    return isinstance(value, type(default))


def validate(cfg: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Raises `ConfigError` naming the first unknown, mistyped or out-of-range key."""
    defaults = default_config()
    sections = set(defaults.keys())
    for section in cfg.keys():
        _check(section in sections, section, f"unknown section; known: {sorted(sections)}")
    default_leaves = dict(_leaves(defaults))
    for path, value in _leaves(cfg):
        section = path.split(".", 1)[0]
        if section == "objectives":
            name = path.split(".", 1)[1]
            _check(name in KNOWN_OBJECTIVES, path, f"unknown objective; known: {KNOWN_OBJECTIVES}")
            _check(_type_ok(value, 1.0) and value >= 0, path, "weight must be a number >= 0")
            continue
        _check(path in default_leaves, path, "unknown key (typo?)")
        default = default_leaves[path]
        _check(
            _type_ok(value, default),
            path,
            f"expected {type(default).__name__}, got {type(value).__name__} ({value!r})",
        )
        if path in _RANGES:
            predicate, description = _RANGES[path]
            _check(predicate(value), path, f"{description}, got {value!r}")
    _check(len(cfg.objectives) > 0, "objectives", "at least one objective is required")
    _check(any(w > 0 for w in cfg.objectives.values()), "objectives", "all weights are zero")
    _check(
        cfg.model.hidden_size % cfg.model.num_heads == 0,
        "model.hidden_size",
        f"{cfg.model.hidden_size} is not divisible by model.num_heads={cfg.model.num_heads}",
    )
    _check(
        cfg.data.max_length + 2 <= cfg.model.max_positions,
        "data.max_length",
        f"{cfg.data.max_length} needs max_length + 2 <= model.max_positions="
        f"{cfg.model.max_positions} (positions start at padding id + 1 = 2)",
    )
    _check(
        cfg.data.batch_size % cfg.train.grad_accum == 0,
        "train.grad_accum",
        f"data.batch_size={cfg.data.batch_size} is not divisible by {cfg.train.grad_accum}",
    )
    _check(
        cfg.train.stop_at == -1 or 0 < cfg.train.stop_at <= cfg.train.steps,
        "train.stop_at",
        f"must be -1 or in [1, train.steps={cfg.train.steps}], got {cfg.train.stop_at}",
    )
    if cfg.train.profile_steps:
        parts = cfg.train.profile_steps.split(":")
        _check(
            len(parts) == 2 and all(p.isdigit() for p in parts) and int(parts[0]) < int(parts[1]),
            "train.profile_steps",
            f"expected 'START:END' with START < END, got {cfg.train.profile_steps!r}",
        )
    return cfg


def max_predictions(max_length: int, mask_rate: float) -> int:
    """Static number of prediction slots per row: masking never selects more than this."""
    return max(1, math.ceil(mask_rate * max_length))
