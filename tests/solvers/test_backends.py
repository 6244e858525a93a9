"""Tests for gpuplan.solver_core.backends: one model API, five exact backends, one fallback rule.

Optima are checked against values computed independently here (dynamic programming or brute
force), so a translation bug in any backend cannot hide behind agreement with another backend.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import random
import subprocess
import sys
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.models import InputError, SolverStats
from gpuplan.solver_core.backends import (
    BACKENDS,
    LinExpr,
    MipModel,
    ModelError,
    NoSolutionError,
    Solution,
    SolveLimits,
    UnknownBackendError,
    available_backends,
    lin_sum,
    solve,
    solve_with_fallback,
)

AVAILABLE = available_backends()
MIP_BACKENDS = [b for b in AVAILABLE if b != "cp-sat"]

# ---------------------------------------------------------------------------------------------
# Fixed instances and independent reference solutions
# ---------------------------------------------------------------------------------------------

KNAP_WEIGHTS = [23, 31, 29, 44, 53, 38, 63, 85, 89, 82, 12, 17, 41, 27, 36]
KNAP_VALUES = [92, 57, 49, 68, 60, 43, 67, 84, 87, 72, 25, 31, 55, 40, 47]
KNAP_CAPACITY = 265


def knapsack_dp(weights: list[int], values: list[int], capacity: int) -> int:
    """Textbook 0/1 knapsack DP over capacities: the reference optimum."""
    best = [0] * (capacity + 1)
    for w, v in zip(weights, values, strict=True):
        for c in range(capacity, w - 1, -1):
            best[c] = max(best[c], best[c - w] + v)
    return best[capacity]


def build_knapsack(weights: list[int], values: list[int], capacity: int) -> tuple[MipModel, list]:
    m = MipModel("knapsack")
    xs = [m.bool_var(f"take_{i}") for i in range(len(weights))]
    m.add(lin_sum(w * x for w, x in zip(weights, xs, strict=True)) <= capacity, "capacity")
    m.maximize(lin_sum(v * x for v, x in zip(values, xs, strict=True)))
    return m, xs


# Generalised assignment: 7 jobs onto 3 nodes, per-node GPU capacity, minimise cost.
GAP_COST = [
    [8, 3, 7],
    [2, 9, 6],
    [5, 4, 9],
    [7, 7, 2],
    [3, 8, 5],
    [6, 2, 8],
    [4, 6, 3],
]
GAP_SIZE = [4, 2, 3, 3, 2, 4, 2]
GAP_CAP = [8, 6, 7]


def gap_bruteforce() -> int:
    best = math.inf
    for assign in itertools.product(range(3), repeat=len(GAP_SIZE)):
        load = [0, 0, 0]
        for j, n in enumerate(assign):
            load[n] += GAP_SIZE[j]
        if all(load[n] <= GAP_CAP[n] for n in range(3)):
            best = min(best, sum(GAP_COST[j][n] for j, n in enumerate(assign)))
    return int(best)


def build_gap() -> tuple[MipModel, list[list]]:
    m = MipModel("assignment")
    x = [[m.bool_var(f"x_{j}_{n}") for n in range(3)] for j in range(len(GAP_SIZE))]
    for j in range(len(GAP_SIZE)):
        m.add(lin_sum(x[j]) == 1, f"assign_{j}")
    for n in range(3):
        m.add(
            lin_sum(GAP_SIZE[j] * x[j][n] for j in range(len(GAP_SIZE))) <= GAP_CAP[n], f"cap_{n}"
        )
    m.minimize(lin_sum(GAP_COST[j][n] * x[j][n] for j in range(len(GAP_SIZE)) for n in range(3)))
    return m, x


# Bin packing: sizes sum to 30, bins of 10, and a perfect packing exists -> optimum 3 bins.
BIN_SIZES = [6, 5, 4, 4, 3, 3, 2, 2, 1]
BIN_CAP = 10


def build_bin_packing(n_bins: int = 5) -> MipModel:
    m = MipModel("bins")
    used = [m.bool_var(f"used_{b}") for b in range(n_bins)]
    x = [[m.bool_var(f"x_{i}_{b}") for b in range(n_bins)] for i in range(len(BIN_SIZES))]
    for i in range(len(BIN_SIZES)):
        m.add(lin_sum(x[i]) == 1)
    for b in range(n_bins):
        m.add(
            lin_sum(BIN_SIZES[i] * x[i][b] for i in range(len(BIN_SIZES))) - BIN_CAP * used[b] <= 0
        )
    for b in range(n_bins - 1):  # symmetry breaking: use bins in order
        m.add(used[b] >= used[b + 1])
    m.minimize(lin_sum(used))
    return m


def build_hard_mdk(n: int = 80, dims: int = 5, seed: int = 7) -> MipModel:
    """Multi-dimensional knapsack with correlated values: not solvable in 50 ms."""
    rng = random.Random(seed)
    w = [[rng.randint(20, 100) for _ in range(n)] for _ in range(dims)]
    v = [sum(w[k][i] for k in range(dims)) // dims + rng.randint(-10, 10) for i in range(n)]
    m = MipModel("mdk")
    xs = [m.bool_var() for _ in range(n)]
    for k in range(dims):
        m.add(lin_sum(w[k][i] * xs[i] for i in range(n)) <= sum(w[k]) // 2)
    m.maximize(lin_sum(v[i] * xs[i] for i in range(n)))
    return m


def build_market_split(rows: int = 5, n: int = 45, seed: int = 3) -> MipModel:
    """Equality knapsacks with a planted solution: feasible, but hard to find one quickly."""
    rng = random.Random(seed)
    a = [[rng.randint(0, 99) for _ in range(n)] for _ in range(rows)]
    planted = [rng.randint(0, 1) for _ in range(n)]
    m = MipModel("market_split")
    xs = [m.bool_var() for _ in range(n)]
    for row in a:
        m.add(
            lin_sum(c * x for c, x in zip(row, xs, strict=True))
            == sum(c * p for c, p in zip(row, planted, strict=True))
        )
    m.minimize(lin_sum(xs))
    return m


def build_infeasible() -> MipModel:
    m = MipModel("infeasible")
    x, y = m.bool_var("x"), m.bool_var("y")
    m.add(x + y >= 3)
    m.maximize(x + y)
    return m


# ---------------------------------------------------------------------------------------------
# Backends agree with the reference optima
# ---------------------------------------------------------------------------------------------


def test_backends_listed() -> None:
    assert AVAILABLE[0] == "cp-sat"
    assert set(AVAILABLE) <= set(BACKENDS)
    assert "highspy" not in __import__("sys").modules


@pytest.mark.parametrize("backend", AVAILABLE)
def test_knapsack_optimum_matches_dp(backend: str) -> None:
    expected = knapsack_dp(KNAP_WEIGHTS, KNAP_VALUES, KNAP_CAPACITY)
    m, xs = build_knapsack(KNAP_WEIGHTS, KNAP_VALUES, KNAP_CAPACITY)
    sol = solve(m, backend, time_limit_s=5, stage="knapsack")
    s = sol.stats
    assert sol.ok and s.status == "optimal", s
    assert s.objective == expected
    assert s.backend == backend and s.stage == "knapsack" and s.time_limit_s == 5
    assert s.bound == pytest.approx(s.objective, abs=1e-6)
    assert s.gap == pytest.approx(0.0, abs=1e-6)
    assert s.wall_ms > 0 and not s.fell_back
    # The decoded solution is consistent with the reported objective and the capacity.
    chosen = [sol.value(x) for x in xs]
    assert all(isinstance(c, int) and c in (0, 1) for c in chosen)
    assert sum(w * c for w, c in zip(KNAP_WEIGHTS, chosen, strict=True)) <= KNAP_CAPACITY
    assert sum(v * c for v, c in zip(KNAP_VALUES, chosen, strict=True)) == expected
    assert sol.values["take_0"] == chosen[0] and len(sol.values) == len(xs)


@pytest.mark.parametrize("backend", AVAILABLE)
def test_assignment_and_bin_packing_same_optimum(backend: str) -> None:
    m, x = build_gap()
    sol = solve(m, backend, time_limit_s=5)
    assert sol.stats.status == "optimal"
    assert sol.stats.objective == gap_bruteforce()
    for row in x:
        assert sum(sol.value(v) for v in row) == 1

    bins = solve(build_bin_packing(), backend, time_limit_s=5)
    assert bins.stats.status == "optimal"
    assert bins.stats.objective == 3


@pytest.mark.parametrize("backend", AVAILABLE)
def test_minimize_with_offset_bound_equals_objective(backend: str) -> None:
    m = MipModel("offset")
    a = m.int_var(0, 10, "a")
    b = m.int_var(0, 10, "b")
    m.add(3 * a + 2 * b >= 17)
    m.add(a - b <= 2)
    m.minimize(5 * a + 4 * b + 7.5)
    sol = solve(m, backend, time_limit_s=5)
    # Reference by enumeration.
    best = min(
        5 * i + 4 * j + 7.5
        for i in range(11)
        for j in range(11)
        if 3 * i + 2 * j >= 17 and i - j <= 2
    )
    assert sol.stats.status == "optimal"
    assert sol.stats.objective == pytest.approx(best)
    assert sol.stats.bound == pytest.approx(sol.stats.objective, abs=1e-6)
    assert sol.stats.gap == pytest.approx(0.0, abs=1e-6)
    assert sol.value(5 * a + 4 * b + 7.5) == pytest.approx(best)


@pytest.mark.parametrize("backend", MIP_BACKENDS)
def test_continuous_variables_on_mip_backends(backend: str) -> None:
    m = MipModel("lp")
    x = m.num_var(0, math.inf, "x")
    y = m.num_var(0, math.inf, "y")
    n = m.int_var(0, 5, "n")
    m.add(x + y <= 4.5)
    m.add(x - n <= 0.25)
    m.maximize(2 * x + y + 0.5 * n)
    sol = solve(m, backend, time_limit_s=5)
    assert sol.stats.status == "optimal"
    # x = 4.5, n = 5 (x <= n + 0.25 holds), y = 0 -> 9 + 2.5
    assert sol.stats.objective == pytest.approx(11.5, abs=1e-6)
    assert isinstance(sol.value(x), float) and isinstance(sol.value(n), int)


# ---------------------------------------------------------------------------------------------
# Infeasibility, errors and the fallback rule
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", AVAILABLE)
def test_infeasible_on_every_backend_and_fallback(backend: str) -> None:
    sol = solve(build_infeasible(), backend, time_limit_s=5)
    assert sol.stats.status == "infeasible" and not sol.ok
    assert sol.stats.objective is None and sol.values == {}
    with pytest.raises(NoSolutionError, match="infeasible"):
        sol.value(build_infeasible().vars[0])

    calls: list[str] = []

    def heuristic() -> str:
        calls.append("h")
        return "greedy"

    def decode(_: Solution) -> str:
        raise AssertionError("decode must not run without a solution")

    result, stats = solve_with_fallback(
        build_infeasible, heuristic, decode, backend, time_limit_s=5, stage="reclaim"
    )
    assert result == "greedy" and calls == ["h"]
    assert isinstance(stats, SolverStats)
    assert stats.fell_back and stats.status == "heuristic" and stats.stage == "reclaim"
    assert stats.backend == backend
    assert "infeasible" in stats.message


@pytest.mark.parametrize("backend", AVAILABLE)
def test_fallback_returns_exact_result_when_ok(backend: str) -> None:
    def decode(sol: Solution) -> int:
        return int(sol.stats.objective)

    result, stats = solve_with_fallback(
        lambda: build_knapsack(KNAP_WEIGHTS, KNAP_VALUES, KNAP_CAPACITY)[0],
        heuristic=lambda: -1,
        decode=decode,
        backend=backend,
        time_limit_s=5,
    )
    assert result == knapsack_dp(KNAP_WEIGHTS, KNAP_VALUES, KNAP_CAPACITY)
    assert stats.status == "optimal" and not stats.fell_back


def test_constant_false_constraint_is_infeasible_without_solver() -> None:
    m = MipModel("const")
    x = m.bool_var("x")
    m.add(sum([]) >= 1)  # 0 >= 1 evaluates to the Python bool False
    m.maximize(x)
    sol = solve(m, "cp-sat", time_limit_s=1)
    assert sol.stats.status == "infeasible"
    assert "constant False" in sol.stats.message

    m2 = MipModel("cancelled")
    y = m2.bool_var("y")
    m2.add(y - y >= 2, "cancelled")
    m2.add(lin_sum([]) <= 0)  # satisfied constant row: ignored
    sol2 = solve(m2, "scip" if "scip" in AVAILABLE else "cp-sat", time_limit_s=1)
    assert sol2.stats.status == "infeasible"
    assert "'cancelled' has no variables" in sol2.stats.message
    assert m2.constraints == []


def test_fallback_catches_exceptions_in_exact_path() -> None:
    m = MipModel("continuous")
    x = m.num_var(0, 1, "x")
    m.maximize(x)
    result, stats = solve_with_fallback(m, lambda: "h", lambda s: "exact", "cp-sat", time_limit_s=1)
    assert result == "h" and stats.fell_back and "ModelError" in stats.message

    def broken_builder() -> MipModel:
        raise RuntimeError("cluster view vanished")

    result, stats = solve_with_fallback(broken_builder, lambda: 42, lambda s: 0, time_limit_s=1)
    assert result == 42 and "cluster view vanished" in stats.message


def test_fallback_propagates_heuristic_errors_and_argument_errors() -> None:
    def bad_heuristic() -> None:
        raise ZeroDivisionError("heuristic bug")

    with pytest.raises(ZeroDivisionError):
        solve_with_fallback(build_infeasible(), bad_heuristic, lambda s: None, time_limit_s=1)
    with pytest.raises(UnknownBackendError):
        solve_with_fallback(build_infeasible(), lambda: 1, lambda s: 2, backend="gurobi")


def test_unknown_backend_names_allowed_set() -> None:
    m, _ = build_knapsack([1], [1], 1)
    with pytest.raises(ValueError, match="cp-sat, scip, cbc, highs, pulp-cbc") as err:
        solve(m, "CPLEX")
    assert isinstance(err.value, InputError)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"time_limit_s": 0},
        {"time_limit_s": math.inf},
        {"time_limit_s": "1"},
        {"limits": "fast"},
        {"threads": 0},
        {"seed": -1},
        {"rel_gap": 1.5},
    ],
)
def test_bad_solve_arguments(kwargs: dict) -> None:
    m, _ = build_knapsack([1], [1], 1)
    with pytest.raises(InputError):
        solve(m, "cp-sat", **kwargs)


@pytest.mark.parametrize("backend", MIP_BACKENDS)
def test_unbounded_is_not_reported_as_a_solution(backend: str) -> None:
    m = MipModel("unbounded")
    x = m.int_var(0, math.inf, "x")
    m.add(x >= 1)
    m.maximize(x)
    sol = solve(m, backend, time_limit_s=2)
    # HiGHS's presolve may answer "infeasible or unbounded": an error here (x has no upper
    # bound), an infeasibility proof only when every domain is finite (test_mip_mathopt).
    assert sol.stats.status in ("error", "infeasible")
    assert not sol.ok
    if sol.stats.status == "error":
        assert "unbounded" in sol.stats.message


# ---------------------------------------------------------------------------------------------
# Time limits
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", AVAILABLE)
def test_time_limit_hard_knapsack(backend: str) -> None:
    m = build_hard_mdk()
    sol = solve(m, backend, time_limit_s=0.05)
    s = sol.stats
    assert s.wall_ms < 2000  # robust upper bound, not a timing benchmark
    assert s.status in ("feasible", "timeout", "optimal"), s
    assert s.time_limit_s == 0.05
    if s.status == "feasible":
        assert sol.ok and s.objective is not None
        # Through MathOpt HiGHS reports its real dual bound too (pywraplp gave none).
        if backend != "cbc" or s.bound is not None:
            assert s.gap is not None and s.gap >= 0
            assert s.bound is not None and s.bound >= s.objective - 1e-6  # maximisation
    if s.status == "timeout":
        assert not sol.ok and s.objective is None


@pytest.mark.parametrize("backend", AVAILABLE)
def test_time_limit_without_incumbent(backend: str) -> None:
    sol = solve(build_market_split(), backend, time_limit_s=0.05)
    s = sol.stats
    assert s.wall_ms < 2000
    assert s.status in ("feasible", "timeout", "optimal"), s
    if s.status == "timeout":
        assert "limit reached" in s.message
        with pytest.raises(NoSolutionError):
            sol.value(sol.model.vars[0])
        result, fb = solve_with_fallback(
            build_market_split(), lambda: "greedy", lambda _: "exact", backend, time_limit_s=0.05
        )
        assert result == "greedy" and fb.fell_back and "timeout" in fb.message


# ---------------------------------------------------------------------------------------------
# CP-SAT specifics
# ---------------------------------------------------------------------------------------------


def test_cpsat_rejects_fractional_constraint_coefficients() -> None:
    m = MipModel("frac")
    x = m.int_var(0, 4, "x")
    y = m.int_var(0, 4, "y")
    m.add(0.5 * x + y <= 3, "mem")
    m.maximize(x + y)
    with pytest.raises(ModelError, match=r"constraint 'mem' has non-integer coefficient 0\.5"):
        solve(m, "cp-sat")
    # The same model is fine on a MIP backend.
    if "scip" in AVAILABLE:
        assert solve(m, "scip", time_limit_s=5).stats.objective == 5


def test_cpsat_integral_floats_fractional_rhs_and_objective() -> None:
    m = MipModel("scaled")
    xs = [m.int_var(0, 3, f"x{i}") for i in range(3)]
    m.add(2.0 * xs[0] + 3.0 * xs[1] + 1.0 * xs[2] <= 7.5)  # rhs rounds down exactly to 7
    m.maximize(0.7 * xs[0] + 1.1 * xs[1] + 0.3 * xs[2])
    sol = solve(m, "cp-sat", time_limit_s=5)
    best = max(
        0.7 * a + 1.1 * b + 0.3 * c
        for a, b, c in itertools.product(range(4), repeat=3)
        if 2 * a + 3 * b + c <= 7
    )
    assert sol.stats.status == "optimal"
    assert sol.stats.objective == pytest.approx(best, abs=1e-4)


def test_cpsat_rejects_continuous_and_unbounded_integer_vars() -> None:
    m = MipModel("c")
    m.num_var(0, 1, "flow")
    with pytest.raises(ModelError, match="continuous variable 'flow'"):
        solve(m, "cp-sat")
    m2 = MipModel("u")
    m2.int_var(0, math.inf, "n")
    with pytest.raises(ModelError, match="finite bounds"):
        solve(m2, "cp-sat")


def test_cpsat_hint_and_determinism() -> None:
    m, xs = build_knapsack(KNAP_WEIGHTS, KNAP_VALUES, KNAP_CAPACITY)
    for x in xs:
        m.hint(x, 0)
    a = solve(m, "cp-sat", time_limit_s=5)
    b = solve(m, "cp-sat", time_limit_s=5)
    assert a.stats.status == "optimal" and a.values == b.values


# ---------------------------------------------------------------------------------------------
# Model API guards
# ---------------------------------------------------------------------------------------------


def test_expression_algebra() -> None:
    m = MipModel("alg")
    x, y = m.int_var(0, 5, "x"), m.int_var(0, 5, "y")
    e = 2 * (x - y) + 3 - x / 2 + sum([x, y]) - 1 + (-y)
    assert e.terms == {x: 2.5, y: -2.0} and e.const == 2.0
    c = 4 <= x + y  # noqa: SIM300 - exercises the reflected comparison
    assert c.lb == 4 and c.ub == math.inf
    assert (x == y).lb == 0 == (x == y).ub
    assert {x: 1}[x] == 1  # variables stay usable as dict keys


def test_model_guards() -> None:
    m = MipModel("g")
    x = m.int_var(0, 5, "x")
    with pytest.raises(TypeError, match="no truth value"):
        m.add(0 <= x <= 3)
    with pytest.raises(ModelError, match="duplicate"):
        m.int_var(0, 1, "x")
    with pytest.raises(ModelError, match="empty domain"):
        m.int_var(0.2, 0.8, "z")
    other = MipModel("other").bool_var("o")
    with pytest.raises(ModelError, match="belongs to model 'other'"):
        m.add(x + other <= 1)
    with pytest.raises(ModelError, match="NaN"):
        m.add(math.nan * x <= 1)
    with pytest.raises(ModelError, match="non-finite coefficient"):
        m.maximize(LinExpr({x: math.inf}))
    with pytest.raises(TypeError):
        _ = x * x


# ---------------------------------------------------------------------------------------------
# Property: CP-SAT equals the DP on random small knapsacks
# ---------------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    items=st.lists(st.tuples(st.integers(1, 30), st.integers(0, 40)), min_size=1, max_size=12),
    capacity=st.integers(0, 80),
)
def test_cpsat_matches_dp_property(items: list[tuple[int, int]], capacity: int) -> None:
    weights = [w for w, _ in items]
    values = [v for _, v in items]
    m, _ = build_knapsack(weights, values, capacity)
    sol = solve(m, "cp-sat", time_limit_s=5)
    assert sol.stats.status == "optimal"
    assert sol.stats.objective == knapsack_dp(weights, values, capacity)


# ---------------------------------------------------------------------------------------------
# Deterministic limits: the answer depends on the model and seed alone, whatever the load
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _busy_cores(n: int = 2) -> Iterator[None]:
    """Keep ``n`` cores busy with spinning subprocesses for the duration of the block."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _fingerprint(sol: Solution) -> tuple:
    s = sol.stats
    return (s.status, s.objective, s.bound, tuple(sol.raw_values or ()))


@pytest.mark.parametrize(
    "backend", [b for b in AVAILABLE if b in ("cp-sat", "scip", "highs", "pulp-cbc")]
)
def test_deterministic_limit_gives_the_same_answer_under_load(backend: str) -> None:
    """A budget that stops the search early (the hard knapsack is not solved within it) gives
    the same status, incumbent and bound on a quiet machine and with both cores busy."""
    limits = (
        SolveLimits.deterministic_budget(0.02)
        if backend == "cp-sat"
        else SolveLimits.deterministic_budget(0.02, nodes=3)
    )
    quiet = solve(build_hard_mdk(), backend, limits=limits)
    with _busy_cores():
        busy = [solve(build_hard_mdk(), backend, limits=limits) for _ in range(2)]
    assert quiet.stats.deterministic and quiet.stats.status in ("feasible", "timeout", "optimal")
    assert quiet.stats.status != "error"
    for other in busy:
        assert _fingerprint(other) == _fingerprint(quiet)
    if backend != "cp-sat":
        assert quiet.stats.node_limit == 3
    else:
        assert quiet.stats.work_limit_s == 0.02


@pytest.mark.parametrize("backend", AVAILABLE)
def test_limit_without_solution_is_timeout_never_error(backend: str) -> None:
    """Stopping on a limit is ``timeout`` (or an incumbent), told apart from ``error`` by the
    backend's reason, not by the wall clock; a busy machine cannot turn one into the other."""
    with _busy_cores():
        for limit in (1e-3, 0.01, 0.05):
            sol = solve(build_market_split(), backend, time_limit_s=limit)
            assert sol.stats.status in ("timeout", "feasible", "optimal"), sol.stats
            if sol.stats.status == "timeout":
                assert any(w in sol.stats.message for w in ("limit reached", "used up", "ran out"))


def test_wall_clock_limit_covers_model_building() -> None:
    """A builder that uses up the whole wall-clock budget leaves nothing for the solver: the
    call reports a timeout (and falls back) instead of solving past its limit."""

    def slow_build() -> MipModel:
        import time

        m, _ = build_knapsack(KNAP_WEIGHTS, KNAP_VALUES, 200)
        time.sleep(0.3)  # the scenario: building is slower than the whole budget
        return m

    result, st = solve_with_fallback(
        slow_build, lambda: "greedy", lambda _: "exact", "cp-sat", time_limit_s=0.1
    )
    assert result == "greedy" and st.fell_back
    assert "used up" in st.message and st.time_limit_s == 0.1


def test_policy_budget_is_deterministic_and_generous() -> None:
    limits = SolveLimits.deterministic_budget(1.0)
    assert limits.deterministic and limits.work_s == 1.0 and limits.nodes is not None
    assert limits.wall_s >= 100.0  # a guard against pathology, never the binding limit
    assert not SolveLimits.wall(1.0).deterministic
    with pytest.raises(InputError):
        SolveLimits(wall_s=math.nan)
    with pytest.raises(InputError):
        SolveLimits.deterministic_budget(-1.0)
    with pytest.raises(InputError):
        solve(build_knapsack([1], [1], 1)[0], time_limit_s=1.0, limits=limits)
