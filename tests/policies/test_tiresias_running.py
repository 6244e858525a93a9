"""Tiresias-L's running side kept across decisions (issue 28 item 1, round 6b).

The fast path (:meth:`TiresiasL.delta` with a following change set) reads only the running jobs
the change set names and those whose crossing time has come, and walks the queues by their
size totals (:func:`changes_by_queue`). These tests hold it to the full path (every running
job read and ranked at every decision, the code before the change):

* whole simulations give the same ``RunResult`` both ways (node failures, three queues,
  executed-time service, max-GPU sizes, an overloaded zoo workload);
* with verify mode on (set here explicitly) every fast decision also rebuilds the side from
  every running job and compares it, and raises ``ChangeSetMissed`` naming a job that
  differs; a deliberately wrong update (the due demotions dropped, a rank recorded with a
  wrong size) makes that check fail;
* :func:`first_true` finds the very float at which the demotion test first holds;
* :func:`changes_by_queue` grants what :func:`rigid_walk` grants over the merged order.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import ActiveJob, Cluster, JobSpec, NodeFailure, RunResult
from gpuplan.scenarios.mapping import map_rigid
from gpuplan.scenarios.synthetic import synthetic_jobs
from gpuplan.solver_core import change_verify
from gpuplan.solver_core.change_verify import ChangeSetMissed
from gpuplan.solver_core.policies.baselines import tiresias_running
from gpuplan.solver_core.policies.baselines.tiresias import TiresiasL, rigid_walk
from gpuplan.solver_core.policies.baselines.tiresias_running import (
    RunningSide,
    changes_by_queue,
    first_true,
)
from gpuplan.solver_core.policy import StagedPolicy
from gpuplan.solver_core.registry import make_policy
from tests.bench.fingerprint import digest
from tests.bench.scale import overload_workload


class _FullPath(TiresiasL):
    """Tiresias-L that always takes the full path (``delta`` declines a subclass that
    overrides ``__call__``): the reference the fast path must reproduce."""

    def __call__(self, view: Any, stats: list[Any]) -> Any:
        return super().__call__(view, stats)


def _full_twin(policy: StagedPolicy) -> StagedPolicy:
    """The same policy with its Tiresias-L stage swapped for a full-path one."""
    fast = policy.allocation
    assert isinstance(fast, TiresiasL)
    stage = _FullPath(fast.thresholds, fast.promote_knob, fast.size, fast.service)
    return StagedPolicy(policy.name, stage, policy.placement, stage.next_wakeup, memory=stage)


def _jobs(n: int, gpus: int, seed: int) -> list[JobSpec]:
    mix = {1: 0.5, 2: 0.2, 4: 0.2, 8: 0.1}
    mean = sum(s * w for s, w in mix.items())
    return map_rigid(synthetic_jobs(n, 1.3 * gpus * 3600.0 / (1800.0 * mean), mix, 1800.0, seed))


def _failures(cluster: Cluster) -> list[NodeFailure]:
    names = [n.name for n in cluster.nodes]
    return [
        NodeFailure(time=1500.0 * (k + 1), node=names[k % len(names)], recover_after=900.0)
        for k in range(8)
    ]


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count fast decisions (the walk by queue totals) and incremental syncs."""
    calls = {"walks": 0, "verified": 0}
    walk = tiresias_running.changes_by_queue

    def counted_walk(*args: Any) -> Any:
        calls["walks"] += 1
        return walk(*args)

    verify = TiresiasL._verify_side

    def counted_verify(self: TiresiasL, *args: Any) -> None:
        calls["verified"] += 1
        verify(self, *args)

    monkeypatch.setattr(
        "gpuplan.solver_core.policies.baselines.tiresias.changes_by_queue", counted_walk
    )
    monkeypatch.setattr(TiresiasL, "_verify_side", counted_verify)
    return calls


def _both(run: Any, policy: str) -> tuple[RunResult, RunResult]:
    fast = make_policy(policy)
    return run(fast), run(_full_twin(fast))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "policy",
    [
        "tiresias-l",
        "tiresias-l-max",
        "tiresias-l(thresholds=[500, 3000, 20000])",
        "tiresias-l(service=time, promote_knob=null)",
        "tiresias-l(thresholds=[900], promote_knob=1)",
    ],
)
def test_fast_path_equals_full_path_with_node_failures(
    monkeypatch: pytest.MonkeyPatch, counted: dict[str, int], policy: str
) -> None:
    monkeypatch.setattr(change_verify, "VERIFY", True)
    cluster = Cluster.uniform(6, 8)
    jobs = _jobs(250, cluster.total_gpus, seed=7)

    def run(p: Any) -> RunResult:
        return simulate(cluster, jobs, p, events=_failures(cluster))[0]

    fast, full = _both(run, policy)
    assert digest(fast) == digest(full)
    assert sum(r.preemptions for r in fast.jobs) > 10
    assert counted["walks"] > 300 and counted["verified"] > 300


@pytest.mark.parametrize("load", [0.9, 1.5])
def test_fast_path_equals_full_path_under_overload(
    monkeypatch: pytest.MonkeyPatch, counted: dict[str, int], load: float
) -> None:
    monkeypatch.setattr(change_verify, "VERIFY", False)  # the fast path as it runs
    jobs = overload_workload(32, 500, load)

    def run(p: Any) -> RunResult:
        return simulate(Cluster.uniform(8, 4), jobs, p, sample_interval_s=3600.0)[0]

    fast, full = _both(run, "tiresias-l")
    assert digest(fast) == digest(full)
    assert counted["walks"] > 500 and counted["verified"] == 0


def _failure_run() -> None:
    cluster = Cluster.uniform(6, 8)
    simulate(cluster, _jobs(250, 48, seed=7), make_policy("tiresias-l"), events=_failures(cluster))


def test_verify_catches_a_missed_demotion(monkeypatch: pytest.MonkeyPatch) -> None:
    """A side that forgets the jobs whose crossing time has come fails verify mode."""
    monkeypatch.setattr(change_verify, "VERIFY", True)
    monkeypatch.setattr(RunningSide, "due", lambda self, now: [])
    with pytest.raises(ChangeSetMissed, match="Tiresias-L"):
        _failure_run()


def test_verify_catches_a_wrong_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """A side that records one started job with a wrong size fails verify mode."""
    monkeypatch.setattr(change_verify, "VERIFY", True)
    put = RunningSide.put
    wrong: list[str] = []

    def bad_put(self: RunningSide, job_id: str, queue: int, seq: int, size: int, *a: Any) -> None:
        if not wrong and self is not None and len(self) > 5:
            wrong.append(job_id)
            size += 1
        put(self, job_id, queue, seq, size, *a)

    monkeypatch.setattr(RunningSide, "put", bad_put)
    with pytest.raises(ChangeSetMissed) as err:
        _failure_run()
    assert wrong and wrong[0] in str(err.value)


def test_verify_passes_without_sabotage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(change_verify, "VERIFY", True)
    _failure_run()


# --------------------------------------------------------------------------- crossing times
def test_first_true_is_the_first_float_the_demotion_test_holds() -> None:
    rng = random.Random(11)
    from gpuplan.models.state import ActiveJob as Job

    spec = _jobs(1, 8, seed=1)[0]
    for _ in range(2000):
        job = Job(spec=spec, status="running")
        job.gpus = rng.choice([1, 2, 3, 4, 8, 16])
        job.anchor_time = rng.uniform(0, 1e6)
        job.attained_service = rng.uniform(0, 1e5)
        base = rng.uniform(0, job.attained_service)
        limit = rng.choice([3600.0, 500.0, 1e4]) - 1e-6 + job.attained_service - base
        now = job.anchor_time + rng.uniform(0, 10)

        def due(t: float, job: ActiveJob = job, base: float = base, limit: float = limit) -> bool:
            return job.attained_service_at(t) - base >= limit

        if due(now):
            continue
        guess = now + (limit - (job.attained_service_at(now) - base)) / job.gpus
        t = first_true(due, now, guess * rng.choice([1.0, 1.0 + 1e-12, 1.0 - 1e-9]))
        assert due(t) and not due(math.nextafter(t, -math.inf))


def test_first_true_never() -> None:
    assert first_true(lambda t: False, 0.0, 5.0) == math.inf
    assert first_true(lambda t: t >= 7.25, 0.0, 100.0) == 7.25


# --------------------------------------------------------------------------- the walk
def test_changes_by_queue_equals_the_plain_walk() -> None:
    rng = random.Random(3)
    for _ in range(500):
        queues = rng.randint(1, 3)
        side = RunningSide(queues, 64)
        held = 0
        cap = rng.randint(1, 40)
        seq = iter(rng.sample(range(10_000), 200))
        order: list[tuple[tuple[Any, ...], int]] = []
        for k in range(rng.randint(0, 20)):
            size = rng.choice([1, 2, 4, 8])
            if held + size > cap:
                continue
            held += size
            q, s = rng.randrange(queues), next(seq)
            side.put(f"r{k}", q, s, size, size, math.inf, 0.0)
            order.append(((q, 0, s, f"r{k}"), size))
        waiting: dict[int, list[tuple[Any, ...]]] = {}
        for k in range(rng.randint(0, 30)):
            size = rng.choice([1, 2, 3, 4, 8, 16, 64])
            entry = (rng.randrange(queues), 1, next(seq), f"w{k}")
            waiting.setdefault(size, []).append(entry)
            order.append((entry, size))
        for bucket in waiting.values():
            bucket.sort()
        # a random few of the running jobs leave again (drop keeps the totals)
        for k in rng.sample(sorted(side.rank_of), len(side.rank_of) // 4):
            side.drop(k)
            order = [(e, n) for e, n in order if e[-1] != k]
        capacity = rng.randint(0, cap)  # the cluster may have shrunk under the running jobs
        expected = rigid_walk(((e[-1], n) for e, n in sorted(order)), capacity)
        starts, preempts = changes_by_queue(side, waiting, capacity)
        assert starts == [(j, n) for j, n in expected.items() if j.startswith("w")]
        assert sorted(preempts) == sorted(j for j in side.rank_of if j not in expected)
