"""Discrete-event simulator invariants and exact hand-computed schedules."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict

import pytest

from gpuplan.executors.engine import Engine
from gpuplan.executors.metrics import summarize
from gpuplan.executors.simulator.cluster import SimulatedCluster
from gpuplan.models import (
    Checkpointing,
    Cluster,
    Elasticity,
    JobSpec,
    NodeFailure,
    Overheads,
    ThroughputProfile,
)
from gpuplan.solver_core.registry import make_policy
from tests.conftest import NO_OVERHEADS, CapacityChecker, rigid


def _random_jobs(seed: int, n: int, max_gpus: int) -> list[JobSpec]:
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(1 / 50)
        gpus = rng.choice([1, 1, 1, 2, 4, min(8, max_gpus)])
        profile = ThroughputProfile(points={1: 1.0, 2: 1.9, 4: 3.4, 8: 5.5})
        jobs.append(
            JobSpec(
                id=f"j{i}",
                submit_time=round(t, 3),
                requested_gpus=gpus,
                duration=rng.uniform(5, 400),
                throughput=profile,
            )
        )
    return jobs


@pytest.mark.parametrize("policy", ["fifo", "fifo-backfill", "srtf", "srsf"])
@pytest.mark.parametrize("seed", [0, 1])
def test_des_invariants(run_sim, policy: str, seed: int) -> None:
    cluster = Cluster.uniform(4, 4)
    jobs = _random_jobs(seed, 150, 8)
    result, _, executor = run_sim(cluster, jobs, policy)
    by_id = {j.id: j for j in jobs}
    assert len(result.jobs) == len(jobs)
    assert all(r.finish_time is not None for r in result.jobs), "every job finishes"
    # 1. capacity: every plan is checked by the CapacityChecker hook; the engine's GPU-time
    # integral equals the per-job GPU-seconds and never exceeds capacity x time.
    assert result.gpu_seconds_allocated == pytest.approx(sum(r.gpu_seconds for r in result.jobs))
    assert result.gpu_seconds_allocated <= result.gpu_seconds_capacity + 1e-6
    work_done: dict[str, float] = defaultdict(float)
    for seg in executor.segments:
        work_done[seg.job_id] += seg.rate * max(0.0, seg.end - seg.start)
    for rec in result.jobs:
        spec = by_id[rec.job_id]
        # 2. every finished job did exactly its work (integrated from constant-rate segments)
        assert work_done[rec.job_id] - rec.lost_iterations == pytest.approx(spec.work, rel=1e-9)
        assert rec.done_iterations == pytest.approx(spec.work)
        # 3. JCT >= work / peak throughput
        peak = max(spec.throughput.rate(g) for g in range(1, cluster.total_gpus + 1))
        assert rec.jct >= spec.work / peak - 1e-9
        assert rec.queueing_time >= 0


def _mixed_jobs(seed: int, n: int) -> list[JobSpec]:
    """Rigid and elastic jobs with every checkpointing kind, so preemptions lose work."""
    rng = random.Random(seed)
    profile = ThroughputProfile(points={1: 1.0, 2: 1.9, 4: 3.4, 8: 5.5})
    jobs, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(1 / 40)
        kw: dict[str, object] = {}
        if rng.random() < 0.5:
            kw["elasticity"] = Elasticity(min_gpus=1, max_gpus=8)
        kw["checkpoint"] = Checkpointing(
            on_signal=rng.random() < 0.5, interval_s=rng.choice([None, 30.0])
        )
        jobs.append(
            JobSpec(
                id=f"j{i}",
                submit_time=round(t, 3),
                requested_gpus=rng.choice([1, 1, 2, 4, 8]),
                duration=rng.uniform(5, 300),
                throughput=profile,
                **kw,
            )
        )
    return jobs


OVERHEADS = Overheads(
    start_s=2.0, restart_s=15.0, resize_mode="stop_free", stop_free_s=0.5, migrate_s=8.0
)


@pytest.mark.parametrize("policy", ["fifo", "srtf", "afs-l", "max-min"])
@pytest.mark.parametrize("seed", [0, 1])
def test_des_invariants_with_overheads_and_node_failures(policy: str, seed: int) -> None:
    """The engine's allocations (which include jobs paused by start / restart / stop-free
    overheads: they hold their GPUs) never exceed the usable capacity at any instant, even while
    a failed node is out; every job still does exactly its work; JCT >= work / peak."""
    cluster = Cluster.uniform(4, 4)
    jobs = _mixed_jobs(seed, 80)
    # node001 is out over 300..700 and node002 over 500..800: both at once over 500..700
    failures = [
        NodeFailure(time=300, node="node001", recover_after=400),
        NodeFailure(time=500, node="node002", recover_after=300),
    ]
    executor = SimulatedCluster(cluster, jobs, OVERHEADS, failures, record_segments=True)
    checker = CapacityChecker()
    engine = Engine(
        cluster, make_policy(policy, seed=seed), executor, on_plan=checker, sample_interval_s=None
    )
    held: dict[str, list[tuple[float, int]]] = defaultdict(list)  # job -> (time, GPUs held)
    instants, min_capacity = 0, cluster.total_gpus
    while (batch := executor.next_events()) is not None:
        now, events = batch
        engine.handle(now, events)
        # Allocations only change inside handle(), so checking after each batch covers every
        # instant of the run.
        instants += 1
        taken: dict[str, set[int]] = defaultdict(set)
        for job in engine.running.values():
            assert job.allocation is not None
            for node, gpus in job.allocation.placement.items():
                assert node in engine.usable, f"{job.id} on unusable node {node} at {now}"
                assert not taken[node] & set(gpus), f"GPU held twice on {node} at {now}"
                assert all(0 <= g < engine.usable[node].gpus for g in gpus)
                taken[node].update(gpus)
        used = sum(job.gpus for job in engine.running.values())
        assert used <= engine.capacity, f"{used} GPUs allocated > capacity {engine.capacity}"
        min_capacity = min(min_capacity, engine.capacity)
        for job_id in {*held, *engine.running}:
            job = engine.running.get(job_id)
            held[job_id].append((now, job.gpus if job is not None else 0))
    result = engine.result()
    assert checker.plans > 0 and instants > len(jobs)
    assert min_capacity == 8 and engine.capacity == 16  # both nodes were out, both came back
    assert not result.rejected and len(result.jobs) == len(jobs)
    summary = summarize(result)
    assert summary.preemptions > 0  # the failures (at least) preempted running jobs
    assert result.gpu_seconds_allocated <= result.gpu_seconds_capacity + 1e-6
    by_id = {j.id: j for j in jobs}
    work_done: dict[str, float] = defaultdict(float)
    for seg in executor.segments:
        work_done[seg.job_id] += seg.rate * max(0.0, seg.end - seg.start)
        if seg.end > seg.start:
            # the executor only makes progress on GPUs the engine counts as held
            before = [g for t, g in held[seg.job_id] if t <= seg.start]
            assert before and before[-1] >= seg.gpus, (seg, before[-1:])
    for rec in result.jobs:
        spec = by_id[rec.job_id]
        assert rec.finish_time is not None, rec.job_id
        # exactly its work: progress integrated over constant-rate segments, minus what
        # preemptions rolled back to the last checkpoint
        assert work_done[rec.job_id] - rec.lost_iterations == pytest.approx(spec.work, rel=1e-9)
        peak = max(spec.throughput.rate(g) for g in range(1, cluster.total_gpus + 1))
        assert rec.jct >= spec.work / peak - 1e-9


def test_resize_during_start_pause_keeps_the_start_overhead(run_sim) -> None:
    ov = Overheads(start_s=2.0, resize_mode="stop_free", stop_free_s=0.5)
    elastic = Elasticity(min_gpus=1, max_gpus=4)
    jobs = [rigid("a", 0, 4, 100, elasticity=elastic), rigid("b", 0.5, 1, 100, elasticity=elastic)]
    _, _, executor = run_sim(Cluster.uniform(1, 4), jobs, "max-min", overheads=ov)
    # a starts at 0 and is shrunk at 0.5 (b arrives), still inside its 2 s start pause
    first = min(seg.start for seg in executor.segments if seg.job_id == "a" and seg.end > seg.start)
    # the start pause ends at 2.0; the shrink ordered at 0.5 then costs stop_free_s = 0.5
    assert first == pytest.approx(2.5)


def test_capacity_never_exceeded_at_any_instant(run_sim) -> None:
    cluster = Cluster.uniform(2, 4)
    jobs = _random_jobs(7, 120, 8)
    _, _, executor = run_sim(cluster, jobs, "srtf")
    points = sorted({s.start for s in executor.segments} | {s.end for s in executor.segments})
    for a, b in itertools.pairwise(points):
        mid = (a + b) / 2
        used = sum(s.gpus for s in executor.segments if s.start <= mid < s.end)
        assert used <= cluster.total_gpus


def _srpt_optimum(jobs: list[tuple[float, float]]) -> float:
    """Mean completion-minus-release of preemptive SRPT on one machine, by direct event stepping."""
    remaining = {i: p for i, (r, p) in enumerate(jobs)}
    release = {i: r for i, (r, _) in enumerate(jobs)}
    t, done = 0.0, {}
    while remaining:
        avail = [i for i in remaining if release[i] <= t]
        if not avail:
            t = min(release[i] for i in remaining)
            continue
        i = min(avail, key=lambda k: (remaining[k], release[k], k))
        nxt = min([release[k] for k in remaining if release[k] > t], default=float("inf"))
        run = min(remaining[i], nxt - t)
        t += run
        remaining[i] -= run
        if remaining[i] <= 1e-12:
            del remaining[i]
            done[i] = t
    return sum(done[i] - release[i] for i in done) / len(done)


def test_srtf_equals_hand_computed_srpt_optimum(run_sim) -> None:
    # One GPU, staggered arrivals: (release, processing). SRPT is optimal for mean flow time.
    # Hand computation: A runs 0-2 (rem 8); B arrives at 2 (4 < 8) runs 2-3; C arrives at 3
    # (1 < 3) runs 3-4; B resumes 4-7; D arrives at 5 (2 < rem B 2 at t=5 -> tie, earlier
    # submit B keeps) B ends 7, D 7-9, A 9-17. JCTs: A 17, B 5, C 1, D 4 -> mean 6.75.
    spec = [(0, 10), (2, 4), (3, 1), (5, 2)]
    jobs = [rigid(n, r, 1, p) for n, (r, p) in zip("ABCD", spec, strict=True)]
    result, _, _ = run_sim(Cluster.uniform(1, 1), jobs, "srtf")
    jct = {r.job_id: r.jct for r in result.jobs}
    assert jct == {"A": 17.0, "B": 5.0, "C": 1.0, "D": 4.0}
    assert sum(jct.values()) / 4 == 6.75 == _srpt_optimum(spec)


def test_srtf_matches_srpt_on_random_single_gpu_instances(run_sim) -> None:
    rng = random.Random(3)
    for _ in range(10):
        spec = [(float(rng.randint(0, 30)), float(rng.randint(1, 20))) for _ in range(8)]
        jobs = [rigid(f"j{i}", r, 1, p) for i, (r, p) in enumerate(spec)]
        result, _, _ = run_sim(Cluster.uniform(1, 1), jobs, "srtf")
        mean = sum(r.jct for r in result.jobs) / len(jobs)
        assert mean == pytest.approx(_srpt_optimum(spec))


def test_fifo_blocks_and_backfill_does_not(run_sim) -> None:
    cluster = Cluster.uniform(1, 4)
    jobs = [rigid("big0", 0, 3, 10), rigid("big1", 1, 4, 10), rigid("small", 2, 1, 5)]
    strict, _, _ = run_sim(cluster, jobs, "fifo")
    backfill, _, _ = run_sim(cluster, jobs, "fifo-backfill")
    s = {r.job_id: r for r in strict.jobs}
    b = {r.job_id: r for r in backfill.jobs}
    assert s["small"].first_start == 20.0  # waits behind big1 (10..20)
    assert b["small"].first_start == 2.0  # fills the free GPU at once
    assert s["big1"].first_start == b["big1"].first_start == 10.0


def test_overheads_and_checkpoint_loss(run_sim) -> None:
    cluster = Cluster.uniform(1, 1)
    ov = Overheads(start_s=2, restart_s=5)
    # long job without checkpointing gets preempted by a short one under SRTF
    long = rigid("long", 0, 1, 100, checkpoint=Checkpointing(on_signal=False, interval_s=None))
    short = rigid("short", 50, 1, 10)
    result, _, _ = run_sim(cluster, [long, short], "srtf", overheads=ov)
    r = {x.job_id: x for x in result.jobs}
    # long: starts at 0, progresses from 2 to 50 (48 it), preempted -> loses all 48.
    assert r["long"].lost_iterations == pytest.approx(48.0)
    # short: 50 + 2 start + 10 = 62; long restarts at 62 + 5 restart + 100 = 167
    assert r["short"].finish_time == pytest.approx(62.0)
    assert r["long"].finish_time == pytest.approx(167.0)
    # periodic checkpoints every 20 s: loses only 48 mod 20 = 8 iterations
    long2 = rigid("long", 0, 1, 100, checkpoint=Checkpointing(on_signal=False, interval_s=20))
    result2, _, _ = run_sim(cluster, [long2, short], "srtf", overheads=ov)
    assert {x.job_id: x for x in result2.jobs}["long"].lost_iterations == pytest.approx(8.0)


def test_node_failure_requeues_jobs(run_sim) -> None:
    cluster = Cluster.uniform(2, 2)
    jobs = [rigid("a", 0, 2, 100), rigid("b", 0, 2, 100)]
    fail = NodeFailure(time=10, node="node000", recover_after=50)
    result, _, _ = run_sim(cluster, jobs, "fifo", events=[fail])
    r = {x.job_id: x for x in result.jobs}
    assert all(x.finish_time is not None for x in result.jobs)
    victim = next(x for x in result.jobs if x.preemptions == 1)
    # graceless: on_signal checkpoints don't help, no interval -> all 10 s of work lost
    assert victim.lost_iterations == pytest.approx(20.0)
    assert victim.finish_time == pytest.approx(160.0)  # back at 60, 100 s of work again
    assert min(x.finish_time for x in r.values()) == pytest.approx(100.0)


def test_same_inputs_same_result(run_sim) -> None:
    cluster = Cluster.uniform(4, 4)
    jobs = _random_jobs(5, 100, 8)
    a, _, _ = run_sim(cluster, jobs, "srsf")
    b, _, _ = run_sim(cluster, jobs, "srsf")
    assert [r.model_dump() for r in a.jobs] == [r.model_dump() for r in b.jobs]


def test_impossible_job_is_rejected_and_reported(run_sim) -> None:
    # The library path keeps the engine's behaviour (refuse, don't crash), but the refusal is
    # reported in the result and the summary, not silently dropped.
    cluster = Cluster.uniform(1, 2)
    jobs = [rigid("ok", 0, 1, 10), rigid("huge", 0, 8, 10), rigid("ok", 1, 1, 10)]
    result, engine, _ = run_sim(cluster, jobs, "fifo-backfill")
    assert [job_id for job_id, _ in engine.rejected] == ["huge", "ok"]
    assert [r.job_id for r in result.jobs] == ["ok"]
    assert [job_id for job_id, _ in result.rejected] == ["huge", "ok"]
    assert "needs 8 GPUs" in result.rejected[0][1] and "duplicate" in result.rejected[1][1]
    summary = summarize(result)
    assert (summary.jobs, summary.rejected) == (1, 2)


def test_no_overheads_fixture_is_zero() -> None:
    assert NO_OVERHEADS.resize_cost() == 0


def test_loan_and_reclaim_shrink_elastic_and_preempt_rigid(run_sim) -> None:
    from gpuplan.models import Elasticity, LoanOffer, Node, ReclaimRequest

    cluster = Cluster(
        nodes=[
            Node(name="t0", gpus=2, pool="training"),
            Node(name="i0", gpus=2, pool="inference"),
            Node(name="i1", gpus=2, pool="inference"),
        ]
    )
    elastic = rigid("e", 0, 4, 100, elasticity=Elasticity(min_gpus=2, max_gpus=4))
    jobs = [rigid("r", 0, 2, 100), elastic]
    events = [
        LoanOffer(time=1, count=2),
        ReclaimRequest(time=20, count=2),
        LoanOffer(time=300, count=2),
    ]
    result, engine, _ = run_sim(cluster, jobs, "fifo-backfill", events=events)
    r = {x.job_id: x for x in result.jobs}
    # r starts at 0 on the training node; e waits until the loan at t=1 gives it i0 + i1.
    assert r["e"].first_start == 1.0
    assert engine.reclaim_log == [(20.0, ["i1", "i0"])]
    # both loaned servers go back: e (spans only loaned servers) cannot keep 2 GPUs -> preempted
    assert r["e"].preemptions == 1 and r["r"].preemptions == 0
    # rigid FIFO needs all 4 GPUs again: e restarts at the next loan (t=300), losing nothing
    assert r["e"].finish_time == pytest.approx(300 + 100 - 19)
    assert engine.on_loan == ["i0", "i1"]


def test_reclaim_shrinks_elastic_job_instead_of_preempting(run_sim) -> None:
    from gpuplan.models import Elasticity, LoanOffer, Node, ReclaimRequest

    cluster = Cluster(
        nodes=[Node(name="t0", gpus=2, pool="training"), Node(name="i0", gpus=2, pool="inference")]
    )
    elastic = rigid("e", 2, 4, 100, elasticity=Elasticity(min_gpus=2, max_gpus=4))
    events = [LoanOffer(time=1, count=1), ReclaimRequest(time=20, count=1)]
    result, engine, _ = run_sim(cluster, [elastic], "fifo-backfill", events=events)
    rec = result.jobs[0]
    assert rec.preemptions == 0 and rec.resizes == 1
    assert engine.capacity == 2


def test_job_failure_frees_gpus_and_is_recorded(run_sim) -> None:
    from gpuplan.models import JobFailure

    cluster = Cluster.uniform(1, 2)
    jobs = [rigid("bad", 0, 2, 100), rigid("next", 1, 2, 10)]
    result, _, _ = run_sim(
        cluster, jobs, "fifo", events=[JobFailure(time=5, job_id="bad", reason="exit 1")]
    )
    r = {x.job_id: x for x in result.jobs}
    assert r["bad"].failed and r["bad"].failure == "exit 1" and r["bad"].finish_time is None
    assert r["next"].first_start == 5.0 and r["next"].finish_time == 15.0
