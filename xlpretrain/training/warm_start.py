"""Starting a run from a pre-trained model (`init.checkpoint`), as ERNIE-M, VECO and XLM-E
start from XLM-R: parameters the run shares with the checkpoint are loaded, the run's new ones
(cross-attention, language embeddings, a generator, …) keep their fresh initialisation, and
both lists are logged, with the model settings in which the run departs from the checkpoint.

A checkpoint is refused, before anything is built, where the run would load its weights into
another function: a checkpoint of the other architecture or vocabulary, an XLM-R whose positions
start elsewhere, and any setting that changes what the weights compute without changing a shape
(its backbone's `function_settings`: a window, a rotary base, which layers are global, a norm's
epsilon) unless the run names it in `init.changes`. The run's config, hence its `config.json`,
states the model it trains: a warm start takes no setting from the checkpoint behind its back.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Collection
from typing import Any

import numpy as np
from flax import traverse_util

from xlpretrain import backbones
from xlpretrain.convert import folder
from xlpretrain.core.errors import ConfigError
from xlpretrain.model import vocab
from xlpretrain.model.config import ModelConfig

log = logging.getLogger("xlpretrain")


class WarmStartError(ConfigError):
    """The checkpoint cannot initialise this run's model."""


def read(source: str, run: ModelConfig, changes: Collection[str] = ()) -> folder.Pretrained:
    """The checkpoint folder or workdir `source`, once `check_model` finds it holds the run's
    model (`changes`: the settings the run changes on purpose, `init.changes` without their
    `model.` prefix)."""
    if not os.path.isdir(source):
        raise ConfigError(f"config key 'init.checkpoint': no folder {source}")
    pretrained = folder.read(source)
    check_model(run, pretrained.config, source, changes)
    return pretrained


def check_model(
    run: ModelConfig, checkpoint: ModelConfig, source: str, changes: Collection[str] = ()
) -> None:
    """Raises `WarmStartError` where the weights of a model of `checkpoint` would compute
    another function in the run's model `run` (see the module's docstring)."""
    if checkpoint.architecture != run.architecture:
        # Names and shapes alone would load some of one architecture's weights into the other's
        # layers (embeddings, attention and output kernels) and train the mix.
        raise WarmStartError(
            f"init.checkpoint {source}: a {checkpoint.architecture} model, but the run's "
            f"model.architecture={run.architecture!r}; set it and the checkpoint's shape"
        )
    if checkpoint.vocab_size != run.vocab_size:
        raise WarmStartError(
            f"init.checkpoint {source}: vocabulary of {checkpoint.vocab_size} ids, but "
            f"model.vocab_size={run.vocab_size}; use the checkpoint's tokenizer and size"
        )
    if checkpoint.absolute_positions and checkpoint.pad_token_id != run.pad_token_id:
        raise WarmStartError(
            f"init.checkpoint {source}: its positions start at {checkpoint.pad_token_id + 1} "
            f"(pad_token_id {checkpoint.pad_token_id}), a run's at {run.pad_token_id + 1}, so "
            "every token would read another position embedding; no run setting changes that"
        )
    layers = checkpoint.num_layers
    differing = {
        name: (getattr(run, name), getattr(checkpoint, name))
        for name in _function_settings(checkpoint)
        if name not in changes
        and _computed(run, name, layers) != _computed(checkpoint, name, layers)
    }
    if differing:
        raise WarmStartError(_refusal(source, differing))


def _refusal(source: str, differing: dict[str, tuple[Any, Any]]) -> str:
    """One line naming each setting (name: (the run's, the checkpoint's)) and how to fix it:
    the flags that set the checkpoint's values, or `init.changes` naming them."""
    trained = ", ".join(
        f"model.{n}={theirs!r} (the run: {ours!r})" for n, (ours, theirs) in differing.items()
    )
    flags = " ".join(f"--config.model.{n}={theirs!r}" for n, (_, theirs) in differing.items())
    keys = ",".join(f"model.{n}" for n in differing)
    return (
        f"init.checkpoint {source} was trained with {trained}, which change what its weights "
        f"compute: set {flags}, or --config.init.changes={keys} to change them on purpose"
    )


def _function_settings(checkpoint: ModelConfig) -> tuple[str, ...]:
    """The backbone's `function_settings` that mean something to `checkpoint`: a local layer's
    where it has local layers, a relative distance where it has relative positions (else the
    run's are new, as XLM-E's gated bias is on XLM-R)."""
    unused = set()
    if all(_global_layers(checkpoint, checkpoint.num_layers)):
        unused |= {"local_window", "local_rope_theta"}
    if checkpoint.relative_position == "none":
        unused.add("max_distance")
    settings = backbones.of(checkpoint).function_settings
    return tuple(n for n in settings if n not in unused)


def _computed(config: ModelConfig, name: str, layers: int) -> Any:
    """What setting `name` of `config` decides in a model of `layers` layers: which of them are
    global for `global_every` (3 and 4 are one pattern in 3 layers), else its value."""
    if name == "global_every":
        return _global_layers(config, layers)
    return getattr(config, name)


def _global_layers(config: ModelConfig, layers: int) -> tuple[bool, ...]:
    """Which of `layers` layers attend globally under `config.global_every`."""
    return tuple(i % config.global_every == 0 for i in range(layers))


def merge(params: Any, config: ModelConfig, pretrained: folder.Pretrained, source: str):
    """`params` (the run's fresh parameters) with every parameter found in `pretrained` (which
    `read` accepted) replaced by the pre-trained value; returns (params, loaded paths,
    initialised paths)."""
    rows = vocab.with_rows(pretrained.params, config.padded_vocab_size)  # as the run pads
    pretrained = dataclasses.replace(pretrained, params=rows)
    theirs = traverse_util.flatten_dict(_unstack_like(pretrained, params), sep="/")
    ours = traverse_util.flatten_dict(params, sep="/")
    loaded, initialised = [], []
    merged = {}
    for path, value in ours.items():
        if path not in theirs:
            merged[path] = value
            initialised.append(path)
            continue
        if theirs[path].shape != value.shape:
            raise WarmStartError(
                f"init.checkpoint {source}: parameter {path} has shape {theirs[path].shape}, "
                f"the run's model needs {value.shape}"
            )
        merged[path] = np.asarray(theirs[path], dtype=value.dtype)
        loaded.append(path)
    unused = sorted(set(theirs) - set(ours))
    log.info("init.checkpoint %s: loaded %d parameters", source, len(loaded))
    # Some are the point of a warm start (cross-attention, dropout, a rotary base the run names
    # in init.changes); those that change no shape would otherwise pass unseen.
    for name, (run, checkpoint) in folder.different_settings(config, pretrained.config).items():
        log.info(
            "init.checkpoint: model.%s is %r in this run, %r in the checkpoint",
            name,
            run,
            checkpoint,
        )
    for path in initialised:
        log.info("init.checkpoint: new parameter, freshly initialised: %s", path)
    for path in unused:
        log.info("init.checkpoint: checkpoint parameter not used by this model: %s", path)
    return traverse_util.unflatten_dict(merged, sep="/"), loaded, initialised


def _unstack_like(pretrained: folder.Pretrained, params: Any) -> dict:
    """The checkpoint's params in the run's layer layout (stacked, or `layers_i` unrolled)."""
    theirs = pretrained.params
    encoder = params.get("encoder", {})
    if "layers" in encoder or "layers_0" not in encoder:
        return theirs
    stacked = theirs["encoder"]["layers"]
    count = len([k for k in encoder if k.startswith("layers_")])
    unrolled = {
        f"layers_{i}": traverse_util.unflatten_dict(
            {k: v[i] for k, v in traverse_util.flatten_dict(stacked).items()}
        )
        for i in range(min(count, pretrained.config.num_layers))
    }
    rest = {k: v for k, v in theirs["encoder"].items() if k != "layers"}
    return {**theirs, "encoder": {**rest, **unrolled}}
