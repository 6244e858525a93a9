"""The AFS stages' per-job columns, kept across decisions (issue 28 item 1).

Why: AFS-L and AFS-P re-read every active job at every decision (scan order, ladder,
remaining work, counters), which with thousands of queued jobs cost more than Algorithm 1
itself. :class:`AfsColumns` keeps, in scan order ``(submit_time, id)``, one row per active job
as numpy columns: the job's distinct-ladder index and the fields its remaining work and
held time are computed from (``work``, ``done``, ``start = max(anchor, resume)``, ``rate``,
``held_time``, ``anchor_time``, GPUs held). Remaining work and counters at ``now`` are then
one vectorised expression over the columns, with the same IEEE operations in the same order as
:func:`~gpuplan.models.state.remaining_work` and ``ActiveJob.held_time_at``, so bit-identical.

Which rows change: with the view's change set (``ClusterView.changed``) following the one of
the previous sync, only the jobs it names are re-read (new rows inserted at their scan
position, gone rows deleted, the others rewritten); otherwise (no change set, a skipped view,
a new capacity, a ladder table grown past twice the rows) every row is rebuilt. A job's key
never changes while it is active (the engine swaps in new specs, never new submit times), so
a row is found by bisecting the sorted keys.

Ladders are stored once per distinct ladder object (:class:`~..helpers.ladders.LadderCache`
interns them: jobs of one model share theirs) in flat ``counts``/``rates`` arrays with one
padding slot, which is what the AFS-L solver reads; a job's row holds the ladder's index.

Verify mode (:data:`..change_verify.VERIFY`): every sync from a change set also rebuilds the
columns from scratch (:func:`~..helpers.ladders.build_ladder`, every active job's fields) and
raises :class:`~..change_verify.ChangeSetMissed` naming the jobs whose kept row differs.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Mapping, Sequence

import numpy as np

from gpuplan.models import ActiveJob, ClusterView

from ... import change_verify
from ...helpers.ladders import Ladder, LadderCache, build_ladder
from .afs_job import follow_scan_keys

__all__ = ["AfsColumns", "check_ladder"]

_FLOAT_COLS = ("work", "done", "start", "rate", "held", "anchor")
_WORK, _DONE, _START, _RATE, _HELD, _ANCHOR = range(6)
_RESORT = 64
"""New jobs at one sync beyond which the key list is re-sorted instead of inserted into."""


def check_ladder(counts: Sequence[int], rates: Sequence[float]) -> None:
    """Reject a ladder that breaks the saturation guard: the AFS-L fast paths rely on
    positive, strictly increasing counts and rates (``0 < G <= H``)."""
    prev_c, prev_r = 0, 0.0
    for i, (c, r) in enumerate(zip(counts, rates, strict=True)):
        if r <= 0 or c <= 0 or (i and (r <= prev_r or c <= prev_c)):
            raise ValueError(
                "AfsJob ladders must have positive, strictly increasing counts and rates"
            )
        prev_c, prev_r = c, r


def _fields(job: ActiveJob) -> tuple[float, float, float, float, float, float, int]:
    """A job's row values: work, done, start, rate, held_time, anchor_time, GPUs held."""
    anchor, resume = job.anchor_time, job.resume_time
    return (
        job.spec.total_iterations,  # type: ignore[return-value]
        job.done,
        anchor if anchor > resume else resume,
        job.rate,
        job.held_time,
        anchor,
        job.gpus,
    )


def _merge(col: np.ndarray, old: np.ndarray, fresh: np.ndarray, values: object) -> np.ndarray:
    """``col`` spread over the ``old`` positions of a longer column, ``values`` at ``fresh``
    (one pass each: ``np.insert`` per column cost more than the rest of a sync)."""
    out = np.empty(len(old), col.dtype)
    out[old] = col
    out[fresh] = values
    return out


class AfsColumns:
    """Active jobs in scan order as numpy columns, updated from the view's change set.

    Read after :meth:`sync`: ``ids`` (object array), :meth:`remaining`, :meth:`held_at`,
    :meth:`ladder_arrays`, ``did`` (distinct-ladder index per row), ``gpus`` (GPUs held;
    ``busy``: more than 0) and ``mark`` (an int per row the stage may write, carried across
    syncs by job id; -1 for a new row: AFS-P keeps the counters it saw there).
    """

    def __init__(self, cache: LadderCache) -> None:
        self.cache = cache
        self._cap: int | None = None
        self._seen: tuple[int, int] | None = None
        self._keys: list[tuple[float, str]] = []
        self._key_of: dict[str, tuple[float, str]] = {}
        self.ids = np.empty(0, object)
        self.did = np.empty(0, np.int64)
        self.gpus = np.empty(0, np.int64)
        """GPUs each job holds (``ActiveJob.gpus``): what the AFS fast path compares the new
        counts with."""
        self.mark = np.empty(0, np.int64)
        self._f = np.empty((6, 0))
        """The float columns, one row each (``_FLOAT_COLS``), so a sync that inserts or
        deletes jobs moves them in one operation."""
        self._marks_in: dict[str, int] | None = None
        self._clear_ladders()
        self.full_syncs = 0
        """Syncs that rebuilt every row (no usable change set): for tests and benches."""

    # ------------------------------------------------------------------ ladders
    def _clear_ladders(self) -> None:
        self._lads: list[Ladder] = []
        self._lad_index: dict[int, int] = {}  # id(ladder) -> index; _lads keeps them alive
        self._flat_c: list[int] = []
        self._flat_r: list[float] = []
        self._off: list[int] = []
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def _ladder_id(self, ladder: Ladder) -> int:
        k = self._lad_index.get(id(ladder))
        if k is None:
            check_ladder(*ladder)
            k = self._lad_index[id(ladder)] = len(self._lads)
            self._lads.append(ladder)
            self._off.append(len(self._flat_c))
            self._flat_c.extend(ladder[0])
            self._flat_r.extend(ladder[1])
            self._arrays = None
        return k

    def ladder(self, row: int) -> Ladder:
        """The ladder of the job in ``row``."""
        return self._lads[int(self.did[row])]

    @property
    def ladders(self) -> list[Ladder]:
        """The distinct ladders, by index (do not modify)."""
        return self._lads

    def ladder_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(cflat, rflat, doff, dlev)``: every distinct ladder's counts and rates flattened
        (plus one padding slot: count 0, rate 1), and each ladder's offset and length."""
        if self._arrays is None:
            size = len(self._flat_c)
            cflat = np.zeros(size + 1, np.int64)
            cflat[:size] = self._flat_c
            rflat = np.ones(size + 1)
            rflat[:size] = self._flat_r
            doff = np.array(self._off, np.int64)
            dlev = np.array([len(lad[0]) for lad in self._lads], np.int64)
            self._arrays = (cflat, rflat, doff, dlev)
        return self._arrays

    @property
    def busy(self) -> np.ndarray:
        """Whether each row's job holds GPUs."""
        return self.gpus > 0

    # ------------------------------------------------------------------ values at now
    def remaining(self, now: float) -> np.ndarray:
        """Every row's :func:`~gpuplan.models.state.remaining_work` at ``now`` (same float
        operations: ``done + rate * (now - start)`` capped at ``work``, then ``work - done``
        floored at 0)."""
        work, done, start, rate = self._f[:4]
        with np.errstate(all="ignore"):
            moved = done + rate * (now - start)
        adv = ~((now <= start) | (rate <= 0.0))
        done_now = np.where(adv, np.where(moved < work, moved, work), done)
        left = work - done_now
        return np.where(left > 0.0, left, 0.0)

    def held_at(self, now: float) -> np.ndarray:
        """Every row's ``ActiveJob.held_time_at(now)`` (same float operations)."""
        since = now - self._f[_ANCHOR]
        return self._f[_HELD] + np.where(self.busy, np.where(since > 0.0, since, 0.0), 0.0)

    def shares(self, counts: np.ndarray) -> dict[str, int]:
        """``{id: count}`` for the rows with a positive count, in scan order."""
        mask = counts > 0
        return dict(zip(self.ids[mask].tolist(), counts[mask].tolist(), strict=True))

    # ------------------------------------------------------------------ sync
    def restore_marks(self, marks: Mapping[str, int]) -> None:
        """Take the marks of the jobs in ``marks`` at the next sync (which rebuilds)."""
        self._marks_in = dict(marks)
        self._cap = None

    def marks(self) -> dict[str, int]:
        """``{id: mark}`` of the rows (built on request)."""
        return dict(zip(self.ids.tolist(), self.mark.tolist(), strict=True))

    def sync(self, view: ClusterView) -> None:
        """Bring the rows up to ``view``'s active jobs at ``view.capacity`` GPUs."""
        cap = view.capacity
        changed = view.changed
        if (
            changed is not None
            and cap == self._cap
            and changed.follows(self._seen)
            and len(self._lads) <= 2 * len(self._keys) + 64
        ):
            self._seen = (changed.stream, changed.seq)
            self._apply(view, sorted(changed.jobs))
            if len(self.cache) > 2 * len(self._key_of) + 64:
                self.cache.prune(self._key_of)
            if change_verify.VERIFY:
                self.verify(view)
            return
        self._seen = None if changed is None else (changed.stream, changed.seq)
        self._rebuild(view)

    def _rows(self, jobs: Sequence[ActiveJob], cap: int) -> tuple[list, list, list]:
        """Ids, ladder indices and field tuples of ``jobs``."""
        index = self._lad_index
        dids = [
            index[id(lad)] if id(lad) in index else self._ladder_id(lad)
            for lad in self.cache.ladders(jobs, cap)
        ]
        return [job.spec.id for job in jobs], dids, list(map(_fields, jobs))

    def _rebuild(self, view: ClusterView) -> None:
        """Every row from the view (the path without a usable change set). The scan order is
        still updated from the ids that came and went (:func:`~.afs_job.follow_scan_keys`, as
        :class:`~.afs_job.ScanOrder` does), and the ladder table kept unless the capacity
        changed or it outgrew the rows."""
        self.full_syncs += 1
        cap = view.capacity
        old = self._marks_in
        if old is None and (self.mark >= 0).any():
            old = dict(zip(self.ids.tolist(), self.mark.tolist(), strict=True))
        self._marks_in = None
        running, pending = view.running, view.pending
        if cap != self._cap or len(self._lads) > 2 * (len(running) + len(pending)) + 64:
            self._clear_ladders()
        self._cap = cap
        self._keys = follow_scan_keys(self._keys, self._key_of, running, pending)
        get = running.get
        jobs = [get(j) or pending[j] for _, j in self._keys]
        ids, dids, fields = self._rows(jobs, cap)
        self._set_columns(ids, dids, fields)
        if old is None:
            self.mark = np.full(len(ids), -1, np.int64)
        else:
            self.mark = np.array([old.get(j, -1) for j in ids], np.int64)
        if len(self.cache) > 2 * len(ids) + 64:
            self.cache.prune(ids)

    def _set_columns(self, ids: list[str], dids: list[int], fields: list[tuple]) -> None:
        n = len(ids)
        self.ids = np.empty(n, object)
        self.ids[:] = ids
        self.did = np.array(dids, np.int64)
        cols = list(zip(*fields, strict=True)) if fields else [()] * 7
        self._f = np.array(cols[:6], float).reshape(6, n)
        self.gpus = np.array(cols[6], np.int64)

    def _apply(self, view: ClusterView, named: list[str]) -> None:
        """Re-read the named jobs: rewrite, delete or insert their rows."""
        running, pending = view.running, view.pending
        key_of, keys = self._key_of, self._keys
        gone: list[int] = []
        new: list[ActiveJob] = []
        upd: list[tuple[int, ActiveJob]] = []
        for job_id in named:
            job = running.get(job_id) or pending.get(job_id)
            key = key_of.get(job_id)
            if job is None:
                if key is not None:
                    gone.append(bisect_left(keys, key))
                    del key_of[job_id]
            elif key is None:
                new.append(job)
            else:
                upd.append((bisect_left(keys, key), job))
        cap = view.capacity
        f = self._f
        if upd:
            _, dids, fields = self._rows([job for _, job in upd], cap)
            for (row, _), did, vals in zip(upd, dids, fields, strict=True):
                self.did[row] = did
                f[:, row] = vals[:6]
                self.gpus[row] = vals[6]
        if gone:
            gone.sort()
            for row in reversed(gone):
                del keys[row]
            keep = np.ones(len(self.ids), bool)
            keep[gone] = False
            self.ids = self.ids[keep]
            self.did = self.did[keep]
            self.gpus = self.gpus[keep]
            self.mark = self.mark[keep]
            self._f = self._f[:, keep]
        if new:
            new.sort(key=lambda j: (j.spec.submit_time, j.spec.id))
            nk = [(j.spec.submit_time, j.spec.id) for j in new]
            at = [bisect_left(keys, k) for k in nk]  # positions before any insertion
            ids, dids, fields = self._rows(new, cap)
            # Row i of the new ones lands at at[i] + i; the old rows fill the rest in order.
            k = len(nk)
            fresh = np.zeros(len(self.ids) + k, bool)
            fresh[np.array(at, np.int64) + np.arange(k)] = True
            old = ~fresh
            named = np.empty(k, object)
            named[:] = ids
            self.ids = _merge(self.ids, old, fresh, named)
            self.did = _merge(self.did, old, fresh, dids)
            self.gpus = _merge(self.gpus, old, fresh, [v[6] for v in fields])
            self.mark = _merge(self.mark, old, fresh, -1)
            block = np.empty((6, len(fresh)))
            block[:, old] = self._f
            block[:, fresh] = np.array([v[:6] for v in fields], float).T
            self._f = block
            if len(nk) > _RESORT:
                keys.extend(nk)
                keys.sort()
            else:
                for k in nk:
                    insort(keys, k)
            for k in nk:
                key_of[k[1]] = k

    # ------------------------------------------------------------------ verify
    def verify(self, view: ClusterView) -> None:
        """Compare the kept rows with ones built from scratch from ``view``; raise
        :class:`~..change_verify.ChangeSetMissed` naming the jobs that differ."""
        cap = view.capacity
        jobs = sorted(view.active(), key=lambda j: (j.spec.submit_time, j.spec.id))
        ids = [j.spec.id for j in jobs]
        kept = self.ids.tolist()
        if ids != kept:
            differ = sorted(set(ids) ^ set(kept)) or [
                a for a, b in zip(ids, kept, strict=True) if a != b
            ]
            raise change_verify.missed("active (scan order)", differ)
        if self._keys != [(j.spec.submit_time, j.spec.id) for j in jobs]:
            raise change_verify.missed("active (scan keys)", ids)
        plateau = self.cache.plateau
        differ = []
        for row, job in enumerate(jobs):
            vals = _fields(job)
            kept_vals = (*self._f[:, row].tolist(), int(self.gpus[row]))
            if vals != kept_vals or self.ladder(row) != build_ladder(job.spec, cap, plateau):
                differ.append(job.spec.id)
        if differ:
            raise change_verify.missed("active (AFS columns)", differ)
