"""What a backbone (a model family: XLM-R, ModernBERT, …) declares, in one place per family.

A run names its family as a value (`model.architecture`); everything that differs between
families is found through its declaration in the registry (`xlpretrain.backbones`), never by
comparing the name: its layers (as the `LAYER_FEATURES` values the model code reads), the checks
its settings need, which settings a warm start must share with its checkpoint, its Hugging Face
converters both ways, and its PyTorch peer for `bench`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from xlpretrain.model.config import LAYER_FEATURES, ModelConfig

if TYPE_CHECKING:  # the converters import Flax; checking a config needs none of it
    from xlpretrain.convert.folder import Pretrained


@dataclasses.dataclass(frozen=True)
class Backbone:
    """One model family.

    - ``name``: its `model.architecture` value; ``title``: how messages name it.
    - ``features``: its `LAYER_FEATURES` (layer type, token-type rows, first position row).
    - ``check``: raises `ConfigError` naming the key where a run's `model` section (a mapping of
      validated keys) asks for what its layers cannot do.
    - ``function_settings``: the `ModelConfig` fields in which the same weights compute another
      function without a parameter changing shape; a warm start shares them with its
      checkpoint or names them in `init.changes` (`training.warm_start`).
    - ``hf_model_types``, ``read_hf(path, allow_missing_head)``, ``write_hf(model, path)``: its
      Hugging Face folders (`config.json`'s `model_type`) and converters (which import their
      machinery when called: a config is checked without Flax).
    - ``hf_peer(config)``: a fresh HF masked LM of `config`'s shape, and ``peer_name``, for
      `bench --peer`.
    """

    name: str
    title: str
    features: Mapping[str, Any]
    check: Callable[[Mapping[str, Any]], None]
    function_settings: tuple[str, ...]
    hf_model_types: tuple[str, ...]
    read_hf: Callable[[str | os.PathLike, bool], Pretrained]
    write_hf: Callable[[Pretrained, str | os.PathLike], None]
    hf_peer: Callable[[ModelConfig], Any]
    peer_name: str

    def __post_init__(self) -> None:
        if set(self.features) != set(LAYER_FEATURES):
            raise ValueError(f"backbone {self.name}: features must be {LAYER_FEATURES}")

    def model_config(
        self, model: Mapping[str, Any], num_languages: int = 0, kernel_platform: str = ""
    ) -> ModelConfig:
        """The `ModelConfig` of a run's `model` section (a mapping of its keys)."""
        return ModelConfig.from_run_config(
            model, num_languages, kernel_platform, features=self.features
        )

    def config(self, **fields: Any) -> ModelConfig:
        """A `ModelConfig` of this family with `fields` (the others at their defaults)."""
        return ModelConfig(architecture=self.name, **self.features, **fields)
