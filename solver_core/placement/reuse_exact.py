"""Exact reuse placement: the lexicographic optimum of :mod:`.reuse_problem` as a MIP/CP model.

Why: it measures (and, where time allows, closes) the greedy's gap. It is solved through
:func:`~gpuplan.solver_core.backends.solve_with_fallback` (CP-SAT by default), hinted with the
greedy of :mod:`.reuse_greedy`, falls back to it on timeout/failure, and never returns anything
worse than it.

With network packing (``no_network_sharing=True``) every placed job with count ``a`` spans
exactly ``ceil(a/G)`` nodes and no node hosts two jobs that span several nodes (App. E's
conditions (1) and (2); for a legal ``a = qG`` this means ``q`` whole nodes). The model states
exactly these two conditions on counts; the greedy is stricter, so the exact answer is never
worse. Without the flag only capacity, exclusivity and GPU types constrain.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.models import SolverStats

from ..backends import LinExpr, MipModel, Solution, Var, lin_sum, solve_with_fallback
from ..limits import SolveLimits, resolve_limits
from .reuse_greedy import place_greedy
from .reuse_problem import NodeCounts, PlacementJob, PlacementProblem, reuse_score, score_key

__all__ = ["PLACEMENT_WORK_S", "place_exact"]

PLACEMENT_WORK_S = 5.0
"""Default limit of the exact placement. 64 x 8 GPUs with 200 jobs is ~10^4 variables; CP-SAT
proved optimality in 2.7 s on average there (tests/bench/placement_gap.py), and an early stop
never returns less than the greedy (hint + safeguard)."""


@dataclass
class _Model:
    """Variables of one exact placement model, kept for hints and decoding."""

    y: dict[tuple[str, str], Var]
    n: dict[tuple[str, str], Var]
    k: dict[tuple[str, str], Var]
    u: dict[str, Var]
    z: dict[str, Var]
    # Interchangeable new jobs (NNS only): class key -> (job ids, per-node vars, count var).
    classes: dict[tuple[int, frozenset[str] | None], tuple[list[str], dict[str, Var], Var | None]]


def _build(problem: PlacementProblem, hint: NodeCounts) -> tuple[MipModel, _Model]:  # noqa: C901 (a named exception to the complexity gate)
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
                reused.append(lin_sum(min(j.count, j.held_on(n)) * ys[n] for n in home if n in ys))
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
    objective = w_placed * lin_sum(placed) + w_kept * lin_sum(kept) + w_reuse * lin_sum(reused)
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
                counts[queue.pop(0)] = dict.fromkeys(nodes[i : i + q], unit)
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
        result, st = (
            {},
            SolverStats(
                stage="placement",
                backend=backend,
                status="optimal",
                objective=0.0,
                bound=0.0,
                gap=0.0,
                message="nothing to place",
            ),
        )
    else:
        result, st = solve_with_fallback(
            build,
            lambda: greedy,
            lambda sol: _decode(problem, holder[-1], sol),
            backend,
            limits=resolve_limits(time_limit_s, limits, PLACEMENT_WORK_S),
            stage="placement",
        )
    exact_score = reuse_score(problem, result)
    greedy_score = reuse_score(problem, greedy)
    if score_key(problem, exact_score) < score_key(problem, greedy_score):
        result = greedy
        st = st.model_copy(
            update={
                "status": "heuristic",
                "fell_back": True,
                "message": f"{backend} incumbent ({st.status}) worse than the greedy; greedy used",
            }
        )
        exact_score = greedy_score
    note = (
        f"kept {exact_score.kept_jobs} jobs, reused {exact_score.reused_gpus} GPUs "
        f"(greedy {greedy_score.kept_jobs}, {greedy_score.reused_gpus})"
    )
    st = st.model_copy(update={"message": f"{st.message}; {note}" if st.message else note})
    if stats is not None:
        stats.append(st)
    return result
