"""A proven lower bound on the continuous optimum of the offline problem (average JCT).

The slotted model of :mod:`.offline_model` gives a real schedule, hence an upper bound; this
module proves how far above the best *continuous* schedule it can be. It relaxes the problem on
the same grid (``slot_s`` from ``origin``, ``horizon`` slots) so that every continuous
schedule maps into it:

* ``y[j,t,g]`` in [0, 1] is the fraction of slot ``t`` job ``j`` runs at ``g`` GPUs (a schedule
  may change allocations anywhere inside a slot; only the slot's *average* GPU use is capped
  by the cluster's); in its arrival slot only the part after the arrival is usable;
* ``z[j,t]`` = 1 while the job is unfinished at the start of slot ``t`` (non-increasing) and
  must be 1 wherever ``y`` > 0; after the horizon the cluster is unlimited (``tail``);
* a job whose last slot used is ``k`` finishes no earlier than the slot's start plus the work
  left then at its fastest rate; and never earlier than arrival + work at its fastest rate.

It is a MIP with continuous ``y`` (SCIP through :mod:`.backends`, node-limited so it is
deterministic); the solver's dual bound, not only its optimum, is a valid lower bound.
Rows are written in slots and fractions of each job's work so coefficients stay near 1.
"""

from __future__ import annotations

import math

from gpuplan.models import SolverStats

from .backends import solve
from .limits import SolveLimits
from .mip_model import LinExpr, MipModel, lin_sum

__all__ = ["BOUND_BACKEND", "continuous_lower_bound"]

BOUND_BACKEND = "scip"
"""SCIP: it reports its dual bound when it stops at the node limit, and that bound is what is
proven. (HiGHS did not under the old pywraplp route; through MathOpt it does now, but the
published numbers in docs/results/optimality.md were made with SCIP, so SCIP stays.)"""
EPS = 1e-9


def continuous_lower_bound(
    jobs: list[tuple[float, float, dict[int, float]]],
    capacity: int,
    origin: float,
    slot_s: float,
    horizon: int,
    limits: SolveLimits,
    seed: int = 0,
) -> tuple[float, SolverStats]:
    """Lower bound on the *sum* of JCTs (seconds) of any continuous schedule of ``jobs``
    (``(arrival, work, {count: iterations/s})`` each) on ``capacity`` GPUs."""
    m = MipModel("offline-bound")
    load: list[list[LinExpr]] = [[] for _ in range(horizon)]
    jcts = []
    const = 0.0
    for i, (arrival, work, rates) in enumerate(jobs):
        fastest = max(rates.values())
        shortest = work / fastest / slot_s  # slots
        rel = (arrival - origin) / slot_s  # arrival in slots from the origin
        first = math.floor(rel + EPS)
        if first >= horizon:
            const += work / fastest
            continue
        jct = m.num_var(shortest, math.inf, f"jct_{i}")
        jcts.append(jct)
        z = [m.bool_var(f"z_{i}_{t}") for t in range(first, horizon)]
        tail = m.bool_var(f"tail_{i}")
        m.add(tail <= z[-1])
        done: list[LinExpr] = []  # fraction of the work done by the end of each slot
        progress = LinExpr()
        for k, t in enumerate(range(first, horizon)):
            if k:
                m.add(z[k] <= z[k - 1])
            usable = max(0.0, min(1.0, t + 1 - rel))
            y = {g: m.num_var(0.0, usable, f"y_{i}_{t}_{g}") for g in rates}
            m.add(lin_sum(y.values()) <= usable * z[k])
            for g, v in y.items():
                load[t].append(g * v)
            progress = progress + lin_sum(rates[g] * slot_s / work * v for g, v in y.items())
            done.append(progress)
        m.add(progress + tail >= 1.0)
        # Last slot used is k (z[k] = 1, z[k+1] = 0): JCT >= k - rel + (1 - done before k) *
        # shortest. Off when not last: big enough M so the row is implied by jct >= 0.
        for k, t in enumerate(range(first, horizon)):
            before = done[k - 1] if k else LinExpr()
            start = max(t, rel) - rel
            off = (1 - z[k]) + (z[k + 1] if k + 1 < len(z) else tail)
            m.add(jct >= start + shortest - shortest * before - (start + shortest) * off)
        m.add(jct >= (horizon - rel) - (horizon - rel) * (1 - tail))
    for t in range(horizon):
        if load[t]:
            m.add(lin_sum(load[t]) <= capacity)
    m.minimize(lin_sum(jcts))
    sol = solve(m, BOUND_BACKEND, limits=limits, stage="offline-bound", seed=seed)
    bound = sol.stats.bound
    if bound is None or not math.isfinite(bound):
        bound = sol.objective if sol.stats.status == "optimal" and sol.objective else 0.0
    lower = max(0.0, bound) * slot_s * (1 - 1e-7) + const
    return lower, sol.stats
