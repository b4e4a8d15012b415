"""Fine-tuning heads on the pre-trained encoder: sentence(-pair) classification (XNLI, PAWS-X:
a label per row, from its first token), token classification (PAN-X, UD-POS: a label per token)
and extractive QA (SQuAD, XQuAD, MLQA, TyDiQA-GoldP: where the answer starts and ends).

Each holds the pre-trained encoder as `backbone` (a `MaskedLM`, whose LM head is never run and
so has no parameters here), so a pre-trained tree loads into it as it is, and a new head. The
head reads the final hidden states as the family's Hugging Face task class does, by the
`task_head` the family declares (`model.config.TASK_HEADS`):

- "linear" (XLM-R's, BERT's): `…ForTokenClassification` is dropout → Linear(H, C);
  `…ForQuestionAnswering` is Linear(H, 2), no dropout, split into start and end;
  `…ForSequenceClassification` reads the first token: dropout → dense(H) → tanh → dropout →
  Linear(H, C) (XLM-R's `classifier.dense`, `out_proj`; BERT's pooler, then `classifier`,
  with no dropout before the pooler: the same function at inference).
- "transformed" (ModernBERT's): all three are the prediction head (dense → GELU → norm,
  bias-free as the encoder: `classifier_bias`, `norm_bias` False, `classifier_activation`
  "gelu"), then dropout (`classifier_dropout`) → Linear (with bias); sequence classification
  on the first token (`classifier_pooling` "cls").

Parameters, beside `backbone/…`::

    head/dense/kernel        [H, H]   "transformed" only (HF head.dense)
    head/layer_norm/scale    [H]      "transformed" only (HF head.norm)
    head/classifier/kernel   [H, C]   C labels, or 2 for QA (start, end)
    head/classifier/bias     [C]
    head_dense/{kernel,bias} [H, H]   sequence classification, "linear"
    head_out/{kernel,bias}   [H, C]   sequence classification, "linear"

Every new layer starts as HF's `_init_weights` starts it (and so XTREME's fine-tuning, which
builds these classes): kernels normal(0, `initializer_range`, 0.02), biases 0.

The dropout rate is the model's `dropout_rate`; an export states it as `classifier_dropout`.
With VECO's cross-attention plugged in, the pair classifier reads [h_x; s_x; h_y; s_y] (each
sequence's `<s>` in both streams) instead of the first token: no HF class has that head.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from xlpretrain import masks
from xlpretrain.model.config import TASK_HEADS, ModelConfig
from xlpretrain.model.encoder import MaskedLM
from xlpretrain.model.layers import dense, gelu, layer_norm

META_KEYS = ("segment_ids", "pair_ids", "side", "positions", "is_masked")


def encode(
    backbone: MaskedLM,
    batch: dict[str, jax.Array],
    deterministic: bool,
    memory: jax.Array | None = None,
    mask_fn: masks.MaskFn = masks.mmlm,
) -> jax.Array:
    """The encoder's own forward pass over a batch of rows (`mask_fn`, `masks.mmlm`: each token
    attends within its segment), with the batch's `token_types` where it has them: `[B, L, H]`.
    With `memory` (VECO's plugged-in stream s), each token also attends to the other sequence's
    states there (`masks.veco_cross`)."""
    return backbone(
        batch["input_ids"],
        batch["positions"],
        mask_fn=mask_fn,
        mask_meta={k: batch[k] for k in META_KEYS if k in batch},
        lang_ids=batch.get("lang_ids"),
        token_types=batch.get("token_types"),
        deterministic=deterministic,
        memory=memory,
        cross_mask_fn=masks.veco_cross,
    )


class TokenHead(nn.Module):
    """Hidden states `[B, L, H]` → float32 logits `[B, L, outputs]`, as `task_head` says;
    `dropout` before the linear layer where the family's HF class has it."""

    config: ModelConfig
    outputs: int
    task_head: str
    dropout: bool

    @nn.compact
    def __call__(self, hidden: jax.Array, deterministic: bool) -> jax.Array:
        cfg = self.config
        if self.task_head not in TASK_HEADS:
            raise ValueError(f"task_head={self.task_head!r}; expected one of {TASK_HEADS}")
        x = hidden
        if self.task_head == "transformed":
            x = dense(cfg, cfg.hidden_size, ("embed", None), "dense")(x)
            x = layer_norm(cfg, "layer_norm")(gelu(x))
        if self.dropout:
            x = nn.Dropout(cfg.dropout_rate)(x, deterministic=deterministic)
        init = nn.initializers.normal(cfg.initializer_range)
        logits = nn.Dense(self.outputs, dtype=jnp.float32, kernel_init=init, name="classifier")(x)
        return logits.astype(jnp.float32)


class TokenClassifier(nn.Module):
    """A label per token: float32 logits `[B, L, num_labels]`."""

    config: ModelConfig
    num_labels: int
    task_head: str  # the family's (`Family.task_head`)

    def setup(self) -> None:
        self.backbone = MaskedLM(self.config)
        self.head = TokenHead(self.config, self.num_labels, self.task_head, dropout=True)

    def __call__(self, batch: dict[str, jax.Array], deterministic: bool = True) -> jax.Array:
        return self.head(encode(self.backbone, batch, deterministic), deterministic)


class SpanExtractor(nn.Module):
    """Where an answer starts and ends: float32 logits `(start, end)`, each `[B, L]`."""

    config: ModelConfig
    task_head: str  # the family's (`Family.task_head`)

    def setup(self) -> None:
        self.backbone = MaskedLM(self.config)
        # HF's XLM-R and BERT QA classes have no dropout before `qa_outputs`; ModernBERT's has.
        dropout = self.task_head == "transformed"
        self.head = TokenHead(self.config, 2, self.task_head, dropout=dropout)

    def __call__(
        self, batch: dict[str, jax.Array], deterministic: bool = True
    ) -> tuple[jax.Array, jax.Array]:
        hidden = encode(self.backbone, batch, deterministic, mask_fn=self.mask_fn)
        logits = self.head(hidden, deterministic)
        return logits[..., 0], logits[..., 1]

    @property
    def mask_fn(self) -> masks.MaskFn:
        """Padding attends to its row's tokens, as in Hugging Face's classes, whose padding
        logits XTREME's loss over the window reads (`masks.padding_sees_row`); a model with
        local layers (ModernBERT) keeps padding to padding (`masks.mmlm`), where a window
        could leave a padding position no token in reach."""
        local = self.config.layer_type == "pre_ln" and self.config.global_every > 1
        return masks.mmlm if local else masks.padding_sees_row


class PairClassifier(nn.Module):
    """A label per row, one sentence or a pair: float32 logits `[B, num_labels]`. Plugged out
    (XLM-R style) the row is `<s> x </s></s> y </s>` (the family's pair layout) and the class
    comes from its first token; plugged in (VECO's bilingual fine-tuning) x and y are two
    segments, stream h runs self-attention only, stream s adds cross-attention to the other
    sequence's h, and the pair is [h_x; s_x; h_y; s_y] at each sequence's `<s>`."""

    config: ModelConfig
    num_labels: int
    plug_in: bool = False
    task_head: str = "linear"  # the family's (`Family.task_head`)

    def setup(self) -> None:
        if self.plug_in and not self.config.cross_attention:
            raise ValueError("plug_in=True needs a model with cross_attention=True")
        if self.task_head not in TASK_HEADS:
            raise ValueError(f"task_head={self.task_head!r}; expected one of {TASK_HEADS}")
        self.backbone = MaskedLM(self.config)

    @nn.compact
    def __call__(self, batch: dict[str, jax.Array], deterministic: bool = True) -> jax.Array:
        cfg = self.config
        h = encode(self.backbone, batch, deterministic)
        if self.plug_in:
            s = encode(self.backbone, batch, deterministic, memory=h)
            starts = [_segment_start(batch["segment_ids"], seg) for seg in (1, 2)]
            pooled = jnp.concatenate(
                [_take(stream, start) for start in starts for stream in (h, s)], axis=-1
            )
        else:
            pooled = h[:, 0]
        if self.task_head == "transformed":
            head = TokenHead(cfg, self.num_labels, "transformed", dropout=True, name="head")
            return head(pooled, deterministic)
        x = nn.Dropout(cfg.dropout_rate)(pooled, deterministic=deterministic)
        x = jnp.tanh(dense(cfg, cfg.hidden_size, ("mlp", "embed"), "head_dense")(x))
        x = nn.Dropout(cfg.dropout_rate)(x, deterministic=deterministic)
        init = nn.initializers.normal(cfg.initializer_range)  # HF's `_init_weights`
        logits = nn.Dense(self.num_labels, dtype=jnp.float32, kernel_init=init, name="head_out")(x)
        return logits.astype(jnp.float32)


def _segment_start(segment_ids: jax.Array, segment: int) -> jax.Array:
    """Index of each row's first token of `segment` (its `<s>`)."""
    return jnp.argmax(segment_ids == segment, axis=1)


def _take(hidden: jax.Array, index: jax.Array) -> jax.Array:
    return jnp.take_along_axis(hidden, index[:, None, None], axis=1)[:, 0]
