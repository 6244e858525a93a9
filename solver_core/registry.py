"""Policy names -> constructors. ``gpuplan`` CLI and library callers pick policies by name."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from gpuplan.models import InputError

from .placement.best_fit import best_fit_placement
from .policies.fifo import fifo_backfill, fifo_strict
from .policies.shortest_first import srsf_shares, srtf_shares
from .policy import Policy, StagedPolicy

PolicyFactory = Callable[[], Policy]

_REGISTRY: dict[str, tuple[PolicyFactory, str]] = {
    "fifo": (
        lambda: StagedPolicy("fifo", fifo_strict, best_fit_placement),
        "rigid gang FIFO, no backfill (head-of-line blocking)",
    ),
    "fifo-backfill": (
        lambda: StagedPolicy("fifo-backfill", fifo_backfill, best_fit_placement),
        "rigid gang FIFO; later jobs that fit start early",
    ),
    "srtf": (
        lambda: StagedPolicy("srtf", srtf_shares(), best_fit_placement),
        "preemptive shortest remaining time first (rigid)",
    ),
    "srsf": (
        lambda: StagedPolicy("srsf", srsf_shares(), best_fit_placement),
        "preemptive shortest remaining service (time x GPUs) first (rigid)",
    ),
}


_discovered = False


def _discover() -> None:
    """Import every module of ``gpuplan.solver_core.policies`` and register its ``POLICIES``.

    A policy module declares ``POLICIES = {name: (factory, description)}``; nothing else has to
    be edited to add a policy.
    """
    global _discovered
    if _discovered:
        return
    _discovered = True
    from . import policies

    for info in pkgutil.iter_modules(policies.__path__):
        module = importlib.import_module(f"{policies.__name__}.{info.name}")
        for name, (factory, description) in getattr(module, "POLICIES", {}).items():
            _REGISTRY.setdefault(name, (factory, description))


def register(name: str, factory: PolicyFactory, description: str) -> None:
    """Add a policy (later issues register AFS, Aryl, ... here)."""
    _REGISTRY[name] = (factory, description)


def policy_names() -> dict[str, str]:
    _discover()
    return {name: desc for name, (_, desc) in _REGISTRY.items()}


def make_policy(name: str) -> Policy:
    """A fresh policy object (policies may hold state, so never share one between runs)."""
    _discover()
    try:
        factory, _ = _REGISTRY[name]
    except KeyError:
        raise InputError(
            f"unknown policy {name!r}; choose one of {', '.join(sorted(_REGISTRY))}",
            field="policy",
        ) from None
    return factory()
