"""Declarations: what a folder of policies holds, readable without importing its modules.

Each folder of policies and wrappers declares its contents in its ``__init__.py`` as
``DECLARED = (policy(...), preset(...), wrapper(...), ...)``; the registry
(:mod:`.registry`) reads these tables to list names (``gpuplan policies``), resolve
configurations and suggest close names, and imports a module only when one of its names is
built. That keeps listing and validation fast: a policy's module may load OR-Tools, SciPy or
a whole paper's solver stack.

Each fact has one home. A declaration holds the name, the one-line summary and, for a base
policy or wrapper, the module whose ``POLICIES``/``WRAPPERS`` hold its code and parameter
model (:class:`~.registry.PolicyDef`, :class:`~.registry.WrapperDef`); a preset is data
only (a base, wrappers and values, the same as a scenario's ``policies:`` entry), so it lives
in the table alone. The registry refuses a name declared twice and a module that registers a
name its table does not declare for it (``tests/policies/test_registry.py`` imports every module and
checks both directions).

This module imports nothing of gpuplan's and no third-party package: a table costs nothing
to read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

__all__ = ["Declared", "Kind", "policy", "preset", "wrapper"]

Kind = Literal["policy", "preset", "wrapper"]


@dataclass(frozen=True)
class Declared:
    """One declared name.

    ``module`` is where the name comes from: for a base policy or a wrapper, the module that
    registers its code (relative to the table's package, ``".fifo"``, until the registry
    resolves it); for a preset, the table that declares it (filled in by the registry)."""

    kind: Kind
    name: str
    summary: str
    module: str = ""
    base: str | None = None
    wrappers: tuple[str, ...] = ()
    values: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not self.name or not self.summary:
            raise ValueError(f"declaration {self.name!r}: needs a name and a summary")
        if (self.kind == "preset") != (self.base is not None):
            raise ValueError(
                f"declaration {self.name!r}: a preset, and only a preset, names a base"
            )
        if self.kind != "preset" and not self.module:
            raise ValueError(f"declaration {self.name!r}: name the module with its code")


def policy(name: str, module: str, summary: str) -> Declared:
    """A base policy whose ``PolicyDef`` is in ``module``'s ``POLICIES``."""
    return Declared("policy", name, summary, module)


def preset(
    name: str,
    summary: str,
    *,
    base: str,
    wrappers: Sequence[str] = (),
    values: Mapping[str, Any] | None = None,
) -> Declared:
    """A registered configuration: ``base`` (a policy or another preset), then ``wrappers``
    in order, with parameter ``values`` (``afs-l-packed`` is ``afs-l`` + network-packing)."""
    return Declared(
        "preset",
        name,
        summary,
        base=base,
        wrappers=tuple(wrappers),
        values=MappingProxyType(dict(values or {})),
    )


def wrapper(name: str, module: str, summary: str) -> Declared:
    """A wrapper whose ``WrapperDef`` is in ``module``'s ``WRAPPERS``."""
    return Declared("wrapper", name, summary, module)
