"""A fine-tuning run's training batches, whatever the kind of task: any encoded rows
(`tasks.declaration.Rows`: sentence pairs, tag rows, QA windows) drawn epoch by epoch in an
order fixed by the seed, so that a resumed run sees the batches an unbroken one would."""

from __future__ import annotations

import dataclasses

import numpy as np

from xlpretrain.tasks.declaration import Rows

TASK = "task"  # the batches' key: the fine-tuning step's one objective


@dataclasses.dataclass
class RowBatches:
    """`step → {TASK: this process's rows of the step's batch}`, for `pipeline.make_dataset`.

    Global row r of step s is row `permutation_e[(s · batch_size + r) mod n]` with
    e = (s · batch_size + r) div n: every row once per epoch, in an order drawn from
    (seed, epoch) alone."""

    rows: Rows
    batch_size: int  # global rows per step
    seed: int
    process_index: int = 0
    process_count: int = 1
    _permutations: dict[int, np.ndarray] = dataclasses.field(default_factory=dict, repr=False)

    def __call__(self, step: int) -> dict[str, dict[str, np.ndarray]]:
        rows = self.batch_size // self.process_count
        first = step * self.batch_size + self.process_index * rows
        epochs, offsets = np.divmod(np.arange(first, first + rows), len(self.rows))
        indices = np.empty(rows, np.int64)
        for epoch in np.unique(epochs).tolist():
            chosen = epochs == epoch
            indices[chosen] = self._permutation(epoch)[offsets[chosen]]
        return {TASK: self.rows.batch(indices)}

    def _permutation(self, epoch: int) -> np.ndarray:
        """Epoch `epoch`'s order, kept for the steps that follow (a step spans at most two
        epochs' orders, and steps arrive in order)."""
        if epoch not in self._permutations:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.rows))
            self._permutations = {e: p for e, p in self._permutations.items() if e >= epoch - 1}
            self._permutations[epoch] = order
        return self._permutations[epoch]
