"""EDL straggler mitigation (003 digest §2.3) and transient idle GPUs (§2.6) in the simulator."""

from __future__ import annotations

import pytest

from gpuplan.executors.engine import Engine
from gpuplan.executors.simulator.run import simulate
from gpuplan.executors.simulator.stragglers import (
    Straggler,
    StragglerCluster,
    StragglerDetector,
    batches_to_detect,
)
from gpuplan.models import CapacityChange, Cluster, Elasticity, JobSpec, Node, Overheads
from gpuplan.solver_core.registry import make_policy


def _job(gpus: int = 16, work: float = 16_000.0, **kw: object) -> JobSpec:
    return JobSpec(id="j", submit_time=0.0, requested_gpus=gpus, total_iterations=work, **kw)


def test_detector_flags_only_after_window_consecutive_slow_batches() -> None:
    det = StragglerDetector(threshold=1.2, window=10)
    normal = {f"w{i}": 1.0 for i in range(15)}
    for _ in range(9):
        assert det.observe({**normal, "slow": 1.3}) == set()
    assert det.observe({**normal, "slow": 1.3}) == {"slow"}
    det2 = StragglerDetector()
    for _ in range(9):
        det2.observe({**normal, "slow": 1.3})
    det2.observe({**normal, "slow": 1.1})  # one normal batch resets the count
    assert det2.observe({**normal, "slow": 1.3}) == set()
    # 1.15x the median is not a straggler under the 1.2 rule
    assert batches_to_detect({"a": 1.0, "b": 1.0, "c": 1 / 1.15}, 1.2, 10, 0.0, 0) == (
        10_000,
        set(),
    )


def _run(mitigate: bool) -> tuple[StragglerCluster, float]:
    cluster = Cluster.uniform(2, 8, "v100")
    job = _job()
    ex = StragglerCluster(
        cluster, [job], [Straggler("node001", 3, 0.75)], mitigate=mitigate, removal_s=2.0, seed=1
    )
    engine = Engine(cluster, make_policy("fifo"), ex, sample_interval_s=None)
    engine.run()
    (rec,) = engine.result().jobs
    assert rec.finish_time is not None
    return ex, rec.finish_time


def test_straggler_removed_and_job_speeds_up_like_the_paper() -> None:
    """A 16-GPU job with one worker at 75 % runs at 75 %; EDL's rule removes it after 10
    mini-batches (+ 2 s) and the job runs at 15/16 = 94 % (paper: 75 % -> 94 %)."""
    ex, finish = _run(mitigate=True)
    (det,) = ex.detections
    assert det.gpus == (("node001", 3),)
    full = 16.0  # linear profile: 1 it/s per GPU
    assert det.rate_before == pytest.approx(0.75 * full)
    assert det.rate_after == pytest.approx(15.0)
    assert det.rate_after / full == pytest.approx(0.9375)
    # detected after exactly 10 mini-batches of the slowed job (1 / 12 s each), < 10 s
    assert det.detected_at == pytest.approx(10 / 12.0)
    assert det.removed_at - det.detected_at == pytest.approx(2.0)
    done_slow = 12.0 * det.removed_at
    assert finish == pytest.approx(det.removed_at + (16_000 - done_slow) / 15.0)
    _, finish_unmitigated = _run(mitigate=False)
    assert finish_unmitigated == pytest.approx(16_000 / 12.0)
    assert finish < finish_unmitigated


def _transient(overheads: Overheads, policy: str, horizon: float = 3600.0) -> float:
    """Work done by a 4-GPU ResNet50-like job with one extra GPU lent for 4 minutes and taken
    back, every 5 minutes (003 §6.2, Fig. 14b)."""
    cluster = Cluster(
        nodes=[Node(name="persist", gpus=4), Node(name="idle", gpus=1, pool="inference")]
    )
    curve = {1: 1.0, 2: 1.95, 4: 3.8, 5: 4.5}  # S(5)/S(4) = 1.18 (digest §2.6 check)
    job = JobSpec(
        id="r50",
        submit_time=0.0,
        requested_gpus=4,
        total_iterations=1e6,
        elasticity=Elasticity(min_gpus=4, max_gpus=5),
        throughput={"points": curve},
    )
    events = []
    for k in range(int(horizon // 300)):
        events.append(CapacityChange(time=k * 300 + 30.0, change="loan", nodes=("idle",)))
        events.append(CapacityChange(time=k * 300 + 270.0, change="reclaim", nodes=("idle",)))
    _, engine, _ = simulate(
        cluster,
        [job],
        make_policy(policy),
        overheads=overheads,
        events=events,
        horizon_s=horizon,
        sample_interval_s=None,
    )
    return engine.running["r50"].done_at(horizon) if "r50" in engine.running else 1e6


def test_transient_gpus_edl_near_ideal_stop_resume_worse_than_not_using_them() -> None:
    baseline = _transient(Overheads(), "tiresias-l")
    ideal = _transient(Overheads(resize_mode="stop_free", stop_free_s=0.0), "elastic-tiresias")
    edl = _transient(
        Overheads(resize_mode="stop_free", stop_free_s=0.8, resize_down_s=0.0), "elastic-tiresias"
    )
    sr = _transient(Overheads(resize_mode="checkpoint_restart", restart_s=50.0), "elastic-tiresias")
    assert ideal > edl > baseline > sr
    assert edl / ideal >= 0.97
