"""The view's change set (``ClusterView.changed``, issue 13 round 4) names every job written.

:class:`~gpuplan.solver_core.helpers.running_order.RunningOrder` re-keys only the jobs the
change set names, so a writer of a job's progress or lifecycle fields that forgets to report
it would silently mis-rank. These tests run whole simulations with two checks on:

* ``change_verify.VERIFY``: every sync that takes the change set also runs the full
  signature pass and raises :class:`ChangeSetMissed` for a running job it left out;
* a view checker on the engine (:class:`_ViewChecker`): every view's set against a stricter
  signature (status, allocation, progress, spec) of every running *and* pending job, so paths
  RunningOrder never sees (co-located GPUs, elastic resizes, reclaims, stragglers) are
  covered too.

And they show the checks can fail: a simulator that re-rates a job without reporting it is
caught, by both.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import pytest

from gpuplan.api import prepare, run
from gpuplan.executors.engine import Engine
from gpuplan.executors.simulator.cluster import SimulatedCluster
from gpuplan.executors.simulator.run import simulate
from gpuplan.executors.simulator.stragglers import Straggler, StragglerCluster
from gpuplan.models import ActiveJob, Cluster, ClusterView, JobSpec, NodeFailure
from gpuplan.models.state import ChangeSet
from gpuplan.scenarios.mapping import map_rigid
from gpuplan.scenarios.synthetic import synthetic_jobs
from gpuplan.solver_core import change_verify
from gpuplan.solver_core.change_verify import ChangeSetMissed
from gpuplan.solver_core.helpers.running_order import RunningOrder
from gpuplan.solver_core.policies.baselines.shortest_first import remaining_time
from gpuplan.solver_core.policies.baselines.tiresias import (
    SizedQueue,
    TiresiasL,
    requested_size,
)
from gpuplan.solver_core.registry import make_policy

_STRICT = attrgetter(
    "spec", "status", "allocation", "gpus", "done", "anchor_time", "resume_time", "rate"
)


class _ViewChecker:
    """Wraps ``Engine.view``: each view's change set must name every active job whose
    strict signature changed since the previous view of the same engine."""

    def __init__(self) -> None:
        self.sig: dict[int, dict[str, tuple[object, ...]]] = {}
        self.seen: dict[int, int] = {}
        self.checked = 0
        self.named = 0

    def __call__(self, view: ClusterView) -> None:
        changed = view.changed
        assert changed is not None, "the simulator's views must carry a change set"
        now = {j: _STRICT(job) for jobs in (view.running, view.pending) for j, job in jobs.items()}
        old = self.sig.get(changed.stream)
        if old is not None:
            assert self.seen[changed.stream] == changed.seq - 1, "views numbered one by one"
            missed = sorted(
                [j for j, s in now.items() if old.get(j) != s] + [j for j in old if j not in now]
            )
            missed = [j for j in missed if j not in changed.jobs]
            assert not missed, f"t={view.now}: written but not in the change set: {missed}"
            self.checked += 1
            self.named += len(changed.jobs)
        self.sig[changed.stream] = now
        self.seen[changed.stream] = changed.seq


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> _ViewChecker:
    """VERIFY on, every engine view checked, and RunningOrder's fast syncs counted."""
    checker = _ViewChecker()
    original = Engine.view

    def view(self: Engine, now: float, live: bool = False) -> ClusterView:
        out = original(self, now, live)
        checker(out)
        return out

    monkeypatch.setattr(Engine, "view", view)
    monkeypatch.setattr(change_verify, "VERIFY", True)
    fast = {"syncs": 0}
    sync_changed = RunningOrder._sync_changed

    def counted(self: RunningOrder, *args: Any) -> bool:
        fast["syncs"] += 1
        return sync_changed(self, *args)

    monkeypatch.setattr(RunningOrder, "_sync_changed", counted)
    fast["waiting"] = 0
    changed_membership = SizedQueue._changed_membership

    def counted_waiting(self: SizedQueue, *args: Any) -> tuple[set[str], set[str]]:
        fast["waiting"] += 1
        return changed_membership(self, *args)

    monkeypatch.setattr(SizedQueue, "_changed_membership", counted_waiting)
    fast["running_side"] = 0
    verify_side = TiresiasL._verify_side

    def counted_side(self: TiresiasL, *args: Any) -> None:
        fast["running_side"] += 1  # a fast sync of the running side, verified
        verify_side(self, *args)

    monkeypatch.setattr(TiresiasL, "_verify_side", counted_side)
    checker.fast = fast  # type: ignore[attr-defined]
    return checker


def _jobs(n: int, gpus: int, seed: int) -> list[JobSpec]:
    mix = {1: 0.5, 2: 0.2, 4: 0.2, 8: 0.1}
    mean = sum(s * w for s, w in mix.items())
    rate_per_h = 1.1 * gpus * 3600.0 / (1800.0 * mean)
    return map_rigid(synthetic_jobs(n, rate_per_h, mix, 1800.0, seed))


def _failures(cluster: Cluster) -> list[NodeFailure]:
    names = [n.name for n in cluster.nodes]
    return [
        NodeFailure(time=1800.0 * (k + 1), node=names[k % len(names)], recover_after=900.0)
        for k in range(6)
    ]


@pytest.mark.parametrize("policy", ["srtf", "sjf", "srsf", "tiresias-l", "srtf-e"])
def test_whole_runs_with_node_failures_report_every_write(
    checked: _ViewChecker, policy: str
) -> None:
    cluster = Cluster.uniform(6, 8)
    result, _, _ = simulate(
        cluster,
        _jobs(200, cluster.total_gpus, seed=5),
        make_policy(policy),
        events=_failures(cluster),
    )
    assert checked.checked > 300 and checked.named > checked.checked
    assert sum(r.preemptions for r in result.jobs) > 0
    if policy in ("srtf", "sjf"):  # RunningOrder took the change set (and verified it)
        assert checked.fast["syncs"] > 300  # type: ignore[attr-defined]
    if policy == "tiresias-l":  # so did Tiresias-L's waiting queue and its running side
        assert checked.fast["waiting"] > 300  # type: ignore[attr-defined]
        assert checked.fast["running_side"] > 300  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("scenario", "policy"),
    [
        ("philly-default", "srtf"),
        ("philly-default", "sjf"),
        ("philly-default", "srtf-reuse"),
        ("aryl-testbed", "aryl"),
        ("aryl-testbed", "aryl-sjf"),
        ("ojpp-average", "fifo-ojpp"),  # co-located GPUs: neighbours re-rated by the simulator
        ("sidecar-wl1", "sidecar"),  # elastic resizes with early initialisation
    ],
)
def test_scenarios_report_every_write(
    checked: _ViewChecker,
    scenario: str,
    policy: str,
) -> None:
    result = run(prepare(scenario), policy)
    assert checked.checked > 10 and any(r.finish_time is not None for r in result.jobs)


def test_straggler_re_rates_are_reported(checked: _ViewChecker) -> None:
    cluster = Cluster.uniform(2, 8, "v100")
    job = JobSpec(id="j", submit_time=0.0, requested_gpus=16, total_iterations=2e6)
    ex = StragglerCluster(
        cluster, [job], [Straggler("node001", 3, 0.75)], mitigate=True, removal_s=2.0, seed=1
    )
    engine = Engine(cluster, make_policy("srtf"), ex, sample_interval_s=None)
    engine.run()
    assert ex.detections and checked.checked >= 1


class _Forgetful(SimulatedCluster):
    """Slows every running job by half at t = 2 h without reporting it: the bug the checks
    exist for (a new executor path that writes a rate and forgets ``touched``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._push_internal(7200.0, "slow")
        self.wake_at(7200.0)

    def _internal(self, time: float, payload: object) -> None:
        for job in list(self._jobs_by_id.values()):
            if job.status == "running" and job.rate > 0:
                job.settle(time)
                job.rate *= 0.5
                self._predict_completion(job)
                self.touched.discard(job.id)  # the forgotten report


def test_a_missing_report_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster.uniform(4, 8)
    jobs = _jobs(80, cluster.total_gpus, seed=3)
    monkeypatch.setattr(change_verify, "VERIFY", True)
    engine = Engine(cluster, make_policy("srtf"), _Forgetful(cluster, jobs))
    with pytest.raises(ChangeSetMissed, match="not in the view's change set"):
        engine.run()
    engine = Engine(cluster, make_policy("srtf"), SimulatedCluster(cluster, jobs))
    engine.run()  # the honest simulator passes the same check
    assert len(engine.records) == len(jobs)


def test_running_order_verifier_names_the_unreported_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = JobSpec(id="a", submit_time=0.0, requested_gpus=1, total_iterations=100.0)
    other = spec.model_copy(update={"id": "b"})
    rate = spec.throughput.rate(1)
    running = {s.id: ActiveJob(spec=s, status="running", gpus=1, rate=rate) for s in (spec, other)}
    order = RunningOrder(remaining_time)
    monkeypatch.setattr(change_verify, "VERIFY", True)
    assert order.sync(running, 1.0, ChangeSet(9, 1, frozenset(running)))
    running["b"].done, running["b"].anchor_time = 10.0, 2.0
    assert order.sync(running, 2.0, ChangeSet(9, 2, frozenset({"b"})))  # reported: fine
    running["a"].done, running["a"].anchor_time = 20.0, 3.0
    with pytest.raises(ChangeSetMissed, match=r"\['a'\]"):
        order.sync(running, 3.0, ChangeSet(9, 3, frozenset()))
    monkeypatch.setattr(change_verify, "VERIFY", False)
    order = RunningOrder(remaining_time)
    assert order.sync(running, 3.5, ChangeSet(9, 3, frozenset(running)))
    assert [e[2] for e in order.groups[1][0]] == ["a", "b"]  # 80 s + 3 before 90 s + 2
    running["a"].done = 0.0  # rolled back, unreported, no verifier: a keeps its old key
    assert order.sync(running, 4.0, ChangeSet(9, 4, frozenset()))
    assert [e[2] for e in order.groups[1][0]] == ["a", "b"]
    # a skipped view (seq 6 after 4): the full pass re-keys a (100 s + 3, after b)
    assert order.sync(running, 4.0, ChangeSet(9, 6, frozenset()))
    assert [e[2] for e in order.groups[1][0]] == ["b", "a"]
    assert order.sync(running, 4.0, ChangeSet(8, 7, frozenset()))  # another engine: full
    assert [e[2] for e in order.groups[1][0]] == ["b", "a"]


def test_slurm_ssh_and_hand_built_views_carry_no_change_set() -> None:
    from gpuplan.executors.base import Executor
    from gpuplan.executors.slurm.executor import SlurmExecutor
    from gpuplan.executors.ssh.executor import SshExecutor

    assert Executor.touched is None
    assert SlurmExecutor.touched is None and SshExecutor.touched is None
    assert "touched" not in vars(SlurmExecutor) and "touched" not in vars(SshExecutor)
    cluster = Cluster.uniform(1, 8)
    view = ClusterView(now=0.0, cluster=cluster, nodes={}, free={}, running={}, pending={})
    assert view.changed is None

    class Observed(Executor):
        """An executor that observes progress (as Slurm and SSH do): no ``touched``."""

        capabilities = SimulatedCluster(cluster, []).capabilities

        def next_events(self) -> None:
            return None

        def apply(self, plan: Any, jobs: Any) -> None: ...

        def evict(self, job: ActiveJob, now: float, graceful: bool) -> None: ...

        def wake_at(self, time: float) -> None: ...

    engine = Engine(cluster, make_policy("srtf"), Observed())
    assert engine.view(0.0).changed is None and engine.view(1.0, live=True).changed is None
    simulated = Engine(cluster, make_policy("srtf"), SimulatedCluster(cluster, []))
    first, second = simulated.view(0.0), simulated.view(1.0, live=True)
    assert first.changed is not None and second.changed is not None
    assert second.changed.follows((first.changed.stream, first.changed.seq))
    other = Engine(cluster, make_policy("srtf"), SimulatedCluster(cluster, [])).view(0.0)
    assert other.changed is not None and other.changed.stream != first.changed.stream


def test_ranked_queue_verifier_catches_an_unreported_arrival(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuplan.solver_core.helpers.ranked_queue import RankedQueue

    cluster = Cluster.uniform(1, 8)
    a = JobSpec(id="a", submit_time=0.0, requested_gpus=1, total_iterations=100.0)
    pending = {"a": ActiveJob(spec=a)}

    def view(seq: int, jobs: set[str]) -> ClusterView:
        return ClusterView(
            0.0, cluster, {}, {}, {}, dict(pending), changed=ChangeSet(3, seq, frozenset(jobs))
        )

    queue = RankedQueue(remaining_time)
    monkeypatch.setattr(change_verify, "VERIFY", True)
    assert [e[2] for e in queue.pending_entries(view(1, {"a"}))] == ["a"]
    pending["b"] = ActiveJob(spec=a.model_copy(update={"id": "b"}))
    with pytest.raises(ChangeSetMissed, match=r"pending job\(s\).*\['b'\]"):
        queue.pending_entries(view(2, set()))
    monkeypatch.setattr(change_verify, "VERIFY", False)
    queue = RankedQueue(remaining_time)
    queue.pending_entries(view(1, {"a"}))
    assert [e[2] for e in queue.pending_entries(view(2, {"b"}))] == ["a", "b"]
    del pending["a"]
    assert [e[2] for e in queue.pending_entries(view(3, {"a"}))] == ["b"]


def test_sized_queue_follows_the_change_set_and_its_verifier_catches_a_miss(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tiresias-L's waiting queue reads only the named jobs when the change set follows the
    previous sync (an unnamed newcomer stays unseen), falls back to the full set differences
    on a skipped view, and in verify mode names the job the set left out."""
    cluster = Cluster.uniform(1, 8)
    pending: dict[str, ActiveJob] = {}

    def add(job_id: str, t: float) -> None:
        spec = JobSpec(id=job_id, submit_time=t, requested_gpus=2, total_iterations=100.0)
        pending[job_id] = ActiveJob(spec=spec)

    def view(seq: int, jobs: set[str]) -> ClusterView:
        return ClusterView(
            0.0, cluster, {}, {}, {}, dict(pending), changed=ChangeSet(4, seq, frozenset(jobs))
        )

    def queue_order(queue: SizedQueue) -> list[str]:
        return sorted(queue.entries, key=lambda j: queue.entries[j])

    monkeypatch.setattr(change_verify, "VERIFY", False)  # also under GPUPLAN_VERIFY_CHANGES=1
    queue = SizedQueue(lambda job, now: (job.spec.submit_time, job.spec.id), requested_size)
    add("a", 1.0)
    assert queue.sync(view(1, {"a"})) == (set(), ["a"])
    add("c", 3.0)
    add("b", 2.0)
    assert queue.sync(view(2, {"b"})) == (set(), ["b"])  # c was not named: not read
    assert queue_order(queue) == ["a", "b"]
    del pending["a"]
    assert queue.sync(view(4, set())) == ({"a"}, ["c"])  # seq 3 skipped: full differences
    assert queue_order(queue) == ["b", "c"]
    assert queue.walk([], 8) == {"b": 2, "c": 2}
    monkeypatch.setattr(change_verify, "VERIFY", True)
    add("d", 4.0)
    with pytest.raises(ChangeSetMissed, match=r"waiting job\(s\).*\['d'\]"):
        queue.sync(view(5, set()))


def test_preemptions_listed_in_running_order_by_entry_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two or more preemptions are listed in the running dict's order (released GPUs merge
    in it) from the engine's entry numbers, with no pass over the running jobs; the verifier
    catches numbers that disagree with the dict."""
    from gpuplan.models import JobAllocation
    from gpuplan.solver_core.delta import delta_from_changes
    from gpuplan.solver_core.placement.best_fit import best_fit_placement

    cluster = Cluster.uniform(1, 8)
    running: dict[str, ActiveJob] = {}
    for g, job_id in enumerate(["c", "a", "b", "d"]):  # the dict's order
        spec = JobSpec(id=job_id, submit_time=0.0, requested_gpus=1, total_iterations=1e3)
        job = ActiveJob(spec=spec, status="running")
        job.set_allocation(JobAllocation.fast(job_id, {cluster.nodes[0].name: (g,)}))
        running[job_id] = job

    def preempted(since: dict[str, int] | None) -> list[str]:
        view = ClusterView(0.0, cluster, {}, {}, running, {}, running_since=since)
        answer = delta_from_changes(view, [], ["b", "d", "c"], best_fit_placement, [])
        return answer.preempts  # type: ignore[union-attr]

    numbers = {"c": 5, "a": 6, "b": 9, "d": 12}
    assert preempted(numbers) == preempted(None) == ["c", "b", "d"]
    monkeypatch.setattr(change_verify, "VERIFY", True)
    assert preempted(numbers) == ["c", "b", "d"]
    with pytest.raises(ChangeSetMissed, match="running_since"):
        preempted({**numbers, "c": 20})


def test_adoption_is_reported_and_numbered_once() -> None:
    """The controller's adoption (a job found running after a restart, or placed otherwise
    than planned) is a write; a job adopted again keeps its place in ``running``."""
    from gpuplan.models import JobAllocation

    cluster = Cluster.uniform(1, 8)
    node = cluster.nodes[0].name
    engine = Engine(cluster, make_policy("fifo"), SimulatedCluster(cluster, []))
    engine.view(0.0)
    job = ActiveJob(spec=JobSpec(id="x", submit_time=0.0, requested_gpus=2, total_iterations=1e3))
    engine.pending["x"] = job
    engine.adopt(job, JobAllocation.fast("x", {node: (0, 1)}))
    view = engine.view(1.0)
    assert view.changed is not None and view.changed.jobs == {"x"}
    assert view.running_since is not None and "x" in view.running_since
    number = view.running_since["x"]
    engine.adopt(job, JobAllocation.fast("x", {node: (2, 3)}))
    again = engine.view(2.0)
    assert again.changed is not None and again.changed.jobs == {"x"}
    assert again.running_since is not None and again.running_since["x"] == number
    assert engine.view(3.0).changed.jobs == frozenset()  # type: ignore[union-attr]
