"""Fine-tuning heads that read every token: token classification (PAN-X, UD-POS: a label per
token) and extractive QA (SQuAD, XQuAD, MLQA, TyDiQA-GoldP: where the answer starts and ends).

Like `PairClassifier`, each holds the pre-trained encoder as `backbone` (a `MaskedLM`, whose
LM head is never run and so has no parameters here), so a pre-trained tree loads into it as it
is, and a new `head`. The head reads the final hidden states as the family's Hugging Face task
class does, by the `task_head` the family declares (`model.config.TASK_HEADS`):

- "linear" (XLM-R's, BERT's): `…ForTokenClassification` is dropout → Linear(H, C);
  `…ForQuestionAnswering` is Linear(H, 2), no dropout, split into start and end.
- "transformed" (ModernBERT's): both are the prediction head (dense → GELU → norm, bias-free
  as the encoder: `classifier_bias`, `norm_bias` False, `classifier_activation` "gelu"), then
  dropout (`classifier_dropout`) → Linear (with bias).

Parameters, beside `backbone/…`::

    head/dense/kernel        [H, H]   "transformed" only (HF head.dense)
    head/layer_norm/scale    [H]      "transformed" only (HF head.norm)
    head/classifier/kernel   [H, C]   C labels, or 2 for QA (start, end)
    head/classifier/bias     [C]

The dropout rate is the model's `dropout_rate`; an export states it as `classifier_dropout`.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from xlpretrain import masks
from xlpretrain.model.config import TASK_HEADS, ModelConfig
from xlpretrain.model.encoder import MaskedLM
from xlpretrain.model.layers import dense, gelu, layer_norm

TOKEN_CLASSIFICATION = "token_classification"
QUESTION_ANSWERING = "question_answering"
TASK_KINDS = (TOKEN_CLASSIFICATION, QUESTION_ANSWERING)
META_KEYS = ("segment_ids", "pair_ids", "side", "positions", "is_masked")


def encode(backbone: MaskedLM, batch: dict[str, jax.Array], deterministic: bool) -> jax.Array:
    """The encoder's own forward pass over a batch of rows (`masks.mmlm`: each token attends
    within its segment), with the batch's `token_types` where it has them: `[B, L, H]`."""
    return backbone(
        batch["input_ids"],
        batch["positions"],
        mask_fn=masks.mmlm,
        mask_meta={k: batch[k] for k in META_KEYS if k in batch},
        lang_ids=batch.get("lang_ids"),
        token_types=batch.get("token_types"),
        deterministic=deterministic,
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
        logits = self.head(encode(self.backbone, batch, deterministic), deterministic)
        return logits[..., 0], logits[..., 1]


def task_model(kind: str, config: ModelConfig, task_head: str, num_labels: int) -> nn.Module:
    """The module of a task `kind` (`TASK_KINDS`); `num_labels` counts for token
    classification only (QA's two outputs are start and end)."""
    if kind == TOKEN_CLASSIFICATION:
        return TokenClassifier(config, num_labels, task_head)
    if kind == QUESTION_ANSWERING:
        return SpanExtractor(config, task_head)
    raise ValueError(f"unknown task kind {kind!r}; known: {', '.join(TASK_KINDS)}")
