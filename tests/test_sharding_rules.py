"""Sharding by name: the rules alone decide where every parameter and activation lives.

Moving heads, MLP and vocabulary from `tensor` to `fsdp` (and the batch and FSDP's parameter
split to `data × tensor`) changes nothing but the placement: loss and gradients equal one
device's. Model code names no mesh axis.
"""

import pathlib
import re

import flax.linen as nn
import jax
import numpy as np
import pytest

from xlpretrain.bench import synthetic_batch
from xlpretrain.config import DEFAULT_LOGICAL_AXIS_RULES
from xlpretrain.data.streams import PARALLEL, StreamSpec
from xlpretrain.model import MaskedLM, ModelConfig, init_params
from xlpretrain.objectives import ernie_m
from xlpretrain.sharding import (
    MESH_AXES,
    batch_sharding,
    logical_shardings,
    logical_spec,
    make_mesh,
    under_mesh,
)

MOVED = tuple(
    (name, {"batch": ("data", "tensor"), "embed": "tensor"}.get(name, axes))
    if name not in ("heads", "mlp", "vocab")
    else (name, "fsdp")
    for name, axes in DEFAULT_LOGICAL_AXIS_RULES
)
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
        8, StreamSpec(PARALLEL, 0.3, max_length=24), config.vocab_size, np.random.default_rng(0)
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
