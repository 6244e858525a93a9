"""Aryl's two-phase allocation (§5, Alg. 2): Tab. 2-4, Fig. 6, and the MCKP solvers."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.solver_core.policies.aryl.mckp import (
    MckpGroup,
    solve_dp,
    solve_exact,
    solve_greedy,
    solve_mckp,
)
from gpuplan.solver_core.policies.aryl.two_phase import (
    ArylJob,
    allocate_inelastic,
    elastic_group,
    linear_jct,
    sort_jobs,
    two_phase_allocate,
)

# Tab. 2: two elastic jobs on an 8-worker cluster (1 GPU per worker).
TAB2_A = ArylJob.elastic_from_min_time("A", 2, 6, 50)
TAB2_B = ArylJob.elastic_from_min_time("B", 2, 6, 20)
# Tab. 4: job A changed to w_max 3 and min. running time 100.
TAB4_A = ArylJob.elastic_from_min_time("A", 2, 3, 100)


def avg(jct: dict[str, float]) -> float:
    return sum(jct.values()) / len(jct)


# ------------------------------------------------------------------------------- Tab. 2 - 4
@pytest.mark.parametrize(
    ("a", "b", "jct_a", "jct_b", "mean"),
    [
        (6, 2, 50.0, 53.33, 51.67),  # solution 1
        (2, 6, 63.33, 20.0, 41.67),  # solution 2
        (4, 4, 60.0, 30.0, 45.0),  # solution 3
    ],
)
def test_table3_average_jcts(a: int, b: int, jct_a: float, jct_b: float, mean: float) -> None:
    jct = linear_jct([TAB2_A, TAB2_B], {"A": a, "B": b}, 8)
    assert jct["A"] == pytest.approx(jct_a, abs=0.005)
    assert jct["B"] == pytest.approx(jct_b, abs=0.005)
    assert avg(jct) == pytest.approx(mean, abs=0.005)


def test_table4_counterexample_62_vs_63_33() -> None:
    favour_a = linear_jct([TAB4_A, TAB2_B], {"A": 3, "B": 5}, 8)
    favour_b = linear_jct([TAB4_A, TAB2_B], {"A": 2, "B": 6}, 8)
    assert favour_a == pytest.approx({"A": 100.0, "B": 24.0})
    assert favour_b == pytest.approx({"A": 106.67, "B": 20.0}, abs=0.005)
    assert avg(favour_a) == pytest.approx(62.0)
    assert avg(favour_b) == pytest.approx(63.33, abs=0.005)


def test_phase2_picks_on_table2_are_myopic() -> None:
    # T^max: A = 50*6/2 = 150, B = 20*6/2 = 60; items A: 50/75/90/100, B: 20/30/36/40.
    assert TAB2_A.run_time == 150 and TAB2_B.run_time == 60
    assert [TAB2_A.value(k) for k in range(1, 5)] == [50, 75, 90, 100]
    assert [TAB2_B.value(k) for k in range(1, 5)] == [20, 30, 36, 40]
    res = two_phase_allocate([TAB2_A, TAB2_B], capacity=8)
    assert res.admitted == ["B", "A"]  # SJF on T^max: B (60) before A (150)
    assert res.capacity_after_phase1 == 4
    assert res.flexible == {"A": 3, "B": 1} and res.mckp_value == pytest.approx(110)
    assert res.workers == {"A": 5, "B": 3}
    # the value function is myopic: (5, 3) gives 48.33, not the optimum 41.67 of solution 2
    assert avg(linear_jct([TAB2_A, TAB2_B], res.workers, 8)) == pytest.approx(48.33, abs=0.005)


def test_phase2_picks_the_optimum_on_table4() -> None:
    res = two_phase_allocate([TAB4_A, TAB2_B], capacity=8)
    assert res.flexible == {"A": 1, "B": 3} and res.mckp_value == pytest.approx(86)
    assert avg(linear_jct([TAB4_A, TAB2_B], res.workers, 8)) == pytest.approx(62.0)


@pytest.mark.parametrize("method", ["dp", "cp-sat", "greedy", "pulp-cbc"])
def test_every_solver_reproduces_the_paper_picks(method: str) -> None:
    assert two_phase_allocate([TAB2_A, TAB2_B], capacity=8, method=method).workers == {
        "A": 5,
        "B": 3,
    }
    assert two_phase_allocate([TAB4_A, TAB2_B], capacity=8, method=method).workers == {
        "A": 3,
        "B": 5,
    }


def test_fig6_items_use_the_flexible_weight() -> None:
    # Fig. 6: job A needs 2 GPUs per worker, job B 1. The printed Alg. 2 line 17 weight
    # (w + w_min) * D would be 6 for A and 3..6 for B; the flexible weight is k * D.
    a = ArylJob.elastic_from_min_time("A", 2, 3, 100, gpus_per_worker=2)
    b = ArylJob.elastic_from_min_time("B", 2, 6, 20, gpus_per_worker=1)
    assert elastic_group(a).items == ((2, 50.0),)
    assert elastic_group(b).items == ((1, 20.0), (2, 30.0), (3, 36.0), (4, 40.0))


# ------------------------------------------------------------------------------- phase 1
def test_phase1_is_sjf_with_skip() -> None:
    big = ArylJob.inelastic("big", 6, 10.0)
    small = ArylJob.inelastic("small", 2, 50.0)
    tiny = ArylJob.inelastic("tiny", 1, 5.0, submit=3.0)
    tie = ArylJob.inelastic("tie", 1, 5.0, submit=1.0)
    assert [j.id for j in sort_jobs([big, small, tiny, tie])] == ["tie", "tiny", "big", "small"]
    admitted, left = allocate_inelastic([big, small, tiny, tie], 7)
    assert [j.id for j in admitted] == ["tie", "tiny", "small"]  # big (6) skipped, not blocking
    assert left == 3


def test_phase2_skipped_without_capacity_and_running_jobs_join() -> None:
    e = ArylJob.elastic_from_min_time("e", 4, 8, 100)
    res = two_phase_allocate([e], capacity=4)
    assert res.capacity_after_phase1 == 0 and res.flexible == {} and res.stats == []
    running = ArylJob.elastic_from_min_time("r", 1, 3, 10)
    res = two_phase_allocate([], [running], capacity=2)
    assert res.workers == {"r": 3} and res.admitted == []


def test_job_validation() -> None:
    with pytest.raises(ValueError):
        ArylJob("x", 3, 2, 1.0)
    with pytest.raises(ValueError):
        ArylJob("x", 1, 3, 1.0, values=(1.0,))
    with pytest.raises(ValueError):
        MckpGroup("g", ((0, 1.0),))
    custom = ArylJob("x", 1, 3, 10.0, values=(2.0, 3.0))
    assert custom.value(2) == 3.0 and custom.value(0) == 0.0


# ------------------------------------------------------------------------------- solvers
groups_st = st.lists(
    st.lists(st.tuples(st.integers(1, 12), st.integers(0, 60)), min_size=1, max_size=5),
    min_size=0,
    max_size=7,
).map(lambda gs: [MckpGroup(f"g{i}", tuple(items)) for i, items in enumerate(gs)])


def brute(groups: list[MckpGroup], cap: int) -> float:
    best = 0.0
    for pick in itertools.product(*[range(-1, len(g.items)) for g in groups]):
        w = sum(g.items[i][0] for g, i in zip(groups, pick, strict=True) if i >= 0)
        if w <= cap:
            best = max(
                best, sum(g.items[i][1] for g, i in zip(groups, pick, strict=True) if i >= 0)
            )
    return best


def feasible(groups: list[MckpGroup], cap: int, choice: dict[str, int]) -> bool:
    keys = {g.key for g in groups}
    weight = sum(g.items[choice[g.key]][0] for g in groups if choice.get(g.key, -1) >= 0)
    return set(choice) <= keys and weight <= cap


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=groups_st, cap=st.integers(0, 40))
def test_dp_and_cpsat_reach_the_same_optimum(groups: list[MckpGroup], cap: int) -> None:
    dp = solve_dp(groups, cap)
    cp = solve_exact(groups, cap, backend="cp-sat", time_limit_s=5.0)
    greedy = solve_greedy(groups, cap)
    assert cp.stats is not None and cp.stats.status == "optimal"
    assert dp.value == pytest.approx(cp.value)
    assert greedy.value <= dp.value + 1e-9
    for res in (dp, cp, greedy):
        assert feasible(groups, cap, res.choice)
        assert res.weight <= cap
    if len(groups) <= 4:
        assert dp.value == pytest.approx(brute(groups, cap))


def test_float_values_agree_within_resolution() -> None:
    jobs = [
        ArylJob.elastic_from_min_time(
            f"j{i}", 1 + i % 3, 4 + i % 5, 100.0 / (i + 1), gpus_per_worker=1 + i % 2
        )
        for i in range(12)
    ]
    groups = [elastic_group(j) for j in jobs]
    dp = solve_dp(groups, 17)
    cp = solve_mckp(groups, 17, "cp-sat", time_limit_s=5.0)
    assert cp.value == pytest.approx(dp.value, rel=2e-3)
    assert cp.value <= dp.value + 1e-9


def test_dp_shortcut_when_everything_fits() -> None:
    groups = [MckpGroup("a", ((1, 3.0), (2, 5.0))), MckpGroup("b", ((3, 4.0),))]
    res = solve_dp(groups, 100)
    assert res.choice == {"a": 1, "b": 0} and res.value == 9.0 and res.weight == 5
    assert res.weight_of(groups, "a") == 2 and res.weight_of(groups, "zzz") == 0
    # ties prefer less weight: an item worth nothing is never taken
    assert solve_dp([MckpGroup("z", ((1, 0.0),))], 5).choice == {"z": -1}


def test_greedy_can_be_suboptimal() -> None:
    # efficiency 10/1 first leaves no room for the 18-value heavy item
    groups = [MckpGroup("a", ((1, 10.0),)), MckpGroup("b", ((3, 18.0),))]
    assert solve_greedy(groups, 3).value == 10.0
    assert solve_dp(groups, 3).value == 18.0


def test_exact_falls_back_to_greedy_when_the_solver_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    groups = [MckpGroup("a", ((1, 10.0),)), MckpGroup("b", ((3, 18.0),))]
    ok = solve_exact(groups, 3, backend="cp-sat", time_limit_s=1.0)
    assert ok.stats is not None and not ok.stats.fell_back and ok.value == 18.0

    from gpuplan.solver_core import backends

    def broken(*args: object, **kw: object) -> None:
        raise RuntimeError("solver crashed")

    monkeypatch.setattr(backends, "run_backend", broken)
    res = solve_exact(groups, 3, backend="cp-sat", time_limit_s=1.0)
    assert res.stats is not None and res.stats.fell_back and res.stats.status == "heuristic"
    assert res.value == 10.0  # the greedy's answer
