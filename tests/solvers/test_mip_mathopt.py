"""The MIP layer on OR-Tools MathOpt: one translation, every backend, the status/limit contract.

Optima are checked against brute-force enumeration written here, so a translation bug cannot
hide behind agreement between backends (they all read the same MathOpt model).
"""

from __future__ import annotations

import itertools
import math
import random
from types import SimpleNamespace

import pytest

from gpuplan.solver_core.backends import (
    MipModel,
    SolveLimits,
    available_backends,
    lin_sum,
    solve,
    solve_with_fallback,
)
from gpuplan.solver_core.mip_backends import MATHOPT_BACKENDS, _params, _read_result, to_mathopt
from tests.solvers.test_backends import build_hard_mdk, build_market_split

AVAILABLE = available_backends()

# ---------------------------------------------------------------------------------------------
# Random small integer programs against brute force
# ---------------------------------------------------------------------------------------------


def random_ip(seed: int) -> tuple[MipModel, float | None]:
    """A small integer program and its optimum by enumeration (None when infeasible)."""
    rng = random.Random(seed)
    n = rng.randint(2, 4)
    doms = [(rng.randint(-2, 0), rng.randint(1, 3)) for _ in range(n)]
    m = MipModel(f"rand{seed}")
    xs = [m.int_var(lo, hi, f"x{i}") for i, (lo, hi) in enumerate(doms)]
    rows = []
    for _ in range(rng.randint(1, 3)):
        coefs = [rng.randint(-4, 5) for _ in range(n)]
        rhs = rng.randint(-3, 6)
        kind = rng.choice(("<=", ">=", "=="))
        rows.append((coefs, kind, rhs))
        expr = lin_sum(c * x for c, x in zip(coefs, xs, strict=True))
        m.add(expr <= rhs if kind == "<=" else expr >= rhs if kind == ">=" else expr == rhs)
    obj = [rng.randint(-5, 5) for _ in range(n)]
    const = rng.choice((0, 2.5))
    maximize = rng.random() < 0.5
    expr = lin_sum(c * x for c, x in zip(obj, xs, strict=True)) + const
    if maximize:
        m.maximize(expr)
    else:
        m.minimize(expr)
    best: float | None = None
    for point in itertools.product(*(range(lo, hi + 1) for lo, hi in doms)):
        ok = True
        for coefs, kind, rhs in rows:
            act = sum(c * p for c, p in zip(coefs, point, strict=True))
            ok &= act <= rhs if kind == "<=" else act >= rhs if kind == ">=" else act == rhs
        if ok:
            val = sum(c * p for c, p in zip(obj, point, strict=True)) + const
            if best is None or (val > best if maximize else val < best):
                best = val
    return m, best


@pytest.mark.parametrize("backend", AVAILABLE)
def test_random_small_programs_match_brute_force_on_every_backend(backend: str) -> None:
    infeasible = feasible = 0
    for seed in range(25):
        m, best = random_ip(seed)
        sol = solve(m, backend, limits=SolveLimits.deterministic_budget(5.0))
        if best is None:
            infeasible += 1
            assert sol.stats.status == "infeasible", (seed, sol.stats)
            continue
        feasible += 1
        assert sol.stats.status == "optimal", (seed, sol.stats)
        assert sol.stats.objective == pytest.approx(best), seed
        assert sol.stats.bound == sol.stats.objective and sol.stats.gap == 0.0
        # The values satisfy every row and give the objective.
        for con in m.constraints:
            act = sum(c * sol.value(v) for v, c in con.terms.items())
            assert con.lb - 1e-9 <= act <= con.ub + 1e-9, (seed, con)
    assert infeasible >= 2 and feasible >= 10  # both outcomes are exercised


@pytest.mark.parametrize("backend", AVAILABLE)
def test_empty_integer_row_is_infeasible_on_every_backend(backend: str) -> None:
    """0.2 <= x + y <= 0.8 has no integer point: CP-SAT's inward rounding (ceil 0.2 = 1 >
    floor 0.8 = 0) and the MIP solvers must agree."""
    m = MipModel("gap")
    x, y = m.int_var(0, 3, "x"), m.int_var(0, 3, "y")
    m.add(x + y >= 0.2)
    m.add(x + y <= 0.8)
    m.maximize(x)
    assert solve(m, backend, time_limit_s=5).stats.status == "infeasible"


# ---------------------------------------------------------------------------------------------
# The translation and the parameter mapping
# ---------------------------------------------------------------------------------------------


def test_to_mathopt_keeps_order_bounds_and_rounds_only_for_cpsat() -> None:
    m = MipModel("t")
    a = m.int_var(-1, 4, "a")
    b = m.num_var(0, math.inf, "b")
    c = m.bool_var("c")
    m.add(2 * a + 3 * c <= 7.5, "dup")
    m.add(a - c >= -0.5, "dup")  # duplicate row labels are fine in MipModel
    m.maximize(a + b + 0.5)
    mo, xs = to_mathopt(m)
    proto = mo.export_model()
    assert [x.name for x in xs] == ["a", "b", "c"]
    assert list(proto.variables.integers) == [True, False, True]
    assert list(proto.variables.upper_bounds) == [4, math.inf, 1]
    assert list(proto.linear_constraints.upper_bounds) == [7.5, math.inf]
    assert proto.objective.maximize and proto.objective.offset == 0  # constant added back later

    m2 = MipModel("i")
    p, q = m2.int_var(0, 3, "p"), m2.int_var(0, 3, "q")
    m2.add(2 * p + 3 * q <= 7.5)
    m2.add(p - q >= -0.5)
    proto2 = to_mathopt(m2, integral=True)[0].export_model()
    assert list(proto2.linear_constraints.upper_bounds) == [7, math.inf]
    assert list(proto2.linear_constraints.lower_bounds) == [-math.inf, 0]


def test_limits_map_onto_mathopt_parameters() -> None:
    det = SolveLimits.deterministic_budget(0.5, nodes=77)
    sat = _params("cp-sat", det, 9.0, 2, 5, 0.0)
    assert sat.cp_sat.max_deterministic_time == 0.5
    assert sat.cp_sat.num_workers == 2 and sat.cp_sat.random_seed == 5
    assert sat.node_limit is None  # CP-SAT rejects a node limit: deterministic time is its budget
    assert sat.time_limit.total_seconds() == 9.0  # the wall-clock guard only
    for backend in ("scip", "highs"):
        p = _params(backend, det, 9.0, 1, 5, 0.0)
        assert p.node_limit == 77 and p.random_seed == 5 and p.relative_gap_tolerance == 0.0
    assert _params("highs", det, 9.0, 1, 0, 0.0).highs.int_options["threads"] == 1
    wall = _params("scip", SolveLimits.wall(3.0), 3.0, 1, 0, 0.0)
    assert wall.node_limit is None and not SolveLimits.wall(3.0).deterministic


# ---------------------------------------------------------------------------------------------
# Deterministic limits and the status mapping
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", [b for b in AVAILABLE if b in MATHOPT_BACKENDS])
def test_tight_deterministic_limit_binds_and_repeats(backend: str) -> None:
    """A budget too small to prove the optimum of the hard knapsack stops the search (status
    feasible, with a real bound) and gives the same incumbent and bound every time."""
    limits = SolveLimits.deterministic_budget(0.02, nodes=3)
    runs = [solve(build_hard_mdk(), backend, limits=limits) for _ in range(2)]
    first = runs[0].stats
    assert first.status == "feasible", first
    assert first.bound is not None and first.bound >= first.objective  # maximisation
    assert first.gap is not None and first.gap > 0
    for other in runs[1:]:
        assert other.raw_values == runs[0].raw_values
        assert (other.stats.objective, other.stats.bound) == (first.objective, first.bound)


@pytest.mark.parametrize("backend", [b for b in AVAILABLE if b in ("scip", "highs")])
def test_node_limit_without_incumbent_is_timeout_and_falls_back(backend: str) -> None:
    limits = SolveLimits.deterministic_budget(0.02, nodes=1)
    sol = solve(build_market_split(), backend, limits=limits)
    assert sol.stats.status == "timeout" and not sol.ok
    assert "limit reached" in sol.stats.message and "NODE" in sol.stats.message
    assert sol.stats.node_limit == 1 and sol.stats.deterministic
    result, st = solve_with_fallback(
        build_market_split, lambda: "greedy", lambda _: "exact", backend, limits=limits
    )
    assert result == "greedy" and st.fell_back and "timeout" in st.message


def _fake(reason: str) -> SimpleNamespace:
    from ortools.math_opt.python import mathopt

    term = SimpleNamespace(
        reason=getattr(mathopt.TerminationReason, reason),
        limit=None,
        detail="",
        objective_bounds=SimpleNamespace(dual_bound=math.inf),
    )
    return SimpleNamespace(termination=term, has_primal_feasible_solution=lambda: False)


def test_infeasible_or_unbounded_is_infeasible_only_on_finite_domains() -> None:
    limits = SolveLimits.wall(1.0)
    bounded = MipModel("b")
    bounded.bool_var("x")
    raw = _read_result(_fake("INFEASIBLE_OR_UNBOUNDED"), bounded, "highs", limits, [], 0.0)
    assert raw.status == "infeasible"
    open_ = MipModel("o")
    open_.int_var(0, math.inf, "n")
    raw = _read_result(_fake("INFEASIBLE_OR_UNBOUNDED"), open_, "highs", limits, [], 0.0)
    assert raw.status == "error" and "unbounded" in raw.message
    raw = _read_result(_fake("NUMERICAL_ERROR"), bounded, "scip", limits, [], 0.0)
    assert raw.status == "error" and "NUMERICAL_ERROR" in raw.message


# ---------------------------------------------------------------------------------------------
# The old MathOpt names
# ---------------------------------------------------------------------------------------------


def test_mathopt_names_are_aliases_of_their_backends() -> None:
    from gpuplan.solver_core.problems import mckp
    from gpuplan.solver_core.problems.generate import generate

    inst = mckp.load(generate("mckp", 30, 1), "t")
    limits = SolveLimits.deterministic_budget(2.0)
    for alias, backend in (("mathopt-highs", "highs"), ("mathopt-scip", "scip")):
        if backend not in AVAILABLE:
            continue
        a, b = mckp.run(inst, alias, limits), mckp.run(inst, backend, limits)
        assert a.status == b.status == "optimal"
        assert a.objective == b.objective and a.solution == b.solution
    assert not any(s.startswith("mathopt-") for s in mckp.default_solvers())
    assert "mathopt-highs" in mckp.SOLVERS
