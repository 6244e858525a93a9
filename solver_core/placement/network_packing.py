"""Network packing (AFS/CoDDL §4.4, Appendix E): legal share sizes, regulation, Prop. 1 FFD.

Why: two data-parallel jobs that both talk across the same node's NIC slow each other down
("network sharing"). CoDDL avoids it by *regulating* every job's share to a size that is a
factor or a multiple of the GPUs per node ``G``. With such sizes a placement always exists in
which (1) every job spans the minimum number of nodes, ``ceil(r/G)``, and (2) at most one job
per node spans several nodes (Prop. 1). Regulation changes the policy's shares as little as
possible (Prop. 2 bounds the loss: ``r_i >= x_i``, the largest legal size not above ``s_i``).

This module holds the pure, view-free pieces (so they are cheap to property-test):

* legal sizes: ``{0} U {2^l : 2^l < G, 2^l | G} U {qG : q >= 1}`` (digest §2.9/§7.3: for
  ``G = 4`` that is 0, 1, 2, 4, 8, 12, ...; for ``G = 2^k`` the divisibility test is a no-op,
  for other ``G`` it keeps only the powers of two that divide ``G``, the only ones for which
  FFD still always succeeds);
* :func:`regulate_greedy` (Prop. 2's constructive proof, "largest deficit first" or "least
  L1 change per GPU first") and
  :func:`regulate_exact` (L1 integer program through :mod:`gpuplan.solver_core.backends`,
  falling back to the greedy);
* :func:`ffd_node_counts` (Prop. 1's constructive FFD) and :func:`network_sharing_violations`;

plus the view adapters :func:`regulate_view` and :func:`packed_placement` (Prop. 1 FFD as a
placement stage, ignoring where jobs run now; :mod:`.reuse` is the migration-aware one).

**Allowed counts win over legality.** A job whose allowed counts (rigid size, elastic range,
``allowed`` list) contain no legal size near its share is never given a count it does not
allow. Instead it runs on an allowed count ``a`` and *reserves* the footprint
``envelope(a)`` -- the smallest legal size >= ``a`` (a rigid 3-GPU job with ``G = 4`` reserves
a whole node and leaves one GPU idle; a rigid 6-GPU job reserves two whole nodes). Regulation
and FFD work on footprints, so Prop. 1 and the always-succeeds guarantee still hold; the price
is ``envelope(a) - a`` idle GPUs, reported as shortfall when it pushes the total down.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from gpuplan.models import ClusterView, JobAllocation, SolverStats

from ..backends import MipModel, Solution, lin_sum, solve_with_fallback
from ..limits import SolveLimits, resolve_limits
from ..policy import Placements, Shares
from .gpu_types import assign_types

__all__ = [
    "REGULATION_WORK_S",
    "GreedyRule",
    "RegulationOption",
    "assign_gpus",
    "envelope",
    "ffd_node_counts",
    "floor_legal",
    "is_legal",
    "legal_sizes",
    "network_sharing_violations",
    "node_pools",
    "packed_placement",
    "packing_unit",
    "regulate_exact",
    "regulate_greedy",
    "regulate_view",
    "regulation_cost",
    "regulation_options",
    "small_sizes",
]

REGULATION_WORK_S = 1.0
"""Default limit of the exact regulation: the model has O(n (log G + N/G)) booleans and one
coupling row, so CP-SAT proves optimality in milliseconds; the limit only guards outliers."""


# --------------------------------------------------------------------------------------------
# Legal sizes
# --------------------------------------------------------------------------------------------


def small_sizes(unit: int) -> tuple[int, ...]:
    """Legal sub-node sizes: powers of two below ``unit`` that divide it (1, 2, ..., G/2)."""
    out: list[int] = []
    p = 1
    while p < unit and unit % p == 0:
        out.append(p)
        p *= 2
    return tuple(out)


def is_legal(count: int, unit: int) -> bool:
    """True for 0, a legal sub-node size, or a positive multiple of ``unit``."""
    return count == 0 or (count > 0 and count % unit == 0) or count in small_sizes(unit)


def legal_sizes(unit: int, limit: int) -> tuple[int, ...]:
    """Every legal size in ``[0, limit]``, ascending (``legal_sizes(4, 16)`` = 0,1,2,4,8,12,16)."""
    sizes = [0, *(s for s in small_sizes(unit) if s <= limit)]
    sizes += range(unit, limit + 1, unit)
    return tuple(sizes)


def envelope(count: int, unit: int) -> int:
    """Footprint of ``count``: the smallest legal size >= ``count`` (``count`` if legal)."""
    if count <= 0:
        return 0
    if count >= unit:
        return -(-count // unit) * unit
    for s in small_sizes(unit):
        if s >= count:
            return s
    return unit


def floor_legal(share: int, unit: int) -> int:
    """Prop. 2's ``x_i``: the largest legal size not above ``share``."""
    if share <= 0:
        return 0
    if share >= unit:
        return share // unit * unit
    return max(s for s in small_sizes(unit) if s <= share)


@dataclass(frozen=True, slots=True)
class RegulationOption:
    """One choice for a job: reserve ``footprint`` GPUs (a legal size) and run on ``count``."""

    footprint: int
    count: int


def regulation_options(
    unit: int, limit: int, allowed: Iterable[int] | None = None
) -> tuple[RegulationOption, ...]:
    """A job's choices, by ascending footprint, starting with (0, 0).

    For each legal footprint ``v`` the job runs on the largest allowed count in
    ``(previous legal size, v]``; footprints with no such count are not offered. Without
    ``allowed`` every count is allowed, so every legal ``v <= limit`` is offered with count ``v``.
    """
    legal = legal_sizes(unit, limit)
    opts = [RegulationOption(0, 0)]
    if allowed is None:
        opts += (RegulationOption(v, v) for v in legal[1:])
        return tuple(opts)
    counts = sorted({c for c in allowed if 0 < c <= limit})
    j = 0
    for prev, v in itertools.pairwise(legal):
        best = None
        while j < len(counts) and counts[j] <= v:
            if counts[j] > prev:
                best = counts[j]
            j += 1
        if best is not None:
            opts.append(RegulationOption(v, best))
    return tuple(opts)


# --------------------------------------------------------------------------------------------
# Regulation (Prop. 2)
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _RegJob:
    id: str
    share: int
    options: tuple[RegulationOption, ...]
    low: int  # index of x_i: the largest option whose count does not exceed the share
    idx: int = 0

    @property
    def opt(self) -> RegulationOption:
        return self.options[self.idx]

    def cost(self, idx: int) -> int:
        return abs(self.options[idx].count - self.share)


def _reg_jobs(
    shares: Mapping[str, int],
    unit: int,
    capacity: int,
    allowed: Mapping[str, Iterable[int] | None] | None,
) -> list[_RegJob]:
    """Jobs with a positive share, sorted by id (ties must not depend on dict order)."""
    if unit < 1:
        raise ValueError(f"unit (GPUs per node) must be >= 1, got {unit}")
    jobs = []
    for job_id in sorted(shares):
        share = int(shares[job_id])
        if share <= 0:
            continue
        opts = regulation_options(unit, capacity, (allowed or {}).get(job_id))
        low = max(i for i, o in enumerate(opts) if o.count <= share)
        jobs.append(_RegJob(job_id, share, opts, low, low))
    return jobs


def _target(jobs: list[_RegJob], capacity: int) -> int:
    """GPUs the policy meant to use: ``min(sum s, N)`` (App. E assumes ``sum s = N``)."""
    return min(sum(j.share for j in jobs), capacity)


GreedyRule = Literal["deficit", "marginal"]


def _greedy(jobs: list[_RegJob], capacity: int, rule: GreedyRule = "deficit") -> None:
    """Prop. 2's construction on ``jobs`` (mutates ``idx``); see :func:`regulate_greedy`."""
    for j in jobs:
        j.idx = j.low
    used = sum(j.opt.footprint for j in jobs)
    # Padded footprints of conflicting jobs can overflow N: step the most padded job down.
    while used > capacity:
        j = max(
            (j for j in jobs if j.idx > 0),
            key=lambda j: (j.opt.footprint - j.share, j.opt.footprint, j.id),
        )
        used -= j.opt.footprint - j.options[j.idx - 1].footprint
        j.idx -= 1
    target = _target(jobs, capacity)

    def step(j: _RegJob) -> int:
        return j.options[j.idx + 1].footprint - j.opt.footprint

    def deficit_first(j: _RegJob) -> tuple[object, ...]:
        return (j.opt.count - j.share, step(j), j.id)

    def marginal_first(j: _RegJob) -> tuple[object, ...]:
        return (Fraction(j.cost(j.idx + 1) - j.cost(j.idx), step(j)), *deficit_first(j))

    key = marginal_first if rule == "marginal" else deficit_first
    # Prop. 2 methods 1 and 2 (qG -> (q+1)G, 2^l -> 2^(l+1)); the proof allows any choice.
    while used < target:
        d = target - used
        cands = [j for j in jobs if j.idx + 1 < len(j.options) and step(j) <= d]
        if not cands:
            break
        j = min(cands, key=key)
        used += step(j)
        j.idx += 1
    # Stuck below the target (only when caps or sum s not a multiple of G): one round-up step
    # into GPUs the policy left idle anyway, if that is the cheapest way to leave none idle.
    if used < target:
        spare = capacity - used
        cands = [j for j in jobs if j.idx + 1 < len(j.options) and step(j) <= spare]
        if cands:
            j = min(
                cands,
                key=lambda j: (
                    j.cost(j.idx + 1) - j.cost(j.idx),
                    j.opt.count - j.share,
                    step(j),
                    j.id,
                ),
            )
            j.idx += 1


def _result(jobs: list[_RegJob]) -> dict[str, int]:
    return {j.id: j.opt.count for j in jobs if j.opt.count > 0}


def regulate_greedy(
    shares: Mapping[str, int],
    unit: int,
    capacity: int,
    allowed: Mapping[str, Iterable[int] | None] | None = None,
    rule: GreedyRule = "deficit",
) -> dict[str, int]:
    """Regulate ``shares`` to legal sizes with Prop. 2's construction; returns run counts.

    Start from ``r_i = x_i`` (the largest option not above ``s_i``), then, while the total
    footprint is below ``T = min(sum s, N)``, grow one job to its next option if that fits in
    the gap. ``rule="deficit"`` (the digest's verified choice) grows the job with the largest
    deficit ``s_i - r_i`` (ties: smaller step, then id); ``rule="marginal"`` the one whose L1
    change per added GPU is smallest (ties as before), which in our benchmark matched the
    exact optimum. Prop. 2's proof allows any choice, so with ``G = 2^k``, ``sum s = N`` and
    no caps both end at ``sum r = N``. ``allowed`` maps job ids to their allowed counts
    (missing: any count). Jobs with share 0 stay at 0: regulation never starts a job the
    policy did not run.
    """
    jobs = _reg_jobs(shares, unit, capacity, allowed)
    _greedy(jobs, capacity, rule)
    return _result(jobs)


def regulation_cost(
    shares: Mapping[str, int], regulated: Mapping[str, int], unit: int, capacity: int
) -> tuple[int, int]:
    """``(shortfall, L1)``: footprint GPUs left idle below ``min(sum s, N)``, and
    ``sum |r_i - s_i|`` over run counts. Both regulators minimise this lexicographically."""
    target = min(sum(max(0, s) for s in shares.values()), capacity)
    used = sum(envelope(r, unit) for r in regulated.values())
    l1 = sum(abs(regulated.get(j, 0) - max(0, s)) for j, s in shares.items())
    l1 += sum(r for j, r in regulated.items() if j not in shares)
    return max(0, target - used), l1


def regulate_exact(
    shares: Mapping[str, int],
    unit: int,
    capacity: int,
    allowed: Mapping[str, Iterable[int] | None] | None = None,
    *,
    backend: str = "cp-sat",
    time_limit_s: float | None = None,
    limits: SolveLimits | None = None,
    stats: list[SolverStats] | None = None,
) -> dict[str, int]:
    """Least-change regulation as an integer program (digest §2.9 ILP, §7.2 item 14).

    Variables ``b[i,o]`` pick one option per job. Constraints: one option each; total footprint
    ``<= N``; ``r_i >= x_i`` (dropped only when padded footprints make ``sum x > N``).
    Objective: ``min W * shortfall + sum |count - s_i|`` with ``shortfall >= T - sum footprint``
    and ``W`` above any possible L1, i.e. first leave no GPU idle that the policy used, then
    change the shares least. The better greedy answer is the hint and the fallback (timeout or
    solver failure); every solve appends one :class:`SolverStats` (stage ``regulation``).
    """
    jobs = _reg_jobs(shares, unit, capacity, allowed)
    # Hint, fallback and pruning bound: the better of the two greedy rules.
    best: tuple[tuple[int, int], list[int]] | None = None
    for rule in ("marginal", "deficit"):
        _greedy(jobs, capacity, rule)  # type: ignore[arg-type]
        cost = regulation_cost(shares, _result(jobs), unit, capacity)
        if best is None or cost < best[0]:
            best = (cost, [j.idx for j in jobs])
    assert best is not None
    greedy_idx = best[1]
    for j, i in zip(jobs, greedy_idx, strict=True):
        j.idx = i
    greedy = _result(jobs)
    lower = sum(j.options[j.low].footprint for j in jobs) <= capacity
    target = _target(jobs, capacity)
    picks: list[list[tuple[int, object]]] = []

    def build() -> MipModel:
        m = MipModel("regulation")
        weight = sum(max(j.cost(i) for i in range(len(j.options))) for j in jobs) + 1
        short = m.int_var(0, target, "shortfall")
        # Sound pruning: the optimum is at most the greedy's objective, and every job pays at
        # least its cheapest option, so an option costing more than that slack is never used.
        first = [j.low if lower else 0 for j in jobs]
        cheapest = [
            min(j.cost(i) for i in range(f, len(j.options)))
            for j, f in zip(jobs, first, strict=True)
        ]
        g_short, g_l1 = regulation_cost(shares, greedy, unit, capacity)
        slack = weight * g_short + g_l1 - sum(cheapest)
        foot, cost = [], []
        for j, g_idx, f, low_cost in zip(jobs, greedy_idx, first, cheapest, strict=True):
            row = [
                (i, m.bool_var(f"b_{j.id}_{i}"))
                for i in range(f, len(j.options))
                if j.cost(i) - low_cost <= slack
            ]
            picks.append(row)
            m.add(lin_sum(b for _, b in row) == 1, f"one_{j.id}")
            foot += [j.options[i].footprint * b for i, b in row]
            cost += [j.cost(i) * b for i, b in row]
            for i, b in row:
                m.hint(b, int(i == g_idx))
        total = lin_sum(foot)
        m.add(total <= capacity, "capacity")
        m.add(short + total >= target, "shortfall")
        m.minimize(weight * short + lin_sum(cost))
        m.hint(short, max(0, target - sum(j.opt.footprint for j in jobs)))
        return m

    def decode(sol: Solution) -> dict[str, int]:
        for j, row in zip(jobs, picks, strict=True):
            j.idx = next(i for i, b in row if sol.value(b) == 1)  # type: ignore[arg-type]
        return _result(jobs)

    if not jobs:
        result, st = (
            {},
            SolverStats(
                stage="regulation",
                backend=backend,
                status="optimal",
                objective=0.0,
                bound=0.0,
                gap=0.0,
                message="no job to regulate",
            ),
        )
    else:
        result, st = solve_with_fallback(
            build,
            lambda: dict(greedy),
            decode,
            backend,
            limits=resolve_limits(time_limit_s, limits, REGULATION_WORK_S),
            stage="regulation",
        )
    if stats is not None:
        stats.append(st)
    return result


# --------------------------------------------------------------------------------------------
# Prop. 1 FFD and the no-network-sharing rule
# --------------------------------------------------------------------------------------------


def ffd_node_counts(
    counts: Mapping[str, int],
    node_sizes: Mapping[str, int],
    unit: int,
    eligible: Mapping[str, Collection[str]] | None = None,
) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Prop. 1's placement on empty nodes: ``({job: {node: gpus}}, unplaced job ids)``.

    Jobs are handled by footprint ``envelope(count)``: a footprint ``qG`` takes ``q`` whole
    nodes (nodes of exactly ``G`` GPUs, in name order) and runs its count on them (full nodes
    first); a smaller footprint goes first-fit-decreasing onto one node. With identical nodes of
    ``G = 2^k`` GPUs and total footprint ``<= N`` nothing is ever unplaced: every footprint
    divides ``G`` and all larger items were placed first, so free space stays a multiple of the
    current item. ``eligible`` optionally restricts a job to some nodes (GPU types); the
    guarantee then no longer holds and a job that does not fit is reported unplaced.
    """
    free = {n: size for n, size in sorted(node_sizes.items())}
    whole = [n for n, size in free.items() if size == unit]
    out: dict[str, dict[str, int]] = {}
    unplaced: list[str] = []
    jobs = sorted(
        ((envelope(c, unit), c, j) for j, c in counts.items() if c > 0), key=lambda t: (-t[0], t[2])
    )
    for foot, count, job_id in jobs:
        ok = eligible[job_id] if eligible and job_id in eligible else None
        if foot >= unit:
            q = foot // unit
            nodes = [n for n in whole if free[n] == unit and (ok is None or n in ok)][:q]
            if len(nodes) < q:
                unplaced.append(job_id)
                continue
            out[job_id] = {}
            left = count
            for n in nodes:
                take = min(unit, left)
                out[job_id][n] = take
                free[n] = 0  # the whole node is reserved, padding included
                left -= take
        else:
            node = next((n for n, f in free.items() if f >= foot and (ok is None or n in ok)), None)
            if node is None:
                unplaced.append(job_id)
                continue
            out[job_id] = {node: count}
            free[node] -= foot
    return out, unplaced


def network_sharing_violations(
    placement: Mapping[str, Mapping[str, Collection[int] | int]], unit: int
) -> list[str]:
    """Why ``placement`` ({job: {node: gpus or count}}) shares the network; [] if it does not.

    The rule (App. E): (1) every job spans exactly ``ceil(count/G)`` nodes, the minimum;
    (2) at most one job on any node spans two or more nodes.
    """
    problems: list[str] = []
    multi_on: dict[str, list[str]] = {}
    for job_id, nodes in placement.items():
        count = sum(g if isinstance(g, int) else len(g) for g in nodes.values())
        need = -(-count // unit)
        if len(nodes) != need:
            problems.append(f"job {job_id}: {count} GPUs on {len(nodes)} nodes, minimum {need}")
        if len(nodes) > 1:
            for n in nodes:
                multi_on.setdefault(n, []).append(job_id)
    for node, jobs in sorted(multi_on.items()):
        if len(jobs) > 1:
            problems.append(f"node {node}: multi-node jobs {sorted(jobs)} share its network")
    return problems


# --------------------------------------------------------------------------------------------
# View adapters
# --------------------------------------------------------------------------------------------


def packing_unit(view: ClusterView) -> int:
    """``G``: the largest usable node (``Cluster.gpus_per_node`` over usable nodes).

    App. E assumes identical nodes; on mixed clusters the guarantees hold only on ``G``-GPU
    nodes (smaller nodes host sub-node jobs only).
    """
    return max((n.gpus for n in view.nodes.values()), default=1)


def node_pools(view: ClusterView) -> dict[str, list[int]]:
    """GPUs a placement may hand out, per usable node: free ones plus those running jobs hold
    (everything is re-decided at once), ascending."""
    pools = {n: set(g) for n, g in view.free.items() if n in view.nodes}
    for job in view.running.values():
        if job.allocation is None:
            continue
        for node, gpus in job.allocation.placement.items():
            if node in pools:
                pools[node].update(g for g in gpus if 0 <= g < view.nodes[node].gpus)
    return {n: sorted(g) for n, g in sorted(pools.items())}


def assign_gpus(
    pools: Mapping[str, Iterable[int]],
    node_counts: Mapping[str, Mapping[str, int]],
    held: Mapping[str, Mapping[str, Iterable[int]]],
) -> dict[str, dict[str, tuple[int, ...]]]:
    """Turn node-level counts into GPU indices, keeping each job's own GPUs where it stays.

    On every node, jobs first keep up to their count of the GPUs they hold there (lowest
    indices first), then take the lowest unclaimed GPUs. Since held sets are disjoint and a
    node's counts sum to at most its pool, this always succeeds and reuses
    ``min(count, held on node)`` GPUs per job and node -- the quantity both reuse models count.
    """
    claimed: dict[str, set[int]] = {n: set() for n in pools}
    kept: dict[str, dict[str, list[int]]] = {}
    for job_id in sorted(node_counts):
        for node, count in sorted(node_counts[job_id].items()):
            own = sorted(set(held.get(job_id, {}).get(node, ())) - claimed[node])
            pool = set(pools[node])
            mine = [g for g in own if g in pool][:count]
            claimed[node].update(mine)
            kept.setdefault(job_id, {})[node] = mine
    out: dict[str, dict[str, tuple[int, ...]]] = {}
    for node, pool in pools.items():
        spare = sorted(set(pool) - claimed[node])
        for job_id in sorted(node_counts):
            count = node_counts[job_id].get(node, 0)
            if count <= 0:
                continue
            mine = kept[job_id][node]
            extra = count - len(mine)
            if extra > len(spare):
                raise ValueError(f"node {node}: counts exceed its {len(list(pool))} GPUs")
            mine, spare = mine + spare[:extra], spare[extra:]
            out.setdefault(job_id, {})[node] = tuple(sorted(mine))
    return {j: dict(sorted(p.items())) for j, p in out.items()}


def _allowed_of(view: ClusterView, job_id: str) -> tuple[int, ...] | None:
    job = view.running.get(job_id) or view.pending.get(job_id)
    return job.spec.allowed_counts() if job is not None else None


def regulate_view(
    view: ClusterView,
    shares: Shares,
    stats: list[SolverStats],
    *,
    method: str = "greedy",
    backend: str = "cp-sat",
    limits: SolveLimits | None = None,
) -> Shares:
    """Regulate a shares stage's output on ``view`` (``G`` = :func:`packing_unit`, ``N`` =
    usable GPUs, allowed counts from each job's spec). ``method``: 'greedy' (largest deficit
    first), 'marginal' (least L1 per GPU first) or 'exact'. Appends one stats entry."""
    unit, capacity = packing_unit(view), view.capacity
    allowed = {j: _allowed_of(view, j) for j in shares}
    if method == "exact":
        return regulate_exact(
            shares, unit, capacity, allowed, backend=backend, limits=limits, stats=stats
        )
    if method not in ("greedy", "marginal"):
        raise ValueError(
            f"regulation method must be 'greedy', 'marginal' or 'exact', got {method!r}"
        )
    rule: GreedyRule = "marginal" if method == "marginal" else "deficit"
    start = time.perf_counter()
    result = regulate_greedy(shares, unit, capacity, allowed, rule)
    short, l1 = regulation_cost(shares, result, unit, capacity)
    stats.append(
        SolverStats(
            stage="regulation",
            backend="heuristic",
            status="heuristic",
            wall_ms=(time.perf_counter() - start) * 1000.0,
            message=f"Prop. 2 greedy ({rule}): shortfall {short}, L1 change {l1}",
        )
    )
    return result


def packed_placement(view: ClusterView, shares: Shares, stats: list[SolverStats]) -> Placements:
    """Prop. 1 FFD as a placement stage: re-packs every job from scratch.

    Ignores current placements except that a job landing on a node where it already holds GPUs
    keeps them (free, via :func:`assign_gpus`). It migrates freely, so it is the reference for
    "always succeeds", not for production; use :mod:`.reuse` for that. Jobs restricted to one
    GPU type only see nodes of that type (and may then stay pending); on a mixed cluster every
    job not flagged heterogeneous is restricted to one type (:func:`.gpu_types.assign_types`).
    """
    start = time.perf_counter()
    unit = packing_unit(view)
    pools = node_pools(view)
    eligible: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    for job_id, count in shares.items():
        job = view.running.get(job_id) or view.pending.get(job_id)
        if job is None or count <= 0:
            continue
        counts[job_id] = count
        if job.spec.gpu_type is not None:
            eligible[job_id] = {n for n in pools if view.nodes[n].gpu_type == job.spec.gpu_type}
    # on a mixed cluster, a job not flagged heterogeneous stays on one (its fastest) type
    eligible.update(assign_types(view, counts, {n: len(g) for n, g in pools.items()}))
    sizes = {n: len(g) for n, g in pools.items()}
    node_counts, unplaced = ffd_node_counts(counts, sizes, unit, eligible)
    held = {
        j: dict(view.running[j].allocation.placement)  # type: ignore[union-attr]
        for j in node_counts
        if j in view.running and view.running[j].allocation
    }
    gpus = assign_gpus(pools, node_counts, held)
    stats.append(
        SolverStats(
            stage="placement",
            backend="heuristic",
            status="heuristic",
            wall_ms=(time.perf_counter() - start) * 1000.0,
            message=f"Prop. 1 FFD: {len(gpus)} placed, {len(unplaced)} unplaced",
        )
    )
    return {j: JobAllocation.fast(j, p) for j, p in gpus.items()}
