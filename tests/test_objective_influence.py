"""Influence tests on ERNIE-M's objectives themselves, not on their mask functions.

`test_influence.py` hands a mask function to the model, so a CAMLM objective silently built on
another mask, or a BTMLM decoder that picks the wrong one, would still pass it. Here the mask
comes from the objective's own code path: the registered CAMLM loss and
`ernie_m.decode_pseudo_tokens` run unchanged on pipeline-built rows (`translation_pair_row`,
`monolingual_row`, `mask_row` with 80/10/10), and a flax method interceptor adds a
differentiable offset to the embeddings' output and records what the objective predicts from.
The Jacobian of each prediction's logits with respect to each token's embedding, through 3
layers, must be exactly zero on every token the paper's conditioning excludes and non-zero on
every token it includes, so a leak that needs two hops fails too. The last tests break each
rule on purpose and check that the checks notice.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.tiny import mask_tokens, objective_context
from xlpretrain import masks, objectives
from xlpretrain.data.pretraining.batch import SIDE_PLACEHOLDER, SIDE_SOURCE, SIDE_TARGET, stack_rows
from xlpretrain.data.pretraining.examples import Placeholders, monolingual_row, translation_pair_row
from xlpretrain.data.pretraining.row_kinds import placeholder_fields
from xlpretrain.data.tokenizer import SentencePieceTokenizer
from xlpretrain.model import MaskedLM, ModelConfig, init_params
from xlpretrain.model.layers import Embeddings
from xlpretrain.objectives import ernie_m, mlm

VOCAB = 48
SPECIAL = SentencePieceTokenizer.layout(VOCAB)  # the ids of a SentencePiece vocabulary
MASK_ID = SPECIAL.mask
CFG = ModelConfig(
    vocab_size=VOCAB,
    hidden_size=32,
    num_layers=3,
    num_heads=4,
    mlp_dim=64,
    max_positions=64,
    num_languages=3,
    dropout_rate=0.0,
    attention_dropout_rate=0.0,
)
MODEL = MaskedLM(CFG)
PARAMS = nn.unbox(init_params(CFG, jax.random.key(0)))
ROWS, LENGTH, SLOTS, PLACEHOLDER_SLOTS = 2, 40, 16, 12
# Each token's offset is a scalar times its own fixed random direction: a dependence on that
# token's embedding then shows (almost surely) as a non-zero derivative, and an independence
# as an exact zero, with B·L tangents instead of B·L·H.
DIRECTIONS = jax.random.normal(jax.random.key(7), (ROWS, LENGTH, CFG.hidden_size))


class _Ids:
    """A tokenizer whose text is already ids ("5 17 9"), so rows need no SentencePiece model."""

    bos_id, pad_id, eos_id, mask_id = SPECIAL.bos, SPECIAL.pad, SPECIAL.eos, SPECIAL.mask
    vocab_size = VOCAB

    def encode(self, text: str) -> np.ndarray:
        return np.array(text.split(), np.int32)

    def special_ids(self) -> np.ndarray:
        return SPECIAL.all()


class _Lines:
    """An in-memory corpus of one language (pair) with the sources' interface."""

    def __init__(self, lines):
        self.lines = lines

    def num_lines(self, key) -> int:
        return len(self.lines)

    def line(self, key, index: int):
        return self.lines[index]

    def tokens(self, key, index: int, tokenizer) -> np.ndarray:
        return tokenizer.encode(self.lines[index])

    def token_pair(self, key, index: int, tokenizer) -> tuple[np.ndarray, np.ndarray]:
        first, second = self.lines[index]
        return tokenizer.encode(first), tokenizer.encode(second)


def _text(rng: np.random.Generator) -> str:
    ids = rng.integers(SPECIAL.unk + 1, MASK_ID, size=rng.integers(4, 9))
    return " ".join(map(str, ids))


def _masked(unmasked, rng):
    """The pipeline's masking, 80/10/10, at a rate that gives several predictions per side."""
    return mask_tokens(unmasked, rng, _Ids(), rate=0.3, num_slots=SLOTS)


def _kept(batch) -> np.ndarray:
    """Predicted tokens that the 80/10/10 split left as themselves."""
    return (batch["is_masked"] > 0) & (batch["input_ids"] == batch["labels"])


def _pair_rows(seed: int):
    rng = np.random.default_rng(seed)
    corpus = _Lines([(_text(rng), _text(rng)) for _ in range(8)])
    rows = [
        translation_pair_row(
            corpus,
            _Ids(),
            ("xx", "yy"),
            (0, 1),
            rng,
            length=LENGTH,
            pack=True,
            reset_positions=False,
        )
        for _ in range(ROWS)
    ]
    return stack_rows([_masked(row, rng) for row in rows])


def _mono_rows(seed: int):
    rng = np.random.default_rng(seed)
    corpus = _Lines([_text(rng) for _ in range(8)])
    placeholders = Placeholders(0.4, (0, 1, 2), PLACEHOLDER_SLOTS)
    rows = []
    for _ in range(ROWS):
        unmasked = monolingual_row(
            corpus, _Ids(), "xx", 0, rng, length=LENGTH, pack=True, placeholders=placeholders
        )
        row = _masked(unmasked, rng)
        row.update(placeholder_fields(unmasked, PLACEHOLDER_SLOTS))
        rows.append(row)
    return stack_rows(rows)


def _pairs_cover_both_sides(batch) -> bool:
    """≥2 predictions per side in every row's first pair, and per side some kept and some
    `<mask>` predictions: a kept token's own slot shows the very token it predicts."""
    masked, first = batch["is_masked"] > 0, batch["segment_ids"] == 1
    for side in (SIDE_SOURCE, SIDE_TARGET):
        here = masked & (batch["side"] == side)
        if (here & first).sum(axis=1).min() < 2 or not (here & _kept(batch)).any():
            return False
        if not (here & (batch["input_ids"] == MASK_ID)).any():
            return False
    return True


def _units_have_two_placeholders(batch) -> bool:
    first = batch["segment_ids"] == 1
    return ((batch["side"] == SIDE_PLACEHOLDER) & first).sum(axis=1).min() >= 2


def _seeds(build, accept, count=2):
    """The first `count` seeds whose random batch has what the checks need."""
    found = [s for s in range(100) if accept(build(s))][:count]
    assert len(found) == count
    return found


PAIR_SEEDS = _seeds(_pair_rows, _pairs_cover_both_sides)
MONO_SEEDS = _seeds(_mono_rows, _units_have_two_placeholders)


def _probe(run, outputs):
    """A compiled `batch -> |d outputs / d token embedding|`, each `[B, N, B, L]`.

    `run(batch)` calls the objective; the interceptor adds the offset to the `Embeddings`
    output and records what `MaskedLM` hands on (`hidden` from the first `__call__`, `logits`
    from `mlm_logits`, `selected` = `mlm_nll`'s input). `outputs(record)` is a tuple of
    `[B, N, ...]` arrays.
    Forward mode: jax 0.10.2's CPU compiler gets jit(jacrev) of a gather followed by a
    LayerNorm wrong (phantom dependencies on another slot's token); jit(jacfwd) is exact.
    The mask is fixed when this traces, so a test that swaps it builds its own probe.
    """

    def forward(scale, batch):
        record = {}

        def intercept(next_fun, args, kwargs, context):
            module, name = context.module, context.method_name
            if isinstance(module, MaskedLM) and name == "mlm_nll":
                # The loss's hand-written gradient (a custom_vjp) has no forward mode, and the
                # probe reads only what the loss is given.
                record.setdefault("selected", args[0])
                return jnp.zeros(args[1].shape), jnp.zeros(args[1].shape, bool)
            out = next_fun(*args, **kwargs)
            if isinstance(module, Embeddings) and name == "__call__":
                return out + scale[..., None] * DIRECTIONS
            if isinstance(module, MaskedLM):
                if name == "__call__":
                    record.setdefault("hidden", out)
                elif name == "mlm_logits":
                    record.setdefault("logits", out)
            return out

        with nn.intercept_methods(intercept):
            run(batch)
        return outputs(record)

    jacobian = jax.jit(jax.jacfwd(forward))

    def influence(batch):
        jacs = jacobian(jnp.zeros((ROWS, LENGTH)), batch)
        return tuple(
            np.abs(np.asarray(j)).reshape(*j.shape[:2], -1, ROWS, LENGTH).sum(axis=2) for j in jacs
        )

    return influence


def _check(influence, row, index, allowed, what):
    """Output `index` of row `row`: zero on every token outside `allowed` (tokens of that
    row; other rows included), non-zero on each token inside."""
    got = influence[row, index]
    excluded = np.ones(got.shape, bool)
    excluded[row, sorted(allowed)] = False
    leaks = [tuple(map(int, ij)) for ij in np.argwhere(excluded & (got != 0))]
    assert not leaks, f"{what} depends on excluded (row, token)s {leaks}"
    dead = [int(j) for j in sorted(allowed) if got[row, j] == 0]
    assert not dead, f"{what} has no influence from allowed tokens {dead}"


def camlm_probe():
    """The registered CAMLM loss; outputs: the logits of each prediction slot, from the
    states the objective hands its LM head."""
    objective = objectives.get("camlm").loss(objective_context("camlm"))

    def run(batch):
        objective(PARAMS, batch, jax.random.key(1), MODEL)

    def outputs(record):
        selected = record["selected"]
        return (MODEL.apply({"params": PARAMS}, selected, method=MaskedLM.mlm_logits),)

    return _probe(run, outputs)


def check_camlm(probe, seed):
    batch = _pair_rows(seed)
    (influence,) = probe(batch)
    side, masked, kept = batch["side"], batch["is_masked"] > 0, _kept(batch)
    for r in range(ROWS):
        for p in np.flatnonzero(batch["pred_weights"][r] > 0):
            m = batch["pred_positions"][r, p]
            unit = batch["segment_ids"][r] == batch["segment_ids"][r, m]
            other = np.flatnonzero(unit & (side[r] != side[r, m]) & ~masked[r])
            what = f"row {r}: {'kept' if kept[r, m] else 'masked'} token {m} on side {side[r, m]}"
            _check(influence, r, p, {m, *other}, what)


def test_camlm_predictions_see_their_own_slot_and_the_other_sides_unmasked_tokens():
    """p(x_m | X \\ (M ∪ X_src)) and symmetrically, at every depth: tokens of the own side,
    other masked tokens, other pairs and rows, and padding have exactly no influence."""
    probe = camlm_probe()
    for seed in PAIR_SEEDS:
        check_camlm(probe, seed)


def pass_1_probe():
    """`decode_pseudo_tokens` as BTMLM calls it; outputs: the logits at each placeholder
    slot and, per token, its final state along a fixed direction."""
    direction = jax.random.normal(jax.random.key(2), (CFG.hidden_size,))

    def run(batch):
        ernie_m.decode_pseudo_tokens(
            MODEL, PARAMS, batch, jax.random.key(3), decode="argmax", temperature=1.0
        )

    def outputs(record):
        return record["logits"], record["hidden"] @ direction

    return _probe(run, outputs)


def check_btmlm_generate(probe, seed):
    batch = _mono_rows(seed)
    logits, hidden = probe(batch)
    side, segment = batch["side"], batch["segment_ids"]
    for r in range(ROWS):
        for j in np.flatnonzero((segment[r] > 0) & (side[r] == SIDE_SOURCE)):
            source = np.flatnonzero((segment[r] == segment[r, j]) & (side[r] == SIDE_SOURCE))
            _check(hidden, r, j, set(source), f"row {r}: source token {j}")
        for k in np.flatnonzero(batch["placeholder_weights"][r] > 0):
            slot = batch["placeholder_positions"][r, k]
            assert side[r, slot] == SIDE_PLACEHOLDER
            source = np.flatnonzero((segment[r] == segment[r, slot]) & (side[r] == SIDE_SOURCE))
            _check(logits, r, k, {slot, *source}, f"row {r}: placeholder {slot}")


def test_btmlm_pass_1_placeholders_see_the_source_and_themselves():
    """Pseudo tokens are decoded in parallel from the source alone: no placeholder depends on
    another, and the source never depends on a placeholder (else one would reach another
    through it)."""
    probe = pass_1_probe()
    for seed in MONO_SEEDS:
        check_btmlm_generate(probe, seed)


# --- the checks fail when the rule they guard is broken ---------------------------------------


def test_camlm_check_catches_an_objective_on_the_tlm_mask(monkeypatch):
    """The registered objective itself is what is probed: rebuilt on TLM's mask, it fails."""
    monkeypatch.setattr(ernie_m, "camlm", mlm.masked_lm(masks.tlm))
    with pytest.raises(AssertionError, match="depends on excluded"):
        check_camlm(camlm_probe(), PAIR_SEEDS[0])


def _two_hop_leak(q, k):
    """CAMLM, except that unmasked target tokens also read the unmasked source."""
    target_reads_source = (q["side"] == SIDE_TARGET) & (k["side"] == SIDE_SOURCE)
    unmasked = (q["is_masked"] == 0) & (k["is_masked"] == 0)
    same_pair = q["segment_ids"] == k["segment_ids"]
    return masks.camlm(q, k) | (same_pair & unmasked & target_reads_source)


def test_camlm_check_catches_a_leak_that_appears_only_at_layer_2(monkeypatch):
    """Masked tokens attend exactly where CAMLM lets them; the source reaches a masked source
    token through the target one layer later."""
    batch = _pair_rows(PAIR_SEEDS[0])
    meta = mlm.mask_meta(batch)
    leaky = np.asarray(masks.materialize(_two_hop_leak, meta))[:, 0]
    right = np.asarray(masks.materialize(masks.camlm, meta))[:, 0]
    masked = batch["is_masked"] > 0
    np.testing.assert_array_equal(leaky[masked], right[masked])
    assert (leaky != right).any()
    monkeypatch.setattr(ernie_m, "camlm", mlm.masked_lm(_two_hop_leak))
    with pytest.raises(AssertionError, match=r"on side 0 depends on excluded"):
        check_camlm(camlm_probe(), PAIR_SEEDS[0])


def test_btmlm_check_catches_placeholders_that_see_each_other(monkeypatch):
    """The decoder reads `masks.btmlm_generate` when it runs; placeholders reading one another
    would make pseudo tokens depend on each other."""
    generate = masks.btmlm_generate

    def placeholders_see_placeholders(q, k):
        both = (q["side"] == SIDE_PLACEHOLDER) & (k["side"] == SIDE_PLACEHOLDER)
        return generate(q, k) | (both & (q["segment_ids"] == k["segment_ids"]))

    monkeypatch.setattr(masks, "btmlm_generate", placeholders_see_placeholders)
    with pytest.raises(AssertionError, match="placeholder .* depends on excluded"):
        check_btmlm_generate(pass_1_probe(), MONO_SEEDS[0])


def test_btmlm_check_catches_a_source_that_sees_the_placeholders(monkeypatch):
    """A source reading the placeholders relays one placeholder to another one layer later."""
    generate = masks.btmlm_generate

    def source_sees_placeholders(q, k):
        reads = (q["side"] == SIDE_SOURCE) & (k["side"] == SIDE_PLACEHOLDER)
        return generate(q, k) | (reads & (q["segment_ids"] == k["segment_ids"]))

    monkeypatch.setattr(masks, "btmlm_generate", source_sees_placeholders)
    with pytest.raises(AssertionError, match="source token .* depends on excluded"):
        check_btmlm_generate(pass_1_probe(), MONO_SEEDS[0])
