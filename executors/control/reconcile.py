"""Start-up (and after-error) reconcile of :class:`~.controller.SlurmController`.

Why a module of its own: this is the controller's single recovery path (crash-only design) --
re-taking fail-open jobs, resolving journaled intents an interruption left open, and adopting
every managed Slurm job into a fresh engine. It changes with the journal and adoption rules,
not with the steady-state poll loop, so it lives here as a mixin that ``SlurmController``
inherits; it uses the controller's ``cli``, ``settings``, ``journal``, ``adoption``,
``_executor``, ``_warned_failopen`` and ``_retry_ctld``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuplan.models import ActiveJob, Cluster, GpuplanError

from ..engine import Engine
from ..slurm.cli import InvalidJobId, JobNotPending, SlurmJob
from .executor import ControllerExecutor
from .journal import TERMINAL_STATES, JobRow
from .markers import (
    RUNNING_STATES,
    STOP_KINDS,
    engine_id,
    fingerprint,
    is_failopen,
    is_managed,
    marker,
    with_marker_state,
)

# The controller's logger: reconcile messages read as the controller's (as in .adoption).
log = logging.getLogger("gpuplan.executors.control.controller")


class ReconcileMixin:
    """Journal, Slurm and a fresh engine brought into agreement (mixed into SlurmController)."""

    # ------------------------------------------------------------------ reconcile
    def _all_jobs(self) -> dict[int, SlurmJob]:
        return {j.job_id: j for j in self._retry_ctld(lambda: self.cli.jobs())}

    def _managed(self, jobs: Mapping[int, SlurmJob]) -> list[SlurmJob]:
        return sorted(
            (j for j in jobs.values() if is_managed(j, self.settings.partitions)),
            key=lambda j: j.job_id,
        )

    def _reconcile(self, engine: Engine, ex: ControllerExecutor) -> None:  # noqa: C901 (a named exception to the complexity gate)
        """Bring journal, Slurm and a fresh engine into agreement (start and after any error).

        1. re-take fail-open jobs still waiting in Slurm's queue;
        2. resolve every open intent (see :meth:`_resolve`);
        3. adopt: running managed jobs as running (no restart), held ones as pending with their
           journaled progress; the end of a journaled job that finished is recorded, a
           finished job the journal never knew is left alone (a fresh journal adopts only
           pending and running jobs); journal jobs Slurm forgot are ``gone``.
        """
        journal = self.journal
        assert journal is not None
        t0 = time.monotonic()
        jobs = self._all_jobs()
        self._retake_failopen(jobs.values())
        rows = journal.jobs()
        opened = journal.open_actions()
        by_job: dict[str, list[Any]] = {}
        for act in opened:
            by_job.setdefault(act.engine_id, []).append(act)
        for eid, acts in by_job.items():
            slurm_id = next((a.slurm_id for a in acts if a.slurm_id is not None), None)
            if slurm_id is None:
                journal.settle([a.id for a in acts], "reconciled", "no Slurm job")
                continue
            kinds = sorted({a.kind for a in acts})
            counts = [a.restart_count for a in acts if a.restart_count is not None]
            detail = self._resolve(
                kinds,
                min(counts) if counts else None,
                jobs.get(slurm_id),
                rows.get(eid),
                ex,
                engine.cluster,
            )
            journal.settle([a.id for a in acts], "reconciled", detail)
            log.info("open intents %s of %s (Slurm %d): %s", "+".join(kinds), eid, slurm_id, detail)
        jobs = self._settled_jobs()
        self._retake_failopen(jobs.values())
        now = ex.now()
        wall = time.time()
        adopted_running = adopted_pending = 0
        for sj in self._managed(jobs):
            eid = engine_id(sj.job_id)
            row = rows.get(eid)
            if row is not None and row.fingerprint != fingerprint(sj):
                row = None  # an older job that had the same id (add_job archives it)
            if row is not None and row.state in TERMINAL_STATES:
                continue
            if row is None and sj.finished:
                # Finished before this journal knew it (a fresh journal, or one pruned): not
                # the engine's to adopt. Recording it took over every finished managed job
                # Slurm still remembers (400 rows for 200 jobs on a reused lab).
                continue
            try:
                spec = self.adoption.spec(sj, row, engine.cluster)
            except (GpuplanError, ValueError) as err:
                self.adoption.refuse(sj, str(err))  # stays held: never a queue bypass
                continue
            if row is None:
                self.adoption.add(sj, spec, "pending")
                row = journal.job(eid)
            if sj.finished:
                self.adoption.record_end(sj, eid)
                continue
            if sj.state == "PENDING" and not sj.held:
                sj = self.adoption.hold(sj)
            if sj.state in RUNNING_STATES and self.adoption.adopt_running(
                engine, ex, spec, sj, row, now, wall
            ):
                adopted_running += 1
                continue
            if sj.state in RUNNING_STATES:
                # Cannot be placed in the engine's books (node not usable, GPUs double
                # counted): checkpoint-stop it and let the policy place it again.
                ex.stop_now(spec, sj, "reconcile: not adoptable")
                sj = self.cli.job(sj.job_id) or sj
            if sj.finished:
                self.adoption.record_end(sj, eid)
                continue
            if spec.min_gpus > engine.cluster.total_gpus:
                self.adoption.reject(
                    sj, f"needs {spec.min_gpus} GPUs; the cluster has {engine.cluster.total_gpus}"
                )
                continue
            ex.adopt_pending(spec, sj, stopped_at=wall if sj.restart_count else 0.0)
            done = row.done if row is not None else 0.0
            engine.add_pending(
                ActiveJob(
                    spec=spec,
                    status="pending",
                    done=done,
                    last_checkpoint_done=done,
                    anchor_time=now,
                    resume_time=now,
                    pending_since=now,
                )
            )
            adopted_pending += 1
        # Journal jobs that are no longer the engine's: forgotten by Slurm, run to their end
        # under Slurm's scheduler after a fail-open, or unmarked by an operator.
        by_eid = {engine_id(j.job_id): j for j in jobs.values()}
        managed = {engine_id(j.job_id) for j in self._managed(jobs)}
        for eid, row in rows.items():
            if row.state not in ("pending", "running") or eid in managed:
                continue
            sj = by_eid.get(eid)
            if sj is None:
                journal.set_state(
                    eid,
                    "gone",
                    "Slurm no longer knows the job (down longer than "
                    "MinJobAge?); its end is unknown",
                )
                log.warning("%s (Slurm %d) is gone from Slurm", eid, row.slurm_id)
            elif is_failopen(sj):
                journal.set_state(
                    eid,
                    "failopen",
                    f"{sj.state} under Slurm's own scheduler (released by the fail-open watchdog)",
                )
            elif marker(sj.admin_comment) is None:
                journal.set_state(eid, "failed", "taken out of the engine (AdminComment cleared)")
        log.info(
            "reconciled in %.2f s: %d open intents, %d running adopted, %d pending",
            time.monotonic() - t0,
            len(opened),
            adopted_running,
            adopted_pending,
        )

    def _resolve(
        self,
        kinds: Sequence[str],
        rc0: int | None,
        sj: SlurmJob | None,
        row: JobRow | None,
        ex: ControllerExecutor,
        cluster: Cluster,
    ) -> str:
        """Make a job's interrupted actions safe. Only stops need work: a stop that did not get
        as far as the requeue (Slurm's restart count unchanged since the intent) may have sent
        the checkpoint signal, so the job is either still running its old incarnation (maybe
        checkpointing) or has exited — which Slurm reports as COMPLETED, exactly like a job that
        finished. Finishing the stop (signal again, ``requeuehold``) is always safe: a job that
        had in fact reached its end resumes from its final checkpoint and exits at once. A stop
        that got past the requeue, and any start, left the job in a state the adoption handles
        as found (held, released, running or done)."""
        what = "+".join(kinds)
        if sj is None:
            return f"{what}: Slurm no longer knows the job"
        if not set(kinds) & STOP_KINDS:
            return f"{what}: Slurm says {sj.state}; adopted as found"
        if rc0 is not None and sj.restart_count > rc0:
            return (
                f"{what}: requeued since the intent (restart count {rc0} -> "
                f"{sj.restart_count}), now {sj.state}; adopted as found"
            )
        if sj.state in ("CANCELLED", "PENDING"):
            return f"{what}: {sj.state}, nothing to finish"
        spec = self.adoption.spec(sj, row, cluster)
        ex.stop_now(spec, sj, f"reconcile {what}")
        after = self.cli.job(sj.job_id)
        return (
            f"{what}: was {sj.state} at restart count {sj.restart_count}; stop finished "
            f"(checkpoint signal + requeuehold) -> "
            f"{after.state if after else 'gone'}{' held' if after and after.held else ''}"
        )

    def _settled_jobs(self, timeout_s: float = 60.0) -> dict[int, SlurmJob]:
        """All jobs, after managed ones in transit (COMPLETING) have landed."""
        deadline = time.monotonic() + timeout_s
        while True:
            jobs = self._all_jobs()
            moving = [j for j in self._managed(jobs) if j.state == "COMPLETING"]
            if not moving or time.monotonic() > deadline:
                return jobs
            time.sleep(0.3)

    def _retake_failopen(self, jobs: Iterable[SlurmJob]) -> None:
        """Jobs the fail-open watchdog released come back under the engine: a pending one is
        held again, a running one keeps running (and is adopted as running); both get the
        ``held`` marker back, which makes them managed again."""
        for sj in jobs:
            if sj.finished or not is_failopen(sj, self.settings.partitions):
                continue
            if not self._warned_failopen and self._executor is not None and self._executor.plans:
                log.warning(
                    "fail-open released jobs while this controller was alive: is the "
                    "watchdog reading this controller's heartbeat (%s)?",
                    self.settings.heartbeat_path,
                )
                self._warned_failopen = True
            try:
                if sj.state == "PENDING":
                    with contextlib.suppress(JobNotPending):
                        self.cli.hold(sj.job_id)
                self.cli.update_job(
                    sj.job_id, AdminComment=with_marker_state(sj.admin_comment, "held")
                )
                log.info("took back fail-open job %d (%s)", sj.job_id, sj.state)
            except (JobNotPending, InvalidJobId):
                continue
