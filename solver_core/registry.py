"""Policy names -> constructors. ``gpuplan`` CLI and library callers pick policies by name."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable

from gpuplan.models import InputError

from .placement.best_fit import best_fit_placement
from .policies.fifo import fifo_backfill, fifo_strict
from .policies.shortest_first import srsf_shares, srtf_shares
from .policy import Policy, StagedPolicy

PolicyFactory = Callable[..., Policy]
"""``factory()`` or, for policies that make random choices, ``factory(seed=...)``."""

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


def takes_seed(factory: PolicyFactory) -> bool:
    """True when the factory's policy makes random choices and so accepts ``seed=``."""
    try:
        return "seed" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


def make_policy(name: str, seed: int = 0) -> Policy:
    """A fresh policy object (policies may hold state, so never share one between runs).

    ``seed`` reaches every random choice the policy makes (AFS-P's coin, Themis' leftover
    order, Aryl's random reclaim), so a scenario's seed decides the whole run.
    """
    _discover()
    try:
        factory, _ = _REGISTRY[name]
    except KeyError:
        raise InputError(
            f"unknown policy {name!r}; choose one of {', '.join(sorted(_REGISTRY))}",
            field="policy",
        ) from None
    return factory(seed=seed) if takes_seed(factory) else factory()
