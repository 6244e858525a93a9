"""Literal AFS share computation (Algorithm 1 of AFS/CoDDL, NSDI'21), kept as a test oracle.

This module transcribes the paper's box line by line, O(M * n) per call: ``M`` calls of
TOPPRIORITY, each a linear scan over every eligible job. It is deliberately naive; the
production code in :mod:`.afs` must return *identical* shares (a property test compares them)
while being orders of magnitude faster. Keeping the literal version importable lets the tests,
the benchmark and anyone doubting the fast version check it against the paper.

Only the additions the paper leaves unspecified are made here, identically to production
(000 digest §2.6, §7.2 items 2, 3, 4, 13):

* Algorithm 1's lines 9-12 are read with the fixed indentation: swap so that ``j_a`` is the
  shorter job, then test (3) in the ``else`` branch;
* ``j* <- any job in J`` is the first *eligible* job in the given (fixed) scan order, and the
  loop visits jobs in that order, because (3) is not transitive and the result depends on it;
* a job is *eligible* for the next step only if its ladder (:class:`~.afs_job.AfsJob`) has a next
  count and the step fits in the GPUs left; the loop stops when no job is eligible (leftover
  GPUs stay idle). A "step" is one GPU for an ordinary elastic job, and the jump to the next
  allowed count (``0 -> min_gpus``, or between allowed counts) otherwise;
* ``len(1)`` of a job with no GPUs is read as ``len(first count)``: the length at the size the
  job would first run at (``min_gpus``, 1 for ordinary jobs).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from .afs_job import AfsJob

INF = float("inf")


def inequality3(p_a: float, p_a_next: float, p_b: float, p_b_next: float) -> bool:
    """AFS inequality (3): True when the longer job ``b`` should get the next GPU.

    ``(p'_b - p_b) / p'_b > (p'_a - p_a) / p_a`` with ``p = P(cnt)``, ``p' = P(next count)``.
    ``p_a`` must be positive (the shorter job always holds GPUs when (3) is evaluated).
    """
    return (p_b_next - p_b) / p_b_next > (p_a_next - p_a) / p_a


class _State:
    """Scratch state of one job during the literal loop (``cnt`` of Algorithm 1)."""

    __slots__ = ("cnt", "job", "level")

    def __init__(self, job: AfsJob) -> None:
        self.job = job
        self.level = -1  # index into job.counts; -1 = no GPUs
        self.cnt = 0

    def rate(self) -> float:
        return self.job.rates[self.level] if self.level >= 0 else 0.0

    def next_rate(self) -> float:
        return self.job.rates[self.level + 1]

    def step(self) -> int:
        return self.job.counts[self.level + 1] - self.cnt

    def eligible(self, m: int) -> bool:
        return self.level + 1 < len(self.job.counts) and self.step() <= m

    def length(self) -> float:
        """``j.len(j.cnt)``: remaining time at the tentative count; infinite with no GPUs."""
        return self.job.remaining / self.rate() if self.level >= 0 else INF

    def first_length(self) -> float:
        """``j.len(1)``, read as the length at the job's first count."""
        return self.job.remaining / self.job.rates[0]


def _top_priority(jobs: list[_State]) -> _State:
    """TOPPRIORITY of Algorithm 1 (lines 1-13) over the eligible jobs, in their given order."""
    star = jobs[0]
    for j in jobs:
        a, b = star, j
        if a.cnt == 0 and b.cnt == 0:
            star = a if a.first_length() < b.first_length() else b
        else:
            if a.length() >= b.length():
                a, b = b, a
            star = b if inequality3(a.rate(), a.next_rate(), b.rate(), b.next_rate()) else a
    return star


def afs_l_reference(jobs: Sequence[AfsJob], total: int) -> list[int]:
    """Procedure AFS-L (lines 14-23): GPU counts aligned with ``jobs`` (the scan order)."""
    states = [_State(j) for j in jobs]
    m = total
    while m > 0:
        eligible = [s for s in states if s.eligible(m)]
        if not eligible:
            break
        star = _top_priority(eligible)
        step = star.step()
        star.level += 1
        star.cnt += step
        m -= step
    return [s.cnt for s in states]


def _top_priority_p(jobs: list[_State], rng: random.Random) -> _State:
    """AFS-P's TOPPRIORITY: (3) both ways; if neither way holds, a seeded coin decides.

    Zero-GPU jobs have ``p = 0``: their ``(p' - p) / p`` side is infinite (they never lose as
    the shorter job) and their ``(p' - p) / p'`` side is 1.
    """
    star = jobs[0]
    for j in jobs:
        if j is star:
            continue
        if _beats_p(star, j):  # (3) with a = star, b = j
            star = j
        elif _beats_p(j, star):  # (3) with a = j, b = star
            pass
        elif rng.random() < 0.5:
            star = j
    return star


def _beats_p(a: _State, b: _State) -> bool:
    """(3) with ``a`` as the shorter job, allowing ``p_a = 0`` (then the left side can't win)."""
    p_a = a.rate()
    if p_a == 0.0:
        return False
    return inequality3(p_a, a.next_rate(), b.rate(), b.next_rate())


def afs_p_reference(jobs: Sequence[AfsJob], total: int, seed: int) -> list[int]:
    """The AFS-L loop with AFS-P's TOPPRIORITY (the ``n <= M`` branch of AFS-P).

    Consumes ``random.Random(seed)`` exactly like :func:`~.afs.afs_p_loop`, which must agree.
    """
    rng = random.Random(seed)
    states = [_State(j) for j in jobs]
    m = total
    while m > 0:
        eligible = [s for s in states if s.eligible(m)]
        if not eligible:
            break
        star = _top_priority_p(eligible, rng)
        step = star.step()
        star.level += 1
        star.cnt += step
        m -= step
    return [s.cnt for s in states]
