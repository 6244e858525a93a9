"""Reuse-maximising placement (AFS/CoDDL §4.4): kept jobs first, then reused GPUs.

Every placement is checked for capacity, GPU exclusivity, exact counts and -- with network
packing -- App. E's no-network-sharing rule; exact is compared with greedy on the
lexicographic objective.
"""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.models import (
    AllocationPlan,
    Cluster,
    ClusterState,
    JobAllocation,
    JobSnapshot,
    JobSpec,
    Node,
)
from gpuplan.models.job import Elasticity
from gpuplan.solver_core.diff import build_plan, check_plan
from gpuplan.solver_core.placement.network_packing import (
    assign_gpus,
    network_sharing_violations,
    regulate_greedy,
)
from gpuplan.solver_core.placement.reuse import (
    PlacementJob,
    PlacementProblem,
    place_exact,
    place_greedy,
    problem_from_view,
    reuse_exact_placement,
    reuse_greedy_placement,
    reuse_placement,
    reuse_score,
)
from gpuplan.solver_core.policy import Decision

# ---------------------------------------------------------------------------------- helpers


def _job(job_id: str, gpus: int, gpu_type: str | None = None) -> JobSpec:
    return JobSpec(
        id=job_id,
        submit_time=0,
        requested_gpus=gpus,
        duration=100,
        elasticity=Elasticity(min_gpus=1, max_gpus=16),
        gpu_type=gpu_type,
    )


def _view(
    cluster: Cluster,
    running: dict[str, dict[str, tuple[int, ...]]],
    pending: tuple[str, ...] = (),
    types: dict[str, str] | None = None,
):
    types = types or {}
    jobs = [
        JobSnapshot(
            spec=_job(j, sum(len(g) for g in p.values()), types.get(j)),
            allocation=JobAllocation(job_id=j, placement=p),
        )
        for j, p in running.items()
    ]
    jobs += [JobSnapshot(spec=_job(j, 1, types.get(j))) for j in pending]
    return ClusterState(now=1, cluster=cluster, jobs=jobs).to_view()


def _check(problem: PlacementProblem, gpus: dict[str, dict[str, tuple[int, ...]]]) -> None:
    """Capacity, exclusivity, exact counts, and the network rule when it applies."""
    want = {j.id: j.count for j in problem.jobs}
    used: Counter[tuple[str, int]] = Counter()
    for job_id, nodes in gpus.items():
        assert sum(len(g) for g in nodes.values()) == want[job_id], job_id
        for node, idx in nodes.items():
            assert set(idx) <= set(problem.pools[node]), (job_id, node, idx)
            used.update((node, g) for g in idx)
    assert all(c == 1 for c in used.values()), "a GPU is used twice"
    if problem.no_network_sharing:
        assert network_sharing_violations(gpus, problem.unit) == []


def _gpus(problem: PlacementProblem, counts: dict[str, dict[str, int]]):
    return assign_gpus(problem.pools, counts, {j.id: j.held for j in problem.jobs})


# ------------------------------------------------------------------- unavoidable migration


def test_unavoidable_migration_moves_exactly_one_job() -> None:
    # 3 nodes x 4. a holds 2+2 GPUs across node000/node001 (network-sharing layout), b holds
    # node000:2, c holds node001:2-3; node002 is empty. a stays at 4 GPUs, so it must take one
    # whole node. Staying on node000 evicts b (reused 2 + 2 = 4), on node001 evicts c (reused
    # 2 + 1 = 3), on node002 a itself migrates (reused 1 + 2 = 3). Optimum: b migrates alone.
    view = _view(
        Cluster.uniform(3, 4),
        {
            "a": {"node000": (0, 1), "node001": (0, 1)},
            "b": {"node000": (2,)},
            "c": {"node001": (2, 3)},
        },
    )
    shares = {"a": 4, "b": 1, "c": 2}
    problem = problem_from_view(view, shares)
    stats: list = []
    counts = place_exact(problem, stats=stats)
    score = reuse_score(problem, counts)
    assert (score.kept_jobs, score.reused_gpus, score.migrated_jobs) == (2, 4, 1)
    assert stats[0].status == "optimal" and not stats[0].fell_back

    placed = reuse_exact_placement(view, shares, [])
    assert placed["a"].placement == {"node000": (0, 1, 2, 3)}
    assert placed["c"].placement == {"node001": (2, 3)}
    assert "node000" not in placed["b"].placement  # the one migration
    plan = build_plan(view, Decision(shares=shares, placements=placed), "t")
    check_plan(view, plan)
    kinds = {a.job_id: a.kind for a in plan.actions}
    assert kinds == {"a": "migrate", "b": "migrate"}  # a moves 2 workers but keeps 2 GPUs
    assert reuse_score(problem, {j: a.placement for j, a in placed.items()}).migrated_jobs == 1
    # The greedy's net-gain rule finds the same answer here.
    assert reuse_score(problem, place_greedy(problem)) == score


def test_unchanged_shares_keep_every_gpu() -> None:
    running = {
        "a": {"node000": (0, 1, 2, 3), "node001": (0, 1, 2, 3)},
        "b": {"node002": (0, 1)},
        "c": {"node002": (2,)},
        "d": {"node002": (3,)},
    }
    view = _view(Cluster.uniform(4, 4), running, pending=("e",))
    shares = {"a": 8, "b": 2, "c": 1, "d": 1, "e": 4}
    for stage in (reuse_placement("greedy"), reuse_placement("exact")):
        stats: list = []
        placed = stage(view, shares, stats)
        for j, p in running.items():
            assert placed[j].placement == p
        assert placed["e"].placement == {"node003": (0, 1, 2, 3)}
        assert stats and stats[-1].stage == "placement"


def test_growth_shrink_and_new_jobs_prefer_reuse() -> None:
    # a grows 2 -> 4 (needs a whole node: it has 2 on node000 already), b shrinks 4 -> 2.
    view = _view(
        Cluster.uniform(2, 4),
        {"a": {"node000": (0, 1)}, "b": {"node001": (0, 1, 2, 3)}},
        pending=("n",),
    )
    shares = {"a": 4, "b": 2, "n": 2}
    for method in ("greedy", "exact"):
        placed = reuse_placement(method)(view, shares, [])
        assert placed["a"].placement == {"node000": (0, 1, 2, 3)}
        assert placed["b"].placement == {"node001": (0, 1)}
        assert placed["n"].placement == {"node001": (2, 3)}


# ---------------------------------------------------------------- random churn: exact >= greedy


def _random_problem(
    rng: random.Random,
    nodes: int,
    unit: int,
    n_jobs: int,
    previous: dict[str, dict[str, tuple[int, ...]]],
    tag: str = "",
) -> PlacementProblem:
    """Shares summing to N over n_jobs (old and new), regulated, with ``previous`` held."""
    total = nodes * unit
    ids = sorted(previous) + [f"new{tag}-{i}" for i in range(n_jobs)]
    rng.shuffle(ids)
    ids = ids[:n_jobs]
    cuts = sorted(rng.randint(0, total) for _ in range(len(ids) - 1))
    shares = {j: b - a for j, a, b in zip(ids, [0, *cuts], [*cuts, total], strict=True)}
    regulated = regulate_greedy(shares, unit, total)
    pools = {f"n{i:02d}": tuple(range(unit)) for i in range(nodes)}
    return PlacementProblem(
        pools,
        unit,
        tuple(PlacementJob(j, c, previous.get(j, {})) for j, c in sorted(regulated.items())),
    )


def test_exact_is_at_least_greedy_on_random_churn() -> None:
    rng = random.Random(7)
    for nodes, unit, n_jobs in ((8, 4, 12), (16, 4, 24), (8, 8, 20)):
        previous: dict[str, dict[str, tuple[int, ...]]] = {}
        for step in range(4):
            problem = _random_problem(rng, nodes, unit, n_jobs, previous, str(step))
            greedy = place_greedy(problem)
            stats: list = []
            exact = place_exact(problem, greedy=greedy, stats=stats, time_limit_s=10)
            assert stats[0].status == "optimal"
            g, e = reuse_score(problem, greedy), reuse_score(problem, exact)
            assert g.unplaced_jobs == e.unplaced_jobs == 0
            assert e.kept_jobs >= g.kept_jobs
            assert (e.kept_jobs, e.reused_gpus) >= (g.kept_jobs, g.reused_gpus)
            gpus = _gpus(problem, greedy)
            _check(problem, gpus)
            _check(problem, _gpus(problem, exact))
            # Node-level scores are what assign_gpus realises on GPU indices.
            assert reuse_score(problem, gpus) == g
            previous = gpus


def test_time_limit_fallback_is_reported() -> None:
    rng = random.Random(3)
    previous: dict[str, dict[str, tuple[int, ...]]] = {}
    problem = _random_problem(rng, 64, 8, 200, previous)
    previous = _gpus(problem, place_greedy(problem))
    problem = _random_problem(rng, 64, 8, 200, previous, "b")
    stats: list = []
    greedy = place_greedy(problem)
    counts = place_exact(problem, time_limit_s=1e-3, stats=stats)
    assert stats[0].fell_back and stats[0].status == "heuristic"
    assert stats[0].time_limit_s == 1e-3
    assert counts == greedy
    _check(problem, _gpus(problem, counts))


# ------------------------------------------------------------------ greedy always succeeds


@st.composite
def churn_cases(draw: st.DrawFn) -> PlacementProblem:
    """Arbitrary (even network-sharing) previous layouts, then a regulated share vector."""
    unit = draw(st.sampled_from([1, 2, 4, 8]))
    nodes = draw(st.integers(1, 8))
    n = draw(st.integers(1, 12))
    ids = [f"j{i:02d}" for i in range(n)]
    owners = draw(
        st.lists(st.sampled_from([None, *ids]), min_size=unit * nodes, max_size=unit * nodes)
    )
    held: dict[str, dict[str, list[int]]] = {}
    for k, owner in enumerate(owners):
        if owner is not None:
            held.setdefault(owner, {}).setdefault(f"n{k // unit}", []).append(k % unit)
    total = unit * nodes
    cuts = sorted(draw(st.lists(st.integers(0, total), min_size=n - 1, max_size=n - 1)))
    shares = {j: b - a for j, a, b in zip(ids, [0, *cuts], [*cuts, total], strict=True)}
    regulated = regulate_greedy(shares, unit, total)
    pools = {f"n{i}": tuple(range(unit)) for i in range(nodes)}
    jobs = tuple(
        PlacementJob(j, c, {n: tuple(g) for n, g in held.get(j, {}).items()})
        for j, c in sorted(regulated.items())
    )
    return PlacementProblem(pools, unit, jobs)


@settings(max_examples=250, deadline=None)
@given(churn_cases())
def test_greedy_places_every_regulated_vector_without_network_sharing(
    problem: PlacementProblem,
) -> None:
    counts = place_greedy(problem)
    score = reuse_score(problem, counts)
    assert score.unplaced_jobs == 0
    assert score.placed_gpus == sum(j.count for j in problem.jobs)
    _check(problem, _gpus(problem, counts))


@settings(max_examples=25, deadline=None)
@given(churn_cases())
def test_exact_never_loses_to_greedy(problem: PlacementProblem) -> None:
    greedy = place_greedy(problem)
    stats: list = []
    exact = place_exact(problem, greedy=greedy, stats=stats)
    assert stats[0].status == "optimal"
    g, e = reuse_score(problem, greedy), reuse_score(problem, exact)
    assert e.unplaced_jobs == 0
    assert (e.kept_jobs, e.reused_gpus) >= (g.kept_jobs, g.reused_gpus)
    _check(problem, _gpus(problem, exact))


# -------------------------------------------------------------- without network packing


def test_plain_reuse_keeps_min_of_count_and_held() -> None:
    running = {
        "a": {"node000": (0, 1, 2), "node001": (0,)},  # 4 -> 3: keeps the 3 on node000
        "b": {"node001": (1, 2)},  # 2 -> 5: keeps 2, grows
        "c": {"node002": (0, 1, 2, 3)},
    }  # 4 -> 0: preempted
    view = _view(Cluster.uniform(3, 4), running, pending=("d",))
    shares = {"a": 3, "b": 5, "d": 3}
    problem = problem_from_view(view, shares, no_network_sharing=False)
    greedy_stats: list = []
    greedy = reuse_greedy_placement(view, shares, greedy_stats, no_network_sharing=False)
    stats: list = []
    exact = reuse_exact_placement(view, shares, stats, no_network_sharing=False)
    for placed in (greedy, exact):
        check_plan(view, AllocationPlan(time=1, policy="t", allocations=placed))
        assert {j: a.gpus for j, a in placed.items()} == shares
        assert placed["a"].placement == {"node000": (0, 1, 2)}
        assert set(placed["b"].gpu_set()) >= {("node001", 1), ("node001", 2)}
    g = reuse_score(problem, {j: a.placement for j, a in greedy.items()})
    e = reuse_score(problem, {j: a.placement for j, a in exact.items()})
    assert (g.kept_jobs, g.reused_gpus) == (e.kept_jobs, e.reused_gpus) == (2, 5)
    assert e.neg_spread >= g.neg_spread  # exact packs at least as tightly
    assert stats[0].status == "optimal"
    assert "reuse greedy" in greedy_stats[0].message


def test_gpu_type_restriction_is_respected() -> None:
    cluster = Cluster(
        nodes=[
            Node(name="k0", gpus=4, gpu_type="k80"),
            Node(name="v0", gpus=4, gpu_type="v100"),
            Node(name="v1", gpus=4, gpu_type="v100"),
        ]
    )
    view = _view(
        cluster, {"a": {"k0": (0, 1)}}, pending=("x", "y"), types={"x": "v100", "y": "k80"}
    )
    shares = {"a": 2, "x": 8, "y": 2}
    for method in ("greedy", "exact"):
        placed = reuse_placement(method)(view, shares, [])
        assert set(placed["x"].placement) == {"v0", "v1"}
        assert set(placed["y"].placement) == {"k0"}
        assert placed["a"].placement == {"k0": (0, 1)}
