"""``mckp`` instances: multiple-choice knapsack (Aryl phase 2) read from a file.

Solvers: every MIP backend on the plain choice model (``x_gi`` binary, at most one per group,
weights within capacity), ``dp`` (Aryl's MaxValueDP, :func:`..aryl.mckp.solve_dp`) and
``greedy`` (incremental efficiency, :func:`..aryl.mckp.solve_greedy`). The policy's own exact
path (step model with LP reduced-cost fixing) is not used here: every backend is compared on
the same, plain model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..backends import MipModel, Solution, lin_sum
from ..limits import SolveLimits
from ..policies.aryl.mckp import MckpGroup, solve_dp, solve_greedy
from .common import (
    MATHOPT_SOLVERS,
    MIP_SOLVERS,
    Outcome,
    heuristic_outcome,
    mip_defaults,
    rule,
    solve_mip,
)
from .fields import as_int, as_list, as_number, as_record, as_str, instance_object, unique

__all__ = ["EXACT", "HEURISTICS", "SOLVERS", "MckpFile", "check", "default_solvers", "load", "run"]

EXACT = ("dp", *MIP_SOLVERS, *MATHOPT_SOLVERS)
HEURISTICS = ("greedy",)
SOLVERS = (*EXACT, *HEURISTICS)


@dataclass(frozen=True)
class MckpFile:
    capacity: int
    groups: tuple[MckpGroup, ...]


def load(data: Any, source: str) -> MckpFile:
    """Validate an ``mckp`` file (README): integer capacity >= 0, unique group ids, integer
    weights >= 1, finite values >= 0."""
    obj = instance_object(data, source, ("capacity", "groups"))
    capacity = as_int(obj["capacity"], source, "capacity", low=0)
    groups = []
    for gi, g in enumerate(as_list(obj["groups"], source, "groups")):
        where = f"groups[{gi}]"
        g = as_record(g, source, where, ("id", "items"))
        gid = as_str(g.get("id"), source, f"{where}.id")
        items = []
        for ii, it in enumerate(as_list(g.get("items"), source, f"{where}.items")):
            iw = f"{where}.items[{ii}]"
            it = as_record(it, source, iw, ("weight", "value"))
            w = as_int(it.get("weight"), source, f"{iw}.weight", low=1)
            v = as_number(it.get("value"), source, f"{iw}.value", low=0.0)
            items.append((w, v))
        groups.append(MckpGroup(gid, tuple(items)))
    unique([g.key for g in groups], source, "groups[].id")
    return MckpFile(capacity, tuple(groups))


def value_of(inst: MckpFile, choice: dict[str, int | None]) -> float:
    return sum(
        g.items[choice[g.key]][1]
        for g in inst.groups  # type: ignore[index]
        if choice.get(g.key) is not None
    )


def check(inst: MckpFile, solution: dict[str, Any]) -> float:
    """Independent feasibility check: every group answered, indices valid, capacity kept.
    Returns the value; raises RuleBroken (an AssertionError) when infeasible."""
    choice = solution["choice"]
    rule(set(choice) == {g.key for g in inst.groups}, "choice must name every group")
    weight = 0
    for g in inst.groups:
        i = choice[g.key]
        if i is not None:
            rule(0 <= i < len(g.items), f"bad item index {i} in {g.key}")
            weight += g.items[i][0]
    rule(weight <= inst.capacity, f"weight {weight} above capacity {inst.capacity}")
    return value_of(inst, choice)


def _answer(inst: MckpFile, choice: dict[str, int]) -> dict[str, Any]:
    return {
        "choice": {
            g.key: (None if choice.get(g.key, -1) < 0 else choice[g.key]) for g in inst.groups
        }
    }


def default_solvers() -> tuple[str, ...]:
    return ("dp", *mip_defaults(mathopt=True), *HEURISTICS)


def run(inst: MckpFile, solver: str, limits: SolveLimits) -> Outcome:
    t0 = time.perf_counter()
    if solver == "dp":
        res = solve_dp(inst.groups, inst.capacity)
        sol = _answer(inst, res.choice)
        out = heuristic_outcome(sol, value_of(inst, sol["choice"]), t0, status="optimal")
        out.bound, out.gap = out.objective, 0.0
        return out
    if solver == "greedy":
        res = solve_greedy(inst.groups, inst.capacity)
        sol = _answer(inst, res.choice)
        return heuristic_outcome(sol, value_of(inst, sol["choice"]), t0)
    xs: dict[tuple[int, int], Any] = {}

    def build() -> MipModel:
        m = MipModel("mckp")
        for gi, g in enumerate(inst.groups):
            row = []
            for i, (w, v) in enumerate(g.items):
                if w <= inst.capacity and v > 0:
                    xs[gi, i] = m.bool_var(f"x_{gi}_{i}")
                    row.append(xs[gi, i])
            if row:
                m.add(lin_sum(row) <= 1, f"one_{gi}")
        m.add(
            lin_sum(inst.groups[gi].items[i][0] * x for (gi, i), x in xs.items()) <= inst.capacity,
            "capacity",
        )
        m.maximize(lin_sum(inst.groups[gi].items[i][1] * x for (gi, i), x in xs.items()))
        return m

    def decode(sol: Solution) -> dict[str, Any]:
        choice = {g.key: -1 for g in inst.groups}
        for (gi, i), x in xs.items():
            if sol.value(x) == 1:
                choice[inst.groups[gi].key] = i
        return _answer(inst, choice)

    return solve_mip(build, decode, solver, limits, lambda s: value_of(inst, s["choice"]))
