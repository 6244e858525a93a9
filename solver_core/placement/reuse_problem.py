"""The reuse placement problem and its objective (AFS/CoDDL §4.4), shared by both solvers.

Why a module of its own: the greedy (:mod:`.reuse_greedy`) and the exact model
(:mod:`.reuse_exact`) decide the same thing -- node-level GPU counts per job -- and must be judged
by the same score, so that the exact answer can be checked against (and fall back to) the greedy.

CoDDL resizes a job around any worker it keeps (that worker holds the latest parameters), so a
job only pays a checkpoint/restore migration when its new GPU set contains *none* of its current
GPUs. A placement therefore maximises, lexicographically,

0. the GPUs placed (never leave a job pending to spare another one a migration),
1. the number of running jobs that keep at least one of their GPUs ("kept jobs"),
2. the number of GPUs kept in place ("reused GPUs"),
3. (only without network packing) minus the number of (job, node) pairs, so jobs stay packed.

Allocations are whole GPUs (``share = 1``); a job's held GPUs are those of its current
allocation on usable nodes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from gpuplan.models import ClusterView

from ..policy import Shares
from .gpu_types import assign_types
from .network_packing import node_pools, packing_unit

__all__ = [
    "NodeCounts",
    "PlacementJob",
    "PlacementProblem",
    "ReuseScore",
    "problem_from_view",
    "reuse_score",
    "score_key",
]

NodeCounts = dict[str, dict[str, int]]
"""{job: {node: GPUs}}: what both solvers decide; :func:`assign_gpus` picks the indices."""


@dataclass(frozen=True, slots=True)
class PlacementJob:
    """One job to place: its target ``count``, the GPUs it ``held`` (node -> indices), and the
    nodes it may use (``None``: all; set for GPU-type-restricted jobs)."""

    id: str
    count: int
    held: Mapping[str, tuple[int, ...]]
    nodes: frozenset[str] | None = None

    def held_on(self, node: str) -> int:
        return len(self.held.get(node, ()))


@dataclass(frozen=True)
class PlacementProblem:
    """Everything a reuse placement decides on. ``pools``: node -> GPUs it may hand out;
    ``unit``: ``G``, GPUs per node."""

    pools: Mapping[str, tuple[int, ...]]
    unit: int
    jobs: tuple[PlacementJob, ...]
    no_network_sharing: bool = True

    def eligible(self, job: PlacementJob) -> list[str]:
        return [n for n in self.pools if job.nodes is None or n in job.nodes]


@dataclass(frozen=True, slots=True, order=True)
class ReuseScore:
    """The lexicographic objective (field order = priority) and what it implies."""

    placed_gpus: int
    kept_jobs: int
    reused_gpus: int
    neg_spread: int
    placed_jobs: int = 0
    migrated_jobs: int = 0
    """running jobs placed without any of their GPUs (they checkpoint/restore)"""
    unplaced_jobs: int = 0


def problem_from_view(
    view: ClusterView, shares: Shares, no_network_sharing: bool = True
) -> PlacementProblem:
    """The placement problem of ``shares`` on ``view`` (jobs with a positive count); on a
    mixed cluster a job not flagged heterogeneous may use one GPU type's nodes only."""
    pools = {n: tuple(g) for n, g in node_pools(view).items()}
    one_type = assign_types(
        view, {j: c for j, c in shares.items() if c > 0}, {n: len(g) for n, g in pools.items()}
    )
    jobs = []
    for job_id in sorted(shares):
        count = shares[job_id]
        job = view.running.get(job_id) or view.pending.get(job_id)
        if job is None or count <= 0:
            continue
        held: dict[str, tuple[int, ...]] = {}
        if job_id in view.running and job.allocation is not None:
            for node, gpus in job.allocation.placement.items():
                mine = tuple(g for g in gpus if g in pools.get(node, ()))
                if mine:
                    held[node] = mine
        nodes = None
        if job.spec.gpu_type is not None:
            nodes = frozenset(n for n in pools if view.nodes[n].gpu_type == job.spec.gpu_type)
        nodes = one_type.get(job_id, nodes)
        jobs.append(PlacementJob(job_id, count, held, nodes))
    return PlacementProblem(pools, packing_unit(view), tuple(jobs), no_network_sharing)


def reuse_score(
    problem: PlacementProblem, placement: Mapping[str, Mapping[str, Collection[int] | int]]
) -> ReuseScore:
    """Score a placement given as GPU indices or node-level counts (counts reuse
    ``min(count, held)`` per node, which :func:`assign_gpus` achieves)."""
    placed_gpus = kept = reused = spread = placed = migrated = 0
    for job in problem.jobs:
        nodes = placement.get(job.id)
        if not nodes:
            continue
        placed += 1
        spread += len(nodes)
        mine = 0
        for node, gpus in nodes.items():
            if isinstance(gpus, int):
                placed_gpus += gpus
                mine += min(gpus, job.held_on(node))
            else:
                placed_gpus += len(gpus)
                mine += len(set(gpus) & set(job.held.get(node, ())))
        reused += mine
        if job.held:
            kept += mine > 0
            migrated += mine == 0
    unplaced = sum(1 for j in problem.jobs if j.count > 0 and not placement.get(j.id))
    return ReuseScore(placed_gpus, kept, reused, -spread, placed, migrated, unplaced)


def score_key(problem: PlacementProblem, score: ReuseScore) -> tuple[int, ...]:
    """What the solvers optimise: spread only counts without network packing."""
    tail = 0 if problem.no_network_sharing else score.neg_spread
    return (score.placed_gpus, score.kept_jobs, score.reused_gpus, tail)
