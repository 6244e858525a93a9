"""The declared policy interface (solver_core/hooks.py): optional hooks are Protocols, views are
read-only, and every stage declares how its state is saved, so that EVERY registered policy
(presets included) and the wrappers on stateful bases survive a snapshot -> JSON -> restore
round trip mid-run, deciding exactly as the original from there on."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuplan.executors.engine import Engine
from gpuplan.executors.simulator.cluster import SimulatedCluster
from gpuplan.models import (
    ActiveJob,
    Cluster,
    ClusterView,
    Elasticity,
    JobSpec,
    SolverStats,
    ThroughputProfile,
)
from gpuplan.models.scenario import LearningSpec
from gpuplan.solver_core.hooks import (
    BoundReporting,
    DeltaPolicy,
    DeltaStage,
    Foreseeing,
    ResizePreference,
    Stateful,
    Stateless,
)
from gpuplan.solver_core.placement.best_fit import best_fit_placement
from gpuplan.solver_core.policy import Decision, PolicyBase, Shares, StagedPolicy
from gpuplan.solver_core.registry import make_policy, policy_names

WRAPPED = [
    "tiresias-l(wrappers=[learning])",
    "afs-p(wrappers=[co-location])",
    "themis(wrappers=[first-fit])",
    "tiresias-l(wrappers=[network-packing])",
    "afs-s(wrappers=[reuse])",
    "tiresias-l(wrappers=[ojpp])",
    "elastic-tiresias(wrappers=[reuse, learning])",
]
"""Wrappers on stateful bases (the registry's presets cover them on AFS-L, SRTF, FIFO, ...)."""

SWAP_AT = 9
"""The decision before which the policy is replaced by a restored copy (mid-run: every policy
has made several decisions and still has jobs queued and running)."""

FEW_JOBS = {"offline-optimal": 6}
"""Policies run on the first jobs only: offline-optimal solves the instance exactly (three
times per test: the straight run, the restarted run, and the restored copy's ``foresee``)."""

CONCAVE = ThroughputProfile(points={1: 1.0, 2: 1.8, 4: 3.0, 8: 4.2})


def workload() -> list[JobSpec]:
    """12 jobs on two 8-GPU nodes (offline-optimal's size): rigid and elastic, arriving in
    bursts so queues form, jobs are preempted and counters, leases and queues matter."""
    rows = [
        ("a", 4, 9000, 0, (1, 8)),
        ("b", 8, 7000, 0, None),
        ("c", 2, 2500, 0, (1, 4)),
        ("d", 4, 6000, 300, None),
        ("e", 1, 1500, 600, (1, 2)),
        ("f", 2, 9000, 900, (2, 8)),
        ("g", 1, 400, 1200, None),
        ("h", 4, 3000, 1500, (1, 8)),
        ("i", 2, 1200, 3600, None),
        ("j", 8, 5000, 4000, (4, 8)),
        ("k", 1, 800, 7000, None),
        ("l", 2, 2000, 7200, (1, 4)),
    ]
    return [
        JobSpec(
            id=job_id,
            submit_time=at,
            requested_gpus=gpus,
            total_iterations=work,
            elasticity=Elasticity(min_gpus=el[0], max_gpus=el[1]) if el else None,
            throughput=CONCAVE,
        )
        for job_id, gpus, work, at, el in rows
    ]


def _fresh(config: str, cluster: Cluster, jobs: list[JobSpec]) -> Any:
    policy = make_policy(config, seed=3)
    if isinstance(policy, Foreseeing):  # offline-optimal is told the future, then replays
        policy.foresee(cluster, jobs)
    return policy


def _records(engine: Engine) -> list[tuple[Any, ...]]:
    """What a decision changes, per job: when it ends, how often it was stopped or resized,
    the GPU time it held."""
    return [
        (r.job_id, r.finish_time, r.preemptions, r.resizes, r.gpu_seconds)
        for r in engine.result().jobs
    ]


def _run(config: str, swap_at: int | None) -> tuple[list[tuple[Any, ...]], dict[str, Any], int]:
    """Simulate; before the ``swap_at``-th decision replace the policy by a freshly built one
    restored from the old one's JSON snapshot (what a controller restart does). Returns the
    job records, the final snapshot and the number of decisions."""
    cluster, jobs = Cluster.uniform(2, 8), workload()[: FEW_JOBS.get(config)]
    learning = LearningSpec(enabled=True) if "learning" in config else None
    executor = SimulatedCluster(cluster, jobs, learning=learning, seed=3)
    engine = Engine(cluster, _fresh(config, cluster, jobs), executor, sample_interval_s=None)
    engine.check_delta_plans = True
    decisions = 0
    while (batch := executor.next_events()) is not None:
        decisions += 1
        if decisions == swap_at:
            state = json.loads(json.dumps(engine.policy.snapshot()))
            restored = _fresh(config, cluster, jobs)
            restored.restore(state)
            engine.policy = restored
            engine._timer_at = None  # a restarted controller re-arms its wake-ups
        engine.handle(*batch)
    return _records(engine), json.loads(json.dumps(engine.policy.snapshot())), decisions


@pytest.mark.parametrize("config", [*policy_names(), *WRAPPED])
def test_every_policy_round_trips_its_snapshot(config: str) -> None:
    straight, end_state, decisions = _run(config, None)
    swap_at = SWAP_AT if config not in FEW_JOBS else decisions // 2
    assert decisions > swap_at + 3, "the swap falls mid-run"
    assert all(record[1] is not None for record in straight), "every job finishes"
    restarted, restarted_end, _ = _run(config, swap_at)
    assert restarted == straight
    assert restarted_end == end_state


def test_the_round_trip_can_fail_without_the_memory() -> None:
    """The test above is not vacuous on this workload: Tiresias-L built fresh at the swap,
    without its queues, decides differently."""
    straight, _, _ = _run("tiresias-l", None)
    cluster, jobs = Cluster.uniform(2, 8), workload()
    executor = SimulatedCluster(cluster, jobs, seed=3)
    engine = Engine(cluster, make_policy("tiresias-l", seed=3), executor, sample_interval_s=None)
    decisions = 0
    while (batch := executor.next_events()) is not None:
        decisions += 1
        if decisions == SWAP_AT:
            engine.policy = make_policy("tiresias-l", seed=3)  # memory lost
            engine._timer_at = None
        engine.handle(*batch)
    assert _records(engine) != straight


def test_aryls_random_reclaim_continues_its_draws_after_a_restore() -> None:
    """Aryl's random reclaim draws from one seeded generator for the whole run: the restored
    policy continues the same sequence (before, a restart re-seeded it). The workload above
    has no loaned servers, so this is checked on the generator directly."""
    policy = make_policy("aryl-loaning-random", seed=7)
    for _ in range(5):
        policy.reclaimer.rng.random()  # five reclaims' draws
    state = json.loads(json.dumps(policy.snapshot()))
    assert "rng" in state["reclaimer"]
    restored, forgot = (
        make_policy("aryl-loaning-random", seed=7),
        make_policy("aryl-loaning-random", seed=7),
    )
    restored.restore(state)
    ahead = [policy.reclaimer.rng.random() for _ in range(3)]
    assert [restored.reclaimer.rng.random() for _ in range(3)] == ahead
    assert [forgot.reclaimer.rng.random() for _ in range(3)] != ahead
    assert "reclaimer" not in make_policy("aryl").snapshot()  # the greedy keeps no generator


# ------------------------------------------------------------------ state declarations
class _Counting:
    """A stage with state (a decision counter) that declares nothing."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        self.calls += 1
        return {}


class _Saved(_Counting):
    def snapshot(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def restore(self, state: dict[str, Any]) -> None:
        self.calls = int(state["calls"])


class _Plain(_Counting, Stateless):
    """The same class declared stateless (its counter is, say, only a statistic)."""


def test_a_stage_with_undeclared_state_is_refused_at_construction() -> None:
    with pytest.raises(TypeError, match="_Counting, declared neither Stateless nor Stateful"):
        StagedPolicy("counting", _Counting(), best_fit_placement)
    stage = _Counting()

    def closure(view: ClusterView, stats: list[SolverStats]) -> Shares:
        return stage(view, stats)

    with pytest.raises(TypeError, match="closure holds _Counting"):
        StagedPolicy("closure", closure, best_fit_placement)
    with pytest.raises(TypeError, match="wakeup stage"):
        StagedPolicy("wakeup", _Plain(), best_fit_placement, wakeup=stage)  # type: ignore[arg-type]


def test_a_stateful_stage_must_be_the_policys_memory() -> None:
    saved = _Saved()
    assert isinstance(saved, Stateful)
    with pytest.raises(TypeError, match="keeps state but is not the policy's memory"):
        StagedPolicy("forgot", saved, best_fit_placement)  # the bug this declaration prevents
    policy = StagedPolicy("kept", saved, best_fit_placement, memory=saved)
    saved.calls = 4
    assert policy.snapshot() == {"calls": 4}
    plain = StagedPolicy("plain", _Plain(), best_fit_placement)
    assert plain.snapshot() == {}


def test_wrappers_keep_the_declaration() -> None:
    """A wrapper's ``replace`` re-checks the stages; the memory stays the base's stage."""
    base = make_policy("tiresias-l")
    for config in ("tiresias-l(wrappers=[learning])", "tiresias-l-packed"):
        wrapped = make_policy(config)
        assert type(wrapped.memory) is type(base.memory)
        assert wrapped.allocation is not wrapped.memory


# ------------------------------------------------------------------ hooks as Protocols
def test_hooks_are_declared_protocols() -> None:
    fifo, learning = make_policy("fifo"), make_policy("afs-l-learning")
    assert isinstance(fifo, DeltaPolicy) and isinstance(fifo.allocation, DeltaStage)
    assert not isinstance(learning.allocation, DeltaStage)  # the wrapper dropped the fast path
    view = ClusterView(0.0, Cluster.uniform(1, 4), {}, {}, {}, {})
    assert learning.decide_delta(view) is None
    assert isinstance(make_policy("edl-elastic"), ResizePreference)
    assert make_policy("edl-elastic").wants_in_place_resize
    assert not make_policy("srtf").wants_in_place_resize
    offline = make_policy("offline-optimal")
    assert isinstance(offline, Foreseeing) and isinstance(offline, BoundReporting)
    assert not isinstance(fifo, Foreseeing) and not isinstance(fifo, BoundReporting)


# ------------------------------------------------------------------ read-only views
class _Meddler(PolicyBase):
    """Tries to change the engine's books through the view at every decision."""

    name = "meddler"

    def __init__(self) -> None:
        self.refused: list[str] = []

    def decide(self, view: ClusterView) -> Decision:
        attempts = {
            "pop running": lambda: view.running.pop(next(iter(view.running))),  # type: ignore[attr-defined]
            "clear pending": lambda: view.pending.clear(),  # type: ignore[attr-defined]
            "add pending": lambda: view.pending.__setitem__("ghost", None),  # type: ignore[attr-defined]
            "del running": lambda: view.running.__delitem__(next(iter(view.running))),  # type: ignore[attr-defined]
        }
        for what, attempt in attempts.items():
            if what.endswith("running") and not view.running:
                continue
            try:
                attempt()
            except (TypeError, AttributeError):
                self.refused.append(what)
        fifo = make_policy("fifo")
        return fifo.decide(view)


def test_a_policy_cannot_change_the_engines_books_through_its_view() -> None:
    cluster, jobs = Cluster.uniform(2, 8), workload()
    policy = _Meddler()
    executor = SimulatedCluster(cluster, jobs, seed=3)
    engine = Engine(cluster, policy, executor, sample_interval_s=None)
    engine.run()
    assert {"pop running", "clear pending", "add pending", "del running"} <= set(policy.refused)
    finished = {r.job_id for r in engine.result().jobs if r.finish_time is not None}
    assert finished == {j.id for j in jobs}  # the books were never touched
    for live in (False, True):  # the delta path's live view too
        view = engine.view(0.0, live=live)
        with pytest.raises(TypeError):
            view.pending["x"] = ActiveJob(spec=jobs[0])  # type: ignore[index]


def test_views_share_the_books_without_copying() -> None:
    """O(1) per decision: two views hold the same read-only window, which shows the books'
    current contents."""
    cluster, jobs = Cluster.uniform(2, 8), workload()
    engine = Engine(cluster, make_policy("fifo"), SimulatedCluster(cluster, jobs))
    first, second = engine.view(0.0), engine.view(0.0, live=True)
    assert first.running is second.running and first.pending is second.pending
    engine.pending["z"] = ActiveJob(spec=jobs[0])
    assert "z" in first.pending
