"""Inference on a trained or converted model: ``model = xlpretrain.load(path)``.

NumPy in, NumPy out, jitted and batched: inputs are cut into chunks of ``batch_size`` rows and
padded to power-of-two shapes, so a stream of differently sized batches compiles a handful of
programs, each once per model shape (the config is a static argument). Inputs follow HF XLM-R:
positions are HF's ``create_position_ids_from_input_ids`` (count of non-pad tokens so far +
``pad_token_id``), and ``attention_mask`` becomes the MMLM mask's ``segment_ids``, so a real
token sees the real tokens of its row and padding sees padding only. Outputs at real tokens
equal ``transformers``' ``XLMRobertaForMaskedLM``; outputs at padding are unspecified. The pad
id is the tokenizer's (``Model.pad_id``: a ``tokenizer.json``'s may be anywhere), the
positions the model's own numbering from ``pad_token_id + 1``, as in training.

An XLM-E workdir serves its discriminator (the encoder it exports): hidden states and
``encode`` work, ``mlm_logits`` does not (it has no MLM head; its generator's is not served).

Logits and hidden states come from ``MaskedLM`` itself, per-layer states from its
``all_layers`` output (Hugging Face's ``output_hidden_states``, per family).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from xlpretrain import masks
from xlpretrain.convert.folder import DISCRIMINATOR, Pretrained, read
from xlpretrain.data.tokenizer import Tokenizer
from xlpretrain.model.config import ModelConfig
from xlpretrain.model.encoder import MaskedLM

POOLINGS = ("mean", "cls")
MIN_WIDTH = 16  # the shortest padded length: very short inputs share one program


def load(path: str | os.PathLike, *, batch_size: int = 32, dtype: str = "float32") -> Model:
    """A model from a training workdir (its latest checkpoint) or a checkpoint folder.

    ``dtype`` is the compute dtype ('float32' or 'bfloat16'), whatever the run trained with.
    """
    return Model(read(path), batch_size=batch_size, dtype=dtype)


def hf_positions(input_ids: jax.Array, pad_token_id: int, pad_id: int | None = None) -> jax.Array:
    """Positions as HF XLM-R numbers them: real tokens ``pad+1, pad+2, …``, padding ``pad``
    (``pad_token_id``); real tokens are those whose id is not ``pad_id`` (default: the same,
    as in XLM-R, whose tokenizer pads with its position padding index)."""
    pad_id = pad_token_id if pad_id is None else pad_id
    real = (input_ids != pad_id).astype(jnp.int32)
    return jnp.cumsum(real, axis=1) * real + pad_token_id


class Model:
    """A loaded model: ``config``, ``params`` (on the default device), ``tokenizer`` (or None),
    ``languages`` (codes indexing ``lang_ids``; empty without language embeddings), ``kind``
    (``"masked_lm"``, or ``"xlm_e_discriminator"``: no ``mlm_logits``), ``pad_id`` (the id of
    padding in ``input_ids``: the tokenizer's, without one the config's)."""

    def __init__(self, pretrained: Pretrained, *, batch_size: int = 32, dtype: str = "float32"):
        self.config: ModelConfig = dataclasses.replace(
            pretrained.config, dtype=dtype, remat="none", scan_layers=True, attention_impl="xla"
        )
        self.params = jax.device_put(pretrained.params)
        self.tokenizer: Tokenizer | None = pretrained.tokenizer
        self.pad_id = self.tokenizer.pad_id if self.tokenizer else self.config.pad_token_id
        self.languages: tuple[str, ...] = pretrained.languages
        self.kind: str = pretrained.kind
        self.batch_size = batch_size
        self.max_length = self.config.longest_row

    # --- public API -------------------------------------------------------------------------

    def mlm_logits(
        self,
        input_ids: ArrayLike,
        attention_mask: ArrayLike | None = None,
        lang_ids: ArrayLike | None = None,
    ) -> np.ndarray:
        """float32 MLM logits ``[B, L, vocab]``.

        ``attention_mask`` defaults to ``input_ids != pad``; ``lang_ids`` (``[B]`` or
        ``[B, L]``) is needed only by models with language embeddings.
        """
        if self.kind == DISCRIMINATOR:
            raise ValueError(
                "an XLM-E discriminator has no MLM head: use hidden_states or encode (the "
                "generator's head is not served)"
            )
        ids, mask, langs = self._inputs(input_ids, attention_mask, lang_ids)
        logits = self._run(
            functools.partial(_logits, self.config, pad_id=self.pad_id), ids, mask, langs
        )
        return logits[:, : ids.shape[1]]

    def hidden_states(
        self,
        input_ids: ArrayLike,
        attention_mask: ArrayLike | None = None,
        layer: int | None = None,
        lang_ids: ArrayLike | None = None,
    ) -> np.ndarray:
        """float32 hidden states: ``layer=None`` gives ``[num_layers + 1, B, L, H]`` (index 0
        the embeddings' output, as HF's ``output_hidden_states``), an int (negative counts from
        the end) that one entry, ``[B, L, H]``."""
        ids, mask, langs = self._inputs(input_ids, attention_mask, lang_ids)
        hidden = functools.partial(
            _hidden_jit, self.config, layer=self._layer(layer), pad_id=self.pad_id
        )
        out = self._run(hidden, ids, mask, langs)
        if layer is None:  # computed batch-major so chunks concatenate on axis 0
            return np.moveaxis(out[:, :, : ids.shape[1]], 1, 0)
        return out[:, : ids.shape[1]]

    def encode(
        self,
        texts: Sequence[str],
        langs: Sequence[str] | str | None = None,
        layer: int | None = None,
        pooling: str = "mean",
    ) -> np.ndarray:
        """Sentence embeddings ``[N, H]`` float32 of ``<s> text </s>`` (truncated to
        ``max_length`` tokens): the mean over its tokens (``<s>`` and ``</s>`` included, padding
        not), or the ``<s>`` state (``pooling='cls'``), at ``layer`` (default: the last).

        ``langs`` (one code, or one per text, from the workdir's ``languages.json``) is needed
        only by models with language embeddings and ignored by others.
        """
        if self.tokenizer is None:
            raise ValueError("this model has no tokenizer, so it cannot encode text")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r}; expected one of {POOLINGS}")
        layer = self.config.num_layers if layer is None else self._layer(layer)
        languages = self._language_ids(langs, len(texts))
        body = self.max_length - 2
        rows = [
            np.concatenate([[self.tokenizer.bos_id], pieces[:body], [self.tokenizer.eos_id]])
            for pieces in self.tokenizer.encode_batch(list(texts))
        ]
        pooled = functools.partial(
            _pooled, self.config, layer=layer, pooling=pooling, pad_id=self.pad_id
        )
        out = np.zeros((len(rows), self.config.hidden_size), np.float32)
        order = np.argsort([len(row) for row in rows], kind="stable")  # alike lengths together
        for start in range(0, len(rows), self.batch_size):
            chunk = order[start : start + self.batch_size]
            width = max(len(rows[i]) for i in chunk)
            ids = np.full((len(chunk), width), self.pad_id, np.int32)
            mask = np.zeros((len(chunk), width), np.int32)
            for row, i in enumerate(chunk):
                ids[row, : len(rows[i])] = rows[i]
                mask[row, : len(rows[i])] = 1
            langs_chunk = np.broadcast_to(languages[chunk, None], ids.shape)
            out[chunk] = self._run(pooled, ids, mask, langs_chunk)
        return out

    # --- helpers ------------------------------------------------------------------------------

    def _inputs(
        self, input_ids: ArrayLike, attention_mask: ArrayLike | None, lang_ids: ArrayLike | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids = np.asarray(input_ids, np.int32)
        if ids.ndim != 2:
            raise ValueError(f"input_ids must be [batch, length], got shape {ids.shape}")
        if ids.shape[1] > self.max_length:
            raise ValueError(
                f"input length {ids.shape[1]} exceeds the model's {self.max_length} positions"
            )
        if attention_mask is None:
            mask = (ids != self.pad_id).astype(np.int32)
        else:
            mask = np.asarray(attention_mask, np.int32)
        if mask.shape != ids.shape:
            raise ValueError(f"attention_mask shape {mask.shape} != input_ids shape {ids.shape}")
        if self.config.num_languages and lang_ids is None:
            raise ValueError(
                f"this model has language embeddings ({self.config.num_languages} languages): "
                "pass lang_ids"
            )
        langs = np.zeros_like(ids) if lang_ids is None else np.asarray(lang_ids, np.int32)
        if langs.ndim == 1:
            langs = langs[:, None]
        return ids, mask, np.broadcast_to(langs, ids.shape)

    def _language_ids(self, langs: Sequence[str] | str | None, count: int) -> np.ndarray:
        """Row language ids from codes, through the workdir's ``languages.json``."""
        if not self.config.num_languages:
            return np.zeros(count, np.int32)
        if langs is None:
            raise ValueError(
                f"this model has language embeddings ({self.config.num_languages} languages): "
                "pass langs= codes from the workdir's languages.json"
            )
        if isinstance(langs, str):
            langs = [langs] * count
        if len(langs) != count:
            raise ValueError(f"{len(langs)} langs for {count} texts")
        index = {code: i for i, code in enumerate(self.languages)}
        unknown = sorted(set(langs) - set(index))
        if unknown:
            raise ValueError(f"unknown language(s) {unknown}; the model knows {self.languages}")
        return np.array([index[code] for code in langs], np.int32)

    def _layer(self, layer: int | None) -> int | None:
        """``layer`` in ``[0, num_layers]`` (negative counts from the end), or None."""
        states = self.config.num_layers + 1
        if layer is None:
            return None
        if not -states <= layer < states:
            raise ValueError(f"layer={layer}: the model has states 0..{states - 1}")
        return layer % states

    def _run(
        self, fn: Callable[..., jax.Array], ids: np.ndarray, mask: np.ndarray, langs: np.ndarray
    ) -> np.ndarray:
        """``fn`` over chunks of ``batch_size`` rows, each padded to power-of-two rows and
        length; returns the rows' outputs (padding rows dropped, padded length kept)."""
        count, length = ids.shape
        width = _bucket(length, MIN_WIDTH, self.max_length)
        # float32 means float32 matmuls (no TF32 on GPUs), as PyTorch computes by default.
        precision = "float32" if self.config.dtype == "float32" else None
        outputs = []
        for start in range(0, count, self.batch_size):
            stop = min(start + self.batch_size, count)
            rows = _bucket(stop - start, 1, self.batch_size)
            pad = ((0, rows - (stop - start)), (0, width - length))
            with jax.default_matmul_precision(precision):
                out = fn(
                    self.params,
                    np.pad(ids[start:stop], pad, constant_values=self.pad_id),
                    np.pad(mask[start:stop], pad),
                    np.pad(langs[start:stop], pad),
                )
            outputs.append(np.asarray(out)[: stop - start])
        return np.concatenate(outputs)


# --- jitted programs: (config, params, ids, mask, lang_ids) → batch-major float32 output ----------
# ``config`` is static (ModelConfig is hashable), so every Model of one shape shares programs.


def _meta(
    config: ModelConfig, ids: jax.Array, mask: jax.Array, pad_id: int
) -> tuple[jax.Array, dict]:
    """HF positions, and the metadata the MMLM mask (and relative position biases) read."""
    positions = hf_positions(ids, config.pad_token_id, pad_id)
    return positions, {"segment_ids": mask, "positions": positions}


@functools.partial(jax.jit, static_argnames=("config", "pad_id"))
def _logits(config: ModelConfig, params, ids, mask, lang_ids, *, pad_id: int) -> jax.Array:
    positions, meta = _meta(config, ids, mask, pad_id)

    def forward(module: MaskedLM) -> jax.Array:
        hidden = module(ids, positions, mask_fn=masks.mmlm, mask_meta=meta, lang_ids=lang_ids)
        return module.mlm_logits(hidden)

    return MaskedLM(config).apply({"params": params}, method=forward)


def _hidden(
    config: ModelConfig, params, ids, mask, lang_ids, *, layer: int | None, pad_id: int
) -> jax.Array:
    """All states ``[B, num_layers + 1, L, H]`` (``layer=None``) or one, ``[B, L, H]``: the
    model's own forward pass, every layer's state kept unless only the last is wanted."""
    positions, meta = _meta(config, ids, mask, pad_id)
    last = layer == config.num_layers
    states = MaskedLM(config).apply(
        {"params": params},
        ids,
        positions,
        mask_fn=masks.mmlm,
        mask_meta=meta,
        lang_ids=lang_ids,
        all_layers=not last,
    )
    if layer is None:
        states = jnp.moveaxis(states, 0, 1)
    elif not last:
        states = states[layer]
    return states.astype(jnp.float32)


_hidden_jit = jax.jit(_hidden, static_argnames=("config", "layer", "pad_id"))


@functools.partial(jax.jit, static_argnames=("config", "layer", "pooling", "pad_id"))
def _pooled(
    config: ModelConfig, params, ids, mask, lang_ids, *, layer: int, pooling: str, pad_id: int
) -> jax.Array:
    hidden = _hidden(config, params, ids, mask, lang_ids, layer=layer, pad_id=pad_id)
    if pooling == "cls":
        return hidden[:, 0]
    weights = mask.astype(jnp.float32)[..., None]
    return (hidden * weights).sum(1) / jnp.maximum(weights.sum(1), 1.0)


def _bucket(n: int, smallest: int, largest: int) -> int:
    """The next power of two ≥ ``n``, within ``[smallest, largest]``."""
    return max(smallest, min(largest, 1 << max(n - 1, 0).bit_length()))
