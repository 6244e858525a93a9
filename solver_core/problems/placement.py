"""``placement`` instances: reuse-maximising placement (AFS/CoDDL §4.4) read from a file.

Node-level GPU counts per job, maximising lexicographically the GPUs placed, the running jobs
that keep at least one of their GPUs, the GPUs kept in place and (without network packing)
minus the spread (:mod:`..placement.reuse_problem`). Solvers: every MIP backend on
:func:`..placement.reuse_exact.place_exact`'s model (hinted with, and never worse than, the
greedy) and ``greedy`` (:func:`..placement.reuse_greedy.place_greedy`). Format and the scalar
objective: docs/solvers.md.
"""

from __future__ import annotations

import math
import time
from typing import Any

from gpuplan.models import InputError, SolverStats
from gpuplan.models.bounds import MAX_GPUS, MAX_GPUS_PER_NODE

from ..limits import SolveLimits
from ..placement.reuse_exact import place_exact
from ..placement.reuse_greedy import place_greedy
from ..placement.reuse_problem import PlacementJob, PlacementProblem, reuse_score, score_key
from .common import MIP_SOLVERS, Outcome, heuristic_outcome, mip_defaults, rule
from .fields import as_int, as_list, as_object, as_record, as_str, instance_object, unique

__all__ = ["HEURISTICS", "SOLVERS", "check", "default_solvers", "load", "objective", "run"]

HEURISTICS = ("greedy",)
SOLVERS = (*MIP_SOLVERS, *HEURISTICS)


def load(data: Any, source: str) -> PlacementProblem:
    """Validate a ``placement`` file; held GPUs get indices per node in job order."""
    obj = instance_object(data, source, ("unit", "nodes", "jobs"), ("no_network_sharing",))
    unit = as_int(obj["unit"], source, "unit", low=1, high=MAX_GPUS_PER_NODE)
    nodes = {
        as_str(n, source, "nodes"): as_int(g, source, f"nodes.{n}", low=0, high=MAX_GPUS_PER_NODE)
        for n, g in as_object(obj["nodes"], source, "nodes").items()
    }
    nns = obj.get("no_network_sharing", True)
    if not isinstance(nns, bool):
        raise InputError(
            f"must be true or false, got {nns!r}", source=source, field="no_network_sharing"
        )
    next_free = dict.fromkeys(nodes, 0)
    jobs = []
    for ji, j in enumerate(as_list(obj["jobs"], source, "jobs")):
        where = f"jobs[{ji}]"
        j = as_record(j, source, where, ("id", "count", "held", "nodes"))
        jid = as_str(j.get("id"), source, f"{where}.id")
        count = as_int(j.get("count"), source, f"{where}.count", low=1, high=MAX_GPUS)
        held: dict[str, tuple[int, ...]] = {}
        for n, h in as_object(j.get("held", {}), source, f"{where}.held").items():
            k = as_int(h, source, f"{where}.held.{n}", low=0)
            if n not in nodes:
                raise InputError(f"unknown node {n!r}", source=source, field=f"{where}.held")
            if next_free[n] + k > nodes[n]:
                raise InputError(
                    f"jobs hold {next_free[n] + k} GPUs on {n}, which has {nodes[n]}",
                    source=source,
                    field=f"{where}.held.{n}",
                )
            if k:
                held[n] = tuple(range(next_free[n], next_free[n] + k))
                next_free[n] += k
        allowed_nodes = None
        if "nodes" in j:
            names = [
                as_str(n, source, f"{where}.nodes")
                for n in as_list(j["nodes"], source, f"{where}.nodes")
            ]
            bad = [n for n in names if n not in nodes]
            if bad:
                raise InputError(f"unknown node {bad[0]!r}", source=source, field=f"{where}.nodes")
            allowed_nodes = frozenset(names)
            outside = sorted(set(held) - allowed_nodes)
            if outside:  # the solvers would keep those GPUs where the job may not run
                raise InputError(
                    f"holds GPUs on {outside[0]!r}, not in its nodes",
                    source=source,
                    field=f"{where}.nodes",
                )
        jobs.append(PlacementJob(jid, count, held, allowed_nodes))
    unique([j.id for j in jobs], source, "jobs[].id")
    pools = {n: tuple(range(g)) for n, g in nodes.items()}
    return PlacementProblem(pools, unit, tuple(jobs), nns)


def _base(p: PlacementProblem) -> int:
    return 1 + max(sum(len(g) for g in p.pools.values()), len(p.jobs) * max(1, len(p.pools)))


def objective(p: PlacementProblem, counts: dict[str, dict[str, int]]) -> float:
    """The lexicographic score as one number: placed B^3 + kept B^2 + reused B + tail."""
    b = _base(p)
    placed, kept, reused, tail = score_key(p, reuse_score(p, counts))
    return float(((placed * b + kept) * b + reused) * b + tail)


def check(p: PlacementProblem, solution: dict[str, Any]) -> float:
    """Independent feasibility: whole jobs on eligible nodes within node capacity; with
    no network sharing, ceil(count/unit) nodes per job and one multi-node job per node."""
    placement = solution["placement"]
    by_id = {j.id: j for j in p.jobs}
    load_on = dict.fromkeys(p.pools, 0)
    multi_on = dict.fromkeys(p.pools, 0)
    for jid, nodes in placement.items():
        job = by_id[jid]
        rule(sum(nodes.values()) == job.count, f"{jid}: placed {sum(nodes.values())}")
        for n, g in nodes.items():
            rule(g > 0 and (job.nodes is None or n in job.nodes), f"{jid}: bad node {n}")
            load_on[n] += g
            multi_on[n] += len(nodes) > 1
        if p.no_network_sharing:
            rule(len(nodes) == math.ceil(job.count / p.unit), f"{jid}: spread {len(nodes)}")
    for n, used in load_on.items():
        rule(used <= len(p.pools[n]), f"node {n} over capacity")
        if p.no_network_sharing:
            rule(multi_on[n] <= 1, f"node {n} shared by multi-node jobs")
    return objective(p, placement)


def _answer(p: PlacementProblem, counts: dict[str, dict[str, int]]) -> dict[str, Any]:
    s = reuse_score(p, counts)
    clean = {j: {n: g for n, g in sorted(c.items()) if g} for j, c in sorted(counts.items())}
    return {
        "placement": {j: c for j, c in clean.items() if c},
        "placed_gpus": s.placed_gpus,
        "kept_jobs": s.kept_jobs,
        "reused_gpus": s.reused_gpus,
        "migrated_jobs": s.migrated_jobs,
    }


def default_solvers() -> tuple[str, ...]:
    return (*mip_defaults(), *HEURISTICS)


def run(p: PlacementProblem, solver: str, limits: SolveLimits) -> Outcome:
    t0 = time.perf_counter()
    if solver == "greedy":
        counts = place_greedy(p)
        sol = _answer(p, counts)
        return heuristic_outcome(sol, objective(p, sol["placement"]), t0)
    stats: list[SolverStats] = []
    counts = place_exact(p, backend=solver, limits=limits, stats=stats)
    st = stats[-1]
    sol = _answer(p, counts)
    out = heuristic_outcome(sol, objective(p, sol["placement"]), t0, status=st.status)
    if st.status == "optimal":
        out.bound, out.gap = out.objective, 0.0
    out.message = st.message
    return out
