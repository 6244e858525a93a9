"""GPU types in placement: free GPUs per type, a job's speed on a type, which type to use.

Why: a bulk-synchronous job spread over two GPU types runs at the slowest type's speed
(:func:`~gpuplan.models.state.placement_rate`), so on a mixed cluster a rigid job that lands
on 1 V100 + 1 K80 wastes the V100. Every placement stage therefore keeps a job on one type
unless ``JobSpec.heterogeneous`` is set, and among the types with room picks the one on which
the job runs fastest (its profile's per-type multiplier, so Gavel's measured K80/P100/V100
ratios decide per model).

On a cluster whose usable nodes are all of one type nothing here changes a decision: the
restriction is the whole cluster and there is no choice to make.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpuplan.models import ActiveJob, Cluster, ClusterView, JobSpec

__all__ = [
    "assign_types",
    "fits_one_type",
    "held_types",
    "nodes_by_type",
    "one_type_nodes",
    "ranked_types",
    "spans_types",
    "type_restricted",
    "type_speed",
]


def nodes_by_type(view: ClusterView, names: Iterable[str] | None = None) -> dict[str, list[str]]:
    """``{type: [node, ...]}`` for ``names`` (default: every usable node), names in order."""
    out: dict[str, list[str]] = {}
    for name in names if names is not None else view.nodes:
        out.setdefault(view.nodes[name].gpu_type, []).append(name)
    return out


def type_speed(cluster: Cluster, spec: JobSpec, gpu_type: str) -> float:
    """Multiplier turning ``spec``'s reference-type throughput into ``gpu_type`` throughput
    (the profile's measured per-type table when it has one, else the types' speed ratio)."""
    profile = spec.throughput
    return profile.type_multiplier(
        gpu_type,
        cluster.gpu_type(gpu_type).relative_speed,
        cluster.gpu_type(profile.reference_gpu).relative_speed,
    )


def ranked_types(cluster: Cluster, spec: JobSpec, types: Iterable[str]) -> list[str]:
    """``types`` fastest first for ``spec`` (ties by name, so the order is deterministic)."""
    return sorted(set(types), key=lambda t: (-type_speed(cluster, spec, t), t))


def held_types(view: ClusterView, job: ActiveJob) -> set[str]:
    """GPU types of the usable nodes where ``job`` holds GPUs now."""
    if job.allocation is None:
        return set()
    return {view.nodes[n].gpu_type for n in job.allocation.placement if n in view.nodes}


def type_restricted(view: ClusterView, job: ActiveJob) -> bool:
    """Whether ``job`` must stay on one GPU type: not flagged heterogeneous, or pinned."""
    return job.spec.gpu_type is not None or not job.spec.heterogeneous


def spans_types(cluster: Cluster, placement: Mapping[str, object]) -> bool:
    """Whether a placement ``{node: ...}`` uses nodes of more than one GPU type."""
    return len({cluster.node_by_name[n].gpu_type for n in placement}) > 1


def one_type_nodes(
    view: ClusterView,
    job: ActiveJob,
    nodes: list[str],
    free: Mapping[str, Iterable[int] | int],
    need: int,
) -> list[str]:
    """The part of ``nodes`` that ``job`` may take ``need`` more GPUs from.

    A job that may span types, or a cluster part of one type, keeps ``nodes``. A running
    type-restricted job stays on the types it holds. Otherwise the fastest type for the job
    whose free GPUs (``free``: node -> GPU indices or a count) cover ``need``; none (an empty
    list, so the job stays pending) when no single type has room now. A job larger than every
    type's usable GPUs keeps ``nodes``: spanning is its only way to run.
    """
    groups = nodes_by_type(view, nodes)
    if len(groups) <= 1 or not type_restricted(view, job):
        return nodes
    held = held_types(view, job) & groups.keys()
    if held:
        return [n for n in nodes if view.nodes[n].gpu_type in held]

    def room(node: str) -> int:
        value = free.get(node, 0)
        return value if isinstance(value, int) else len(list(value))

    if not fits_one_type(view, groups, need):
        return nodes
    for gpu_type in ranked_types(view.cluster, job.spec, groups):
        if sum(room(n) for n in groups[gpu_type]) >= need:
            return groups[gpu_type]
    return []


def fits_one_type(view: ClusterView, groups: Mapping[str, list[str]], count: int) -> bool:
    """Whether some type's usable nodes have ``count`` GPUs in all. A job larger than every
    type may span types (at the slowest one's speed) rather than wait for ever."""
    return any(sum(view.nodes[n].gpus for n in names) >= count for names in groups.values())


def assign_types(
    view: ClusterView, counts: Mapping[str, int], capacity: Mapping[str, int]
) -> dict[str, frozenset[str]]:
    """One GPU type per type-restricted job, for placements that solve all jobs at once.

    ``counts``: job -> GPUs it will get; ``capacity``: node -> GPUs the placement may hand
    out. Returns ``{job: nodes of its type}`` for the jobs that must stay on one type on a
    mixed cluster (empty on a one-type cluster, and without heterogeneous or pinned jobs):
    a running job keeps the type(s) it holds; the others, largest first, get the fastest type
    whose remaining capacity covers them (or the fastest type at all when none does, so the
    solver reports the job unplaced rather than spreading it over types). A job larger than
    every type's usable GPUs is left unrestricted: spanning is its only way to run.
    """
    groups = nodes_by_type(view, capacity)
    if len(groups) <= 1:
        return {}
    left = {t: sum(capacity[n] for n in names) for t, names in groups.items()}
    out: dict[str, frozenset[str]] = {}
    fresh: list[tuple[int, str]] = []
    for job_id, count in counts.items():
        job = view.running.get(job_id) or view.pending.get(job_id)
        if job is None or count <= 0 or job.spec.gpu_type is not None or job.spec.heterogeneous:
            continue
        held = held_types(view, job) & groups.keys() if job_id in view.running else set()
        if held:
            out[job_id] = frozenset(n for t in held for n in groups[t])
            for t in held:
                left[t] -= count
        else:
            fresh.append((count, job_id))
    for count, job_id in sorted(fresh, key=lambda c: (-c[0], c[1])):
        if not fits_one_type(view, groups, count):
            continue  # larger than every type: may span types rather than never run
        spec = (view.running.get(job_id) or view.pending[job_id]).spec
        ranked = ranked_types(view.cluster, spec, groups)
        chosen = next((t for t in ranked if left[t] >= count), ranked[0])
        left[chosen] -= count
        out[job_id] = frozenset(groups[chosen])
    return out
