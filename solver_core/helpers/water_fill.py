"""Max-min water-filling over ladders: the one implementation behind AFS-S, Max-Min and Optimus.

Every job climbs its own ladder (its allowed counts, see :mod:`.ladders`). Two phases:

1. **first steps in order**: walking the jobs in the given order, each gets its first count
   while GPUs last; a job whose first count no longer fits is skipped (a later, smaller one may
   still fit). The walk stops as soon as no GPU is free, so a long queue costs only the jobs
   actually served (the order may be a lazy iterable);
2. **growth**: the next ladder step goes to the served job with the lowest *score* (ties: the
   order of phase 1). A job whose next step does not fit stops growing for good (the free GPUs
   only shrink), as does one whose score is None.

With the default score -- the GPUs the job holds -- this is max-min fair water-filling: the
job holding the fewest GPUs always grows next, and since every job with none is served in
phase 1 before any job grows, phase 1 is the water level's first rung. Optimus passes the
negated marginal gain instead. AFS-S (ladders cut by the saturation guard, jobs in scan order)
and Max-Min (useful ladders, arrival order) differ only in their inputs, not in this code.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence

__all__ = ["FillScore", "water_fill"]

FillScore = Callable[[int, int, int], float | None]
"""(position in the order, current count, next count) -> priority of that step (lower first);
None = the job never grows past its current count."""


def water_fill(
    ladders: Iterable[Sequence[int]], total: int, score: FillScore | None = None
) -> dict[int, int]:
    """Water-fill ``total`` GPUs over ``ladders`` (in priority order): ``{position: count}``.

    Only served positions appear, in the order they were first served. ``score`` ranks growth
    steps (default: the count held, i.e. fewest GPUs first); ties go to the earlier position.
    """
    filled: dict[int, int] = {}
    free = total
    # (score, position, ladder index held, ladder): positions are unique, so ladders are never
    # compared.
    heap: list[tuple[float, int, int, Sequence[int]]] = []
    walk = iter(ladders)
    pos = -1
    while free > 0:  # phase 1; the next ladder is only drawn while a GPU is free
        ladder = next(walk, None)
        if ladder is None:
            break
        pos += 1
        if not ladder or ladder[0] > free:
            continue
        count = ladder[0]
        filled[pos] = count
        free -= count
        if len(ladder) > 1:
            s = count if score is None else score(pos, count, ladder[1])
            if s is not None:
                heap.append((s, pos, 0, ladder))
    heapq.heapify(heap)
    while free > 0 and heap:  # phase 2
        _, pos, i, ladder = heapq.heappop(heap)
        count, nxt = ladder[i], ladder[i + 1]
        if nxt - count > free:
            continue
        filled[pos] = nxt
        free -= nxt - count
        if i + 2 < len(ladder):
            s = nxt if score is None else score(pos, nxt, ladder[i + 2])
            if s is not None:
                heapq.heappush(heap, (s, pos, i + 1, ladder))
    return filled
