"""Orbax checkpoints of the train state and the data-iterator state, saved together.

Restoring takes the *abstract* state of the current run (shapes, dtypes and shardings of the
current mesh), so a checkpoint written on one mesh restores onto another. Orbax writes each
step into a temporary folder and renames it when complete, so a process killed mid-save leaves
no step that looks finished; a finished step that cannot be read (damaged files) is moved to
``checkpoints/unreadable/`` and the run falls back to the newest one that can.
"""

from __future__ import annotations

import functools
import logging
import os
import time

import grain
import jax
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from xlpretrain.training.optim import parameter_path

log = logging.getLogger("xlpretrain")
UNREADABLE = "unreadable"  # where damaged steps go, inside the checkpoint folder


class CheckpointError(RuntimeError):
    """A checkpoint exists but cannot be restored."""


class CheckpointMismatchError(CheckpointError):
    """A readable checkpoint of another model: falling back to an older one would not help."""


@functools.cache
def save_replicated_arrays_from_one_replica_on_cpu() -> None:
    """On CPU, Orbax writes a replicated array from one replica, as it already does on GPUs.

    Its default elsewhere (replica-parallel) splits such an array among its replicas, each
    copying a slice to the host: on CPU the devices are the host's own memory, so nothing moves
    faster, and each replica's slice of each shape is compiled first (a tiny model's first save
    on 8 CPU devices took 4.4 s instead of 0.07 s). TPUs keep Orbax's default. Orbax keeps the
    metadata store its default handler writes (typed PRNG keys need it) in a module it does not
    export; an Orbax without it keeps its default here.
    """
    if jax.default_backend() != "cpu":
        return
    try:
        from orbax.checkpoint._src.metadata.array_metadata_store import Store

        handler = ocp.type_handlers.ArrayHandler(
            use_replica_parallel=False, array_metadata_store=Store()
        )
    except (ImportError, TypeError):
        return
    absl_log = logging.getLogger("absl")
    level = absl_log.level
    absl_log.setLevel(logging.ERROR)  # Orbax warns of any override
    try:
        ocp.type_handlers.register_type_handler(jax.Array, handler, override=True)
    finally:
        absl_log.setLevel(level)


class Checkpointer:
    """`workdir/checkpoints/<step>/{state,data}` with keep-N and (optionally) async saves."""

    def __init__(self, directory: str | os.PathLike, *, keep: int, async_save: bool = True):
        save_replicated_arrays_from_one_replica_on_cpu()
        self.directory = os.path.abspath(os.fspath(directory))
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(
                max_to_keep=keep, enable_async_checkpointing=async_save, create=True
            ),
            # Handlers up front, so a fresh process can read a step's metadata before restoring.
            item_handlers={
                "state": ocp.StandardCheckpointHandler(),
                "data": grain.checkpoint.CheckpointHandler(),
            },
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
        _check_shapes(self._saved_shapes(step), abstract_state, path)
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
                "It may be incomplete or corrupt."
            ) from error
        return restored.state

    def restore_latest(
        self, abstract_state, data_iterator: grain.DatasetIterator, *, allow_fresh_start: bool
    ) -> tuple[object, int] | None:
        """(state, step) from the newest checkpoint that restores, newest first.

        An unreadable step is logged with the reason and moved to ``unreadable/`` (kept for a
        post-mortem, and out of the way of the step's next save). When every step fails, the
        run stops with a ``CheckpointError`` unless ``allow_fresh_start`` (then: ``None``, and
        the caller must rebuild its data iterator, which a failed restore may have touched).
        A checkpoint of another model (``CheckpointMismatchError``) is never skipped.
        """
        steps = sorted(self.manager.all_steps(), reverse=True)
        failures = []
        for step in steps:
            try:
                return self.restore(step, abstract_state, data_iterator), step
            except CheckpointMismatchError:
                raise
            except CheckpointError as error:
                log.error("%s; falling back to an earlier checkpoint", error)
                failures.append(f"step {step}: {error.__cause__ or error}")
                self._set_aside(step)
        if failures and not allow_fresh_start:
            raise CheckpointError(
                f"none of the {len(failures)} checkpoint(s) in {self.directory} can be restored "
                f"(moved to {os.path.join(self.directory, UNREADABLE)}): "
                + "; ".join(failures)
                + ". Set train.allow_fresh_start=True to start again from step 0."
            )
        if failures:
            log.warning("no checkpoint restores: starting from step 0 (train.allow_fresh_start)")
        return None

    def _saved_shapes(self, step: int) -> dict[str, tuple[int, ...]] | None:
        """Parameter path -> shape in the step's metadata; None when that cannot be read
        (the restore then says what is wrong)."""
        try:
            metadata = self.manager.item_metadata(step)["state"]
            leaves = jax.tree_util.tree_leaves_with_path(
                metadata, is_leaf=lambda x: hasattr(x, "shape")
            )
        except Exception:  # noqa: BLE001 - a damaged metadata file is the restore's to report
            return None
        return {parameter_path(path): tuple(leaf.shape) for path, leaf in leaves} or None

    def _set_aside(self, step: int) -> None:
        """Moves a damaged step out of Orbax's sight, keeping its files."""
        if jax.process_index() == 0:
            aside = os.path.join(self.directory, UNREADABLE)
            os.makedirs(aside, exist_ok=True)
            target = os.path.join(aside, f"{step}-{time.strftime('%Y%m%d-%H%M%S')}")
            os.rename(os.path.join(self.directory, str(step)), target)
            log.warning("moved the unreadable checkpoint of step %d to %s", step, target)
        multihost_utils.sync_global_devices(f"checkpoint {step} set aside")
        self.manager.reload()

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.close()


def _check_shapes(saved: dict | None, abstract_state, path: str) -> None:
    """A checkpoint of another model config fails naming the first parameter that differs
    (parameters only: optimizer states are stored in Orbax's own tree layout)."""
    if saved is None:
        return
    saved = {k: v for k, v in saved.items() if k.startswith("params/")}
    wanted = {
        f"params/{parameter_path(key_path)}": tuple(leaf.shape)
        for key_path, leaf in jax.tree_util.tree_leaves_with_path(abstract_state.params)
    }
    advice = "; use the config it was written with, or a new workdir"
    for key in sorted(wanted.keys() & saved.keys()):
        if saved[key] != wanted[key]:
            raise CheckpointMismatchError(
                f"the checkpoint at {path} is of another model: {key} has shape {saved[key]} "
                f"there but {wanted[key]} in this config{advice}"
            )
    for names, what in (
        (sorted(wanted.keys() - saved.keys()), "it has no {}{}, which this config needs"),
        (sorted(saved.keys() - wanted.keys()), "it has {}{}, which this config does not"),
    ):
        if names:
            more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
            raise CheckpointMismatchError(
                f"the checkpoint at {path} is of another model: {what.format(names[0], more)}"
                + advice
            )


def abstract_with_shardings(tree, shardings):
    """ShapeDtypeStructs carrying the target shardings, the form Orbax restores into."""
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings
    )
