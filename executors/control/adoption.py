"""Adopting Slurm jobs into the controller: one job at a time, into journal, engine and executor.

:class:`JobAdoption` holds the per-job steps the daemon's reconciliation and discovery share:
the job's ``JobSpec`` (journaled, or read from Slurm), its journal row, holding a job released
behind the engine's back, adopting a running job as running (no restart), recording a job's end,
and rejecting a job the engine cannot schedule (fail open for that job alone).
"""

from __future__ import annotations

import logging

from gpuplan.models import ActiveJob, Cluster, JobAllocation, JobSpec, placement_rate

from ..engine import Engine
from ..slurm.cli import InvalidJobId, JobNotPending, SlurmCli, SlurmError, SlurmJob
from .executor import ControllerExecutor, ControllerSettings
from .failopen import release_to_slurm
from .journal import JobRow, Journal
from .markers import REJECTED, engine_id, fingerprint, slurm_shape, spec_from_slurm

log = logging.getLogger("gpuplan.executors.control.controller")


class JobAdoption:
    """The per-job adoption steps (see the module docstring)."""

    def __init__(self, cli: SlurmCli, journal: Journal, settings: ControllerSettings) -> None:
        self.cli = cli
        self.journal = journal
        self.settings = settings

    def spec(self, sj: SlurmJob, row: JobRow | None, cluster: Cluster) -> JobSpec:
        """The job's spec: as journaled when known, else read from Slurm (may raise
        ``InputError`` for values the engine refuses)."""
        if row is not None and row.spec is not None:
            return JobSpec.model_validate(row.spec)
        return spec_from_slurm(sj, origin=self.journal.origin,
                               cluster=cluster,
                               default_duration_s=self.settings.default_duration_s)

    @staticmethod
    def submit_wall(sj: SlurmJob) -> float:
        """Slurm's submit time (wall seconds; 0 when unknown)."""
        value = sj.raw.get("submit_time")
        return float(value) if isinstance(value, int | float) else 0.0

    def add(self, sj: SlurmJob, spec: JobSpec | None, state: str, reason: str = "") -> None:
        """Journal a new job row (``spec`` None for a rejected job)."""
        self.journal.add_job(engine_id(sj.job_id), sj.job_id, fingerprint(sj),
                             self.submit_wall(sj),
                             None if spec is None else spec.model_dump(mode="json"), state,
                             restart_count=sj.restart_count, reason=reason)

    def hold(self, sj: SlurmJob) -> SlurmJob:
        """Hold a released-but-not-started managed job; if it started meanwhile, say so."""
        try:
            self.cli.hold(sj.job_id)
        except JobNotPending:
            pass
        except InvalidJobId:
            return sj
        return self.cli.job(sj.job_id) or sj

    def adopt_running(self, engine: Engine, ex: ControllerExecutor, spec: JobSpec,
                       sj: SlurmJob, row: JobRow | None, now: float, wall: float) -> bool:
        """Put a job running in Slurm into the engine's books as running (no restart), if its
        GPUs are free there; progress from the journal, extrapolated. False if not adoptable."""
        shape = slurm_shape(sj)
        if not shape or any(n not in engine.free or len(engine.free[n]) < c
                            for n, c in shape.items()):
            return False
        placement = {n: tuple(sorted(engine.free[n])[:c]) for n, c in shape.items()}
        alloc = JobAllocation.fast(spec.id, placement)
        rate = placement_rate(spec, engine.cluster, alloc)
        done = 0.0
        if row is not None:
            # It kept running while nobody watched: extrapolate at its modelled speed.
            done = row.done + (rate * max(0.0, wall - row.updated) if row.state == "running"
                               else 0.0)
        job = ActiveJob(spec=spec, status="running", done=min(done, spec.work),
                        last_checkpoint_done=row.done if row else 0.0, anchor_time=now,
                        resume_time=now, first_start=now, segment_start=now)
        job.set_allocation(alloc)
        job.rate = rate
        engine.running[spec.id] = job
        engine._acquire(job)  # the engine's own GPU bookkeeping (no public adopt API yet)
        ex.adopt_running(job, sj)
        return True

    def record_end(self, sj: SlurmJob, eid: str) -> None:
        """Journal how a finished Slurm job ended."""
        if sj.state == "COMPLETED" and (sj.exit_code or 0) == 0:
            self.journal.set_state(eid, "completed", "completed in Slurm")
        else:
            self.journal.set_state(eid, "failed", f"{sj.state} {sj.reason}".strip())

    def reject(self, sj: SlurmJob, reason: str) -> None:
        """Fail open for one job: journal why, then hand it to Slurm's own scheduler (marker
        ``rejected``, so neither this controller nor the watchdog takes it back). A job the
        engine cannot schedule must never sit held for ever."""
        eid = engine_id(sj.job_id)
        self.add(sj, None, "rejected", reason[:500])
        try:
            release_to_slurm(self.cli, sj, REJECTED)
        except SlurmError as err:
            log.error("%s (Slurm %d) cannot be scheduled (%s) and could not be released to "
                      "Slurm: %s; retrying next poll", eid, sj.job_id, reason, err)
            self.journal.set_state(eid, "pending", f"release after rejection failed: {err}")
            return
        log.warning("%s (Slurm %d) cannot be scheduled: %s; released to Slurm's own scheduler",
                    eid, sj.job_id, reason)

