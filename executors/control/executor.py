"""ControllerExecutor: the Slurm executor, composed for jobs users submitted, with a journal.

The controller never submits: it adopts held (or running) Slurm jobs, and every action on them
is journaled as an intent before it is carried out and settled after, so a restarted controller
can finish or undo what a crash interrupted (``docs/controller.md``). The Slurm protocol itself
(reshape a pending job, release it, checkpoint-stop + ``requeuehold``) is the
:class:`~gpuplan.executors.slurm.executor.SlurmExecutor`'s, held here and driven only through
its public API and hooks (``epoch``, ``on_poll``, ``shape_hook``, ``stop_guard``, ``until``).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.models import (
    ActiveJob,
    AllocationPlan,
    Cluster,
    Event,
    GpuplanError,
    JobAllocation,
    JobSpec,
)

from ..base import Executor, ExecutorCapabilities
from ..slurm.cli import SlurmCli, SlurmJob
from ..slurm.executor import LaunchContext, SlurmExecutor, file_key
from ..slurm.records import JobShape, TrackedJob, shape_counts
from ..slurm.wake import AnyWake, SubmitProbe, Wake, WakeFile
from .failpoints import Failpoints
from .journal import ActionIntent, Journal
from .markers import allocation_counts, requested_type, slurm_shape


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """What ``gpuplan slurm-controller`` was started with (times in seconds)."""

    policy: str
    state_db: Path
    partitions: tuple[str, ...] = ()
    interval_s: float = 2.0
    heartbeat: Path | None = None
    """Default: ``<state_db>.heartbeat``."""
    default_duration_s: float = 3600.0
    stop_timeout_s: float = 60.0
    """How long a job may take to checkpoint and exit after the signal before it is requeued
    (killed) anyway."""
    max_stall_s: float = 600.0
    """The heartbeat stops when the main loop has not come round for this long, so a wedged
    controller fails open like a dead one."""
    error_backoff_s: float = 5.0
    retention_days: float = 14.0
    seed: int = 0
    """Seed of the policy's random choices (AFS-P's coin, Themis' leftovers)."""
    restart_gate: bool = True
    """Carry out a resize, move or preemption only when its predicted gain exceeds its measured
    cost (docs/algorithms/restart-gate.md); ``--no-restart-gate`` carries out every plan."""
    wake_file: Path | None = None
    """File that Slurm's ``EpilogSlurmctld`` (the shipped ``epilog_wake.sh``) rewrites when a
    job ends; a change makes the controller poll at once (:mod:`gpuplan.executors.slurm.wake`)."""
    arrival_check_s: float = 0.25
    """Between polls, look this often at slurmctld's count of submitted jobs (``sdiag``) and
    poll at once when it moved, so a new job's first decision does not wait for the next
    poll (:class:`~gpuplan.executors.slurm.wake.SubmitProbe`); 0: no look."""
    http_port: int | None = None
    """``--http``: serve ``/metrics``, the live page and ``/state.json`` on this port (0: any
    free one, logged); None: no HTTP endpoint (:mod:`.http_server`)."""
    http_bind: str = "127.0.0.1"
    """``--http-bind``: the address the endpoint listens on."""

    @property
    def heartbeat_path(self) -> Path:
        return self.heartbeat or self.state_db.with_name(self.state_db.name + ".heartbeat")

    @property
    def work_dir(self) -> Path:
        return self.state_db.with_name(self.state_db.name + ".d")


PROBE_TIMEOUT_S = 2.0
"""Bound of one look of the arrival probe (``sdiag``): a slurmctld that does not answer delays
the idle loop's next poll or wake-up by at most this much per look (and after a few failed
looks the probe rests, :class:`~gpuplan.executors.slurm.wake.SubmitProbe`)."""


def never_submit(ctx: LaunchContext) -> list[str]:
    """The controller's command builder: adopted jobs already have their command."""
    raise GpuplanError(f"the controller never submits jobs (asked for {ctx.spec.id!r})")


class ControllerExecutor(Executor):
    """A :class:`SlurmExecutor` for jobs users submitted (the controller adopts, never submits).

    Adds: adoption of existing Slurm jobs (pending or running), journaled intents/outcomes
    around every action, discovery of new and cancelled jobs on each poll, keeping the job's own
    GPU-type form (22.05 refuses to turn an untyped ``gres:gpu:2`` into ``gres:gpu:a100:3``),
    and no end: it runs until :meth:`shutdown`.

    It holds the :class:`SlurmExecutor` (``self.slurm``) and its job records (``self.jobs``)
    and uses only their public methods and hooks.
    """

    def __init__(
        self,
        cluster: Cluster,
        *,
        cli: SlurmCli,
        journal: Journal,
        run_id: int,
        settings: ControllerSettings,
        failpoints: Failpoints,
        on_poll: Callable[[float], list[Event]] | None = None,
        read_jobs: Callable[[list[int]], list[SlurmJob]] | None = None,
        on_quiet_poll: Callable[[float], None] | None = None,
    ) -> None:
        settings.work_dir.mkdir(parents=True, exist_ok=True)
        self.cli = cli
        self.journal = journal
        self.run_id = run_id
        self.settings = settings
        self.failpoints = failpoints
        self._typed: dict[str, bool] = {}
        self._shutdown = False
        self.plans = 0
        self.last_epoch: int | None = None
        """The journal epoch of the latest plan carried out (its actions get their reasons)."""
        self.apply_s = 0.0
        """Wall seconds spent carrying out plans and evictions (journal intents and Slurm
        writes) since the controller last zeroed it (its per-cycle timing)."""
        self.arrivals: SubmitProbe | None = None
        """The arrival probe (None with ``arrival_check_s`` 0); its ``wakes`` count is logged."""
        self.slurm = SlurmExecutor(
            cluster,
            (),
            cli=cli,
            state_dir=settings.work_dir,
            command=never_submit,
            protocol="exit",
            poll_interval_s=settings.interval_s,
            stop_timeout_s=settings.stop_timeout_s,
            max_wall_s=float("inf"),
            run_tag="controller",
            epoch=journal.origin,  # one engine clock across controller restarts
            on_poll=on_poll,
            shape_hook=self._keep_untyped,
            stop_guard=self._journaled_stop,
            until=lambda: self._shutdown,
            wake=self._wake(settings),
            read_jobs=read_jobs,
            on_quiet_poll=on_quiet_poll,
        )
        self.jobs = self.slurm.jobs

    def _wake(self, settings: ControllerSettings) -> Wake | None:
        """What wakes the idle loop between polls: the epilog's wake file (a job ended) and
        the arrival probe (a job was submitted)."""
        sources: list[Wake] = []
        if settings.wake_file is not None:
            sources.append(WakeFile(settings.wake_file))
        if settings.arrival_check_s > 0:
            # Its own client with a short timeout: a hung look must not hold the idle loop.
            probe_cli = SlurmCli(self.cli.env, timeout=PROBE_TIMEOUT_S, bindir=self.cli.bindir)
            self._probe_cli = probe_cli
            self.arrivals = SubmitProbe(lambda: probe_cli.run(["sdiag"]), settings.arrival_check_s)
            sources.append(self.arrivals)
        return AnyWake(*sources) if sources else None

    @property
    def probe_calls(self) -> int:
        """``sdiag`` commands the arrival probe ran (0 without a probe)."""
        probe = getattr(self, "_probe_cli", None)
        return probe.calls if probe is not None else 0

    # ------------------------------------------------------------------ Executor interface
    @property
    def capabilities(self) -> ExecutorCapabilities:  # type: ignore[override]
        return self.slurm.capabilities

    def now(self) -> float:
        """Engine time (seconds since the journal's origin)."""
        return self.slurm.now()

    def next_events(self) -> tuple[float, list[Event]] | None:
        return self.slurm.next_events()

    def wake_at(self, time: float) -> None:
        self.slurm.wake_at(time)

    def evict(self, job: ActiveJob, now: float, graceful: bool) -> None:
        t0 = time.perf_counter()
        try:
            self.slurm.evict(job, now, graceful)
        finally:
            self.apply_s += time.perf_counter() - t0

    # ------------------------------------------------------------------ lifecycle
    def shutdown(self) -> None:
        """Stop handing out events: :meth:`next_events` returns None at its next check."""
        self._shutdown = True

    # ------------------------------------------------------------------ adoption
    def tracked(self, eid: str) -> TrackedJob | None:
        return self.jobs.tracked.get(eid)

    def tracked_ids(self) -> list[str]:
        return list(self.jobs.tracked)

    def adopt_pending(self, spec: JobSpec, sj: SlurmJob, *, stopped_at: float = 0.0) -> TrackedJob:
        """Track a held Slurm job the engine will start (``prepare`` updates its shape,
        ``release`` sets ``StartTime=now`` and releases it)."""
        tracked = self.jobs.track_spec(spec)
        tracked.spec = spec
        tracked.slurm_id = sj.job_id
        tracked.running = False
        tracked.completed = False
        # StartTime=now before release: harmless for a never-run job, and a requeued one would
        # otherwise wait cred_expire (120 s by default).
        tracked.requeued = True
        tracked.stopped_at = max(tracked.stopped_at, stopped_at)
        tracked.restart_count = sj.restart_count
        self._typed[spec.id] = requested_type(sj) is not None
        return tracked

    def adopt_running(self, job: ActiveJob, sj: SlurmJob) -> TrackedJob:
        """Track a job that runs in Slurm as running (no restart)."""
        shape = slurm_shape(sj)
        counts = set(shape.values())
        typed = requested_type(sj)
        tracked = self.jobs.tracked[job.id] = TrackedJob(spec=job.spec, key=file_key(job.id))
        tracked.job = job
        tracked.slurm_id = sj.job_id
        tracked.shape = JobShape(
            nodes=tuple(sorted(shape)),
            per_node=counts.pop() if len(counts) == 1 else None,
            total=sum(shape.values()),
            gpu_type=typed,
        )
        tracked.running = True
        tracked.restart_count = sj.restart_count
        self._typed[job.id] = typed is not None
        return tracked

    def stop_now(self, spec: JobSpec, sj: SlurmJob, reason: str) -> TrackedJob:
        """Checkpoint-stop a job outside any plan and leave it held and pending (the executor's
        own stop: signal, wait for the exit, ``requeuehold``, wait for PENDING)."""
        tracked = self.adopt_pending(spec, sj)
        tracked.running = True
        tracked.requeued = False
        self.jobs.stop([tracked], self.now(), graceful=True, reasons={spec.id: reason})
        return tracked

    def forget(self, eid: str, reason: str) -> None:
        """The job left the engine's hands (cancelled, vanished): stop watching it."""
        tracked = self.jobs.tracked.get(eid)
        if tracked is not None:
            tracked.completed = True
            tracked.running = False
        self.slurm.failures[eid] = reason

    def _keep_untyped(self, alloc: JobAllocation, shape: JobShape) -> JobShape:
        """A job that asked for untyped GPUs keeps an untyped request (22.05 refuses to turn
        ``gres:gpu:2`` into ``gres:gpu:a100:3``)."""
        if not self._typed.get(alloc.job_id, True) and shape.gpu_type is not None:
            shape = dataclasses.replace(shape, gpu_type=None)
        return shape

    # ------------------------------------------------------------------ journaled actions
    def _restart_counts(self, eids: Iterable[str]) -> dict[str, int]:
        """Slurm's restart_cnt right now for the jobs about to be stopped: the reference a
        restarted controller compares against to know whether the stop got as far as the
        requeue."""
        tracked = self.jobs.tracked
        ids = {
            tracked[e].slurm_id: e for e in eids if e in tracked and tracked[e].slurm_id is not None
        }
        if not ids:
            return {}
        jobs = self.jobs.retry(lambda: self.cli.jobs(list(ids)))  # type: ignore[arg-type]
        return {ids[j.job_id]: j.restart_count for j in jobs}

    def apply(self, plan: AllocationPlan, jobs: Mapping[str, Any]) -> None:
        t0 = time.perf_counter()
        try:
            self._apply(plan, jobs)
        finally:
            self.apply_s += time.perf_counter() - t0

    def _apply(self, plan: AllocationPlan, jobs: Mapping[str, Any]) -> None:
        # A migrate within the same per-node counts never gets here: Slurm does not pin GPU
        # indices (capabilities.pin_gpus False), so the engine only relabels such moves.
        actions = [a for a in plan.actions if a.kind != "keep"]
        if not actions:
            return
        counts = self._restart_counts(a.job_id for a in actions if a.kind != "start")
        intents = [
            ActionIntent(
                engine_id=a.job_id,
                slurm_id=self._slurm_id_of(a.job_id),
                kind=a.kind,
                before=allocation_counts(a.before),
                after=allocation_counts(a.after),
                restart_count=counts.get(a.job_id, self._rc_of(a.job_id)),
            )
            for a in actions
        ]
        try:
            plan_json = plan.model_dump_json(exclude={"stats"})
        except ValueError:  # a model_construct'ed plan the serializer rejects: keep the actions
            plan_json = json.dumps({"time": plan.time, "policy": plan.policy})
        self.last_epoch, ids = self.journal.record_plan(
            self.run_id, plan.time, plan.policy, plan_json, intents
        )
        self.plans += 1
        self.failpoints.hit("intent")
        try:
            self.slurm.apply(plan.model_copy(update={"actions": actions}), jobs)
        except BaseException as err:
            self.journal.settle(ids, "failed", f"{type(err).__name__}: {err}"[:2000])
            raise
        self.journal.settle(ids, "applied")
        self.failpoints.hit("applied")

    def _journaled_stop(
        self, items: list[TrackedJob], reasons: Mapping[str, str], stop: Callable[[], None]
    ) -> None:
        """Every checkpoint-stop — planned, eviction, reconciliation or the Slurm executor's
        "running behind our back" path — gets its own intent, with the restart count just
        before the signal (the Slurm executor's ``stop_guard``)."""
        live = [t for t in items if t.slurm_id is not None and not t.completed]
        if not live:
            stop()
            return
        counts = self._restart_counts(t.spec.id for t in live)
        ids = self.journal.intend(
            self.run_id,
            [
                ActionIntent(
                    engine_id=t.spec.id,
                    slurm_id=t.slurm_id,
                    kind="stop",
                    before=shape_counts(t.shape),
                    after={},
                    restart_count=counts.get(t.spec.id, t.restart_count),
                )
                for t in live
            ],
        )
        try:
            stop()
        except BaseException as err:
            self.journal.settle(ids, "failed", f"{type(err).__name__}: {err}"[:2000])
            raise
        self.journal.settle(
            ids,
            "applied",
            ", ".join(f"{t.spec.id}: {reasons.get(t.spec.id, 'stop')}" for t in live)[:2000],
        )

    def _slurm_id_of(self, eid: str) -> int | None:
        tracked = self.jobs.tracked.get(eid)
        return tracked.slurm_id if tracked is not None else None

    def _rc_of(self, eid: str) -> int | None:
        tracked = self.jobs.tracked.get(eid)
        return tracked.restart_count if tracked is not None else None

    def trim(self, keep: int = 200) -> None:
        """A daemon must not grow without bound: keep only recent run/action records."""
        for name in ("segments", "actions", "restart_latencies", "start_latencies"):
            items = getattr(self.slurm, name)
            if len(items) > keep:
                del items[:-keep]
