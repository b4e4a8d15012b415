"""Predicting with a run's parameters: a module's outputs for every row of some encoded examples,
in batches of the training batch's global rows, sharded as the step is, gathered on every
process. Fine-tuning's evaluations (accuracy, a development set's metric) and a task's test
predictions read it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec

from xlpretrain.parallel.sharding import global_batch, under_mesh
from xlpretrain.training.step import Training


@dataclasses.dataclass
class Predictor:
    """`outputs` for every row of encoded examples (anything with `len` and `batch(indices)`,
    index -1 a padding row), rows first, padding rows dropped; each process gets every row's."""

    outputs: Any  # jitted (params, global batch) → outputs, rows first
    batch_size: int
    batch_sharding: NamedSharding

    def __call__(self, params, rows) -> Any:
        per_process = self.batch_size // jax.process_count()
        pieces = []
        for start in range(0, len(rows), self.batch_size):
            indices = np.arange(start, min(start + self.batch_size, len(rows)))
            indices = np.pad(indices, (0, self.batch_size - len(indices)), constant_values=-1)
            local = indices[jax.process_index() * per_process :][:per_process]
            batch = global_batch(rows.batch(local), self.batch_sharding)
            gathered = multihost_utils.process_allgather(self.outputs(params, batch), tiled=True)
            pieces.append(jax.tree.map(np.asarray, gathered))
        return jax.tree.map(lambda *parts: np.concatenate(parts)[: len(rows)], *pieces)


def make_predictor(
    outputs: Callable[[Any, dict], Any], training: Training, rules, batch_size: int
) -> Predictor:
    """`outputs(params, batch)` jitted under the run's mesh and logical `rules`, its params and
    batches sharded as the step's, its result replicated."""
    jitted = jax.jit(
        under_mesh(training.mesh, rules, outputs),
        in_shardings=(training.state_shardings.params, training.batch_sharding),
        out_shardings=NamedSharding(training.mesh, PartitionSpec()),
    )
    return Predictor(jitted, batch_size, training.batch_sharding)
