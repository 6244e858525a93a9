"""Policies as small compositions of stages: admission -> shares -> placement.

A *shares* stage decides how many GPUs each job gets (``{job_id: count}``; jobs left out get 0).
A *placement* stage turns counts into concrete GPUs (``{job_id: JobAllocation}``); it may place
fewer jobs than asked when the free GPUs are too fragmented, and those jobs simply stay pending.
Both stages read a :class:`~gpuplan.models.ClusterView` and append a
:class:`~gpuplan.models.SolverStats` for every solver call they make. This is the Blox split
(admission -> shares -> placement -> launch); launch is the executor's job.

Policies may keep state between calls (AFS-P counters, Tiresias queues); everything they need
about jobs comes from the view, so one policy object drives simulated and real clusters alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from gpuplan.models import ClusterView, JobAllocation, SolverStats

Shares = dict[str, int]
Placements = dict[str, JobAllocation]
SharesStage = Callable[[ClusterView, list[SolverStats]], Shares]
PlacementStage = Callable[[ClusterView, Shares, list[SolverStats]], Placements]


@dataclass(slots=True)
class Decision:
    """A policy's answer: the GPU counts it wanted and the placements it got."""

    shares: Shares
    placements: Placements
    stats: list[SolverStats] = field(default_factory=list)


class Policy(Protocol):
    """Anything with a name that maps a view to a decision."""

    name: str

    def decide(self, view: ClusterView) -> Decision: ...

    def next_wakeup(self, view: ClusterView) -> float | None:
        """Absolute time the policy wants to be asked again without an event (or None)."""
        ...


@dataclass
class StagedPolicy:
    """shares stage, then placement stage."""

    name: str
    shares: SharesStage
    placement: PlacementStage
    wakeup: Callable[[ClusterView], float | None] | None = None

    def decide(self, view: ClusterView) -> Decision:
        stats: list[SolverStats] = []
        shares = self.shares(view, stats)
        placements = self.placement(view, shares, stats)
        return Decision(shares=shares, placements=placements, stats=stats)

    def next_wakeup(self, view: ClusterView) -> float | None:
        return self.wakeup(view) if self.wakeup else None
