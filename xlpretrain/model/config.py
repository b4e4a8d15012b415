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
# xlmr: XLM-R's post-LN layers with biases and learned positions (model/layers.py);
# modernbert: ModernBERT/mmBERT's pre-norm, bias-free layers with rotary positions, GeGLU and
# alternating local/global attention (model/modern.py).
ARCHITECTURES = ("xlmr", "modernbert")
ATTENTION_IMPLS = ("xla", "cudnn", "pallas", "splash", "auto")
# The settings in which the same weights compute another function without any parameter changing
# shape, by architecture: a warm start shares them with its checkpoint or names them in
# `init.changes` (`training.warm_start`). XLM-R's relative-position distance counts where the
# checkpoint has relative positions; the activation is no setting (conversions refuse another).
FUNCTION_SETTINGS = {
    "xlmr": ("layer_norm_eps", "max_distance"),
    "modernbert": (
        "layer_norm_eps", "local_window", "global_every", "rope_theta", "local_rope_theta",
    ),
}  # fmt: skip


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

    architecture: str = "xlmr"
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
    loss_chunk: int = 1024  # predictions per vocabulary-projection chunk of the MLM loss
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
            ("architecture", ARCHITECTURES),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"model.{name}={getattr(self, name)!r}; expected one of {allowed}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"model.hidden_size={self.hidden_size} is not divisible by "
                f"model.num_heads={self.num_heads}"
            )
        if self.architecture == "modernbert":
            if self.absolute_positions or self.relative_position != "none":
                raise ValueError(
                    "model.architecture='modernbert' has rotary positions: set "
                    "model.absolute_positions=False and model.relative_position='none'"
                )
        elif not self.absolute_positions and self.relative_position == "none":
            raise ValueError("model.absolute_positions=False needs a model.relative_position")

    @property
    def biased(self) -> bool:
        """XLM-R's linear layers and norms have biases; ModernBERT's have none."""
        return self.architecture == "xlmr"

    @property
    def longest_row(self) -> int:
        """The most tokens a row may have: XLM-R numbers positions from `pad_token_id` + 1 in
        its table of `max_positions`; ModernBERT's rotary positions count from 0 (HF's
        `max_position_embeddings` is mmBERT's 8,192-token context)."""
        if self.architecture == "modernbert":
            return self.max_positions
        return self.max_positions - self.pad_token_id - 1

    @property
    def padded_vocab_size(self) -> int:
        return vocab.padded_size(self.vocab_size, self.vocab_multiple)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def compute_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.dtype)

    @classmethod
    def from_run_config(
        cls, model: Mapping[str, Any], num_languages: int, kernel_platform: str = ""
    ) -> "ModelConfig":
        """Builds from a run config's validated ``model`` section, as a mapping: the run plan's
        resolution, or a workdir's saved ``config.json``.

        ``num_languages`` (the run's language vocabulary) sizes the language-embedding table
        when ``model.language_embeddings`` is on; it is a property of the data, not the config.
        ``kernel_platform``: the platform the step is compiled for, if not this host's.
        """
        renamed = {"attention_impl": "attention"}
        fields = {
            field.name: model[renamed.get(field.name, field.name)]
            for field in dataclasses.fields(cls)
            if renamed.get(field.name, field.name) in model
            and field.name not in ("num_languages", "kernel_platform", "pad_token_id")
        }
        return cls(
            **fields,
            num_languages=num_languages if model["language_embeddings"] else 0,
            kernel_platform=kernel_platform,
        )


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
