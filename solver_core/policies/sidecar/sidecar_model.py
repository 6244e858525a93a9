"""SideCar's training-time prediction model and per-host bookkeeping (004 digest §3.1-3.4).

Not a policy module (it declares no ``POLICIES``): the shared part of ``sidecar.py`` and
``sidecar_baselines.py``.

**Prediction (paper §III.C.1, digest §2.1).** Every job is one container on one host
(TensorFlow MirroredStrategy), so a job's speed is its profile at ``N`` GPUs of its host's GPU
type — the paper's ``t_iter(type, GPU type, N)`` table (Table IV) is our job's
``ThroughputProfile`` times the host's GPU-type multiplier (``placement_rate``). Iterations per
epoch do not depend on ``N`` (strong scaling, digest §3.1), so remaining training time is
``remaining iterations / rate(N)``:

* a new job on ``N`` GPUs finishes at ``now + T_init + W/rate(N) + T_tail``
  (``C_new``: ``T_init = T_init^k8s + T_init^dl``, ``T_tail = T_ckpt + T_term^dl + T_term^k8s``);
* a running job reshaped to ``N'`` finishes at ``now + T_reshape + rem/rate(N') + T_tail``
  (``R_i(N')``, ``T_reshape = T_ckpt + T_term^dl + T_init^dl``, 27 s down / 37 s up under
  SideCar, 204 s / 242 s by termination);
* an untouched running job finishes at ``max(now, resume) + rem/rate(N) + T_tail`` (``Rcur``);
* the predicted makespan of a scheme is the maximum of these over every running job and the new
  one (the digest's recommended reading of ``MS_predict``).

**Hosts.** :class:`HostBook` copies the view's free GPUs per node and each running job's
single-host placement, and is updated as a decision places, shrinks and grows jobs, so later
steps of the same decision see the GPUs earlier steps took. A job spread over several nodes
(only possible if another policy placed it) is never reshaped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpuplan.models import ActiveJob, ClusterView, JobAllocation, placement_rate

from ...policy import Demand


@dataclass(frozen=True)
class Costs:
    """Seconds the predictions add (paper's overhead constants; digest §3.4, calibrated from
    the case study: 174 s Kubernetes + DL initialisation, SideCar 27 s down / 37 s up)."""

    init_s: float = 174.0
    down_s: float = 27.0
    up_s: float = 37.0
    tail_s: float = 0.0


def options(job: ActiveJob, limit: int) -> tuple[int, ...]:
    """The job's optional GPU counts ``S_opt`` that fit on a host of ``limit`` GPUs."""
    return tuple(c for c in job.spec.allowed_counts() if c <= limit)


@dataclass
class HostBook:
    """Free GPUs per node and single-host jobs' GPUs, as one decision changes them."""

    view: ClusterView
    free: dict[str, list[int]] = field(default_factory=dict)
    where: dict[str, tuple[str, list[int]]] = field(default_factory=dict)
    """job id -> (node, GPU indices) for running single-host jobs and jobs placed now."""
    touched: set[str] = field(default_factory=set)
    """Jobs started or reshaped in this decision (each job changes at most once)."""

    @classmethod
    def of(cls, view: ClusterView) -> HostBook:
        book = cls(view, {n: list(g) for n, g in view.free.items()})
        for job_id, job in view.running.items():
            alloc = job.allocation
            if alloc is not None and len(alloc.placement) == 1:
                ((node, gpus),) = alloc.placement.items()
                book.where[job_id] = (node, list(gpus))
        return book

    def nodes(self) -> list[str]:
        return sorted(self.free)

    def size(self, node: str) -> int:
        return self.view.nodes[node].gpus

    def rate(self, job: ActiveJob, node: str, gpus: int) -> float:
        """Iterations/s of ``job`` on ``gpus`` GPUs of ``node`` (its profile x GPU type)."""
        if gpus <= 0:
            return 0.0
        alloc = JobAllocation.fast(job.id, {node: tuple(range(gpus))})
        return placement_rate(job.spec, self.view.cluster, alloc)

    def place(self, job_id: str, node: str, gpus: int) -> None:
        """Start a job on ``gpus`` free GPUs of ``node`` (lowest indices)."""
        take, self.free[node] = self.free[node][:gpus], self.free[node][gpus:]
        self.where[job_id] = (node, take)
        self.touched.add(job_id)

    def grow(self, job_id: str, gpus: int) -> None:
        node, have = self.where[job_id]
        take, self.free[node] = self.free[node][:gpus], self.free[node][gpus:]
        self.where[job_id] = (node, sorted(have + take))
        self.touched.add(job_id)

    def shrink(self, job_id: str, gpus: int) -> None:
        """Release the job's ``gpus`` highest-indexed GPUs to the node's free list."""
        node, have = self.where[job_id]
        keep, give = have[: len(have) - gpus], have[len(have) - gpus :]
        self.where[job_id] = (node, keep)
        self.free[node] = sorted(self.free[node] + give)
        self.touched.add(job_id)

    def allocation(self) -> dict[str, int | Demand]:
        """Every single-host job's GPUs as pre-placed demands (jobs spread over nodes keep
        their count; the placement stage leaves them where they are)."""
        out: dict[str, int | Demand] = {}
        for job_id, (node, gpus) in self.where.items():
            out[job_id] = Demand(
                len(gpus), placement=JobAllocation.fast(job_id, {node: tuple(sorted(gpus))})
            )
        for job_id, job in self.view.running.items():
            if job_id not in out:
                out[job_id] = job.gpus
        return out


Remaining = Callable[[ActiveJob, float], float]
"""(job, now) -> iterations the model believes are left (default: the true remaining work)."""


class Predictor:
    """Finish-time predictions of one decision (paper §III.C.1; module docstring).
    ``remaining`` replaces the true remaining work by a prediction (WL4's accuracy targets,
    ``sidecar_accuracy.py``)."""

    def __init__(self, book: HostBook, costs: Costs, remaining: Remaining | None = None) -> None:
        self.book = book
        self.costs = costs
        self.now = book.view.now
        self.left: dict[str, float] = {}
        """Remaining iterations per job, computed once per decision."""
        self._remaining = remaining
        self.finish: dict[str, float] = {}
        """Predicted finish of every job already running or placed in this decision."""
        for job_id in book.where:
            self.finish[job_id] = self.current(job_id)

    def _job(self, job_id: str) -> ActiveJob:
        return self.book.view.job(job_id)

    def remaining(self, job: ActiveJob) -> float:
        if self._remaining is None:
            return job.remaining(self.now)
        if job.id not in self.left:
            self.left[job.id] = self._remaining(job, self.now)
        return self.left[job.id]

    def current(self, job_id: str) -> float:
        """``Rcur``: finish on the job's present GPUs, no reshaping."""
        job = self._job(job_id)
        node, gpus = self.book.where[job_id]
        rate = self.book.rate(job, node, len(gpus))
        start = max(self.now, job.resume_time) if job.status == "running" else self.now
        return start + self.remaining(job) / rate + self.costs.tail_s

    def reshaped(self, job_id: str, gpus: int, cost: float) -> float:
        """``R_i(N')``: finish after a reshape to ``gpus`` GPUs costing ``cost`` seconds."""
        job = self._job(job_id)
        node, _ = self.book.where[job_id]
        start = max(self.now, job.resume_time) + cost
        return start + self.remaining(job) / self.book.rate(job, node, gpus) + self.costs.tail_s

    def new(self, job: ActiveJob, node: str, gpus: int) -> float:
        """``C_new(N)``: finish of a pending job started now on ``gpus`` GPUs of ``node``."""
        return (
            self.now
            + self.costs.init_s
            + self.remaining(job) / self.book.rate(job, node, gpus)
            + self.costs.tail_s
        )

    def makespan(self, changed: dict[str, float]) -> tuple[float, float]:
        """(predicted makespan, sum of predicted finishes) with ``changed`` finishes replacing
        or adding to the current ones."""
        merged = {**self.finish, **changed}
        return max(merged.values(), default=self.now), sum(merged.values())
