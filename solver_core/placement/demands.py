"""Place an allocation that holds :class:`~..policy.Demand` entries with any placement stage.

Why: placement stages (best-fit, reuse, network packing, Aryl's BFD) take whole-GPU counts on
one pool of nodes. Typed, fractional and pre-placed demands are routed around that contract
here, so every placement stage — and every wrapper around it — works with heterogeneity-aware,
co-locating and joint policies without knowing about them:

1. shared-GPU holders that leave their shares (preempted, or now whole-GPU) release them, and a
   GPU whose last share leaves is wholly free again;
2. whole-GPU holders that change group (another GPU type, fractional, pre-placed elsewhere, or
   preempted) release their GPUs;
3. pre-placed demands take their GPUs as given;
4. typed demands are placed per GPU type (type name order) by the policy's placement stage on a
   view restricted to that type's nodes, then plain counts on all nodes; a running job keeps
   its GPUs when it stays in the same group (so a steady job is never moved);
5. fractional demands are co-located on what is left (:func:`.shared.place_shared`).
"""

from __future__ import annotations

from dataclasses import replace

from gpuplan.models import ActiveJob, ClusterView, SolverStats

from ..policy import Allocation, Demand, Placements, PlacementStage, Shares
from .shared import Residual, place_shared, release_share, residual_capacity, take_share

__all__ = ["place_demands"]

_UNTYPED = ""


def _split(allocation: Allocation) -> tuple[dict[str, Shares], dict[str, Demand], Placements]:
    """(whole counts per group, fractional demands, pre-placed allocations)."""
    groups: dict[str, Shares] = {_UNTYPED: {}}
    fractional: dict[str, Demand] = {}
    fixed: Placements = {}
    for job_id, d in allocation.items():
        if isinstance(d, int):
            if d > 0:
                groups[_UNTYPED][job_id] = d
        elif d.placement is not None:
            if d.placement.job_id != job_id:
                raise ValueError(f"job {job_id}: pre-placed demand names {d.placement.job_id!r}")
            fixed[job_id] = d.placement
        elif d.gpus <= 0:
            continue
        elif d.share < 1.0:
            fractional[job_id] = d
        else:
            groups.setdefault(d.gpu_type or _UNTYPED, {})[job_id] = d.gpus
    return groups, fractional, fixed


def _fresh(job: ActiveJob) -> ActiveJob:
    """A read-only stand-in of a running job that must be placed anew (it changes group)."""
    return replace(job, allocation=None, gpus=0, status="pending")


def place_demands(  # noqa: C901 (a named exception to the complexity gate)
    view: ClusterView, allocation: Allocation, placement: PlacementStage, stats: list[SolverStats]
) -> Placements:
    """Placements for ``allocation`` (see the module docstring for the order of steps)."""
    groups, fractional, fixed = _split(allocation)
    free = {n: set(g) for n, g in view.free.items()}
    residual: Residual = residual_capacity(view, {})  # shared GPUs only, for now
    for job_id, job in view.running.items():  # step 1
        alloc = job.allocation
        if alloc is not None and alloc.share < 1.0 and job_id not in fractional:
            release_share(residual, alloc)
    for node, left in residual.items():
        for g, cap in list(left.items()):
            if cap >= 1.0 - 1e-9 and node in free:
                free[node].add(g)
                del left[g]
    group_of = {j: key for key, shares in groups.items() for j in shares}
    home: dict[str, str] = {}
    for job_id, job in view.running.items():  # step 2
        alloc = job.allocation
        if alloc is None or alloc.share < 1.0:
            continue
        key = group_of.get(job_id)
        same_type = key == _UNTYPED or (
            key is not None
            and all(view.nodes[n].gpu_type == key for n in alloc.placement if n in view.nodes)
        )
        if key is not None and same_type and job_id not in fixed:
            home[job_id] = key
            continue
        for node, gpus in alloc.placement.items():
            if node in free:
                free[node].update(gpus)
    result: Placements = {}
    for job_id, alloc in fixed.items():  # step 3
        if alloc.share >= 1.0:
            for node, gpus in alloc.placement.items():
                free.get(node, set()).difference_update(gpus)
        result[job_id] = alloc
    for key in [*sorted(k for k in groups if k != _UNTYPED), _UNTYPED]:  # step 4
        shares = groups.get(key, {})
        if not shares and not any(k == key for k in home.values()):
            continue
        names = [n for n in view.nodes if key == _UNTYPED or view.nodes[n].gpu_type == key]
        running = {j: view.running[j] for j, k in home.items() if k == key}
        pending = {
            j: (view.pending[j] if j in view.pending else _fresh(view.running[j]))
            for j in shares
            if j not in running
        }
        sub = ClusterView(
            view.now,
            view.cluster,
            {n: view.nodes[n] for n in names},
            {n: sorted(free[n]) for n in names},
            running,
            pending,
            view.shared,
        )
        placed = placement(sub, shares, stats)
        for job in running.values():
            for node, gpus in job.allocation.placement.items():  # type: ignore[union-attr]
                free[node].update(gpus)
        for alloc in placed.values():
            for node, gpus in alloc.placement.items():
                free[node].difference_update(gpus)
        result.update(placed)
    if fractional or any(a.share < 1.0 for a in fixed.values()):  # step 5
        for node, gpus in free.items():
            left = residual.setdefault(node, {})
            for g in gpus:
                left[g] = 1.0
        for alloc in fixed.values():
            if alloc.share < 1.0:
                take_share(residual, dict(alloc.placement), alloc.share)
        result.update(place_shared(view, fractional, residual))
    return result
