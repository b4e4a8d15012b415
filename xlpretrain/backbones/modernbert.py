"""ModernBERT / mmBERT: pre-norm, bias-free layers with rotary positions, GeGLU and every
`global_every`-th layer global, the others within `local_window` tokens; a final norm. Converted
by `convert.modernbert`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from xlpretrain.backbones.declaration import Backbone
from xlpretrain.core.errors import check
from xlpretrain.core.settings import Section
from xlpretrain.families import MODERNBERT

ROTARY = "model.architecture='modernbert' has rotary positions"


@dataclasses.dataclass(frozen=True)
class LocalGlobalAttention:
    """`model.*` keys of ModernBERT's layers alone: every `global_every`-th layer from the first
    attends to the whole row, the others to `local_window` tokens around each (half each side);
    the rotary bases of each."""

    local_window: int = 128
    global_every: int = 3
    rope_theta: float = 160_000.0
    local_rope_theta: float = 10_000.0


SECTION = Section(
    "model",
    LocalGlobalAttention,
    {
        "local_window": (lambda v: v >= 2 and v % 2 == 0, "must be even and >= 2"),
        "global_every": (lambda v: v > 0, "must be >= 1 (1: every layer global)"),
        "rope_theta": (lambda v: v > 0, "must be > 0"),
        "local_rope_theta": (lambda v: v > 0, "must be > 0"),
    },
)


def check_settings(model: Mapping[str, Any]) -> None:
    check(not model["absolute_positions"], "model.absolute_positions", f"{ROTARY}: set False")
    check(
        model["relative_position"] == "none",
        "model.relative_position",
        f"{ROTARY}, which already make attention depend on distance: set 'none'",
    )
    head_dim = model["hidden_size"] // model["num_heads"]
    check(
        head_dim % 2 == 0,
        "model.num_heads",
        f"rotary positions turn pairs of features: hidden_size / num_heads = {head_dim} "
        "must be even",
    )


BACKBONE = Backbone(
    family=MODERNBERT,
    section=SECTION,
    check=check_settings,
    function_settings=(
        "layer_norm_eps",
        "local_window",
        "global_every",
        "rope_theta",
        "local_rope_theta",
    ),  # fmt: skip
    converter="xlpretrain.convert.modernbert",
    peer_name="transformers ModernBertForMaskedLM (sdpa attention)",
)
