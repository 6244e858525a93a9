"""The engine's delta fast path (issue 13): the free-count index and delta decisions.

* :class:`FreeIndex` answers best fit's two questions exactly as a scan over every node does,
  after any sequence of updates (hypothesis), and equals an index rebuilt from scratch;
* the engine's index equals a rebuild from its free sets after every event of a run;
* FIFO, FIFO-backfill, SRTF, SRSF, SJF, Tiresias-L (and its max-useful variant) decided as
  deltas give the very same ``RunResult`` as the same policies forced onto the full
  protocol (all decided by ``decide``), on workloads with node failures and recoveries,
  mixed node sizes, and preemptions;
* a wrapper that replaces the placement or the allocation stage drops the fast path;
* SRTF's, SRSF's and SJF's running order kept across events (:class:`RunningOrder`) equals a
  full sort after random start/stop/rate/pause sequences, and its walk selects what the full
  ranked walk selects (hypothesis).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.executors.engine import Engine
from gpuplan.executors.simulator.cluster import SimulatedCluster
from gpuplan.executors.simulator.run import simulate
from gpuplan.models import Cluster, FreeIndex, Node, NodeFailure, RunResult
from gpuplan.scenarios.mapping import map_rigid
from gpuplan.scenarios.synthetic import synthetic_jobs
from gpuplan.solver_core.hooks import DeltaStage
from gpuplan.solver_core.placement.network_packing import packed_placement
from gpuplan.solver_core.policy import StagedPolicy
from gpuplan.solver_core.registry import make_policy

DELTA_POLICIES = (
    "fifo",
    "fifo-backfill",
    "srtf",
    "srsf",
    "sjf",
    "tiresias-l",
    "tiresias-l-max",
    "max-min",
)


# --------------------------------------------------------------------------- FreeIndex
def _scan_tightest(counts: dict[str, int], need: int) -> str | None:
    fitting = [n for n, c in counts.items() if c >= need]
    return min(fitting, key=lambda n: (counts[n], n)) if fitting else None


def _scan_fullest(counts: dict[str, int]) -> str | None:
    if not any(counts.values()):
        return None
    return max(counts, key=lambda n: (counts[n], n))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 11), st.integers(-1, 8)), max_size=60), st.integers(0, 9))
def test_free_index_matches_a_scan(ops: list[tuple[int, int]], need: int) -> None:
    index = FreeIndex()
    counts: dict[str, int] = {}
    for node_no, count in ops:
        name = f"n{node_no:02d}"
        if count < 0:
            index.discard(name)
            counts.pop(name, None)
        else:
            index.set(name, count)
            counts[name] = count
        assert index.tightest(need) == _scan_tightest(counts, need)
        assert index.fullest() == _scan_fullest(counts)
        assert index.total == sum(counts.values()) and len(index) == len(counts)
    index.check({n: range(c) for n, c in counts.items()})


def test_free_index_check_catches_a_drift() -> None:
    index = FreeIndex()
    index.set("a", 3)
    with pytest.raises(AssertionError):
        index.check({"a": [0, 1]})


# --------------------------------------------------------------------------- runs
def _jobs(n: int, gpus: int, seed: int) -> list[Any]:
    mix = {1: 0.5, 2: 0.2, 4: 0.2, 8: 0.1}
    mean = sum(s * w for s, w in mix.items())
    rate_per_h = 1.1 * gpus * 3600.0 / (1800.0 * mean)
    jobs = map_rigid(synthetic_jobs(n, rate_per_h, mix, 1800.0, seed))
    # Arrivals in bursts (submit times rounded down to 15 min): several jobs start in one
    # event, so the order in which a decision places them matters.
    return [j.model_copy(update={"submit_time": j.submit_time // 900.0 * 900.0}) for j in jobs]


def _digest(result: RunResult) -> str:
    data = result.model_dump(mode="json", exclude={"decision_ms", "solver_ms", "wall_s"})
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _full_protocol(policy: StagedPolicy) -> StagedPolicy:
    """The same policy with its allocation stage hidden behind a plain function: no
    ``delta``, so the engine decides every event with ``decide``."""
    stage = policy.allocation
    return replace(policy, allocation=lambda view, stats: stage(view, stats))


def _mixed_cluster() -> Cluster:
    sizes = [8, 8, 4, 4, 2, 8, 1, 4]
    return Cluster(nodes=[Node(name=f"m{i}", gpus=g) for i, g in enumerate(sizes)])


def _failures(cluster: Cluster) -> list[NodeFailure]:
    names = [n.name for n in cluster.nodes]
    return [
        NodeFailure(time=3600.0 * (k + 1), node=names[k % len(names)], recover_after=1800.0)
        for k in range(4)
    ]


@pytest.mark.parametrize("policy", DELTA_POLICIES)
@pytest.mark.parametrize("case", ["uniform", "mixed", "failures"])
def test_delta_decisions_equal_full_decisions(policy: str, case: str) -> None:
    cluster = _mixed_cluster() if case == "mixed" else Cluster.uniform(6, 8)
    jobs = _jobs(160, cluster.total_gpus, seed=7)
    events = _failures(cluster) if case == "failures" else []
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
    a, engine, _ = simulate(cluster, jobs, fast, events=events)
    b, _, _ = simulate(cluster, jobs, _full_protocol(make_policy(policy)), events=events)
    assert a.events == b.events and len(a.jobs) == len(b.jobs) == len(jobs)
    assert _digest(a) == _digest(b)
    if case != "failures":  # the fast path decided every event (full decisions: none)
        assert calls["decide"] == 0 and len(engine.decision_ms) > 100
    if policy.startswith("sr") or policy == "sjf":
        assert sum(r.preemptions for r in a.jobs) > 0  # preemptions were exercised


@pytest.mark.parametrize("policy", DELTA_POLICIES)
def test_engine_index_equals_a_rebuild_after_every_event(policy: str) -> None:
    cluster = Cluster.uniform(4, 8)
    jobs = _jobs(80, cluster.total_gpus, seed=3)
    executor = SimulatedCluster(cluster, jobs, events=_failures(cluster))
    engine = Engine(cluster, make_policy(policy), executor)
    steps = 0
    while (batch := executor.next_events()) is not None:
        engine.handle(*batch)
        engine.ledger.index.check(engine.free)
        assert engine.ledger.index.total == engine.capacity - sum(
            j.gpus for j in engine.running.values()
        )
        steps += 1
    assert steps > 50 and len(engine.records) == len(jobs)


def test_a_replaced_placement_or_allocation_stage_drops_the_fast_path() -> None:
    cluster = Cluster.uniform(2, 8)
    executor = SimulatedCluster(cluster, _jobs(5, 16, seed=1))
    fifo = make_policy("fifo")
    assert isinstance(fifo, StagedPolicy)
    engine = Engine(cluster, fifo, executor)
    view = engine.view(0.0, live=True)
    assert fifo.decide_delta(view) is not None
    assert replace(fifo, placement=packed_placement).decide_delta(view) is None
    assert _full_protocol(fifo).decide_delta(view) is None
    assert fifo.decide_delta(engine.view(0.0)) is None  # a copied view carries no index


# --------------------------------------------------------------------------- SRTF keys
@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 1.2), st.floats(0.0, 5.0), st.floats(0.0, 4000.0), st.floats(0.0, 4000.0)
        ),
        min_size=1,
        max_size=12,
    ),
    st.floats(0.0, 8000.0),
    st.booleans(),
)
def test_running_keys_equal_the_key_function(
    states: list[tuple[float, float, float, float]], now: float, service: bool
) -> None:
    """The cached batch keys are the very floats of remaining_time/remaining_service."""
    from gpuplan.models import ActiveJob
    from gpuplan.solver_core.policies.baselines.shortest_first import (
        RunningKeys,
        remaining_service,
        remaining_time,
    )

    specs = _jobs(len(states), 16, seed=5)
    running = {}
    for spec, (frac, rate_x, anchor, resume) in zip(specs, states, strict=True):
        total = spec.total_iterations or spec.work
        job = ActiveJob(
            spec=spec,
            done=frac * total,
            rate=rate_x * spec.throughput.rate(1),
            anchor_time=anchor,
            resume_time=resume,
        )
        running[spec.id] = job
    keys = RunningKeys(service)
    key = remaining_service if service else remaining_time
    want = sorted((key(j, now), j.spec.submit_time, i) for i, j in running.items())
    assert keys(running, now) == want
    assert keys(running, now + 1.0) == sorted(
        (key(j, now + 1.0), j.spec.submit_time, i) for i, j in running.items()
    )


# --------------------------------------------------------------------------- running order
_OPS = st.lists(
    st.tuples(
        st.sampled_from(["start", "stop", "slow", "settle", "wait"]),
        st.integers(0, 19),
        st.sampled_from([0.0, 0.0, 30.0]),
        st.floats(0.0, 900.0),
    ),
    min_size=1,
    max_size=40,
)


def _near_tie(keys: list[float]) -> bool:
    ordered = sorted(keys)
    return any(b - a <= 1e-6 * max(1.0, abs(b)) for a, b in itertools.pairwise(ordered))


@settings(max_examples=100, deadline=None)
@given(_OPS, st.integers(8, 48), st.sampled_from(["srtf", "srsf", "sjf"]))
def test_incremental_running_order_equals_a_full_sort(
    ops: list[tuple[str, int, float, float]], capacity: int, kind: str
) -> None:
    """After any sequence of starts (with or without a pause), stops, rate changes, settles
    and waits, :class:`RunningOrder` ranks the running jobs as a full sort of the exact keys
    does, a job at full rate past its pause is kept sorted (not re-keyed per event),
    :func:`changes_by_rank` selects what :func:`rigid_by_rank` selects (both up to float
    near-ties, the documented tie-only difference; without one: exactly), and an order synced
    from change sets naming the jobs each step wrote is the very order of the full pass
    (groups, totals, late jobs)."""
    from gpuplan.models import ActiveJob, ClusterView
    from gpuplan.models.state import ChangeSet
    from gpuplan.solver_core.helpers.ranked_queue import RankedQueue
    from gpuplan.solver_core.helpers.running_order import RunningOrder
    from gpuplan.solver_core.policies.baselines.shortest_first import (
        RunningKeys,
        changes_by_rank,
        remaining_service,
        remaining_time,
        rigid_by_rank,
    )
    from gpuplan.solver_core.policies.baselines.sjf import gpu_count

    key = {"srtf": remaining_time, "srsf": remaining_service, "sjf": gpu_count}[kind]
    specs = _jobs(20, 16, seed=11)
    jobs = {s.id: ActiveJob(spec=s) for s in specs}
    running: dict[str, ActiveJob] = {}
    order = RunningOrder(key, service=kind == "srsf", static=kind == "sjf")
    by_changes = RunningOrder(key, service=kind == "srsf", static=kind == "sjf")
    queue = RankedQueue(key, None if kind == "sjf" else RunningKeys(service=kind == "srsf"))
    now = 0.0
    for seq, (op, pick, pause, dt) in enumerate(ops, 1):
        job = jobs[specs[pick].id]
        wrote = {job.id}
        per_s = job.spec.throughput.rate(job.spec.requested_gpus)
        if op == "start" and job.id not in running:
            job.settle(now)
            job.rate, job.gpus, job.resume_time = per_s, job.spec.requested_gpus, now + pause
            running[job.id] = job
        elif op == "stop" and job.id in running:
            job.settle(now)
            job.rate, job.gpus = 0.0, 0
            del running[job.id]
        elif op == "slow" and job.id in running:
            job.settle(now)
            job.rate = per_s * 0.5
        elif op == "settle" and job.id in running:
            job.settle(now)
        now += dt
        for job_id in [j for j, a in running.items() if remaining_time(a, now) <= 0.0]:
            del running[job_id]  # finished
            wrote.add(job_id)
        assert order.sync(running, now)
        assert by_changes.sync(running, now, ChangeSet(1, seq, frozenset(wrote)))
        assert by_changes.groups == {m: g for m, g in order.groups.items() if g[0]} | {
            m: g for m, g in by_changes.groups.items() if not g[0]
        }
        assert by_changes.late_entries(running, now) == order.late_entries(running, now)
        for m, (_, needs) in order.groups.items():
            assert order.totals[m] == sum(needs) == by_changes.totals.get(m, 0)
        late, _ = order.late_entries(running, now)
        exact = {j: key(a, now) for j, a in running.items()}
        regular = [
            (c if m == 0 else (c - now) * m, s, j)
            for m, (entries, _) in order.groups.items()
            for c, s, j in entries
        ]
        assert sorted(j for *_, j in regular + late) == sorted(running)
        for k, _, j in regular:
            assert abs(k - exact[j]) <= 1e-6 * max(1.0, exact[j])
        for m, (entries, _) in order.groups.items():
            ids = [j for _, _, j in entries]
            for a, b in itertools.pairwise(ids):
                assert exact[a] <= exact[b] + 1e-6 * max(1.0, exact[b])
            if ids:  # a group whose last job left stays, empty
                assert m == (0 if kind == "sjf" else 1 if kind == "srtf" else running[ids[0]].gpus)
        late_ids = {j for *_, j in late}
        for j, a in running.items():  # regular whenever the slope is known
            full_rate = a.rate == a.spec.throughput.rate(a.spec.requested_gpus)
            if kind == "sjf" or (full_rate and now > max(a.anchor_time, a.resume_time)):
                assert j not in late_ids
        pending = {
            j: a for j, a in jobs.items() if j not in running and remaining_time(a, now) > 0.0
        }
        view = ClusterView(
            now,
            None,
            {},
            {},
            running,
            pending,  # type: ignore[arg-type]
            capacity=capacity,
        )
        starts, preempts = changes_by_rank(view, queue.pending_entries(view), order)
        shares = rigid_by_rank(view, queue)
        if kind == "sjf" or not _near_tie(
            list(exact.values()) + [key(a, now) for a in pending.values()]
        ):
            assert sorted(starts) == sorted((j, n) for j, n in shares.items() if j in pending)
            assert sorted(preempts) == sorted(j for j in running if j not in shares)
