"""Objectives: pure functions `(params, batch, rng, model) -> (loss, metrics)`.

Each declares the data stream it consumes, so the pipeline builds one stream per objective.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from xlpretrain.data.pipeline import MONO, PARALLEL
from xlpretrain.objectives import mlm


@dataclasses.dataclass(frozen=True)
class Objective:
    name: str
    data_kind: str  # MONO or PARALLEL
    mask_rate_key: str  # data.<key> giving this objective's masking rate
    loss_fn: Callable


REGISTRY: dict[str, Objective] = {
    "mmlm": Objective("mmlm", MONO, "mono_mask_rate", mlm.mmlm),
    "tlm": Objective("tlm", PARALLEL, "parallel_mask_rate", mlm.tlm),
}


def get(name: str) -> Objective:
    if name not in REGISTRY:
        raise KeyError(f"unknown objective {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name]
