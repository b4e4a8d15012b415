"""Device mesh and sharding by name.

Parameters and activations carry logical axis names (`batch`, `length`, `embed`, `heads`, `kv`,
`mlp`, `vocab`, …); the run's rules (`mesh.rules`) map them to the mesh axes `data`, `fsdp` and
`tensor`. By default the batch is split over (`data`, `fsdp`), so FSDP shards parameters *and*
data over the same devices, as in MaxText. Model code names logical axes only: under the train
step's mesh and rules (`under_mesh`) `constrain` places activations and `logical_spec` gives the
kernels' and the loss's `shard_map` specs, so moving an axis is a change of rules alone.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import math
from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from xlpretrain.parallel.rules import Rules

MESH_AXES = ("data", "fsdp", "tensor")
log = logging.getLogger("xlpretrain")

# The rules of the step being traced (`under_mesh`). Flax's own rules context is left unset:
# under it Flax constrains parameters inside its initialisers, which breaks `DenseGeneral`.
_RULES: contextvars.ContextVar[Rules] = contextvars.ContextVar("logical_axis_rules", default=())


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


def under_mesh(mesh: Mesh, rules: Rules, fn: Callable) -> Callable:
    """``fn`` traced with ``mesh`` as the abstract mesh and ``rules`` as the logical axis rules,
    so the model's activations and per-device kernels are placed by name (``constrain``,
    ``logical_spec``)."""

    @functools.wraps(fn)
    def traced(*args, **kwargs):
        token = _RULES.set(tuple(rules))
        try:
            with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
                return fn(*args, **kwargs)
        finally:
            _RULES.reset(token)

    return traced


def batch_sharding(mesh: Mesh, rules: Rules) -> NamedSharding:
    """Leading (batch) axis where the rules put ``batch``; the rest replicated."""
    return NamedSharding(mesh, PartitionSpec(nn.logical_to_mesh_axes(("batch",), rules)[0]))


def _names(axes) -> tuple[str, ...]:
    return (axes,) if isinstance(axes, str) else tuple(axes or ())


def _fit(spec: PartitionSpec, shape: tuple[int, ...], mesh) -> PartitionSpec:
    """Drops mesh axes that do not divide a dimension (that dimension replicates)."""
    fitted = []
    for dim, axes in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec)), strict=True):
        size = math.prod(mesh.shape[n] for n in _names(axes))
        fitted.append(axes if _names(axes) and dim % size == 0 else None)
    return PartitionSpec(*fitted)


def logical_spec(logical: Sequence[str | None], shape: Sequence[int] | None = None):
    """The mesh ``PartitionSpec`` of ``logical`` axis names under the current rules and abstract
    mesh (``under_mesh``), or None outside them. With ``shape``, mesh axes that do not divide
    their dimension are dropped."""
    mesh, rules = jax.sharding.get_abstract_mesh(), _RULES.get()
    if mesh.empty or not rules:
        return None
    spec = nn.logical_to_mesh_axes(tuple(logical), rules)
    return spec if shape is None else _fit(spec, tuple(shape), mesh)


def mesh_axes(logical: str) -> tuple[str, ...]:
    """The mesh axes the current rules put logical axis ``logical`` on (none outside a mesh)."""
    spec = logical_spec((logical,))
    return () if spec is None else _names(spec[0])


def axes_size(axes: Sequence[str]) -> int:
    """Devices along ``axes`` of the current abstract mesh."""
    mesh = jax.sharding.get_abstract_mesh()
    return math.prod(mesh.shape[a] for a in axes)


def constrain(x: jax.Array, logical: Sequence[str | None]) -> jax.Array:
    """``x`` placed as the rules map its ``logical`` axes (dimensions they do not divide stay
    whole); unchanged outside a mesh."""
    spec = logical_spec(logical, x.shape)
    return x if spec is None else jax.lax.with_sharding_constraint(x, spec)


def logical_shardings(boxed_tree, mesh: Mesh, rules: Rules):
    """NamedShardings for a tree of (abstract) values boxed with logical axis metadata. A
    dimension the rules shard but the mesh axes do not divide is replicated, and named in the
    log with what it costs."""
    specs = nn.get_partition_spec(boxed_tree)
    mesh_specs = nn.logical_to_mesh(specs, rules)
    values = nn.unbox(boxed_tree)

    def place(path, spec, value):
        fitted = _fit(spec, value.shape, mesh)
        name = jax.tree_util.keystr(path, simple=True, separator="/")
        _log_replicated(name, spec, fitted, value, mesh)
        return NamedSharding(mesh, fitted)

    return jax.tree_util.tree_map_with_path(
        place, mesh_specs, values, is_leaf=lambda x: isinstance(x, PartitionSpec)
    )


def _log_replicated(
    name: str, wanted: PartitionSpec, fitted: PartitionSpec, value, mesh: Mesh
) -> None:
    size = math.prod(value.shape) * np.dtype(value.dtype).itemsize
    for dim, (want, got) in enumerate(zip(wanted, fitted, strict=False)):
        if got is None and math.prod(mesh.shape[a] for a in _names(want)) > 1:
            log.warning(
                "parameter %s %s (%.1f MB): mesh axes %s do not divide its dimension %d (%d); "
                "it is replicated on them",
                name, tuple(value.shape), size / 1e6, want, dim, value.shape[dim],
            )  # fmt: skip


def global_batch(local: dict, sharding: NamedSharding) -> dict:
    """Assembles each process's rows into global arrays without gathering them anywhere."""
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, x), local)
