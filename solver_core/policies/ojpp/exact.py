"""Exact OJPP (CP-SAT here; the MIP backends through :mod:`.milp`).

First choice: the configuration model of :mod:`.patterns` (every GPU content enumerated and
checked exactly beforehand, one solve, a Gilmore-Gomory-strength LP bound). When the
patterns are too many (more than :data:`.patterns.PATTERN_LIMIT`), the job-level count model
of :mod:`.model` solved with lazy cuts until every device meets Eq. (4) exactly.

The count model's loop: solve; decode the counts; check every used device's compute, memory,
collision (Eq. 4) and slowdown rules with the exact float arithmetic; on a violation add the
collision tangent at the device's R (or a no-good cut on its count vector) and solve again. The
model is a relaxation of OJPP (up to CP-SAT's 1e-6 rounding), so the first answer that passes
is optimal when the backend proved it optimal. The best packing (Alg. 3 and Alg. 1 orders,
either device choice) sets the device count ``K`` and is the fallback: a budget that runs out
returns it (``timeout`` when the solver had nothing better), never blocks. When it already
meets the simple lower bound ``max(ceil(sum alpha), ceil(sum gamma))`` it is proven optimal
without a solve.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuplan.models import SolverStats
from gpuplan.models.ojpp import OJPP_TOL, OjppInstance

from ...backends import solve as mip_solve
from ...limits import SolveLimits
from .check import check_solution
from .greedy import greedy_order
from .heuristic import heuristic_order
from .improve import empty_devices, packer_solution
from .model import OjppModel, build_model, device_violation
from .packer import Packer, Rules
from .patterns import build_pattern_model, enumerate_patterns, hint_patterns

__all__ = [
    "MAX_ROUNDS",
    "OjppAnswer",
    "best_packing",
    "clique",
    "clique_bound",
    "lower_bound",
    "solve_exact",
]

MAX_ROUNDS = 40
"""Lazy-cut rounds before giving up (each round adds at least one cut)."""
CLIQUE_SEEDS = 12
"""Jobs the greedy clique of :func:`clique_bound` starts from (the heaviest first)."""


@dataclass(frozen=True)
class OjppAnswer:
    stats: SolverStats
    gpus: list[list[str]] | None


def lower_bound(inst: OjppInstance) -> int:
    """GPUs no solution can beat: the largest of total compute, total basic memory over what
    a GPU leaves for it beside the smallest peak, and a clique of workers no two of which
    may share a GPU (:func:`clique_bound`), each rounded up."""
    if not inst.jobs:
        return 0
    alpha = math.fsum(j.alpha * j.workers for j in inst.jobs)
    gamma = math.fsum(j.gamma * j.workers for j in inst.jobs)
    # every used GPU holds a worker, so its largest delta is at least the smallest of all
    room = 1.0 + OJPP_TOL - min(j.delta for j in inst.jobs)
    memory = math.ceil(gamma / room - 1e-9) if room > 0 else 1
    return max(
        1, math.ceil(alpha - OJPP_TOL), math.ceil(gamma - OJPP_TOL), memory, clique_bound(inst)
    )


def clique_bound(inst: OjppInstance, seeds: int = CLIQUE_SEEDS) -> int:
    """The workers of :func:`clique` (see there): a lower bound on the GPUs."""
    return clique(inst, seeds)[0]


def clique(inst: OjppInstance, seeds: int = CLIQUE_SEEDS) -> tuple[int, list[int]]:
    """The largest set of workers found that pairwise cannot share a GPU (so each needs its
    own). Two workers of one job conflict when two of them break a device rule; workers of
    two jobs when one of each does (every device rule is monotone in added workers, so a
    conflict stays one with more workers). A job whose own workers conflict brings all of
    them, any other job one. Greedy from the ``seeds`` heaviest jobs: a valid bound, not
    always the largest clique.

    Returns the workers counted and the clique's jobs (the exact model lists them first).
    The pair rules are evaluated on numpy arrays with the operations, in the order, of
    :func:`.model.device_violation` for two workers (IEEE double either way, so the same
    verdicts): this keeps the bound cheap enough to report beside every heuristic answer."""
    jobs = inst.jobs
    if not jobs:
        return 0, []
    a = np.array([j.alpha for j in jobs])
    g = np.array([j.gamma for j in jobs])
    d = np.array([j.delta for j in jobs])
    p = np.array([j.p for j in jobs])
    m = np.array(inst.matrix())
    if inst.composition == "multiplicative":
        m = (1.0 + m) - 1.0
    tol = OJPP_TOL
    # two workers of jobs i and j (i == j on the diagonal: two of one job)
    p0 = np.outer(1.0 - p, 1.0 - p)
    p1 = np.outer(p, 1.0 - p) + np.outer(1.0 - p, p)
    conflict = (
        (a[:, None] + a[None, :] > 1 + tol)
        | (g[:, None] + g[None, :] + np.maximum(d[:, None], d[None, :]) > 1 + tol)
        | (np.maximum(m, m.T) > inst.theta_max + tol)
        | (np.maximum(0.0, 1.0 - p0 - p1) > inst.tau_max + tol)
    )
    workers = np.array([j.workers for j in jobs])
    weight = np.where(np.diagonal(conflict) & (workers >= 2), workers, 1)
    np.fill_diagonal(conflict, False)
    order = sorted(range(len(jobs)), key=lambda i: (-int(weight[i]), -int(conflict[i].sum()), i))
    best: tuple[int, list[int]] = (0, [])
    for seed in order[:seeds]:
        total, candidates, members = int(weight[seed]), conflict[seed].copy(), [seed]
        for q in order:
            if candidates[q]:
                total += int(weight[q])
                members.append(q)
                candidates &= conflict[q]
        if total > best[0]:
            best = (total, members)
    return best


def best_packing(inst: OjppInstance) -> list[list[str]] | None:
    """The fewest GPUs among Alg. 3 and Alg. 1 orders with either device choice (all rules
    enforced), each followed by the GPU-emptying pass of :mod:`.improve`: the exact model's
    device count ``K``, hint and fallback."""
    best = None
    for order in (heuristic_order(inst), greedy_order(inst)):
        for select in ("theta", "best-fit"):
            packer = Packer(inst, Rules(select=select))  # type: ignore[arg-type]
            if any(packer.place_job(i) is None for i in order):
                return None
            empty_devices(packer)
            got = packer_solution(packer)
            if best is None or len(got) < len(best):
                best = got
    return best


def _counts_of(inst: OjppInstance, gpus: list[list[str]]) -> list[list[int]]:
    index = {job.id: i for i, job in enumerate(inst.jobs)}
    out = [[0] * len(gpus) for _ in inst.jobs]
    for k, gpu in enumerate(gpus):
        for w in gpu:
            out[index[w.rpartition("#")[0]]][k] += 1
    return out


def _decode(om: OjppModel, values: list[list[int]]) -> list[list[str]]:
    gpus: list[list[str]] = []
    nxt = [0] * len(om.inst.jobs)
    for k in range(om.devices):
        gpu = []
        for i, job in enumerate(om.inst.jobs):
            for _ in range(values[i][k]):
                gpu.append(f"{job.id}#{nxt[i]}")
                nxt[i] += 1
        if gpu:
            gpus.append(gpu)
    return gpus


def _violation(om: OjppModel, counts: dict[int, int]) -> bool:
    """Add a cut when the device holding ``counts`` breaks a device rule; True if so."""
    jobs = om.inst.jobs
    broken = device_violation(om.inst, om.matrix, counts)
    if broken is None:
        return False
    if broken == "collision" and max(jobs[i].p for i in counts) < 1.0:
        rho = math.fsum(jobs[i].p / (1 - jobs[i].p) * c for i, c in counts.items())
        if rho not in om.tangents:
            om.tangent(rho)
            return True
    om.no_good(counts)
    return True


def _solve_patterns(
    inst: OjppInstance,
    patterns: list[dict[int, int]],
    heuristic: list[list[str]],
    lb: int,
    backend: str,
    limits: SolveLimits,
    start: float,
    done: Callable[..., OjppAnswer],
) -> OjppAnswer:
    """One solve of the configuration model of :mod:`.patterns` (every device rule is
    settled by the enumeration, so no lazy round), hinted with the best packing."""
    pm = build_pattern_model(inst, patterns, len(heuristic), lb)
    counts = _counts_of(inst, heuristic)
    hint_patterns(
        pm,
        inst,
        [
            {i: counts[i][k] for i in range(len(inst.jobs)) if counts[i][k]}
            for k in range(len(heuristic))
        ],
    )
    left = start + limits.wall_s - time.perf_counter()
    if left <= 0:
        return done(
            "timeout", heuristic, float(lb), "budget spent enumerating patterns", fell_back=True
        )
    sol = mip_solve(
        pm.model,
        backend,
        stage="ojpp",
        limits=SolveLimits(wall_s=left, work_s=limits.work_s, nodes=limits.nodes),
    )
    st = sol.stats
    bound = float(lb) if st.bound is None else max(float(lb), math.ceil(st.bound - 1e-6))
    note = f"pattern model: {len(patterns)} patterns"
    if not sol.ok:
        return done(
            "timeout",
            heuristic,
            bound,
            f"{note}; {backend}: {st.status} {st.message}".strip(),
            fell_back=True,
        )
    gpus: list[list[str]] = []
    nxt = [0] * len(inst.jobs)
    for t, pat in enumerate(patterns):
        for _ in range(int(sol.value(pm.z[t]))):
            gpu = []
            for i, c in sorted(pat.items()):
                gpu.extend(f"{inst.jobs[i].id}#{nxt[i] + j}" for j in range(c))
                nxt[i] += c
            gpus.append(gpu)
    if check_solution(inst, gpus):
        return done(
            "feasible",
            heuristic,
            bound,
            f"{note}; the model's answer failed the checker; kept the heuristic's",
            fell_back=True,
        )
    if st.status == "optimal":
        return done("optimal", gpus, float(len(gpus)), note)
    best = gpus if len(gpus) <= len(heuristic) else heuristic
    return done("feasible", best, bound, note)


def solve_exact(  # noqa: C901 (a named exception to the complexity gate)
    inst: OjppInstance,
    backend: str = "cp-sat",
    limits: SolveLimits | None = None,
    shortcut: bool = True,
    use_patterns: bool = True,
) -> OjppAnswer:
    """Proven-optimal GPUs when the budget allows; the heuristic's answer otherwise.

    The configuration model (:mod:`.patterns`) when its patterns number at most
    :data:`.patterns.PATTERN_LIMIT` (``use_patterns=False`` forces the count model of
    :mod:`.model`, kept for instances with more patterns and as a cross-check)."""
    start = time.perf_counter()
    limits = limits or SolveLimits.deterministic_budget(10.0)
    base = dict(
        stage="ojpp",
        backend=backend,
        time_limit_s=limits.wall_s,
        work_limit_s=limits.work_s,
        node_limit=limits.nodes,
        deterministic=limits.deterministic,
    )

    def done(
        status: str,
        gpus: list[list[str]] | None,
        bound: float | None,
        message: str = "",
        fell_back: bool = False,
    ) -> OjppAnswer:
        objective = float(len(gpus)) if gpus is not None else None
        gap = (
            None
            if objective is None or bound is None
            else abs(objective - bound) / max(1.0, objective)
        )
        stats = SolverStats(
            status=status,
            objective=objective,
            bound=bound,
            gap=gap,  # type: ignore[arg-type]
            wall_ms=(time.perf_counter() - start) * 1000.0,
            message=message,
            fell_back=fell_back,
            **base,
        )  # type: ignore[arg-type]
        return OjppAnswer(stats, gpus)

    heuristic = best_packing(inst)
    if heuristic is None:
        return done("infeasible", None, None, "a worker does not fit on a GPU even alone")
    lb = lower_bound(inst)
    if not heuristic or (shortcut and len(heuristic) <= lb):
        return done(
            "optimal",
            heuristic,
            float(len(heuristic)),
            "the heuristic's answer meets the lower bound",
        )
    patterns = enumerate_patterns(inst) if use_patterns else None
    if patterns is not None:  # any composition: the enumeration checks slowdowns exactly
        return _solve_patterns(inst, patterns, heuristic, lb, backend, limits, start, done)
    if inst.composition == "multiplicative":
        return done(
            "error",
            None,
            None,
            "multiplicative composition is not linear and the "
            "instance has too many patterns for the configuration model: the count "
            "model supports additive and max (use heuristic or greedy)",
        )
    members = clique(inst)[1]
    order = [*members, *(i for i in range(len(inst.jobs)) if i not in set(members))]
    om = build_model(
        inst,
        len(heuristic),
        backend == "cp-sat",
        lb,
        _counts_of(inst, heuristic),
        order,
        len(members),
    )
    bound: float | None = float(lb)
    for _ in range(MAX_ROUNDS):
        left = start + limits.wall_s - time.perf_counter()
        if left <= 0:
            break
        sol = mip_solve(
            om.model,
            backend,
            stage="ojpp",
            limits=SolveLimits(wall_s=left, work_s=limits.work_s, nodes=limits.nodes),
        )
        st = sol.stats
        if st.bound is not None:
            bound = max(bound or 0.0, math.ceil(st.bound - 1e-6))
        if st.status == "infeasible":
            # K = the heuristic's count satisfies the relaxation, so only rounding refused it
            return done(
                "feasible",
                heuristic,
                bound,
                "model infeasible at the heuristic's count (rounding); kept the heuristic's answer",
                fell_back=True,
            )
        if not sol.ok:
            return done(
                "timeout",
                heuristic,
                bound,
                f"{backend}: {st.status} {st.message}".strip(),
                fell_back=True,
            )
        values = [[int(sol.value(v)) for v in row] for row in om.n]
        cut = False
        for k in range(om.devices):
            counts = {i: values[i][k] for i in range(len(inst.jobs)) if values[i][k]}
            if counts and _violation(om, counts):
                cut = True
        if cut:
            continue
        gpus = _decode(om, values)
        if check_solution(inst, gpus):
            return done(
                "feasible",
                heuristic,
                bound,
                "the model's answer failed the checker (rounding); kept the heuristic's",
                fell_back=True,
            )
        if st.status == "optimal":
            return done("optimal", gpus, float(len(gpus)))
        best = gpus if len(gpus) <= len(heuristic) else heuristic
        return done("feasible", best, bound)
    return done("timeout", heuristic, bound, "budget spent in lazy-cut rounds", fell_back=True)
