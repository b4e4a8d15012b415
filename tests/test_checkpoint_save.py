"""A checkpoint of a replicated state on CPU devices is written without compiling anything
(`checkpoint.save_replicated_arrays_from_one_replica_on_cpu`: Orbax's replica-parallel save
compiled a slice per replica and shape first), and reads back as it was, typed PRNG keys too."""

import logging

import grain
import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from xlpretrain.training.checkpoint import Checkpointer, abstract_with_shardings
from xlpretrain.training.step import TrainState


def test_a_replicated_state_saves_without_compiling_and_restores(tmp_path, caplog):
    replicated = NamedSharding(jax.make_mesh((8,), ("data",)), PartitionSpec())
    # Shapes no other test saves, so nothing compiled for them is cached in this process.
    params = {
        "kernel": np.arange(8 * 37, dtype=np.float32).reshape(8, 37),
        "bias": np.linspace(0.0, 1.0, 24, dtype=np.float32),
    }
    state = TrainState(
        step=np.int32(1), params=params, opt_state=(), rng=jax.random.key(3, impl="rbg")
    )
    state = jax.device_put(state, replicated)
    data = grain.MapDataset.range(4).to_iter_dataset().__iter__()
    checkpointer = Checkpointer(tmp_path / "checkpoints", keep=1, async_save=False)
    with jax.log_compiles(), caplog.at_level(logging.WARNING, logger="jax"):
        checkpointer.save(1, state, data)
    compiled = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    assert not compiled, compiled
    shardings = jax.tree.map(lambda _: replicated, state)
    restored = checkpointer.restore(1, abstract_with_shardings(state, shardings), data)
    for name, value in state.params.items():
        np.testing.assert_array_equal(restored.params[name], value)
    assert jax.random.key_impl(restored.rng) == jax.random.key_impl(state.rng)
    np.testing.assert_array_equal(jax.random.key_data(restored.rng), jax.random.key_data(state.rng))
