"""Every exact solver of ``gpuplan solve`` equals a brute force written here, and every
heuristic's answer passes the problem's independent feasibility check (hypothesis)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.solver_core.limits import SolveLimits
from gpuplan.solver_core.problems import mckp, packing, placement, reclaim

LIMITS = SolveLimits.wall(30.0)
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _exact(mod: Any) -> list[str]:
    have = set(mod.default_solvers())
    return [s for s in mod.SOLVERS if s in have and s not in mod.HEURISTICS]


# ---------------------------------------------------------------- mckp
@st.composite
def mckp_data(draw: st.DrawFn) -> dict[str, Any]:
    groups = [
        {
            "id": f"g{i}",
            "items": [
                {"weight": draw(st.integers(1, 6)), "value": draw(st.integers(0, 40)) / 4}
                for _ in range(draw(st.integers(0, 3)))
            ],
        }
        for i in range(draw(st.integers(0, 4)))
    ]
    return {"capacity": draw(st.integers(0, 12)), "groups": groups}


def _mckp_brute(data: dict[str, Any]) -> float:
    best = 0.0
    options = [[None, *g["items"]] for g in data["groups"]]
    for pick in itertools.product(*options):
        items = [p for p in pick if p is not None]
        if sum(p["weight"] for p in items) <= data["capacity"]:
            best = max(best, sum(p["value"] for p in items))
    return best


@SETTINGS
@given(mckp_data())
def test_mckp_exact_equals_brute_force(data: dict[str, Any]) -> None:
    inst = mckp.load(data, "t")
    want = _mckp_brute(data)
    for solver in _exact(mckp):
        out = mckp.run(inst, solver, LIMITS)
        assert out.status == "optimal", (solver, out)
        assert out.objective == pytest.approx(want, abs=1e-6), solver
        assert mckp.check(inst, out.solution) == pytest.approx(want, abs=1e-6)
    greedy = mckp.run(inst, "greedy", LIMITS)
    assert greedy.status == "heuristic"
    assert mckp.check(inst, greedy.solution) <= want + 1e-9


# ---------------------------------------------------------------- reclaim
@st.composite
def reclaim_data(draw: st.DrawFn) -> dict[str, Any]:
    servers = [f"s{i}" for i in range(draw(st.integers(1, 6)))]
    jobs = []
    for k in range(draw(st.integers(0, 6))):
        on = draw(
            st.lists(st.sampled_from([*servers, "train"]), min_size=1, max_size=3, unique=True)
        )
        gpus = {s: draw(st.integers(1, 4)) for s in on}
        job: dict[str, Any] = {"id": f"j{k}", "gpus": gpus}
        if draw(st.booleans()):
            job["allowed"] = draw(st.lists(st.integers(1, 10), min_size=1, max_size=4))
        jobs.append(job)
    return {"servers": servers, "jobs": jobs, "demand": draw(st.integers(0, len(servers)))}


def _reclaim_brute(data: dict[str, Any]) -> int:
    best = math.inf
    for chosen in itertools.combinations(data["servers"], data["demand"]):
        dead = 0
        for job in data["jobs"]:
            lost = sum(g for s, g in job["gpus"].items() if s in chosen)
            left = sum(job["gpus"].values()) - lost
            if lost and not (left in job.get("allowed", ()) and left > 0):
                dead += 1
        best = min(best, dead)
    return int(best)


@SETTINGS
@given(reclaim_data())
def test_reclaim_exact_equals_brute_force(data: dict[str, Any]) -> None:
    rf = reclaim.load(data, "t")
    want = _reclaim_brute(data)
    for solver in _exact(reclaim):
        out = reclaim.run(rf, solver, LIMITS)
        assert out.status == "optimal", (solver, out)
        assert out.objective == want, solver
        assert reclaim.check(rf, out.solution) == want
    for solver in reclaim.HEURISTICS:
        out = reclaim.run(rf, solver, LIMITS)
        assert out.status == "heuristic"
        assert reclaim.check(rf, out.solution) >= want


# ---------------------------------------------------------------- packing
def _legal(unit: int, cap: int) -> list[int]:
    small = [2**k for k in range(unit.bit_length()) if 2**k < unit and unit % 2**k == 0]
    return [0, *small, *range(unit, cap + 1, unit)]


def _packing_brute(data: dict[str, Any]) -> tuple[int, int]:
    """Lexicographic min (shortfall, L1): each job takes, per legal footprint, the largest
    allowed count above the previous legal size (any count: the footprint itself), no less
    than its best option not above its share unless those floors overflow the capacity."""
    unit, cap = data["unit"], data["capacity"]
    legal = _legal(unit, cap)
    jobs = [j for j in data["jobs"] if j["share"] > 0]
    opts = []
    for j in jobs:
        row = [(0, 0)]
        for prev, v in itertools.pairwise(legal):
            allowed = j.get("allowed")
            fits = [c for c in (allowed if allowed is not None else [v]) if prev < c <= v]
            if fits:
                row.append((v, max(fits)))
        low = max(i for i, (_, c) in enumerate(row) if c <= j["share"])
        opts.append((row, low))
    floors_fit = sum(row[low][0] for row, low in opts) <= cap
    target = min(sum(j["share"] for j in jobs), cap)
    best = (math.inf, math.inf)
    for pick in itertools.product(
        *(range(low if floors_fit else 0, len(row)) for row, low in opts)
    ):
        foot = sum(opts[i][0][p][0] for i, p in enumerate(pick))
        if foot > cap:
            continue
        l1 = sum(abs(opts[i][0][p][1] - jobs[i]["share"]) for i, p in enumerate(pick))
        best = min(best, (max(0, target - foot), l1))
    return best  # type: ignore[return-value]


@st.composite
def packing_data(draw: st.DrawFn) -> dict[str, Any]:
    unit = draw(st.sampled_from([2, 4, 6, 8]))
    jobs = []
    for k in range(draw(st.integers(0, 4))):
        job: dict[str, Any] = {"id": f"j{k}", "share": draw(st.integers(0, 12))}
        if draw(st.booleans()):
            job["allowed"] = draw(st.lists(st.integers(1, 12), min_size=1, max_size=3))
        jobs.append(job)
    return {"unit": unit, "capacity": draw(st.integers(0, 24)), "jobs": jobs}


@SETTINGS
@given(packing_data())
def test_packing_exact_equals_brute_force(data: dict[str, Any]) -> None:
    pf = packing.load(data, "t")
    short, l1 = _packing_brute(data)
    for solver in _exact(packing):
        out = packing.run(pf, solver, LIMITS)
        assert out.status == "optimal", (solver, out)
        assert (out.solution["shortfall"], out.solution["l1"]) == (short, l1), solver
        assert packing.check(pf, out.solution) == out.objective
    for solver in packing.HEURISTICS:
        out = packing.run(pf, solver, LIMITS)
        assert packing.check(pf, out.solution) == out.objective
        assert (out.solution["shortfall"], out.solution["l1"]) >= (short, l1)


# ---------------------------------------------------------------- placement
def _compositions(n: int, nodes: list[str]) -> list[dict[str, int]]:
    out = []
    for cut in itertools.product(range(n + 1), repeat=len(nodes)):
        if sum(cut) == n:
            out.append({s: c for s, c in zip(nodes, cut, strict=True) if c})
    return out


def _placement_brute(data: dict[str, Any]) -> tuple[int, ...]:
    """Max (placed GPUs, kept jobs, reused GPUs, -spread if network sharing allowed)."""
    unit, nodes, nns = data["unit"], data["nodes"], data.get("no_network_sharing", True)
    names = list(nodes)
    choices = [[None, *_compositions(j["count"], j.get("nodes", names))] for j in data["jobs"]]
    best: tuple[int, ...] = (-1,)
    for pick in itertools.product(*choices):
        used = dict.fromkeys(names, 0)
        multi = dict.fromkeys(names, 0)
        ok = True
        for c in pick:
            if c is None:
                continue
            if nns and len(c) != -(-sum(c.values()) // unit):
                ok = False
            for s, g in c.items():
                used[s] += g
                multi[s] += len(c) > 1
        if not ok or any(used[s] > nodes[s] or (nns and multi[s] > 1) for s in names):
            continue
        placed = kept = reused = spread = 0
        for j, c in zip(data["jobs"], pick, strict=True):
            if c is None:
                continue
            placed += j["count"]
            spread += len(c)
            mine = sum(min(g, j.get("held", {}).get(s, 0)) for s, g in c.items())
            reused += mine
            kept += mine > 0
        best = max(best, (placed, kept, reused, 0 if nns else -spread))
    return best


@st.composite
def placement_data(draw: st.DrawFn) -> dict[str, Any]:
    unit = draw(st.sampled_from([2, 4]))
    nodes = {f"n{i}": unit for i in range(draw(st.integers(1, 3)))}
    free = dict(nodes)
    jobs = []
    for k in range(draw(st.integers(1, 3))):
        held = {}
        for n in nodes:
            h = draw(st.integers(0, min(free[n], 2)))
            if h:
                held[n] = h
                free[n] -= h
        jobs.append({"id": f"j{k}", "count": draw(st.integers(1, 4)), "held": held})
    return {"unit": unit, "nodes": nodes, "jobs": jobs, "no_network_sharing": draw(st.booleans())}


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placement_data())
def test_placement_exact_equals_brute_force(data: dict[str, Any]) -> None:
    p = placement.load(data, "t")
    want = _placement_brute(data)
    for solver in _exact(placement):
        out = placement.run(p, solver, LIMITS)
        assert out.status == "optimal", (solver, out)
        sol = out.solution
        placement.check(p, sol)
        spread = sum(len(c) for c in sol["placement"].values())
        got = (
            sol["placed_gpus"],
            sol["kept_jobs"],
            sol["reused_gpus"],
            0 if p.no_network_sharing else -spread,
        )
        assert got == want, solver
    greedy = placement.run(p, "greedy", LIMITS)
    placement.check(p, greedy.solution)
    assert greedy.objective is not None


def test_a_stopped_solve_is_never_called_optimal() -> None:
    """At a 50 ms limit on 300 coupled servers no backend can prove the optimum: the answer is
    ``feasible`` (objective above its bound), ``timeout`` or ``heuristic`` (exact fell back)."""
    from tests.bench.solvers import gen_reclaim

    rf = reclaim.load(gen_reclaim(300, 1), "t")
    limits = SolveLimits.wall(0.05)
    for solver in ("cp-sat", "highs", "mathopt-highs", "exact"):
        if solver not in reclaim.default_solvers():
            continue
        out = reclaim.run(rf, solver, limits)
        assert out.status in ("feasible", "timeout", "heuristic"), (solver, out.status)
        if out.status == "feasible":
            reclaim.check(rf, out.solution)
            assert out.bound is None or out.bound <= out.objective + 1e-9
