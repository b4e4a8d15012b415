"""The `model.*` keys every backbone reads, as typed settings (`ModelSettings`, the section
`SHARED`: their defaults and ranges). The keys a backbone's layers alone read are its own section
(`Backbone.section`). The plan reads both from a config and hands them to the backbone, which
builds the run's `ModelConfig` (`Backbone.model_config`); the config's `model` defaults and key
checks are generated from the sections (`training.config`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from xlpretrain.core.settings import Section
from xlpretrain.model.config import ATTENTION_IMPLS, DTYPES, REMAT
from xlpretrain.model.kernels.tiles import Tiles


@dataclasses.dataclass(frozen=True)
class ModelSettings:
    """`model.*` but the backbone's name and its own section's keys."""

    # Ids of the model's vocabulary; the size of the SentencePiece model a run trains when it
    # has none (tokenizer.path, data.store, init.checkpoint); 0: the size of the one it has.
    vocab_size: int = 250002
    # Vocabulary-indexed parameters get rows up to a multiple of this (unused, cut on export) so
    # a tensor-parallel axis divides them: 250,002 ids → 250,112 rows, split 2, 4, 8, … ways.
    vocab_multiple: int = 128
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    mlp_dim: int = 3072
    max_positions: int = 514
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    language_embeddings: bool = False  # XLM-style language embeddings added at the input
    cross_attention: bool = False  # VECO's plug-in cross-attention sub-layer per layer
    absolute_positions: bool = True  # learned position embeddings (rotary layers have none)
    layer_norm_eps: float = 1e-5
    dtype: str = "float32"  # compute dtype; parameters are always float32
    remat: str = "none"  # none | full | dots
    scan_layers: bool = True
    attention: str = "xla"  # xla | cudnn | pallas (fused mask-function kernel) | splash | auto
    # The fused kernel's launch shape per kernel, e.g. "forward=64x64:w4:s2 dq=64x32:w4:s2"
    # (KERNEL=BQxBK[:wWARPS][:sSTAGES]; unnamed kernels keep the default); empty: the default.
    flash_tiles: str = ""
    # MLM loss: the forward pass builds the float32 [predictions, vocab] logits this many
    # predictions at a time (nothing is recomputed in the backward pass, which keeps every
    # prediction's softmax − one-hot in the compute dtype); 0 = all at once.
    loss_chunk: int = 1024

    def model_fields(self) -> dict[str, Any]:
        """These settings as `ModelConfig` fields: `attention` is `attention_impl`; the
        language table's size is the data's (`RunPlan.model_config`), not a setting."""
        fields = dataclasses.asdict(self)
        fields["attention_impl"] = fields.pop("attention")
        del fields["language_embeddings"]
        return fields


def _flash_tiles(text: str) -> bool:
    try:
        Tiles.parse(text)
    except ValueError:
        return False
    return True


def _positive(value: Any) -> bool:
    return value > 0


SHARED = Section(
    "model",
    ModelSettings,
    {
        "vocab_size": (
            lambda v: v == 0 or v >= 6,
            "must be >= 6 (5 special ids + 1 piece), or 0 for the tokenizer's size",
        ),
        "vocab_multiple": (_positive, "must be >= 1"),
        "hidden_size": (_positive, "must be > 0"),
        "num_layers": (_positive, "must be > 0"),
        "num_heads": (_positive, "must be > 0"),
        "mlp_dim": (_positive, "must be > 0"),
        "max_positions": (_positive, "must be > 0"),
        "dropout_rate": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
        "attention_dropout_rate": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1)"),
        "dtype": (lambda v: v in DTYPES, "must be 'float32' or 'bfloat16'"),
        "remat": (lambda v: v in REMAT, "must be 'none', 'full' or 'dots'"),
        "loss_chunk": (lambda v: v >= 0, "must be >= 0 (0: the whole loss at once)"),
        "attention": (
            lambda v: v in ATTENTION_IMPLS,
            f"must be one of {', '.join(ATTENTION_IMPLS)}",
        ),
        "flash_tiles": (
            _flash_tiles,
            "must be empty or KERNEL=BQxBK[:wWARPS][:sSTAGES] entries, KERNEL one of forward, "
            "dq, dkv, sizes and warps powers of two (e.g. 'forward=64x64:w4:s2 dq=64x32')",
        ),
        "layer_norm_eps": (_positive, "must be > 0"),
    },
)
