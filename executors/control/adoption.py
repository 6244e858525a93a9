"""Adopting Slurm jobs into the controller: one job at a time, into journal, engine and executor.

:class:`JobAdoption` holds the per-job steps the daemon's reconciliation and discovery share:
the job's ``JobSpec`` (journaled, or read from Slurm), its journal row, holding a job released
behind the engine's back, adopting a running job as running (no restart), recording a job's end,
refusing a job the controller cannot read (it stays held, with the reason in its marker), and
rejecting a journaled job the cluster can no longer hold (fail open for that job alone).
"""

from __future__ import annotations

import logging

from gpuplan.models import ActiveJob, Cluster, JobAllocation, JobSpec, placement_rate
from gpuplan.models.reasons import Reason

from ..engine import Engine
from ..slurm.cli import InvalidJobId, JobNotPending, SlurmCli, SlurmError, SlurmJob
from .executor import ControllerExecutor, ControllerSettings
from .failopen import release_to_slurm
from .journal import JobRow, Journal
from .markers import (
    REJECTED,
    allocation_counts,
    engine_id,
    fingerprint,
    refused_marker,
    slurm_shape,
    spec_from_slurm,
)

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
        return spec_from_slurm(
            sj,
            origin=self.journal.origin,
            cluster=cluster,
            default_duration_s=self.settings.default_duration_s,
        )

    @staticmethod
    def submit_wall(sj: SlurmJob) -> float:
        """Slurm's submit time (wall seconds; 0 when unknown)."""
        value = sj.raw.get("submit_time")
        return float(value) if isinstance(value, int | float) else 0.0

    def add(self, sj: SlurmJob, spec: JobSpec | None, state: str, reason: str = "") -> None:
        """Journal a new job row (``spec`` None for a rejected job)."""
        self.journal.add_job(
            engine_id(sj.job_id),
            sj.job_id,
            fingerprint(sj),
            self.submit_wall(sj),
            None if spec is None else spec.model_dump(mode="json"),
            state,
            restart_count=sj.restart_count,
            reason=reason,
        )

    def hold(self, sj: SlurmJob) -> SlurmJob:
        """Hold a released-but-not-started managed job; if it started meanwhile, say so."""
        try:
            self.cli.hold(sj.job_id)
        except JobNotPending:
            pass
        except InvalidJobId:
            return sj
        return self.cli.job(sj.job_id) or sj

    def adopt_running(
        self,
        engine: Engine,
        ex: ControllerExecutor,
        spec: JobSpec,
        sj: SlurmJob,
        row: JobRow | None,
        now: float,
        wall: float,
    ) -> bool:
        """Put a job running in Slurm into the engine's books as running (no restart), if its
        GPUs are free there; progress from the journal, extrapolated. False if not adoptable."""
        alloc = fit_observed(engine, spec.id, self.observed(sj))
        if alloc is None:
            return False
        rate = placement_rate(spec, engine.cluster, alloc)
        done = 0.0
        if row is not None:
            # It kept running while nobody watched: extrapolate at its modelled speed.
            done = row.done + (
                rate * max(0.0, wall - row.updated) if row.state == "running" else 0.0
            )
        job = ActiveJob(
            spec=spec,
            status="running",
            done=min(done, spec.work),
            last_checkpoint_done=row.done if row else 0.0,
            anchor_time=now,
            resume_time=now,
            first_start=now,
            segment_start=now,
        )
        engine.adopt(job, alloc)
        job.rate = rate
        ex.adopt_running(job, sj)
        return True

    def observed(self, sj: SlurmJob) -> dict[str, tuple[int, ...]]:
        """node -> GPU indices Slurm assigned to a running job (``scontrol show job -d``); the
        ``squeue`` view (:func:`slurm_shape`, indices unknown) when that fails."""
        try:
            found = self.cli.job_gpus(sj.job_id)
        except SlurmError as err:
            log.info("scontrol show job -d %d failed (%s); using squeue's view", sj.job_id, err)
            found = {}
        found = {n: g for n, g in found.items() if g}
        if found:
            return found
        return {n: tuple(range(c)) for n, c in slurm_shape(sj).items()}

    def read_back(self, engine: Engine, job: ActiveJob, sj: SlurmJob) -> bool:
        """Make the engine's books hold ``job`` on the GPUs Slurm actually gave it (after a
        start or resize); True when they changed. Left as they are (and logged) when Slurm's
        placement collides with another job's GPUs in the books."""
        alloc = fit_observed(engine, job.id, self.observed(sj))
        if alloc is None:
            log.warning(
                "%s (Slurm %d) runs on %s, which the engine's books cannot hold",
                job.id,
                sj.job_id,
                ",".join(sj.nodes),
            )
            return False
        if job.allocation is not None and alloc.placement == job.allocation.placement:
            return False
        before = allocation_counts(job.allocation)
        engine.adopt(job, alloc)
        job.rate = placement_rate(job.spec, engine.cluster, alloc)
        if allocation_counts(alloc) != before:
            log.info(
                "%s (Slurm %d): Slurm placed it as %s, not %s; books follow Slurm",
                job.id,
                sj.job_id,
                allocation_counts(alloc),
                before,
            )
        return True

    def record_end(self, sj: SlurmJob, eid: str) -> None:
        """Journal how a finished Slurm job ended."""
        if sj.state == "COMPLETED" and (sj.exit_code or 0) == 0:
            self.journal.set_state(eid, "completed", "completed in Slurm")
        else:
            self.journal.set_state(eid, "failed", f"{sj.state} {sj.reason}".strip())

    def refuse(self, sj: SlurmJob, reason: str) -> None:
        """A job the controller cannot read (its comment outside the grammar, marker values
        outside the partition, a fault while adopting it) stays HELD: releasing it to Slurm's
        own scheduler would let whoever wrote it skip the engine's queue. Its marker becomes
        ``refused`` with ``why=<reason>`` — the owner sees it in ``scontrol show job`` and
        ``squeue -O AdminComment``, cannot release the job (the hook refuses users' updates of
        marked jobs) and may ``scancel`` it and resubmit. Journaled ``rejected`` with the
        reason. If the marker update fails the job keeps its ``held`` marker and its journal
        row goes back to ``pending``, so the next poll tries again; it stays held meanwhile."""
        eid = engine_id(sj.job_id)
        self.add(sj, None, "rejected", f"refused, kept held: {reason}"[:500])
        why = Reason(code="held", text=f"held: {reason}"[:500], terms={}).model_dump_json()
        self.journal.record_reasons(None, {}, {eid: why}, [(0.0, eid, "waiting", why)])
        try:
            if sj.state == "PENDING" and not sj.held:
                self.cli.hold(sj.job_id)
            self.cli.update_job(sj.job_id, AdminComment=refused_marker(sj.admin_comment, reason))
        except (JobNotPending, InvalidJobId) as err:
            log.warning(
                "%s (Slurm %d) cannot be read (%s) and changed meanwhile: %s",
                eid,
                sj.job_id,
                reason,
                err,
            )
            return
        except SlurmError as err:
            log.error(
                "%s (Slurm %d) cannot be read (%s); marking it refused failed: %s; "
                "retrying next poll",
                eid,
                sj.job_id,
                reason,
                err,
            )
            self.journal.set_state(eid, "pending", f"marking refused failed: {err}"[:500])
            return
        log.warning(
            "%s (Slurm %d) cannot be read: %s; kept held, marked refused", eid, sj.job_id, reason
        )

    def reject(self, sj: SlurmJob, reason: str) -> None:
        """Fail open for one job: journal why, then hand it to Slurm's own scheduler (marker
        ``rejected``, so neither this controller nor the watchdog takes it back). A job the
        engine cannot schedule must never sit held for ever."""
        eid = engine_id(sj.job_id)
        self.add(sj, None, "rejected", reason[:500])
        try:
            release_to_slurm(self.cli, sj, REJECTED)
        except SlurmError as err:
            log.error(
                "%s (Slurm %d) cannot be scheduled (%s) and could not be released to "
                "Slurm: %s; retrying next poll",
                eid,
                sj.job_id,
                reason,
                err,
            )
            self.journal.set_state(eid, "pending", f"release after rejection failed: {err}")
            return
        log.warning(
            "%s (Slurm %d) cannot be scheduled: %s; released to Slurm's own scheduler",
            eid,
            sj.job_id,
            reason,
        )


def fit_observed(
    engine: Engine, job_id: str, observed: dict[str, tuple[int, ...]]
) -> JobAllocation | None:
    """An allocation of ``job_id`` with Slurm's per-node counts, on Slurm's GPU indices where
    the engine's books have them free (the job's own GPUs count as free), else on other free
    GPUs of the same node (Slurm does not pin indices, so only the counts are binding). None
    when a node is unusable in the books or lacks free GPUs."""
    own = engine.running.get(job_id)
    mine = own.allocation.placement if own is not None and own.allocation is not None else {}
    placement: dict[str, tuple[int, ...]] = {}
    for node, gpus in observed.items():
        if node not in engine.free:
            return None
        free = set(engine.free[node]) | set(mine.get(node, ()))
        keep = [g for g in gpus if g in free]
        rest = sorted(free - set(keep))
        need = len(gpus) - len(keep)
        if need > len(rest):
            return None
        placement[node] = tuple(sorted(keep + rest[:need]))
    if not placement:
        return None
    return JobAllocation.fast(job_id, placement)
