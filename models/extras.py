"""Optional extras: which ``pip install 'gpuplan[EXTRA]'`` provides which optional package, and
the one-line refusal when one is missing.

The core install (``pip install gpuplan``) holds the design's packages (OR-Tools, PuLP, networkx,
NumPy, SciPy, pydantic) and what every command needs (PyYAML, rich). A package that serves only
one command or one module is an extra, imported only where it is used, so a core install runs
every core command (``simulate``, ``compare``, ``plan``, ``solve``, ``policies``,
``scenarios``) and a command that needs a missing extra stops before doing any work with one
line naming the extra to install (exit 2 in the CLI: :class:`MissingExtra` is a
:class:`~gpuplan.models.errors.GpuplanError`). The names here must match
``[project.optional-dependencies]`` in ``pyproject.toml`` (``tests/cli/test_extras.py`` checks).

This module lives in ``models`` because every layer raises the error (the SSH executor, the
interference predictor in ``scenarios``, the CLI); it imports nothing optional itself.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import GpuplanError

__all__ = ["EXTRAS", "MissingExtra", "require_extra"]

EXTRAS: dict[str, tuple[str, ...]] = {
    "slurm": ("prometheus_client",),  # the controller's --http metrics (Slurm: its commands)
    "ssh": ("asyncssh",),  # the SSH executor (executors/ssh)
    "sweep": ("distributed", "dask_jobqueue", "matplotlib"),  # Dask workers + report.html
    "ml": ("sklearn",),  # OJPP's learned interference predictor (scenarios/ojpp_predictor.py)
    "plots": ("matplotlib",),  # --out's PNG plots (simulate, compare, solve)
    "gpu": ("pynvml",),  # NVML inventory/health (executors/nvml); optional: none = declared
}
"""Extra name -> the import names it provides (``all`` is every one of them)."""


class MissingExtra(GpuplanError, ImportError):
    """An optional package is not installed. Its text is one line, ``WHAT: needs the 'EXTRA'
    extra: pip install 'gpuplan[EXTRA]'``; it is also an :class:`ImportError`, so library code
    that already guards an optional import with ``except ImportError`` keeps working."""

    def __init__(self, what: str, extra: str, module: str) -> None:
        super().__init__(f"{what}: needs the '{extra}' extra: pip install 'gpuplan[{extra}]'")
        self.extra = extra
        self.name = module  # ImportError's attribute: the module that failed to import


def require_extra(extra: str, what: str, *modules: str) -> list[ModuleType]:
    """Import ``modules`` (default: every package of ``extra``) and return them, or raise
    :class:`MissingExtra` naming ``what`` (the command or module that needs them) and
    ``extra``. Callers call this before any work, so a missing extra never costs a
    simulation first.

    A real import, not a ``find_spec`` look-up: a package that is present but cannot be
    imported (a broken wheel, a missing shared library) counts as missing too."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}")  # a gpuplan bug, not bad input
    loaded = []
    for name in modules or EXTRAS[extra]:
        try:
            loaded.append(importlib.import_module(name))
        except ImportError as err:
            raise MissingExtra(what, extra, name) from err
    return loaded
