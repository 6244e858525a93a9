"""Policy memory survives a restart: snapshot -> JSON -> restore on a fresh policy changes no
decision (the controller journals it so a restart stops no running job)."""

from __future__ import annotations

import json

import pytest

from gpuplan import api
from gpuplan.executors.engine import Engine
from gpuplan.executors.simulator.cluster import SimulatedCluster
from gpuplan.models import JobRecord
from gpuplan.solver_core.registry import make_policy

STATEFUL = [
    "afs-p",
    "afs-s",
    "tiresias-l",
    "themis",
    "max-min-perf",
    "max-min-agnostic",
    "gavel-fifo",
    "afs-p-learning",
    "aryl",
    "tiresias-l-packed",
    "elastic-tiresias",
    "edl-elastic",
]


def _run(scenario: str, policy: str, swap_at: int | None) -> list[JobRecord]:
    """Simulate; before the ``swap_at``-th decision replace the policy by a freshly built one
    restored from the old one's JSON snapshot (what a controller restart does)."""
    prepared = api.prepare(scenario)
    jobs = prepared.jobs[:120]
    executor = SimulatedCluster(prepared.cluster, jobs, prepared.spec.overheads)
    engine = Engine(
        prepared.cluster, prepared.make_policy(policy), executor, sample_interval_s=None
    )
    decisions = 0
    while (batch := executor.next_events()) is not None:
        decisions += 1
        if decisions == swap_at:
            state = json.loads(json.dumps(engine.policy.snapshot()))
            fresh = prepared.make_policy(policy)
            fresh.restore(state)
            engine.policy = fresh
            engine._timer_at = None  # a restarted controller re-arms its wake-ups
        engine.handle(*batch)
    return engine.result().jobs


@pytest.mark.parametrize("policy", STATEFUL)
def test_a_restored_policy_decides_exactly_as_the_original(policy: str) -> None:
    straight = _run("philly-default", policy, None)
    restarted = _run("philly-default", policy, 150)
    assert [(r.job_id, r.finish_time, r.preemptions) for r in straight] == [
        (r.job_id, r.finish_time, r.preemptions) for r in restarted
    ]


@pytest.mark.parametrize("policy", ["tiresias-l", "themis"])
def test_memory_matters_without_restore(policy: str) -> None:
    """The test above can fail: a fresh policy without its memory (queues, leases) decides
    differently."""
    straight = _run("philly-default", policy, None)
    prepared = api.prepare("philly-default")
    jobs = prepared.jobs[:120]
    executor = SimulatedCluster(prepared.cluster, jobs, prepared.spec.overheads)
    engine = Engine(prepared.cluster, make_policy(policy), executor, sample_interval_s=None)
    decisions = 0
    while (batch := executor.next_events()) is not None:
        decisions += 1
        if decisions == 150:
            engine.policy = make_policy(policy)
        engine.handle(*batch)
    forgot = engine.result().jobs
    assert [(r.job_id, r.finish_time) for r in straight] != [
        (r.job_id, r.finish_time) for r in forgot
    ]


def test_memoryless_policies_snapshot_nothing() -> None:
    assert make_policy("srtf").snapshot() == {}
    with pytest.raises(ValueError, match="keeps no state"):
        make_policy("srtf").restore({"x": 1})
