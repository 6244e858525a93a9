"""Reuse-maximising placement stages (AFS/CoDDL §4.4): migrate only when it is unavoidable.

Why: this is the entry point policies compose (:mod:`.compose`) -- it turns a
:class:`~gpuplan.models.ClusterView` and shares into GPU allocations -- and the stable import
path for everything reuse placement offers. The work is split by concept:

* :mod:`.reuse_problem` -- the problem statement (:class:`PlacementProblem`, node-level counts)
  and the lexicographic objective (:func:`reuse_score`): placed GPUs, then kept jobs (running
  jobs keeping at least one GPU), then reused GPUs, then (without network packing) spread;
* :mod:`.reuse_greedy` -- :func:`place_greedy`, the fast deterministic solver;
* :mod:`.reuse_exact` -- :func:`place_exact`, the optimal model, hinted with the greedy and
  never worse than it.

Both solvers decide node-level counts; :func:`~.network_packing.assign_gpus` picks the GPU
indices (keeping held GPUs). **No network sharing** (``no_network_sharing=True``, what
:mod:`.compose` uses with regulation) restricts every job to ``ceil(a/G)`` nodes with at most
one multi-node job per node (App. E).
"""

from __future__ import annotations

import time

from gpuplan.models import ClusterView, JobAllocation, SolverStats

from ..limits import SolveLimits
from ..policy import Placements, PlacementStage, Shares
from .network_packing import assign_gpus
from .reuse_exact import PLACEMENT_WORK_S, place_exact
from .reuse_greedy import GREEDY_IMPROVE_TRIES, place_greedy
from .reuse_problem import (
    NodeCounts,
    PlacementJob,
    PlacementProblem,
    ReuseScore,
    problem_from_view,
    reuse_score,
)

__all__ = [
    "GREEDY_IMPROVE_TRIES",
    "PLACEMENT_WORK_S",
    "PlacementJob",
    "PlacementProblem",
    "ReuseScore",
    "place_exact",
    "place_greedy",
    "problem_from_view",
    "reuse_exact_placement",
    "reuse_greedy_placement",
    "reuse_placement",
    "reuse_score",
]


def _to_allocations(problem: PlacementProblem, counts: NodeCounts) -> Placements:
    held = {j.id: j.held for j in problem.jobs}
    gpus = assign_gpus(problem.pools, counts, held)
    return {j: JobAllocation.fast(j, p) for j, p in gpus.items()}


def reuse_greedy_placement(
    view: ClusterView, shares: Shares, stats: list[SolverStats], *, no_network_sharing: bool = True
) -> Placements:
    """Placement stage: :func:`place_greedy` on ``view`` (appends one heuristic stats entry)."""
    start = time.perf_counter()
    problem = problem_from_view(view, shares, no_network_sharing)
    counts = place_greedy(problem)
    score = reuse_score(problem, counts)
    stats.append(
        SolverStats(
            stage="placement",
            backend="heuristic",
            status="heuristic",
            wall_ms=(time.perf_counter() - start) * 1000.0,
            message=(
                f"reuse greedy: kept {score.kept_jobs} jobs, reused {score.reused_gpus} GPUs, "
                f"{score.unplaced_jobs} unplaced"
            ),
        )
    )
    return _to_allocations(problem, counts)


def reuse_exact_placement(
    view: ClusterView,
    shares: Shares,
    stats: list[SolverStats],
    *,
    no_network_sharing: bool = True,
    backend: str = "cp-sat",
    limits: SolveLimits | None = None,
) -> Placements:
    """Placement stage: :func:`place_exact` on ``view`` (appends its solver stats)."""
    problem = problem_from_view(view, shares, no_network_sharing)
    counts = place_exact(problem, backend=backend, limits=limits, stats=stats)
    return _to_allocations(problem, counts)


def reuse_placement(
    method: str = "greedy",
    *,
    no_network_sharing: bool = True,
    backend: str = "cp-sat",
    limits: SolveLimits | None = None,
) -> PlacementStage:
    """A placement stage: ``method`` 'greedy' or 'exact', with or without network packing."""
    if method == "greedy":

        def stage(view: ClusterView, shares: Shares, stats: list[SolverStats]) -> Placements:
            return reuse_greedy_placement(
                view, shares, stats, no_network_sharing=no_network_sharing
            )
    elif method == "exact":

        def stage(view: ClusterView, shares: Shares, stats: list[SolverStats]) -> Placements:
            return reuse_exact_placement(
                view,
                shares,
                stats,
                no_network_sharing=no_network_sharing,
                backend=backend,
                limits=limits,
            )
    else:
        raise ValueError(f"reuse placement method must be 'greedy' or 'exact', got {method!r}")
    return stage
