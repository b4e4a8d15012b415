"""Orbax checkpoints of the train state and the data-iterator state, saved together.

Restoring takes the *abstract* state of the current run (shapes, dtypes and shardings of the
current mesh), so a checkpoint written on one mesh restores onto another.
"""

from __future__ import annotations

import os

import grain
import jax
import orbax.checkpoint as ocp


class CheckpointError(RuntimeError):
    """A checkpoint exists but cannot be restored."""


class Checkpointer:
    """`workdir/checkpoints/<step>/{state,data}` with keep-N and (optionally) async saves."""

    def __init__(self, directory: str | os.PathLike, *, keep: int, async_save: bool = True):
        self.directory = os.path.abspath(os.fspath(directory))
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(
                max_to_keep=keep, enable_async_checkpointing=async_save, create=True
            ),
            item_names=("state", "data"),
        )

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state, data_iterator: grain.DatasetIterator) -> None:
        self.manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state),
                data=grain.checkpoint.CheckpointSave(data_iterator),
            ),
            force=True,
        )

    def restore(self, step: int, abstract_state, data_iterator: grain.DatasetIterator):
        """Returns the state, placed by `abstract_state`'s shardings; restores the iterator."""
        path = os.path.join(self.directory, str(step))
        try:
            restored = self.manager.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(abstract_state),
                    data=grain.checkpoint.CheckpointRestore(data_iterator),
                ),
            )
        except Exception as error:  # Orbax raises many types for damaged files.
            raise CheckpointError(
                f"cannot restore the checkpoint at {path}: {type(error).__name__}: {error}. "
                "It may be incomplete or corrupt; move it away to resume from an earlier one."
            ) from error
        return restored.state

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.close()


def abstract_with_shardings(tree, shardings):
    """ShapeDtypeStructs carrying the target shardings, the form Orbax restores into."""
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings
    )
