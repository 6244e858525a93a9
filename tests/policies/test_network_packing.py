"""Network packing (AFS/CoDDL §4.4, App. E): legal sizes, Prop. 2 regulation, Prop. 1 FFD.

Expected numbers come from the paper's definitions (App. E's ``x_i`` formula, the 4-GPU legal
set "1, 2, or 4n") and from hand computation written out next to each case.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.models import (
    AllocationPlan,
    Cluster,
    ClusterState,
    JobAllocation,
    JobSnapshot,
    JobSpec,
    ThroughputProfile,
)
from gpuplan.models.job import Elasticity
from gpuplan.solver_core.diff import check_plan
from gpuplan.solver_core.placement.compose import packed_policy, packed_variant
from gpuplan.solver_core.placement.network_packing import (
    envelope,
    ffd_node_counts,
    floor_legal,
    is_legal,
    legal_sizes,
    network_sharing_violations,
    packed_placement,
    packing_unit,
    regulate_exact,
    regulate_greedy,
    regulate_view,
    regulation_cost,
    regulation_options,
    small_sizes,
)
from gpuplan.solver_core.policy import StagedPolicy

# ------------------------------------------------------------------------------- legal sizes


def test_legal_sizes_match_the_digest() -> None:
    # Digest §7.3: "0, 1, 2, 4, 8, 12, ..., 64" for G = 4 on the 64-GPU cluster.
    assert legal_sizes(4, 64) == (0, 1, 2, *range(4, 65, 4))
    # §4.4: "with 4 GPUs per machine, the share should be one of 1/2/4n GPUs".
    assert [c for c in range(1, 17) if is_legal(c, 4)] == [1, 2, 4, 8, 12, 16]
    assert legal_sizes(8, 24) == (0, 1, 2, 4, 8, 16, 24)
    assert legal_sizes(1, 5) == (0, 1, 2, 3, 4, 5)  # G = 2^0: every count is a multiple
    assert legal_sizes(2, 6) == (0, 1, 2, 4, 6)
    # Not a power of two: only powers of two dividing G stay legal below G (FFD needs it).
    assert small_sizes(6) == (1, 2) and small_sizes(12) == (1, 2, 4)


def test_prop2_lower_bound_x_formula() -> None:
    # App. E: x = floor(s/2^k) 2^k if s > 2^k; 2^floor(log2 s) if 0 < s <= 2^k; 0 if s = 0.
    expected = {0: 0, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 7: 4, 8: 8, 9: 8, 13: 12, 64: 64}
    assert {s: floor_legal(s, 4) for s in expected} == expected
    assert [floor_legal(s, 8) for s in (3, 5, 7, 8, 15, 17)] == [2, 4, 4, 8, 8, 16]
    # "each job loses fewer than 2^k GPUs when s > 2^k, less than half when s <= 2^k"
    for g in (1, 2, 4, 8):
        for s in range(1, 70):
            x = floor_legal(s, g)
            assert is_legal(x, g) and x <= s
            assert (s - x < g) if s > g else (x > s / 2)


def test_envelope_is_the_smallest_legal_size_above() -> None:
    assert [envelope(c, 4) for c in range(0, 10)] == [0, 1, 2, 4, 4, 8, 8, 8, 8, 12]
    assert [envelope(c, 8) for c in (3, 5, 9)] == [4, 8, 16]


def test_regulation_options_respect_allowed_counts() -> None:
    # Rigid 3 GPUs on G = 4: runs on 3, reserves a legal footprint of 4 (padded).
    assert [(o.footprint, o.count) for o in regulation_options(4, 16, (3,))] == [(0, 0), (4, 3)]
    # Elastic 3..6: footprint 4 runs 4, footprint 8 runs the largest allowed in (4, 8] = 6.
    opts = regulation_options(4, 16, range(3, 7))
    assert [(o.footprint, o.count) for o in opts] == [(0, 0), (4, 4), (8, 6)]
    # Uncapped: every legal size up to N.
    assert [o.count for o in regulation_options(4, 12)] == [0, 1, 2, 4, 8, 12]


# ------------------------------------------------------------------------------- regulation


def test_greedy_regulation_hand_example() -> None:
    # G = 4, N = 16, s = (3, 3, 5, 5): x = (2, 2, 4, 4), d = 4. Deficits tie at 1; the smaller
    # step (2 -> 4) goes first: a -> 4 (d = 2), then b (largest deficit 1, step 2) -> 4 (d = 0).
    s = {"a": 3, "b": 3, "c": 5, "d": 5}
    assert regulate_greedy(s, 4, 16) == {"a": 4, "b": 4, "c": 4, "d": 4}
    assert regulation_cost(s, {"a": 4, "b": 4, "c": 4, "d": 4}, 4, 16) == (0, 4)
    assert regulate_exact(s, 4, 16) == {"a": 4, "b": 4, "c": 4, "d": 4}


def test_greedy_regulation_uses_method_one_for_multi_node_jobs() -> None:
    # G = 4, N = 32: s = (13, 11, 8). x = (12, 8, 8), d = 4; deficits 1, 3, 0 -> b += 4.
    assert regulate_greedy({"a": 13, "b": 11, "c": 8}, 4, 32) == {"a": 12, "b": 12, "c": 8}


def test_exact_regulation_beats_largest_deficit_first() -> None:
    # G = 8, N = 8, s = (2, 1, 3) (the policy left 2 GPUs idle). Greedy: x = (2, 1, 2), T = 6,
    # d = 1: only b (1 -> 2) fits -> (2, 2, 2), L1 2. Exact: c -> 4 uses an idle GPU, L1 1.
    s = {"a": 2, "b": 1, "c": 3}
    greedy = regulate_greedy(s, 8, 8)
    assert greedy == {"a": 2, "b": 2, "c": 2}
    stats: list = []
    exact = regulate_exact(s, 8, 8, stats=stats)
    assert exact == {"a": 2, "b": 1, "c": 4}
    assert regulation_cost(s, greedy, 8, 8) == (0, 2)
    assert regulation_cost(s, exact, 8, 8) == (0, 1)
    assert stats[0].stage == "regulation" and stats[0].status == "optimal"
    assert stats[0].objective == 1 and stats[0].gap == 0


def test_exact_regulation_larger_instance_strictly_better() -> None:
    # A Σs = N case (found by random search) where largest-deficit-first overshoots j05.
    s = {
        "j00": 1,
        "j01": 2,
        "j02": 1,
        "j03": 3,
        "j04": 1,
        "j05": 12,
        "j06": 4,
        "j07": 1,
        "j08": 4,
        "j09": 1,
        "j10": 7,
        "j11": 4,
        "j12": 15,
        "j13": 3,
        "j14": 4,
        "j15": 1,
    }
    greedy, exact = regulate_greedy(s, 8, 64), regulate_exact(s, 8, 64)
    assert greedy["j05"] == 16 and regulation_cost(s, greedy, 8, 64) == (0, 10)
    assert regulation_cost(s, exact, 8, 64) == (0, 8)
    assert sum(exact.values()) == 64
    # Least L1 per added GPU first grows j10 (7: 4 -> 8, L1 -2) instead and reaches 8 too.
    marginal = regulate_greedy(s, 8, 64, rule="marginal")
    assert marginal["j05"] == 8 and marginal["j10"] == 8
    assert regulation_cost(s, marginal, 8, 64) == (0, 8)


def test_marginal_rule_is_not_always_optimal() -> None:
    # G = 8, N = 64. x = (4, 2, 2, 24, 16, 4), d = 12. The marginal rule spends it on j00,
    # j05 (L1 -1 each, 4 GPUs), then j01, j02 (L1 +2 for 2 GPUs each): L1 12. The exact
    # optimum moves j04 21 -> 24 and j05 7 -> 4 instead: L1 8.
    s = {"j00": 7, "j01": 2, "j02": 2, "j03": 25, "j04": 21, "j05": 7}
    marginal = regulate_greedy(s, 8, 64, rule="marginal")
    exact = regulate_exact(s, 8, 64)
    assert marginal == {"j00": 8, "j01": 4, "j02": 4, "j03": 24, "j04": 16, "j05": 8}
    assert exact == {"j00": 8, "j01": 2, "j02": 2, "j03": 24, "j04": 24, "j05": 4}
    assert regulation_cost(s, marginal, 8, 64) == (0, 12)
    assert regulation_cost(s, exact, 8, 64) == (0, 8)


def test_conflicting_allowed_counts_are_padded_not_overridden() -> None:
    # Four rigid 3-GPU jobs reserve 4 GPUs each; with e (4) that is 20 > 16: one rigid job
    # must wait (L1 3) rather than anybody running on a count it does not allow.
    s = {"a": 3, "b": 3, "c": 3, "d": 3, "e": 4}
    allowed = {j: (3,) for j in "abcd"}
    for result in (regulate_greedy(s, 4, 16, allowed), regulate_exact(s, 4, 16, allowed)):
        assert result["e"] == 4
        assert sorted(result.values()) == [3, 3, 3, 4]
        assert all(result[j] == 3 for j in result if j != "e")
        assert regulation_cost(s, result, 4, 16) == (0, 3)
        counts, unplaced = ffd_node_counts(result, {f"n{i}": 4 for i in range(4)}, 4)
        assert not unplaced
        assert not network_sharing_violations(counts, 4)
    # Rigid 6 on G = 4 reserves two whole nodes and runs 4 + 2 on them.
    r = regulate_greedy({"x": 6, "y": 2}, 4, 12, {"x": (6,)})
    assert r == {"x": 6, "y": 2}
    counts, unplaced = ffd_node_counts(r, {"n0": 4, "n1": 4, "n2": 4}, 4)
    assert counts == {"x": {"n0": 4, "n1": 2}, "y": {"n2": 2}} and not unplaced


def test_zero_shares_stay_zero_and_capped_jobs_stay_in_range() -> None:
    s = {"a": 0, "b": 5, "c": 3}
    allowed = {"b": range(1, 6), "c": range(1, 4)}
    for result in (regulate_greedy(s, 4, 8, allowed), regulate_exact(s, 4, 8, allowed)):
        assert "a" not in result
        assert result["b"] in allowed["b"] and result["c"] in allowed["c"]
        assert sum(envelope(c, 4) for c in result.values()) <= 8


def test_exact_regulation_falls_back_on_a_tiny_time_limit() -> None:
    shares = {f"j{i:03d}": 1 + (7 * i) % 11 for i in range(300)}
    capacity = sum(shares.values()) // 8 * 8
    stats: list = []
    result = regulate_exact(shares, 8, capacity, time_limit_s=1e-3, stats=stats)
    assert stats[0].fell_back and stats[0].status == "heuristic"
    assert "exact solve failed" in stats[0].message
    # The fallback is the better of the two greedy rules.
    best = min(
        (regulate_greedy(shares, 8, capacity, rule=r) for r in ("marginal", "deficit")),
        key=lambda r: regulation_cost(shares, r, 8, capacity),
    )
    assert result == best


# ------------------------------------------------------------------ §7.1 random verification


@st.composite
def share_vectors(draw: st.DrawFn) -> tuple[int, int, dict[str, int]]:
    """G in {1,2,4,8}, m <= 8 nodes, n <= 12 jobs, shares summing to N = G m (App. E)."""
    unit = draw(st.sampled_from([1, 2, 4, 8]))
    nodes = draw(st.integers(1, 8))
    n = draw(st.integers(1, 12))
    total = unit * nodes
    cuts = sorted(draw(st.lists(st.integers(0, total), min_size=n - 1, max_size=n - 1)))
    parts = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]
    return unit, nodes, {f"j{i:02d}": p for i, p in enumerate(parts)}


def _check_regulated(unit: int, nodes: int, shares: dict[str, int], result: dict[str, int]) -> None:
    total = unit * nodes
    assert sum(result.values()) == total  # Prop. 2 (1): no GPU left idle
    for job, s in shares.items():
        r = result.get(job, 0)
        assert is_legal(r, unit), (job, r)
        assert r >= floor_legal(s, unit)  # Prop. 2 (2)
        assert s > 0 or r == 0
    sizes = {f"n{i}": unit for i in range(nodes)}
    counts, unplaced = ffd_node_counts(result, sizes, unit)  # Prop. 1
    assert not unplaced
    assert not network_sharing_violations(counts, unit)
    load = Counter()
    for job, per_node in counts.items():
        assert sum(per_node.values()) == result[job]
        for n, c in per_node.items():
            load[n] += c
    assert all(v <= unit for v in load.values())


@settings(max_examples=300, deadline=None)
@given(share_vectors())
def test_greedy_regulation_and_ffd_always_succeed(case: tuple[int, int, dict[str, int]]) -> None:
    unit, nodes, shares = case
    for rule in ("deficit", "marginal"):
        _check_regulated(
            unit, nodes, shares, regulate_greedy(shares, unit, unit * nodes, rule=rule)
        )


@settings(max_examples=40, deadline=None)
@given(share_vectors())
def test_exact_regulation_is_never_worse_than_greedy(case: tuple[int, int, dict[str, int]]) -> None:
    unit, nodes, shares = case
    total = unit * nodes
    stats: list = []
    exact = regulate_exact(shares, unit, total, stats=stats)
    assert stats[0].status == "optimal"
    _check_regulated(unit, nodes, shares, exact)
    e_short, e_l1 = regulation_cost(shares, exact, unit, total)
    for rule in ("deficit", "marginal"):
        greedy = regulate_greedy(shares, unit, total, rule=rule)
        g_short, g_l1 = regulation_cost(shares, greedy, unit, total)
        assert e_short == g_short == 0 and e_l1 <= g_l1


# ------------------------------------------------------------------------ FFD and the rule


def test_ffd_hand_example() -> None:
    # G = 4, 4 nodes: a (8) takes n0, n1 whole; e (4) n2; b, c, d share n3 first-fit.
    counts, unplaced = ffd_node_counts(
        {"a": 8, "b": 2, "c": 1, "d": 1, "e": 4}, {f"n{i}": 4 for i in range(4)}, 4
    )
    assert unplaced == []
    assert counts == {
        "a": {"n0": 4, "n1": 4},
        "e": {"n2": 4},
        "b": {"n3": 2},
        "c": {"n3": 1},
        "d": {"n3": 1},
    }


def test_ffd_reports_what_does_not_fit() -> None:
    counts, unplaced = ffd_node_counts({"a": 8, "b": 4}, {"n0": 4, "n1": 4}, 4)
    assert counts == {"a": {"n0": 4, "n1": 4}} and unplaced == ["b"]


def test_network_sharing_violations() -> None:
    ok = {"a": {"n0": (0, 1, 2, 3), "n1": (0, 1, 2, 3)}, "b": {"n2": (0, 1)}}
    assert network_sharing_violations(ok, 4) == []
    spread = {"a": {"n0": (0, 1), "n1": (0, 1)}}  # 4 GPUs on 2 nodes, minimum is 1
    assert network_sharing_violations(spread, 4) == ["job a: 4 GPUs on 2 nodes, minimum 1"]
    two = {"a": {"n0": 3, "n1": 3}, "b": {"n1": 1, "n2": 4}}  # padded jobs meeting on n1
    assert network_sharing_violations(two, 4) == [
        "node n1: multi-node jobs ['a', 'b'] share its network"
    ]


# ------------------------------------------------------------------------------ view level


def _job(job_id: str, gpus: int, elastic: tuple[int, int] | None = None) -> JobSpec:
    el = Elasticity(min_gpus=elastic[0], max_gpus=elastic[1]) if elastic else None
    return JobSpec(id=job_id, submit_time=0, requested_gpus=gpus, duration=100, elasticity=el)


def _view(nodes: int, gpus: int, running: dict[str, tuple[JobSpec, dict]], pending: list[JobSpec]):
    jobs = [
        JobSnapshot(spec=spec, allocation=JobAllocation(job_id=spec.id, placement=p))
        for spec, p in running.values()
    ]
    jobs += [JobSnapshot(spec=spec) for spec in pending]
    return ClusterState(now=5, cluster=Cluster.uniform(nodes, gpus), jobs=jobs).to_view()


def test_regulate_view_reads_allowed_counts_and_reports_stats() -> None:
    view = _view(2, 4, {}, [_job("r3", 3), _job("el", 5, (1, 5))])
    assert packing_unit(view) == 4
    stats: list = []
    got = regulate_view(view, {"r3": 3, "el": 5}, stats)
    # r3 is rigid: runs 3 on a padded 4; el (1..5) -> x = 4; total footprint 8 = N.
    assert got == {"r3": 3, "el": 4}
    assert stats[0].stage == "regulation" and "L1 change 1" in stats[0].message
    stats = []
    assert regulate_view(view, {"r3": 3, "el": 5}, stats, method="exact") == got
    assert stats[0].backend == "cp-sat"
    with pytest.raises(ValueError, match="greedy"):
        regulate_view(view, {}, [], method="nope")


def test_packed_placement_on_a_view_is_valid_and_network_sharing_free() -> None:
    running = {
        "a": (_job("a", 2), {"node000": (0, 1)}),
        "b": (_job("b", 4), {"node000": (2, 3), "node001": (0, 1)}),
    }
    view = _view(3, 4, running, [_job("c", 4), _job("d", 1)])
    shares = regulate_greedy({"a": 2, "b": 4, "c": 4, "d": 1}, 4, 12)
    stats: list = []
    placed = packed_placement(view, shares, stats)
    assert {j: a.gpus for j, a in placed.items()} == shares
    plan = AllocationPlan(time=5, policy="t", allocations=placed)
    check_plan(view, plan)
    assert not network_sharing_violations({j: a.placement for j, a in placed.items()}, 4)
    assert stats[0].stage == "placement"


def test_packed_policy_decides_regulated_and_placed() -> None:
    running = {"a": (_job("a", 3, (1, 8)), {"node000": (0, 1, 2)})}
    view = _view(4, 4, running, [_job("b", 5, (1, 8)), _job("c", 3, (1, 8))])

    def shares(view, stats):  # an illegal share vector summing to N
        return {"a": 3, "b": 5, "c": 8}

    for regulation in ("greedy", "exact"):
        for placement in ("reuse-greedy", "reuse-exact", "ffd"):
            policy = packed_policy("p", shares, regulation, placement)
            decision = policy.decide(view)
            assert all(is_legal(c, 4) for c in decision.shares.values())
            assert sum(decision.shares.values()) == 16
            assert {j: a.gpus for j, a in decision.placements.items()} == decision.shares
            layout = {j: a.placement for j, a in decision.placements.items()}
            assert not network_sharing_violations(layout, 4)
            check_plan(view, AllocationPlan(time=5, policy="p", allocations=decision.placements))
            assert [s.stage for s in decision.stats] == ["regulation", "placement"]
    # Without regulation the shares pass through untouched and best-fit places them.
    plain = packed_policy("p", shares, None, "best-fit").decide(view)
    assert plain.shares == {"a": 3, "b": 5, "c": 8}
    with pytest.raises(ValueError, match="placement"):
        packed_policy("p", shares, "greedy", "nope")  # type: ignore[arg-type]


def test_packed_variant_of_srtf_runs_a_simulation_without_network_sharing() -> None:
    from gpuplan.executors.simulator.run import simulate
    from gpuplan.solver_core.registry import make_policy

    from ..conftest import NO_OVERHEADS, CapacityChecker

    base = make_policy("srtf")
    assert isinstance(base, StagedPolicy)
    policy = packed_variant(base)
    assert policy.name == "srtf-packed"
    sizes = [1, 2, 3, 4, 6, 8, 2, 1, 4, 3, 1, 2]
    jobs = [
        JobSpec(
            id=f"j{i:02d}", submit_time=30.0 * i, requested_gpus=g, duration=200.0 + 97 * (i % 5)
        )
        for i, g in enumerate(sizes)
    ]
    checker = CapacityChecker()
    problems: list[str] = []

    def hook(view, plan) -> None:
        checker(view, plan)
        problems.extend(
            network_sharing_violations({j: a.placement for j, a in plan.allocations.items()}, 4)
        )
        # Rigid jobs keep their own size: padding, never a different count.
        for j, a in plan.allocations.items():
            assert a.gpus == view.job(j).spec.requested_gpus

    result, _, _ = simulate(
        Cluster.uniform(3, 4), jobs, policy, overheads=NO_OVERHEADS, on_plan=hook
    )
    assert checker.plans > 0 and problems == []
    assert all(r.finish_time is not None for r in result.jobs)


@pytest.mark.parametrize("name", ["afs-l-packed", "afs-p-packed", "max-min-packed"])
def test_registered_packed_elastic_policies_never_share_the_network(name: str) -> None:
    """The registered ``<base>-packed`` variants: every plan uses legal sizes only, no network
    sharing, stays within capacity, and every elastic job finishes."""
    from gpuplan.executors.simulator.run import simulate
    from gpuplan.solver_core.registry import make_policy, policy_names

    from ..conftest import NO_OVERHEADS, CapacityChecker

    assert name in policy_names() and name.replace("-packed", "-reuse") in policy_names()
    policy = make_policy(name, seed=3)
    assert policy.name == name
    profile = ThroughputProfile(points={1: 1.0, 2: 1.9, 4: 3.5, 8: 6.0, 12: 7.0})
    jobs = [
        JobSpec(
            id=f"e{i:02d}",
            submit_time=40.0 * i,
            requested_gpus=2,
            total_iterations=900.0 + 311 * (i % 4),
            throughput=profile,
            elasticity=Elasticity(min_gpus=1, max_gpus=12),
        )
        for i in range(10)
    ]
    checker = CapacityChecker()
    problems: list[str] = []
    sizes: set[int] = set()

    def hook(view, plan) -> None:
        checker(view, plan)
        problems.extend(
            network_sharing_violations({j: a.placement for j, a in plan.allocations.items()}, 4)
        )
        sizes.update(a.gpus for a in plan.allocations.values())

    result, _, _ = simulate(
        Cluster.uniform(3, 4), jobs, policy, overheads=NO_OVERHEADS, on_plan=hook
    )
    assert checker.plans > 0 and problems == []
    assert sizes <= {1, 2, 3, 4, 8, 12} and max(sizes) > 4  # legal sizes, multi-node used
    assert all(r.finish_time is not None for r in result.jobs)
