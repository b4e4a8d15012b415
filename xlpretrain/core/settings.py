"""A config section declared as typed settings: a frozen dataclass whose fields are the section's
keys with their defaults, and the allowed values of each. An objective declares its own section
(`cfg.<name>.*`), a backbone the keys of `model.*` its layers alone read; the config's defaults
and key checks are generated from them, and the plan hands the typed values on, to be read as
fields rather than looked up by key."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

# config key -> (predicate on its value, description of the allowed values)
Ranges = Mapping[str, tuple[Callable[[Any], bool], str]]


@dataclasses.dataclass(frozen=True)
class Section:
    """Keys of the config section `name` (`name.<field>`): `values` is a frozen dataclass whose
    fields are the keys with their defaults, `ranges` the allowed values by key. Declarations
    may share a section (the `xlm_e` objectives, the XLM-R and BERT backbones)."""

    name: str
    values: Callable[..., Any]  # a frozen dataclass (or a partial of one, other defaults)
    ranges: Ranges = dataclasses.field(default_factory=dict)

    @property
    def defaults(self) -> dict[str, Any]:
        return dataclasses.asdict(self.values())

    def read(self, section: Mapping[str, Any]) -> Any:
        """The typed values of this section's keys in a config's `name` section (which may hold
        other keys too)."""
        return self.values(**{key: section[key] for key in self.defaults})

    def qualified_ranges(self) -> Ranges:
        """`ranges` by the keys' full names (`name.key`), as a config's key checks take them."""
        return {f"{self.name}.{key}": allowed for key, allowed in self.ranges.items()}
