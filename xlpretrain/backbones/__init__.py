"""The backbones a run can train, by `model.architecture`: one declaration per family
(`declaration.Backbone`), each in its own module. The only place that goes from a family's name
to what the family is; adding one is its facts (`xlpretrain.families`), its declaration, the
converter it names and a line here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xlpretrain.backbones import bert, modernbert, xlmr
from xlpretrain.backbones.declaration import Backbone
from xlpretrain.core.settings import Section
from xlpretrain.model.config import ModelConfig

REGISTRY: dict[str, Backbone] = {
    b.name: b for b in (xlmr.BACKBONE, modernbert.BACKBONE, bert.BACKBONE)
}
NAMES = tuple(REGISTRY)


def get(name: str) -> Backbone:
    """The backbone named `name` (a `model.architecture` value)."""
    if name not in REGISTRY:
        raise ValueError(f"unknown model.architecture {name!r}; known: {', '.join(NAMES)}")
    return REGISTRY[name]


def of(config: ModelConfig) -> Backbone:
    """The backbone of a model."""
    return get(config.architecture)


def for_hf(hf_config: Mapping[str, Any], source: str) -> Backbone:
    """The backbone whose converter reads an HF `config.json` (by its `model_type`); another
    type is refused naming every family that converts, so a user learns what would."""
    model_type = hf_config.get("model_type")
    for backbone in REGISTRY.values():
        if model_type in backbone.hf_model_types:
            return backbone
    *others, last = [
        f"{b.title} (model_type {' or '.join(map(repr, b.hf_model_types))})"
        for b in REGISTRY.values()
    ]
    known = f"{', '.join(others)} and {last}"
    raise ValueError(
        f"{source}: unsupported architecture: model_type={model_type!r}; from-hf converts "
        f"{known} masked LMs"
    )


def function_settings() -> tuple[str, ...]:
    """Every family's settings that change what a checkpoint's weights compute."""
    return tuple(sorted({n for b in REGISTRY.values() for n in b.function_settings}))


def sections() -> list[Section]:
    """Each backbone's own `model.*` section, once however many backbones share it."""
    found: list[Section] = []
    for backbone in REGISTRY.values():
        if not any(section is backbone.section for section in found):
            found.append(backbone.section)
    return found
