"""Objectives: pure functions `(params, batch, rng, model) -> (loss, metrics)`, each declared
once (`declaration.Objective`) in the module of its paper and registered here by name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax

from xlpretrain.model.config import ModelConfig, ModelFamily, generator_config
from xlpretrain.objectives import electra, ernie_m, mlm, veco, xlco
from xlpretrain.objectives.declaration import Context, Objective

REGISTRY: dict[str, Objective] = {
    objective.name: objective
    for objective in (
        mlm.MMLM,
        mlm.TLM,
        ernie_m.CAMLM,
        ernie_m.BTMLM,
        veco.VECO,
        veco.VECO_MONO,
        electra.MRTD,
        electra.TRTD,
        xlco.XLCO,
    )
}


def get(name: str) -> Objective:
    if name not in REGISTRY:
        raise KeyError(f"unknown objective {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name]


def model_family(objectives: Mapping[str, Objective]) -> ModelFamily:
    """The one module the objectives train together."""
    families = {obj.family for obj in objectives.values()}
    if len(families) > 1:
        raise ValueError(
            f"objectives {sorted(objectives)} train different models "
            f"({sorted(f.value for f in families)}): replaced-token detection (mrtd, trtd) does "
            "not mix with masked-LM objectives"
        )
    return families.pop()


def build_model(
    config: ModelConfig, objectives: Mapping[str, Objective], contexts: Mapping[str, Context]
) -> tuple[Any, Callable[[jax.Array], dict]]:
    """The module the objectives train on an encoder of `config` (the run plan's
    `model_config`), and its (boxed) parameter initialiser; an ELECTRA pair's generator is
    sized by the objectives' own settings (`contexts`)."""
    from xlpretrain.model.electra import ElectraPretrainer, init_electra_params  # Flax
    from xlpretrain.model.encoder import MaskedLM, init_params

    if model_family(objectives) is ModelFamily.ELECTRA:
        own = contexts[next(iter(objectives))].own
        generator = generator_config(config, own.generator_layers, own.generator_width)
        return ElectraPretrainer(config, generator), functools.partial(
            init_electra_params, config, generator
        )
    return MaskedLM(config), functools.partial(init_params, config)
