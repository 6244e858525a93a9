"""Consolidating best-fit placement.

Turns GPU counts into GPUs while moving as little as possible:

1. a running job whose count is unchanged keeps its GPUs;
2. a shrinking job gives back GPUs from the nodes where it holds the fewest (so what it keeps
   stays packed);
3. a growing job first takes free GPUs on nodes it already uses, then more as below;
4. a new job (or the rest of a growing one) is placed best-fit: if one node can hold it, the
   node with the *fewest* free GPUs that still fits (leaving large holes for large jobs);
   otherwise whole nodes with the most free GPUs first, then best-fit for the remainder,
   so the job spans as few nodes as possible.

Jobs are placed largest first (best-fit decreasing). A job restricted to one GPU type only sees
nodes of that type; on a mixed cluster a job not flagged ``heterogeneous`` also stays on one
type: the one it already holds, else the fastest for it with enough free GPUs
(:func:`.gpu_types.one_type_nodes`). A job with a ``node_shape`` (single node, or N nodes x G
GPUs) is placed, grown and shrunk only in that shape (:mod:`.shapes`). A job that cannot be
placed is left out and stays pending.
"""

from __future__ import annotations

from gpuplan.models import Cluster, ClusterView, JobAllocation, SolverStats

from ..policy import Placements, Shares
from .gpu_types import one_type_nodes
from .shapes import shrink_shaped, take_shaped


def _take_best_fit(
    free: dict[str, list[int]], need: int, nodes: list[str], prefer: tuple[str, ...] = (),
    cluster: Cluster | None = None,
) -> dict[str, tuple[int, ...]] | None:
    """Pick ``need`` GPUs from ``free`` on ``nodes``; mutate ``free``; None if impossible.

    With a multi-rack ``cluster``, once a job holds a node, ties in the free-GPU count are
    broken by hop distance to the nodes it already has (same rack first), then by name; on a
    single rack every distance is equal and the choice is the plain best-fit one."""
    if sum(len(free[n]) for n in nodes) < need:
        return None
    taken: dict[str, list[int]] = {}

    def take(node: str, count: int) -> None:
        gpus = free[node]
        taken.setdefault(node, []).extend(gpus[:count])
        del gpus[:count]

    for node in prefer:
        if need == 0:
            break
        if free.get(node):
            count = min(need, len(free[node]))
            take(node, count)
            need -= count
    topo = cluster if cluster is not None and cluster.multi_rack else None

    def near(node: str) -> float:
        if topo is None or not taken:
            return 0.0
        return min(topo.hops(node, t) for t in taken)

    while need > 0:
        fitting = [n for n in nodes if len(free[n]) >= need]
        if fitting:
            node = min(fitting, key=lambda n: (len(free[n]), near(n), n))
            take(node, need)
            need = 0
        else:
            node = max(nodes, key=lambda n: (len(free[n]), -near(n), n))
            count = len(free[node])
            take(node, count)
            need -= count
    return {n: tuple(sorted(g)) for n, g in taken.items()}


def best_fit_placement(view: ClusterView, shares: Shares, stats: list[SolverStats]) -> Placements:
    free = {n: list(g) for n, g in view.free.items()}
    result: Placements = {}
    grow: list[tuple[str, int]] = []

    # Release first so growing and new jobs can use what others give back.
    for job_id, job in view.running.items():
        want = shares.get(job_id, 0)
        alloc = job.allocation
        have = job.gpus
        if alloc is None:
            continue
        if want == have:
            result[job_id] = alloc
        elif want == 0:
            for node, gpus in alloc.placement.items():
                if node in free:
                    free[node].extend(gpus)
        elif want < have and job.spec.node_shape is not None:
            kept = shrink_shaped(alloc, want, job.spec.node_shape)
            if kept is None:  # no legal smaller shape: keep the job as it is
                result[job_id] = alloc
                continue
            for node, gpus in alloc.placement.items():
                if node in free:
                    free[node].extend(g for g in gpus if g not in kept.get(node, ()))
            result[job_id] = JobAllocation.fast(job_id, kept, alloc.share, alloc.efficiency)
        elif want < have:
            keep: dict[str, tuple[int, ...]] = {}
            budget = want
            for node, gpus in sorted(alloc.placement.items(), key=lambda kv: (-len(kv[1]), kv[0])):
                kept = gpus[: min(budget, len(gpus))]
                if kept:
                    keep[node] = kept
                    budget -= len(kept)
                released = gpus[len(kept):]
                if released and node in free:
                    free[node].extend(released)
            result[job_id] = JobAllocation.fast(job_id, keep, alloc.share, alloc.efficiency)
        else:
            grow.append((job_id, want))
    for gpus in free.values():
        gpus.sort()

    new = [(job_id, n) for job_id, n in shares.items() if n > 0 and job_id in view.pending]
    all_nodes = sorted(free)
    for job_id, want in sorted(grow + new, key=lambda x: (-x[1], x[0])):
        job = view.running.get(job_id) or view.pending[job_id]
        nodes = all_nodes
        if job.spec.gpu_type is not None:
            nodes = [n for n in all_nodes if view.nodes[n].gpu_type == job.spec.gpu_type]
        held = job.allocation.placement if job.allocation else {}
        extra = want - sum(len(g) for g in held.values())
        nodes = one_type_nodes(view, job, nodes, free, extra)
        shape = job.spec.node_shape
        if shape is not None and (shape.max_nodes == 1 or shape.gpus_per_node is not None):
            got = take_shaped(free, extra, nodes, shape, dict(held), job.spec.allowed_counts())
        else:
            got = _take_best_fit(free, extra, nodes, prefer=tuple(sorted(held)),
                                 cluster=view.cluster)
        if got is None:
            if held:  # cannot grow: keep what it has
                result[job_id] = job.allocation  # type: ignore[assignment]
            continue
        merged = {n: tuple(sorted(held.get(n, ()) + got.get(n, ()))) for n in {*held, *got}}
        result[job_id] = JobAllocation.fast(job_id, dict(sorted(merged.items())))
    return result


take_best_fit = _take_best_fit
"""Public name of the best-fit GPU picker, for placement stages that choose the nodes
(e.g. max-min-perf's one-type-per-round placement)."""
