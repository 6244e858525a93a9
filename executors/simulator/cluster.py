"""A discrete-event simulated GPU cluster.

A heap of typed events (arrivals, predicted completions, timers, failures) — no fixed-step
ticking. Between events every running job progresses at a constant rate (its throughput on its
placement), so progress is integrated exactly as a piecewise-constant function.

Overheads (``Overheads``): a start, resize, migration or restart after preemption pauses the
job's progress for a configurable time while it keeps its GPUs. A preemption loses the work since
the job's last checkpoint (nothing if it checkpoints on signal; the tail since the last periodic
checkpoint if it checkpoints every ``interval_s``; everything if it never checkpoints).

A completion is predicted whenever a job's rate changes; a stale prediction is skipped by
comparing a per-job version number, so resizes never leave phantom completions behind.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuplan.models import (
    ActiveJob,
    AllocationPlan,
    Cluster,
    Event,
    JobArrival,
    JobCompletion,
    JobSpec,
    Overheads,
    Timer,
    placement_rate,
)

from ..base import Executor, ExecutorCapabilities

_COMPLETION, _ARRIVAL, _OTHER, _TIMER = 0, 1, 2, 3


@dataclass(slots=True)
class Segment:
    """One constant-rate stretch of a job's execution (recorded for invariant tests)."""

    job_id: str
    start: float
    end: float
    rate: float
    gpus: int


class SimulatedCluster(Executor):
    """The simulated executor. Feed it jobs (and optional external events), then run an Engine."""

    def __init__(
        self,
        cluster: Cluster,
        jobs: Iterable[JobSpec],
        overheads: Overheads | None = None,
        events: Iterable[Event] = (),
        record_segments: bool = False,
    ) -> None:
        self.cluster = cluster
        self.overheads = overheads or Overheads()
        mode = self.overheads.resize_mode
        self.capabilities = ExecutorCapabilities(
            resize="in_place" if mode == "stop_free" else "restart",
            pin_gpus=True,
            preempt_modes=("checkpoint", "kill"),
            restart_latency_s=self.overheads.resize_cost(),
            fractional_gpus=True,
        )
        self._heap: list[tuple[float, int, int, object]] = []
        self._seq = 0
        self._version: dict[str, int] = {}
        self.now = 0.0
        self.segments: list[Segment] | None = [] if record_segments else None
        self._open: dict[str, Segment] = {}
        for spec in jobs:
            self._push(spec.submit_time, _ARRIVAL, spec)
        for event in events:
            self._push(event.time, _OTHER, event)

    def _push(self, time: float, kind: int, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time, kind, self._seq, payload))

    # ------------------------------------------------------------------ events
    def next_events(self) -> tuple[float, list[Event]] | None:
        heap = self._heap
        while heap:
            time = heap[0][0]
            batch: list[Event] = []
            while heap and heap[0][0] == time:
                _, kind, _, payload = heapq.heappop(heap)
                if kind == _COMPLETION:
                    job_id, version = payload  # type: ignore[misc]
                    if self._version.get(job_id) != version:
                        continue
                    self._close_segment(job_id, time)
                    batch.append(JobCompletion.model_construct(time=time, kind="completion",
                                                               job_id=job_id))
                elif kind == _ARRIVAL:
                    batch.append(JobArrival.model_construct(time=time, kind="arrival",
                                                            job=payload))
                elif kind == _TIMER:
                    batch.append(Timer.model_construct(time=time, kind="timer", name="round"))
                else:
                    batch.append(payload)  # type: ignore[arg-type]
            if batch:
                self.now = time
                return time, batch
        return None

    def wake_at(self, time: float) -> None:
        self._push(time, _TIMER, None)

    # ------------------------------------------------------------------ actions
    def apply(self, plan: AllocationPlan, jobs: Mapping[str, ActiveJob]) -> None:
        now = plan.time
        ov = self.overheads
        for action in plan.actions:
            job = jobs[action.job_id]
            kind = action.kind
            if kind == "keep":
                continue
            if kind == "preempt":
                self._stop(job, now, graceful=True)
                continue
            if kind == "start":
                pause = ov.start_s if job.preemptions == 0 else ov.restart_s
            elif kind == "resize":
                pause = ov.resize_cost()
                if ov.resize_mode != "stop_free":
                    job.last_checkpoint_done = job.done
            else:  # migrate
                pause = ov.migrate_s
                job.last_checkpoint_done = job.done
            self._close_segment(job.id, now)
            job.rate = placement_rate(job.spec, self.cluster, job.allocation)
            job.resume_time = now + pause
            job.segment_start = now
            self._predict_completion(job)

    def evict(self, job: ActiveJob, now: float, graceful: bool) -> None:
        self._stop(job, now, graceful)

    def _stop(self, job: ActiveJob, now: float, graceful: bool) -> None:
        """Take a job off its GPUs, rolling progress back to its last checkpoint."""
        self._close_segment(job.id, now)
        ck = job.spec.checkpoint
        ran_since = max(job.segment_start, job.resume_time)
        if graceful and ck.on_signal:
            loss = 0.0
        elif ck.interval_s is not None:
            run = max(0.0, now - ran_since)
            loss = job.rate * (run % ck.interval_s)
        else:
            loss = job.done - job.last_checkpoint_done
        loss = min(loss, job.done - job.last_checkpoint_done)
        if loss > 0:
            job.done -= loss
            job.lost_work += loss
        job.last_checkpoint_done = job.done
        job.rate = 0.0
        self._version[job.id] = self._version.get(job.id, 0) + 1

    def _predict_completion(self, job: ActiveJob) -> None:
        version = self._version.get(job.id, 0) + 1
        self._version[job.id] = version
        if job.rate <= 0.0:
            return
        start = max(job.anchor_time, job.resume_time)
        finish = start + (job.spec.work - job.done) / job.rate
        self._push(finish, _COMPLETION, (job.id, version))
        if self.segments is not None:
            self._open[job.id] = Segment(job.id, start, finish, job.rate, job.gpus)

    def _close_segment(self, job_id: str, now: float) -> None:
        if self.segments is None:
            return
        seg = self._open.pop(job_id, None)
        if seg is not None:
            seg.end = max(seg.start, now)
            self.segments.append(seg)
