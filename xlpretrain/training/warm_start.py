"""Starting a run from a pre-trained model (`init.checkpoint`), as ERNIE-M, VECO and XLM-E
start from XLM-R: parameters the run shares with the checkpoint are loaded, the run's new ones
(cross-attention, language embeddings, a generator, …) keep their fresh initialisation, and
both lists are logged, with the model settings in which the run departs from the checkpoint. A
checkpoint of the other architecture is refused.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np
from flax import traverse_util

from xlpretrain.convert import folder
from xlpretrain.model import vocab
from xlpretrain.model.config import ModelConfig

log = logging.getLogger("xlpretrain")


class WarmStartError(ValueError):
    """The checkpoint cannot initialise this run's model."""


def merge(params: Any, config: ModelConfig, pretrained: folder.Pretrained, source: str):
    """`params` (the run's fresh parameters) with every parameter found in `pretrained`
    replaced by the pre-trained value; returns (params, loaded paths, initialised paths)."""
    if pretrained.config.architecture != config.architecture:
        # Names and shapes alone would load some of one architecture's weights into the other's
        # layers (embeddings, attention and output kernels) and train the mix.
        raise WarmStartError(
            f"init.checkpoint {source}: a {pretrained.config.architecture} model, but the run's "
            f"model.architecture={config.architecture!r}; set it and the checkpoint's shape"
        )
    if pretrained.config.vocab_size != config.vocab_size:
        raise WarmStartError(
            f"init.checkpoint {source}: vocabulary of {pretrained.config.vocab_size} ids, but "
            f"model.vocab_size={config.vocab_size}; use the checkpoint's tokenizer and size"
        )
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
    # Some are the point of a warm start (cross-attention, dropout, a new rotary base); those
    # that change no shape (a window, a base, a norm's epsilon) would otherwise pass unseen.
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
