"""XLM-R (and RoBERTa): post-LN layers with biases, learned positions after the padding row, one
token type; optionally XLM's language embeddings, VECO's plug-in cross-attention and XLM-E's
relative-position bias. Converted by `convert.xlmr`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from xlpretrain.backbones.declaration import Backbone
from xlpretrain.core.errors import check
from xlpretrain.core.settings import Section
from xlpretrain.families import XLMR
from xlpretrain.model.config import RELATIVE_POSITIONS


@dataclasses.dataclass(frozen=True)
class RelativePositions:
    """`model.*` keys of XLM-R's and BERT's post-LN layers alone: a relative-position bias on
    the attention scores (XLM-E's), beside or instead of the learned positions."""

    relative_position: str = "none"  # none | bucketed (T5) | gated (XLM-E)
    num_buckets: int = 32
    max_distance: int = 128
    share_relative_table: bool = True  # one table for all layers; gates stay per layer


SECTION = Section(
    "model",
    RelativePositions,
    {
        "relative_position": (
            lambda v: v in RELATIVE_POSITIONS,
            "must be 'none', 'bucketed' or 'gated'",
        ),
        "num_buckets": (lambda v: v >= 4 and v % 2 == 0, "must be even and >= 4"),
        "max_distance": (lambda v: v >= 2, "must be >= 2"),
    },
)


def check_settings(model: Mapping[str, Any]) -> None:
    check(
        model["absolute_positions"] or model["relative_position"] != "none",
        "model.absolute_positions",
        "without absolute positions the model needs model.relative_position",
    )


BACKBONE = Backbone(
    family=XLMR,
    section=SECTION,
    check=check_settings,
    # The relative-position distance counts only where a checkpoint has relative positions.
    function_settings=("layer_norm_eps", "max_distance"),
    converter="xlpretrain.convert.xlmr",
    peer_name="transformers XLMRobertaForMaskedLM (sdpa attention)",
)
