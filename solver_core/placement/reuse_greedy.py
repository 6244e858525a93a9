"""Greedy reuse placement: fast, deterministic, and never failing where Prop. 1 holds.

Why: it is the placement every ``*-packed`` / ``*-reuse`` policy runs each round, and both the
hint and the fallback of the exact model (:mod:`.reuse_exact`), so it must be cheap (O(n m) per
pass) and always place everything that fits.

With network packing (``no_network_sharing=True``) the greedy reserves footprints
(``envelope(a)``: whole nodes for footprints >= G, one node for smaller ones) because that is
what makes Prop. 1's "always fits" argument go through; it is stricter than App. E's conditions,
so every greedy placement is feasible for the exact model. One pass gives multi-node jobs whole
nodes chosen by net kept/reuse gain, then places sub-node jobs (keep-first with eviction repair,
or decreasing; the better wins); a few retries then pin migrated jobs home. Without the flag,
jobs keep what they hold and grow best-fit. The objective is that of :mod:`.reuse_problem`.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping

from .network_packing import envelope
from .reuse_problem import NodeCounts, PlacementJob, PlacementProblem, reuse_score, score_key

__all__ = ["GREEDY_IMPROVE_TRIES", "place_greedy"]

GREEDY_IMPROVE_TRIES = 16
"""Pinning retries of :func:`place_greedy`: bounds its cost to ~17 passes (< 0.5 s at 64 x 8
GPUs with 200 jobs) while catching the trades a single pass misses."""


def _greedy_multi(  # noqa: C901 (a named exception to the complexity gate)
    problem: PlacementProblem,
    jobs: list[PlacementJob],
    cap: dict[str, int],
    counts: NodeCounts,
    pins: Mapping[str, str],
) -> set[str]:
    """Give each multi-node job (footprint >= G) its whole nodes; returns the nodes taken.

    Pinned multi-node jobs get their pinned node first; nodes pinned to sub-node jobs are not
    handed out. Then every step assigns the (job, node) pair with the best net gain: a kept job
    (first node the job already uses) minus the kept jobs it costs others (their last remaining
    home), weighted above reused GPUs gained minus reused GPUs others lose there.
    """
    unit = problem.unit
    multi = [j for j in jobs if envelope(j.count, unit) >= unit]
    if not multi:
        return set()
    need = {j.id: envelope(j.count, unit) // unit for j in multi}
    free_whole = {n for n in problem.pools if cap[n] == unit}
    free_whole -= {n for j, n in pins.items() if j not in need}
    got: dict[str, list[str]] = {j.id: [] for j in multi}
    homes = {j.id: {n for n in j.held if n in problem.pools} for j in jobs}
    secured: set[str] = set()  # multi jobs that already have a home node
    big = sum(cap.values()) + 1
    is_multi = set(need)

    on_node: dict[str, list[PlacementJob]] = {n: [] for n in problem.pools}
    for j in jobs:
        for n in homes[j.id]:
            on_node[n].append(j)

    def assign(job_id: str, node: str) -> None:
        got[job_id].append(node)
        free_whole.discard(node)
        if node in homes[job_id]:
            secured.add(job_id)
        for j in on_node[node]:
            if j.id != job_id:
                homes[j.id].discard(node)

    for job_id, node in sorted(pins.items()):
        if job_id in need and node in free_whole:
            assign(job_id, node)

    def cheapest(nodes: Collection[str], losses: dict[str, tuple[int, int]]) -> str:
        return min(nodes, key=lambda n: (big * losses[n][0] + losses[n][1], n))

    def loss(node: str, taker: str) -> tuple[int, int]:
        lost_kept = lost_reuse = 0
        for j in on_node[node]:
            if j.id == taker or node not in homes[j.id]:
                continue
            lost_reuse += min(j.count, j.held_on(node))
            if len(homes[j.id]) == 1 and not (j.id in is_multi and j.id in secured):
                lost_kept += 1
        return lost_kept, lost_reuse

    while True:
        open_jobs = [j for j in multi if len(got[j.id]) < need[j.id]]
        if not open_jobs or not free_whole:
            break
        losses = {n: loss(n, "") for n in free_whole}
        anywhere = cheapest(free_whole, losses)
        best: tuple[tuple[int, int, int, str, str], str, str] | None = None
        for j in open_jobs:
            if j.nodes is None:
                n_ok, cands = len(free_whole), [n for n in homes[j.id] if n in free_whole]
                cands.append(anywhere)  # the best node it does not use: least loss, then name
            else:
                ok = [n for n in free_whole if n in j.nodes]
                if not ok:
                    continue
                n_ok, cands = len(ok), [n for n in ok if n in homes[j.id]]
                cands.append(cheapest(ok, losses))
            for n in cands:
                lk, lr = loss(n, j.id) if n in homes[j.id] else losses[n]
                gain_kept = int(n in homes[j.id] and j.id not in secured)
                value = big * (gain_kept - lk) + j.held_on(n) - lr
                # Smallest key wins: best value, then the most constrained job, then names.
                key = (-value, n_ok, -need[j.id], j.id, n)
                if best is None or key < best[0]:
                    best = (key, j.id, n)
        if best is None:
            break
        assign(best[1], best[2])
    taken: set[str] = set()
    by_id = {j.id: j for j in multi}
    for job_id, nodes in got.items():
        if len(nodes) < need[job_id]:
            continue  # not enough whole nodes: unplaced, its nodes go back to sub-node jobs
        job = by_id[job_id]
        left = job.count
        counts[job_id] = {}
        # The partial node (padded counts) is the one it holds least on.
        for n in sorted(nodes, key=lambda n: (-job.held_on(n), n)):
            counts[job_id][n] = min(problem.unit, left)
            left -= counts[job_id][n]
        taken.update(nodes)
    return taken


def _greedy_sub(  # noqa: C901 (a named exception to the complexity gate)
    problem: PlacementProblem,
    jobs: list[PlacementJob],
    rem: dict[str, int],
    keep_first: bool,
    pins: Mapping[str, str],
) -> tuple[NodeCounts, list[str]]:
    """Sub-node jobs (footprint < G) onto one node each; capacity counted in footprints.

    ``keep_first=False`` is Prop. 1's FFD with preferences: decreasing footprint, each job on
    the home node where it holds most, else the node least wanted by jobs still unplaced, then
    best fit. Every footprint divides the free space of every node at its turn, so any node
    with room works and nothing fails while the footprints fit in total.

    ``keep_first=True`` first keeps jobs on a home node, smallest footprint first (more jobs
    kept per GPU), then places the rest by decreasing footprint. When no node has room for a
    footprint ``f``, it *evicts* jobs smaller than ``f`` from the node where that costs the
    fewest kept jobs; they re-enter the queue. Room always exists that way: on a node with free
    space ``0 < free < f``, jobs of size >= ``f`` fill a multiple of ``f`` so the smaller jobs
    plus ``free`` reach ``f``. Each eviction swaps one item for strictly smaller ones, so the
    process terminates, and it never fails where the decreasing order would not.
    """
    unit = problem.unit
    rem = dict(rem)
    foot = {j.id: envelope(j.count, unit) for j in jobs}
    contest = dict.fromkeys(rem, 0)  # held GPUs of jobs not placed yet, per node
    for j in jobs:
        for n in j.held:
            if n in contest:
                contest[n] += j.held_on(n)
    where: dict[str, str] = {}
    on: dict[str, list[PlacementJob]] = {n: [] for n in rem}
    failed: list[str] = []

    def move(j: PlacementJob, node: str | None) -> None:
        """Place ``j`` on ``node``, or evict it (``None``)."""
        sign = 1
        if node is None:
            node, sign = where.pop(j.id), -1
            on[node].remove(j)
        else:
            where[j.id] = node
            on[node].append(j)
        rem[node] -= sign * foot[j.id]
        for n in j.held:
            if n in contest:
                contest[n] -= sign * j.held_on(n)

    def home(j: PlacementJob) -> str | None:
        ok = [n for n in j.held if n in rem and rem[n] >= foot[j.id]]
        return min(ok, key=lambda n: (-j.held_on(n), rem[n], n)) if ok else None

    def eligible(j: PlacementJob) -> list[str]:
        return [n for n in rem if j.nodes is None or n in j.nodes]

    def any_node(j: PlacementJob) -> str | None:
        ok = [n for n in eligible(j) if rem[n] >= foot[j.id]]
        return min(ok, key=lambda n: (contest[n], rem[n], n)) if ok else None

    def repair(j: PlacementJob) -> str | None:
        f = foot[j.id]
        best: tuple[tuple[int, int, int, str], list[PlacementJob]] | None = None
        for n in eligible(j):
            small = sorted(
                (x for x in on[n] if foot[x.id] < f),
                key=lambda x: (x.held_on(n) > 0, -foot[x.id], x.id),
            )
            if rem[n] + sum(foot[x.id] for x in small) < f:
                continue
            out, room = [], rem[n]
            for x in small:
                if room >= f:
                    break
                out.append(x)
                room += foot[x.id]
            cost = (
                sum(x.held_on(n) > 0 for x in out),
                sum(min(x.count, x.held_on(n)) for x in out),
                len(out),
                n,
            )
            if best is None or cost < best[0]:
                best = (cost, out)
        if best is None:
            return None
        for x in best[1]:
            move(x, None)
            heapq.heappush(queue, (-foot[x.id], -most_held[x.id], x.id))
        return best[0][3]

    most_held = {j.id: max((j.held_on(n) for n in j.held if n in rem), default=0) for j in jobs}
    by_id = {j.id: j for j in jobs}

    for j in jobs:  # pinned jobs first, wherever the order would put them
        node = pins.get(j.id)
        if node is not None and node in rem and rem[node] >= foot[j.id]:
            move(j, node)
    if keep_first:
        for j in sorted(
            (j for j in jobs if j.id not in where and most_held[j.id] > 0),
            key=lambda j: (foot[j.id], -most_held[j.id], j.id),
        ):
            node = home(j)
            if node is not None:
                move(j, node)
    # Decreasing footprint, then most held, then id; evicted jobs are pushed back in.
    queue = [(-foot[j.id], -most_held[j.id], j.id) for j in jobs if j.id not in where]
    heapq.heapify(queue)
    while queue:
        j = by_id[heapq.heappop(queue)[2]]
        node = home(j) or any_node(j) or (repair(j) if keep_first else None)
        if node is None:
            failed.append(j.id)
        else:
            move(j, node)
    return {i: {n: by_id[i].count} for i, n in where.items()}, failed


def _greedy_plain(problem: PlacementProblem, jobs: list[PlacementJob]) -> NodeCounts:
    """Without network packing: every job keeps ``min(count, held)`` GPUs (optimal for kept
    jobs and reused GPUs, since held sets are disjoint), then grows best-fit: own nodes,
    then the tightest node that fits the rest, else the emptiest nodes first."""
    free = {n: len(p) for n, p in problem.pools.items()}
    counts: NodeCounts = {}
    for j in jobs:
        left = j.count
        counts[j.id] = {}
        for n in sorted(j.held, key=lambda n: (-j.held_on(n), n)):
            if n in free and left > 0:
                take = min(left, j.held_on(n))
                counts[j.id][n] = take
                free[n] -= take
                left -= take
    for j in sorted(jobs, key=lambda j: (-(j.count - sum(counts[j.id].values())), j.id)):
        mine = counts[j.id]
        left = j.count - sum(mine.values())
        nodes = problem.eligible(j)
        if sum(free[n] for n in nodes) < left:
            for n, c in mine.items():
                free[n] += c
            del counts[j.id]
            continue
        for n in sorted(mine, key=lambda n: (-mine[n], n)):
            take = min(left, free[n])
            mine[n] += take
            free[n] -= take
            left -= take
        while left > 0:
            fit = [n for n in nodes if free[n] >= left]
            n = (
                min(fit, key=lambda n: (free[n], n))
                if fit
                else max(nodes, key=lambda n: (free[n], n))
            )
            take = min(left, free[n])
            mine[n] = mine.get(n, 0) + take
            free[n] -= take
            left -= take
    return {j: c for j, c in counts.items() if c}


def _greedy_nns(
    problem: PlacementProblem, jobs: list[PlacementJob], pins: Mapping[str, str]
) -> NodeCounts:
    """One greedy pass with network packing: multi-node jobs, then sub-node jobs (both
    orders; the better result wins)."""
    unit = problem.unit
    cap = {n: len(p) for n, p in problem.pools.items()}
    counts: NodeCounts = {}
    taken = _greedy_multi(problem, jobs, cap, counts, pins)
    sub = [j for j in jobs if envelope(j.count, unit) < unit]
    rem = {n: c for n, c in cap.items() if n not in taken}
    best: NodeCounts = counts
    best_key: tuple[int, ...] | None = None
    for keep_first in (True, False):
        sub_counts, _ = _greedy_sub(problem, sub, rem, keep_first, pins)
        cand = {**counts, **sub_counts}
        key = score_key(problem, reuse_score(problem, cand))
        if best_key is None or key > best_key:
            best, best_key = cand, key
    return best


def _home_pin(problem: PlacementProblem, job: PlacementJob) -> str | None:
    """The node to pin a migrated job to: where it holds most (and it could run)."""
    unit = problem.unit
    foot = envelope(job.count, unit)
    ok = [
        n
        for n in job.held
        if n in problem.pools
        and (job.nodes is None or n in job.nodes)
        and (len(problem.pools[n]) == unit if foot >= unit else len(problem.pools[n]) >= foot)
    ]
    return min(ok, key=lambda n: (-job.held_on(n), n)) if ok else None


def place_greedy(problem: PlacementProblem, *, improve: int = GREEDY_IMPROVE_TRIES) -> NodeCounts:
    """Greedy reuse placement as node-level counts ``{job: {node: gpus}}``; unplaced jobs are
    left out (none, under Prop. 1's conditions with network packing).

    With network packing, up to ``improve`` jobs the first pass migrates are retried one at a
    time *pinned* to the node they hold most on; a pin is kept when the whole placement scores
    better (the passes' own tie-breaks cannot see such trades, e.g. moving one small job so
    that a whole-node job can stay). Deterministic; costs at most ``improve`` extra passes.
    """
    jobs = [j for j in problem.jobs if j.count > 0]
    if not problem.no_network_sharing:
        return _greedy_plain(problem, jobs)
    pins: dict[str, str] = {}
    best = _greedy_nns(problem, jobs, pins)
    best_key = score_key(problem, reuse_score(problem, best))
    migrated = sorted(
        (j for j in jobs if j.held), key=lambda j: (-sum(map(len, j.held.values())), j.id)
    )
    tries = 0
    for job in migrated:
        if tries >= improve:
            break
        if any(job.held_on(n) for n in best.get(job.id, {})):
            continue  # keeps GPUs already
        node = _home_pin(problem, job)
        if node is None:
            continue
        tries += 1
        trial = _greedy_nns(problem, jobs, {**pins, job.id: node})
        key = score_key(problem, reuse_score(problem, trial))
        if key > best_key:
            best, best_key, pins = trial, key, {**pins, job.id: node}
    return best
