"""SRTF's running jobs kept in rank order across decisions (issue 13, part A2).

A running SRTF job at its full rate (the rate of its requested size, no pause pending) loses
one second of remaining time per second, so its key is ``C - now`` with the constant
``C = (total - done) / rate + max(anchor, resume)``, and the order of such jobs never changes
between events. :class:`RunningOrder` keeps them sorted by ``C`` and re-keys a job only when
its progress fields change (start, pause, resize, new rate or spec): O(changes x log n) list
edits plus one C-speed signature pass, instead of re-keying and re-sorting every running
job on every event. A job whose key does not fall at that slope (a pause still running, a
rate other than its requested size's) is a *late* job, keyed exactly per event; late jobs
become regular once their pause is over.

``C - now`` rounds differently from :func:`.shortest_first.remaining_time`, so two keys that
are equal (or within an ulp) may order differently than the full sort: ties only.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from operator import attrgetter

from gpuplan.models import ActiveJob

from .ranked_queue import Entry

_SIGNATURE = attrgetter("spec", "done", "anchor_time", "resume_time", "rate", "gpus")
"""What a running job's key depends on; a job is re-keyed when any of it changes."""

_REBUILD = 64
"""More changes than this in one event: sort afresh rather than insert one by one."""

_ALWAYS_LATE = float("inf")


class RunningOrder:
    """Running jobs sorted by ``(C, submit time, id)`` plus the few keyed per event."""

    __slots__ = ("_entry", "_late", "_need", "_order", "_sig")

    def __init__(self) -> None:
        self._sig: dict[str, tuple[object, ...]] = {}
        self._entry: dict[str, Entry] = {}
        """Regular job -> its entry ``(C, submit time, id)`` in ``_order``."""
        self._order: list[Entry] = []
        self._need: list[int] = []
        """Requested GPUs of ``_order[i]`` (kept aligned, so a stretch sums at C speed)."""
        self._late: dict[str, float] = {}
        """Late job -> the time after which it is regular (inf: never, its rate differs)."""

    @property
    def order(self) -> list[Entry]:
        """Regular running jobs ascending by ``(C, submit, id)``; read, never edit."""
        return self._order

    @property
    def need(self) -> list[int]:
        """Requested GPUs aligned with :attr:`order`."""
        return self._need

    def sync(self, running: Mapping[str, ActiveJob], now: float) -> bool:
        """Bring the order up to ``running`` at ``now``. False when a running job holds a
        count other than its request (a resize): the caller then takes the full path."""
        sigs = dict(zip(running, map(_SIGNATURE, running.values()), strict=True))
        old = self._sig
        changed = [j for j, s in sigs.items() if old.get(j) != s]
        removed = old.keys() - sigs.keys()
        late = self._late
        ripe = [j for j, t in late.items() if t < now and j not in removed]
        self._sig = sigs
        if len(changed) + len(removed) > _REBUILD:
            self._entry, self._order, self._need, self._late = {}, [], [], {}
            fresh: list[tuple[Entry, int]] = []
            for job_id, job in running.items():
                if not self._classify(job_id, job, now, fresh):
                    return self._fail()
            fresh.sort()
            self._order = [e for e, _ in fresh]
            self._need = [n for _, n in fresh]
            return True
        for job_id in removed:
            self._drop(job_id)
        for job_id in ripe:
            if job_id not in sigs:
                continue
            self._drop(job_id)
            if not self._add(job_id, running[job_id], now):
                return self._fail()
        for job_id in changed:
            self._drop(job_id)
            if not self._add(job_id, running[job_id], now):
                return self._fail()
        return True

    def late_entries(self, running: Mapping[str, ActiveJob], now: float,
                     ) -> tuple[list[Entry], list[int]]:
        """The late jobs' exact entries at ``now`` ascending, and their requested GPUs."""
        from .shortest_first import remaining_time  # noqa: PLC0415 (cycle)

        rows = sorted(((remaining_time(job, now), job.spec.submit_time, job_id),
                       job.spec.requested_gpus)
                      for job_id, job in ((j, running[j]) for j in self._late))
        return [e for e, _ in rows], [n for _, n in rows]

    def _fail(self) -> bool:
        """Forget everything (the next sync starts afresh) and report failure."""
        self._sig, self._entry, self._order, self._need, self._late = {}, {}, [], [], {}
        return False

    def _classify(self, job_id: str, job: ActiveJob, now: float,
                  fresh: list[tuple[Entry, int]]) -> bool:
        """Key ``job`` as regular (appended to ``fresh``) or late; False on a resize."""
        spec = job.spec
        need = spec.requested_gpus
        if job.gpus != need:
            return False
        per_s = spec.throughput.rate(need)
        start = job.anchor_time if job.anchor_time > job.resume_time else job.resume_time
        if job.rate != per_s:
            self._late[job_id] = _ALWAYS_LATE
        elif now <= start:
            self._late[job_id] = start
        else:
            total: float = spec.total_iterations  # type: ignore[assignment]
            entry = ((total - job.done) / per_s + start, spec.submit_time, job_id)
            self._entry[job_id] = entry
            fresh.append((entry, need))
        return True

    def _add(self, job_id: str, job: ActiveJob, now: float) -> bool:
        fresh: list[tuple[Entry, int]] = []
        if not self._classify(job_id, job, now, fresh):
            return False
        for entry, need in fresh:
            at = bisect.bisect_left(self._order, entry)
            self._order.insert(at, entry)
            self._need.insert(at, need)
        return True

    def _drop(self, job_id: str) -> None:
        entry = self._entry.pop(job_id, None)
        if entry is not None:
            at = bisect.bisect_left(self._order, entry)
            del self._order[at]
            del self._need[at]
        self._late.pop(job_id, None)
