"""Build a policy from any shares stage + optional network-packing regulation + a placement.

Why: network packing (AFS/CoDDL §4.4) is orthogonal to *how many* GPUs a policy gives each job,
so every shares policy (AFS, Tiresias, FIFO, ...) can get a "packed" variant without knowing
about it. The regulation runs inside the shares stage, after the policy's own shares, so
``Decision.shares`` already holds the regulated counts and the placement places exactly those.

The registry is not touched here: policy modules (or the integrator) expose packed variants
through their ``POLICIES`` dicts, e.g.::

    POLICIES = {"afs-l-packed": (lambda: packed_variant(StagedPolicy("afs-l", afs_shares,
                                 best_fit_placement)), "AFS-L with network packing")}

Placement choices: ``reuse-greedy`` / ``reuse-exact`` (:mod:`.reuse`; they honour the
no-network-sharing rule exactly when a regulation is configured, because only regulated
shares are guaranteed to fit that way), ``ffd`` (Prop. 1 from scratch, migrates freely) and
``best-fit`` (the foundation's consolidating placement, which ignores network sharing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from gpuplan.models import ClusterView, SolverStats

from ..policy import PlacementStage, Shares, SharesStage, StagedPolicy
from .best_fit import best_fit_placement
from .network_packing import REGULATION_TIME_LIMIT_S, packed_placement, regulate_view
from .reuse import PLACEMENT_TIME_LIMIT_S, reuse_placement

__all__ = [
    "PLACEMENTS",
    "REGULATIONS",
    "PlacementName",
    "RegulationName",
    "make_placement",
    "packed_policy",
    "packed_variant",
    "regulated_shares",
]

RegulationName = Literal["greedy", "marginal", "exact"]
PlacementName = Literal["reuse-greedy", "reuse-exact", "ffd", "best-fit"]
REGULATIONS: tuple[str, ...] = ("greedy", "marginal", "exact")
PLACEMENTS: tuple[str, ...] = ("reuse-greedy", "reuse-exact", "ffd", "best-fit")


def regulated_shares(
    shares_stage: SharesStage,
    regulation: RegulationName = "greedy",
    *,
    backend: str = "cp-sat",
    time_limit_s: float = REGULATION_TIME_LIMIT_S,
) -> SharesStage:
    """``shares_stage`` followed by network-packing regulation of its output."""
    if regulation not in REGULATIONS:
        raise ValueError(f"regulation must be one of {REGULATIONS} or None, got {regulation!r}")

    def stage(view: ClusterView, stats: list[SolverStats]) -> Shares:
        return regulate_view(view, shares_stage(view, stats), stats, method=regulation,
                             backend=backend, time_limit_s=time_limit_s)

    stage.__name__ = f"regulated_{getattr(shares_stage, '__name__', 'shares')}"
    return stage


def make_placement(
    placement: PlacementName = "reuse-greedy",
    *,
    no_network_sharing: bool = True,
    backend: str = "cp-sat",
    time_limit_s: float = PLACEMENT_TIME_LIMIT_S,
) -> PlacementStage:
    """The placement stage called ``placement`` (see module docstring)."""
    if placement == "reuse-greedy":
        return reuse_placement("greedy", no_network_sharing=no_network_sharing)
    if placement == "reuse-exact":
        return reuse_placement("exact", no_network_sharing=no_network_sharing,
                               backend=backend, time_limit_s=time_limit_s)
    if placement == "ffd":
        return packed_placement
    if placement == "best-fit":
        return best_fit_placement
    raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")


def packed_policy(
    name: str,
    shares_stage: SharesStage,
    regulation: RegulationName | None = "greedy",
    placement: PlacementName = "reuse-greedy",
    *,
    backend: str = "cp-sat",
    regulation_time_limit_s: float = REGULATION_TIME_LIMIT_S,
    placement_time_limit_s: float = PLACEMENT_TIME_LIMIT_S,
    wakeup: Callable[[ClusterView], float | None] | None = None,
) -> StagedPolicy:
    """A :class:`StagedPolicy`: ``shares_stage`` -> regulation (unless ``None``) -> placement.

    With a regulation, the reuse placements enforce the no-network-sharing rule; without one
    they only maximise reuse (shares of arbitrary sizes need not fit that rule).
    """
    shares = shares_stage
    if regulation is not None:
        shares = regulated_shares(shares_stage, regulation, backend=backend,
                                  time_limit_s=regulation_time_limit_s)
    place = make_placement(placement, no_network_sharing=regulation is not None,
                           backend=backend, time_limit_s=placement_time_limit_s)
    return StagedPolicy(name, shares, place, wakeup)


def packed_variant(
    base: StagedPolicy,
    name: str | None = None,
    regulation: RegulationName | None = "greedy",
    placement: PlacementName = "reuse-greedy",
    *,
    backend: str = "cp-sat",
    regulation_time_limit_s: float = REGULATION_TIME_LIMIT_S,
    placement_time_limit_s: float = PLACEMENT_TIME_LIMIT_S,
) -> StagedPolicy:
    """``base``'s shares stage and wake-ups with packing and a reuse placement; the default
    name is ``"<base>-packed"``."""
    return packed_policy(name or f"{base.name}-packed", base.shares, regulation, placement,
                         backend=backend, regulation_time_limit_s=regulation_time_limit_s,
                         placement_time_limit_s=placement_time_limit_s, wakeup=base.wakeup)
