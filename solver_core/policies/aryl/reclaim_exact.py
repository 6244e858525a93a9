"""The exact reclaim: fewest preemptions as an integer programme, split by coupled components.

Costs of returning servers are coupled only through jobs spanning several on-loan servers.
:func:`components` finds the groups of servers so coupled -- the connected components of the
bipartite server-job graph (networkx) -- and :func:`select_exact` solves small components by
enumeration and the rest in one ILP (CP-SAT or any backend of
:mod:`gpuplan.solver_core.backends`) under a deterministic budget, falling back to
:func:`~.reclaim_greedy.select_aryl`.
"""

from __future__ import annotations

import time

import networkx as nx
import numpy as np

from gpuplan.models import SolverStats

from ...backends import MipModel, Solution, lin_sum, solve_with_fallback
from ...limits import SolveLimits, resolve_limits
from .reclaim_greedy import select_aryl
from .reclaim_lns import improve
from .reclaim_model import ReclaimInstance, ReclaimJob, clamp_count, evaluate
from .reclaim_rins import RINS_NODES_PER_WORK_S, lp_relaxation, rins, tight_model

__all__ = ["LNS_FROM_SERVERS", "RECLAIM_WORK_S", "SEARCH_SHARE", "components", "select_exact"]

RECLAIM_WORK_S = 1.0
"""Deterministic budget of an exact reclaim made for a policy (CP-SAT deterministic seconds)."""

LNS_FROM_SERVERS = 300
"""Servers in components too large to enumerate from which CP-SAT's ILP is not tried: at that
size it proves nothing within its budget and would return Aryl's answer, so the whole budget
goes to the search of :mod:`.reclaim_lns` and the RINS sub-MIP of :mod:`.reclaim_rins` instead
(issue 15)."""

SEARCH_SHARE = 0.3
"""Share of an unproven reclaim's budget that the annealing and CP-SAT steps of
:mod:`.reclaim_lns` get before the RINS sub-MIP of :mod:`.reclaim_rins` (which starts from their
answer). The sub-MIP does most of the closing: from Aryl's answer alone it ends 1-3 % above the
optimum on the generated 1,000-server instances; the short search first makes its incumbent
better and its neighbourhood smaller."""


def _contiguous_floor(job: ReclaimJob) -> int | None:
    """Smallest allowed count a such that every count in [a, total] is allowed, when every
    allowed count <= total is in that range; None when the allowed set has gaps below total."""
    if not job.allowed:
        return job.total
    below = sorted(a for a in job.allowed if 0 < a <= job.total)
    if not below or below[-1] != job.total:
        return None if below else job.total + 1  # cannot keep its current size: any loss kills
    if below == list(range(below[0], job.total + 1)):
        return below[0]
    return None


def components(inst: ReclaimInstance) -> list[list[str]]:
    """On-loan servers grouped by the jobs they share, each group in loan order.

    The groups are the connected components of the bipartite graph with an edge between every
    on-loan server and every job holding GPUs on it (GPUs on training servers do not link
    anything: those servers are never returned). Costs are coupled only through jobs spanning
    several on-loan servers, so the preemptions of a choice are the sum over components of what
    it takes from each. Groups are listed by their first server in loan order (the order the
    exact model's variables, and so its solution among ties, depends on).
    """
    rank = {s: i for i, s in enumerate(inst.servers)}
    graph = nx.Graph()
    graph.add_nodes_from(("server", s) for s in inst.servers)
    for k, job in enumerate(inst.jobs):
        graph.add_edges_from((("job", k), ("server", s)) for s in job.gpus if s in rank)
    groups = [
        sorted((name for kind, name in comp if kind == "server"), key=rank.__getitem__)
        for comp in nx.connected_components(graph)
    ]
    return sorted((g for g in groups if g), key=lambda g: rank[g[0]])


def _enumerate_component(
    servers: list[str], jobs: list[ReclaimJob], big: int, upto: int
) -> list[tuple[int, int, int]]:
    """For m = 0..upto: (preemptions, busy GPUs, bit mask) of the best m-subset of ``servers``.

    Every subset is scored at once with numpy: bit i of a mask = ``servers[i]`` returned; a
    job's lost GPUs per mask are built by doubling the array once per server. Ties go to fewer
    busy GPUs, then to the lowest mask (earliest servers in loan order)."""
    k = len(servers)
    size = 1 << k
    preempted = np.zeros(size, dtype=np.int64)
    busy = np.zeros(size, dtype=np.int64)
    for job in jobs:
        lost = np.zeros(1, dtype=np.int64)
        for s in servers:
            lost = np.concatenate((lost, lost + job.gpus.get(s, 0)))
        total = job.total
        ok = np.zeros(total + 1, dtype=bool)
        for a in job.allowed or {total}:
            if 0 < a <= total:
                ok[a] = True
        preempted += ~ok[total - lost]
        busy += lost
    masks = np.arange(size, dtype=np.int64)
    popcount = np.zeros(size, dtype=np.int64)
    for i in range(k):
        popcount += (masks >> i) & 1
    score = preempted * big + busy
    out = []
    for m in range(min(k, upto) + 1):
        idx = np.flatnonzero(popcount == m)
        best = int(idx[np.argmin(score[idx])])
        out.append((int(preempted[best]), int(busy[best]), best))
    return out


def select_exact(  # noqa: C901 (a named exception to the complexity gate)
    inst: ReclaimInstance,
    count: int,
    *,
    backend: str = "cp-sat",
    time_limit_s: float | None = None,
    limits: SolveLimits | None = None,
    enumerate_limit: int = 14,
) -> tuple[list[str], SolverStats]:
    """Fewest preemptions, exactly (the paper's exhaustive-search optimum as an ILP).

    Core model: ``x_s`` = server s returned, ``y_j`` = job j preempted, lost GPUs
    ``L_j = sum_s g_js x_s``; a job may lose up to its slack ``total - a_j`` (``a_j`` its smallest
    allowed count with everything above it allowed) without preemption:
    ``L_j <= slack_j + (total_j - slack_j) y_j``; rigid jobs also get ``y_j >= x_s``. Allowed sets
    with gaps are modelled exactly with one binary per allowed count.

    That model's LP bound is weak (spreading x fractionally makes every y small), so CP-SAT
    cannot prove optimality on a few hundred servers. The instance is therefore split into
    components of servers linked by shared jobs (:func:`components`); components of at most
    ``enumerate_limit`` servers are solved exactly by enumeration for every m (the best m
    servers), and enter the ILP as a choice ``z_cm`` of how many servers to take from them;
    only larger components keep the x/y rows. ``sum_m m z_cm + sum x_s = N_R``.
    Objective: ``BIG * preemptions + busy GPUs returned`` -- fewest preemptions, then prefer
    idle servers (deterministic). Falls back to :func:`select_aryl` on timeout or failure.

    On CP-SAT, an answer the ILP does not prove optimal (Aryl's after a timeout, or CP-SAT's
    incumbent) is improved by the large-neighbourhood search of :mod:`.reclaim_lns` and a
    RINS sub-MIP of the tight model (:mod:`.reclaim_rins`; both in :func:`_select_lns`) with a
    second budget of the same size (with a wall-clock limit only,
    the ILP gets half of it and the search the rest); when the components too large to
    enumerate hold more than :data:`LNS_FROM_SERVERS` servers the ILP is skipped. Either way
    the result is ``feasible`` with the tight model's LP bound (``optimal`` only if it meets the
    bound), stats backend ``cp-sat-lns``, and ``objective`` and ``bound`` count preemptions.
    A proven ILP answer is returned exactly as before the search existed.
    """
    count = clamp_count(inst, count)
    if count == 0:
        return [], SolverStats(stage="reclaim", backend=backend, status="optimal", objective=0.0)
    on = inst.jobs_on()
    used = {s: sum(j.gpus[s] for j in on[s]) for s in inst.servers}
    big = sum(used.values()) + 1
    comps = components(inst)
    small = [c for c in comps if len(c) <= enumerate_limit]
    large = [s for c in comps if len(c) > enumerate_limit for s in c]
    tables = []
    for comp in small:
        members = set(comp)
        jobs = [j for j in inst.jobs if not members.isdisjoint(j.gpus)]
        tables.append(_enumerate_component(comp, jobs, big, count))
    if backend == "cp-sat" and len(large) > LNS_FROM_SERVERS:
        return _select_lns(inst, count, resolve_limits(time_limit_s, limits, RECLAIM_WORK_S))
    large_set = set(large)
    large_jobs = [j for j in inst.jobs if not large_set.isdisjoint(j.gpus)]
    xs: dict[str, object] = {}
    zs: dict[tuple[int, int], object] = {}
    greedy = set(select_aryl(inst, count))

    def build() -> MipModel:
        m = MipModel("reclaim")
        picked_terms = []
        obj_terms = []
        for ci, table in enumerate(tables):
            row = []
            for size, (pre, busy, _) in enumerate(table):
                z = m.bool_var(f"z_{ci}_{size}")
                zs[ci, size] = z
                row.append(z)
                picked_terms.append(size * z)
                obj_terms.append((big * pre + busy) * z)
            m.add(lin_sum(row) == 1, f"one_{ci}")
            take = sum(1 for s in small[ci] if s in greedy)
            for size in range(len(table)):
                m.hint(zs[ci, size], 1 if size == take else 0)  # type: ignore[arg-type]
        for s in large:
            xs[s] = m.bool_var(f"x_{s}")
            picked_terms.append(xs[s])
            obj_terms.append(used[s] * xs[s])  # type: ignore[operator]
            m.hint(xs[s], 1 if s in greedy else 0)  # type: ignore[arg-type]
        m.add(lin_sum(picked_terms) == count, "demand")  # type: ignore[arg-type]
        for k, job in enumerate(large_jobs):
            loan = [s for s in job.gpus if s in xs]
            y = m.bool_var(f"y_{k}")
            obj_terms.append(big * y)
            lost = lin_sum(job.gpus[s] * xs[s] for s in loan)  # type: ignore[operator]
            total = job.total
            floor = _contiguous_floor(job)
            if floor is not None:
                slack = max(0, total - floor)
                m.add(lost <= slack + (total - slack) * y, f"keep_{k}")
                if slack == 0:
                    for s in loan:
                        m.add(y >= xs[s], f"rigid_{k}_{s}")  # type: ignore[operator]
            else:
                options = sorted(a for a in job.allowed if 0 < a <= total)
                ws = [m.bool_var(f"w_{k}_{a}") for a in options]
                m.add(lin_sum(ws) + y == 1, f"choose_{k}")
                kept = total - lost - lin_sum(a * w for a, w in zip(options, ws, strict=True))
                m.add(kept <= total * y, f"kept_hi_{k}")
                m.add(kept >= -total * y, f"kept_lo_{k}")
        m.minimize(lin_sum(obj_terms))  # type: ignore[arg-type]
        return m

    def decode(sol: Solution) -> list[str]:
        chosen: set[str] = {s for s in large if sol.value(xs[s]) == 1}  # type: ignore[arg-type]
        for ci, table in enumerate(tables):
            for size, (_, _, mask) in enumerate(table):
                if sol.value(zs[ci, size]) == 1:  # type: ignore[arg-type]
                    chosen.update(s for i, s in enumerate(small[ci]) if mask >> i & 1)
        return [s for s in inst.servers if s in chosen]

    budget = resolve_limits(time_limit_s, limits, RECLAIM_WORK_S)
    polish = backend == "cp-sat"
    ilp_budget = (
        budget if budget.work_s is not None or not polish else SolveLimits.wall(budget.wall_s / 2)
    )
    chosen, stats = solve_with_fallback(
        build, lambda: select_aryl(inst, count), decode, backend, limits=ilp_budget, stage="reclaim"
    )
    if not polish or stats.status == "optimal":
        return chosen, stats
    # unproven (Aryl's answer after a timeout, or CP-SAT's incumbent): improve it
    rest = (
        budget
        if budget.work_s is not None
        else SolveLimits.wall(max(0.05, budget.wall_s - stats.wall_ms / 1000.0))
    )
    return _select_lns(
        inst,
        count,
        rest,
        start=chosen,
        before=f"ILP {stats.status} ({stats.message or 'no proof'}), then ",
        spent_ms=stats.wall_ms,
        fell_back=stats.fell_back,
    )


def _select_lns(
    inst: ReclaimInstance,
    count: int,
    budget: SolveLimits,
    *,
    start: list[str] | None = None,
    before: str = "",
    spent_ms: float = 0.0,
    fell_back: bool = False,
) -> tuple[list[str], SolverStats]:
    """``start`` (default Aryl's servers) improved by :func:`.reclaim_lns.improve` and then a
    RINS sub-MIP (:func:`.reclaim_rins.rins`) around the tight model's LP solution, with that
    LP's bound. ``before``/``spent_ms``: what ran first (the ILP), for the message and time;
    ``fell_back``: the ILP failed (kept visible in the stats).

    The LP comes first (it is the bound and guides the sub-MIP). A deterministic budget of W
    gives the search ``SEARCH_SHARE * W`` and the sub-MIP ``W * RINS_NODES_PER_WORK_S`` HiGHS
    nodes; a wall-clock-only budget gives the search ``SEARCH_SHARE`` of what the LP left and
    the sub-MIP the rest. The answer is the better of the two, so never worse than ``start``."""
    t0 = time.perf_counter() - spent_ms / 1000.0
    if start is None:
        start = select_aryl(inst, count)

    def left() -> float:
        return max(0.05, budget.wall_s - (time.perf_counter() - t0))

    t_lp = time.perf_counter()
    model = tight_model(inst, count)
    bound, lp_x = lp_relaxation(model, time_limit_s=left())
    t_lp = time.perf_counter() - t_lp
    if budget.work_s is not None:
        search = SolveLimits(wall_s=budget.wall_s, work_s=budget.work_s * SEARCH_SHARE)
        nodes: int | None = max(1, round(budget.work_s * RINS_NODES_PER_WORK_S))
    else:
        search = SolveLimits.wall(max(0.05, SEARCH_SHARE * left()))
        nodes = None
    t_search = time.perf_counter()
    res = improve(inst, start, search)
    t_search = time.perf_counter() - t_search
    servers, obj = res.servers, res.preempted
    note = "no LP solution, no sub-MIP"
    if lp_x is not None and 0 < count < len(inst.servers):
        t_sub = time.perf_counter()
        sub = rins(model, lp_x, servers, node_limit=nodes, time_limit_s=left())
        t_sub = time.perf_counter() - t_sub
        note = f"RINS sub-MIP over {sub.freed} free servers in {t_sub * 1000:.0f} ms: {sub.message}"
        if sub.servers is not None and len(sub.servers) == count:
            got = len(evaluate(inst, sub.servers).preempted)
            note += f" ({got} preemptions)"
            if got < obj:
                servers, obj = sub.servers, got
    optimal = bound is not None and obj <= bound
    gap = None if bound is None else (obj - bound) / max(1.0, abs(obj))
    stats = SolverStats(
        stage="reclaim",
        backend="cp-sat-lns",
        status="optimal" if optimal else "feasible",
        objective=float(obj),
        bound=float(obj) if optimal else bound,
        gap=0.0 if optimal else gap,
        wall_ms=(time.perf_counter() - t0) * 1000.0,
        time_limit_s=budget.wall_s,
        work_limit_s=budget.work_s,
        deterministic=budget.deterministic,
        fell_back=fell_back,
        message=(
            f"{before}tight LP in {t_lp * 1000:.0f} ms, large-neighbourhood search "
            f"({res.steps} CP-SAT steps, {res.improving} improving, {res.preempted} "
            f"preemptions, {t_search * 1000:.0f} ms), then {note}; objective and bound "
            "count preemptions (bound: the tight LP rounded up)"
        ),
    )
    return servers, stats
