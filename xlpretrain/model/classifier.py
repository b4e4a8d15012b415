"""Sentence-pair classification (XNLI, PAWS-X) on the pre-trained encoder, with VECO's
cross-attention plugged in or out.

Plugged out (XLM-R style): the pair is one segment `<s> x </s></s> y </s>` and the class comes
from the `<s>` state. Plugged in (VECO's bilingual fine-tuning): x and y are two segments of one
pair; stream h runs self-attention only, stream s adds cross-attention to the other sequence's
h; each sequence is represented by [h; s] at its `<s>`, and the pair by [h_x; s_x; h_y; s_y].
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from xlpretrain import masks
from xlpretrain.model.config import ModelConfig
from xlpretrain.model.encoder import MaskedLM
from xlpretrain.model.layers import dense

META_KEYS = ("segment_ids", "pair_ids", "side", "positions", "is_masked")


class PairClassifier(nn.Module):
    """`backbone` holds the pre-trained encoder's parameters (without its LM head), so a
    pre-trained tree loads into it as it is; `head` is new."""

    config: ModelConfig
    num_labels: int
    plug_in: bool = False

    def setup(self) -> None:
        if self.plug_in and not self.config.cross_attention:
            raise ValueError("plug_in=True needs a model with cross_attention=True")
        self.backbone = MaskedLM(self.config)

    def _encode(self, batch, deterministic: bool, memory=None) -> jax.Array:
        return self.backbone(
            batch["input_ids"],
            batch["positions"],
            mask_fn=masks.mmlm,
            mask_meta={k: batch[k] for k in META_KEYS if k in batch},
            lang_ids=batch.get("lang_ids"),
            token_types=batch.get("token_types"),
            deterministic=deterministic,
            memory=memory,
            cross_mask_fn=masks.veco_cross,
        )

    @nn.compact
    def __call__(self, batch: dict[str, jax.Array], deterministic: bool = True) -> jax.Array:
        """Logits `[B, num_labels]` (float32) for one pair per row."""
        cfg = self.config
        h = self._encode(batch, deterministic)
        if self.plug_in:
            s = self._encode(batch, deterministic, memory=h)
            starts = [_segment_start(batch["segment_ids"], seg) for seg in (1, 2)]
            pooled = jnp.concatenate(
                [_take(stream, start) for start in starts for stream in (h, s)], axis=-1
            )
        else:
            pooled = h[:, 0]
        x = nn.Dropout(cfg.dropout_rate)(pooled, deterministic=deterministic)
        x = jnp.tanh(dense(cfg, cfg.hidden_size, ("mlp", "embed"), "head_dense")(x))
        x = nn.Dropout(cfg.dropout_rate)(x, deterministic=deterministic)
        logits = nn.Dense(self.num_labels, dtype=jnp.float32, name="head_out")(x)
        return logits.astype(jnp.float32)


def _segment_start(segment_ids: jax.Array, segment: int) -> jax.Array:
    """Index of each row's first token of `segment` (its `<s>`)."""
    return jnp.argmax(segment_ids == segment, axis=1)


def _take(hidden: jax.Array, index: jax.Array) -> jax.Array:
    return jnp.take_along_axis(hidden, index[:, None, None], axis=1)[:, 0]
