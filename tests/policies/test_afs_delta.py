"""The AFS stages answer the engine's fast path with only the jobs whose count changed.

* at every decision of simulated runs (arrivals, completions, resizes, time slicing), the plan
  built from the stage's :class:`Delta` lists the same actions, in the same order, as the
  plan the full protocol builds on the same view (best fit over every job, ``build_plan``)
  with a stage rebuilt from scratch (AFS-L) or restored from the previous counters (AFS-P);
* whole runs decided on the fast path give the very same ``RunResult`` as the same policies
  forced onto the full protocol, on uniform and mixed clusters and with node failures;
* a view the delta cannot stand for (another placement stage) gets the full decision.

Verify mode is set explicitly (the suite may run with it on or off).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any

import pytest

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import (
    Cluster,
    ClusterState,
    ClusterView,
    JobSnapshot,
    Node,
    NodeFailure,
    RunResult,
)
from gpuplan.solver_core import change_verify
from gpuplan.solver_core.diff import build_delta_plan, build_plan
from gpuplan.solver_core.hooks import DeltaStage
from gpuplan.solver_core.placement.best_fit import best_fit_placement
from gpuplan.solver_core.placement.network_packing import packed_placement
from gpuplan.solver_core.policies.afs.afs import AfsL, AfsP, AfsS
from gpuplan.solver_core.policy import Decision, Delta, StagedPolicy
from gpuplan.solver_core.registry import make_policy
from tests.bench.afs_scale import workload


def _actions(plan: Any) -> list[tuple[str, str, Any, Any]]:
    return [(a.kind, a.job_id, a.before, a.after) for a in plan.actions]


class _CheckedL:
    """AFS-L's fast path, checked against a from-scratch stage's full decision each time."""

    def __init__(self) -> None:
        self.policy = StagedPolicy("afs-l", AfsL(), best_fit_placement)
        self.name = "afs-l"
        self.reclaimer = None
        self.deltas = 0
        self.moved = 0
        self.stopped = 0

    def fresh(self) -> StagedPolicy:
        return StagedPolicy("afs-l", AfsL(), best_fit_placement)

    def decide_delta(self, view: ClusterView) -> Delta | Decision | None:
        full = self.fresh().decide(view)  # before the stage: both read the same view
        got = self.policy.decide_delta(view)
        assert isinstance(got, Delta)
        assert _actions(build_delta_plan(view, got, "x")) == _actions(build_plan(view, full, "x"))
        self.deltas += 1
        self.moved += len(got.moves)
        self.stopped += len(got.preempts)
        return got

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)


class _CheckedP(_CheckedL):
    """AFS-P (or AFS-S): the full decision from a fresh stage given the previous counters."""

    def __init__(self, cls: type[AfsP]) -> None:
        self.cls = cls
        self.stage = cls(unit_time=900.0, seed=3)
        self.policy = StagedPolicy(
            "afs-p", self.stage, best_fit_placement, self.stage.next_wakeup, memory=self.stage
        )
        self.name = "afs-p"
        self.reclaimer = None
        self.deltas = 0
        self.moved = 0
        self.stopped = 0
        self.slicing = 0

    def fresh(self) -> StagedPolicy:
        stage = self.cls(unit_time=900.0, seed=3)
        stage.restore(self.stage.snapshot())
        return StagedPolicy("afs-p", stage, best_fit_placement, memory=stage)

    def decide_delta(self, view: ClusterView) -> Delta | Decision | None:
        got = super().decide_delta(view)
        self.slicing += self.stage.time_slicing
        return got


@pytest.fixture(params=[True, False], ids=["verify", "plain"])
def verify(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setattr(change_verify, "VERIFY", request.param)
    return bool(request.param)


def test_afs_l_delta_plans_equal_the_full_protocol_at_every_decision(verify: bool) -> None:
    checked = _CheckedL()
    result, _, _ = simulate(
        Cluster.uniform(8, 8), workload(40, 80, seed=5), checked, sample_interval_s=None
    )
    assert all(r.jct is not None for r in result.jobs)
    assert checked.deltas >= 150
    assert checked.moved >= 100  # resizes (shrinks and grows), not only starts and stops
    assert checked.policy.allocation.columns.full_syncs <= 2


@pytest.mark.parametrize("cls", [AfsP, AfsS], ids=["afs-p", "afs-s"])
def test_afs_p_delta_plans_equal_the_full_protocol_at_every_decision(
    verify: bool, cls: type[AfsP]
) -> None:
    checked = _CheckedP(cls)
    simulate(
        Cluster.uniform(2, 8),  # 16 GPUs for 40+ jobs: time slicing by counters
        workload(40, 80, seed=11),
        checked,
        sample_interval_s=None,
        horizon_s=40 * 3600.0,
    )
    assert checked.deltas >= 150
    assert checked.slicing >= 100  # first steps only: preemptions, no resizes
    assert checked.stopped >= 10


def _digest(result: RunResult) -> str:
    data = result.model_dump(mode="json", exclude={"decision_ms", "solver_ms", "wall_s"})
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _full_protocol(policy: StagedPolicy) -> StagedPolicy:
    """The same policy with its allocation stage behind a plain function: no ``delta``."""
    stage = policy.allocation
    return replace(policy, allocation=lambda view, stats: stage(view, stats))


def _cluster(case: str) -> Cluster:
    if case == "mixed":
        sizes = [8, 8, 4, 4, 2, 8, 1, 4]
        return Cluster(nodes=[Node(name=f"m{i}", gpus=g) for i, g in enumerate(sizes)])
    return Cluster.uniform(6, 8)


@pytest.mark.parametrize("policy", ["afs-l", "afs-p", "afs-s", "max-min"])
@pytest.mark.parametrize("case", ["uniform", "mixed", "failures"])
def test_delta_runs_equal_full_protocol_runs(policy: str, case: str) -> None:
    cluster = _cluster(case)
    names = [n.name for n in cluster.nodes]
    events = (
        [
            NodeFailure(time=1800.0 * (k + 1), node=names[k % len(names)], recover_after=1800.0)
            for k in range(4)
        ]
        if case == "failures"
        else []
    )
    jobs = workload(30, 60, seed=7)
    fast = make_policy(policy)
    if policy == "max-min":  # its fast path declines below SMALL GPUs: take it here
        fast.allocation.SMALL = 0  # type: ignore[union-attr]
    assert isinstance(fast, StagedPolicy) and isinstance(fast.allocation, DeltaStage)
    calls = {"decide": 0}
    original = fast.decide

    def counted(view: Any) -> Any:
        calls["decide"] += 1
        return original(view)

    object.__setattr__(fast, "decide", counted)
    a, engine, _ = simulate(cluster, jobs, fast, events=events, horizon_s=30 * 3600.0)
    b, _, _ = simulate(
        cluster, jobs, _full_protocol(make_policy(policy)), events=events, horizon_s=30 * 3600.0
    )
    assert a.events == b.events and len(a.jobs) == len(b.jobs) == len(jobs)
    assert _digest(a) == _digest(b)
    assert calls["decide"] == 0 and len(engine.decision_ms) > 100
    assert sum(r.resizes for r in a.jobs) > 0


def test_another_placement_stage_gets_the_full_decision() -> None:
    view = ClusterState(
        now=0.0,
        cluster=Cluster.uniform(2, 8),
        jobs=[JobSnapshot(spec=s) for s in workload(6, 0, seed=2)],
    ).to_view()
    got = AfsL().delta(view, packed_placement)
    assert isinstance(got, Decision) and got.shares
    assert got.placements == packed_placement(view, got.shares, [])
    fast = AfsL().delta(view, best_fit_placement)
    assert isinstance(fast, Delta) and not fast.preempts and not fast.moves
    assert fast.starts == best_fit_placement(view, got.shares, [])
