"""The engine plans only moves its executor can carry out (``ExecutorCapabilities``)."""

from __future__ import annotations

import dataclasses

import pytest

from gpuplan.executors.engine import Engine
from gpuplan.executors.simulator.cluster import SimulatedCluster
from gpuplan.models import (
    Cluster,
    ClusterView,
    Elasticity,
    JobAllocation,
    JobSpec,
    Overheads,
    ThroughputProfile,
)
from gpuplan.solver_core.policy import Decision, PolicyBase


class _SwapIndices(PolicyBase):
    """Job ``a`` on GPUs 0-1 of node000 alone; once ``b`` arrives, ``b`` takes 0-1 and ``a``
    moves to 2-3 of the same node for good: a migrate that changes only GPU indices."""

    name = "swap-indices"

    def __init__(self) -> None:
        self.moved = False

    def decide(self, view: ClusterView) -> Decision:
        placements: dict[str, JobAllocation] = {}
        self.moved = self.moved or "b" in view.running or "b" in view.pending
        if self.moved:
            placements["a"] = JobAllocation(job_id="a", placement={"node000": (2, 3)})
            placements["b"] = JobAllocation(job_id="b", placement={"node000": (0, 1)})
        else:
            placements["a"] = JobAllocation(job_id="a", placement={"node000": (0, 1)})
        live = {**view.running, **view.pending}
        placements = {j: p for j, p in placements.items() if j in live}
        return Decision(shares={j: p.gpus for j, p in placements.items()}, placements=placements)


@pytest.mark.parametrize("pin_gpus", [True, False])
def test_index_only_migrations_are_relabelled_when_the_executor_cannot_pin(pin_gpus: bool) -> None:
    cluster = Cluster.uniform(1, 4)
    linear = ThroughputProfile.linear(1.0)
    jobs = [
        JobSpec(id="a", submit_time=0, requested_gpus=2, total_iterations=200, throughput=linear),
        JobSpec(id="b", submit_time=10, requested_gpus=2, total_iterations=100, throughput=linear),
    ]
    overheads = Overheads(start_s=0, restart_s=0, migrate_s=30.0, stop_free_s=0)
    executor = SimulatedCluster(cluster, jobs, overheads)
    executor.capabilities = dataclasses.replace(executor.capabilities, pin_gpus=pin_gpus)
    engine = Engine(cluster, _SwapIndices(), executor, sample_interval_s=None)
    engine.run()
    a = {r.job_id: r for r in engine.result().jobs}["a"]
    if pin_gpus:  # a real migration: counted, and 30 s without progress
        assert a.migrations == 1 and a.finish_time == pytest.approx(100.0 + 30.0)
    else:  # same node, same count: only the engine's labels change, at no cost
        assert a.migrations == 0 and a.finish_time == pytest.approx(100.0)
    # Either way the engine's books end consistent: every GPU free again.
    assert engine.running == {} and all(len(g) == 4 for g in engine.free.values())


class _GrowWhenAlone(PolicyBase):
    """``a`` on GPUs 0-1 and ``b`` on 2-3; once ``b`` is gone, ``a`` grows onto all four."""

    name = "grow-when-alone"

    def decide(self, view: ClusterView) -> Decision:
        live = {**view.running, **view.pending}
        placements: dict[str, JobAllocation] = {}
        if "b" in live:
            placements["b"] = JobAllocation(job_id="b", placement={"node000": (2, 3)})
            placements["a"] = JobAllocation(job_id="a", placement={"node000": (0, 1)})
        elif "a" in live:
            placements["a"] = JobAllocation(job_id="a", placement={"node000": (0, 1, 2, 3)})
        placements = {j: p for j, p in placements.items() if j in live}
        return Decision(shares={j: p.gpus for j, p in placements.items()}, placements=placements)


@pytest.mark.parametrize(
    ("restart_s", "grows", "finish"),
    [
        (30.0, 1, 5.0 + 30.0 + 190.0 / 4),  # 30 + 47.5 s < 95 s at 2 GPUs: the grow pays
        (60.0, 0, 100.0),  # 60 + 47.5 s >= 95 s: dropped, a keeps 2 GPUs
    ],
)
def test_a_grow_that_cannot_pay_for_its_restart_is_not_carried_out(
    restart_s: float, grows: int, finish: float
) -> None:
    cluster = Cluster.uniform(1, 4)
    linear = ThroughputProfile.linear(1.0)
    elastic = Elasticity(min_gpus=1, max_gpus=4)
    jobs = [
        JobSpec(
            id="a",
            submit_time=0,
            requested_gpus=2,
            total_iterations=200,
            throughput=linear,
            elasticity=elastic,
        ),
        JobSpec(id="b", submit_time=0, requested_gpus=2, total_iterations=10, throughput=linear),
    ]
    overheads = Overheads(start_s=0, resize_mode="checkpoint_restart", restart_s=restart_s)
    executor = SimulatedCluster(cluster, jobs, overheads)
    assert executor.capabilities.resize == "restart"
    assert executor.capabilities.restart_latency_s == restart_s
    engine = Engine(cluster, _GrowWhenAlone(), executor, sample_interval_s=None)
    engine.run()
    a = {r.job_id: r for r in engine.result().jobs}["a"]
    assert a.resizes == grows and engine.skipped_grows == 1 - grows
    assert a.finish_time == pytest.approx(finish)
