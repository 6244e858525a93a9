"""The steady state of the Slurm controller: what each poll of Slurm turns into.

A mixin of :class:`~.controller.SlurmController`, kept apart because it changes with what the
controller reads from Slurm and how it becomes engine events (arrivals discovered from held
jobs, cancellations, the cluster's nodes now, progress journaled), not with the daemon's life
cycle (start-up, signals, heartbeat, the cycle loop), which stays in ``controller.py``.
"""

from __future__ import annotations

import logging
import time

from gpuplan.models import (
    Event,
    GpuplanError,
    JobArrival,
    JobFailure,
    Timer,
)

from ..engine import Engine
from ..slurm.cli import (
    ControllerUnavailable,
    SlurmError,
    SlurmJob,
)
from .executor import ControllerExecutor
from .gate_journal import save_gate
from .journal import (
    JobUpdate,
)
from .markers import (
    RUNNING_STATES,
    allocation_counts,
    engine_id,
    fingerprint,
    marker,
)

log = logging.getLogger("gpuplan.executors.control.controller")


class Recycle(Exception):
    """The cluster changed shape (nodes added/removed): the controller rebuilds its engine and
    executor (raised by a poll, caught by the cycle loop)."""


class PollEventsMixin:
    """Each executor poll: discovered arrivals and cancellations, the cluster's nodes, the sync
    of the journal with what Slurm reports (see the methods)."""

    # ------------------------------------------------------------------ steady state
    def _on_poll(self, now: float) -> list[Event]:
        """Each executor poll: discover arrivals/cancellations, journal progress; a completed
        poll counts as a completed cycle for the heartbeat."""
        ex, engine = self._executor, self._engine
        if ex is None or engine is None:
            return []
        snapshot, self._snapshot = self._snapshot, None
        # A job the executor saw running in the shared read and stopped unplanned during its
        # observation (requeued, held) is pending now while that read still says it ended:
        # it is judged at the next poll, from a fresh read.
        acted = self._snapshot_running if snapshot is not None else set()
        try:
            jobs = {j.job_id: j for j in (snapshot if snapshot is not None else self._poll_jobs())}
        except ControllerUnavailable as err:
            log.warning("squeue failed (%s); discovery skipped", err)
            return []
        self._retake_failopen(jobs.values())
        if self._reasons is not None:
            self._reasons.saw(jobs.values())
        events: list[Event] = []
        journal = self.journal
        assert journal is not None
        for sj in self._managed(jobs):
            eid = engine_id(sj.job_id)
            tracked = ex.tracked(eid)
            if tracked is None:
                try:
                    events.extend(self._discovered(sj, engine, ex, now))
                except (SlurmError, Recycle):
                    raise
                except Exception as err:  # the job at fault stays held; the rest are served
                    log.exception("adopting Slurm job %d failed", sj.job_id)
                    self.adoption.refuse(
                        sj, f"internal error while adopting it: {type(err).__name__}: {err}"
                    )
            elif (
                not tracked.running
                and not tracked.completed
                and sj.finished
                and sj.job_id not in acted
            ):
                reason = f"{sj.state.lower()} while pending"
                ex.forget(eid, reason)
                events.append(JobFailure(time=now, job_id=eid, reason=reason))
        by_eid = {engine_id(j.job_id): j for j in jobs.values()}
        for eid in ex.tracked_ids():
            tracked = ex.tracked(eid)
            if tracked is None or tracked.completed:
                continue
            sj = by_eid.get(eid)
            if sj is None:
                reason = "vanished from Slurm"
            elif marker(sj.admin_comment) is None:
                # An operator cleared the marker: the job is Slurm's from now on.
                reason = "taken out of the engine (AdminComment cleared)"
            else:
                continue
            ex.forget(eid, reason)
            events.append(JobFailure(time=now, job_id=eid, reason=reason))
        self._follow_slurm(engine, by_eid)
        nodes = self._cluster_nodes_now(engine)
        if nodes is not None and nodes != self._cluster_nodes:
            raise Recycle(f"nodes {sorted(self._cluster_nodes)} -> {sorted(nodes)}")
        self._sync(engine, now)
        self._tick = time.monotonic()
        return events

    def _discovered(
        self, sj: SlurmJob, engine: Engine, ex: ControllerExecutor, now: float
    ) -> list[Event]:
        """A managed job the engine does not know yet: normally a new held job (-> arrival).
        A marked job that someone released (an admin, a bypassed hook) is held back first; one
        that already runs — released behind our back, or a fail-open job taken back — is
        adopted as running when its GPUs are free in the engine's books, else it arrives as
        pending and the executor checkpoint-stops it before placing it."""
        journal = self.journal
        assert journal is not None
        if sj.finished or sj.state not in RUNNING_STATES | {"PENDING"}:
            return []
        eid = engine_id(sj.job_id)
        row = journal.job(eid)
        if row is not None and row.state == "rejected" and row.fingerprint == fingerprint(sj):
            return []
        if sj.state == "PENDING" and not sj.held:
            sj = self.adoption.hold(sj)
            if sj.state == "PENDING" and not sj.held:
                return []
        try:
            spec = self.adoption.spec(sj, None, engine.cluster)
        except (GpuplanError, ValueError, OverflowError, MemoryError) as err:
            self.adoption.refuse(sj, str(err))  # stays held: never a queue bypass
            return []
        self.adoption.add(sj, spec, "pending")
        if sj.state in RUNNING_STATES and self.adoption.adopt_running(
            engine, ex, spec, sj, None, now, time.time()
        ):
            log.info("adopted running job %s (Slurm %d) on %s", eid, sj.job_id, ",".join(sj.nodes))
            return [Timer(time=now, name="adopted")]
        ex.adopt_pending(spec, sj)
        log.info(
            "new job %s (Slurm %d, %s, GPUs %d..%d)",
            eid,
            sj.job_id,
            sj.state,
            spec.min_gpus,
            spec.max_gpus,
        )
        return [JobArrival(time=now, job=spec)]

    def _cluster_nodes_now(self, engine: Engine) -> set[str] | None:
        """The GPU node set of the managed partitions, checked once a minute."""
        if time.monotonic() - self._nodes_checked < 60.0:
            return None
        self._nodes_checked = time.monotonic()
        try:
            nodes = self.cli.nodes()
        except ControllerUnavailable:
            return None
        wanted = set(self.settings.partitions)
        return {
            n.name
            for n in nodes
            if n.gpus > 0 and (not wanted or wanted & set(n.raw.get("partitions") or []))
        }

    def _sync(self, engine: Engine, now: float) -> None:
        """Journal every live job's state and progress, and the engine's new records."""
        journal = self.journal
        assert journal is not None
        updates = [
            JobUpdate(
                engine_id=j.id,
                state="running",
                done=j.done_at(now),
                gpus=j.gpus,
                placement=allocation_counts(j.allocation),
            )
            for j in engine.running.values()
        ]
        # A pending job's row changes only when its progress does (a stop): with hundreds
        # queued, rewriting every unchanged row twice a cycle was most of the journal's cost.
        # Running jobs are always written: a restart extrapolates their progress from the
        # row's `updated` time.
        written = self._pending_written
        for eid in engine.running:
            written.pop(eid, None)
        for j in engine.pending.values():
            done = j.done_at(now)
            if written.get(j.id) != done:
                updates.append(JobUpdate(engine_id=j.id, state="pending", done=done))
                written[j.id] = done
        for rec in engine.records[self._records_seen :]:
            written.pop(rec.job_id, None)
            if rec.failed:
                updates.append(
                    JobUpdate(
                        engine_id=rec.job_id,
                        state="failed",
                        done=rec.done_iterations,
                        reason=rec.failure or "",
                    )
                )
            else:
                updates.append(
                    JobUpdate(
                        engine_id=rec.job_id,
                        state="completed",
                        done=rec.done_iterations,
                        reason="completed",
                    )
                )
            log.info(
                "%s %s", rec.job_id, "failed: " + (rec.failure or "") if rec.failed else "completed"
            )
        for job_id, reason in engine.rejected:
            written.pop(job_id, None)
            updates.append(JobUpdate(engine_id=job_id, state="rejected", done=0.0, reason=reason))
        engine.rejected.clear()
        journal.update_jobs(updates)
        if self._reasons is not None and self._executor is not None:
            self._reasons.publish(self._executor.last_epoch, engine.pending)
        self._save_policy(engine)
        save_gate(engine, journal, self.run_id, self._gate_saved)
        # Records are journaled: drop them (and other per-decision lists) so memory stays flat.
        del engine.records[:]
        self._records_seen = 0
        if len(engine.decision_ms) > 1000:
            del engine.decision_ms[:-1000]
        if self._executor is not None:
            self._executor.trim()
        if time.monotonic() - self._last_touch > 10.0:
            journal.touch_run(self.run_id)
            self._last_touch = time.monotonic()
