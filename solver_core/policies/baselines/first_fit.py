"""First-fit placement, as Slurm's linear node selection does it: a baseline placement stage.

Why: operators comparing gpuplan with what their cluster does today need the placement Slurm's
``select/linear``-style selection makes — nodes in name order, the first ones with free GPUs
first — beside best-fit and reuse. It is also the worked example of docs/architecture.md
("Adding a policy"): a placement stage plus the wrapper that installs it, in one file, found by
the registry without editing anything else.

Rules: running jobs whose count is unchanged keep their GPUs; a shrinking job keeps its GPUs on
its first nodes; a growing or new job takes free GPUs from the nodes it holds, then from nodes
in name order (lowest GPU indices first), largest job first (ties: job id). A job restricted
to one GPU type sees only nodes of that type; a job never spans GPU types unless flagged
heterogeneous (it takes the first type, in name order, that can hold it). A job that does not
fit stays pending.
"""

from __future__ import annotations

from dataclasses import replace

from gpuplan.models import ActiveJob, ClusterView, JobAllocation, SolverStats

from ...params import NoParams
from ...policy import Placements, Shares, StagedPolicy
from ...registry import WrapperDef


def _take(
    free: dict[str, list[int]], nodes: list[str], need: int, prefer: list[str]
) -> dict[str, list[int]] | None:
    """``need`` free GPUs, ``prefer``red nodes first, then ``nodes`` in order; None if short."""
    if sum(len(free[n]) for n in nodes) < need:
        return None
    got: dict[str, list[int]] = {}
    for node in [*prefer, *(n for n in nodes if n not in prefer)]:
        if need == 0:
            break
        take = free[node][:need]
        if take:
            got[node] = take
            del free[node][: len(take)]
            need -= len(take)
    return got


def _groups(view: ClusterView, job: ActiveJob, names: list[str]) -> list[list[str]]:
    """Candidate node lists: one per GPU type unless the job may span types."""
    spec = job.spec
    if spec.gpu_type is not None:
        return [[n for n in names if view.nodes[n].gpu_type == spec.gpu_type]]
    if spec.heterogeneous:
        return [names]
    types = sorted({view.nodes[n].gpu_type for n in names})
    return [[n for n in names if view.nodes[n].gpu_type == t] for t in types]


def first_fit_placement(view: ClusterView, shares: Shares, stats: list[SolverStats]) -> Placements:
    free = {n: sorted(g) for n, g in view.free.items()}
    names = sorted(free)
    result: Placements = {}
    todo: list[tuple[int, str]] = []
    for job_id, job in view.running.items():
        alloc, want = job.allocation, shares.get(job_id, 0)
        if alloc is None:
            continue
        if want >= job.gpus:
            result[job_id] = alloc
            if want > job.gpus:
                todo.append((want, job_id))
            continue
        kept: dict[str, tuple[int, ...]] = {}
        budget = want
        for node in sorted(alloc.placement):
            gpus = alloc.placement[node]
            keep = gpus[:budget]
            budget -= len(keep)
            if keep:
                kept[node] = keep
            if node in free:
                free[node] = sorted([*free[node], *gpus[len(keep) :]])
        if kept:
            result[job_id] = JobAllocation.fast(job_id, kept, alloc.share, alloc.efficiency)
        else:
            result.pop(job_id, None)
    todo += [(n, j) for j, n in shares.items() if n > 0 and j in view.pending]
    for want, job_id in sorted(todo, key=lambda t: (-t[0], t[1])):
        job = view.running.get(job_id) or view.pending[job_id]
        held = dict(job.allocation.placement) if job.allocation else {}
        extra = want - sum(len(g) for g in held.values())
        for nodes in _groups(view, job, names):
            if held and not set(held) <= set(nodes):
                continue  # a running job grows on its own GPU type
            got = _take(free, nodes, extra, sorted(held))
            if got is not None:
                merged = {
                    n: tuple(sorted([*held.get(n, ()), *got.get(n, ())]))
                    for n in sorted({*held, *got})
                }
                result[job_id] = JobAllocation.fast(job_id, merged)
                break
    return result


def _install(policy: StagedPolicy, params: NoParams, seed: int) -> StagedPolicy:
    return replace(policy, placement=first_fit_placement)


WRAPPERS = [WrapperDef("first-fit", _install, NoParams)]
