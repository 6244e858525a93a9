"""The run recorder: what one engine run measured, read back by :func:`.metrics.run_result`.

The engine decides and keeps the books; everything it only *counts* lives here, so the loop
reads as a loop and the result's sources are in one place: finished records and refused
arrivals, the QL/CE/BI samples on their fixed grid, GPU-time integrated between events,
decision and solver latencies, and the counters of what was skipped, refused or degraded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuplan.models import ActiveJob, JobRecord, Sample, SolverStats

from .metrics import job_record, take_sample

__all__ = ["RunRecorder"]


class RunRecorder:
    """Counters, samples and records of one engine run."""

    __slots__ = (
        "_interval",
        "_next_sample",
        "decision_ms",
        "degraded_resizes",
        "events",
        "gpu_seconds_allocated",
        "gpu_seconds_capacity",
        "now",
        "plans_refused",
        "reclaim_log",
        "records",
        "rejected",
        "samples",
        "skipped_grows",
        "solver_calls",
        "solver_fallbacks",
        "solver_ms",
        "start_time",
    )

    def __init__(self, sample_interval_s: float | None) -> None:
        self._interval = sample_interval_s
        self._next_sample: float | None = None
        self.now: float | None = None
        """The time of the last event batch (None before the first)."""
        self.start_time: float | None = None
        self.events = 0
        self.records: list[JobRecord] = []
        """Finished and failed jobs, in the order they ended."""
        self.rejected: list[tuple[str, str]] = []
        """Arrivals refused: (job id, reason)."""
        self.samples: list[Sample] = []
        self.decision_ms: list[float] = []
        self.solver_calls = 0
        self.solver_fallbacks = 0
        self.solver_ms: list[float] = []
        self.gpu_seconds_allocated = 0.0
        self.gpu_seconds_capacity = 0.0
        self.skipped_grows = 0
        """Grows not carried out because their restart would cost more than they save."""
        self.plans_refused = 0
        """Policy plans the executor refused (each stops the run)."""
        self.degraded_resizes = 0
        """Resizes of a policy that wants them stop-free, carried out by a restart."""
        self.reclaim_log: list[tuple[float, list[str]]] = []
        """(time, servers) of every reclaim, in the reclaimer's order."""

    def advance(
        self,
        now: float,
        running: Mapping[str, ActiveJob],
        pending: Mapping[str, ActiveJob],
        allocated: float,
        capacity: int,
    ) -> None:
        """Move the clock to ``now``: take the samples due up to it (on the state before this
        batch of events) and add the GPU-time held and offered since the last batch."""
        last = self.now
        if last is None:
            last = self.now = self.start_time = now
            if self._interval:
                self._next_sample = now
        due = self._next_sample
        if due is not None and self._interval and due <= now:
            jobs = [*running.values(), *pending.values()]
            while due <= now:
                self.samples.append(take_sample(due, jobs, capacity))
                due += self._interval
            self._next_sample = due
        dt = now - last
        if dt > 0:
            self.gpu_seconds_allocated += allocated * dt
            self.gpu_seconds_capacity += capacity * dt
        self.now = now

    def decided(self, ms: float, stats: Sequence[SolverStats]) -> None:
        """One decision took ``ms`` and made the solver calls ``stats``."""
        self.decision_ms.append(ms)
        if stats:
            self.solver_calls += len(stats)
            self.solver_fallbacks += sum(1 for s in stats if s.fell_back)
            self.solver_ms.extend(s.wall_ms for s in stats)

    def finished(self, job: ActiveJob, failure: str | None = None) -> None:
        """``job`` ended now: completed, or failed for ``failure``."""
        record = job_record(job, self.now)
        if failure is not None:
            record = record.model_copy(update={"failed": True, "failure": failure})
        self.records.append(record)
