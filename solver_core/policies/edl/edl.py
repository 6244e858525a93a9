"""EDL's "Elastic" policy of the synthetic 32-GPU experiment (paper 003 §6.3, digest §2.2).

Distinct from Elastic-Tiresias. Each job lives on one machine:

1. a new job goes to the **least-loaded machine** by number of jobs (ties: lowest name);
2. a machine's GPUs are shared **uniformly** by its jobs: ``floor(m / k)`` each, the remainder
   to the oldest (inferred); a machine with more jobs than GPUs runs its ``m`` oldest at one GPU
   and the rest wait;
3. a job is **scaled out** onto idle GPUs of its own machine while that raises its throughput
   (the paper's "as long as the scale-out does not decrease its throughput", read strictly so a
   flat curve does not soak up GPUs), one GPU at a time to the job with the fewest GPUs
   (oldest first); a share above the job's useful size is given back to the pool first;
4. when a job arrives on a full machine the others are **scaled in** by step 2.

The machine of a job is remembered between decisions (``snapshot``/``restore``), so running
jobs never migrate; each decision returns pre-placed demands keeping every job's GPUs where
they are as far as its new count allows.
"""

from __future__ import annotations

from typing import Any

from gpuplan.models import ActiveJob, ClusterView, JobAllocation, SolverStats

from ...params import NoParams
from ...placement.best_fit import best_fit_placement
from ...policy import Allocation, Demand, StagedPolicy
from ...registry import PolicyDef


def useful(job: ActiveJob, p: int) -> bool:
    """Whether one more GPU raises the job's (raw, measured) throughput."""
    curve = job.spec.throughput
    return p + 1 <= job.spec.max_gpus and curve.raw_rate(p + 1) > curve.raw_rate(p) + 1e-12


def machine_counts(jobs: list[ActiveJob], gpus: int) -> dict[str, int]:
    """Counts for the jobs of one machine (oldest first): uniform shares capped at the useful
    size, then scale-out of the rest while it pays."""
    if not jobs:
        return {}
    if len(jobs) > gpus:
        return {j.id: 1 for j in jobs[:gpus]}
    base, extra = divmod(gpus, len(jobs))
    counts = {j.id: base + (1 if i < extra else 0) for i, j in enumerate(jobs)}
    for job in jobs:  # give back what does not help
        while counts[job.id] > 1 and not useful(job, counts[job.id] - 1):
            counts[job.id] -= 1
    left = gpus - sum(counts.values())
    while left > 0:
        growable = [j for j in jobs if useful(j, counts[j.id])]
        if not growable:
            break
        pick = min(growable, key=lambda j: counts[j.id])
        counts[pick.id] += 1
        left -= 1
    return counts


class EdlElastic:
    """Shares stage with pre-placed demands (one machine per job)."""

    def __init__(self) -> None:
        self.machine: dict[str, str] = {}
        self.order: dict[str, int] = {}
        self._seq = 0

    def snapshot(self) -> dict[str, Any]:
        return {"machine": dict(self.machine), "order": dict(self.order), "seq": self._seq}

    def restore(self, state: dict[str, Any]) -> None:
        self.machine = {str(k): str(v) for k, v in state.get("machine", {}).items()}
        self.order = {str(k): int(v) for k, v in state.get("order", {}).items()}
        self._seq = int(state.get("seq", 0))

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Allocation:
        active = {j.id: j for j in view.active()}
        for gone in [j for j in self.machine if j not in active]:
            del self.machine[gone]
            self.order.pop(gone, None)
        for job_id, job in view.running.items():  # e.g. after a restore: stay where it runs
            if job_id not in self.machine and job.allocation and job.allocation.placement:
                self.machine[job_id] = min(job.allocation.placement)
        load = {n: 0 for n in view.nodes}
        for node in self.machine.values():
            if node in load:
                load[node] += 1
        for job in view.pending.values():
            if job.id in self.machine and self.machine[job.id] in load:
                continue
            if not load:
                break
            node = min(load, key=lambda n: (load[n], n))
            self.machine[job.id] = node
            load[node] += 1
        for job_id in self.machine:
            if job_id not in self.order:
                self._seq += 1
                self.order[job_id] = self._seq
        out: dict[str, int | Demand] = {}
        for node in sorted(view.nodes):
            jobs = sorted(
                (active[j] for j, n in self.machine.items() if n == node),
                key=lambda j: self.order[j.id],
            )
            counts = machine_counts(jobs, view.nodes[node].gpus)
            out.update(self._place(view, node, jobs, counts))
        return out

    @staticmethod
    def _place(
        view: ClusterView, node: str, jobs: list[ActiveJob], counts: dict[str, int]
    ) -> dict[str, int | Demand]:
        pool = set(range(view.nodes[node].gpus))
        kept: dict[str, list[int]] = {}
        for job in jobs:
            alloc = job.allocation
            have = sorted(alloc.placement.get(node, ())) if alloc else []
            kept[job.id] = have[: counts.get(job.id, 0)]
            pool -= set(kept[job.id])
        free = sorted(pool)
        out: dict[str, int | Demand] = {}
        for job in jobs:
            want = counts.get(job.id, 0)
            if want == 0:
                continue
            gpus = kept[job.id] + free[: want - len(kept[job.id])]
            free = free[want - len(kept[job.id]) :]
            out[job.id] = Demand(
                want, placement=JobAllocation.fast(job.id, {node: tuple(sorted(gpus))})
            )
        return out


def _build(p: NoParams, seed: int) -> StagedPolicy:
    stage = EdlElastic()
    return StagedPolicy(
        "edl-elastic", stage, best_fit_placement, memory=stage, wants_in_place_resize=True
    )


POLICIES = [PolicyDef("edl-elastic", _build, NoParams)]
