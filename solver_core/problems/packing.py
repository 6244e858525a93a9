"""``packing`` instances: network-packing regulation (AFS/CoDDL App. E, Prop. 2) from a file.

Every job's share is moved to a count whose footprint (the smallest legal size >= it: a power
of two dividing ``unit`` below ``unit``, or a multiple of ``unit``) is legal, so that Prop. 1's
FFD places every job on the fewest nodes without network sharing. Solvers: every MIP backend on
:func:`..placement.network_packing.regulate_exact`'s model, and Prop. 2's constructive greedy
under its two rules, ``greedy-deficit`` and ``greedy-marginal``. Format and objective:
docs/solvers.md.
"""

from __future__ import annotations

import time
from typing import Any

from gpuplan.models import InputError, SolverStats
from gpuplan.models.bounds import MAX_GPUS_PER_NODE

from ..limits import SolveLimits
from ..placement.network_packing import (
    envelope,
    regulate_exact,
    regulate_greedy,
    regulation_cost,
    regulation_options,
)
from .common import MIP_SOLVERS, Outcome, heuristic_outcome, mip_defaults, rule
from .fields import as_int, as_list, as_record, as_str, instance_object, unique

__all__ = [
    "HEURISTICS",
    "SOLVERS",
    "PackingFile",
    "check",
    "default_solvers",
    "load",
    "run",
    "score",
]

HEURISTICS = ("greedy-deficit", "greedy-marginal")

MAX_PACKING_GPUS = 1 << 16
"""Largest ``capacity``, ``share`` and ``allowed`` count: every solver enumerates each job's
legal counts up to the capacity (65,536 GPUs with ``unit`` 1 already takes seconds; 10^20
overflowed a C integer inside the solvers: an internal error). Bounds: docs/solvers.md."""
SOLVERS = (*MIP_SOLVERS, *HEURISTICS)


class PackingFile:
    """A validated instance: ``unit`` GPUs per node, ``capacity`` GPUs, shares, allowed counts."""

    def __init__(
        self,
        unit: int,
        capacity: int,
        shares: dict[str, int],
        allowed: dict[str, tuple[int, ...] | None],
    ) -> None:
        self.unit = unit
        self.capacity = capacity
        self.shares = shares
        self.allowed = allowed

    def weight(self) -> int:
        """W of the objective: above any L1 change, so a GPU left idle always costs more."""
        total = 1
        for j, s in self.shares.items():
            if s > 0:
                opts = regulation_options(self.unit, self.capacity, self.allowed[j])
                total += max(abs(o.count - s) for o in opts)
        return total


def load(data: Any, source: str) -> PackingFile:
    obj = instance_object(data, source, ("unit", "capacity", "jobs"))
    unit = as_int(obj["unit"], source, "unit", low=1, high=MAX_GPUS_PER_NODE)
    capacity = as_int(obj["capacity"], source, "capacity", low=0, high=MAX_PACKING_GPUS)
    shares: dict[str, int] = {}
    allowed: dict[str, tuple[int, ...] | None] = {}
    ids = []
    for ji, j in enumerate(as_list(obj["jobs"], source, "jobs")):
        where = f"jobs[{ji}]"
        j = as_record(j, source, where, ("id", "share", "allowed"))
        jid = as_str(j.get("id"), source, f"{where}.id")
        ids.append(jid)
        shares[jid] = as_int(j.get("share"), source, f"{where}.share", low=0, high=MAX_PACKING_GPUS)
        allowed[jid] = None
        if "allowed" in j:
            counts = as_list(j["allowed"], source, f"{where}.allowed")
            allowed[jid] = tuple(
                as_int(a, source, f"{where}.allowed[{k}]", low=1, high=MAX_PACKING_GPUS)
                for k, a in enumerate(counts)
            )
            if not counts:
                raise InputError(
                    "must not be empty (omit it: any count)",
                    source=source,
                    field=f"{where}.allowed",
                )
    unique(ids, source, "jobs[].id")
    return PackingFile(unit, capacity, shares, allowed)


def score(pf: PackingFile, counts: dict[str, int]) -> tuple[int, int, float]:
    """(shortfall, L1, objective = W * shortfall + L1)."""
    short, l1 = regulation_cost(pf.shares, counts, pf.unit, pf.capacity)
    return short, l1, float(pf.weight() * short + l1)


def check(pf: PackingFile, solution: dict[str, Any]) -> float:
    """Independent feasibility: known jobs with a positive share, allowed counts, legal
    footprints within capacity. Returns the objective."""
    counts = solution["counts"]
    used = 0
    for j, c in counts.items():
        rule(pf.shares.get(j, 0) > 0 and c > 0, f"{j}: started or zero count")
        foot = envelope(c, pf.unit)
        if pf.allowed[j] is not None:
            rule(c in pf.allowed[j], f"{j}: count {c} not allowed")  # type: ignore[operator]
        else:
            rule(c == foot, f"{j}: count {c} is not a legal size")
        small = foot < pf.unit and pf.unit % foot == 0 and foot & (foot - 1) == 0
        rule(small or foot % pf.unit == 0, f"{j}: footprint {foot} not legal")
        used += foot
    rule(used <= pf.capacity, f"footprint {used} above capacity {pf.capacity}")
    return score(pf, counts)[2]


def _answer(pf: PackingFile, counts: dict[str, int]) -> dict[str, Any]:
    short, l1, _ = score(pf, counts)
    return {"counts": dict(sorted(counts.items())), "shortfall": short, "l1": l1}


def default_solvers() -> tuple[str, ...]:
    return (*mip_defaults(), *HEURISTICS)


def run(pf: PackingFile, solver: str, limits: SolveLimits) -> Outcome:
    t0 = time.perf_counter()
    if solver in HEURISTICS:
        counts = regulate_greedy(
            pf.shares, pf.unit, pf.capacity, pf.allowed, rule=solver.split("-")[1]
        )  # type: ignore[arg-type]
        return heuristic_outcome(_answer(pf, counts), score(pf, counts)[2], t0)
    stats: list[SolverStats] = []
    counts = regulate_exact(
        pf.shares, pf.unit, pf.capacity, pf.allowed, backend=solver, limits=limits, stats=stats
    )
    st = stats[-1]
    out = heuristic_outcome(_answer(pf, counts), score(pf, counts)[2], t0, status=st.status)
    if st.status == "optimal":
        out.bound, out.gap = out.objective, 0.0
    elif st.bound is not None and not st.fell_back:
        out.bound, out.gap = st.bound, st.gap
    out.message = st.message
    return out
