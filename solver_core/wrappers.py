"""Wrappers: transformations of a staged policy that compose with any allocation stage.

Each wrapper changes one concern and leaves the rest of the policy alone (admission, wake-ups,
reclaim choice are kept), so ``[network-packing, reuse]`` on AFS-L, Tiresias-L or Aryl needs no
code in those policies:

* ``network-packing`` (AFS/CoDDL §4.4, App. E): counts regulated to the packing units
  ``{1, 2, ..., G, multiples of G}`` with the least change, then a placement with no network
  sharing (every multi-node job owns whole nodes);
* ``reuse``: a reuse-maximising placement (keep each running job on at least one of its GPUs,
  then as many GPUs as possible; migrate only when unavoidable), honouring no-network-sharing
  when packing is on;
* ``learning`` (AFS §4.5, "overestimate first, re-adjust later"): a job that has not yet
  measured its throughput curve gets at most its fair share ``max(1, M // n)``;
* ``co-location``: jobs that declare a per-worker compute share ``alpha < 1``
  (``JobSpec.memory.compute``, OJPP's model) are placed as fractional demands of ``alpha`` of
  each GPU, and queued ones are added while the capacity their fractions free lasts, so they
  share GPUs; OJPP's interference-aware packing builds on this.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import Field

from gpuplan.models import ActiveJob, ClusterView, SolverStats

from .limits import SolveLimits
from .params import NoParams, Params
from .placement.compose import make_placement, regulated_allocation
from .policy import (
    Allocation,
    AllocationStage,
    Demand,
    StagedPolicy,
    Stateless,
    demand_counts,
    with_counts,
)
from .registry import WrapperDef

__all__ = ["WRAPPERS", "FairShareUntilMeasured", "colocated", "solve_limits"]

Backend = Literal["cp-sat", "scip", "highs", "cbc", "pulp-cbc"]


class _SolverParams(Params):
    backend: Backend = Field("cp-sat", description="exact solver backend")
    work_limit_s: float | None = Field(
        None,
        gt=0,
        le=3600,
        description="deterministic budget (CP-SAT det. seconds; node limits on MIP backends)",
    )
    time_limit_s: float | None = Field(
        None,
        gt=0,
        le=3600,
        description="wall-clock limit; makes results depend on machine load (interactive use)",
    )


def solve_limits(p: _SolverParams) -> SolveLimits | None:
    """The budget the parameters ask for; None leaves each stage's deterministic default."""
    if p.work_limit_s is not None:
        budget = SolveLimits.deterministic_budget(p.work_limit_s)
        return replace(budget, wall_s=p.time_limit_s) if p.time_limit_s else budget
    if p.time_limit_s is not None:
        return SolveLimits.wall(p.time_limit_s)
    return None


class PackingParams(_SolverParams):
    regulation: Literal["greedy", "marginal", "exact"] = Field(
        "greedy", description="how counts are moved onto packing units"
    )
    placement: Literal["reuse-greedy", "reuse-exact", "ffd", "best-fit"] = Field(
        "reuse-greedy", description="placement after regulation"
    )


class ReuseParams(_SolverParams):
    method: Literal["greedy", "exact"] = Field("greedy", description="reuse placement solver")


def _network_packing(policy: StagedPolicy, p: PackingParams, seed: int) -> StagedPolicy:
    limits = solve_limits(p)
    return replace(
        policy,
        allocation=regulated_allocation(
            policy.allocation, p.regulation, backend=p.backend, limits=limits
        ),
        placement=make_placement(
            p.placement, no_network_sharing=True, backend=p.backend, limits=limits
        ),
        no_network_sharing=True,
    )


def _reuse(policy: StagedPolicy, p: ReuseParams, seed: int) -> StagedPolicy:
    return replace(
        policy,
        placement=make_placement(
            "reuse-greedy" if p.method == "greedy" else "reuse-exact",
            no_network_sharing=policy.no_network_sharing,
            backend=p.backend,
            limits=solve_limits(p),
        ),
    )


class FairShareUntilMeasured(Stateless):
    """Cap unmeasured jobs' counts at ``max(1, M // n)`` (n = active jobs, M = usable GPUs);
    GPUs the cap frees stay idle until the job's measurement arrives (the price AFS accepts).

    A job none of whose allowed counts fits under the cap (a rigid 8-GPU job when the cap is
    2) keeps its smallest allowed count instead of 0: it is measured only by running, so a 0
    would keep it unmeasured, and so capped, for as long as the queue is long. Measured before
    this rule: under Elastic-Tiresias the inner stage preempted everything for two such jobs of
    the highest priority and the cap then zeroed them, leaving all 16 GPUs idle with 8 jobs
    waiting until the run ended."""

    def __init__(self, inner: AllocationStage) -> None:
        self.inner = inner

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Allocation:
        allocation = self.inner(view, stats)
        active = len(view.running) + len(view.pending)
        if not active:
            return allocation
        fair = max(1, view.capacity // active)
        counts = demand_counts(allocation)
        for job_id, gpus in counts.items():
            job = view.running.get(job_id) or view.pending.get(job_id)
            if job is not None and not job.measured and gpus > fair:
                allowed = job.spec.allowed_counts()
                under = [c for c in allowed if 0 < c <= fair]
                counts[job_id] = max(under) if under else min(c for c in allowed if c > 0)
        return with_counts(allocation, counts)


def _learning(policy: StagedPolicy, p: Params, seed: int) -> StagedPolicy:
    return replace(policy, allocation=FairShareUntilMeasured(policy.allocation))


def colocated(inner: AllocationStage) -> AllocationStage:
    """``inner`` with co-locatable jobs (``memory.compute < 1``) turned into fractional demands,
    then queued co-locatable jobs ``inner`` left out added, in queue order, while the GPU
    capacity their fractions free up lasts (a base policy counts whole GPUs and cannot know a
    job needs only ``alpha`` of each). A job that then does not fit stays pending."""

    def share_of(job: ActiveJob | None) -> float:
        memory = job.spec.memory if job is not None else None
        return memory.compute if memory is not None else 1.0

    def stage(view: ClusterView, stats: list[SolverStats]) -> Allocation:
        allocation = inner(view, stats)
        out: dict[str, int | Demand] = {}
        used = 0.0
        for job_id, d in allocation.items():
            job = view.running.get(job_id) or view.pending.get(job_id)
            share = share_of(job)
            gpus = d if isinstance(d, int) else d.gpus
            if share < 1.0 and gpus > 0 and (isinstance(d, int) or d.placement is None):
                d = Demand(
                    gpus=gpus, share=share, gpu_type=None if isinstance(d, int) else d.gpu_type
                )
            out[job_id] = d
            used += gpus * (d.share if isinstance(d, Demand) else 1.0)
        room = view.capacity - used
        for job_id, job in view.pending.items():
            share = share_of(job)
            if job_id in out or share >= 1.0:
                continue
            need = job.spec.min_gpus * share
            if need <= room + 1e-9:
                out[job_id] = Demand(gpus=job.spec.min_gpus, share=share)
                room -= need
        return out

    stage.__name__ = f"colocated_{getattr(inner, '__name__', 'allocation')}"
    return stage


def _colocation(policy: StagedPolicy, p: Params, seed: int) -> StagedPolicy:
    return replace(policy, allocation=colocated(policy.allocation))


WRAPPERS = [
    WrapperDef("network-packing", _network_packing, PackingParams),
    WrapperDef("reuse", _reuse, ReuseParams),
    WrapperDef("learning", _learning, NoParams),
    WrapperDef("co-location", _colocation, NoParams),
]
"""Their names and summaries are declared in ``solver_core/__init__.py``."""
