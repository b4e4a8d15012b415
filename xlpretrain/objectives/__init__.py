"""Objectives: pure functions `(params, batch, rng, model) -> (loss, metrics)`.

Each registry entry says, from the run config, which example stream the objective consumes
(the pipeline builds one per objective) and which loss function it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import ml_collections

from xlpretrain.data.pipeline import MONO, PARALLEL, SEGMENT_PAIRS, StreamSpec
from xlpretrain.objectives import ernie_m, mlm, veco

LossFn = Callable  # (params, batch, rng, model) -> (loss, metrics)


@dataclasses.dataclass(frozen=True)
class Objective:
    name: str
    stream_spec: Callable[[ml_collections.ConfigDict], StreamSpec]
    loss: Callable[[ml_collections.ConfigDict], LossFn]

    def stream(self, cfg: ml_collections.ConfigDict) -> StreamSpec:
        """The stream, with the run's `data.per_objective` length and batch for it."""
        override = cfg.data.per_objective.get(self.name, {})
        return dataclasses.replace(
            self.stream_spec(cfg),
            max_length=override.get("max_length", 0),
            batch_size=override.get("batch_size", 0),
        )


def _btmlm_stream(cfg: ml_collections.ConfigDict) -> StreamSpec:
    return StreamSpec(
        MONO,
        cfg.data.mono_mask_rate,
        placeholder_ratio=cfg.btmlm.ratio,
        target_languages=tuple(cfg.btmlm.target_languages),
        tag_format=cfg.btmlm.tag_format if cfg.btmlm.target_signal == "tag_token" else "",
    )


REGISTRY: dict[str, Objective] = {
    "mmlm": Objective(
        "mmlm", lambda cfg: StreamSpec(MONO, cfg.data.mono_mask_rate), lambda cfg: mlm.mmlm
    ),
    "tlm": Objective(
        "tlm", lambda cfg: StreamSpec(PARALLEL, cfg.data.parallel_mask_rate), lambda cfg: mlm.tlm
    ),
    "camlm": Objective(
        "camlm",
        lambda cfg: StreamSpec(PARALLEL, cfg.data.camlm_mask_rate),
        lambda cfg: ernie_m.camlm,
    ),
    "btmlm": Objective(
        "btmlm",
        _btmlm_stream,
        lambda cfg: ernie_m.make_btmlm(cfg.btmlm.decode, cfg.btmlm.temperature),
    ),
    # VECO on bilingual pairs (x, y) = a sentence and its translation ...
    "veco": Objective(
        "veco",
        lambda cfg: StreamSpec(SEGMENT_PAIRS, cfg.data.parallel_mask_rate),
        lambda cfg: veco.make_veco("veco", cfg.veco.variant),
    ),
    # ... and on monolingual pairs (x, y) = two adjacent segments.
    "veco_mono": Objective(
        "veco_mono",
        lambda cfg: StreamSpec(
            SEGMENT_PAIRS,
            cfg.data.parallel_mask_rate,
            mono_fraction=1.0,
            mono_mask_rate=cfg.data.mono_mask_rate,
        ),
        lambda cfg: veco.make_veco("veco_mono", cfg.veco.variant),
    ),
}


def get(name: str) -> Objective:
    if name not in REGISTRY:
        raise KeyError(f"unknown objective {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name]
