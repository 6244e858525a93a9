"""Running jobs kept in rank order across decisions (issue 13, part A2).

SRTF: a running job at its full rate (the rate of its requested size, no pause pending) loses
one second of remaining time per second, so its key is ``C - now`` with the constant
``C = (total - done) / rate + max(anchor, resume)``: the order of such jobs never changes
between events. SRSF: the key is ``(C - now) x GPUs``, so jobs of one GPU count keep their
order; one sorted group per count. SJF: the key (the GPU count) never changes at all.
:class:`RunningOrder` keeps each group sorted by ``C`` and re-keys a job only when its
progress fields change (start, pause, resize, new rate or spec): O(changes x log n) list
edits (plus, without a change set, one C-speed signature pass), instead of re-keying and
re-sorting every running job on every event. A job whose key does not fall at that slope
(a pause still running, a rate other than its requested size's) is a *late* job, keyed
exactly per event; late jobs become regular once their pause is over.

``C - now`` rounds differently from :func:`.shortest_first.remaining_time`, so two keys that
are equal (or within an ulp) may order differently than the full sort: ties only.

Which jobs changed: with the view's change set (``ClusterView.changed``, issue 13 round 4)
only the jobs it names are read, O(changes) per event; without one (Slurm, SSH, a hand-built
view, or a view skipped since the last sync) every running job's signature is read and
compared. Both re-key exactly the jobs whose signature changed, so they give the same order.
With :data:`..change_verify.VERIFY` on (``GPUPLAN_VERIFY_CHANGES=1``, or set by tests) every
sync that takes the change set also runs the full comparison and raises
:class:`~..change_verify.ChangeSetMissed` naming any job whose signature changed but that the
set left out: an engine or executor path that writes a job without reporting it fails the
tests instead of silently mis-ranking.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Mapping
from operator import attrgetter

from gpuplan.models import ActiveJob
from gpuplan.models.state import ChangeSet

from .. import change_verify
from ..change_verify import ChangeSetMissed, missed
from .ranked_queue import Entry, RankKey

__all__ = ["ChangeSetMissed", "RunningOrder"]

_SIGNATURE = attrgetter("spec", "done", "anchor_time", "resume_time", "rate", "gpus")
"""What a running job's key depends on; a job is re-keyed when any of it changes."""

_REBUILD = 64
"""More changes than this in one event: sort afresh rather than insert one by one."""

_ALWAYS_LATE = float("inf")

Group = tuple[list[Entry], list[int]]
"""One slope's entries ``(C, submit, id)`` ascending, and their requested GPUs aligned."""


class RunningOrder:
    """Running jobs in groups sorted by ``(C, submit time, id)``, plus the few keyed per
    event. A group's multiplier ``m`` gives the key at ``now``: ``(C - now) x m``, or ``C``
    itself when ``m`` is 0 (a key that never changes, ``static``)."""

    __slots__ = (
        "_entry",
        "_groups",
        "_late",
        "_seen",
        "_sig",
        "_totals",
        "key",
        "service",
        "static",
    )

    def __init__(self, key: RankKey, service: bool = False, static: bool = False) -> None:
        self.key = key
        """The exact key (late jobs; ``static``: every job)."""
        self.service = service
        self.static = static
        self._sig: dict[str, tuple[object, ...]] = {}
        self._entry: dict[str, tuple[int, Entry]] = {}
        """Regular job -> (its group's multiplier, its entry)."""
        self._groups: dict[int, Group] = {}
        self._totals: dict[int, int] = {}
        """Multiplier -> the requested GPUs summed over its group (kept as jobs come and go,
        so the walk sums a group's tail in O(1))."""
        self._late: dict[str, float] = {}
        """Late job -> the time after which it is regular (inf: never, its rate differs)."""
        self._seen: tuple[int, int] | None = None
        """``(stream, seq)`` of the change set of the last successful sync (None: none)."""

    @property
    def groups(self) -> dict[int, Group]:
        """Multiplier -> group (read, never edit)."""
        return self._groups

    @property
    def totals(self) -> dict[int, int]:
        """Multiplier -> its group's requested GPUs summed (read, never edit)."""
        return self._totals

    def sync(
        self, running: Mapping[str, ActiveJob], now: float, changed: ChangeSet | None = None
    ) -> bool:
        """Bring the order up to ``running`` at ``now``. False when a running job holds a
        count other than its request (a resize): the caller then takes the full path.
        ``changed``: the view's change set; used when it follows the one of the previous
        sync (the same engine, no view skipped), else every running job is compared."""
        if changed is not None and changed.follows(self._seen):
            if change_verify.VERIFY:
                self._verify(running, changed.jobs)
            self._seen = (changed.stream, changed.seq)
            return self._sync_changed(running, now, changed.jobs)
        self._seen = None if changed is None else (changed.stream, changed.seq)
        sigs = dict(zip(running, map(_SIGNATURE, running.values()), strict=True))
        old = self._sig
        edited = [j for j, s in sigs.items() if old.get(j) != s]
        removed = old.keys() - sigs.keys()
        self._sig = sigs
        return self._rekey(running, now, edited, removed)

    def _sync_changed(
        self, running: Mapping[str, ActiveJob], now: float, jobs: Collection[str]
    ) -> bool:
        """:meth:`sync` from a change set: compare the signatures of the named jobs only
        (sorted, so the work does not depend on the set's hash order)."""
        sigs = self._sig
        edited: list[str] = []
        removed: list[str] = []
        for job_id in sorted(jobs):
            job = running.get(job_id)
            if job is None:
                if sigs.pop(job_id, None) is not None:
                    removed.append(job_id)
                continue
            sig = _SIGNATURE(job)
            if sigs.get(job_id) != sig:
                sigs[job_id] = sig
                edited.append(job_id)
        return self._rekey(running, now, edited, removed)

    def _verify(self, running: Mapping[str, ActiveJob], jobs: Collection[str]) -> None:
        """Raise :class:`ChangeSetMissed` when a job started, stopped or whose signature
        changed since the last sync is not in ``jobs`` (verify mode)."""
        old = self._sig
        left_out = [
            j for j, job in running.items() if j not in jobs and old.get(j) != _SIGNATURE(job)
        ]
        left_out += [j for j in old if j not in running and j not in jobs]
        if left_out:
            raise missed("running", left_out)

    def _rekey(
        self,
        running: Mapping[str, ActiveJob],
        now: float,
        changed: list[str],
        removed: Collection[str],
    ) -> bool:
        """Re-key ``changed`` and the late jobs now past their pause, drop ``removed``."""
        ripe = [j for j, t in self._late.items() if t < now and j in running]
        if len(changed) + len(removed) > _REBUILD:
            self._entry, self._groups, self._late, self._totals = {}, {}, {}, {}
            fresh: list[tuple[int, Entry, int]] = []
            for job_id, job in running.items():
                if not self._classify(job_id, job, now, fresh):
                    return self._fail()
            fresh.sort()
            totals = self._totals
            for m, entry, need in fresh:
                order, needs = self._groups.setdefault(m, ([], []))
                order.append(entry)
                needs.append(need)
                totals[m] = totals.get(m, 0) + need
            return True
        for job_id in removed:
            self._drop(job_id)
        for job_id in ripe + changed:
            self._drop(job_id)
            if not self._add(job_id, running[job_id], now):
                return self._fail()
        return True

    def late_entries(
        self,
        running: Mapping[str, ActiveJob],
        now: float,
    ) -> tuple[list[Entry], list[int]]:
        """The late jobs' exact entries at ``now`` ascending, and their requested GPUs."""
        key = self.key
        rows = sorted(
            ((key(job, now), job.spec.submit_time, job_id), job.spec.requested_gpus)
            for job_id, job in ((j, running[j]) for j in self._late)
        )
        return [e for e, _ in rows], [n for _, n in rows]

    def _fail(self) -> bool:
        """Forget everything (the next sync starts afresh) and report failure."""
        self._sig, self._entry, self._groups, self._late = {}, {}, {}, {}
        self._totals = {}
        self._seen = None
        return False

    def _classify(
        self, job_id: str, job: ActiveJob, now: float, fresh: list[tuple[int, Entry, int]]
    ) -> bool:
        """Key ``job`` as regular (appended to ``fresh``) or late; False on a resize."""
        spec = job.spec
        need = spec.requested_gpus
        if job.gpus != need:
            return False
        if self.static:
            entry = (self.key(job, now), spec.submit_time, job_id)
            self._entry[job_id] = (0, entry)
            fresh.append((0, entry, need))
            return True
        per_s = spec.throughput.rate(need)
        start = job.anchor_time if job.anchor_time > job.resume_time else job.resume_time
        if job.rate != per_s:
            self._late[job_id] = _ALWAYS_LATE
        elif now <= start:
            self._late[job_id] = start
        else:
            total: float = spec.total_iterations  # type: ignore[assignment]
            m = need if self.service else 1
            entry = ((total - job.done) / per_s + start, spec.submit_time, job_id)
            self._entry[job_id] = (m, entry)
            fresh.append((m, entry, need))
        return True

    def _add(self, job_id: str, job: ActiveJob, now: float) -> bool:
        fresh: list[tuple[int, Entry, int]] = []
        if not self._classify(job_id, job, now, fresh):
            return False
        for m, entry, need in fresh:
            order, needs = self._groups.setdefault(m, ([], []))
            at = bisect.bisect_left(order, entry)
            order.insert(at, entry)
            needs.insert(at, need)
            self._totals[m] = self._totals.get(m, 0) + need
        return True

    def _drop(self, job_id: str) -> None:
        found = self._entry.pop(job_id, None)
        if found is not None:
            m, entry = found
            order, needs = self._groups[m]
            at = bisect.bisect_left(order, entry)
            del order[at]
            self._totals[m] -= needs[at]
            del needs[at]
        self._late.pop(job_id, None)
