"""Independent feasibility checker for OJPP solutions.

Written straight from the rules of shared/problems/README.md and deliberately sharing no code
with the solvers (not even the collision and slowdown helpers of ``gpuplan.models.ojpp``): a
bug in the solvers' incremental arithmetic cannot hide behind the same bug here. Every solver's
answer in the tests goes through :func:`check_solution`.
"""

from __future__ import annotations

from gpuplan.models.ojpp import OjppInstance

__all__ = ["TOL", "check_solution"]

TOL = 1e-9


def _spike_two_or_more(ps: list[float]) -> float:
    """1 - P(no spike) - P(exactly one spike), both written out as products (O(n^2))."""
    none = 1.0
    for p in ps:
        none *= 1.0 - p
    exactly_one = 0.0
    for i, p in enumerate(ps):
        term = p
        for j, q in enumerate(ps):
            if j != i:
                term *= 1.0 - q
        exactly_one += term
    return 1.0 - none - exactly_one


def _slowdown(own_type: str, others: list[str], inst: OjppInstance) -> float:
    row = inst.interference[own_type]
    terms = [row[t] for t in others]
    if not terms:
        return 0.0
    if inst.composition == "additive":
        return sum(terms)
    if inst.composition == "max":
        return max(terms)
    prod = 1.0
    for t in terms:
        prod *= 1.0 + t
    return prod - 1.0


def check_solution(inst: OjppInstance, gpus: list[list[str]]) -> list[str]:  # noqa: C901 (a named exception to the complexity gate)
    """Every rule the solution ``gpus`` (worker ids per GPU) breaks; empty when valid."""
    jobs = {job.id: job for job in inst.jobs}
    problems: list[str] = []
    seen: dict[str, int] = {}
    for k, gpu in enumerate(gpus):
        if not gpu:
            problems.append(f"GPU {k} is empty")
        for w in gpu:
            job_id, _, index = w.rpartition("#")
            job = jobs.get(job_id)
            if (
                job is None
                or not index.isdigit()
                or not 0 <= int(index) < job.workers
                or str(int(index)) != index
            ):
                problems.append(f"GPU {k}: {w!r} is not a worker of the instance")
                continue
            if w in seen:
                problems.append(f"worker {w} is on GPU {seen[w]} and GPU {k}")
            seen[w] = k
    for job in inst.jobs:
        for j in range(job.workers):
            if f"{job.id}#{j}" not in seen:
                problems.append(f"worker {job.id}#{j} is not placed")
    if problems:
        return problems
    slow: dict[str, list[float]] = {job.id: [] for job in inst.jobs}
    for k, gpu in enumerate(gpus):
        members = [jobs[w.rpartition("#")[0]] for w in gpu]
        compute = sum(m.alpha for m in members)
        if compute > 1 + TOL:
            problems.append(f"GPU {k}: compute {compute:.6g} > 1")
        memory = sum(m.gamma for m in members) + max(m.delta for m in members)
        if memory > 1 + TOL:
            problems.append(f"GPU {k}: memory {memory:.6g} > 1")
        tau = _spike_two_or_more([m.p for m in members])
        if tau > inst.tau_max + TOL:
            problems.append(f"GPU {k}: collision probability {tau:.6g} > {inst.tau_max}")
        worst = 0.0
        for i, m in enumerate(members):
            others = [o.type for j, o in enumerate(members) if j != i]
            s = _slowdown(m.type, others, inst)
            slow[m.id].append(s)
            worst = max(worst, s)
        if worst > inst.theta_max + TOL:
            problems.append(f"GPU {k}: slowdown {worst:.6g} > {inst.theta_max}")
    for job_id, values in slow.items():
        spread = max(values) - min(values)
        if spread > inst.theta_balance + TOL:
            problems.append(
                f"job {job_id}: spread of slowdowns {spread:.6g} > {inst.theta_balance}"
            )
    return problems
