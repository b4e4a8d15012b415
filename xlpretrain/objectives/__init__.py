"""Objectives: pure functions `(params, batch, rng, model) -> (loss, metrics)`, each declared
once (`declaration.Objective`) in the module of its paper and registered here by name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import ml_collections

from xlpretrain.model.config import ModelConfig, ModelFamily, generator_config
from xlpretrain.objectives import electra, ernie_m, mlm, veco
from xlpretrain.objectives.declaration import Objective

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
    cfg: ml_collections.ConfigDict,
    objectives: Mapping[str, Objective],
    num_languages: int,
    kernel_platform: str = "",
) -> tuple[Any, Callable[[jax.Array], dict]]:
    """The module the objectives train and its (boxed) parameter initialiser; its kernels are
    built for ``kernel_platform`` ('cpu', 'gpu', 'tpu'; empty: this host's)."""
    from xlpretrain.model.electra import ElectraPretrainer, init_electra_params  # Flax
    from xlpretrain.model.encoder import MaskedLM, init_params

    config = ModelConfig.from_run_config(cfg.model, num_languages, kernel_platform)
    if model_family(objectives) is ModelFamily.ELECTRA:
        generator = generator_config(config, cfg.xlm_e.generator_layers, cfg.xlm_e.generator_width)
        return ElectraPretrainer(config, generator), functools.partial(
            init_electra_params, config, generator
        )
    return MaskedLM(config), functools.partial(init_params, config)
