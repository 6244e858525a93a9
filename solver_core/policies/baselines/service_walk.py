"""SRSF's greedy walk as changes, at a cost per decision independent of the queue (issue 28).

SRSF ranks by remaining service ``(C - now) x GPUs``: jobs of one GPU count never reorder,
so :class:`~...helpers.running_order.RunningOrder` keeps one group sorted by ``C`` per GPU
count, but the groups interleave all along the rank. :func:`.shortest_first.changes_by_rank`
bounds a stretch by the next head of *any* other group and so takes ~one job per stretch
here (docs/performance.md, round 3). :func:`changes_by_service` bounds a stretch only by the
next pending or late head and takes it across all groups at once:

* for each group, the entries ranked before that head are a prefix of what is left of it
  (found by bisection on ``C``, then checked against the exact key ``(C - now) x m``);
* when their requested GPUs together fit what is free, all of them keep running: the order
  among them does not matter when every one fits;
* only when they do not fit are they merged by the exact key and walked job by job, up to
  the point where nothing is free (the rest are preempted).

The pending side reads a split of the queue by requested GPUs (``SizedOrder``): the next
pending head is the least head among the sizes that still fit. Free GPUs only shrink within
a decision, so a pending job that does not fit now never does later in the walk, and the
full walk passes it without effect; skipping it changes nothing.

Per decision: O((pending starts + late jobs + sizes) x groups x log n) plus the jobs walked
in a stretch that does not fit (at most the GPUs free then plus the preemptions).
"""

from __future__ import annotations

import bisect

from gpuplan.models import ClusterView

from ...helpers.ranked_queue import Entry
from ...helpers.running_order import RunningOrder


def _prefix(entries: list[Entry], i: int, m: int, now: float, head: Entry) -> int:
    """The end of the run of ``entries[i:]`` whose exact key ``((C - now) x m, submit, id)``
    is below ``head``. The bisection on ``C`` is a guess (``head / m + now`` rounds), so it
    is moved to where the exact comparison, the one the merge walk makes, changes."""
    n = len(entries)
    j = bisect.bisect_left(entries, (head[0] / m + now, head[1], head[2]), i)
    while j > i:
        c, submit, job_id = entries[j - 1]
        if ((c - now) * m, submit, job_id) < head:
            break
        j -= 1
    while j < n:
        c, submit, job_id = entries[j]
        if not ((c - now) * m, submit, job_id) < head:
            break
        j += 1
    return j


def changes_by_service(  # noqa: C901 (a named exception to the complexity gate)
    view: ClusterView,
    pending_by_size: dict[int, list[Entry]],
    order: RunningOrder,
) -> tuple[list[tuple[str, int]], list[str]]:
    """:func:`.shortest_first.rigid_by_rank`'s selection for SRSF as ``(starts,
    preempts)``: the pending jobs that get their request (rank order) and the running jobs
    that fall out. ``pending_by_size``: requested GPUs -> that size's pending entries
    ascending; ``order`` synced to ``view`` with ``service=True`` (every group's multiplier
    is its GPU count, > 0)."""
    now = view.now
    free = view.capacity
    running = view.running
    late, late_need = order.late_entries(running, now)
    groups = [(m, entries, needs) for m, (entries, needs) in order.groups.items() if entries]
    n_groups = len(groups)
    cursor = [0] * n_groups
    totals = order.totals
    taken = [0] * n_groups
    """Requested GPUs of each group's entries before its cursor (for the tail sums)."""
    sizes = sorted((need, part) for need, part in pending_by_size.items() if part)
    at = [0] * len(sizes)
    starts: list[tuple[str, int]] = []
    preempts: list[str] = []
    li, n_late = 0, len(late)
    while free > 0:
        head: Entry | None = None
        k_head = -1
        for k, (need, part) in enumerate(sizes):
            if need > free:
                break  # sizes ascend: no pending job of this size or more fits any more
            i = at[k]
            if i < len(part) and (head is None or part[i] < head):
                head, k_head = part[i], k
        if li < n_late and (head is None or late[li] < head):
            head, k_head = late[li], -1
        # The running entries ranked before the head, every group at once.
        ends: list[int] = []
        amounts: list[int] = []
        total = 0
        for g in range(n_groups):
            m, entries, needs = groups[g]
            i = cursor[g]
            n = len(entries)
            j = n if head is None or i == n else _prefix(entries, i, m, now, head)
            ends.append(j)
            amount = 0
            if j > i:
                if j - i <= n - j:
                    amount = sum(needs[i:j])
                else:  # the tail is shorter (empty when the stretch runs to the end)
                    amount = totals[m] - taken[g] - (sum(needs[j:]) if j < n else 0)
            amounts.append(amount)
            total += amount
        if total <= free:
            free -= total
        else:
            free = _walk_stretch(groups, cursor, ends, now, free, preempts)
        for g in range(n_groups):
            cursor[g] = ends[g]
            taken[g] += amounts[g]
        if head is None or free == 0:
            break
        if k_head < 0:  # the late head
            if late_need[li] <= free:
                free -= late_need[li]
            else:
                preempts.append(head[2])
            li += 1
        else:
            need = sizes[k_head][0]
            if need <= free:
                starts.append((head[2], need))
                free -= need
                at[k_head] += 1
            # else: it no longer fits (the stretch took GPUs); the next pass skips its size
    for g, (_, entries, _) in enumerate(groups):
        preempts.extend(entry[2] for entry in entries[cursor[g] :])
    preempts.extend(entry[2] for entry in late[li:])
    return starts, preempts


def _walk_stretch(
    groups: list[tuple[int, list[Entry], list[int]]],
    cursor: list[int],
    ends: list[int],
    now: float,
    free: int,
    preempts: list[str],
) -> int:
    """Walk the stretch ``entries[cursor[g]:ends[g]]`` of every group merged by the exact
    key, keeping each job that fits what is free and preempting the others; once nothing is
    free the rest are preempted without a merge. Returns the GPUs left free."""
    rows: list[tuple[float, float, str, int]] = []
    for g, (m, entries, needs) in enumerate(groups):
        i, j = cursor[g], ends[g]
        if j > i:  # (key, submit, id, GPUs): ids differ, so GPUs never decide the order
            rows += [
                ((c - now) * m, submit, job_id, need)
                for (c, submit, job_id), need in zip(entries[i:j], needs[i:j], strict=True)
            ]
    rows.sort()
    for n, (_, _, job_id, need) in enumerate(rows):
        if free == 0:
            preempts.extend(row[2] for row in rows[n:])
            break
        if need <= free:
            free -= need
        else:
            preempts.append(job_id)
    return free
