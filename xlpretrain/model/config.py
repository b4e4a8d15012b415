"""Model hyper-parameters as a frozen (hashable) dataclass, so it can be a Module attribute."""

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

from xlpretrain.model import kernels, vocab

DTYPES = ("float32", "bfloat16")
REMAT = ("none", "full", "dots")
RELATIVE_POSITIONS = ("none", "bucketed", "gated")
# post_ln: a post-LN layer with biases and learned (or relative) positions, XLM-R's and BERT's
# (model/layers.py); pre_ln: a pre-norm, bias-free layer with rotary positions, GeGLU and
# alternating local/global attention, and a final norm, ModernBERT's (model/modern.py).
LAYER_TYPES = ("post_ln", "pre_ln")
# What a backbone declares about its layers (`xlpretrain.backbones`), as values: the model code
# reads these, never the backbone's name. Records (model.json, a workdir's model_family.json)
# hold them, so a reader needs no registry to rebuild the model.
LAYER_FEATURES = ("layer_type", "token_type_rows", "positions_from")
# How a family's fine-tuning heads (token classification, extractive QA: `model.task_heads`)
# read the final hidden states, as its Hugging Face `…ForTokenClassification` and
# `…ForQuestionAnswering` do: "linear", a linear layer on them (XLM-R's, BERT's); "transformed",
# first the dense → GELU → norm of a prediction head (ModernBERT's). A family declares its own.
TASK_HEADS = ("linear", "transformed")
ATTENTION_IMPLS = ("xla", "cudnn", "pallas", "splash", "auto")


class ModelFamily(enum.Enum):
    """Which module a run trains; the value is what a workdir records (`model_family.json`),
    so readers of a workdir know its parameter tree without importing the objectives."""

    MASKED_LM = "masked_lm"  # MaskedLM: encoder + LM head tied to the embeddings
    ELECTRA = "electra"  # XLM-E: ElectraPretrainer (generator + discriminator)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Encoder shape and numerics; defaults are XLM-R base.

    ``dtype`` is the compute dtype (parameters are always float32); ``remat`` is 'none',
    'full' (recompute each layer) or 'dots' (save only weight matmuls); ``num_languages`` > 0
    adds an XLM-style language-embedding table (off for XLM-R compatibility).
    """

    architecture: str = "xlmr"  # the backbone's name (`xlpretrain.backbones`), a record only
    layer_type: str = "post_ln"
    # Rows of the token-type table: XLM-R's one (added to every token, so HF checkpoints import
    # exactly), BERT's two, none.
    token_type_rows: int = 1
    # The position-table row (or rotary position) of a unit's first token: XLM-R's table starts
    # after the padding row (2), BERT's and rotary positions at 0.
    positions_from: int = 2
    vocab_size: int = 250002
    # The vocabulary-indexed parameters have rows for ids up to a multiple of this, so that a
    # tensor-parallel mesh axis divides them (``model.vocab``); the extra rows are never used.
    vocab_multiple: int = 1
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    mlp_dim: int = 3072
    max_positions: int = 514
    pad_token_id: int = 1
    layer_norm_eps: float = 1e-5
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    num_languages: int = 0
    cross_attention: bool = False  # VECO's plug-in cross-attention sub-layer in every layer
    relative_position: str = "none"  # none | bucketed (T5) | gated (XLM-E)
    num_buckets: int = 32
    max_distance: int = 128
    share_relative_table: bool = True  # one bucket table for all layers (gates stay per layer)
    absolute_positions: bool = True  # learned absolute position embeddings (XLM-R)
    dtype: str = "float32"
    remat: str = "none"
    scan_layers: bool = True
    attention_impl: str = "xla"
    # What the fused kernels are built for ('cpu': interpret mode, 'gpu': Triton, 'tpu'); empty:
    # this host's. Fixed here so it is part of the traced function (see ``model.kernels``).
    kernel_platform: str = ""
    # The fused kernel's tiles, warps and stages per kernel (``flash.Tiles.parse``); empty:
    # ``flash.default_tiles(dtype, head_dim)``.
    flash_tiles: str = ""
    loss_chunk: int = 1024  # predictions per float32-logits chunk of the MLM loss's forward pass
    initializer_range: float = 0.02
    # modernbert: every `global_every`-th layer (from the first) attends globally, the others
    # within a window of `local_window` tokens (`local_window // 2` each side); rotary bases.
    local_window: int = 128
    global_every: int = 3
    rope_theta: float = 160_000.0
    local_rope_theta: float = 10_000.0

    def __post_init__(self) -> None:
        if not self.kernel_platform:
            object.__setattr__(self, "kernel_platform", kernels.host_platform())
        kernels.check_platform(self.kernel_platform)
        for name, allowed in (
            ("dtype", DTYPES),
            ("remat", REMAT),
            ("attention_impl", ATTENTION_IMPLS),
            ("relative_position", RELATIVE_POSITIONS),
            ("layer_type", LAYER_TYPES),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"model.{name}={getattr(self, name)!r}; expected one of {allowed}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"model.hidden_size={self.hidden_size} is not divisible by "
                f"model.num_heads={self.num_heads}"
            )
        if self.rotary:
            if self.absolute_positions or self.relative_position != "none":
                raise ValueError(
                    f"model.architecture={self.architecture!r} has rotary positions: set "
                    "model.absolute_positions=False and model.relative_position='none'"
                )
        elif not self.absolute_positions and self.relative_position == "none":
            raise ValueError("model.absolute_positions=False needs a model.relative_position")

    @property
    def rotary(self) -> bool:
        """Pre-norm layers turn queries and keys by their positions (no position table)."""
        return self.layer_type == "pre_ln"

    @property
    def biased(self) -> bool:
        """Post-LN layers' linear layers and norms have biases; pre-norm ones have none."""
        return self.layer_type == "post_ln"

    @property
    def gated_mlp(self) -> bool:
        """GeGLU (an input and a gate matrix) rather than one input matrix."""
        return self.layer_type == "pre_ln"

    @property
    def longest_row(self) -> int:
        """The most tokens a row may have: the position table's rows (rotary positions: HF's
        `max_position_embeddings`, mmBERT's 8,192-token context) from `positions_from`."""
        return self.max_positions - self.positions_from

    @property
    def padded_vocab_size(self) -> int:
        return vocab.padded_size(self.vocab_size, self.vocab_multiple)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def compute_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.dtype)


def recorded_features(record: Mapping[str, Any]) -> dict[str, Any]:
    """The ``LAYER_FEATURES`` of a model record (model.json fields or a config's ``model``
    section); one written before they were recorded had a post-LN layer unless it had neither
    learned nor relative positions, which only the pre-norm, rotary layers lacked."""
    if all(name in record for name in LAYER_FEATURES):
        return {name: record[name] for name in LAYER_FEATURES}
    if record.get("absolute_positions", True) or record.get("relative_position", "none") != "none":
        return {"layer_type": "post_ln", "token_type_rows": 1, "positions_from": 2}
    return {"layer_type": "pre_ln", "token_type_rows": 0, "positions_from": 0}


def generator_config(config: ModelConfig, layers: int, width: float) -> ModelConfig:
    """The generator: `layers` layers, `width` × the discriminator's hidden, heads and FFN."""
    heads = max(1, round(config.num_heads * width))
    return dataclasses.replace(
        config,
        num_layers=layers,
        hidden_size=heads * config.head_dim,
        num_heads=heads,
        mlp_dim=max(1, round(config.mlp_dim * width)),
    )
