"""offline-optimal: the slotted model against a brute force, its replay in the simulator, the
proven lower bound, and every online policy against it."""

from __future__ import annotations

import functools
import math
import random

import pytest

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import Cluster, Elasticity, InputError, JobSpec, ThroughputProfile
from gpuplan.optimality_reproduction import avg_jct
from gpuplan.scenarios.optimality_instances import (
    ELASTIC_POLICIES,
    NO_OVERHEADS,
    RIGID_POLICIES,
    SLOT_S,
    small_instance,
)
from gpuplan.solver_core.offline_model import (
    OfflineInstance,
    offline_instance,
    slot_horizon,
    solve_offline,
)
from gpuplan.solver_core.policies.baselines.offline_optimal import OfflineOptimal, OfflineParams
from gpuplan.solver_core.registry import make_policy


def brute_force(inst: OfflineInstance, slot_s: float, horizon: int) -> float:
    """Least average JCT over every slotted schedule of ``horizon`` slots (dynamic programme
    over (slot, work left), trying every count vector each slot)."""
    jobs = inst.jobs
    origin = inst.origin
    start = [math.ceil((j.arrival - origin) / slot_s - 1e-9) for j in jobs]

    @functools.cache
    def best(t: int, left: tuple[float, ...]) -> float:
        if all(w <= 1e-9 for w in left):
            return 0.0
        if t == horizon:
            return math.inf
        options: list[list[int]] = [[0]] * len(jobs)
        options = [
            [0, *jobs[i].rates] if start[i] <= t and left[i] > 1e-9 else [0]
            for i in range(len(jobs))
        ]
        out = math.inf

        def walk(i: int, used: int, counts: list[int]) -> None:
            nonlocal out
            if i == len(jobs):
                cost, nxt = 0.0, list(left)
                for k, g in enumerate(counts):
                    if g:
                        step = jobs[k].rates[g] * slot_s
                        if step >= left[k] - 1e-9:
                            cost += (
                                origin + t * slot_s + left[k] / jobs[k].rates[g] - jobs[k].arrival
                            )
                            nxt[k] = 0.0
                        else:
                            nxt[k] = left[k] - step
                out = min(out, cost + best(t + 1, tuple(nxt)))
                return
            for g in options[i]:
                if used + g <= inst.capacity:
                    walk(i + 1, used + g, [*counts, g])

        walk(0, 0, [])
        return out

    return best(0, tuple(j.work for j in jobs)) / len(jobs)


def tiny(seed: int, elastic: bool) -> tuple[Cluster, list[JobSpec]]:
    rng = random.Random(seed)
    jobs = []
    for i in range(rng.randint(2, 4)):
        kw: dict[str, object] = {
            "id": f"t{i}",
            "submit_time": 10.0 * rng.randint(0, 2),
            "requested_gpus": rng.choice([1, 2]),
            "duration": rng.choice([5.0, 10.0, 15.0, 25.0]),
        }
        if elastic:
            kw["elasticity"] = Elasticity(min_gpus=1, max_gpus=2)
            kw["throughput"] = ThroughputProfile(points={1: 1.0, 2: rng.choice([1.3, 1.8])})
        jobs.append(JobSpec(**kw))  # type: ignore[arg-type]
    return Cluster.uniform(1, 2), jobs


@pytest.mark.parametrize("elastic", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_model_equals_brute_force(seed: int, elastic: bool) -> None:
    cluster, jobs = tiny(seed, elastic)
    inst = offline_instance(cluster, jobs)
    sched = solve_offline(inst, slot_s=10.0)
    assert sched.status == "optimal"
    expected = brute_force(inst, 10.0, slot_horizon(inst, 10.0))
    # The model's objective rounds each JCT to a thousandth of a slot.
    assert sched.avg_jct_s == pytest.approx(expected, abs=10.0 * 2e-3)
    assert sched.model_objective_s == pytest.approx(sched.avg_jct_s, abs=10.0 * 2e-3)
    assert sched.lower_bound_s <= sched.avg_jct_s + 1e-6


def test_worked_example() -> None:
    """Two 1-GPU jobs of 2 and 1 slots arrive together on one GPU: shortest first, JCTs 1 and
    3 slots, average 2 slots; no schedule on any time grid does better, so the bound is tight."""
    jobs = [
        JobSpec(id="long", submit_time=0, requested_gpus=1, duration=20.0),
        JobSpec(id="short", submit_time=0, requested_gpus=1, duration=10.0),
    ]
    sched = solve_offline(offline_instance(Cluster.uniform(1, 1), jobs), slot_s=10.0)
    assert sched.counts == {"long": [0, 1, 1], "short": [1, 0, 0]}
    assert sched.avg_jct_s == pytest.approx(20.0)
    assert sched.lower_bound_s == pytest.approx(20.0, rel=1e-5)
    assert sched.gap == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize("elastic", [False, True])
def test_replay_matches_model(elastic: bool) -> None:
    cluster, jobs = small_instance(3, elastic)
    policy = OfflineOptimal(OfflineParams(slot_s=SLOT_S, work_s=1.0))
    result, _, _ = simulate(cluster, jobs, policy, overheads=NO_OVERHEADS)
    assert policy.schedule is not None
    sim = {r.job_id: r.finish_time for r in result.jobs}
    for job_id, finish in policy.schedule.finish.items():
        assert sim[job_id] == pytest.approx(finish, abs=1e-3)
    simulated = sum(r.jct for r in result.jobs) / len(result.jobs)  # type: ignore[misc]
    assert simulated == pytest.approx(policy.schedule.avg_jct_s, abs=1e-3)
    # the continuous branch and bound, once (it closes on this instance, rigid or elastic)
    assert result.solver_calls == 1
    assert result.bound is not None and result.bound.status == "optimal"
    assert result.bound.method == "continuous"


def test_online_policies_never_beat_it_on_rigid_grid_instances() -> None:
    """Rigid jobs on the slot grid: an event-driven online schedule is a slotted schedule, so
    none may beat the slotted optimum; and none may beat the proven lower bound."""
    for seed in range(3):
        cluster, jobs = small_instance(seed, elastic=False, jobs=6)
        policy = OfflineOptimal(OfflineParams(slot_s=SLOT_S, work_s=2.0))
        best = avg_jct(cluster, jobs, policy)
        assert policy.schedule is not None and policy.schedule.status == "optimal"
        for name in RIGID_POLICIES:
            online = avg_jct(cluster, jobs, make_policy(name, seed=seed))
            assert online >= best - 1e-6, (seed, name, online, best)
            assert online >= policy.schedule.lower_bound_s - 1e-6


def test_online_policies_never_beat_the_lower_bound_elastic() -> None:
    cluster, jobs = small_instance(1, elastic=True, jobs=6)
    policy = OfflineOptimal(OfflineParams(slot_s=SLOT_S, work_s=1.0))
    best = avg_jct(cluster, jobs, policy)
    assert policy.schedule is not None
    lower = policy.schedule.lower_bound_s
    assert 0 < lower <= best
    for name in ELASTIC_POLICIES:
        assert avg_jct(cluster, jobs, make_policy(name)) >= lower - 1e-6, name


def test_refuses_large_instances_and_missing_future() -> None:
    jobs = [JobSpec(id=f"j{i}", submit_time=0, requested_gpus=1, duration=60.0) for i in range(13)]
    with pytest.raises(InputError, match="up to 12 jobs"):
        simulate(Cluster.uniform(2, 4), jobs, make_policy("offline-optimal"))
    with pytest.raises(InputError, match="16 GPUs"):
        simulate(Cluster.uniform(5, 4), jobs[:3], make_policy("offline-optimal"))
    cluster = Cluster.uniform(1, 4)
    from gpuplan.executors.engine import Engine
    from gpuplan.executors.simulator.cluster import SimulatedCluster

    engine = Engine(cluster, make_policy("offline-optimal"), SimulatedCluster(cluster, jobs[:2]))
    with pytest.raises(InputError, match="whole job list"):
        engine.run()
