"""The progress/checkpoint core the real executors share (Slurm and SSH), held by composition.

Both real executors follow a job the same way: the training job (or the stand-in,
:mod:`gpuplan.executors.standin`) writes ``ID.progress`` (newest iteration count), ``ID.ckpt``
(what survives a stop) and ``ID.done`` (the end marker); every stop is a checkpoint-restart that
rewinds the engine's progress to the checkpoint and books the rest as lost work; unplanned
restarts are counted against a per-job budget; restart and start latencies are measured from the
first progress of a relaunched run and fed back to the engine as
``capabilities.restart_latency_s``; completions and failures reach the engine as events.

They differ only in how they reach the jobs (``sbatch``/``scontrol`` versus sidecars over SSH),
so each executor *holds* one :class:`ProgressCore` and keeps its own transport. The core never
talks to Slurm or SSH and owns no job state beyond the counters above: the executors keep their
own per-job records and call the core's public methods.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import statistics
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from gpuplan.models import ActiveJob, Event, JobCompletion, JobFailure, JobSpec
from gpuplan.solver_core.restart_gate import ChangeCosts

from .base import ExecutorCapabilities

STANDIN_SUFFIXES = {"progress": ".progress", "checkpoint": ".ckpt", "done": ".done", "log": ".log"}
"""The stand-in protocol's state files of one job (or rank), by role."""


def standin_paths(state_dir: str | Path, stem: str) -> dict[str, str]:
    """``{"progress": DIR/STEM.progress, "checkpoint": DIR/STEM.ckpt, "done": ..., "log": ...}``.

    ``stem`` must already be file-safe (each executor has its own escaping of engine ids)."""
    base = f"{state_dir}/{stem}"
    return {role: base + suffix for role, suffix in STANDIN_SUFFIXES.items()}


def read_state_file(path: str | Path) -> dict[str, Any] | None:
    """A state file's JSON object; None when it is missing, half-written or not an object."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def extrapolate(done: float, rate: float, elapsed_s: float) -> float:
    """Progress ``elapsed_s`` after a record of ``done`` iterations, at ``rate`` per second."""
    return done + rate * max(0.0, elapsed_s)


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean (``sum / len``, the Slurm executor's summary of its latencies)."""
    return sum(values) / len(values)


def mean_ms(values: Sequence[float]) -> float:
    """Mean rounded to the millisecond (the Slurm executor's reported restart latency)."""
    return round(mean(values), 3)


class ArrivalQueue:
    """Job specs handed to the engine at their ``submit_time`` (seconds of engine time).

    ``order`` sorts the specs once (stable); :meth:`due` hands out, in that order, every spec whose
    time has come."""

    def __init__(
        self, specs: Iterable[JobSpec], order: Callable[[JobSpec], Any] = lambda s: s.submit_time
    ) -> None:
        self._specs = sorted(specs, key=order)
        self._next = 0

    def due(self, now: float) -> list[JobSpec]:
        out: list[JobSpec] = []
        while self._next < len(self._specs) and self._specs[self._next].submit_time <= now:
            out.append(self._specs[self._next])
            self._next += 1
        return out

    def next_time(self) -> float | None:
        """Submit time of the next arrival (None when all arrived)."""
        return self._specs[self._next].submit_time if self else None

    def __bool__(self) -> bool:
        return self._next < len(self._specs)


class WakeTimers:
    """The engine's ``wake_at`` requests (engine times), fired in order."""

    def __init__(self) -> None:
        self._heap: list[float] = []

    def push(self, time: float) -> None:
        heapq.heappush(self._heap, time)

    def fire(self, now: float) -> bool:
        """Drop every request due at ``now``; True when at least one was due."""
        fired = False
        while self._heap and self._heap[0] <= now:
            heapq.heappop(self._heap)
            fired = True
        return fired

    def next_time(self) -> float | None:
        return self._heap[0] if self._heap else None

    def __bool__(self) -> bool:
        return bool(self._heap)


class ProgressCore:
    """Per-executor bookkeeping of measured progress (see the module docstring).

    * ``capabilities``: the executor's capabilities; ``restart_latency_s`` follows the measured
      restart latencies through ``restart_summary`` (median by default).
    * ``restart_latencies`` / ``start_latencies``: seconds from a stop (resp. a launch) to the
      relaunched run's first progress, as measured by the executor.
    * restart budget: :meth:`spend_restart` counts unplanned restarts per job;
      :meth:`over_budget` says when a job has used more than ``max_restarts``.
    * outcomes: :meth:`complete` / :meth:`fail` queue ``JobCompletion`` / ``JobFailure`` events
      (``failures`` keeps each failed job's reason); :meth:`drain` hands them out.
    """

    def __init__(
        self,
        capabilities: ExecutorCapabilities,
        *,
        max_restarts: int,
        restart_summary: Callable[[Sequence[float]], float] = statistics.median,
        start_summary: Callable[[Sequence[float]], float] = statistics.median,
    ) -> None:
        self.capabilities = capabilities
        self.max_restarts = max_restarts
        self.restart_summary = restart_summary
        self.start_summary = start_summary
        self.restart_latencies: list[float] = []
        self.start_latencies: list[float] = []
        self.change_costs = ChangeCosts()
        """The same latencies per job and kind of change, for the engine's restart gate."""
        self.failures: dict[str, str] = {}
        self._restarts: dict[str, int] = {}
        self._outbox: list[Event] = []

    # ------------------------------------------------------------------ latencies
    def record_restart_latency(
        self, seconds: float, job_id: str | None = None, kind: str = "resize"
    ) -> None:
        """A stop -> first progress of the relaunched run: what a resize costs the engine
        (and, with ``job_id``, what a ``kind`` change of that job costs the restart gate)."""
        if job_id is not None:
            self.change_costs.record(job_id, kind, seconds)
        self.restart_latencies.append(seconds)
        self.capabilities = dataclasses.replace(
            self.capabilities, restart_latency_s=self.restart_summary(self.restart_latencies)
        )

    def record_start_latency(self, seconds: float) -> None:
        """A launch -> first progress (no stop before it)."""
        self.start_latencies.append(seconds)

    def start_estimate(self, default: float) -> float:
        """Expected launch -> progress delay: measured if any, else ``default``."""
        return self.start_summary(self.start_latencies) if self.start_latencies else default

    # ------------------------------------------------------------------ restart budget
    def spend_restart(self, job_id: str) -> int:
        """Count one more unplanned restart of ``job_id``; returns how many it has used."""
        used = self._restarts.get(job_id, 0) + 1
        self._restarts[job_id] = used
        return used

    def restarts_of(self, job_id: str) -> int:
        return self._restarts.get(job_id, 0)

    def over_budget(self, job_id: str) -> bool:
        return self._restarts.get(job_id, 0) > self.max_restarts

    # ------------------------------------------------------------------ progress
    @staticmethod
    def rewind(job: ActiveJob, now: float, kept: float | None, reached: float) -> None:
        """A stop: settle ``job`` at ``now``, set its progress to the checkpoint ``kept`` (None:
        no checkpoint accounting, progress stays the model's) and book what it had ``reached``
        beyond that as lost work."""
        job.settle(now)
        if kept is not None:
            job.done = kept
            job.last_checkpoint_done = kept
        job.lost_work += max(0.0, reached - job.done)

    # ------------------------------------------------------------------ outcomes
    def complete(self, time: float, job_id: str) -> None:
        self._outbox.append(JobCompletion(time=time, job_id=job_id))

    def fail(self, time: float, job_id: str, reason: str) -> None:
        self.failures[job_id] = reason
        self._outbox.append(JobFailure(time=time, job_id=job_id, reason=reason))

    def has_events(self) -> bool:
        return bool(self._outbox)

    def drain(self) -> list[Event]:
        """The queued outcome events, oldest first (the queue is emptied)."""
        out, self._outbox = self._outbox, []
        return out
