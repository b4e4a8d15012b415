"""Device mesh and sharding by name.

Parameters carry logical axis names (`embed`, `mlp`, `heads`, …); configurable rules map them to
the mesh axes `data`, `fsdp` and `tensor`. The batch is split over (`data`, `fsdp`), so FSDP
shards parameters *and* data over the same devices, as in MaxText.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")

Rules = Sequence[tuple[str, str | tuple[str, ...] | None]]


def mesh_shape(data: int, fsdp: int, tensor: int, num_devices: int) -> tuple[int, int, int]:
    """Resolves at most one `-1` axis to the devices the others leave; checks the product."""
    sizes = [data, fsdp, tensor]
    if sizes.count(-1) > 1:
        raise ValueError(
            f"mesh: at most one axis may be -1, got data={data} fsdp={fsdp} tensor={tensor}"
        )
    known = math.prod(s for s in sizes if s != -1)
    if -1 in sizes:
        if num_devices % known:
            raise ValueError(
                f"mesh: {num_devices} devices cannot be split into axes of size "
                f"{known} (data={data} fsdp={fsdp} tensor={tensor})"
            )
        sizes[sizes.index(-1)] = num_devices // known
    if math.prod(sizes) != num_devices:
        raise ValueError(
            f"mesh: data×fsdp×tensor = {math.prod(sizes)} but there are "
            f"{num_devices} devices (set one axis to -1 to take the rest)"
        )
    return tuple(sizes)


def make_mesh(data: int, fsdp: int, tensor: int, devices: Sequence[jax.Device] | None = None):
    devices = list(jax.devices() if devices is None else devices)
    shape = mesh_shape(data, fsdp, tensor, len(devices))
    return Mesh(np.asarray(devices).reshape(shape), MESH_AXES)


def under_mesh(mesh: Mesh, fn: Callable) -> Callable:
    """``fn`` traced with ``mesh`` as the abstract mesh, so the per-device kernels inside it
    (fused attention) can ``jax.shard_map`` over the mesh's axes by name."""

    @functools.wraps(fn)
    def traced(*args, **kwargs):
        with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
            return fn(*args, **kwargs)

    return traced


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (batch) axis over data × fsdp; the rest replicated."""
    return NamedSharding(mesh, PartitionSpec(BATCH_AXES))


def _fit(spec: PartitionSpec, shape: tuple[int, ...], mesh: Mesh) -> PartitionSpec:
    """Drops mesh axes that do not divide a dimension, so odd sizes (a 8002-piece vocabulary)
    replicate that dimension instead of failing."""
    fitted = []
    for dim, axes in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec)), strict=True):
        names = (axes,) if isinstance(axes, str) else tuple(axes or ())
        size = math.prod(mesh.shape[n] for n in names)
        fitted.append(axes if names and dim % size == 0 else None)
    return PartitionSpec(*fitted)


def logical_shardings(boxed_tree, mesh: Mesh, rules: Rules):
    """NamedShardings for a tree of (abstract) values boxed with logical axis metadata."""
    specs = nn.get_partition_spec(boxed_tree)
    mesh_specs = nn.logical_to_mesh(specs, rules)
    values = nn.unbox(boxed_tree)
    return jax.tree.map(
        lambda spec, value: NamedSharding(mesh, _fit(spec, value.shape, mesh)),
        mesh_specs,
        values,
        is_leaf=lambda x: isinstance(x, PartitionSpec),
    )


def global_batch(local: dict, sharding: NamedSharding) -> dict:
    """Assembles each process's rows into global arrays without gathering them anywhere."""
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, x), local)
