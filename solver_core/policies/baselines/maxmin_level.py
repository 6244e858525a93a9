"""Max-Min's water-fill by its water level, over per-job columns kept across decisions.

Why: :func:`~..helpers.water_fill.water_fill` grants GPUs one ladder step at a time through a
heap, so a decision on 1,024 GPUs cost ~900 heap steps (issue 28, docs/performance.md
"max-min, profiled"), and the answer went to best fit as every share. Here the same counts
come from a few numpy passes over :class:`~..afs.afs_columns.AfsColumns` (the jobs in
arrival order ``(submit_time, id)``, their ladders and the GPUs they hold, kept from the
view's change set), and the engine's fast path gets only the jobs whose count changed
(:func:`~..afs.afs_delta.counts_delta`).

**Why the level gives the same counts.** With the default score (GPUs held; ties: arrival
order) the water-fill visits steps in ascending ``(count held, position)``: phase 1 is the
level-0 bucket (every job at 0, in arrival order), and a job granted at level ``c`` moves to
the bucket of its next count, which is above ``c``, so bucket ``c`` is complete when the
sweep reaches it. Let ``U(c)`` be the GPUs held once every level below ``c`` is granted in
full (each job at its first ladder count ``>= c``, or its top). While ``U(c + 1) <= M`` the
free GPUs never go below ``M - U(c + 1) >= 0`` inside level ``c``, so every step there fits
and nothing stops. The first level ``L`` with ``U(L + 1) > M`` is the *water level*: every job
is at its state for ``L``; the jobs of bucket ``L`` are walked in arrival order, each granted
its step if it fits in what is free and stopped for good if not (the path-dependent part,
done exactly as water_fill does it); if GPUs are still free after that (some step there did
not fit, so fewer are free than that step), the jobs above the level still climb through
water_fill's own heap rule (:func:`_residual`). ``L = 0`` is overload: the first steps alone
do not fit.

``U`` is a prefix sum over levels of the steps taken there, each distinct ladder's steps
weighted by how many rows use it, so a decision costs O(rows + ladder entries) in numpy
instead of a heap operation per GPU. :func:`check_counts` (verify mode) compares the result
with :func:`~.maxmin.progressive_fill` job by job.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["LadderSteps", "LevelFillMismatch", "check_counts", "level_counts"]


class LevelFillMismatch(AssertionError):
    """Verify mode: the water-level counts differ from the full water-fill's."""


def _walk(steps: np.ndarray, free: int) -> tuple[np.ndarray, int]:
    """Water-fill's walk over one bucket: in row order, each row with a positive step is
    granted it if it fits in ``free`` (which then shrinks), skipped for good if not.
    Returns the granted mask and what is left free. Runs of rows that all fit are taken as
    one cumulative sum, so the Python loop turns once per skipped row that is followed by
    a grant (at most ``free`` times)."""
    granted = np.zeros(len(steps), bool)
    start = 0
    n = len(steps)
    while free > 0 and start < n:
        cs = np.cumsum(steps[start:])
        k = int(np.searchsorted(cs, free, side="right"))  # rows start..start+k-1 all fit
        if k:
            granted[start : start + k] = steps[start : start + k] > 0
            free -= int(cs[k - 1])
        start += k
        if start >= n or free <= 0:
            break
        rest = steps[start + 1 :]  # steps[start] > free: skipped for good
        nxt = np.flatnonzero((rest > 0) & (rest <= free))
        if len(nxt) == 0:
            break
        start += 1 + int(nxt[0])
    return granted, free


def _residual(
    counts: np.ndarray,
    did: np.ndarray,
    ladders: Sequence[tuple[int, ...]],
    tops: np.ndarray,
    level: int,
    free: int,
) -> None:
    """Water-fill's heap phase from the state after the level's bucket: the jobs above
    ``level`` and below their top climb by (count, row), each step granted if it fits and
    the job stopped for good if not. A job whose next step exceeds ``free`` now would only
    be stopped when popped (free GPUs only shrink), so it is left out of the heap."""
    rows = np.flatnonzero((counts > level) & (counts < tops))
    heap: list[tuple[int, int, int, tuple[int, ...]]] = []
    for row in rows.tolist():
        lad = ladders[int(did[row])]
        count = int(counts[row])
        i = bisect_left(lad, count)
        if lad[i + 1] - count <= free:
            heap.append((count, row, i, lad))
    heapq.heapify(heap)
    while free > 0 and heap:
        count, row, i, lad = heapq.heappop(heap)
        nxt = lad[i + 1]
        if nxt - count > free:
            continue
        counts[row] = nxt
        free -= nxt - count
        if i + 2 < len(lad):
            heapq.heappush(heap, (nxt, row, i + 1, lad))


class LadderSteps:
    """Per distinct ladder, the (level, step) pairs of its climb, flattened once per ladder
    table (rebuilt when the table's arrays are rebuilt, i.e. when a ladder is added)."""

    def __init__(self) -> None:
        self._of: np.ndarray | None = None
        self.owner = np.empty(0, np.int64)
        self.level = np.empty(0, np.int64)
        self.step = np.empty(0, np.int64)

    def update(self, cflat: np.ndarray, doff: np.ndarray, dlev: np.ndarray) -> None:
        if self._of is cflat:
            return
        self._of = cflat
        owner = np.repeat(np.arange(len(dlev), dtype=np.int64), np.maximum(dlev - 1, 0))
        # position of each pair's lower count: offset + index within the ladder
        starts = np.repeat(doff, np.maximum(dlev - 1, 0))
        first = np.cumsum(np.maximum(dlev - 1, 0)) - np.maximum(dlev - 1, 0)
        within = np.arange(len(owner), dtype=np.int64) - np.repeat(first, np.maximum(dlev - 1, 0))
        pos = starts + within
        self.owner = owner
        self.level = cflat[pos]
        self.step = cflat[pos + 1] - cflat[pos]


def level_counts(
    did: np.ndarray,
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    ladders: Sequence[tuple[int, ...]],
    total: int,
    steps: LadderSteps | None = None,
) -> np.ndarray:
    """Max-Min's count per row (rows in arrival order, ``did``: each row's distinct-ladder
    index into ``arrays = (cflat, rflat, doff, dlev)`` and ``ladders``' counts) on ``total``
    GPUs: :func:`~..helpers.water_fill.water_fill` with the default score, by water level
    (module docstring)."""
    cflat, _, doff, dlev = arrays
    n = len(did)
    counts = np.zeros(n, np.int64)
    if n == 0 or total <= 0:
        return counts
    has = dlev > 0
    last = np.where(has, doff + dlev - 1, 0)
    tops_l = np.where(has, cflat[last], 0)
    first_l = np.where(has, cflat[doff], 0)
    tops = tops_l[did]
    first = first_l[did]
    s1 = int(first.sum())
    if s1 > total:  # level 0: the first steps alone do not all fit
        level = 0
        granted, free = _walk(first, total)
        counts[granted] = first[granted]
    else:
        if steps is None:
            steps = LadderSteps()
        steps.update(cflat, doff, dlev)
        mult = np.bincount(did, minlength=len(dlev))
        per = np.bincount(
            steps.level, weights=steps.step * mult[steps.owner], minlength=total + 1
        ).astype(np.int64)
        per[0] += s1
        used = np.cumsum(per)  # used[c] = U(c + 1)
        over = np.flatnonzero(used > total)
        if len(over) == 0:  # every job at its top
            return tops.copy()
        level = int(over[0])
        free = total - int(used[level - 1])
        # Per distinct ladder: its first count >= level (else its top), whether it waits
        # at the level with a step to take, and that step.
        below = np.concatenate(([0], np.cumsum(cflat < level)))
        idx = below[doff + dlev] - below[doff]  # counts below the level, per ladder
        at = np.where(idx < dlev, doff + idx, last)
        g_l = np.where(has, cflat[at], 0)
        waits = has & (idx < dlev - 1) & (g_l == level)
        step_l = np.where(waits, cflat[np.minimum(at + 1, len(cflat) - 1)] - level, 0)
        counts = g_l[did]
        bucket = np.flatnonzero(waits[did])
        bsteps = step_l[did[bucket]]
        granted, free = _walk(bsteps, free)
        counts[bucket[granted]] += bsteps[granted]
    if free > 0:
        _residual(counts, did, ladders, tops, level, free)
    return counts


def check_counts(ids: Sequence[str], counts: np.ndarray, full: Mapping[str, int]) -> None:
    """Verify mode: raise :class:`LevelFillMismatch` naming the first job (arrival order)
    whose water-level count differs from the full water-fill's ``full``."""
    got = counts.tolist()
    for job_id, count in zip(ids, got, strict=True):
        want = full.get(job_id, 0)
        if count != want:
            raise LevelFillMismatch(
                f"max-min water level gives {job_id} {count} GPUs, the full water-fill {want}"
            )
    if len(full) != sum(1 for c in got if c > 0):
        extra = sorted(set(full) - set(ids))
        raise LevelFillMismatch(f"the full water-fill serves jobs without a row: {extra[:5]}")
