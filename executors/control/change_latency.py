"""The controller's change latencies, from the journal: intent -> the job RUNNING again.

The controller runs jobs users submitted (any command, ``protocol="exit"``): it never sees
their progress files, so the stand-in's "stop -> first progress" measurement is not
available. What it does see is Slurm's: every change is journaled as an intent
(``actions.intended_at``, with the job's ``restart_count`` just before) and Slurm reports the
job RUNNING again once it is restarted. This probe pairs the two, once per incarnation, and
feeds ``intent -> running`` into the gate's :class:`ChangeCosts` under the change's kind
(``resize``, ``migrate``; a start after a preemption counts as ``preempt``).

Why not the journal's ``settled_at``: it marks the Slurm commands done (``applied``), a
fraction of a second after the intent, long before the job runs again. The figure here is a
lower bound of a real restart: it includes the checkpoint, the requeue and Slurm's
rescheduling (plus up to one poll interval), not the job's own start-up after its process
began (importing the framework: ~9 s for PyTorch, see docs/algorithms/restart-gate.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from gpuplan.solver_core.restart_gate import ChangeCosts

from ..slurm.cli import SlurmJob
from .journal import ActionRow

CHANGE_KINDS = ("resize", "migrate")


class ActionLog(Protocol):
    """The part of :class:`~.journal.Journal` used here."""

    def actions(self, engine_id: str | None = None) -> list[ActionRow]: ...


class ChangeLatencyProbe:
    """Measures each journaled change once, when Slurm first reports its job RUNNING again."""

    def __init__(
        self, journal: ActionLog, costs: ChangeCosts, clock: Callable[[], float] = time.time
    ) -> None:
        self.journal = journal
        self.costs = costs
        self.clock = clock
        self._measured: set[int] = set()

    def running_again(self, engine_id: str, job: SlurmJob) -> float | None:
        """Slurm reports ``job`` RUNNING: record the latency of the change that restarted it
        (if it has one not measured yet); returns it, or None."""
        if job.state != "RUNNING":
            return None
        rows = self.journal.actions(engine_id)
        last = next(
            (
                r
                for r in reversed(rows)
                if r.kind in (*CHANGE_KINDS, "start") and r.status == "applied"
            ),
            None,
        )
        if last is None or last.id in self._measured:
            return None
        kind, before = last.kind, last
        if kind == "start":
            # a start counts only after a preemption; its requeue is the preemption's
            before = next(
                (r for r in reversed(rows) if r.kind in ("preempt", "stop") and r.id < last.id),
                None,
            )
            if before is None:
                return None  # a first start is no change of a running job
            kind = "preempt"
        if before.restart_count is not None and job.restart_count <= before.restart_count:
            return None  # still the incarnation from before the change
        self._measured.add(last.id)
        latency = max(0.0, self.clock() - last.intended_at)
        self.costs.record(engine_id, kind, latency)
        return latency
