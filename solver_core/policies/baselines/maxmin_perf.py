"""max-min-perf: Gavel's heterogeneity-aware max-min fairness with round-based time slicing.

Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning
Workloads", OSDI'20 (see docs/algorithms/maxmin-perf.md for the equations). Two parts:

1. **Allocation LP** (:func:`solve_allocation`): ``X[j][t]`` = fraction of wall time job ``j``
   spends on GPU type ``t``; effective throughput ``sum_t T[j][t] X[j][t]`` where ``T[j][t]`` is
   the job's rate on ``scale_factor_j`` GPUs of type ``t`` (its profile x the per-model type
   multiplier). Maximise ``z`` subject to ``sum_t T[j][t] X[j][t] / thr_eq_j >= w_j z`` for every
   job, rows ``sum_t X[j][t] <= 1`` and capacity ``sum_j X[j][t] scale_factor_j <= G_t``;
   ``thr_eq_j`` is the job's throughput under an equal share (:func:`equal_share`). A second
   LP keeps ``z`` (to a 1e-7 relative tolerance) and maximises the sum of normalised
   throughputs, so spare capacity the max-min optimum leaves idle is still handed out.
   Solved with OR-Tools GLOP (deterministic simplex).
2. **Rounds** (:class:`MaxMinPerf`): time is cut into rounds of ``round_s`` seconds (Gavel: 360
   s). At each round start jobs are ranked by ``X[j][t] / received[j][t]`` (the fraction of its
   time job ``j`` has actually spent on ``t``; never-served pairs first) and placed greedily,
   one type per job per round, while the type has GPUs. Between boundaries, decisions caused by
   arrivals or completions keep the round's assignment and only fill idle GPUs.

Rigid: a job always runs on its requested count (``scale_factor``), on one GPU type.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from ortools.linear_solver import pywraplp
from pydantic import Field

from gpuplan.models import ActiveJob, ClusterView, JobAllocation, SolverStats
from gpuplan.models.bounds import MAX_TIME_S

from ...params import Params
from ...placement.best_fit import take_best_fit
from ...placement.gpu_types import nodes_by_type, type_speed
from ...policy import Placements, Shares, StagedPolicy
from ...registry import PolicyDef

__all__ = [
    "POLICIES",
    "Allocation",
    "MaxMinAgnostic",
    "MaxMinPerf",
    "equal_share",
    "solve_allocation",
]

ROUND_S = 360.0
"""Gavel's default round length (its simulator's ``time_per_iteration``)."""

_Z_TOLERANCE = 1e-7


@dataclass
class Allocation:
    """The LP's answer: ``x[job][type]``, the max-min value ``z`` and the solver report."""

    x: dict[str, dict[str, float]]
    z: float
    stats: SolverStats


def equal_share(scale: dict[str, int], capacity: dict[str, int]) -> dict[str, dict[str, float]]:
    """Each job's time fractions under an equal split of every type: ``G_t / (n sf_j)``,
    scaled down so the row sums to at most 1 (a job cannot run more than all the time)."""
    n = len(scale)
    out: dict[str, dict[str, float]] = {}
    for job, sf in scale.items():
        row = {t: g / (n * sf) for t, g in capacity.items()}
        total = sum(row.values())
        if total > 1.0:
            row = {t: v / total for t, v in row.items()}
        out[job] = row
    return out


def solve_allocation(
    rates: dict[str, dict[str, float]],
    scale: dict[str, int],
    capacity: dict[str, int],
    weights: dict[str, float] | None = None,
) -> Allocation:
    """Gavel's max-min fairness LP over ``X[job][type]``.

    ``rates[j][t]``: iterations/s of job ``j`` on ``scale[j]`` GPUs of type ``t`` (a type
    missing or at 0 cannot host the job); ``capacity[t]``: GPUs of type ``t``; ``weights``:
    priority weights (default 1). Jobs with no positive rate anywhere get an all-zero row and
    are left out of the min.
    """
    start = time.perf_counter()
    weights = weights or {}
    types = sorted(capacity)
    jobs = sorted(j for j in rates if any(rates[j].get(t, 0.0) > 0 for t in types))
    eq = equal_share({j: scale[j] for j in jobs}, capacity) if jobs else {}
    thr_eq = {j: sum(rates[j].get(t, 0.0) * eq[j][t] for t in types) for j in jobs}
    jobs = [j for j in jobs if thr_eq[j] > 0]
    empty = {j: dict.fromkeys(types, 0.0) for j in rates}
    if not jobs:
        stats = SolverStats(
            stage="shares",
            backend="glop",
            status="optimal",
            objective=0.0,
            wall_ms=(time.perf_counter() - start) * 1000.0,
            deterministic=True,
            message="max-min-perf LP: no job to allocate",
        )
        return Allocation(empty, 0.0, stats)

    def build(z_floor: float | None) -> tuple[pywraplp.Solver, dict, object]:
        solver = pywraplp.Solver.CreateSolver("GLOP")
        x = {
            (j, t): solver.NumVar(0.0, 1.0 if rates[j].get(t, 0.0) > 0 else 0.0, f"x_{i}_{k}")
            for i, j in enumerate(jobs)
            for k, t in enumerate(types)
        }
        z = solver.NumVar(0.0, solver.infinity(), "z")
        for j in jobs:
            solver.Add(sum(x[j, t] for t in types) <= 1.0)
            norm = sum(rates[j].get(t, 0.0) * x[j, t] for t in types) * (1.0 / thr_eq[j])
            solver.Add(norm >= weights.get(j, 1.0) * (z if z_floor is None else z_floor))
        for t in types:
            solver.Add(sum(scale[j] * x[j, t] for j in jobs) <= capacity[t])
        if z_floor is None:
            solver.Maximize(z)
        else:
            solver.Maximize(
                sum(rates[j].get(t, 0.0) / thr_eq[j] * x[j, t] for j in jobs for t in types)
            )
        return solver, x, z

    solver, x, z = build(None)
    status = solver.Solve()
    if status != pywraplp.Solver.OPTIMAL:
        stats = SolverStats(
            stage="shares",
            backend="glop",
            status="error",
            wall_ms=(time.perf_counter() - start) * 1000.0,
            deterministic=True,
            message=f"max-min-perf LP: GLOP status {status}",
        )
        return Allocation(empty, 0.0, stats)
    z_star = z.solution_value()  # type: ignore[attr-defined]
    values = {key: var.solution_value() for key, var in x.items()}
    second, x2, _ = build(z_star * (1.0 - _Z_TOLERANCE))
    if second.Solve() == pywraplp.Solver.OPTIMAL:
        values = {key: var.solution_value() for key, var in x2.items()}
    out = dict(empty)
    for j in jobs:
        out[j] = {t: max(0.0, min(1.0, values[j, t])) for t in types}
    stats = SolverStats(
        stage="shares",
        backend="glop",
        status="optimal",
        objective=z_star,
        wall_ms=(time.perf_counter() - start) * 1000.0,
        deterministic=True,
        message=f"max-min-perf LP: {len(jobs)} jobs x {len(types)} types",
    )
    return Allocation(out, z_star, stats)


@dataclass
class MaxMinPerf:
    """Round-based dispatcher of the LP's time fractions (the shares + placement stages)."""

    round_s: float = ROUND_S
    _round_end: float | None = None
    _last: float | None = None
    _seen: dict[str, float] = field(default_factory=dict)
    """job -> seconds it has been active (pending or running) under this policy"""
    _received: dict[str, dict[str, float]] = field(default_factory=dict)
    """job -> type -> seconds it ran there"""
    _assigned: dict[str, str] = field(default_factory=dict)
    """this round's job -> GPU type"""
    _alloc: Allocation | None = None
    _alloc_jobs: frozenset[str] = frozenset()

    def snapshot(self) -> dict[str, Any]:
        """Round clock, attained time per job and type, this round's assignment (the LP is
        re-solved from the jobs, deterministically)."""
        return {
            "round_end": self._round_end,
            "last": self._last,
            "seen": dict(self._seen),
            "received": {j: dict(t) for j, t in self._received.items()},
            "assigned": dict(self._assigned),
        }

    def restore(self, state: dict[str, Any]) -> None:
        self._round_end = state.get("round_end")
        self._last = state.get("last")
        self._seen = {str(j): float(v) for j, v in state.get("seen", {}).items()}
        self._received = {
            str(j): {str(t): float(v) for t, v in d.items()}
            for j, d in state.get("received", {}).items()
        }
        self._assigned = {str(j): str(t) for j, t in state.get("assigned", {}).items()}
        self._alloc, self._alloc_jobs = None, frozenset()

    # ------------------------------------------------------------------ bookkeeping
    def _credit(self, view: ClusterView) -> None:
        """Charge the time since the last decision to what each job held in it."""
        if self._last is not None and view.now > self._last:
            dt = view.now - self._last
            for job in view.active():
                self._seen[job.id] = self._seen.get(job.id, 0.0) + dt
            for job in view.running.values():
                if job.allocation is None:
                    continue
                node = next(iter(job.allocation.placement), None)
                if node in view.nodes:
                    gpu_type = view.nodes[node].gpu_type
                    got = self._received.setdefault(job.id, {})
                    got[gpu_type] = got.get(gpu_type, 0.0) + dt
        self._last = view.now
        active = {j.id for j in view.active()}
        for store in (self._seen, self._received):
            for job_id in [j for j in store if j not in active]:
                del store[job_id]

    def _allocation(self, view: ClusterView, stats: list[SolverStats]) -> Allocation:
        jobs = frozenset(j.id for j in view.active())
        if self._alloc is None or jobs != self._alloc_jobs:
            capacity: dict[str, int] = {}
            for node in view.nodes.values():
                capacity[node.gpu_type] = capacity.get(node.gpu_type, 0) + node.gpus
            rates = {j.id: self._rates(view, j, capacity) for j in view.active()}
            scale = {j.id: j.spec.requested_gpus for j in view.active()}
            weights = {j.id: j.spec.priority_weight for j in view.active()}
            self._alloc = solve_allocation(rates, scale, capacity, weights)
            self._alloc_jobs = jobs
            stats.append(self._alloc.stats)
        return self._alloc

    @staticmethod
    def _rates(view: ClusterView, job: ActiveJob, capacity: dict[str, int]) -> dict[str, float]:
        sf = job.spec.requested_gpus
        out = {}
        for gpu_type, gpus in capacity.items():
            if gpus < sf or job.spec.gpu_type not in (None, gpu_type):
                continue
            out[gpu_type] = job.spec.throughput.rate(sf) * type_speed(
                view.cluster, job.spec, gpu_type
            )
        return out

    def priority(self, job_id: str, gpu_type: str, x: float) -> float:
        """``X[j][t]`` / fraction of its active time job ``j`` ran on ``t`` (inf if never)."""
        seen = self._seen.get(job_id, 0.0)
        got = self._received.get(job_id, {}).get(gpu_type, 0.0)
        if got <= 0.0 or seen <= 0.0:
            return math.inf
        return x / (got / seen)

    def order(self, job: ActiveJob) -> tuple[float | int | str, ...]:
        """Tie-break among equal priorities: earlier submission, then job id."""
        return (job.spec.submit_time, job.id)

    # ------------------------------------------------------------------ stages
    def shares(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        self._credit(view)
        alloc = self._allocation(view, stats)
        active = {j.id: j for j in view.active()}
        new_round = self._round_end is None or view.now >= self._round_end
        if new_round:
            self._assigned = {}
            if self._round_end is None:
                self._round_end = view.now + self.round_s
            while self._round_end <= view.now:
                self._round_end += self.round_s
        else:
            self._assigned = {j: t for j, t in self._assigned.items() if j in active}
        room: dict[str, int] = {}
        for node in view.nodes.values():
            room[node.gpu_type] = room.get(node.gpu_type, 0) + node.gpus
        for job_id, gpu_type in self._assigned.items():
            room[gpu_type] -= active[job_id].spec.requested_gpus
        ranked = sorted(
            (
                (self.priority(j, t, x), x, j, t)
                for j, row in alloc.x.items()
                if j in active and j not in self._assigned
                for t, x in row.items()
                if x > 1e-9
            ),
            key=lambda p: (-p[0], -p[1], *self.order(active[p[2]]), p[3]),
        )
        for _, _, job_id, gpu_type in ranked:
            sf = active[job_id].spec.requested_gpus
            if job_id in self._assigned or room.get(gpu_type, 0) < sf:
                continue
            self._assigned[job_id] = gpu_type
            room[gpu_type] -= sf
        return {j: active[j].spec.requested_gpus for j in self._assigned}

    def placement(self, view: ClusterView, shares: Shares, stats: list[SolverStats]) -> Placements:
        """Each assigned job on GPUs of its round's type: a running job already there keeps
        its GPUs; the rest go best-fit onto that type's nodes, largest first."""
        free = {n: list(g) for n, g in view.free.items()}
        result: Placements = {}
        for job_id, job in view.running.items():
            alloc = job.allocation
            if alloc is None:
                continue
            here = {view.nodes[n].gpu_type for n in alloc.placement if n in view.nodes}
            if job_id in shares and here == {self._assigned.get(job_id)}:
                result[job_id] = alloc
            else:
                for node, gpus in alloc.placement.items():
                    if node in free:
                        free[node].extend(gpus)
        for gpus in free.values():
            gpus.sort()
        groups = nodes_by_type(view, sorted(free))
        todo = [(n, j) for j, n in shares.items() if j not in result]
        for count, job_id in sorted(todo, key=lambda c: (-c[0], c[1])):
            nodes = groups.get(self._assigned[job_id], [])
            got = take_best_fit(free, count, nodes)
            if got is not None:
                result[job_id] = JobAllocation.fast(job_id, dict(sorted(got.items())))
        return result

    def wakeup(self, view: ClusterView) -> float | None:
        """The next round boundary while any job is active."""
        if not view.running and not view.pending:
            return None
        return self._round_end


@dataclass
class MaxMinAgnostic(MaxMinPerf):
    """Gavel's heterogeneity-agnostic ``max_min_fairness``: the same LP and rounds, with every
    job's throughput 1 on every GPU type that can host it (upstream replaces the throughput
    matrix by ones), so time, not work, is shared equally."""

    @staticmethod
    def _rates(view: ClusterView, job: ActiveJob, capacity: dict[str, int]) -> dict[str, float]:
        rates = MaxMinPerf._rates(view, job, capacity)
        return {t: 1.0 for t, r in rates.items() if r > 0.0}


def max_min_agnostic(round_s: float = ROUND_S) -> StagedPolicy:
    """The ``max-min-agnostic`` policy with rounds of ``round_s`` seconds."""
    if not round_s > 0:
        raise ValueError(f"round_s must be > 0, got {round_s}")
    state = MaxMinAgnostic(round_s=round_s)
    return StagedPolicy(
        "max-min-agnostic", state.shares, state.placement, state.wakeup, memory=state
    )


def max_min_perf(round_s: float = ROUND_S) -> StagedPolicy:
    """The ``max-min-perf`` policy with rounds of ``round_s`` seconds."""
    if not round_s > 0:
        raise ValueError(f"round_s must be > 0, got {round_s}")
    state = MaxMinPerf(round_s=round_s)
    return StagedPolicy("max-min-perf", state.shares, state.placement, state.wakeup, memory=state)


class MaxMinPerfParams(Params):
    round_s: float = Field(
        ROUND_S, gt=0, le=MAX_TIME_S, description="round length, seconds (Gavel: 360 s)"
    )


POLICIES = [
    PolicyDef("max-min-perf", lambda p, _seed: max_min_perf(p.round_s), MaxMinPerfParams),
    PolicyDef("max-min-agnostic", lambda p, _seed: max_min_agnostic(p.round_s), MaxMinPerfParams),
]
