"""Injected stragglers and EDL's straggler mitigation in the simulator (003 digest §2.3).

A :class:`Straggler` is one GPU that runs at ``speed`` (< 1) of its normal pace from
``start_s`` on. Synchronous data-parallel training waits for its slowest worker at every
mini-batch, so a job runs at ``rate(p) x min(worker speeds)``.

With mitigation on, the job's EDL leader watches per-mini-batch worker times and applies the
paper's rule (:class:`StragglerDetector`): a worker whose time exceeds ``threshold`` (1.2) x the
median for ``window`` (10) consecutive mini-batches is a straggler; all stragglers found are
removed by one graceful scale-in ``removal_s`` later (the paper: detected < 10 s, removed
< 5 s). The job then runs on its other ``p - k`` workers at ``rate(p - k)``. EDL's leader does
this without the scheduler, so the engine's books still show the straggler's GPU held by the
job (idle) until the next plan moves the job; a new allocation that still holds a slow GPU is
watched again from its start.

Mini-batch times are generated, not assumed: each worker's time is ``1 / rate`` divided by its
speed, times a seeded jitter of ``±jitter``, fed mini-batch by mini-batch to the detector, so
the detection delay is what the rule yields on noisy times.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuplan.models import (
    ActiveJob,
    AllocationPlan,
    Cluster,
    Event,
    JobAllocation,
    JobSpec,
    Overheads,
    placement_rate,
)

from .cluster import SimulatedCluster


@dataclass(frozen=True)
class Straggler:
    """GPU ``gpu`` of ``node`` runs at ``speed`` of its pace from ``start_s`` on."""

    node: str
    gpu: int
    speed: float
    start_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 < self.speed <= 1.0:
            raise ValueError(f"straggler speed must be in (0, 1], got {self.speed}")


@dataclass
class StragglerDetector:
    """EDL §5.2: slower than ``threshold`` x the median for ``window`` mini-batches in a row."""

    threshold: float = 1.2
    window: int = 10
    slow: dict[str, int] = field(default_factory=dict)

    def observe(self, times: Mapping[str, float]) -> set[str]:
        """Feed one mini-batch's per-worker times; return the workers now flagged."""
        med = statistics.median(times.values())
        for worker, t in times.items():
            self.slow[worker] = self.slow.get(worker, 0) + 1 if t > self.threshold * med else 0
        return {w for w, n in self.slow.items() if n >= self.window and w in times}


def batches_to_detect(
    speeds: Mapping[str, float],
    threshold: float,
    window: int,
    jitter: float,
    seed: int,
    limit: int = 10_000,
) -> tuple[int, set[str]]:
    """Mini-batches until the detector flags someone, and whom (``(limit, set())`` if never).
    Times are relative: a worker at speed ``s`` takes ``1 / s`` x (1 ± jitter)."""
    rng = random.Random(seed)
    det = StragglerDetector(threshold, window)
    for batch in range(1, limit + 1):
        times = {w: (1.0 + rng.uniform(-jitter, jitter)) / s for w, s in sorted(speeds.items())}
        flagged = det.observe(times)
        if flagged:
            return batch, flagged
    return limit, set()


@dataclass
class Detection:
    """One mitigation: when the rule fired, when the workers left, which GPUs."""

    job_id: str
    detected_at: float
    removed_at: float
    gpus: tuple[tuple[str, int], ...]
    rate_before: float = 0.0
    rate_after: float = 0.0


class StragglerCluster(SimulatedCluster):
    """The simulated cluster with injected stragglers and (optionally) EDL's mitigation."""

    def __init__(
        self,
        cluster: Cluster,
        jobs: Iterable[JobSpec],
        stragglers: Sequence[Straggler],
        overheads: Overheads | None = None,
        events: Iterable[Event] = (),
        *,
        mitigate: bool = True,
        threshold: float = 1.2,
        window: int = 10,
        removal_s: float = 2.0,
        jitter: float = 0.02,
        seed: int = 0,
        **kwargs: object,
    ) -> None:
        super().__init__(cluster, jobs, overheads, events, **kwargs)  # type: ignore[arg-type]
        self.stragglers = {(s.node, s.gpu): s for s in stragglers}
        self.mitigate = mitigate
        self.threshold, self.window, self.removal_s = threshold, window, removal_s
        self.jitter, self.seed = jitter, seed
        self.removed: dict[str, set[tuple[str, int]]] = {}
        self.detections: list[Detection] = []
        self._t = 0.0
        for s in stragglers:
            if s.start_s > 0:
                self._push_internal(s.start_s, ("slow", s.node, s.gpu))

    # ------------------------------------------------------------------ speed
    def _workers(self, job: ActiveJob) -> list[tuple[str, int]]:
        alloc = job.allocation
        gone = self.removed.get(job.id, set())
        if alloc is None:
            return []
        return [
            (n, g) for n, gs in sorted(alloc.placement.items()) for g in gs if (n, g) not in gone
        ]

    def _speed(self, key: tuple[str, int]) -> float:
        s = self.stragglers.get(key)
        return s.speed if s is not None and s.start_s <= self._t else 1.0

    def true_rate(self, job: ActiveJob) -> float:
        alloc = job.allocation
        if alloc is None or not alloc.placement:
            return 0.0
        workers = self._workers(job)
        if not workers:
            return 0.0
        if len(workers) == alloc.gpus:
            rate = super().true_rate(job)
        else:
            placement: dict[str, list[int]] = {}
            for n, g in workers:
                placement.setdefault(n, []).append(g)
            reduced = JobAllocation.fast(
                job.id, {n: tuple(g) for n, g in placement.items()}, alloc.share, alloc.efficiency
            )
            rate = placement_rate(self._true.get(job.id, job.spec), self.cluster, reduced)
        return rate * min(self._speed(w) for w in workers)

    # ------------------------------------------------------------------ hooks
    def apply(self, plan: AllocationPlan, jobs: Mapping[str, ActiveJob]) -> None:
        self._t = plan.time
        for action in plan.actions:
            self.removed.pop(action.job_id, None)  # a new allocation: watched afresh
        super().apply(plan, jobs)
        for action in plan.actions:
            if action.kind not in ("preempt", "keep"):
                self._watch(jobs[action.job_id], plan.time)

    def _watch(self, job: ActiveJob, now: float) -> None:
        """Schedule the detection on a job whose workers include an active straggler."""
        if not self.mitigate or job.rate <= 0:
            return
        workers = self._workers(job)
        speeds = {f"{n}:{g}": self._speed((n, g)) for n, g in workers}
        if all(s >= 1.0 for s in speeds.values()):
            return
        batches, flagged = batches_to_detect(
            speeds, self.threshold, self.window, self.jitter, self.seed
        )
        if not flagged:
            return
        start = max(now, job.resume_time)
        detect_at = start + batches / job.rate
        gone = tuple(sorted((n, int(g)) for n, g in (w.rsplit(":", 1) for w in flagged)))
        self._push_internal(detect_at, ("detect", job.id, job.allocation, gone))

    def _internal(self, time: float, payload: object) -> None:
        self._t = time
        kind = payload[0]  # type: ignore[index]
        if kind == "slow":
            _, node, gpu = payload  # type: ignore[misc]
            for job in list(self._jobs_by_id.values()):
                alloc = job.allocation
                if job.status == "running" and alloc and gpu in alloc.placement.get(node, ()):
                    self._rerate_job(job, time)
                    self._watch(job, time)
        elif kind == "detect":
            _, job_id, alloc, gone = payload  # type: ignore[misc]
            job = self._jobs_by_id.get(job_id)
            if job is None or job.status != "running" or job.allocation != alloc:
                return
            self.detections.append(
                Detection(job_id, time, time + self.removal_s, gone, rate_before=job.rate)
            )
            self._push_internal(time + self.removal_s, ("remove", job_id, alloc, gone))
        elif kind == "remove":
            _, job_id, alloc, gone = payload  # type: ignore[misc]
            job = self._jobs_by_id.get(job_id)
            if job is None or job.status != "running" or job.allocation != alloc:
                return
            self.removed.setdefault(job_id, set()).update(gone)
            self._rerate_job(job, time)
            for det in reversed(self.detections):
                if det.job_id == job_id:
                    det.rate_after = job.rate
                    break

    def _rerate_job(self, job: ActiveJob, time: float) -> None:
        job.settle(time)
        self._close_segment(job.id, time)
        job.segment_start = time
        job.rate = self.true_rate(job)
        self._predict_completion(job)
