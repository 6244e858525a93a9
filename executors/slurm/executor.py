"""SlurmExecutor: carries out gpuplan's plans on a real Slurm cluster.

The engine decides *how many GPUs on which nodes*; Slurm enforces it. Every engine job is one
Slurm batch job for its whole life (same job id across preemptions and resizes), which keeps
accounting, ``squeue`` and the site's tooling coherent.

Mapping of plan actions (all verified on Slurm 22.05, see ``docs/slurm.md``):

* ``start`` of a new job: ``sbatch --hold --requeue --nodes=k --nodelist=... --gres=gpu:T:g``
  (or ``--gpus=T:n`` when the per-node counts differ) ``--comment=gpuplan:...`` then
  ``scontrol release``. Submitting held keeps one protocol whether or not the site's
  job_submit hook also holds engine jobs.
* ``preempt``: checkpoint signal (``scancel --signal=USR1 --full``), wait until the job has
  exited, ``scontrol requeuehold`` (back to PENDING, held, same id), wait for PENDING.
* ``resize`` / ``migrate``: the same stop, then ``scontrol update NumNodes=k-k NodeList=...
  TresPerNode=...`` on the pending job, then ``StartTime=now`` and ``release``. Slurm cannot grow
  a running GPU job and cannot change GPUs per node of a running job, so every resize is a
  checkpoint-restart (``capabilities.resize == "restart"``).
* ``start`` of a preempted job: update the shape and release it.

Timing pitfalls handled here (observed in the lab, integration notes §2.6/§3):

* a job must have *left* RUNNING before it is updated (updates of a COMPLETING job fail), so we
  wait for the checkpoint exit and then for PENDING;
* a requeued job released within the same second as its old credential was revoked is killed
  ("Job credential revoked"): we wait ``requeue_guard_s`` (1.1 s) after the stop before release;
* a requeued job is not eligible before ``cred_expire`` (120 s by default) unless its
  ``StartTime`` is set to now, which we do right before the release.

Observation: ``squeue --json`` and ``sinfo --json`` every ``poll_interval_s``, plus the job's
state files. With the stand-in protocol (``protocol="standin"``) a job is complete when its
``DIR/KEY.done`` marker appears, its progress comes from ``DIR/KEY.progress`` and what survives a
stop from ``DIR/KEY.ckpt``; with ``protocol="exit"`` (any command) a job is complete when Slurm
reports it COMPLETED without the engine having stopped it, and progress is the engine's estimate.

Structure: this module is the :class:`~gpuplan.executors.base.Executor` (event loop, plan
actions, observation of nodes and jobs); :mod:`.jobs` carries out the Slurm protocol on each
tracked job; :mod:`.launch` builds what a job runs; :mod:`.records` holds the records; progress
accounting, restart budget, latencies and outcome events live in the shared
:class:`~gpuplan.executors.progress_core.ProgressCore`, which this executor holds.

Nothing is ever run through a shell: ``sbatch`` gets an argument list and the batch script is a
fixed two-line launcher (``exec "$@"``) that passes the job's argv through unchanged.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from gpuplan.models import (
    ActiveJob,
    AllocationPlan,
    Cluster,
    Event,
    JobArrival,
    JobSpec,
    NodeFailure,
    NodeRecovery,
    Timer,
)

from ..base import Executor, ExecutorCapabilities
from ..progress_core import ArrivalQueue, ProgressCore, WakeTimers, mean, mean_ms
from .cli import ControllerUnavailable, SlurmCli, SlurmError, SlurmJob
from .jobs import ShapeHook, SlurmJobs, StopGuard
from .launch import (
    COMMENT_TAG,
    LAUNCHER,
    STANDIN_MODULE,
    CommandBuilder,
    LaunchContext,
    cluster_from_slurm,
    file_key,
    job_name,
    parse_comment,
    standin_command,
)
from .records import ActionRecord, JobShape, Segment, TrackedJob
from .wake import Wake

WAKE_CHECK_S = 0.1
"""How often the idle loop looks at the wake file (a ``stat``): the added delay after a job's
end, against ``poll_interval_s`` without it."""
WAKE_MIN_GAP_S = 0.25
"""Least time between two polls that wake-ups cause: however often the file changes (a burst
of job ends, or anyone able to write it), Slurm sees at most four extra polls a second."""

__all__ = [
    "COMMENT_TAG",
    "LAUNCHER",
    "STANDIN_MODULE",
    "ActionRecord",
    "CommandBuilder",
    "JobShape",
    "LaunchContext",
    "Segment",
    "SlurmExecutor",
    "TrackedJob",
    "cluster_from_slurm",
    "file_key",
    "job_name",
    "parse_comment",
    "standin_command",
]

log = logging.getLogger(__name__)

PollHook = Callable[[float], list[Event]]
"""Called after every poll with the engine time; its events are delivered with the poll's."""


class SlurmExecutor(Executor):
    """Executor over a Slurm cluster reached through :class:`SlurmCli`.

    ``jobs`` arrive at ``submit_time`` seconds after the first :meth:`next_events` call (wall
    clock). ``state_dir`` must be visible to the submit host and the nodes (shared file system at
    a site; any directory in the single-machine lab).

    Hooks for a daemon that drives jobs it did not submit (:mod:`gpuplan.executors.control`):
    ``epoch`` fixes the engine clock's origin (wall time), ``on_poll`` adds events after every
    poll, ``shape_hook`` adjusts the Slurm shape of an allocation, ``stop_guard`` wraps every
    checkpoint-stop, ``until`` replaces the end test (the run ends when it returns True), and
    ``wake`` (a :class:`~.wake.WakeFile` that Slurm's ``EpilogSlurmctld`` rewrites, or several
    sources in a :class:`~.wake.AnyWake`, e.g. with the controller's arrival probe) makes the
    next poll happen as soon as a job ends (or arrives) instead of at the next interval.
    """

    def __init__(
        self,
        cluster: Cluster,
        jobs: Iterable[JobSpec] = (),
        *,
        cli: SlurmCli,
        state_dir: str | Path,
        command: CommandBuilder | None = None,
        protocol: Literal["standin", "exit"] = "standin",
        partition: str | None = None,
        poll_interval_s: float = 0.5,
        stop_timeout_s: float = 20.0,
        requeue_guard_s: float = 1.1,
        checkpoint_signal: str = "USR1",
        max_wall_s: float = 900.0,
        run_tag: str | None = None,
        extra_sbatch: Sequence[str] = (),
        max_unplanned_restarts: int = 3,
        epoch: float | None = None,
        on_poll: PollHook | None = None,
        shape_hook: ShapeHook | None = None,
        stop_guard: StopGuard | None = None,
        until: Callable[[], bool] | None = None,
        wake: Wake | None = None,
        read_jobs: Callable[[list[int]], list[SlurmJob]] | None = None,
        on_quiet_poll: Callable[[float], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.cli = cli
        self.state_dir = Path(state_dir).resolve()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.command = command or standin_command()
        self.protocol = protocol
        self.poll_interval_s = poll_interval_s
        self.max_wall_s = max_wall_s
        self.run_tag = run_tag or hashlib.sha256(str(time.time()).encode()).hexdigest()[:8]
        self.core = ProgressCore(
            ExecutorCapabilities(
                resize="restart",
                pin_gpus=False,
                preempt_modes=("checkpoint", "requeue"),
                restart_latency_s=3.0,
            ),
            max_restarts=max_unplanned_restarts,
            restart_summary=mean_ms,
            start_summary=mean,
        )
        self.launcher = self.state_dir / "gpuplan-launch.sh"
        self.launcher.write_text(LAUNCHER)
        self.launcher.chmod(0o755)
        self.on_poll = on_poll
        self.until = until
        self.wake = wake
        self.read_jobs = read_jobs
        """How a poll reads the running jobs' records (default ``cli.jobs(ids)``): the
        controller passes one read of every job, which its discovery then reuses, so a poll
        costs one ``squeue`` instead of two."""
        self.on_quiet_poll = on_quiet_poll
        """Called with its wall seconds after a poll that produced no events (so an owner that
        times its cycles also sees the polls that decided nothing)."""
        self.batch_poll_s: float | None = None
        """Wall seconds of the poll (Slurm reads and ``on_poll``) that produced the batch
        :meth:`next_events` last returned; None when that batch came without a poll."""

        self._arrivals = ArrivalQueue(jobs)
        self._timers = WakeTimers()
        self._epoch = epoch
        self._next_poll = self._last_poll = 0.0
        self._node_up: dict[str, bool] = {n.name: True for n in cluster.nodes}
        self.jobs = SlurmJobs(
            cli,
            cluster,
            self.core,
            state_dir=self.state_dir,
            launcher=self.launcher,
            command=self.command,
            protocol=protocol,
            partition=partition,
            stop_timeout_s=stop_timeout_s,
            requeue_guard_s=requeue_guard_s,
            checkpoint_signal=checkpoint_signal,
            run_tag=self.run_tag,
            extra_sbatch=list(extra_sbatch),
            clock=self.now,
            to_engine=self._to_engine,
            node_up=self._node_up,
            shape_hook=shape_hook,
            stop_guard=stop_guard,
        )
        self.actions: list[ActionRecord] = []

    # ------------------------------------------------------------------ what the core measures
    @property
    def capabilities(self) -> ExecutorCapabilities:  # type: ignore[override]
        """Capabilities; ``restart_latency_s`` is the mean measured restart latency."""
        return self.core.capabilities

    @property
    def segments(self) -> list[Segment]:
        return self.jobs.segments

    @property
    def failures(self) -> dict[str, str]:
        return self.core.failures

    @property
    def restart_latencies(self) -> list[float]:
        return self.core.restart_latencies

    @property
    def start_latencies(self) -> list[float]:
        return self.core.start_latencies

    @property
    def unavailable_polls(self) -> int:
        """Polls and commands that found slurmctld unavailable."""
        return self.jobs.unavailable_polls

    # ------------------------------------------------------------------ clock
    def now(self) -> float:
        """Engine time: wall seconds since the first :meth:`next_events` call."""
        if self._epoch is None:
            return 0.0
        return time.time() - self._epoch

    def _to_engine(self, wall: float) -> float:
        return wall - (self._epoch or wall)

    # ------------------------------------------------------------------ Executor interface
    def wake_at(self, time_: float) -> None:
        self._timers.push(time_)

    def next_events(self) -> tuple[float, list[Event]] | None:
        if self._epoch is None:
            self._epoch = time.time()
        deadline = self._epoch + self.max_wall_s
        while True:
            now = self.now()
            events: list[Event] = self.core.drain()
            for spec in self._arrivals.due(now):
                self.jobs.track_spec(spec)
                events.append(JobArrival(time=now, job=spec))
            polled: float | None = None
            if time.time() >= self._next_poll:
                self._last_poll = time.time()
                t0 = time.perf_counter()
                events.extend(self._poll(now))
                polled = time.perf_counter() - t0
                self._next_poll = time.time() + self.poll_interval_s
            if self._timers.fire(now) and not any(isinstance(e, Timer) for e in events):
                events.append(Timer(time=now))
            if events:
                self.jobs.sync_all(now)
                self.batch_poll_s = polled
                return now, events
            if polled is not None and self.on_quiet_poll is not None:
                self.on_quiet_poll(polled)
            if self._all_done():
                return None
            if time.time() > deadline:
                unfinished = sorted(j for j, t in self.jobs.tracked.items() if not t.completed)
                raise SlurmError(
                    f"run exceeded max_wall_s={self.max_wall_s:g}; unfinished jobs: {unfinished}"
                )
            due = self._next_poll
            arrival, timer = self._arrivals.next_time(), self._timers.next_time()
            if arrival is not None:
                due = min(due, self._epoch + arrival)
            if timer is not None:
                due = min(due, self._epoch + timer)
            self._idle(max(0.01, min(self.poll_interval_s, due - time.time())))

    def _idle(self, pause: float) -> None:
        """Sleep ``pause`` seconds; with a wake source, poll at once when it says so. Returns
        early when ``until`` turns True (a SIGTERM'd controller with a long ``--interval``
        must not sleep out the interval before exiting)."""
        if self.wake is None:
            time.sleep(pause)
            return
        end = time.time() + pause
        until = self.until
        while not self.wake.changed():
            left = end - time.time()
            if left <= 0 or (until is not None and until()):
                return
            time.sleep(min(WAKE_CHECK_S, left))
        self._next_poll = min(self._next_poll, max(time.time(), self._last_poll + WAKE_MIN_GAP_S))

    def _all_done(self) -> bool:
        """No arrivals left and every job finished *in the engine* (a completion the engine
        ignored, e.g. for a job it had just preempted, is delivered again on its next start).

        A job the engine never planned although nothing runs and every node is up was rejected
        by it (e.g. larger than the cluster): waiting for it would only end at ``max_wall_s``.
        With ``until`` set, that alone decides.
        """
        if self.until is not None:
            return self.until()
        if self._arrivals or self.core.has_events():
            return False
        idle = not any(t.running for t in self.jobs.tracked.values()) and all(
            self._node_up.values()
        )
        for t in self.jobs.tracked.values():
            if t.job is None:
                if not idle:
                    return False
            elif not (t.completed and t.job.status == "finished"):
                return False
        return True

    def apply(self, plan: AllocationPlan, jobs: Mapping[str, ActiveJob]) -> None:
        t0 = time.time()
        stops: list[tuple[TrackedJob, str]] = []
        relaunch: list[tuple[TrackedJob, str, int]] = []
        for action in plan.actions:
            if action.kind == "keep":
                continue
            job = jobs[action.job_id]
            tracked = self.jobs.track(job)
            before = action.gpus_before
            if action.kind == "start":
                relaunch.append((tracked, "start", before))
            else:
                stops.append((tracked, action.kind))
                if action.kind != "preempt":
                    relaunch.append((tracked, action.kind, before))
        if stops:
            self.jobs.stop(
                [t for t, _ in stops],
                plan.time,
                graceful=True,
                reasons={t.spec.id: k for t, k in stops},
            )
        for tracked, kind, _ in relaunch:
            if tracked.job is None:
                continue
            if tracked.completed:
                # It finished while stopped (its last checkpoint was the end): report again now
                # that the engine holds it as running, instead of launching it.
                self.core.complete(self.now(), tracked.spec.id)
                continue
            if tracked.job.status != "running" or tracked.job.allocation is None:
                continue
            self.jobs.prepare(tracked, tracked.job.allocation, kind)
        self.jobs.release(
            {
                t.spec.id: (t, k)
                for t, k, _ in relaunch
                if t.job is not None
                and not t.completed
                and t.job.status == "running"
                and t.job.allocation is not None
            }
        )
        took = time.time() - t0
        for action in plan.actions:
            if action.kind == "keep":
                continue
            tracked = self.jobs.tracked[action.job_id]
            self.actions.append(
                ActionRecord(
                    time=plan.time,
                    kind=action.kind,
                    job_id=action.job_id,
                    slurm_id=tracked.slurm_id,
                    gpus_before=action.gpus_before,
                    gpus_after=action.gpus_after,
                    seconds=took,
                )
            )

    def evict(self, job: ActiveJob, now: float, graceful: bool) -> None:
        tracked = self.jobs.track(job)
        self.jobs.stop([tracked], now, graceful=graceful, reasons={job.id: "evict"})
        self.actions.append(
            ActionRecord(
                time=now,
                kind="evict",
                job_id=job.id,
                slurm_id=tracked.slurm_id,
                gpus_before=job.gpus,
                gpus_after=0,
                seconds=0.0,
            )
        )

    # ------------------------------------------------------------------ bookkeeping
    def _poll(self, now: float) -> list[Event]:
        """Observe nodes and running jobs, then ask ``on_poll`` for more events."""
        events = self._observe(now)
        if self.on_poll is not None:
            events.extend(self.on_poll(now))
        return events

    def _observe(self, now: float) -> list[Event]:  # noqa: C901 (a named exception to the complexity gate)
        """Node up/down changes as events; finished, cancelled and unplanned-stopped jobs."""
        events: list[Event] = []
        try:
            nodes = self.cli.nodes()
        except ControllerUnavailable:
            self.jobs.unavailable_polls += 1
            nodes = []
        for node in nodes:
            if node.name not in self._node_up:
                continue
            up = node.usable
            if up != self._node_up[node.name]:
                self._node_up[node.name] = up
                if up:
                    events.append(NodeRecovery(time=now, node=node.name))
                else:
                    events.append(NodeFailure(time=now, node=node.name))
        running = [t for t in self.jobs.tracked.values() if t.running and t.slurm_id is not None]
        if not running:
            return events
        for tracked in running:
            if self.jobs.reached_end(tracked):
                self.jobs.finish(tracked, "completed")
        running = [t for t in running if not t.completed]
        try:
            read = self.read_jobs or self.cli.jobs
            state = {j.job_id: j for j in read([t.slurm_id for t in running])}  # type: ignore[misc]
        except ControllerUnavailable:
            self.jobs.unavailable_polls += 1
            state = {}
        for tracked in running:
            sj = state.get(tracked.slurm_id)  # type: ignore[arg-type]
            if sj is None:
                continue
            if sj.state == "RUNNING" and sj.restart_count > tracked.restart_count:
                tracked.restart_count = sj.restart_count
            if sj.finished:
                exited_ok = (
                    self.protocol == "exit" and sj.state == "COMPLETED" and (sj.exit_code or 0) == 0
                )
                if self.jobs.reached_end(tracked) or exited_ok:
                    self.jobs.finish(tracked, "completed")
                elif sj.state == "CANCELLED":
                    self.core.failures[tracked.spec.id] = "cancelled outside the engine"
                    self.jobs.finish(tracked, "cancelled")
                else:
                    self.jobs.unplanned_stop(tracked, sj, now)
            elif sj.state == "PENDING" and sj.restart_count > tracked.restart_count:
                # Slurm requeued it by itself (node failure with --requeue): keep control.
                self.jobs.unplanned_stop(tracked, sj, now)
        events.extend(self.core.drain())
        self.jobs.sync_all(now)  # every poll, so rates and latencies are measured when they happen
        return events

    # ------------------------------------------------------------------ reporting
    def segments_of(self, job_id: str) -> list[Segment]:
        """The runs of one job, in order."""
        return [s for s in self.segments if s.job_id == job_id]

    def slurm_id(self, job_id: str) -> int | None:
        """The Slurm job id of an engine job (None before its first start)."""
        tracked = self.jobs.tracked.get(job_id)
        return tracked.slurm_id if tracked else None

    def cancel_all(self) -> None:
        """Cancel every Slurm job this executor submitted (cleanup after an aborted run)."""
        for tracked in self.jobs.tracked.values():
            if tracked.slurm_id is not None and not tracked.completed:
                try:
                    self.cli.cancel(tracked.slurm_id)
                except SlurmError as err:
                    log.info("cancel %s: %s", tracked.slurm_id, err)
