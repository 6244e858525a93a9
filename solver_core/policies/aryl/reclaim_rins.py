"""The tight reclaim MIP, its LP bound, and a RINS sub-MIP that polishes a search's answer.

Why (issue 15 item 4): on ~1,000 loaned servers tied together by multi-server jobs, swap
annealing and small CP-SAT neighbourhoods stall 5-8 % above the optimum in a second. The
*tight* model below (a fatal server forces its job's preemption directly, not through a
big-M row) has an LP relaxation whose solution is mostly integral and points at the optimum:
HiGHS proves these instances optimal at its root node. That takes it seconds of cuts, but the
relaxation-induced neighbourhood search (RINS, Danna, Rothberg & Le Pape 2005) gets almost all
of it in a fraction: keep every server on which the LP and the incumbent agree (LP value 0 or
1, incumbent the same), free the 150-300 others, and let HiGHS solve that sub-MIP under a
node limit. On the generated 1,000-server instances it lands 1-3 % above the optimum from
Aryl's answer alone (docs/solvers.md "Reclaim at scale").

Model, over the loaned servers (``x_s`` returned) and the jobs on them (``y_j`` preempted):
``sum x = count``; with ``L_j`` the GPUs job j holds on loaned servers and ``S_j`` the losses
it survives (0 always), ``d_j = max S_j`` (only losses up to ``L_j`` count):

* ``y_j >= x_s`` for every server whose GPUs ``g_js > d_j`` (losing it alone is fatal);
* ``S_j`` contiguous (0..d_j): ``sum_s g_js x_s <= d_j + (L_j - d_j) y_j``;
* ``S_j`` with gaps: one binary ``w_jv`` per survivable loss v, ``sum_v w_jv + y_j = 1`` and
  ``|sum_s g_js x_s - sum_v v w_jv| <= L_j y_j``;
* minimise ``sum y``. A job with ``d_j >= L_j`` can never die and gets no variable.

The model is exact (the tests check its answers with an independent evaluator). HiGHS runs
through :func:`scipy.optimize.milp` (scipy is a core dependency; the backends module is not
needed and its API stays untouched). Determinism: HiGHS is deterministic for a given model and
node limit; the time limit passed with it is only the caller's wall-clock guard.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_matrix

from .reclaim_model import ReclaimInstance, ReclaimJob

__all__ = [
    "RINS_NODES_PER_WORK_S",
    "RinsResult",
    "TightModel",
    "lp_relaxation",
    "rins",
    "tight_model",
]

RINS_NODES_PER_WORK_S = 200
"""HiGHS branch-and-bound nodes of the RINS sub-MIP per deterministic second. Measured on the
generated 1,000-server instances: the sub-MIP closes at its root or in a few dozen nodes, so the
limit only bounds pathological cases."""

_EPS = 1e-6


def survivable(job: ReclaimJob) -> tuple[int, ...]:
    """GPU losses job survives, 0 included (the engine's rule: it keeps an allowed count)."""
    total = job.total
    kept = {a for a in job.allowed if 0 < a <= total} if job.allowed else {total}
    return tuple(sorted({0} | {total - a for a in kept}))


@dataclass
class TightModel:
    """The tight MIP as arrays: variables ``x`` (one per server, first), then per job ``y``
    and any ``w``; rows ``lo <= a @ v <= hi``; objective ``cost @ v``."""

    servers: tuple[str, ...]
    a: csr_matrix
    lo: np.ndarray
    hi: np.ndarray
    cost: np.ndarray

    @property
    def n(self) -> int:
        return len(self.servers)


def tight_model(inst: ReclaimInstance, count: int) -> TightModel:
    """The model of the module docstring for returning ``count`` of ``inst``'s servers."""
    index = {s: i for i, s in enumerate(inst.servers)}
    n = len(index)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    cost = [0.0] * n

    def row(entries: list[tuple[int, float]], low: float, high: float) -> None:
        r = len(lo)
        for c, v in entries:
            rows.append(r)
            cols.append(c)
            vals.append(v)
        lo.append(low)
        hi.append(high)

    def var(c: float) -> int:
        cost.append(c)
        return len(cost) - 1

    row([(i, 1.0) for i in range(n)], count, count)
    for job in inst.jobs:
        on = [(index[s], g) for s, g in job.gpus.items() if s in index and g > 0]
        reach = sum(g for _, g in on)
        ok = [v for v in survivable(job) if v <= reach]
        top = ok[-1]
        if top >= reach:
            continue  # no loss from loaned servers kills it
        y = var(1.0)
        for s, g in on:
            if g > top:
                row([(y, 1.0), (s, -1.0)], 0.0, math.inf)
        lost = [(s, float(g)) for s, g in on]
        if ok == list(range(top + 1)):
            if any(g <= top for _, g in on):  # else the rows above already say it all
                row([*lost, (y, -(reach - top))], -math.inf, top)
            continue
        ws = [(var(0.0), float(v)) for v in ok]
        row([(w, 1.0) for w, _ in ws] + [(y, 1.0)], 1.0, 1.0)
        off = [(w, -v) for w, v in ws]
        row([*lost, *off, (y, -float(reach))], -math.inf, 0.0)
        row([*lost, *off, (y, float(reach))], 0.0, math.inf)
    size = len(cost)
    a = csr_matrix((vals, (rows, cols)), shape=(len(lo), size))
    return TightModel(tuple(inst.servers), a, np.asarray(lo), np.asarray(hi), np.asarray(cost))


def lp_relaxation(
    model: TightModel, time_limit_s: float = 60.0
) -> tuple[float | None, np.ndarray | None]:
    """(lower bound on the preemptions, the LP's server values), or (None, None) on failure.

    Preemptions are integral, so the bound is the LP value rounded up."""
    res = milp(
        model.cost,
        constraints=LinearConstraint(model.a, model.lo, model.hi),
        bounds=Bounds(0.0, 1.0),
        options={"time_limit": time_limit_s},
    )
    if res.status != 0 or res.x is None:
        return None, None
    return float(math.ceil(res.fun - _EPS)), np.asarray(res.x[: model.n])


@dataclass
class RinsResult:
    """The sub-MIP's servers (None when it found nothing), how many servers it freed and
    HiGHS's status text."""

    servers: list[str] | None
    freed: int
    message: str


def rins(
    model: TightModel,
    lp_x: np.ndarray,
    incumbent: list[str],
    *,
    node_limit: int | None,
    time_limit_s: float,
) -> RinsResult:
    """The best answer HiGHS finds with every server fixed where the LP value is integral and
    equal to the incumbent's, the others free. The incumbent is feasible there, so a sub-MIP
    run to its end is never worse; the caller still keeps the better of the two."""
    chosen = set(incumbent)
    inc = np.fromiter((s in chosen for s in model.servers), dtype=float, count=model.n)
    integral = (lp_x < _EPS) | (lp_x > 1.0 - _EPS)
    fixed = integral & (np.round(lp_x) == inc)
    lb = np.zeros(len(model.cost))
    ub = np.ones(len(model.cost))
    lb[: model.n][fixed & (inc == 1.0)] = 1.0
    ub[: model.n][fixed & (inc == 0.0)] = 0.0
    options: dict[str, float | int] = {"time_limit": time_limit_s}
    if node_limit is not None:
        options["node_limit"] = node_limit
    res = milp(
        model.cost,
        constraints=LinearConstraint(model.a, model.lo, model.hi),
        integrality=np.ones(len(model.cost)),
        bounds=Bounds(lb, ub),
        options=options,
    )
    freed = int(model.n - fixed.sum())
    if res.x is None:
        return RinsResult(None, freed, str(res.message))
    servers = [s for s, v in zip(model.servers, res.x[: model.n], strict=True) if v > 0.5]
    return RinsResult(servers, freed, str(res.message))
