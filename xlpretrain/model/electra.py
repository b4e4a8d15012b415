"""XLM-E's ELECTRA-style pair of encoders: a small generator and the discriminator, sharing
the word and position embeddings and the embedding LayerNorm.

The discriminator's parameters sit where `MaskedLM` keeps its encoder (`embeddings/…`,
`encoder/…`), so the discriminator exports as an XLM-R-shaped encoder; the generator lives under
`generator_encoder/…` (with `generator_projection` when it is narrower) and `generator_head/…`
(dense → GELU → LayerNorm → tied embeddings + bias), the discriminator's head under
`discriminator_dense` and `discriminator_out` (dense → GELU → dense(1)).
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from xlpretrain.model.config import ModelConfig
from xlpretrain.model.encoder import Encoder, init_inputs
from xlpretrain.model.heads import LMHead
from xlpretrain.model.layers import Embeddings, dense, gelu


class ElectraPretrainer(nn.Module):
    config: ModelConfig  # the discriminator
    generator: ModelConfig

    def setup(self) -> None:
        self.embeddings = Embeddings(self.config)
        self.encoder = Encoder(self.config)
        if self.generator.hidden_size != self.config.hidden_size:
            self.generator_projection = dense(
                self.generator, self.generator.hidden_size, ("embed", "mlp"), "generator_projection"
            )
        self.generator_encoder = Encoder(self.generator)
        self.generator_head = LMHead(self.config)
        self.discriminator_dense = dense(
            self.config, self.config.hidden_size, ("embed", "mlp"), "discriminator_dense"
        )
        self.discriminator_out = nn.Dense(1, dtype=jnp.float32, name="discriminator_out")

    def generator_hidden(
        self, input_ids, positions, *, mask_fn, mask_meta, lang_ids=None, deterministic=True
    ) -> jax.Array:
        x = self.embeddings(input_ids, positions, lang_ids, deterministic)
        if self.generator.hidden_size != self.config.hidden_size:
            x = self.generator_projection(x)
        return self.generator_encoder(x, mask_meta, mask_fn=mask_fn, deterministic=deterministic)

    def generator_logits(self, hidden_selected: jax.Array) -> jax.Array:
        """float32 MLM logits on gathered generator states (tied to the shared embeddings)."""
        return self.generator_head(hidden_selected, self.embeddings.word_embeddings.embedding)

    def discriminator_logits(
        self, input_ids, positions, *, mask_fn, mask_meta, lang_ids=None, deterministic=True
    ) -> jax.Array:
        """float32 replaced-token logits `[B, L]`."""
        x = self.embeddings(input_ids, positions, lang_ids, deterministic)
        h = self.encoder(x, mask_meta, mask_fn=mask_fn, deterministic=deterministic)
        return self.discriminator_out(gelu(self.discriminator_dense(h)))[..., 0]

    def __call__(self, input_ids, positions, *, mask_fn, mask_meta, lang_ids=None):
        """Both towers once (initialisation)."""
        kwargs = dict(mask_fn=mask_fn, mask_meta=mask_meta, lang_ids=lang_ids)
        generated = self.generator_logits(self.generator_hidden(input_ids, positions, **kwargs))
        return generated, self.discriminator_logits(input_ids, positions, **kwargs)


def init_electra_params(
    config: ModelConfig, generator: ModelConfig, rng: jax.Array, batch_shape=(1, 8)
) -> dict:
    """Boxed parameters of both towers (see `init_params` for the boxing)."""
    ids, positions, kwargs = init_inputs(config, batch_shape)
    variables = ElectraPretrainer(config, generator).init({"params": rng}, ids, positions, **kwargs)
    return variables["params"]
