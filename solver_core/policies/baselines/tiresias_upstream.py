"""Tiresias-L as the Tiresias simulator runs it: whole-second events and queue reordering.

:class:`~.tiresias.TiresiasL` demotes a job at the exact instant its attained service crosses
a threshold and, inside a queue, runs running jobs before waiting ones in the order they
entered the queue. The upstream simulator (``SymbioticLab/Tiresias``, ``simulator/run_sim.py``,
``dlas_sim_jobs``; read, not copied) differs in three ways that move the average JCT once jobs
queue (2 x 4 GPUs, ``docs/results/fidelity.md``):

* **Events.** It checks demotion only at events: arrivals, completions and "queue jump"
  events. A jump is scheduled at ``now + (limit - executed_s) // gpus`` for a GPU-time queue
  (``now + limit - executed_s`` for a time queue), where ``executed_s`` is the job's executed
  wall seconds and ``//`` Python 2's integer division of two integers. The GPU-time formula
  mixes GPU-seconds with seconds, so a multi-GPU job's first check comes early, finds it not
  due, and schedules the next one; the demotion lands on a later whole second than the
  crossing. One event demotes a job by at most one queue. Demotion is
  ``int(executed_s x gpus) >= limit`` (``executed_s`` for a time queue), running jobs only,
  in arrival order, each to the tail of the next queue.
* **Order.** Each queue is a list walked as it stands (a job demoted while running sits behind
  the jobs already waiting there); after each pass the jobs left waiting move to the back of
  their queue, in their order, behind the jobs that run.
* **Walk.** Queues in order, each job granted its GPUs if they are free, skipped if not (the
  simulator's ``count`` bookkeeping: no placement constraint).

:class:`UpstreamMLFQ` is that loop as a shares stage: it keeps the queue lists between
decisions and wakes the engine at the simulator's jump times. A ``rank`` function turns it into
``dlas-gpu-gittins`` (:mod:`.gittins`): before each queue is walked it is sorted by rank,
highest first, then by submission time (a stable sort, so ties keep the queue's order), with
the rank of a job's attained GPU-seconds ``int(executed_s x gpus)`` taken at that event.

Executed seconds are the whole seconds a job has held GPUs (``floor``): the simulator's clock
is whole seconds, and on an integer trace with no overheads every event time here is whole too.
The simulator's starvation knob (``dlas-gpu-N``) is not ported: the stage takes none.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gpuplan.models import ActiveJob, ClusterView, SolverStats

from ...policy import Shares
from .tiresias import Service, SizeFn, requested_size

__all__ = ["UpstreamMLFQ"]

Rank = Callable[[int], float]
"""Attained service (whole GPU-seconds) -> priority inside a queue; higher runs first."""

_EPS = 1e-6  # seconds: a held time a hair below a whole second counts as that second


class UpstreamMLFQ:
    """Shares stage: the Tiresias simulator's multi-level feedback queue (``dlas``,
    ``dlas-gpu``, ``dlas-gpu-gittins``) with its event granularity and queue order."""

    def __init__(
        self,
        thresholds: tuple[float, ...],
        service: Service = "gpu_time",
        size: SizeFn = requested_size,
        rank: Rank | None = None,
    ) -> None:
        if service not in ("gpu_time", "time"):
            raise ValueError(f"service must be 'gpu_time' or 'time', got {service!r}")
        if any(t <= 0 for t in thresholds) or list(thresholds) != sorted(set(thresholds)):
            raise ValueError(f"thresholds must be positive and increasing, got {thresholds}")
        self.thresholds = tuple(float(t) for t in thresholds)
        self.service = service
        self.size = size
        self.rank = rank
        self.queues: list[list[str]] = [[] for _ in range(len(self.thresholds) + 1)]
        self._queue_of: dict[str, int] = {}
        self._arrival: dict[str, int] = {}  # order of entry into the system
        self._arrivals = 0
        self._jump: float | None = None  # the queue jump asked for last (None: none known)
        self._capacity: int | None = None
        self._stale = False  # the last decision was at no simulator event

    # ------------------------------------------------------------------ bookkeeping
    def queue_of(self, job_id: str) -> int | None:
        """Current queue of a known job (0 = highest priority), for inspection and tests."""
        return self._queue_of.get(job_id)

    def snapshot(self) -> dict[str, Any]:
        """The queue lists (their order is the policy's memory), the arrival order, and the
        pending queue jump with the capacity it was computed for (without them a restored
        stage would take the next stale wake-up for an event)."""
        return {
            "queues": [list(q) for q in self.queues],
            "arrival": dict(self._arrival),
            "arrivals": self._arrivals,
            "jump": self._jump,
            "capacity": self._capacity,
        }

    def restore(self, state: dict[str, Any]) -> None:
        queues = [[str(j) for j in q] for q in state.get("queues", [])]
        self.queues = [[] for _ in range(len(self.thresholds) + 1)]
        for i, q in enumerate(queues[: len(self.queues)]):
            self.queues[i] = q
        self._queue_of = {j: i for i, q in enumerate(self.queues) for j in q}
        self._arrival = {str(j): int(k) for j, k in state.get("arrival", {}).items()}
        self._arrivals = int(state.get("arrivals", len(self._arrival)))
        jump, capacity = state.get("jump"), state.get("capacity")
        self._jump = None if jump is None else float(jump)
        self._capacity = None if capacity is None else int(capacity)
        self._stale = False

    @staticmethod
    def executed_s(job: ActiveJob, now: float) -> int:
        """Whole seconds the job has held GPUs (the simulator's ``executed_time``)."""
        return math.floor(job.held_time_at(now) + _EPS)

    def _attained(self, job: ActiveJob, now: float, capacity: int) -> int:
        executed = self.executed_s(job, now)
        if self.service == "time":
            return executed
        return executed * self.size(job, capacity)

    def _sync(self, view: ClusterView) -> dict[str, ActiveJob]:
        """Forget finished jobs; append arrivals to Q0's tail in submission order."""
        jobs = {**view.running, **view.pending}
        gone = [j for j in self._queue_of if j not in jobs]
        if gone:
            drop = set(gone)
            for q in self.queues:
                q[:] = [j for j in q if j not in drop]
            for j in gone:
                del self._queue_of[j]
                self._arrival.pop(j, None)
        new = sorted(
            (j for j in jobs if j not in self._queue_of), key=lambda j: jobs[j].spec.submit_time
        )
        for job_id in new:
            self.queues[0].append(job_id)
            self._queue_of[job_id] = 0
            self._arrivals += 1
            self._arrival[job_id] = self._arrivals
        return jobs

    def _demote(self, view: ClusterView) -> None:
        """One queue down for each running job whose attained service reached its queue's
        limit, in arrival order, to the tail of the next queue."""
        last = len(self.thresholds)
        for job_id in sorted(view.running, key=lambda j: self._arrival.get(j, 0)):
            q = self._queue_of[job_id]
            if q >= last:
                continue
            job = view.running[job_id]
            if self._attained(job, view.now, view.capacity) >= self.thresholds[q]:
                self.queues[q].remove(job_id)
                self.queues[q + 1].append(job_id)
                self._queue_of[job_id] = q + 1

    # ------------------------------------------------------------------ the stage
    def _is_event(self, view: ClusterView) -> bool:
        """Whether the simulator has an event at ``view.now``: an arrival, a completion, a
        change of capacity, or the queue jump this stage asked for last. The engine keeps an
        earlier wake-up armed when a later one (or none) is asked for, and decides on events
        the simulator does not have (a start delay ending); the simulator recomputes its
        single jump time at every event, so a decision at any other time is no event."""
        if self._capacity is None or view.capacity != self._capacity:
            return True  # the first decision, or a changed cluster
        if self._jump is not None and view.now + _EPS >= self._jump:
            return True
        known = self._queue_of
        if any(j not in known for j in view.running) or any(j not in known for j in view.pending):
            return True
        return len(known) != len(view.running) + len(view.pending)

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        now, capacity = view.now, view.capacity
        if not self._is_event(view):
            self._stale = True
            return {j: job.gpus for j, job in view.running.items()}
        self._stale = False
        self._capacity = capacity
        jobs = self._sync(view)
        self._demote(view)
        free = capacity
        shares: Shares = {}
        for q, queue in enumerate(self.queues):
            if self.rank is not None:
                rank = {j: self.rank(self._attained(jobs[j], now, capacity)) for j in queue}
                queue.sort(key=lambda j: (-rank[j], jobs[j].spec.submit_time))
            waiting: list[str] = []
            running: list[str] = []
            for job_id in queue:
                need = self.size(jobs[job_id], capacity)
                if 0 < need <= free:
                    shares[job_id] = need
                    free -= need
                    running.append(job_id)
                else:
                    waiting.append(job_id)
            self.queues[q] = running + waiting
        return shares

    def next_wakeup(self, view: ClusterView) -> float | None:
        """The simulator's next queue-jump event: the earliest, over running jobs below the
        last queue, of ``now + (limit - executed_s) // gpus`` (GPU-time) or
        ``now + limit - executed_s`` (time); at least one second ahead (the simulator would
        loop forever on a zero step, so it never occurs in a run that ends there)."""
        if self._stale:  # no event: the simulator's jump time stands
            return self._jump if self._jump is not None and self._jump > view.now else None
        now, last = view.now, len(self.thresholds)
        best = math.inf
        for job_id, job in view.running.items():
            q = self._queue_of.get(job_id)
            if q is None or q >= last:
                continue
            left = self.thresholds[q] - self.executed_s(job, now)
            if self.service == "gpu_time":
                left = math.floor(left / max(1, self.size(job, view.capacity)))
            best = min(best, now + max(1.0, left))
        self._jump = None if best == math.inf else best
        return self._jump
