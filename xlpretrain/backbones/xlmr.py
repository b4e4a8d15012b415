"""XLM-R (and RoBERTa): post-LN layers with biases, learned positions after the padding row, one
token type; optionally XLM's language embeddings, VECO's plug-in cross-attention and XLM-E's
relative-position bias. Converted by `convert.xlmr`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xlpretrain.backbones.declaration import Backbone
from xlpretrain.core.errors import check
from xlpretrain.families import XLMR


def check_settings(model: Mapping[str, Any]) -> None:
    check(
        model["absolute_positions"] or model["relative_position"] != "none",
        "model.absolute_positions",
        "without absolute positions the model needs model.relative_position",
    )


BACKBONE = Backbone(
    family=XLMR,
    check=check_settings,
    # The relative-position distance counts only where a checkpoint has relative positions.
    function_settings=("layer_norm_eps", "max_distance"),
    converter="xlpretrain.convert.xlmr",
    peer_name="transformers XLMRobertaForMaskedLM (sdpa attention)",
)
