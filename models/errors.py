"""Errors raised for bad user input.

Every error names *where* the problem is (file, row, field) so an operator can fix the input
without reading a traceback. The CLI catches :class:`GpuplanError` and prints ``str(err)``.
"""

from __future__ import annotations


class GpuplanError(Exception):
    """Base class for every error gpuplan reports to a user."""


class InputError(GpuplanError):
    """Malformed or impossible input, located by source, row and field."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        row: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.source = source
        self.row = row
        self.field = field
        where = []
        if source:
            where.append(str(source))
        if row is not None:
            where.append(f"row {row}")
        if field:
            where.append(f"field '{field}'")
        prefix = (", ".join(where) + ": ") if where else ""
        super().__init__(prefix + message)


class InfeasibleError(GpuplanError):
    """A request that no allocation can satisfy (e.g. more GPUs than the cluster has)."""


class PlanRefused(GpuplanError):
    """An executor will not carry out a plan: it breaks the cluster's capacity or asks for
    something the executor cannot do (e.g. fractional GPU shares on Slurm without sharding)."""
