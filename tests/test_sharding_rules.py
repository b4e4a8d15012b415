"""Sharding by name: the rules alone decide where every parameter and activation lives.

Moving heads, MLP and vocabulary from `tensor` to `fsdp` (and the batch and FSDP's parameter
split to `data × tensor`) changes nothing but the placement: loss and gradients equal one
device's. The training step traced on the mesh places each named activation where the rules
say, and nothing else. Model code names no mesh axis.
"""

import pathlib
import re
from collections.abc import Iterator

import flax.linen as nn
import jax
import numpy as np
import pytest

from tests.tiny import run_config
from xlpretrain import objectives
from xlpretrain.bench.step import synthetic_batch
from xlpretrain.data.pretraining.row_kinds import TranslationPairs
from xlpretrain.data.pretraining.streams import PARALLEL, StreamSpec
from xlpretrain.model import MaskedLM, ModelConfig, init_params
from xlpretrain.objectives import ernie_m
from xlpretrain.parallel.sharding import (
    MESH_AXES,
    batch_sharding,
    logical_shardings,
    logical_spec,
    make_mesh,
    under_mesh,
)
from xlpretrain.training.config import DEFAULT_LOGICAL_AXIS_RULES
from xlpretrain.training.plan import resolve
from xlpretrain.training.step import setup_training

MOVED = tuple(
    (name, {"batch": ("data", "tensor"), "embed": "tensor"}.get(name, axes))
    if name not in ("heads", "mlp", "vocab")
    else (name, "fsdp")
    for name, axes in DEFAULT_LOGICAL_AXIS_RULES
)
# MOVED, with the residual stream's hidden axis split too (over `fsdp`).
SPREAD = tuple((name, "fsdp" if name == "activation_embed" else axes) for name, axes in MOVED)
MODEL = pathlib.Path(__file__).resolve().parents[1] / "xlpretrain" / "model"


@pytest.fixture(scope="module")
def camlm_step():
    config = ModelConfig(
        vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, max_positions=40,
        relative_position="gated", attention_impl="pallas",
    )  # fmt: skip
    model = MaskedLM(config)
    boxed = init_params(config, jax.random.key(0))
    batch = synthetic_batch(
        8,
        StreamSpec(TranslationPairs(), {PARALLEL: 0.3}, max_length=24),
        config.vocab_size,
        np.random.default_rng(0),
    )
    batch["side"][:, 11:] = 1

    def loss(params, batch):
        return ernie_m.camlm(params, batch, jax.random.key(1), model)[0]

    grad_fn = jax.value_and_grad(loss)
    return boxed, batch, grad_fn, jax.jit(grad_fn)(nn.unbox(boxed), batch)


@pytest.mark.parametrize("rules", [DEFAULT_LOGICAL_AXIS_RULES, MOVED], ids=["default", "moved"])
def test_rules_alone_move_heads_and_vocabulary_and_nothing_else_changes(camlm_step, rules):
    boxed, batch, grad_fn, (want_loss, want_grads) = camlm_step
    mesh = make_mesh(2, 2, 2)
    params = logical_shardings(boxed, mesh, rules)
    heads_axis = dict(rules)["heads"]
    query = params["encoder"]["layers"]["attention"]["query"]["kernel"]
    assert query.spec[2] == heads_axis  # [layers, embed, heads, kv]
    assert params["embeddings"]["word_embeddings"]["embedding"].spec[0] == dict(rules)["vocab"]
    sharded = under_mesh(mesh, rules, grad_fn)
    jaxpr = str(jax.make_jaxpr(sharded)(nn.unbox(boxed), batch))
    assert "shard_map" in jaxpr and "sharding_constraint" in jaxpr
    loss, grads = jax.jit(sharded, in_shardings=(params, batch_sharding(mesh, rules)))(
        nn.unbox(boxed), batch
    )
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    for (path, got), want in zip(
        jax.tree_util.tree_leaves_with_path(grads), jax.tree.leaves(want_grads), strict=True
    ):
        np.testing.assert_allclose(
            got, want, atol=1e-6, rtol=1e-4, err_msg=jax.tree_util.keystr(path)
        )


def _names(axes) -> tuple[str, ...]:
    return () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)


def constraints(jaxpr) -> Iterator[tuple[tuple[int, ...], tuple[tuple[str, ...], ...]]]:
    """(shape, mesh axes of each dimension) of every sharding constraint in `jaxpr` and in the
    jaxprs inside it (the layer scan, the backward pass)."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "sharding_constraint":
            shape, spec = eqn.invars[0].aval.shape, tuple(eqn.params["sharding"].spec)
            yield shape, tuple(_names(a) for a in spec + (None,) * (len(shape) - len(spec)))
        for param in eqn.params.values():
            for inner in param if isinstance(param, tuple | list) else (param,):
                inner = getattr(inner, "jaxpr", inner)  # a ClosedJaxpr's Jaxpr
                if hasattr(inner, "eqns"):
                    yield from constraints(inner)


@pytest.mark.parametrize(
    "rules", [DEFAULT_LOGICAL_AXIS_RULES, MOVED, SPREAD], ids=["default", "moved", "spread"]
)
def test_the_training_step_places_each_named_activation_by_the_rules(rules):
    """The real step (MMLM + TLM, both rows 8 × 32; 4 heads of 8, hidden 32, FFN 64), traced
    on a 2 × 2 × 2 mesh: each activation the model names is constrained, forward and
    backward, to exactly the mesh axes the rules give its logical axes; no other value is."""
    cfg = run_config(mesh__data=2, mesh__fsdp=2, mesh__tensor=2, mesh__rules=rules)
    plan = resolve(cfg)
    model, init = objectives.build_model(plan.model_config(8), plan.objectives, plan.contexts)
    training = setup_training(plan, model, init, make_mesh(2, 2, 2), materialize=False)
    batches = plan.abstract_batches(0, training.batch_sharding)
    jaxpr = training.step_fns[0].trace(training.state, batches).jaxpr.jaxpr
    named = {
        (8, 32, 4, 8): ("batch", "length", "heads", "kv"),  # queries, keys, values
        (8, 32, 3, 4, 8): ("batch", "length", None, "heads", "kv"),  # the three, fused
        (8, 32, 64): ("batch", "length", "mlp"),  # the FFN's hidden units
        (8, 32, 32): ("batch", "length", "activation_embed"),  # a layer's output
    }
    table = dict(rules)
    found = set()
    for shape, placed in constraints(jaxpr):
        assert shape in named, f"an unnamed value of shape {shape} is constrained to {placed}"
        want = tuple(_names(table[axis]) if axis else () for axis in named[shape])
        assert placed == want, f"{named[shape]}: placed on {placed}, the rules say {want}"
        found.add(shape)
    assert found == set(named)


def test_logical_specs_follow_the_rules_under_a_mesh_only():
    assert logical_spec(("batch", "length", "heads")) is None  # no mesh: nothing to place
    mesh = make_mesh(2, 2, 2)
    spec = under_mesh(mesh, MOVED, lambda: logical_spec(("batch", "length", "heads", "kv")))()
    assert spec == jax.sharding.PartitionSpec(("data", "tensor"), None, "fsdp", None)
    odd = under_mesh(mesh, MOVED, lambda: logical_spec(("batch", "heads"), (8, 3)))()
    assert odd == jax.sharding.PartitionSpec(("data", "tensor"), None)  # 3 heads do not split


def test_model_code_names_no_mesh_axis():
    named = [
        f"{path.relative_to(MODEL.parent)}:{n}"
        for path in MODEL.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search("|".join(f"[\"']{axis}[\"']" for axis in MESH_AXES), line)
    ]
    assert not named, named
