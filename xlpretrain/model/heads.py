"""Output heads on top of the encoder's hidden states."""

import flax.linen as nn
import jax
import jax.numpy as jnp

from xlpretrain.model.config import ModelConfig
from xlpretrain.model.layers import dense, gelu, layer_norm


class LMHead(nn.Module):
    """RoBERTa LM head: dense → GELU → LayerNorm → tied word embeddingᵀ + bias.

    The decoder matrix is the word-embedding table, passed in rather than owned, so it stays
    tied. The vocabulary matmul runs in the compute dtype with float32 accumulation and the
    logits are float32, as the softmax cross-entropy wants. The square ``dense`` kernel is
    named ``[embed, mlp]`` because an array may not repeat a logical axis name.
    """

    config: ModelConfig

    @nn.compact
    def __call__(self, hidden: jax.Array, word_embeddings: jax.Array) -> jax.Array:
        cfg = self.config
        h = gelu(dense(cfg, cfg.hidden_size, ("embed", "mlp"), "dense")(hidden))
        h = layer_norm(cfg, "layer_norm")(h)
        logits = jnp.einsum(
            "...e,ve->...v",
            h,
            word_embeddings.astype(cfg.compute_dtype),
            preferred_element_type=jnp.float32,
        )
        bias = self.param(
            "bias",
            nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
            (cfg.vocab_size,),
            jnp.float32,
        )
        return logits + bias
