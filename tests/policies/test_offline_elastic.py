"""offline-optimal on elastic jobs: the branch and bound against an enumeration of every event
order and against a fine-grid brute force, a worked example, the simulator's replay, the
online policies against it, and determinism."""

from __future__ import annotations

import math
import random

import pytest

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import Cluster, Elasticity, JobSpec, ThroughputProfile
from gpuplan.optimality_reproduction import avg_jct
from gpuplan.scenarios.optimality_instances import ELASTIC_POLICIES, NO_OVERHEADS, small_instance
from gpuplan.solver_core.offline_elastic import order_lp, replay_finish, solve_elastic
from gpuplan.solver_core.offline_model import OfflineInstance, offline_instance, slot_horizon
from gpuplan.solver_core.policies.baselines.offline_optimal import OfflineOptimal, OfflineParams
from gpuplan.solver_core.registry import make_policy
from tests.policies.test_offline_optimal import brute_force

MARGIN = 1e-5
"""Relative slack for the schedule's deliberate 1e-6 extra work per job and LP tolerances."""
GRID_S = 5.0


def tiny_elastic(seed: int) -> tuple[Cluster, list[JobSpec]]:
    """2-4 elastic jobs on 2 or 4 GPUs, concave curves, arrivals 0-20 s, 5-25 s long."""
    rng = random.Random(1000 + seed)
    gpus = rng.choice([2, 4])
    jobs = []
    for i in range(rng.randint(2, 4)):
        top = rng.choice([1.3, 1.6, 1.9])
        points = {1: 1.0, 2: top} if gpus == 2 else {1: 1.0, 2: top, 4: top * 1.4}
        jobs.append(
            JobSpec(
                id=f"e{i}",
                submit_time=10.0 * rng.randint(0, 2),
                requested_gpus=1,
                duration=rng.choice([5.0, 10.0, 15.0, 25.0]),
                elasticity=Elasticity(min_gpus=1, max_gpus=gpus),
                throughput=ThroughputProfile(points=points),
            )
        )
    return Cluster.uniform(1, gpus), jobs


def every_order(inst: OfflineInstance) -> list[list[tuple[str, int]]]:
    """Every event order: the arrivals in arrival order, each completion after its arrival."""
    n = len(inst.jobs)
    arrivals = sorted(range(n), key=lambda i: (inst.jobs[i].arrival, i))
    out: list[list[tuple[str, int]]] = []

    def grow(events: list[tuple[str, int]], nxt: int, active: frozenset[int]) -> None:
        if nxt == n and not active:
            out.append(events)
            return
        if nxt < n:
            grow([*events, ("arrive", arrivals[nxt])], nxt + 1, active | {arrivals[nxt]})
        for i in sorted(active):
            grow([*events, ("finish", i)], nxt, active - {i})

    grow([], 0, frozenset())
    return out


@pytest.mark.parametrize("seed", range(8))
def test_branch_and_bound_equals_enumeration(seed: int) -> None:
    """The search's optimum is the least LP over every event order (none pruned wrongly)."""
    cluster, jobs = tiny_elastic(seed)
    inst = offline_instance(cluster, jobs)
    values = [v for o in every_order(inst) if (v := order_lp(inst, o)) is not None]
    best = (min(values) - sum(j.arrival for j in inst.jobs)) / len(inst.jobs)
    sched = solve_elastic(inst)
    assert sched.status == "optimal"
    assert sched.lower_bound_s == pytest.approx(best, rel=1e-7)
    assert sched.avg_jct_s == pytest.approx(best, rel=MARGIN)
    assert sched.avg_jct_s >= best * (1 - 1e-9)


@pytest.mark.parametrize("seed", [1, 2, 5, 7])
def test_never_worse_than_a_grid_brute_force(seed: int) -> None:
    """Every slotted schedule is a continuous one: the exact optimum is at most the best
    schedule on a 5 s grid (found by exhaustive dynamic programming over every count vector
    in every slot), and the grid's loss is small (under a slot per job on these instances)."""
    cluster, jobs = tiny_elastic(seed)
    inst = offline_instance(cluster, jobs)
    sched = solve_elastic(inst)
    grid = brute_force(inst, GRID_S, slot_horizon(inst, GRID_S) + 2)
    assert math.isfinite(grid)
    assert sched.lower_bound_s <= grid + 1e-9
    assert sched.avg_jct_s <= grid * (1 + MARGIN)
    assert grid - sched.avg_jct_s <= GRID_S * len(inst.jobs)


def test_worked_example() -> None:
    """Two jobs of 10 and 20 iterations arrive together on 2 GPUs, 1 it/s on one GPU and
    1.2 it/s on two. Each unit of the short job's work costs sum-of-completions 1 + (1 - 1/1.2)
    when both run on one GPU and 2/1.2 when the short one runs alone on two, so both on one
    GPU until the short one ends (10 s), then the long one on two: JCTs 10 and 10 + 10/1.2 s."""
    curve = ThroughputProfile(points={1: 1.0, 2: 1.2})
    jobs = [
        JobSpec(
            id=name,
            submit_time=0,
            requested_gpus=1,
            duration=d,
            elasticity=Elasticity(min_gpus=1, max_gpus=2),
            throughput=curve,
        )
        for name, d in (("short", 10.0), ("long", 20.0))
    ]
    sched = solve_elastic(offline_instance(Cluster.uniform(1, 2), jobs))
    expected = (10.0 + 10.0 + 10.0 / 1.2) / 2
    assert sched.status == "optimal"
    assert sched.lower_bound_s == pytest.approx(expected, rel=1e-7)
    assert sched.avg_jct_s == pytest.approx(expected, rel=MARGIN)
    assert [s.counts for s in sched.segments] == [{"short": 1, "long": 1}, {"long": 2}]
    assert sched.finish["short"] == pytest.approx(10.0, rel=MARGIN)


def test_replay_in_the_simulator_reproduces_the_schedule() -> None:
    cluster, jobs = small_instance(1, elastic=True)
    policy = OfflineOptimal(OfflineParams())
    result, _, _ = simulate(cluster, jobs, policy, overheads=NO_OVERHEADS)
    sched = policy.schedule
    assert sched is not None and sched.status == "optimal"
    inst = offline_instance(cluster, jobs)
    assert replay_finish(inst, sched.segments) == sched.finish  # type: ignore[union-attr]
    sim = {r.job_id: r.finish_time for r in result.jobs}
    for job_id, finish in sched.finish.items():
        assert sim[job_id] == pytest.approx(finish, abs=1e-6)
    simulated = sum(r.jct for r in result.jobs) / len(result.jobs)  # type: ignore[misc]
    assert simulated == pytest.approx(sched.avg_jct_s, abs=1e-6)
    assert result.solver_calls == 1


@pytest.mark.parametrize("seed", range(3))
def test_no_online_policy_beats_it(seed: int) -> None:
    cluster, jobs = small_instance(seed, elastic=True, jobs=5)
    policy = OfflineOptimal(OfflineParams())
    best = avg_jct(cluster, jobs, policy)
    assert policy.schedule is not None and policy.schedule.status == "optimal"
    lower = policy.schedule.lower_bound_s
    assert lower <= best <= lower * (1 + MARGIN)
    for name in ELASTIC_POLICIES:
        online = avg_jct(cluster, jobs, make_policy(name, seed=seed))
        assert online >= best * (1 - MARGIN), (seed, name, online, best)


def test_deterministic_and_node_limited() -> None:
    cluster, jobs = small_instance(2, elastic=True, jobs=6)
    inst = offline_instance(cluster, jobs)
    a, b = solve_elastic(inst), solve_elastic(inst)
    assert (a.segments, a.order, a.nodes) == (b.segments, b.order, b.nodes)
    cut = solve_elastic(inst, nodes=3)
    assert cut.nodes <= 3 + 1 and cut.status == "feasible"
    # stopped early: the schedule is still real and the bound still below the optimum
    assert cut.lower_bound_s <= a.lower_bound_s + 1e-9
    assert cut.avg_jct_s >= a.avg_jct_s * (1 - 1e-9)
    assert replay_finish(inst, cut.segments) == cut.finish
