"""``reclaim`` instances: which loaned servers go back (Aryl), read from a file.

Solvers: every MIP backend on one plain model (below), ``exact`` (the project's exact reclaim:
components enumerated, the rest an ILP on CP-SAT, :func:`..aryl.reclaim_exact.select_exact`,
whose unproven answers a large-neighbourhood search improves, with an LP bound; above 300
coupled servers the search alone), and the heuristics
``aryl``, ``scf`` and ``random`` (seed 0) of :mod:`..aryl.reclaim_greedy`.

MIP model: ``x_s`` server returned, ``y_j`` job preempted, ``w_ja`` job keeps exactly the
allowed count ``a``; ``y_j + sum_a w_ja = 1``; kept GPUs ``total_j - sum_s g_js x_s`` equal
``sum_a a w_ja`` unless ``y_j`` (big-M ``total_j``); ``sum x = demand``; minimise ``sum y``.
Servers a job uses that are not in ``servers`` are never returned (training servers).
"""

from __future__ import annotations

import time
from typing import Any

from gpuplan.models import InputError

from ..backends import MipModel, Solution, lin_sum
from ..limits import SolveLimits
from ..policies.aryl.reclaim_exact import select_exact
from ..policies.aryl.reclaim_greedy import select_aryl, select_random, select_scf
from ..policies.aryl.reclaim_model import ReclaimInstance, ReclaimJob, evaluate
from .common import (
    MATHOPT_SOLVERS,
    MIP_SOLVERS,
    Outcome,
    heuristic_outcome,
    mip_defaults,
    rule,
    solve_mip,
)
from .fields import as_int, as_list, as_object, as_record, as_str, instance_object, unique

__all__ = [
    "EXACT",
    "HEURISTICS",
    "SOLVERS",
    "ReclaimFile",
    "check",
    "default_solvers",
    "load",
    "preempted",
    "run",
]

EXACT = (*MIP_SOLVERS, *MATHOPT_SOLVERS, "exact")
HEURISTICS = ("aryl", "scf", "random")
SOLVERS = (*EXACT, *HEURISTICS)


class ReclaimFile:
    """A validated instance and its demand."""

    def __init__(self, inst: ReclaimInstance, demand: int) -> None:
        self.inst = inst
        self.demand = demand


def load(data: Any, source: str) -> ReclaimFile:
    """Validate a ``reclaim`` file (README): unique servers and job ids, GPU counts >= 1,
    allowed counts >= 1, 0 <= demand <= number of servers."""
    obj = instance_object(data, source, ("servers", "jobs", "demand"))
    servers = [
        as_str(s, source, f"servers[{i}]")
        for i, s in enumerate(as_list(obj["servers"], source, "servers"))
    ]
    unique(servers, source, "servers")
    jobs = []
    for ji, j in enumerate(as_list(obj["jobs"], source, "jobs")):
        where = f"jobs[{ji}]"
        j = as_record(j, source, where, ("id", "gpus", "allowed"))
        jid = as_str(j.get("id"), source, f"{where}.id")
        gpus = {
            as_str(s, source, f"{where}.gpus"): as_int(g, source, f"{where}.gpus.{s}", low=1)
            for s, g in as_object(j.get("gpus"), source, f"{where}.gpus").items()
        }
        allowed: frozenset[int] = frozenset()
        if "allowed" in j:
            allowed = frozenset(
                as_int(a, source, f"{where}.allowed[{k}]", low=1)
                for k, a in enumerate(as_list(j["allowed"], source, f"{where}.allowed"))
            )
            if not allowed:
                raise InputError(
                    "must not be empty (omit it for a rigid job)",
                    source=source,
                    field=f"{where}.allowed",
                )
        jobs.append(ReclaimJob(jid, gpus, allowed))
    unique([j.id for j in jobs], source, "jobs[].id")
    demand = as_int(obj["demand"], source, "demand", low=0)
    if demand > len(servers):
        raise InputError(
            f"demand {demand} above the {len(servers)} servers on loan",
            source=source,
            field="demand",
        )
    return ReclaimFile(ReclaimInstance(tuple(servers), tuple(jobs)), demand)


def preempted(rf: ReclaimFile, servers: list[str]) -> list[str]:
    return evaluate(rf.inst, servers).preempted


def check(rf: ReclaimFile, solution: dict[str, Any]) -> int:
    """Independent feasibility check (README semantics, not the project's evaluator):
    exactly ``demand`` distinct known servers, and the preempted list is right."""
    chosen = solution["servers"]
    rule(len(chosen) == rf.demand == len(set(chosen)), "need demand distinct servers")
    rule(set(chosen) <= set(rf.inst.servers), "unknown server returned")
    dead = []
    for job in rf.inst.jobs:
        lost = sum(g for s, g in job.gpus.items() if s in chosen)
        if lost == 0:
            continue
        left = sum(job.gpus.values()) - lost
        keeps = (left in job.allowed) if job.allowed else False
        if not keeps:
            dead.append(job.id)
    rule(sorted(dead) == sorted(solution["preempted"]), "preempted list is wrong")
    return len(dead)


def _answer(rf: ReclaimFile, servers: list[str]) -> dict[str, Any]:
    order = {s: i for i, s in enumerate(rf.inst.servers)}
    chosen = sorted(servers, key=order.__getitem__)
    return {"servers": chosen, "preempted": preempted(rf, chosen)}


def default_solvers() -> tuple[str, ...]:
    have = mip_defaults(mathopt=True)
    return (*have, *(("exact",) if "cp-sat" in have else ()), *HEURISTICS)


def run(rf: ReclaimFile, solver: str, limits: SolveLimits) -> Outcome:
    t0 = time.perf_counter()
    inst, n = rf.inst, rf.demand
    if solver in HEURISTICS:
        chosen = (
            select_aryl(inst, n)
            if solver == "aryl"
            else select_scf(inst, n)
            if solver == "scf"
            else select_random(inst, n, 0)
        )
        sol = _answer(rf, chosen)
        return heuristic_outcome(sol, float(len(sol["preempted"])), t0)
    if solver == "exact":
        chosen, st = select_exact(inst, n, limits=limits)
        sol = _answer(rf, chosen)
        out = heuristic_outcome(sol, float(len(sol["preempted"])), t0, status=st.status)
        if st.status == "optimal":
            out.bound, out.gap = out.objective, 0.0
        elif st.backend == "cp-sat-lns" and st.bound is not None:
            out.bound, out.gap = st.bound, st.gap  # counts preemptions (the ILP's does not)
        out.message = st.message
        return out
    xs: dict[str, Any] = {}
    ys: list[Any] = []
    loan = set(inst.servers)

    def build() -> MipModel:
        m = MipModel("reclaim")
        for s in inst.servers:
            xs[s] = m.bool_var(f"x_{s}")
        m.add(lin_sum(xs.values()) == n, "demand")
        for k, job in enumerate(inst.jobs):
            on = [s for s in job.gpus if s in loan]
            if not on:
                continue
            total = job.total
            y = m.bool_var(f"y_{k}")
            ys.append(y)
            # losing nothing is always survivable; a loss must land on an allowed count
            options = sorted({a for a in job.allowed if a < total} | {total})
            ws = [m.bool_var(f"w_{k}_{a}") for a in options]
            m.add(lin_sum(ws) + y == 1, f"choose_{k}")
            kept = (
                total
                - lin_sum(job.gpus[s] * xs[s] for s in on)
                - lin_sum(a * w for a, w in zip(options, ws, strict=True))
            )
            m.add(kept <= total * y, f"kept_hi_{k}")
            m.add(kept >= -total * y, f"kept_lo_{k}")
        m.minimize(lin_sum(ys))
        return m

    def decode(sol: Solution) -> dict[str, Any]:
        return _answer(rf, [s for s in inst.servers if sol.value(xs[s]) == 1])

    return solve_mip(build, decode, solver, limits, lambda s: float(len(s["preempted"])))
