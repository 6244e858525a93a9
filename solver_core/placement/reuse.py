"""Reuse-maximising placement (AFS/CoDDL §4.4): migrate only when it is unavoidable.

Why: CoDDL resizes a job around any worker it keeps (that worker holds the latest parameters),
so a job only pays a checkpoint/restore migration when its new GPU set contains *none* of its
current GPUs. The placement therefore maximises, lexicographically,

0. the GPUs placed (never leave a job pending to spare another one a migration),
1. the number of running jobs that keep at least one of their GPUs ("kept jobs"),
2. the number of GPUs kept in place ("reused GPUs"),
3. (only without network packing) minus the number of (job, node) pairs, so jobs stay packed.

Two solvers share one problem statement (:class:`PlacementProblem`, node-level counts,
:func:`~.network_packing.assign_gpus` for GPU indices):

* :func:`place_greedy` -- whole nodes for multi-node jobs chosen by net kept/reuse gain, then
  sub-node jobs (keep-first with eviction repair, or decreasing; the better wins), then a few
  retries with migrated jobs pinned home; O(n m) per pass and never fails where Prop. 1 holds;
* :func:`place_exact` -- CP-SAT (or any backend) through
  :func:`~gpuplan.solver_core.backends.solve_with_fallback`, hinted with the greedy, falling back
  to it on timeout/failure, and never returning anything worse than it.

**No network sharing** (``no_network_sharing=True``, what :mod:`.compose` uses with
regulation): every placed job with count ``a`` spans exactly ``ceil(a/G)`` nodes and no node
hosts two jobs that span several nodes (App. E's conditions (1) and (2); for a legal
``a = qG`` this means ``q`` whole nodes). The exact model states exactly these two conditions
on counts. The greedy is stricter -- it reserves footprints (``envelope(a)``: whole nodes for
footprints >= G, one node for smaller ones) because that is what makes Prop. 1's "always fits"
argument go through -- so every greedy placement is feasible for the exact model and the exact
answer is never worse. Without the flag only capacity, exclusivity and GPU types constrain.

Allocations are whole GPUs (``share = 1``); a job's held GPUs are those of its current
allocation on usable nodes.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from gpuplan.models import ClusterView, JobAllocation, SolverStats

from ..backends import LinExpr, MipModel, Solution, Var, lin_sum, solve_with_fallback
from ..limits import SolveLimits, resolve_limits
from ..policy import Placements, PlacementStage, Shares
from .gpu_types import assign_types
from .network_packing import assign_gpus, envelope, node_pools, packing_unit

__all__ = [
    "GREEDY_IMPROVE_TRIES",
    "PLACEMENT_WORK_S",
    "PlacementJob",
    "PlacementProblem",
    "ReuseScore",
    "place_exact",
    "place_greedy",
    "problem_from_view",
    "reuse_exact_placement",
    "reuse_greedy_placement",
    "reuse_placement",
    "reuse_score",
]

GREEDY_IMPROVE_TRIES = 16
"""Pinning retries of :func:`place_greedy`: bounds its cost to ~17 passes (< 0.5 s at 64 x 8
GPUs with 200 jobs) while catching the trades a single pass misses."""

PLACEMENT_WORK_S = 5.0
"""Default limit of the exact placement. 64 x 8 GPUs with 200 jobs is ~10^4 variables; CP-SAT
proved optimality in 2.7 s on average there (tests/bench/placement_gap.py), and an early stop
never returns less than the greedy (hint + safeguard)."""

NodeCounts = dict[str, dict[str, int]]
"""{job: {node: GPUs}}: what both solvers decide; :func:`assign_gpus` picks the indices."""


@dataclass(frozen=True, slots=True)
class PlacementJob:
    """One job to place: its target ``count``, the GPUs it ``held`` (node -> indices), and the
    nodes it may use (``None``: all; set for GPU-type-restricted jobs)."""

    id: str
    count: int
    held: Mapping[str, tuple[int, ...]]
    nodes: frozenset[str] | None = None

    def held_on(self, node: str) -> int:
        return len(self.held.get(node, ()))


@dataclass(frozen=True)
class PlacementProblem:
    """Everything a reuse placement decides on. ``pools``: node -> GPUs it may hand out;
    ``unit``: ``G``, GPUs per node."""

    pools: Mapping[str, tuple[int, ...]]
    unit: int
    jobs: tuple[PlacementJob, ...]
    no_network_sharing: bool = True

    def eligible(self, job: PlacementJob) -> list[str]:
        return [n for n in self.pools if job.nodes is None or n in job.nodes]


@dataclass(frozen=True, slots=True, order=True)
class ReuseScore:
    """The lexicographic objective (field order = priority) and what it implies."""

    placed_gpus: int
    kept_jobs: int
    reused_gpus: int
    neg_spread: int
    placed_jobs: int = 0
    migrated_jobs: int = 0
    """running jobs placed without any of their GPUs (they checkpoint/restore)"""
    unplaced_jobs: int = 0


def problem_from_view(view: ClusterView, shares: Shares,
                      no_network_sharing: bool = True) -> PlacementProblem:
    """The placement problem of ``shares`` on ``view`` (jobs with a positive count); on a
    mixed cluster a job not flagged heterogeneous may use one GPU type's nodes only."""
    pools = {n: tuple(g) for n, g in node_pools(view).items()}
    one_type = assign_types(view, {j: c for j, c in shares.items() if c > 0},
                            {n: len(g) for n, g in pools.items()})
    jobs = []
    for job_id in sorted(shares):
        count = shares[job_id]
        job = view.running.get(job_id) or view.pending.get(job_id)
        if job is None or count <= 0:
            continue
        held: dict[str, tuple[int, ...]] = {}
        if job_id in view.running and job.allocation is not None:
            for node, gpus in job.allocation.placement.items():
                mine = tuple(g for g in gpus if g in pools.get(node, ()))
                if mine:
                    held[node] = mine
        nodes = None
        if job.spec.gpu_type is not None:
            nodes = frozenset(n for n in pools if view.nodes[n].gpu_type == job.spec.gpu_type)
        nodes = one_type.get(job_id, nodes)
        jobs.append(PlacementJob(job_id, count, held, nodes))
    return PlacementProblem(pools, packing_unit(view), tuple(jobs), no_network_sharing)


def reuse_score(problem: PlacementProblem,
                placement: Mapping[str, Mapping[str, Collection[int] | int]]) -> ReuseScore:
    """Score a placement given as GPU indices or node-level counts (counts reuse
    ``min(count, held)`` per node, which :func:`assign_gpus` achieves)."""
    placed_gpus = kept = reused = spread = placed = migrated = 0
    for job in problem.jobs:
        nodes = placement.get(job.id)
        if not nodes:
            continue
        placed += 1
        spread += len(nodes)
        mine = 0
        for node, gpus in nodes.items():
            if isinstance(gpus, int):
                placed_gpus += gpus
                mine += min(gpus, job.held_on(node))
            else:
                placed_gpus += len(gpus)
                mine += len(set(gpus) & set(job.held.get(node, ())))
        reused += mine
        if job.held:
            kept += mine > 0
            migrated += mine == 0
    unplaced = sum(1 for j in problem.jobs if j.count > 0 and not placement.get(j.id))
    return ReuseScore(placed_gpus, kept, reused, -spread, placed, migrated, unplaced)


def _score_key(problem: PlacementProblem, score: ReuseScore) -> tuple[int, ...]:
    """What the solvers optimise: spread only counts without network packing."""
    tail = 0 if problem.no_network_sharing else score.neg_spread
    return (score.placed_gpus, score.kept_jobs, score.reused_gpus, tail)


# --------------------------------------------------------------------------------------------
# Greedy
# --------------------------------------------------------------------------------------------


def _greedy_multi(problem: PlacementProblem, jobs: list[PlacementJob], cap: dict[str, int],
                  counts: NodeCounts, pins: Mapping[str, str]) -> set[str]:
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


def _greedy_sub(problem: PlacementProblem, jobs: list[PlacementJob], rem: dict[str, int],
                keep_first: bool, pins: Mapping[str, str]) -> tuple[NodeCounts, list[str]]:
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
            small = sorted((x for x in on[n] if foot[x.id] < f),
                           key=lambda x: (x.held_on(n) > 0, -foot[x.id], x.id))
            if rem[n] + sum(foot[x.id] for x in small) < f:
                continue
            out, room = [], rem[n]
            for x in small:
                if room >= f:
                    break
                out.append(x)
                room += foot[x.id]
            cost = (sum(x.held_on(n) > 0 for x in out),
                    sum(min(x.count, x.held_on(n)) for x in out), len(out), n)
            if best is None or cost < best[0]:
                best = (cost, out)
        if best is None:
            return None
        for x in best[1]:
            move(x, None)
            heapq.heappush(queue, (-foot[x.id], -most_held[x.id], x.id))
        return best[0][3]

    most_held = {j.id: max((j.held_on(n) for n in j.held if n in rem), default=0)
                 for j in jobs}
    by_id = {j.id: j for j in jobs}

    for j in jobs:  # pinned jobs first, wherever the order would put them
        node = pins.get(j.id)
        if node is not None and node in rem and rem[node] >= foot[j.id]:
            move(j, node)
    if keep_first:
        for j in sorted((j for j in jobs if j.id not in where and most_held[j.id] > 0),
                        key=lambda j: (foot[j.id], -most_held[j.id], j.id)):
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
            n = (min(fit, key=lambda n: (free[n], n)) if fit
                 else max(nodes, key=lambda n: (free[n], n)))
            take = min(left, free[n])
            mine[n] = mine.get(n, 0) + take
            free[n] -= take
            left -= take
    return {j: c for j, c in counts.items() if c}


def _greedy_nns(problem: PlacementProblem, jobs: list[PlacementJob],
                pins: Mapping[str, str]) -> NodeCounts:
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
        key = _score_key(problem, reuse_score(problem, cand))
        if best_key is None or key > best_key:
            best, best_key = cand, key
    return best


def _home_pin(problem: PlacementProblem, job: PlacementJob) -> str | None:
    """The node to pin a migrated job to: where it holds most (and it could run)."""
    unit = problem.unit
    foot = envelope(job.count, unit)
    ok = [n for n in job.held if n in problem.pools and (job.nodes is None or n in job.nodes)
          and (len(problem.pools[n]) == unit if foot >= unit else len(problem.pools[n]) >= foot)]
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
    best_key = _score_key(problem, reuse_score(problem, best))
    migrated = sorted((j for j in jobs if j.held), key=lambda j: (-sum(map(len, j.held.values())),
                                                                    j.id))
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
        key = _score_key(problem, reuse_score(problem, trial))
        if key > best_key:
            best, best_key, pins = trial, key, {**pins, job.id: node}
    return best


# --------------------------------------------------------------------------------------------
# Exact model
# --------------------------------------------------------------------------------------------


@dataclass
class _Model:
    """Variables of one exact placement model, kept for hints and decoding."""

    y: dict[tuple[str, str], Var]
    n: dict[tuple[str, str], Var]
    k: dict[tuple[str, str], Var]
    u: dict[str, Var]
    z: dict[str, Var]
    # Interchangeable new jobs (NNS only): class key -> (job ids, per-node vars, count var).
    classes: dict[tuple[int, frozenset[str] | None], tuple[list[str], dict[str, Var],
                                                           Var | None]]


def _build(problem: PlacementProblem, hint: NodeCounts) -> tuple[MipModel, _Model]:
    unit, nns = problem.unit, problem.no_network_sharing
    cap = {n: len(p) for n, p in problem.pools.items()}
    jobs = [j for j in problem.jobs if j.count > 0]
    m = MipModel("reuse-placement")
    mv = _Model({}, {}, {}, {}, {}, {})
    load: dict[str, list[LinExpr | Var]] = {n: [] for n in cap}
    multi_on: dict[str, list[Var]] = {n: [] for n in cap}
    placed: list[LinExpr | Var] = []
    kept: list[Var | LinExpr] = []
    reused: list[LinExpr | Var] = []
    spread: list[Var] = []

    # New jobs of equal count and eligibility are interchangeable under network packing:
    # model them as one class (a count per node) instead of one job each.
    individual: list[PlacementJob] = []
    class_jobs: dict[tuple[int, frozenset[str] | None], list[str]] = {}
    for j in jobs:
        if nns and not j.held and (j.count <= unit or j.count % unit == 0):
            class_jobs.setdefault((j.count, j.nodes), []).append(j.id)
        else:
            individual.append(j)

    for j in individual:
        nodes = problem.eligible(j)
        hj = hint.get(j.id, {})
        home = [n for n in nodes if j.held_on(n) > 0]
        z = m.bool_var(f"z_{j.id}")
        mv.z[j.id] = z
        m.hint(z, int(bool(hj)))
        placed.append(j.count * z)
        if nns and j.count <= unit:  # one node; the count is fixed by the choice of node
            ys = {}
            for n in nodes:
                if cap[n] >= j.count:
                    ys[n] = m.bool_var(f"y_{j.id}_{n}")
                    m.hint(ys[n], int(n in hj))
                    load[n].append(j.count * ys[n])
            m.add(lin_sum(ys.values()) == z, f"one_node_{j.id}")
            mv.y.update({(j.id, n): v for n, v in ys.items()})
            if home:
                kept.append(lin_sum(ys[n] for n in home if n in ys))
                reused.append(lin_sum(min(j.count, j.held_on(n)) * ys[n]
                                      for n in home if n in ys))
            continue
        if nns and j.count % unit == 0:  # q whole nodes
            ys = {}
            for n in nodes:
                if cap[n] == unit:
                    ys[n] = m.bool_var(f"y_{j.id}_{n}")
                    m.hint(ys[n], int(n in hj))
                    load[n].append(unit * ys[n])
                    multi_on[n].append(ys[n])
            m.add(lin_sum(ys.values()) == (j.count // unit) * z, f"whole_nodes_{j.id}")
            mv.y.update({(j.id, n): v for n, v in ys.items()})
            if home:
                u = m.bool_var(f"u_{j.id}")
                mv.u[j.id] = u
                m.add(u <= lin_sum(ys[n] for n in home if n in ys), f"kept_{j.id}")
                m.hint(u, int(any(n in hj for n in home)))
                kept.append(u)
                reused.append(lin_sum(j.held_on(n) * ys[n] for n in home if n in ys))
            continue
        # General job: a count per node (padded multi-node jobs, or no network packing).
        per_node = min(j.count, unit) if nns else j.count
        ys, ns = {}, {}
        for n in nodes:
            hi = min(per_node, cap[n])
            if hi < 1:
                continue
            ys[n] = m.bool_var(f"y_{j.id}_{n}")
            ns[n] = m.int_var(0, hi, f"n_{j.id}_{n}")
            m.add(ns[n] <= hi * ys[n], f"use_{j.id}_{n}")
            m.add(ys[n] <= ns[n], f"used_{j.id}_{n}")
            m.hint(ys[n], int(n in hj))
            m.hint(ns[n], hj.get(n, 0))
            load[n].append(ns[n])
            spread.append(ys[n])
        m.add(lin_sum(ns.values()) == j.count * z, f"count_{j.id}")
        if nns:
            q = -(-j.count // unit)
            m.add(lin_sum(ys.values()) == q * z, f"min_nodes_{j.id}")
            if q > 1:
                for n, y in ys.items():
                    multi_on[n].append(y)
        mv.y.update({(j.id, n): v for n, v in ys.items()})
        mv.n.update({(j.id, n): v for n, v in ns.items()})
        if home:
            ks = []
            for n in home:
                if n not in ns:
                    continue
                k = m.int_var(0, min(j.count, j.held_on(n)), f"k_{j.id}_{n}")
                m.add(k <= ns[n], f"reuse_{j.id}_{n}")
                m.hint(k, min(hj.get(n, 0), j.held_on(n)))
                mv.k[(j.id, n)] = k
                ks.append(k)
            u = m.bool_var(f"u_{j.id}")
            mv.u[j.id] = u
            m.add(u <= lin_sum(ks), f"kept_{j.id}")
            m.hint(u, int(any(n in hj for n in home)))
            kept.append(u)
            reused.append(lin_sum(ks))

    for key, ids in sorted(class_jobs.items(), key=lambda kv: (kv[0][0], kv[1][0])):
        count, allowed = key
        nodes = [n for n in cap if allowed is None or n in allowed]
        per: dict[str, Var] = {}
        hinted = {n: sum(1 for i in ids if n in hint.get(i, {})) for n in nodes}
        tag = ids[0]
        if count <= unit:
            for n in nodes:
                hi = min(len(ids), cap[n] // count)
                if hi >= 1:
                    per[n] = m.int_var(0, hi, f"c_{tag}_{n}")
                    m.hint(per[n], hinted[n])
                    load[n].append(count * per[n])
            m.add(lin_sum(per.values()) <= len(ids), f"class_{tag}")
            placed.append(count * lin_sum(per.values()))
            mv.classes[key] = (ids, per, None)
        else:
            q = count // unit
            t = m.int_var(0, len(ids), f"t_{tag}")
            m.hint(t, sum(1 for i in ids if hint.get(i)))
            for n in nodes:
                if cap[n] == unit:
                    per[n] = m.bool_var(f"w_{tag}_{n}")
                    m.hint(per[n], int(hinted[n] > 0))
                    load[n].append(unit * per[n])
                    multi_on[n].append(per[n])
            m.add(lin_sum(per.values()) == q * t, f"class_{tag}")
            placed.append(count * t)
            mv.classes[key] = (ids, per, t)

    for n in cap:
        if load[n]:
            m.add(lin_sum(load[n]) <= cap[n], f"capacity_{n}")
        if nns and len(multi_on[n]) > 1:
            m.add(lin_sum(multi_on[n]) <= 1, f"one_multi_{n}")

    r_max = sum(min(j.count, sum(len(g) for g in j.held.values())) for j in jobs)
    k_max = sum(1 for j in jobs if j.held)
    w_reuse = 1 if nns else len(spread) + 1
    w_kept = w_reuse * (r_max + 1)
    w_placed = w_kept * (k_max + 1)
    objective = (w_placed * lin_sum(placed) + w_kept * lin_sum(kept)
                 + w_reuse * lin_sum(reused))
    if not nns:
        objective = objective - lin_sum(spread)
    m.maximize(objective)
    return m, mv


def _decode(problem: PlacementProblem, mv: _Model, sol: Solution) -> NodeCounts:
    unit = problem.unit
    counts: NodeCounts = {}
    by_id = {j.id: j for j in problem.jobs}
    for (job_id, node), y in mv.y.items():
        if sol.value(y) != 1:
            continue
        n = mv.n.get((job_id, node))
        c = int(sol.value(n)) if n is not None else min(by_id[job_id].count, unit)
        if c > 0:
            counts.setdefault(job_id, {})[node] = c
    for (count, _), (ids, per, t) in mv.classes.items():
        queue = list(ids)
        if t is None:
            for node, v in per.items():
                for _ in range(int(sol.value(v))):
                    counts[queue.pop(0)] = {node: count}
        else:
            q = count // unit
            nodes = [node for node, v in per.items() if sol.value(v) == 1]
            for i in range(0, len(nodes), q):
                counts[queue.pop(0)] = dict.fromkeys(nodes[i:i + q], unit)
    return counts


def place_exact(
    problem: PlacementProblem,
    *,
    backend: str = "cp-sat",
    time_limit_s: float | None = None,
    limits: SolveLimits | None = None,
    stats: list[SolverStats] | None = None,
    greedy: NodeCounts | None = None,
) -> NodeCounts:
    """Optimal reuse placement (lexicographic objective above) as node-level counts.

    Model (per job ``i``, node ``h``): ``y[i,h]`` uses node, ``n[i,h]`` GPUs there (implied by
    ``y`` for single-node and whole-node jobs), ``k[i,h] <= min(n, held)`` reused GPUs,
    ``u[i] <= sum_h k[i,h]`` kept, ``z[i]`` placed; ``sum_h n = count * z``; per-node capacity;
    with network packing ``sum_h y = ceil(count/G) * z`` and at most one multi-node job per
    node. Interchangeable new jobs are aggregated into classes. Objective weights make the
    order strict. The greedy is the hint and the fallback; a time-limited incumbent worse than
    the greedy is replaced by it (reported as ``fell_back``).
    """
    if greedy is None:
        greedy = place_greedy(problem)
    holder: list[_Model] = []

    def build() -> MipModel:
        model, mv = _build(problem, greedy)
        holder.append(mv)
        return model

    if not any(j.count > 0 for j in problem.jobs):
        result, st = {}, SolverStats(stage="placement", backend=backend, status="optimal",
                                     objective=0.0, bound=0.0, gap=0.0,
                                     message="nothing to place")
    else:
        result, st = solve_with_fallback(build, lambda: greedy,
                                         lambda sol: _decode(problem, holder[-1], sol),
                                         backend,
                                         limits=resolve_limits(time_limit_s, limits,
                                                               PLACEMENT_WORK_S),
                                         stage="placement")
    exact_score = reuse_score(problem, result)
    greedy_score = reuse_score(problem, greedy)
    if _score_key(problem, exact_score) < _score_key(problem, greedy_score):
        result = greedy
        st = st.model_copy(update={
            "status": "heuristic", "fell_back": True,
            "message": f"{backend} incumbent ({st.status}) worse than the greedy; greedy used",
        })
        exact_score = greedy_score
    note = (f"kept {exact_score.kept_jobs} jobs, reused {exact_score.reused_gpus} GPUs "
            f"(greedy {greedy_score.kept_jobs}, {greedy_score.reused_gpus})")
    st = st.model_copy(update={"message": f"{st.message}; {note}" if st.message else note})
    if stats is not None:
        stats.append(st)
    return result


# --------------------------------------------------------------------------------------------
# Placement stages
# --------------------------------------------------------------------------------------------


def _to_allocations(problem: PlacementProblem, counts: NodeCounts) -> Placements:
    held = {j.id: j.held for j in problem.jobs}
    gpus = assign_gpus(problem.pools, counts, held)
    return {j: JobAllocation.fast(j, p) for j, p in gpus.items()}


def reuse_greedy_placement(view: ClusterView, shares: Shares, stats: list[SolverStats], *,
                           no_network_sharing: bool = True) -> Placements:
    """Placement stage: :func:`place_greedy` on ``view`` (appends one heuristic stats entry)."""
    start = time.perf_counter()
    problem = problem_from_view(view, shares, no_network_sharing)
    counts = place_greedy(problem)
    score = reuse_score(problem, counts)
    stats.append(SolverStats(
        stage="placement", backend="heuristic", status="heuristic",
        wall_ms=(time.perf_counter() - start) * 1000.0,
        message=(f"reuse greedy: kept {score.kept_jobs} jobs, reused {score.reused_gpus} GPUs, "
                 f"{score.unplaced_jobs} unplaced"),
    ))
    return _to_allocations(problem, counts)


def reuse_exact_placement(view: ClusterView, shares: Shares, stats: list[SolverStats], *,
                          no_network_sharing: bool = True, backend: str = "cp-sat",
                          limits: SolveLimits | None = None) -> Placements:
    """Placement stage: :func:`place_exact` on ``view`` (appends its solver stats)."""
    problem = problem_from_view(view, shares, no_network_sharing)
    counts = place_exact(problem, backend=backend, limits=limits, stats=stats)
    return _to_allocations(problem, counts)


def reuse_placement(method: str = "greedy", *, no_network_sharing: bool = True,
                    backend: str = "cp-sat",
                    limits: SolveLimits | None = None) -> PlacementStage:
    """A placement stage: ``method`` 'greedy' or 'exact', with or without network packing."""
    if method == "greedy":
        def stage(view: ClusterView, shares: Shares, stats: list[SolverStats]) -> Placements:
            return reuse_greedy_placement(view, shares, stats,
                                          no_network_sharing=no_network_sharing)
    elif method == "exact":
        def stage(view: ClusterView, shares: Shares, stats: list[SolverStats]) -> Placements:
            return reuse_exact_placement(view, shares, stats,
                                         no_network_sharing=no_network_sharing,
                                         backend=backend, limits=limits)
    else:
        raise ValueError(f"reuse placement method must be 'greedy' or 'exact', got {method!r}")
    return stage

