"""Usable nodes bucketed by their count of wholly free GPUs, for O(GPUs per node) best fit.

Best fit asks two questions per placed job: "the node with the fewest free GPUs that still
holds ``need`` (ties: smallest name)" and, when no node holds it, "the node with the most free
GPUs (ties: largest name)". Scanning every node answers them in O(nodes); this index keeps, for
each free count ``k``, the names of the nodes with exactly ``k`` free GPUs in a sorted list, so
both answers cost a walk over the (at most GPUs-per-node + 1) buckets plus a bisection. The
engine updates it whenever a node's free set changes; :meth:`FreeIndex.check` rebuilds it from
scratch and compares (the tests drive random event sequences through it).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sized

__all__ = ["FreeIndex"]

_bisect_left = bisect.bisect_left
_insort = bisect.insort


class FreeIndex:
    """Node name -> free-GPU count, bucketed by count (each bucket's names ascending)."""

    __slots__ = ("_buckets", "_count", "total")

    def __init__(self) -> None:
        self._buckets: list[list[str]] = [[]]
        self._count: dict[str, int] = {}
        self.total = 0
        """Wholly free GPUs over all indexed nodes."""

    def __len__(self) -> int:
        return len(self._count)

    def count(self, node: str) -> int:
        """Free GPUs of ``node`` as indexed."""
        return self._count[node]

    def set(self, node: str, count: int) -> None:
        """Record that ``node`` has ``count`` free GPUs (adds the node if it is new)."""
        counts = self._count
        old = counts.get(node)
        if old == count:
            return
        buckets = self._buckets
        if old is not None:
            bucket = buckets[old]
            del bucket[_bisect_left(bucket, node)]
            self.total += count - old
        else:
            self.total += count
        while len(buckets) <= count:
            buckets.append([])
        _insort(buckets[count], node)
        counts[node] = count

    def discard(self, node: str) -> None:
        """Forget ``node`` (it left the usable set)."""
        old = self._count.pop(node, None)
        if old is None:
            return
        bucket = self._buckets[old]
        del bucket[bisect.bisect_left(bucket, node)]
        self.total -= old

    def tightest(self, need: int) -> str | None:
        """The node with the fewest free GPUs >= ``need`` (ties: smallest name), or None."""
        buckets = self._buckets
        for k in range(max(need, 0), len(buckets)):
            if buckets[k]:
                return buckets[k][0]
        return None

    def fullest(self) -> str | None:
        """The node with the most free GPUs (ties: largest name), or None if none is free."""
        buckets = self._buckets
        for k in range(len(buckets) - 1, 0, -1):
            if buckets[k]:
                return buckets[k][-1]
        return None

    def check(self, free: Mapping[str, Sized]) -> None:
        """Raise AssertionError unless the index equals one rebuilt from ``free``."""
        fresh = FreeIndex()
        for node, gpus in free.items():
            fresh.set(node, len(gpus))
        mine = [b for b in self._buckets if b]
        theirs = [b for b in fresh._buckets if b]
        assert self._count == fresh._count, "free counts differ from a rebuild"
        assert mine == theirs and self.total == fresh.total, "buckets differ from a rebuild"
