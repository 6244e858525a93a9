"""Build a policy from any shares stage + optional network-packing regulation + a placement.

Why: network packing (AFS/CoDDL §4.4) is orthogonal to *how many* GPUs a policy gives each job,
so every shares policy (AFS, Tiresias, FIFO, ...) can get a "packed" variant without knowing
about it. The regulation runs inside the shares stage, after the policy's own shares, so
``Decision.shares`` already holds the regulated counts and the placement places exactly those.

The registry is not touched here: the ``network-packing`` and ``reuse`` wrappers
(:mod:`gpuplan.solver_core.wrappers`) build on these functions, and
``solver_core/policies/__init__.py`` declares ``<base>-packed`` / ``<base>-reuse`` as presets of
them.

Solver budgets: the exact regulation and the exact reuse placement take
:class:`~gpuplan.solver_core.limits.SolveLimits`; ``None`` (the default) is each stage's
deterministic budget, so a policy's decisions depend on its inputs and seed alone.

Placement choices: ``reuse-greedy`` / ``reuse-exact`` (:mod:`.reuse`; they honour the
no-network-sharing rule exactly when a regulation is configured, because only regulated
shares are guaranteed to fit that way), ``ffd`` (Prop. 1 from scratch, migrates freely) and
``best-fit`` (the foundation's consolidating placement, which ignores network sharing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Literal

from gpuplan.models import ClusterView, SolverStats

from ..limits import SolveLimits
from ..policy import (
    Allocation,
    AllocationStage,
    PlacementStage,
    StagedPolicy,
    demand_counts,
    with_counts,
)
from .best_fit import best_fit_placement
from .network_packing import packed_placement, regulate_view
from .reuse import reuse_placement

__all__ = [
    "PLACEMENTS",
    "REGULATIONS",
    "PlacementName",
    "RegulationName",
    "make_placement",
    "packed_policy",
    "packed_variant",
    "regulated_allocation",
]

RegulationName = Literal["greedy", "marginal", "exact"]
PlacementName = Literal["reuse-greedy", "reuse-exact", "ffd", "best-fit"]
REGULATIONS: tuple[str, ...] = ("greedy", "marginal", "exact")
PLACEMENTS: tuple[str, ...] = ("reuse-greedy", "reuse-exact", "ffd", "best-fit")


def regulated_allocation(
    allocation_stage: AllocationStage,
    regulation: RegulationName = "greedy",
    *,
    backend: str = "cp-sat",
    limits: SolveLimits | None = None,
) -> AllocationStage:
    """``allocation_stage`` followed by network-packing regulation of its output."""
    if regulation not in REGULATIONS:
        raise ValueError(f"regulation must be one of {REGULATIONS} or None, got {regulation!r}")

    def stage(view: ClusterView, stats: list[SolverStats]) -> Allocation:
        allocation = allocation_stage(view, stats)
        counts = regulate_view(
            view,
            demand_counts(allocation),
            stats,
            method=regulation,
            backend=backend,
            limits=limits,
        )
        return with_counts(allocation, counts)

    stage.__name__ = f"regulated_{getattr(allocation_stage, '__name__', 'allocation')}"
    return stage


def make_placement(
    placement: PlacementName = "reuse-greedy",
    *,
    no_network_sharing: bool = True,
    backend: str = "cp-sat",
    limits: SolveLimits | None = None,
) -> PlacementStage:
    """The placement stage called ``placement`` (see module docstring)."""
    if placement == "reuse-greedy":
        return reuse_placement("greedy", no_network_sharing=no_network_sharing)
    if placement == "reuse-exact":
        return reuse_placement(
            "exact", no_network_sharing=no_network_sharing, backend=backend, limits=limits
        )
    if placement == "ffd":
        return packed_placement
    if placement == "best-fit":
        return best_fit_placement
    raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")


def packed_policy(
    name: str,
    allocation_stage: AllocationStage,
    regulation: RegulationName | None = "greedy",
    placement: PlacementName = "reuse-greedy",
    *,
    backend: str = "cp-sat",
    regulation_limits: SolveLimits | None = None,
    placement_limits: SolveLimits | None = None,
    wakeup: Callable[[ClusterView], float | None] | None = None,
) -> StagedPolicy:
    """A :class:`StagedPolicy`: ``allocation_stage`` -> regulation (unless ``None``) -> placement.

    With a regulation, the reuse placements enforce the no-network-sharing rule; without one
    they only maximise reuse (shares of arbitrary sizes need not fit that rule).
    """
    shares = allocation_stage
    if regulation is not None:
        shares = regulated_allocation(
            allocation_stage, regulation, backend=backend, limits=regulation_limits
        )
    place = make_placement(
        placement,
        no_network_sharing=regulation is not None,
        backend=backend,
        limits=placement_limits,
    )
    return StagedPolicy(name, shares, place, wakeup, no_network_sharing=regulation is not None)


def packed_variant(
    base: StagedPolicy,
    name: str | None = None,
    regulation: RegulationName | None = "greedy",
    placement: PlacementName = "reuse-greedy",
    *,
    backend: str = "cp-sat",
    regulation_limits: SolveLimits | None = None,
    placement_limits: SolveLimits | None = None,
) -> StagedPolicy:
    """``base``'s shares stage and wake-ups with packing and a reuse placement; the default
    name is ``"<base>-packed"``."""
    packed = packed_policy(
        name or f"{base.name}-packed",
        base.allocation,
        regulation,
        placement,
        backend=backend,
        regulation_limits=regulation_limits,
        placement_limits=placement_limits,
        wakeup=base.wakeup,
    )
    return replace(packed, admission=base.admission, reclaimer=base.reclaimer)
