"""Themis answers the engine's fast path with only the jobs whose count changed.

* at every decision of a simulated run with short leases (expiries, regrowth, preemptions),
  the plan built from the stage's :class:`Delta` lists the same actions, in the same order, as
  the plan the full protocol builds from the same shares (best fit over every job,
  ``build_plan``), and the stage's candidate list names every job whose count changed;
* whole runs decided on the fast path give the very same ``RunResult`` as the same policy
  forced onto the full protocol, on uniform and mixed clusters and with node failures;
* a deliberately wrong candidate list (the leftover spread's jobs forgotten) fails: verify
  mode raises ``ChangeSetMissed`` naming a job, and without it the plans differ;
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
    SolverStats,
)
from gpuplan.solver_core import change_verify
from gpuplan.solver_core.diff import build_delta_plan, build_plan
from gpuplan.solver_core.hooks import DeltaStage
from gpuplan.solver_core.placement.best_fit import best_fit_placement
from gpuplan.solver_core.placement.network_packing import packed_placement
from gpuplan.solver_core.policies.baselines.themis import Themis
from gpuplan.solver_core.policies.baselines.themis_delta import shares_delta
from gpuplan.solver_core.policy import Decision, Delta, Shares, StagedPolicy
from gpuplan.solver_core.registry import make_policy
from tests.bench.afs_scale import workload


def _actions(plan: Any) -> list[tuple[str, str, Any, Any]]:
    return [(a.kind, a.job_id, a.before, a.after) for a in plan.actions]


class _Checked:
    """Themis' fast path, checked against the full protocol on the same shares each time."""

    def __init__(self, stage: Themis) -> None:
        self.stage = stage
        self.policy = StagedPolicy(
            "themis", stage, best_fit_placement, stage.next_wakeup, memory=stage
        )
        self.name = "themis"
        self.reclaimer = None
        self.deltas = 0
        self.moved = 0
        self.stopped = 0
        self.started = 0

    def decide_delta(self, view: ClusterView) -> Delta | Decision | None:
        stats: list[SolverStats] = []
        shares = self.stage(view, stats)
        got = shares_delta(view, shares, self.stage._touched, best_fit_placement, stats)
        assert isinstance(got, Delta)
        full = Decision(shares=shares, placements=best_fit_placement(view, shares, []))
        assert _actions(build_delta_plan(view, got, "x")) == _actions(build_plan(view, full, "x"))
        self.deltas += 1
        self.moved += len(got.moves)
        self.stopped += len(got.preempts)
        self.started += len(got.starts)
        return got

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)


@pytest.fixture(params=[True, False], ids=["verify", "plain"])
def verify(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setattr(change_verify, "VERIFY", request.param)
    return bool(request.param)


def test_themis_delta_plans_equal_the_full_protocol_at_every_decision(verify: bool) -> None:
    checked = _Checked(Themis(lease_s=1800.0, fairness_knob=0.5, seed=3))
    result, _, _ = simulate(
        Cluster.uniform(4, 8), workload(40, 80, seed=5), checked, sample_interval_s=None
    )
    assert all(r.jct is not None for r in result.jobs)
    assert checked.deltas >= 150
    assert checked.moved >= 20  # lease expiries shrink jobs, auctions grow them
    assert checked.stopped >= 5 and checked.started >= 100


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


@pytest.mark.parametrize("case", ["uniform", "mixed", "failures"])
def test_delta_runs_equal_full_protocol_runs(case: str, verify: bool) -> None:
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
    name = "themis(lease_s=1200.0)"
    fast = make_policy(name, seed=2)
    assert isinstance(fast, StagedPolicy) and isinstance(fast.allocation, DeltaStage)
    calls = {"decide": 0}
    original = fast.decide

    def counted(view: Any) -> Any:
        calls["decide"] += 1
        return original(view)

    object.__setattr__(fast, "decide", counted)
    a, engine, _ = simulate(cluster, jobs, fast, events=events, horizon_s=30 * 3600.0)
    slow = _full_protocol(make_policy(name, seed=2))
    b, _, _ = simulate(cluster, jobs, slow, events=events, horizon_s=30 * 3600.0)
    assert a.events == b.events and len(a.jobs) == len(b.jobs) == len(jobs)
    assert _digest(a) == _digest(b)
    assert calls["decide"] == 0 and len(engine.decision_ms) > 100
    assert sum(r.resizes for r in a.jobs) > 0


class _Forgetful(Themis):
    """A deliberately wrong candidate list: the leftover spread's jobs are not reported."""

    def _spread(self, view, shares, order, free):  # type: ignore[no-untyped-def]
        mark = len(self._touched)
        left = super()._spread(view, shares, order, free)
        del self._touched[mark:]
        return left


def test_a_forgotten_candidate_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, jobs = Cluster.uniform(4, 8), workload(40, 80, seed=5)
    monkeypatch.setattr(change_verify, "VERIFY", True)
    with pytest.raises(change_verify.ChangeSetMissed, match="left out job"):
        simulate(cluster, jobs, _Checked(_Forgetful(lease_s=1800.0)), sample_interval_s=None)
    monkeypatch.setattr(change_verify, "VERIFY", False)
    with pytest.raises(AssertionError):  # the plans differ from the full protocol's
        simulate(cluster, jobs, _Checked(_Forgetful(lease_s=1800.0)), sample_interval_s=None)


def _view() -> ClusterView:
    return ClusterState(
        now=0.0,
        cluster=Cluster.uniform(2, 8),
        jobs=[JobSnapshot(spec=s) for s in workload(6, 0, seed=2)],
    ).to_view()


def test_another_placement_stage_gets_the_full_decision() -> None:
    view = _view()
    got = Themis().delta(view, packed_placement)
    assert isinstance(got, Decision) and got.shares
    assert got.placements == packed_placement(view, got.shares, [])
    fast = Themis().delta(view, best_fit_placement)
    assert isinstance(fast, Delta) and not fast.preempts and not fast.moves
    assert fast.starts == best_fit_placement(view, got.shares, [])


def test_shares_delta_names_only_changed_jobs() -> None:
    view = _view()
    shares: Shares = Themis()(view, [])
    ids = sorted(shares)
    got = shares_delta(view, shares, ids + ids, best_fit_placement, [])  # duplicates allowed
    assert isinstance(got, Delta) and sorted(got.starts) == ids
    empty = shares_delta(view, {}, ids, best_fit_placement, [])
    assert isinstance(empty, Delta) and not empty.starts
