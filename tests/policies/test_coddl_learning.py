"""CoDDL overhead model (concurrent expansion, reconfiguration cancelling) and throughput
learning, with a scripted policy so every number is computed by hand."""

from __future__ import annotations

import pytest

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import (
    Cluster,
    ClusterView,
    Elasticity,
    JobSpec,
    LearningSpec,
    Overheads,
    ThroughputProfile,
)
from gpuplan.solver_core.placement.best_fit import best_fit_placement
from gpuplan.solver_core.policy import StagedPolicy


def scripted(schedule: list[tuple[float, int]]) -> StagedPolicy:
    """Job 'a' gets ``gpus`` from each ``time`` on; wake-ups at every change."""

    def shares(view: ClusterView, stats: list) -> dict[str, int]:
        gpus = 0
        for time, n in schedule:
            if view.now >= time:
                gpus = n
        return {"a": gpus} if "a" in view.running or "a" in view.pending else {}

    def wakeup(view: ClusterView) -> float | None:
        later = [t for t, _ in schedule if t > view.now]
        return min(later) if later else None

    return StagedPolicy("scripted", shares, best_fit_placement, wakeup)


def job(profile: ThroughputProfile | None = None) -> JobSpec:
    return JobSpec(
        id="a",
        submit_time=0,
        requested_gpus=1,
        total_iterations=100,
        elasticity=Elasticity(min_gpus=1, max_gpus=4),
        throughput=profile or ThroughputProfile.linear(),
    )


def finish(overheads: Overheads, schedule: list[tuple[float, int]], **kw: object) -> float:
    result, _, _ = simulate(
        Cluster.uniform(1, 4), [job()], scripted(schedule), overheads=overheads, **kw
    )
    return result.jobs[0].finish_time  # type: ignore[return-value]


GROW_AT_10 = [(0, 1), (10, 4)]


def test_concurrent_expansion_keeps_training_on_old_share() -> None:
    # 1 it/s until the new GPUs are ready at 15 (15 it), switch costs 4 ms, then 85 it at 4 it/s.
    es = Overheads(start_s=0, resize_mode="stop_free", expand_prep_s=5)
    assert finish(es, GROW_AT_10) == pytest.approx(15 + 0.004 + 85 / 4)
    # stop-free without preparation time: 10 it, then 90 it at 4 it/s after 4 ms
    assert finish(Overheads(start_s=0, resize_mode="stop_free"), GROW_AT_10) == pytest.approx(
        10 + 0.004 + 90 / 4
    )
    # checkpoint-restart: the job stops for 5 s at 10 and resumes on 4 GPUs
    restart = Overheads(start_s=0, resize_mode="checkpoint_restart", restart_s=5)
    assert finish(restart, GROW_AT_10) == pytest.approx(15 + 90 / 4)


def test_reconfiguration_cancelling_vs_back_to_back_orders() -> None:
    burst = [(0, 1), (10, 2), (11, 4)]
    rc = Overheads(start_s=0, resize_mode="checkpoint_restart", restart_s=5, cancel_inflight=True)
    no_rc = rc.model_copy(update={"cancel_inflight": False})
    # With cancelling the second order supersedes the first: paused 10..16, then 4 it/s.
    assert finish(rc, burst) == pytest.approx(16 + 90 / 4)
    # Without, the second order starts when the first ends (15) and takes 5 s more.
    assert finish(no_rc, burst) == pytest.approx(20 + 90 / 4)


def test_learning_mode_policies_see_only_measured_points() -> None:
    true = ThroughputProfile(points={1: 1.0, 2: 1.8, 4: 3.0})
    seen: list[tuple[float, dict[int, float], float]] = []

    def spy(view: ClusterView, plan: object) -> None:
        a = view.running.get("a") or view.pending.get("a")
        if a is not None:
            seen.append((view.now, dict(a.spec.throughput.points), a.spec.throughput.rate(4)))

    result, _, _ = simulate(
        Cluster.uniform(1, 4),
        [job(true)],
        scripted([(0, 4)]),
        overheads=Overheads(start_s=0),
        learning=LearningSpec(enabled=True, measure_s=10),
        on_plan=spy,
    )
    # On arrival: only the one-GPU rate, believed to scale linearly (4 GPUs -> 4 it/s).
    assert seen[0] == (0.0, {1: 1.0}, 4.0)
    # After running on 4 GPUs for measure_s, all units <= 4 are measured: 1, 2, 4.
    assert seen[1][0] == 10.0 and seen[1][1] == {1: 1.0, 2: 1.8, 4: 3.0} and seen[1][2] == 3.0
    # The job itself ran at its true speed all along: 100 it at 3 it/s.
    assert result.jobs[0].finish_time == pytest.approx(100 / 3)


def test_learning_extrapolates_linearly_from_last_unit() -> None:
    belief = ThroughputProfile.linear().believed_from({1: 1.0, 2: 1.8, 4: 3.0})
    assert belief.rate(8) == pytest.approx(6.0) and belief.rate(3) == pytest.approx(2.4)


def test_fair_share_cap_until_measured() -> None:
    from gpuplan.solver_core.wrappers import FairShareUntilMeasured

    true = ThroughputProfile(points={1: 1.0, 2: 1.9, 4: 3.6, 8: 6.4})
    jobs = [
        JobSpec(
            id=n,
            submit_time=0,
            requested_gpus=1,
            total_iterations=500,
            elasticity=Elasticity(min_gpus=1, max_gpus=8),
            throughput=true,
        )
        for n in ("a", "b")
    ]
    firsts: dict[str, int] = {}

    def greedy(view: ClusterView, stats: list) -> dict[str, int]:
        # wants all 8 GPUs for the first active job, nothing for the other
        ids = sorted([*view.running, *view.pending])
        return {ids[0]: 8} if ids else {}

    def spy(view: ClusterView, plan: object) -> None:
        for job_id, alloc in plan.allocations.items():  # type: ignore[attr-defined]
            firsts.setdefault(job_id, alloc.gpus)

    stage = FairShareUntilMeasured(greedy)
    policy = StagedPolicy("capped", stage, best_fit_placement)
    free = Overheads(start_s=0, resize_mode="stop_free", stop_free_s=0)
    result, _, _ = simulate(
        Cluster.uniform(2, 4),
        jobs,
        policy,
        overheads=free,
        learning=LearningSpec(enabled=True, measure_s=5),
        on_plan=spy,
    )
    # two active jobs on 8 GPUs: fair share 4 until 'a' has measured its curve at t=5;
    # 'b' starts only when 'a' is done and is then alone (fair share 8)
    assert firsts == {"a": 4, "b": 8}
    rec = {r.job_id: r for r in result.jobs}
    # 'a': 5 s at 3.6 it/s (18 it), then all 8 GPUs (6.4 it/s) for the remaining 482 it
    assert rec["a"].finish_time == pytest.approx(5 + 482 / 6.4)


@pytest.mark.parametrize("policy", ["afs-l-learning", "afs-p-learning"])
def test_learning_policies_drop_to_the_measured_saturation_point(policy: str) -> None:
    """End to end through the engine and the simulator, with the registered policies (not a
    scripted one): a job believed to scale linearly gets all 4 GPUs; once it has measured that
    it saturates at 2, the policy gives it 2 — what a freshly built policy gives for the
    measured curve. (The ladder cache once kept the pre-measurement ladder: 4 GPUs for ever.)"""
    from gpuplan.solver_core.registry import make_policy

    true = ThroughputProfile(points={1: 1.0, 2: 2.0, 4: 2.0})
    spec = JobSpec(
        id="a",
        submit_time=0,
        requested_gpus=1,
        total_iterations=400,
        elasticity=Elasticity(min_gpus=1, max_gpus=4),
        throughput=true,
    )
    timeline: list[tuple[float, int]] = []
    measured: list[JobSpec] = []

    def spy(view: ClusterView, plan: object) -> None:
        a = view.running.get("a") or view.pending.get("a")
        if a is not None:
            timeline.append((view.now, plan.gpus_of("a")))  # type: ignore[attr-defined]
            if len(a.spec.throughput.points) > 1:
                measured.append(a.spec)

    simulate(
        Cluster.uniform(1, 4),
        [spec],
        make_policy(policy),
        overheads=Overheads(start_s=0),
        learning=LearningSpec(enabled=True, measure_s=10),
        on_plan=spy,
    )
    assert timeline[0] == (0.0, 4), timeline  # believed linear: 4 GPUs
    assert measured and measured[0].throughput.rate(4) == pytest.approx(2.0)
    after = [gpus for t, gpus in timeline if t >= 10.0]
    assert after and set(after) == {2}, timeline
    # a fresh policy on the measured belief decides the same
    from gpuplan.models import ClusterState, JobSnapshot

    fresh = ClusterState(
        now=20.0, cluster=Cluster.uniform(1, 4), jobs=[JobSnapshot(spec=measured[0])]
    )
    plan_gpus = make_policy(policy.removesuffix("-learning")).decide(fresh.to_view()).shares
    assert plan_gpus == {"a": 2}


@pytest.mark.parametrize(
    "config", ["elastic-tiresias(wrappers=[learning])", "tiresias-l(wrappers=[learning])"]
)
def test_an_unmeasured_job_above_the_fair_cap_still_runs(config: str) -> None:
    """The learning cap (``max(1, M // n)`` GPUs for an unmeasured job) must not zero a job
    none of whose allowed counts fits under it: it is measured only by running. Before the
    rule, Elastic-Tiresias on this workload (16 GPUs, 8 jobs waiting, two unmeasured 8-GPU jobs
    first in line) preempted every running job for them, the cap zeroed them, and the run
    ended with 8 jobs never finished and every GPU idle."""
    from gpuplan.executors.engine import Engine
    from gpuplan.executors.simulator.cluster import SimulatedCluster
    from gpuplan.models import Cluster, LearningSpec
    from gpuplan.solver_core.registry import make_policy
    from tests.policies.test_policy_interface import workload

    cluster, jobs = Cluster.uniform(2, 8), workload()
    executor = SimulatedCluster(cluster, jobs, learning=LearningSpec(enabled=True), seed=3)
    engine = Engine(cluster, make_policy(config, seed=3), executor, sample_interval_s=None)
    engine.run()
    unfinished = [r.job_id for r in engine.result().jobs if r.finish_time is None]
    assert not unfinished, unfinished
