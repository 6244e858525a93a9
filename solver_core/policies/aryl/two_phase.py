"""Aryl's two-phase allocation (§5.2, Alg. 2) over plain worker-level jobs.

Phase 1 (``AllocateInelastic``): shortest job first over the *inelastic demand* -- inelastic
jobs at their fixed size, elastic jobs at their base demand ``w_min`` -- skipping any job that
no longer fits (skip-and-continue, so one large job never blocks the queue).

Phase 2 (``AllocateElastic``): the capacity left, ``C*``, goes to elastic jobs' *flexible*
demand as a multiple-choice knapsack (:mod:`.mckp`). Item k of job j = "k extra workers",
weight ``k * D_j`` GPUs, value ``T_j^max * k / (k + w_j^min)``: the running-time reduction over
the job's maximum running time (at ``w_min``) under linear scaling (Alg. 2 line 18).

Fixes to the printed Alg. 2 box (001 digest §2.3.4 / §7.3), all deliberate:

* line 17 prints the weight as ``(w + w_min) * D``, which counts the base demand a second time
  (phase 1 already subtracted it from ``C*``); we use the flexible weight ``k * D``;
* line 19 appends the item to ``groups`` instead of to its group ``g``;
* line 25 tests ``C* >= 0``, which is always true; we run phase 2 only when ``C* > 0``.

The functions here are pure (no cluster, no placement) so the paper's worked examples (Tab. 2-4,
Fig. 6) can be checked exactly; :mod:`gpuplan.solver_core.policies.aryl.aryl` applies the same two
phases per server pool on a live :class:`~gpuplan.models.ClusterView`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gpuplan.models import SolverStats

from .mckp import MckpGroup, MckpResult, solve_mckp

__all__ = [
    "ArylJob",
    "TwoPhaseResult",
    "allocate_elastic",
    "allocate_inelastic",
    "elastic_group",
    "linear_jct",
    "sort_jobs",
    "two_phase_allocate",
]


@dataclass(frozen=True, slots=True)
class ArylJob:
    """A job as Alg. 2 sees it, in workers.

    ``run_time`` is T_j for an inelastic job (at ``w_min == w_max`` workers) and T_j^max, the
    running time at ``w_min`` workers, for an elastic one. ``values`` optionally overrides the
    linear-scaling item values (``values[k-1]`` = reduction with k extra workers), for profiled
    non-linear jobs (§8: "still works with non-linear scaling").
    """

    id: str
    w_min: int
    w_max: int
    run_time: float
    gpus_per_worker: int = 1
    submit: float = 0.0
    values: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.w_min <= self.w_max:
            raise ValueError(
                f"job {self.id}: need 1 <= w_min <= w_max, got [{self.w_min}, {self.w_max}]"
            )
        if self.run_time < 0:
            raise ValueError(f"job {self.id}: negative running time")
        if self.values is not None and len(self.values) != self.w_max - self.w_min:
            raise ValueError(f"job {self.id}: values needs w_max - w_min entries")

    @classmethod
    def inelastic(
        cls,
        job_id: str,
        workers: int,
        run_time: float,
        gpus_per_worker: int = 1,
        submit: float = 0.0,
    ) -> ArylJob:
        return cls(job_id, workers, workers, run_time, gpus_per_worker, submit)

    @classmethod
    def elastic_from_min_time(
        cls,
        job_id: str,
        w_min: int,
        w_max: int,
        min_running_time: float,
        gpus_per_worker: int = 1,
        submit: float = 0.0,
    ) -> ArylJob:
        """From the paper's table form: the running time at ``w_max`` ("min. running time").

        Linear scaling: T^max = T^min * w_max / w_min.
        """
        return cls(job_id, w_min, w_max, min_running_time * w_max / w_min, gpus_per_worker, submit)

    @property
    def elastic(self) -> bool:
        return self.w_max > self.w_min

    @property
    def base_gpus(self) -> int:
        return self.w_min * self.gpus_per_worker

    @property
    def workload(self) -> float:
        """Worker-seconds (constant under linear scaling)."""
        return self.run_time * self.w_min

    def value(self, k: int) -> float:
        """Running-time reduction with ``k`` extra workers (Alg. 2 line 18)."""
        if k <= 0:
            return 0.0
        if self.values is not None:
            return self.values[k - 1]
        return self.run_time * k / (k + self.w_min)


def sort_jobs(jobs: Iterable[ArylJob]) -> list[ArylJob]:
    """Alg. 2 ``SortJobs``: by T_j (inelastic) or T_j^max (elastic); ties by submit, then id."""
    return sorted(jobs, key=lambda j: (j.run_time, j.submit, j.id))


def allocate_inelastic(jobs: Sequence[ArylJob], capacity: int) -> tuple[list[ArylJob], int]:
    """Phase 1: SJF over base demands, skipping jobs that do not fit. Returns (admitted, C*)."""
    admitted: list[ArylJob] = []
    left = capacity
    for job in sort_jobs(jobs):
        need = job.base_gpus
        if need <= left:
            admitted.append(job)
            left -= need
    return admitted, left


def elastic_group(job: ArylJob) -> MckpGroup:
    """The MCKP group of one elastic job: items k = 1 .. w_max - w_min, weight k * D."""
    return MckpGroup(
        job.id,
        tuple((k * job.gpus_per_worker, job.value(k)) for k in range(1, job.w_max - job.w_min + 1)),
    )


def allocate_elastic(
    jobs: Sequence[ArylJob], capacity: int, method: str = "dp", **kw: object
) -> tuple[dict[str, int], MckpResult]:
    """Phase 2: extra workers per elastic job from the MCKP over ``capacity`` GPUs."""
    elastic = [j for j in jobs if j.elastic]
    groups = [elastic_group(j) for j in elastic]
    result = solve_mckp(groups, capacity, method, **kw)
    extra = {j.id: result.choice.get(j.id, -1) + 1 for j in elastic}
    return extra, result


@dataclass(slots=True)
class TwoPhaseResult:
    """Workers per admitted or running job, and what each phase did."""

    workers: dict[str, int]
    admitted: list[str]
    capacity_after_phase1: int
    flexible: dict[str, int]
    mckp_value: float = 0.0
    stats: list[SolverStats] = field(default_factory=list)


def two_phase_allocate(
    queued: Sequence[ArylJob],
    running_elastic: Sequence[ArylJob] = (),
    capacity: int = 0,
    method: str = "dp",
    **kw: object,
) -> TwoPhaseResult:
    """Alg. 2 ``Allocation``. ``capacity`` is C^a = idle GPUs + GPUs held by flexible workers
    (running elastic jobs keep their base, which is therefore not part of C^a)."""
    admitted, left = allocate_inelastic(queued, capacity)
    workers = {j.id: j.w_min for j in admitted}
    workers.update({j.id: j.w_min for j in running_elastic})
    flexible: dict[str, int] = {}
    value = 0.0
    stats: list[SolverStats] = []
    if left > 0:  # fixed: the box's "C* >= 0" is always true
        pool = [*running_elastic, *(j for j in admitted if j.elastic)]
        flexible, result = allocate_elastic(pool, left, method, **kw)
        value = result.value
        if result.stats is not None:
            stats.append(result.stats)
        for job_id, k in flexible.items():
            workers[job_id] += k
    return TwoPhaseResult(workers, [j.id for j in admitted], left, flexible, value, stats)


def linear_jct(jobs: Sequence[ArylJob], workers: dict[str, int], capacity: int) -> dict[str, float]:
    """JCTs of jobs that all start at t=0 with ``workers``, under linear scaling, when "once a
    job finishes, the others are immediately allocated more resources as much as possible"
    (§5.1, Tab. 3): freed workers go to the unfinished jobs in the given order, up to w_max.

    This is the model the paper uses for Tab. 3 and 4; jobs with 0 workers wait for capacity.
    """
    left = {j.id: j.workload for j in jobs}
    alloc = {j.id: workers.get(j.id, 0) for j in jobs}
    spec = {j.id: j for j in jobs}
    now = 0.0
    done: dict[str, float] = {}
    while left:
        running = [i for i in left if alloc[i] > 0]
        if not running:
            raise ValueError("no job can run: give at least one job some workers")
        dt = min(left[i] / alloc[i] for i in running)
        now += dt
        for i in running:
            left[i] -= alloc[i] * dt
        for i in [i for i in running if left[i] <= 1e-9 * max(1.0, spec[i].workload)]:
            done[i] = now
            del left[i]
            alloc[i] = 0
        free = capacity - sum(alloc[i] for i in left)
        for j in jobs:
            if j.id in left and free > 0:
                if alloc[j.id] == 0 and j.w_min > free:
                    continue
                add = min(j.w_max - alloc[j.id], free)
                alloc[j.id] += add
                free -= add
    return done
