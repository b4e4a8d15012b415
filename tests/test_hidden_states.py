"""Every layer's state from the one encoder (`MaskedLM(..., all_layers=True)`), per family, as
Hugging Face's `output_hidden_states` gives them: the embeddings' output first, then each
layer's, a final norm (ModernBERT's) on the last only. Each state is the output of the model
cut to that many layers; the default output is the last state, bit for bit, and its program
keeps no stack of states. Parity with transformers' own hidden states: tests/test_convert.py
(XLM-R), tests/test_bert.py (BERT), tests/test_modernbert.py (ModernBERT)."""

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.extend
import numpy as np
import pytest

from xlpretrain import api, backbones, masks
from xlpretrain.model import MaskedLM, init_params
from xlpretrain.model.layers import layer_norm

SIZE = dict(vocab_size=48, hidden_size=32, num_layers=3, num_heads=4, mlp_dim=40, max_positions=40)
CONFIGS = {
    "xlmr": backbones.get("xlmr").config(**SIZE),
    "xlmr-relative": backbones.get("xlmr").config(
        **SIZE, relative_position="gated", absolute_positions=False
    ),  # XLM-E: a relative-position table shared by the layers, beside the stacked ones
    "bert": backbones.get("bert").config(**SIZE),
    "modernbert": backbones.get("modernbert").config(
        **SIZE, absolute_positions=False, local_window=6, global_every=2
    ),
}
IDS = np.random.default_rng(0).integers(4, 48, (2, 16)).astype(np.int32)
MASK = (np.arange(16) < np.array([[16], [11]])).astype(np.int32)  # the second row padded


@functools.partial(jax.jit, static_argnames=("config", "all_layers"))
def forward(config, params, all_layers=False):
    positions, meta = api._meta(config, IDS, MASK, config.pad_token_id)
    return MaskedLM(config).apply(
        {"params": params},
        IDS,
        positions,
        mask_fn=masks.mmlm,
        mask_meta=meta,
        all_layers=all_layers,
    )


def random_params(config):
    """Initial params plus noise, so that no norm is the identity (a norm applied twice
    shows)."""
    rng = np.random.default_rng(1)
    params = nn.unbox(init_params(config, jax.random.key(1)))
    return jax.tree.map(lambda p: p + rng.normal(0.0, 0.3, p.shape).astype(np.float32), params)


def first_layers(params, count):
    """``params`` with only the first ``count`` layers of the stack."""
    layers = jax.tree.map(lambda p: p[:count], params["encoder"]["layers"])
    return {**params, "encoder": {**params["encoder"], "layers": layers}}


def unrolled(params, config):
    """``params`` in the unrolled layout: ``layers_0 … layers_{N-1}``."""
    stack = params["encoder"]["layers"]
    encoder = {k: v for k, v in params["encoder"].items() if k != "layers"}
    for i in range(config.num_layers):
        encoder[f"layers_{i}"] = jax.tree.map(lambda p, i=i: p[i], stack)
    return {**params, "encoder": encoder}


def stacked_states(jaxpr, shape) -> int:
    """How many values of ``shape`` the program and its sub-programs (scan bodies…) compute."""
    here = sum(getattr(v.aval, "shape", None) == shape for e in jaxpr.eqns for v in e.outvars)
    return here + sum(stacked_states(sub, shape) for sub in jax.extend.core.subjaxprs(jaxpr))


@pytest.mark.parametrize("name", CONFIGS)
def test_every_layers_state_is_the_output_of_the_model_cut_there(name):
    config = CONFIGS[name]
    params = random_params(config)
    states = np.asarray(forward(config, params, all_layers=True))
    assert states.shape == (config.num_layers + 1, *IDS.shape, config.hidden_size)
    positions, _ = api._meta(config, IDS, MASK, config.pad_token_id)
    embedded = MaskedLM(config).apply(
        {"params": params}, method=lambda m: m.embeddings(IDS, positions, None, True)
    )
    np.testing.assert_allclose(states[0], embedded, atol=1e-6)
    final_norm = params["encoder"].get("final_norm")  # a pre-norm stack ends in one
    for count in range(1, config.num_layers):
        cut = dataclasses.replace(config, num_layers=count)
        want = forward(cut, first_layers(params, count))
        got = states[count]
        if final_norm is not None:  # the cut model normalises its last layer's state
            got = layer_norm(config, "final_norm").apply({"params": final_norm}, got)
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"layer {count}")
    np.testing.assert_array_equal(forward(config, params), states[-1])
    unrolled_config = dataclasses.replace(config, scan_layers=False)
    np.testing.assert_allclose(
        forward(unrolled_config, unrolled(params, config), all_layers=True), states, atol=1e-5
    )


def test_the_default_program_keeps_no_stack_of_states():
    """The default forward pass, training's, computes no ``[num_layers, B, L, H]`` value: the
    per-layer states exist only when asked for."""
    config = CONFIGS["xlmr"]
    params = random_params(config)
    shape = (config.num_layers, *IDS.shape, config.hidden_size)
    for scan_layers in (True, False):
        c = dataclasses.replace(config, scan_layers=scan_layers)
        p = params if scan_layers else unrolled(params, config)
        default = jax.make_jaxpr(lambda p, c=c: forward(c, p))(p).jaxpr
        every = jax.make_jaxpr(lambda p, c=c: forward(c, p, all_layers=True))(p).jaxpr
        assert stacked_states(default, shape) == 0, f"scan_layers={scan_layers}"
        assert stacked_states(every, shape) > 0  # the check sees a stack where there is one
