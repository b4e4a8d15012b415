"""Objectives: pure functions `(params, batch, rng, model) -> (loss, metrics)`.

Each registry entry says, from the run config, which example stream the objective consumes
(the pipeline builds one per objective) and which loss function it is.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import flax.linen as nn
import jax
import ml_collections

from xlpretrain.data.masking import MASK_ONLY
from xlpretrain.data.pipeline import MONO, PARALLEL, SEGMENT_PAIRS, StreamSpec
from xlpretrain.model.config import ModelConfig
from xlpretrain.model.electra import ElectraPretrainer, generator_config, init_electra_params
from xlpretrain.model.encoder import MaskedLM, init_params
from xlpretrain.objectives import electra, ernie_m, mlm, veco

LossFn = Callable  # (params, batch, rng, model) -> (loss, metrics)


@dataclasses.dataclass(frozen=True)
class Objective:
    name: str
    stream_spec: Callable[[ml_collections.ConfigDict], StreamSpec]
    loss: Callable[[ml_collections.ConfigDict], LossFn]
    model: str = "masked_lm"  # the model family it trains: masked_lm | electra

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
    # XLM-E's generator reads x^masked: every predicted token is `<mask>` (no 10% random/kept).
    "mrtd": Objective(
        "mrtd",
        lambda cfg: StreamSpec(MONO, cfg.data.mono_mask_rate, corruption=MASK_ONLY),
        lambda cfg: electra.make_mrtd(cfg.xlm_e.disc_weight, cfg.xlm_e.temperature),
        model="electra",
    ),
    "trtd": Objective(
        "trtd",
        lambda cfg: StreamSpec(PARALLEL, cfg.data.parallel_mask_rate, corruption=MASK_ONLY),
        lambda cfg: electra.make_trtd(cfg.xlm_e.disc_weight, cfg.xlm_e.temperature),
        model="electra",
    ),
}


def get(name: str) -> Objective:
    if name not in REGISTRY:
        raise KeyError(f"unknown objective {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name]


def build_model(
    cfg: ml_collections.ConfigDict, objectives: dict[str, Objective], num_languages: int
) -> tuple[nn.Module, Callable[[jax.Array], dict]]:
    """The module the objectives train and its (boxed) parameter initialiser."""
    families = {obj.model for obj in objectives.values()}
    if len(families) > 1:
        raise ValueError(
            f"objectives {sorted(objectives)} train different models ({sorted(families)}): "
            "replaced-token detection (mrtd, trtd) does not mix with masked-LM objectives"
        )
    config = ModelConfig.from_run_config(cfg.model, num_languages)
    if families == {"electra"}:
        generator = generator_config(config, cfg.xlm_e.generator_layers, cfg.xlm_e.generator_width)
        return ElectraPretrainer(config, generator), functools.partial(
            init_electra_params, config, generator
        )
    return MaskedLM(config), functools.partial(init_params, config)
