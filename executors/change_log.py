"""The engine's record of which jobs were written between two views (``ClusterView.changed``).

The engine writes lifecycle fields (start, stop, settle, finish, fail, adopt, a new spec) and
the executor writes progress fields (rate, pause, rollback, co-located neighbours re-rated).
Both add the job's id to one shared set; each view takes the set and starts the next, so a
policy that keeps per-job state across decisions (``RunningOrder``) re-reads only those jobs.
An executor that cannot name every job it writes (Slurm, SSH: progress is observed, not
simulated) leaves ``Executor.touched`` None, and its views carry None: read everything.

It also numbers each job as it enters the engine's ``running`` dict (``since``, the view's
``running_since``), so a stage can list a few running jobs in that dict's order without a
pass over every running job.
"""

from __future__ import annotations

import itertools

from gpuplan.models.state import ChangeSet

from .base import Executor

_STREAMS = itertools.count(1)
"""Numbers each engine's stream of views (``ChangeSet.stream``), unique in this process."""


class ChangeLog:
    """Jobs written since the last view, shared between an engine and its executor."""

    __slots__ = ("_entries", "_reports", "_seq", "_stream", "since", "touched")

    def __init__(self, executor: Executor) -> None:
        reported = executor.touched
        self._reports = reported is not None
        """Whether the executor records every job it writes."""
        self.touched: set[str] = reported if reported is not None else set()
        """The executor's own set when it reports (both add to it), else the engine's alone."""
        self._stream = next(_STREAMS)
        self._seq = 0
        self.since: dict[str, int] = {}
        """Running job -> its number on entering ``running``: ascending is the dict's order
        (a job re-entering goes to the end of both)."""
        self._entries = itertools.count()

    def wrote(self, job_id: str, entered: bool = False) -> None:
        """``job_id`` was written; ``entered``: it was just appended to the engine's
        ``running`` dict (numbered after every job already there)."""
        self.touched.add(job_id)
        if entered:
            self.since[job_id] = next(self._entries)

    def left(self, job_id: str) -> None:
        """``job_id`` left the engine's ``running`` dict (or never was in it)."""
        self.touched.add(job_id)
        self.since.pop(job_id, None)

    def take(self) -> ChangeSet | None:
        """The jobs written since the previous view, and start the next set (numbered even
        when unknown, so views stay numbered one per call); None when the executor does not
        report its writes."""
        self._seq += 1
        jobs = frozenset(self.touched)
        self.touched.clear()
        return ChangeSet(self._stream, self._seq, jobs) if self._reports else None
