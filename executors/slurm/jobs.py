"""The Slurm side of every engine job: submit/reshape, release, checkpoint-stop, and progress.

:class:`SlurmJobs` holds the executor's :class:`~.records.TrackedJob` records and carries out the
Slurm protocol of ``docs/slurm.md`` on them (``sbatch --hold``, ``scontrol update`` of a pending
job, ``StartTime=now`` + ``release`` after the credential guard, checkpoint signal +
``requeuehold``), and reads each job's stand-in state files to settle its progress through the
shared :class:`~gpuplan.executors.progress_core.ProgressCore`. The :class:`SlurmExecutor` (and the
controller, through the executor) use only its public methods.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

from gpuplan.models import ActiveJob, Cluster, JobAllocation, JobSpec, placement_rate

from ..progress_core import ProgressCore, extrapolate, read_state_file, standin_paths
from .cli import (
    ControllerUnavailable,
    InvalidJobId,
    JobBusy,
    JobFinished,
    JobNotPending,
    JobPending,
    SlurmCli,
    SlurmError,
    SlurmJob,
    compress_hostlist,
)
from .launch import COMMENT_TAG, CommandBuilder, LaunchContext, file_key, job_name
from .records import JobShape, Segment, TrackedJob

log = logging.getLogger(__name__)
R = TypeVar("R")

ShapeHook = Callable[[JobAllocation, JobShape], JobShape]
"""Adjusts the shape computed for an allocation (the controller keeps untyped GPU requests)."""
StopGuard = Callable[[list[TrackedJob], Mapping[str, str], Callable[[], None]], None]
"""Wraps every checkpoint-stop: called with the jobs, their reasons and the stop itself (which it
must call); the controller journals an intent around it."""


class SlurmJobs:
    """Tracked engine jobs and the Slurm commands that carry out their actions."""

    def __init__(
        self,
        cli: SlurmCli,
        cluster: Cluster,
        core: ProgressCore,
        *,
        state_dir: Path,
        launcher: Path,
        command: CommandBuilder,
        protocol: str,
        partition: str | None,
        stop_timeout_s: float,
        requeue_guard_s: float,
        checkpoint_signal: str,
        run_tag: str,
        extra_sbatch: list[str],
        clock: Callable[[], float],
        to_engine: Callable[[float], float],
        node_up: Mapping[str, bool],
        shape_hook: ShapeHook | None = None,
        stop_guard: StopGuard | None = None,
    ) -> None:
        self.cli = cli
        self.cluster = cluster
        self.core = core
        self.state_dir = state_dir
        self.launcher = launcher
        self.command = command
        self.protocol = protocol
        self.partition = partition
        self.stop_timeout_s = stop_timeout_s
        self.requeue_guard_s = requeue_guard_s
        self.checkpoint_signal = checkpoint_signal
        self.run_tag = run_tag
        self.extra_sbatch = extra_sbatch
        self.clock = clock
        self.to_engine = to_engine
        self.node_up = node_up
        self.shape_hook = shape_hook
        self.stop_guard = stop_guard
        self.tracked: dict[str, TrackedJob] = {}
        self.segments: list[Segment] = []
        self.unavailable_polls = 0

    # ------------------------------------------------------------------ bookkeeping
    def track_spec(self, spec: JobSpec) -> TrackedJob:
        """The record of ``spec``'s job (created on first use)."""
        tracked = self.tracked.get(spec.id)
        if tracked is None:
            tracked = self.tracked[spec.id] = TrackedJob(spec=spec, key=file_key(spec.id))
        return tracked

    def track(self, job: ActiveJob) -> TrackedJob:
        """The record of an engine job, pointing at the engine's current ``ActiveJob``."""
        tracked = self.track_spec(job.spec)
        tracked.job = job
        return tracked

    def paths(self, tracked: TrackedJob) -> tuple[Path, Path, Path]:
        """The job's stand-in state files: (progress, checkpoint, done marker)."""
        files = standin_paths(self.state_dir, tracked.key)
        return Path(files["progress"]), Path(files["checkpoint"]), Path(files["done"])

    def checkpoint(self, tracked: TrackedJob) -> float:
        """Iterations the job's checkpoint keeps (0 without one)."""
        data = read_state_file(self.paths(tracked)[1])
        return float(data.get("done", 0.0)) if data else 0.0

    def reached_end(self, tracked: TrackedJob) -> bool:
        """The stand-in wrote its end marker (always False with ``protocol="exit"``)."""
        return self.protocol == "standin" and self.paths(tracked)[2].exists()

    def shape(self, alloc: JobAllocation) -> JobShape:
        """How Slurm must describe ``alloc`` (one GPU type when all its nodes share one)."""
        per = {n: len(g) for n, g in alloc.placement.items()}
        nodes = tuple(sorted(per))
        counts = set(per.values())
        types = {
            self.cluster.node_by_name[n].gpu_type for n in nodes if n in self.cluster.node_by_name
        }
        gtype = types.pop() if len(types) == 1 else None
        if gtype == "gpu":
            gtype = None
        shape = JobShape(
            nodes=nodes,
            per_node=counts.pop() if len(counts) == 1 else None,
            total=sum(per.values()),
            gpu_type=gtype,
        )
        return self.shape_hook(alloc, shape) if self.shape_hook is not None else shape

    def _rate_per_gpu(self, spec: JobSpec, alloc: JobAllocation) -> float:
        one = JobAllocation.fast(spec.id, {next(iter(alloc.placement)): (0,)})
        return placement_rate(spec, self.cluster, one)

    def _comment(self, spec: JobSpec) -> str:
        return (
            f"{COMMENT_TAG}:run={self.run_tag};id={quote(spec.id, safe='')};"
            f"min={spec.min_gpus};max={spec.max_gpus}"
        )

    # ------------------------------------------------------------------ launching
    def prepare(self, tracked: TrackedJob, alloc: JobAllocation, kind: str) -> None:
        """Make the Slurm job exist, held, with the allocation's shape."""
        shape = self.shape(alloc)
        tracked.shape = shape
        if tracked.slurm_id is None:
            tracked.slurm_id = self._submit(tracked, alloc, shape)
            return
        tpn, tpj = shape.tres()
        fields: dict[str, str | int] = {
            "NumNodes": f"{len(shape.nodes)}-{len(shape.nodes)}",
            "NodeList": compress_hostlist(shape.nodes),
        }
        # Set the non-empty one last so clearing the other cannot wipe it.
        if tpn:
            fields.update(TresPerJob="", TresPerNode=tpn)
        else:
            fields.update(TresPerNode="", TresPerJob=tpj)
        job_id = tracked.slurm_id

        def update() -> None:
            self.cli.update_job(job_id, **fields)

        try:
            self.retry(update)
        except JobNotPending:
            # Someone (a user without the hook, an admin) started it behind our back: stop it
            # properly first, then reshape the pending job.
            log.warning(
                "job %s (Slurm %s) was running unexpectedly; stopping it to reshape",
                tracked.spec.id,
                job_id,
            )
            self.stop([tracked], self.clock(), graceful=True, reasons={tracked.spec.id: kind})
            self.retry(update)

    def _submit(self, tracked: TrackedJob, alloc: JobAllocation, shape: JobShape) -> int:
        spec = tracked.spec
        ctx = LaunchContext(
            spec=spec,
            key=tracked.key,
            state_dir=self.state_dir,
            rate_per_gpu=self._rate_per_gpu(spec, alloc),
        )
        argv = [str(a) for a in self.command(ctx)]
        options = [
            "--hold",
            "--requeue",
            f"--job-name={job_name(spec.id)}",
            f"--comment={self._comment(spec)}",
            f"--output={self.state_dir / tracked.key}.out",
            "--open-mode=append",
            f"--chdir={self.state_dir}",
            f"--signal=B:{self.checkpoint_signal}@60",
            *shape.sbatch_options(),
        ]
        if self.partition:
            options.append(f"--partition={self.partition}")
        options += self.extra_sbatch
        try:
            return self.cli.sbatch(self.launcher, argv, options)
        except ControllerUnavailable:
            # The reply may have been lost after slurmctld accepted the job: look before
            # submitting again, so one engine job never becomes two Slurm jobs.
            existing = self._find_submitted(spec)
            if existing is not None:
                return existing
            return self.retry(lambda: self.cli.sbatch(self.launcher, argv, options))

    def _find_submitted(self, spec: JobSpec) -> int | None:
        want = self._comment(spec)
        jobs = self.retry(lambda: self.cli.jobs())
        for job in jobs:
            if job.comment == want and not job.finished:
                return job.job_id
        return None

    def release(self, items: Mapping[str, tuple[TrackedJob, str]]) -> None:
        """``StartTime=now`` + ``release`` for each (job, why) after the credential guard."""
        if not items:
            return
        guard_until = max(
            (t.stopped_at + self.requeue_guard_s for t, _ in items.values() if t.requeued),
            default=0.0,
        )
        wait = guard_until - time.time()
        if wait > 0:
            log.debug("release: credential guard %.2f s", wait)
            time.sleep(wait)
        now = self.clock()
        for tracked, kind in items.values():
            assert tracked.slurm_id is not None and tracked.job is not None
            job_id = tracked.slurm_id
            if tracked.requeued:
                self.retry(lambda j=job_id: self.cli.update_job(j, StartTime="now"))
            self.retry(lambda j=job_id: self.cli.release(j))
            tracked.running = True
            tracked.requeued = False
            shape = tracked.shape
            assert shape is not None
            start_done = (
                self.checkpoint(tracked) if self.protocol == "standin" else tracked.job.done
            )
            tracked.segment = Segment(
                job_id=tracked.spec.id,
                slurm_id=job_id,
                gpus=shape.total,
                nodes=shape.nodes,
                start_done=start_done,
                released=time.time(),
                kind=kind,
            )
            tracked.last_progress = None
            tracked.rate_probe = None
            job = tracked.job
            job.settle(now)
            if self.protocol == "standin":
                job.done = start_done
                job.last_checkpoint_done = start_done
            job.rate = placement_rate(job.spec, self.cluster, job.allocation)
            latency = (
                self.core.capabilities.restart_latency_s
                if kind != "start"
                else (self.core.start_estimate(1.0))
            )
            job.resume_time = now + latency
            job.segment_start = now

    # ------------------------------------------------------------------ stopping
    def stop(
        self, items: list[TrackedJob], now: float, *, graceful: bool, reasons: Mapping[str, str]
    ) -> None:
        """Checkpoint-stop the Slurm jobs of ``items`` and leave them PENDING + held.

        ``graceful``: send the checkpoint signal and wait up to ``stop_timeout_s`` for the exits
        (else requeue at once). ``reasons``: job id -> why (ends up in the segment records).
        Every stop goes through the ``stop_guard`` when one is set."""
        if self.stop_guard is None:
            self._stop_now(items, now, graceful=graceful, reasons=reasons)
            return
        self.stop_guard(
            items, reasons, lambda: self._stop_now(items, now, graceful=graceful, reasons=reasons)
        )

    def _stop_now(  # noqa: C901 (a named exception to the complexity gate)
        self, items: list[TrackedJob], now: float, *, graceful: bool, reasons: Mapping[str, str]
    ) -> None:
        items = [t for t in items if t.slurm_id is not None and not t.completed]
        if not items:
            return
        by_id = {t.slurm_id: t for t in items}
        state = {j.job_id: j for j in self.retry(lambda: self.cli.jobs(by_id))}
        wall = time.time()
        # A released job may still be PENDING (Slurm starts it at its next scheduling pass):
        # hold it first, then look again — if it started in between, it gets the signal below
        # like any running job instead of running on unnoticed.
        raced = False
        for tracked in items:
            sj = state.get(tracked.slurm_id)  # type: ignore[arg-type]
            if sj is not None and sj.state == "PENDING" and not sj.held:
                raced = True
                with contextlib.suppress(JobNotPending, InvalidJobId):
                    self.retry(lambda j=tracked.slurm_id: self.cli.hold(j))  # type: ignore[arg-type]
        if raced:
            state = {j.job_id: j for j in self.retry(lambda: self.cli.jobs(by_id))}
        for tracked in items:
            tracked.stop_wall = wall
            sj = state.get(tracked.slurm_id)  # type: ignore[arg-type]
            if graceful and sj is not None and sj.state in ("RUNNING", "CONFIGURING"):
                with contextlib.suppress(JobPending, JobFinished, InvalidJobId):
                    self.retry(
                        lambda j=tracked.slurm_id: self.cli.signal(j, self.checkpoint_signal)
                    )  # type: ignore[arg-type]
        # Wait for the checkpoint exits (the stand-in exits within ~0.2 s).
        exited = self.wait(
            by_id,
            lambda j: not j.active and j.state != "RUNNING",
            self.stop_timeout_s if graceful else 0.0,
        )
        log.debug("stop %s: exited after %.2f s", sorted(by_id), time.time() - wall)
        requeued: dict[int | None, TrackedJob] = {}
        for tracked in items:
            sj = exited.get(tracked.slurm_id)  # type: ignore[arg-type]
            if self.reached_end(tracked):  # it reached its end before the signal: a completion
                self.finish(tracked, "completed")
                continue
            requeued[tracked.slurm_id] = tracked
            try:
                if sj is not None and sj.state == "PENDING":
                    if not sj.held:
                        self.retry(lambda j=tracked.slurm_id: self.cli.hold(j))  # type: ignore[arg-type]
                else:
                    self.retry(lambda j=tracked.slurm_id: self.cli.requeue(j, hold=True))  # type: ignore[arg-type]
            except (InvalidJobId, JobPending):
                pass
            tracked.requeued = True
        pending = self.wait(requeued, lambda j: j.state == "PENDING", self.stop_timeout_s)
        stopped_at = time.time()
        log.debug("stop %s: pending after %.2f s", sorted(requeued), stopped_at - wall)
        for tracked in requeued.values():
            sj = pending.get(tracked.slurm_id)  # type: ignore[arg-type]
            if sj is not None:
                # Our own requeue counts as a restart in Slurm; only later ones are unplanned.
                tracked.restart_count = sj.restart_count
                if sj.state != "PENDING":
                    log.warning(
                        "job %s (Slurm %s) still %s after requeuehold",
                        tracked.spec.id,
                        tracked.slurm_id,
                        sj.state,
                    )
            if self.reached_end(tracked):
                # It completed while being killed by the requeue: nothing is left to run, so
                # drop the requeued (held) Slurm job instead of leaving it in the queue.
                with contextlib.suppress(SlurmError):
                    self.cli.cancel(tracked.slurm_id)  # type: ignore[arg-type]
                self.finish(tracked, "completed")
                continue
            tracked.stopped_at = stopped_at
            tracked.running = False
            self._settle_stop(tracked, now, reasons.get(tracked.spec.id, "stop"))

    def _settle_stop(self, tracked: TrackedJob, now: float, how: str) -> None:
        """Progress after a stop: what the checkpoint kept; the rest (if any) is lost work."""
        job = tracked.job
        if job is None:
            return
        if self.protocol == "standin":
            kept = self.checkpoint(tracked)
            reached = kept
            seg = tracked.segment
            if seg is not None:  # closing this incarnation now: count its loss once
                reached = tracked.last_progress[0] if tracked.last_progress else kept
                progress = read_state_file(self.paths(tracked)[0])
                if progress and float(progress.get("time", 0.0)) >= seg.released:
                    reached = max(reached, float(progress.get("done", 0.0)))
            tracked.last_progress = None
            self.core.rewind(job, now, kept, reached)
        else:
            job.settle(now)
        job.rate = 0.0
        self._end_segment(tracked, how)

    def _end_segment(self, tracked: TrackedJob, how: str) -> None:
        seg = tracked.segment
        if seg is None:
            return
        seg.end_done = (
            self.checkpoint(tracked)
            if self.protocol == "standin"
            else (tracked.job.done if tracked.job else None)
        )
        seg.ended = time.time()
        seg.how = how
        self.segments.append(seg)
        tracked.segment = None

    def finish(self, tracked: TrackedJob, how: str) -> None:
        """The job left for good (``how``: completed, cancelled, vanished, failed): close its
        segment and queue its ``JobCompletion`` / ``JobFailure`` in the core."""
        if tracked.completed:
            return
        tracked.completed = True
        tracked.running = False
        job = tracked.job
        if job is not None and how == "completed":
            job.settle(self.clock())
            job.done = job.spec.work
            job.rate = 0.0
        self._end_segment(tracked, how)
        job_id = tracked.spec.id
        if how == "completed":
            self.core.complete(self.clock(), job_id)
        else:  # cancelled by its owner, vanished, or crashed past the restart budget
            self.core.fail(self.clock(), job_id, self.core.failures.get(job_id, how))

    def wait(
        self,
        by_id: Mapping[int | None, TrackedJob],
        done: Callable[[SlurmJob], bool],
        timeout_s: float,
    ) -> dict[int, SlurmJob]:
        """Poll squeue until ``done`` holds for every job (or the timeout); return last states."""
        ids = [i for i in by_id if i is not None]
        deadline = time.time() + timeout_s
        while True:
            state = {j.job_id: j for j in self.retry(lambda: self.cli.jobs(ids))}
            if all(i not in state or done(state[i]) for i in ids) or time.time() >= deadline:
                return state
            time.sleep(0.1)

    def retry(self, fn: Callable[[], R], timeout_s: float = 120.0) -> R:
        """Call ``fn`` until slurmctld answers (restarts take seconds) or a job transition ends.

        "Job is no longer pending" is *not* retried: it means the job runs, and updating a
        running job's size would be a native resize (which later breaks every update of that
        job without slurmdbd: "the DB index is being set")."""
        deadline = time.time() + timeout_s
        delay = 0.2
        while True:
            try:
                return fn()
            except (ControllerUnavailable, JobBusy) as err:
                if time.time() + delay > deadline:
                    raise
                if isinstance(err, ControllerUnavailable):
                    self.unavailable_polls += 1
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    # ------------------------------------------------------------------ observing

    # ------------------------------------------------------------------ observing
    def unplanned_stop(self, tracked: TrackedJob, sj: SlurmJob, now: float) -> None:
        """The job stopped without the engine asking. If its nodes are fine, restart it in place
        from its checkpoint; if a node is down, hold it and let the NodeFailure replan it."""
        tracked.restart_count = sj.restart_count
        log.warning(
            "job %s (Slurm %s) stopped unplanned: %s %s",
            tracked.spec.id,
            tracked.slurm_id,
            sj.state,
            sj.reason,
        )
        try:
            if sj.state == "PENDING":
                if not sj.held:
                    self.retry(lambda: self.cli.hold(tracked.slurm_id))  # type: ignore[arg-type]
            else:
                self.retry(lambda: self.cli.requeue(tracked.slurm_id, hold=True))  # type: ignore[arg-type]
        except InvalidJobId:
            self.core.failures[tracked.spec.id] = f"Slurm job vanished ({sj.state})"
            self.finish(tracked, "vanished")
            return
        tracked.requeued = True
        tracked.stopped_at = time.time()
        tracked.running = False
        tracked.stop_wall = time.time()
        self._settle_stop(tracked, now, f"unplanned {sj.state}")
        shape = tracked.shape
        if shape is None or not all(self.node_up.get(n, False) for n in shape.nodes):
            return  # the NodeFailure event evicts it and the engine replans
        used = self.core.spend_restart(tracked.spec.id)
        if self.core.over_budget(tracked.spec.id):
            self.core.failures[tracked.spec.id] = f"gave up after {used - 1} restarts"
            self.finish(tracked, "failed")
            return
        self.prepare(tracked, tracked.job.allocation, "restart")  # type: ignore[union-attr,arg-type]
        self.release({tracked.spec.id: (tracked, "restart")})

    def sync_all(self, now: float) -> None:
        """:meth:`sync` every running job (stand-in protocol only)."""
        if self.protocol != "standin":
            return
        for tracked in self.tracked.values():
            if tracked.running and tracked.job is not None:
                self.sync(tracked, now)

    def sync(self, tracked: TrackedJob, now: float) -> None:
        """Set the job's progress from its newest progress record of this incarnation."""
        seg = tracked.segment
        path = self.paths(tracked)[0]
        try:
            mtime = path.stat().st_mtime
        except OSError:
            return
        if seg is None or mtime <= tracked.progress_seen:
            return
        data = read_state_file(path)
        if not data:
            return
        wall = float(data.get("time", mtime))
        if wall < seg.released:
            return  # written by the previous incarnation
        tracked.progress_seen = mtime
        done = float(data.get("done", 0.0))
        if seg.first_progress is None:
            # The stand-in says when this run began; else the first record we saw is the bound.
            seg.first_progress = float(data.get("started") or wall)
            seg.observed_gpus = int(data.get("gpus", 0)) or None
            if seg.kind != "start" and tracked.stop_wall is not None:
                # stop signal -> first progress of the relaunched run: what a resize costs
                self.core.record_restart_latency(
                    seg.first_progress - tracked.stop_wall, tracked.spec.id, seg.kind
                )
            else:
                self.core.record_start_latency(seg.first_progress - seg.released)
                if tracked.stop_wall is not None:  # back after a preemption: its restart cost
                    self.core.change_costs.record(
                        tracked.spec.id, "preempt", seg.first_progress - seg.released
                    )
        job = tracked.job
        assert job is not None
        rate = job.rate
        probe = tracked.rate_probe
        if probe is None:
            tracked.rate_probe = (done, wall)
        elif wall - probe[1] >= 1.0:
            rate = max(0.0, (done - probe[0]) / (wall - probe[1]))
        tracked.last_progress = (done, wall)
        job.settle(now)
        job.rate = rate
        job.done = min(job.spec.work, extrapolate(done, rate, now - self.to_engine(wall)))
        job.resume_time = min(job.resume_time, now)
