"""Errors raised for bad user input.

Every error names *where* the problem is (file, row, field) so an operator can fix the input
without reading a traceback. The CLI catches :class:`GpuplanError` and prints ``str(err)``.
"""

from __future__ import annotations

import unicodedata


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
        super().__init__(one_line(prefix + message))


def one_line(text: str) -> str:
    """``text`` with every control character (``\\n``, ``\\r``, ESC, ...) and line or
    paragraph separator (U+2028, U+2029) written as its ``repr`` escape: a refusal is one line
    even when it echoes a key or a value the user gave (a YAML key holding a newline forged a
    second ``error:`` line). Other characters, format ones included, stay as they are, so a
    refusal still quotes a path such as ``scénario \u202e.yaml`` exactly as the user typed it."""
    if text.isprintable():
        return text
    return "".join(repr(c)[1:-1] if unicodedata.category(c) in _ESCAPED else c for c in text)


_ESCAPED = frozenset({"Cc", "Zl", "Zp"})


class InfeasibleError(GpuplanError):
    """A request that no allocation can satisfy (e.g. more GPUs than the cluster has)."""


class PlanRefused(GpuplanError):
    """An executor will not carry out a plan: it breaks the cluster's capacity or asks for
    something the executor cannot do (e.g. fractional GPU shares on Slurm without sharding)."""
