"""The controller's per-poll read of Slurm's jobs (:class:`PollReadsMixin`).

Kept apart from the controller's cycle because it changes with how Slurm is read, not with
what the controller decides: each poll reads every job once, shared by the executor's
observation of its running jobs and the controller's discovery of new ones, and that read is
a narrow ``squeue -O`` of the per-poll fields (:mod:`~gpuplan.executors.slurm.job_states`)
merged into each job's last full ``squeue --json`` record; the full read happens only for new
jobs, every :data:`FULL_READ_S` and whenever the narrow one fails to parse.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..slurm import job_states
from ..slurm.cli import ControllerUnavailable, SlurmCli, SlurmError, SlurmJob, one_line
from ..slurm.job_states import JobState
from .markers import allocation_counts, slurm_shape

if TYPE_CHECKING:
    from ..engine import Engine

log = logging.getLogger("gpuplan.executors.control.controller")

FULL_READ_S = 60.0
"""Longest time between two full ``squeue --json`` reads of a polling controller (the narrow
reads between them carry only the per-poll fields, :mod:`~gpuplan.executors.slurm.job_states`)."""


class PollReadsMixin:
    """The read half of :class:`~.controller.SlurmController`'s poll (needs ``self.cli``)."""

    cli: SlurmCli
    adoption: Any  # the controller's JobAdoption (read-back of multi-node placements)
    _latency: Any  # its ChangeLatencyProbe, when the restart gate is on
    _read_back: dict[str, tuple[Any, ...]]

    def _init_poll_reads(self) -> None:
        """Reads start empty: the first poll reads every job in full."""
        self._snapshot: list[SlurmJob] | None = None
        """This poll's one ``squeue --json`` of every job, read for the executor's
        observation (:meth:`_read_for_poll`) and reused by discovery (:meth:`_on_poll`)."""
        self._snapshot_running: set[int] = set()
        """The Slurm ids the executor observed as running in that read."""
        self._full: dict[int, SlurmJob] = {}
        """Each job's last full (``--json``) record, kept current with the narrow reads."""
        self._full_at = float("-inf")
        self._narrow_ok = True
        """False once this Slurm refused the narrow read's format: polls read ``--json``."""
        self._full_reads = 0
        """Full reads since the last recorded cycle (its ``full_reads`` column)."""

    def _forget_reads(self) -> None:
        """A new cycle (start-up, a recycle): the next poll reads every job in full."""
        self._snapshot = None
        self._full, self._full_at = {}, float("-inf")

    def _read_for_poll(self, ids: list[int]) -> list[SlurmJob]:
        """The executor's read of its running jobs, done as one read of every job
        (:meth:`_poll_jobs`) that :meth:`_on_poll` then reuses for discovery: one Slurm read
        per poll instead of two (each a process and an RPC under slurmctld's job read lock)."""
        jobs = self._poll_jobs()
        self._snapshot = jobs
        wanted = set(ids)
        self._snapshot_running = wanted
        return [j for j in jobs if j.job_id in wanted]

    def _poll_jobs(self) -> list[SlurmJob]:
        """Every job slurmctld holds, for a poll: the narrow read
        (:mod:`~gpuplan.executors.slurm.job_states`, 0.012 CPU-s at 1,000 jobs) merged into
        each job's last full ``squeue --json`` record (0.25 CPU-s at 1,000 jobs: 22.05 builds
        every job's JSON whatever it is asked). The full read is done instead when the narrow
        one shows a job without a full record (a new job: discovery needs its comment and
        fingerprint), every :data:`FULL_READ_S`, and whenever the narrow read fails to parse
        or is not supported."""
        states: list[JobState] | None = None
        if self._narrow_ok:
            try:
                states = job_states.parse(self.cli.run(job_states.argv()))
            except ControllerUnavailable:
                raise
            except SlurmError as err:  # a Slurm without these fields: JSON from now on
                log.warning(
                    "narrow squeue read not available (%s); polls read --json", one_line(str(err))
                )
                self._narrow_ok = False
        full = self._full
        if (
            states is None
            or time.monotonic() - self._full_at >= FULL_READ_S
            or any(st.job_id not in full for st in states)
        ):
            jobs = self.cli.jobs()
            self._full_reads += 1
            self._full = {j.job_id: j for j in jobs}
            self._full_at = time.monotonic()
            return jobs
        merged = [job_states.merge(full[st.job_id], st) for st in states]
        self._full = {j.job_id: j for j in merged}
        return merged

    # ------------------------------------------------------------------ read-back
    def _follow_slurm(self, engine: Engine, by_eid: Mapping[str, SlurmJob]) -> None:
        """After each start or resize, read the nodes/GPUs Slurm actually assigned and make the
        engine's books hold exactly those (once per incarnation and engine allocation)."""
        for eid, job in list(engine.running.items()):
            sj = by_eid.get(eid)
            if sj is None or sj.state != "RUNNING" or job.allocation is None:
                continue
            key = (
                sj.restart_count,
                sj.nodes,
                tuple(sorted(allocation_counts(job.allocation).items())),
            )
            if self._read_back.get(eid) == key:
                continue
            if self._latency is not None:  # once per incarnation: the gate's measured cost
                self._latency.running_again(eid, sj)
            if len(sj.nodes) == 1 and tuple(sorted(slurm_shape(sj).items())) == key[2]:
                # One node with the engine's count: Slurm's placement is the books' (it does
                # not pin GPU indices, so which ones it chose changes nothing). Only a job
                # spread over nodes needs `scontrol show job -d` (one process per start).
                self._read_back[eid] = key
                continue
            try:
                self.adoption.read_back(engine, job, sj)
            except SlurmError as err:
                log.info("read-back of %s failed (%s); next poll", eid, err)
                continue
            self._read_back[eid] = (
                sj.restart_count,
                sj.nodes,
                tuple(sorted(allocation_counts(job.allocation).items())),
            )
        for eid in [e for e in self._read_back if e not in engine.running]:
            del self._read_back[eid]
