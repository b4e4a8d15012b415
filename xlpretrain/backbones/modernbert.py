"""ModernBERT / mmBERT: pre-norm, bias-free layers with rotary positions, GeGLU and every
`global_every`-th layer global, the others within `local_window` tokens; a final norm. Converted
by `convert.modernbert`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xlpretrain.backbones.declaration import Backbone
from xlpretrain.core.errors import check
from xlpretrain.families import MODERNBERT

ROTARY = "model.architecture='modernbert' has rotary positions"


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
