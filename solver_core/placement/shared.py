"""Fractional placement: co-locate jobs that use a share of each of their GPUs.

A fractional demand asks for ``gpus`` distinct GPUs with at least ``share`` left on each
(shares on one GPU sum to at most 1; ``ClusterView.shared`` holds the load of GPUs already
shared). Why a placement of its own: whole-GPU placement stages reason in free GPU *counts*
and cannot express "half of GPU 3 is taken"; co-location (OJPP, paper 002) needs exactly that.

Rules, deterministic and simple (OJPP's interference-aware packing replaces them when
configured):

1. a running job whose demand keeps its GPU count keeps its GPUs when its new share still fits
   on each of them (a share-only change becomes a ``reshare``, never a move);
2. other jobs are placed largest share first (ties: more GPUs, then id), on one node when one
   node can hold all their GPUs, choosing GPUs best-fit: the least residual capacity that still
   fits, partially used GPUs before wholly free ones, so whole GPUs stay whole for whole jobs;
3. a job that does not fit stays pending.
"""

from __future__ import annotations

from gpuplan.models import SHARE_EPS, ClusterView, JobAllocation, Node

from ..policy import Demand, Placements

Residual = dict[str, dict[int, float]]
"""node -> GPU -> capacity left (only GPUs with some capacity left)."""


def residual_capacity(view: ClusterView, free: dict[str, list[int]]) -> Residual:
    """Capacity left on each GPU usable for shares: wholly free GPUs (1.0) and shared ones."""
    out: Residual = {}
    for node in view.nodes:
        left = {g: 1.0 for g in free.get(node, ())}
        for g, used in view.shared.get(node, {}).items():
            if used < 1.0 - SHARE_EPS:
                left[g] = 1.0 - used
        if left:
            out[node] = left
    return out


def release_share(residual: Residual, alloc: JobAllocation) -> None:
    for node, gpus in alloc.placement.items():
        left = residual.setdefault(node, {})
        for g in gpus:
            left[g] = min(1.0, left.get(g, 0.0) + alloc.share)


def take_share(residual: Residual, placement: dict[str, tuple[int, ...]], share: float) -> None:
    for node, gpus in placement.items():
        left = residual.get(node, {})
        for g in gpus:
            if g not in left:
                continue  # over-committed: the plan check names it
            left[g] -= share
            if left[g] <= SHARE_EPS:
                del left[g]


def _fits(residual: Residual, placement: dict[str, tuple[int, ...]], share: float) -> bool:
    return all(
        residual.get(node, {}).get(g, 0.0) + SHARE_EPS >= share
        for node, gpus in placement.items()
        for g in gpus
    )


def _choose(
    residual: Residual, nodes: list[str], gpus: int, share: float
) -> dict[str, tuple[int, ...]] | None:
    """``gpus`` GPUs with >= ``share`` left: one node if possible (the fullest that fits),
    else across nodes with the most room first; best-fit GPUs within a node."""

    def fitting(node: str) -> list[int]:
        left = residual.get(node, {})
        ok = [g for g, cap in left.items() if cap + SHARE_EPS >= share]
        return sorted(ok, key=lambda g: (left[g], g))

    candidates = {n: fitting(n) for n in nodes}
    single = [n for n in nodes if len(candidates[n]) >= gpus]
    if single:
        node = min(single, key=lambda n: (len(candidates[n]), n))
        return {node: tuple(sorted(candidates[node][:gpus]))}
    if sum(len(c) for c in candidates.values()) < gpus:
        return None
    chosen: dict[str, tuple[int, ...]] = {}
    need = gpus
    for node in sorted(nodes, key=lambda n: (-len(candidates[n]), n)):
        if need == 0:
            break
        take = candidates[node][:need]
        if take:
            chosen[node] = tuple(sorted(take))
            need -= len(take)
    return dict(sorted(chosen.items()))


def place_shared(
    view: ClusterView,
    demands: dict[str, Demand],
    residual: Residual,
    nodes: dict[str, Node] | None = None,
) -> Placements:
    """Place fractional ``demands`` on ``residual`` capacity (mutated). Running jobs among
    them hold GPUs already counted in ``residual``'s loads; they are released first."""
    nodes = nodes if nodes is not None else view.nodes
    result: Placements = {}
    moving: list[tuple[str, Demand]] = []
    running = [(j, d) for j, d in demands.items() if j in view.running]
    for job_id, _ in running:
        alloc = view.running[job_id].allocation
        if alloc is not None and alloc.share < 1.0:
            release_share(residual, alloc)
    for job_id, d in running:
        alloc = view.running[job_id].allocation
        if (
            alloc is not None
            and alloc.share < 1.0
            and alloc.gpus == d.gpus
            and _fits(residual, alloc.placement, d.share)
        ):
            kept = JobAllocation.fast(job_id, alloc.placement, d.share, alloc.efficiency)
            take_share(residual, kept.placement, d.share)
            result[job_id] = kept
        else:
            moving.append((job_id, d))
    moving += [(j, d) for j, d in demands.items() if j not in view.running]
    for job_id, d in sorted(moving, key=lambda jd: (-jd[1].share, -jd[1].gpus, jd[0])):
        job = view.running.get(job_id) or view.pending[job_id]
        wanted = d.gpu_type or job.spec.gpu_type
        if wanted is None and job.spec.heterogeneous:
            groups = [sorted(nodes)]
        else:  # a job never spans GPU types unless flagged heterogeneous
            types = sorted({nodes[n].gpu_type for n in nodes} if wanted is None else {wanted})
            groups = [sorted(n for n in nodes if nodes[n].gpu_type == t) for t in types]
        got = None
        for names in groups:
            got = _choose(residual, names, d.gpus, d.share)
            if got is not None:
                break
        if got is None:
            continue
        take_share(residual, got, d.share)
        result[job_id] = JobAllocation.fast(job_id, got, d.share)
    return result
