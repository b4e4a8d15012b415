"""Checkpoint merging: the (weighted) average of checkpoints of one model, as a checkpoint folder.

Averaging the weights of checkpoints of one model — the last ones of a run, or variants trained
from one checkpoint (model soups) — often gives a better model than any of them; mmBERT ends its
training by merging the models of its decay phase. ``merge`` computes exactly

    merged = Σ_i w_i · params_i,    w_i = weight_i / Σ_j weight_j   (default: all equal)

parameter by parameter, in float64 and rounded to float32 once, and nothing else (no other
merging method). The inputs must be one model: the same model config (how it computes aside),
the same parameter tree and shapes, the same tokenizer and the same languages; anything else is
refused with the two files named, since averaging them would be meaningless or silently wrong
(ids or language ids meaning different things). The merged folder carries the inputs' config,
tokenizer and languages, so it loads, exports and starts a run (``init.checkpoint``) like any
checkpoint folder.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from flax import traverse_util

from xlpretrain.convert import folder
from xlpretrain.convert.folder import DISCRIMINATOR, Pretrained


def merge(
    sources: Sequence[str | os.PathLike],
    dst: str | os.PathLike,
    *,
    weights: Sequence[float] | None = None,
) -> Pretrained:
    """Writes the average of ``sources`` (checkpoint folders, training workdirs or
    ``WORKDIR/checkpoints/N``), weighted by ``weights`` (normalised; default uniform), as the
    new checkpoint folder ``dst``; returns the merged model. Checkpoints are read one at a time,
    so memory holds one model and the float64 sum, whatever their number."""
    dst = folder.new_folder(dst)  # fail before reading large checkpoints
    shares = normalised(weights, len(sources))
    first = _read(sources[0])
    total = {
        path: shares[0] * value.astype(np.float64)
        for path, value in traverse_util.flatten_dict(first.params).items()
    }
    for source, share in zip(sources[1:], shares[1:], strict=True):
        model = _read(source)
        check_same_model(first, model, str(sources[0]), str(source))
        for path, value in traverse_util.flatten_dict(model.params).items():
            total[path] += share * value.astype(np.float64)
    params = traverse_util.unflatten_dict({p: v.astype(np.float32) for p, v in total.items()})
    merged = dataclasses.replace(first, params=params)
    folder.write(merged, dst)
    return merged


def normalised(weights: Sequence[float] | None, count: int) -> list[float]:
    """``weights`` divided by their sum (``count`` equal shares when None)."""
    if count < 2:
        raise ValueError(f"merge averages two or more checkpoints, got {count}")
    if weights is None:
        return [1.0 / count] * count
    if len(weights) != count:
        raise ValueError(f"{len(weights)} weights for {count} checkpoints; give one each")
    if any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(
            f"weights {list(weights)}: each must be a finite number >= 0, and their sum > 0"
        )
    return [w / sum(weights) for w in weights]


def workdir_checkpoints(workdir: str | os.PathLike, steps: Sequence[int]) -> list[Path]:
    """``WORKDIR/checkpoints/N`` for each step (e.g. the decay phase's), each a finished
    checkpoint."""
    workdir = Path(workdir)
    if not folder.is_workdir(workdir):
        raise ValueError(
            f"{workdir} is not a training workdir (config.json + {folder.CHECKPOINTS_DIR}/), "
            "which --steps picks checkpoints of"
        )
    if len(set(steps)) != len(steps):
        raise ValueError(f"steps {list(steps)}: a step is named twice")
    finished = folder.finished_steps(workdir)
    missing = [step for step in steps if step not in finished]
    if missing:
        raise ValueError(
            f"{workdir / folder.CHECKPOINTS_DIR} has no finished checkpoint at step(s) "
            f"{', '.join(map(str, missing))}; it holds {', '.join(map(str, finished)) or 'none'} "
            "(a run saves every train.checkpoint_every steps and keeps the newest "
            "train.keep_checkpoints)"
        )
    return [workdir / folder.CHECKPOINTS_DIR / str(step) for step in steps]


def check_same_model(a: Pretrained, b: Pretrained, a_source: str, b_source: str) -> None:
    """Raises, naming both sources, unless ``a`` and ``b`` are checkpoints of one model."""
    where = f"{a_source} and {b_source} are not checkpoints of one model"
    differing = folder.different_settings(a.config, b.config)
    if differing:
        listed = ", ".join(f"{name} ({x!r} vs {y!r})" for name, (x, y) in differing.items())
        raise ValueError(f"{where}: the model config differs in {listed}")
    ours = traverse_util.flatten_dict(a.params, sep="/")
    theirs = traverse_util.flatten_dict(b.params, sep="/")
    for name in sorted(set(ours) ^ set(theirs)):
        holder = a_source if name in ours else b_source
        raise ValueError(f"{where}: parameter {name} is only in {holder}")
    for name, value in ours.items():
        if value.shape != theirs[name].shape:
            raise ValueError(
                f"{where}: parameter {name} has shape {value.shape} vs {theirs[name].shape}"
            )
    if _tokenizer_state(a) != _tokenizer_state(b):
        if a.tokenizer is None or b.tokenizer is None:
            without, other = (a_source, b) if a.tokenizer is None else (b_source, a)
            raise ValueError(
                f"{where}: {without} has no tokenizer, the other has {other.tokenizer.FILE}"
            )
        files = dict.fromkeys((a.tokenizer.FILE, b.tokenizer.FILE))
        raise ValueError(f"{where}: their tokenizers ({' vs '.join(files)}) differ")
    if a.languages != b.languages:
        raise ValueError(f"{where}: their languages (languages.json, the index of lang_ids) differ")


def _read(source: str | os.PathLike) -> Pretrained:
    """The checkpoint's masked LM, cut to its real vocabulary: rows padded for sharding
    (``model.vocab_multiple``) are never used, and runs may pad differently."""
    model = folder.read(source)
    if model.kind == DISCRIMINATOR:
        raise ValueError(
            f"{source} is an XLM-E run, read as its discriminator, which has no MLM head: a "
            "merged checkpoint folder holds a masked LM"
        )
    return folder.unpadded(model)


def _tokenizer_state(model: Pretrained) -> tuple | None:
    """What gives the model's ids their meaning, or None: the tokenizer's kind and what pickling
    it keeps (a SentencePiece model's bytes; a ``tokenizer.json``'s text and its special tokens
    by role, which its side files may name)."""
    tokenizer = model.tokenizer
    return None if tokenizer is None else (tokenizer.FILE, tokenizer.__getstate__())
