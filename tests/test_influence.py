"""Influence tests: what each objective's predictions may depend on, through the whole model.

For every prediction, the gradient of its loss with respect to every input embedding is
computed through a 3-layer encoder (float32, no dropout). It must be exactly zero for each
token the paper's conditioning excludes and non-zero for each token it includes — so a mask
that is right in one layer but leaks through another token in the next one fails here.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests.tiny import model_config, token_batch
from xlpretrain import masks
from xlpretrain.data.pretraining.batch import (
    SIDE_PLACEHOLDER,
    SIDE_PSEUDO,
    SIDE_SOURCE,
    SIDE_TAG,
    SIDE_TARGET,
)
from xlpretrain.masks import show
from xlpretrain.model import MaskedLM, init_params
from xlpretrain.model.layers import Embeddings

CFG = model_config(num_layers=3, num_languages=3)
MASK = CFG.vocab_size - 1
PARAMS = nn.unbox(init_params(CFG, jax.random.key(0)))
S, T, P, Q = SIDE_SOURCE, SIDE_TARGET, SIDE_PLACEHOLDER, SIDE_PSEUDO


def row(tokens):
    """tokens: (id, segment, side, masked) tuples → a batch of one row; language 1 on the
    target side, 2 on placeholders, pseudo tokens and tags, else 0."""
    side = np.array([[t[2] for t in tokens]])
    return token_batch(tokens, lang_ids=np.where(side == T, 1, 0) + np.where(side >= P, 2, 0))


def influence(mask_fn, batch, predicted):
    """|d loss_i / d embedding_j| summed over features: [predictions, tokens]."""
    model = MaskedLM(CFG)
    meta = {k: batch[k] for k in ("segment_ids", "pair_ids", "side", "is_masked", "positions")}

    def losses(delta):
        def add_delta(next_fun, args, kwargs, context):
            out = next_fun(*args, **kwargs)
            is_embedding_call = isinstance(context.module, Embeddings)
            return out + delta if is_embedding_call and context.method_name == "__call__" else out

        with nn.intercept_methods(add_delta):
            hidden = model.apply(
                {"params": PARAMS},
                batch["input_ids"],
                batch["positions"],
                mask_fn=mask_fn,
                mask_meta=meta,
                lang_ids=batch["lang_ids"],
                deterministic=True,
            )
        logits = model.apply({"params": PARAMS}, hidden[0, predicted], method=MaskedLM.mlm_logits)
        return optax.softmax_cross_entropy_with_integer_labels(logits, jnp.full(len(predicted), 5))

    delta = jnp.zeros((1, batch["input_ids"].shape[1], CFG.hidden_size))
    # Jitted: op by op, each of the Jacobian's many small ops is dispatched (and compiled) apart.
    jacobian = jax.jit(jax.jacrev(losses))(delta)  # [predictions, 1, L, H]
    return np.abs(np.asarray(jacobian)).sum(-1)[:, 0]


def check(mask_fn, batch, expected: dict[int, set[int]]):
    predicted = sorted(expected)
    got = influence(mask_fn, batch, predicted)
    length = batch["input_ids"].shape[1]
    for i, position in enumerate(predicted):
        allowed = expected[position]
        zero = [j for j in range(length) if j not in allowed]
        assert np.all(got[i, zero] == 0.0), (position, [j for j in zero if got[i, j] != 0])
        assert np.all(got[i, sorted(allowed)] > 0.0), (position, got[i])


# Two packed translation pairs and padding:
# 0 <s> 1 a1 2 a2 3 [M] 4 a4 5 </s> | 6 </s> 7 b1 8 [M] 9 b3 10 </s> || 11-17 second pair || pad
PAIRS = row(
    [
        (0, 1, S, 0),
        (5, 1, S, 0),
        (6, 1, S, 0),
        (MASK, 1, S, 1),
        (7, 1, S, 0),
        (2, 1, S, 0),
        (2, 1, T, 0),
        (8, 1, T, 0),
        (MASK, 1, T, 1),
        (9, 1, T, 0),
        (2, 1, T, 0),
        (0, 2, S, 0),
        (10, 2, S, 0),
        (MASK, 2, S, 1),
        (2, 2, S, 0),
        (2, 2, T, 0),
        (11, 2, T, 0),
        (2, 2, T, 0),
        (1, 0, S, 0),
        (1, 0, S, 0),
    ]
)
FIRST_PAIR = set(range(0, 11))
SECOND_PAIR = set(range(11, 18))


def test_mmlm_sees_its_own_segment_only():
    # two monolingual segments packed in one row, then padding
    batch = row(
        [
            (0, 1, S, 0),
            (5, 1, S, 0),
            (MASK, 1, S, 1),
            (6, 1, S, 0),
            (2, 1, S, 0),
            (0, 2, S, 0),
            (MASK, 2, S, 1),
            (7, 2, S, 0),
            (2, 2, S, 0),
            (1, 0, S, 0),
            (1, 0, S, 0),
        ]
    )
    check(masks.mmlm, batch, {2: set(range(0, 5)), 6: set(range(5, 9))})


def test_tlm_sees_both_sides_of_its_pair_only():
    check(masks.tlm, PAIRS, {3: FIRST_PAIR, 8: FIRST_PAIR, 13: SECOND_PAIR})


def test_camlm_conditions_on_the_unmasked_other_side_and_its_own_mask_only():
    # p(x_m | X \ (M ∪ X_src)): source mask 3 sees itself and the unmasked target 6, 7, 9, 10;
    # target mask 8 sees itself and the unmasked source 0, 1, 2, 4, 5.
    check(masks.camlm, PAIRS, {3: {3, 6, 7, 9, 10}, 8: {8, 0, 1, 2, 4, 5}, 13: {13, 15, 16, 17}})


def test_camlm_dependencies_through_twelve_layers_are_the_papers():
    # Jitted: one small program per row length instead of each op compiled per length.
    materialize = jax.jit(masks.materialize, static_argnums=0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        n_src, n_tgt = rng.integers(2, 12, size=2)
        side = np.array([S] * n_src + [T] * n_tgt)
        masked = (rng.random(len(side)) < 0.3).astype(int)
        meta = {
            "segment_ids": np.ones((1, len(side)), int),
            "side": side[None],
            "is_masked": masked[None],
            "positions": np.arange(len(side))[None],
        }
        allowed = np.asarray(materialize(masks.camlm, meta))[0, 0]
        reach = show.depends_on(allowed, layers=12)
        for m in np.flatnonzero(masked):
            expected = {m} | {j for j in range(len(side)) if side[j] != side[m] and not masked[j]}
            assert set(np.flatnonzero(reach[m])) == expected


def test_btmlm_generate_placeholders_see_the_source_and_themselves():
    # <s> a1 a2 a3 </s> P P (pad): the source sees itself; each placeholder the source + itself
    batch = row(
        [
            (0, 1, S, 0),
            (5, 1, S, 0),
            (6, 1, S, 0),
            (7, 1, S, 0),
            (2, 1, S, 0),
            (MASK, 1, P, 0),
            (MASK, 1, P, 0),
            (1, 0, S, 0),
        ]
    )
    source = {0, 1, 2, 3, 4}
    check(masks.btmlm_generate, batch, {5: source | {5}, 6: source | {6}, 2: source})


def test_btmlm_second_pass_sees_source_and_pseudo_tokens():
    # p(x_m | X \ M, P): <s> a1 [M] a3 </s> p1 p2 (pad)
    batch = row(
        [
            (0, 1, S, 0),
            (5, 1, S, 0),
            (MASK, 1, S, 1),
            (7, 1, S, 0),
            (2, 1, S, 0),
            (12, 1, Q, 0),
            (13, 1, Q, 0),
            (1, 0, S, 0),
        ]
    )
    check(masks.btmlm, batch, {2: set(range(7))})


@pytest.mark.parametrize("objective", sorted(masks.MASKS))
def test_every_registered_mask_keeps_rows_non_empty(objective):
    batch = PAIRS
    if objective.startswith("veco"):  # VECO rows: x and y as two segments of one pair
        second = (PAIRS["side"] == T).astype(int)
        pair = PAIRS["pair_ids"]
        batch = dict(PAIRS, segment_ids=np.where(pair > 0, 2 * pair - 1 + second, 0))
    allowed = np.asarray(masks.materialize(masks.get(objective), batch))
    assert allowed.any(axis=-1).all()


def test_btmlm_generate_with_a_language_tag():
    # <s> a1 a2 a3 </s> <tag tag> P P: placeholders see the source, the tag and themselves
    batch = row(
        [
            (0, 1, S, 0),
            (5, 1, S, 0),
            (6, 1, S, 0),
            (7, 1, S, 0),
            (2, 1, S, 0),
            (20, 1, SIDE_TAG, 0),
            (21, 1, SIDE_TAG, 0),
            (MASK, 1, P, 0),
            (MASK, 1, P, 0),
        ]
    )
    source, tag = {0, 1, 2, 3, 4}, {5, 6}
    check(
        masks.btmlm_generate,
        batch,
        {7: source | tag | {7}, 8: source | tag | {8}, 5: source | tag, 2: source},
    )
