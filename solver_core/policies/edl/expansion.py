"""Elastic-Tiresias' expansion (EDL Alg. 1 lines 7-10) in O(log jobs) per GPU handed out.

Expansion gives each free GPU to the running elastic job with the largest relative throughput
gain ``(S(p+1) - S(p)) / S(p)``, ties (gains within ``TIE`` = 1e-12) to the smaller rank
``(queue, id)``. The rule was first written as a scan over every job for every GPU, which
costs O(free GPUs x jobs) per decision; this module gives the same GPUs to the same jobs in
the same order with the gains kept in classes of equal value.

**The scan's result, exactly.** The scan keeps a best ``b`` and, for each job ``j`` in the
order of ``jobs``, replaces it when ``g_j > g_b + TIE`` or when ``|g_j - g_b| <= TIE`` and
``rank_j < rank_b``. A tolerance is not transitive, so the outcome may depend on the scan
order. Sort the distinct gains and cut them where two neighbours differ by more than ``TIE``
(both as ``hi - lo > TIE`` and ``hi > lo + TIE``, the two forms the scan evaluates; IEEE
rounding is monotone, so a cut between neighbours holds for every pair across it). Call the
part above the top cut ``H``. The first job of ``H`` the scan meets replaces any best below
the cut (its gain is more than ``TIE`` higher), and no job below the cut ever replaces a best
in ``H`` (neither lower by more than ``TIE`` nor within it). So the winner is the scan's
winner over ``H``'s jobs alone, in scan order. When ``H`` is one gain value, every pair ties
and the scan picks the smallest rank: the top of that class's heap, O(log jobs). When ``H``
holds several values that chain within ``TIE`` of each other (rare: it needs gains that differ
by rounding only), this module runs the scan itself over ``H``'s jobs in scan order: the exact
fallback, O(|H| log |H|).

Only the winner's gain changes after a step (a job's gain depends on its own count alone), so
it is re-evaluated and re-filed; a job at its maximum, or whose next gain is not above
``min_gain``, leaves. The next gain is computed only while GPUs remain, as the scan did, so a
profile that cannot evaluate a count raises at the same point.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Sequence

from gpuplan.models import ActiveJob

__all__ = ["TIE", "expand", "gain"]

TIE = 1e-12
"""Gains closer than this are equal for expansion; the smaller rank wins."""

Rank = tuple[int, str]


def gain(job: ActiveJob, p: int) -> float:
    """Relative throughput gain of the ``p+1``-th GPU: ``(S(p+1) - S(p)) / S(p)``."""
    s = job.spec.throughput.rate(p)
    return (job.spec.throughput.rate(p + 1) - s) / s


def _beats(g: float, rank: Rank, best: tuple[float, Rank] | None) -> bool:
    """The scan's replacement test (kept verbatim: the order it defines is the contract)."""
    return best is None or g > best[0] + TIE or (abs(g - best[0]) <= TIE and rank < best[1])


class _Classes:
    """Jobs filed by exact gain value: a heap of (rank, position) per value, values sorted."""

    def __init__(self) -> None:
        self.values: list[float] = []
        """distinct gains with at least one job, ascending"""
        self.by_value: dict[float, list[tuple[Rank, int]]] = {}

    def add(self, g: float, rank: Rank, pos: int) -> None:
        members = self.by_value.get(g)
        if members is None:
            members = self.by_value[g] = []
            bisect.insort(self.values, g)
        heapq.heappush(members, (rank, pos))

    def remove(self, g: float, entry: tuple[Rank, int]) -> None:
        members = self.by_value[g]
        if members[0] == entry:
            heapq.heappop(members)
        else:  # the fallback's winner need not be its class's smallest rank
            members.remove(entry)
            heapq.heapify(members)
        if not members:
            del self.by_value[g]
            del self.values[bisect.bisect_left(self.values, g)]

    def top_group(self) -> list[float]:
        """The distinct gains above the highest cut (``TIE`` apart), highest first."""
        values = self.values
        i = len(values) - 1
        group = [values[i]]
        while i > 0:
            hi, lo = values[i], values[i - 1]
            if hi - lo > TIE and hi > lo + TIE:
                break
            group.append(lo)
            i -= 1
        return group


def expand(
    jobs: Sequence[ActiveJob],
    shares: dict[str, int],
    free: int,
    rank_of: Callable[[ActiveJob], Rank],
    min_gain: float,
) -> None:
    """Hand ``free`` GPUs one at a time to ``jobs`` (in scan order) in ``shares``, in place.

    Each GPU goes to the job the one-GPU scan would choose (module docstring); it stops when no
    job is below its ``max_gpus`` with a gain above ``min_gain``.
    """
    if free <= 0:
        return
    classes = _Classes()
    gains: list[float] = [0.0] * len(jobs)
    ranks: list[Rank] = [rank_of(job) for job in jobs]
    for pos, job in enumerate(jobs):
        p = shares[job.id]
        if p >= job.spec.max_gpus:
            continue
        g = gain(job, p)
        if g > min_gain:
            gains[pos] = g
            classes.add(g, ranks[pos], pos)
    while free > 0 and classes.values:
        group = classes.top_group()
        if len(group) == 1:
            g = group[0]
            entry = classes.by_value[g][0]
        else:  # exact fallback: the scan over the tied group's jobs, in scan order
            members = sorted((pos, v) for v in group for _, pos in classes.by_value[v])
            best: tuple[float, Rank] | None = None
            win = -1
            for pos, v in members:
                if _beats(v, ranks[pos], best):
                    best, win = (v, ranks[pos]), pos
            g, entry = gains[win], (ranks[win], win)
        classes.remove(g, entry)
        pos = entry[1]
        job = jobs[pos]
        shares[job.id] += 1
        free -= 1
        p = shares[job.id]
        if free > 0 and p < job.spec.max_gpus:
            g = gain(job, p)
            if g > min_gain:
                gains[pos] = g
                classes.add(g, ranks[pos], pos)
