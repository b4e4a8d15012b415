"""Logical-axis rules as data: which mesh axes each logical axis name goes to. Kept apart from
`sharding` (which needs Flax and JAX's mesh) so that config validation can read them without
building anything."""

from __future__ import annotations

from collections.abc import Sequence

Rules = Sequence[tuple[str, str | tuple[str, ...] | None]]


def as_rules(rules: Sequence[Sequence]) -> Rules:
    """Rules as a config holds them (lists, from JSON) as the tuples Flax reads, a rule's axes
    too: a config read back from its record resolves to the same rules."""
    return tuple(
        tuple(tuple(part) if isinstance(part, list) else part for part in rule) for rule in rules
    )


def data_parallel_axes(rules: Rules) -> tuple[str, ...]:
    """The mesh axes the rules split the batch over (the first rule for `batch`, as Flax reads
    it for an array's leading axis): a step's rows divide over their devices."""
    axes = next((axes for name, axes in rules if name == "batch"), None)
    return (axes,) if isinstance(axes, str) else tuple(axes or ())
