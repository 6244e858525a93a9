"""Strict field readers for instance files: every bad value is one InputError naming the field.

JSON gives ``2.0`` for a float even when it is integral; counts and weights are integers by the
problem statement, so a float (or a bool, which Python treats as an int) is rejected here rather
than crashing a solver later.
"""

from __future__ import annotations

import math
from typing import Any

from gpuplan.models import InputError

__all__ = [
    "as_int",
    "as_list",
    "as_number",
    "as_object",
    "as_record",
    "as_str",
    "instance_object",
    "unique",
]


def as_object(x: Any, source: str, field: str) -> dict[str, Any]:
    if not isinstance(x, dict):
        raise InputError(
            f"must be a JSON object, got {type(x).__name__}", source=source, field=field
        )
    return x


def as_record(x: Any, source: str, field: str, known: tuple[str, ...]) -> dict[str, Any]:
    """A JSON object whose keys are all in ``known``: an unknown key (a typo such as
    ``"wieght"``) is refused naming it, not ignored (docs/solvers.md: unknown keys refused)."""
    obj = as_object(x, source, field)
    for key in obj:
        if key not in known:
            raise InputError(f"unknown field {key!r}", source=source, field=f"{field}.{key}")
    return obj


def instance_object(
    data: Any, source: str, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The instance file's top-level object: an unknown key, then a missing required one (in
    ``required`` order), is the error, naming that field."""
    obj = as_object(data, source, "instance")
    for key in obj:
        if key not in required and key not in optional:
            raise InputError(f"unknown field {key!r}", source=source, field=key)
    for key in required:
        if key not in obj:
            raise InputError("missing", source=source, field=key)
    return obj


def as_list(x: Any, source: str, field: str) -> list[Any]:
    if not isinstance(x, list):
        raise InputError(f"must be a JSON list, got {type(x).__name__}", source=source, field=field)
    return x


def as_str(x: Any, source: str, field: str) -> str:
    if not isinstance(x, str) or not x:
        raise InputError(f"must be a non-empty string, got {x!r}", source=source, field=field)
    return x


def as_int(
    x: Any, source: str, field: str, *, low: int | None = None, high: int | None = None
) -> int:
    """An integer (not a float such as 2.0, not a bool) in [``low``, ``high``]."""
    if isinstance(x, bool) or not isinstance(x, int):
        raise InputError(f"must be an integer, got {x!r}", source=source, field=field)
    if low is not None and x < low:
        raise InputError(f"must be >= {low}, got {x}", source=source, field=field)
    if high is not None and x > high:
        shown = str(x) if x.bit_length() < 128 else f"an integer of {x.bit_length()} bits"
        raise InputError(
            f"must be <= {high} (docs/solvers.md, bounds), got {shown}", source=source, field=field
        )
    return x


def as_number(x: Any, source: str, field: str, *, low: float | None = None) -> float:
    """A finite number at least ``low``."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise InputError(f"must be a finite number, got {x!r}", source=source, field=field)
    if low is not None and x < low:
        raise InputError(f"must be >= {low:g}, got {x!r}", source=source, field=field)
    return float(x)


def unique(ids: list[str], source: str, field: str) -> None:
    """Raise on the first repeated id."""
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            raise InputError(f"duplicate id {i!r}", source=source, field=field)
        seen.add(i)
