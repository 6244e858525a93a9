"""The restart gate (docs/algorithms/restart-gate.md): its arithmetic, its filter on real plans,
zero-cost identity under every policy, a simulated run where it pays, the stand-in's start-up
cost, its journal rows, and a REAL Slurm lab run where a measured restart cost decides."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuplan.api import prepare, run
from gpuplan.executors.control.gate_journal import COSTS_KEY, restore_gate, save_gate
from gpuplan.executors.control.journal import Journal
from gpuplan.executors.engine import Engine
from gpuplan.executors.metrics import summarize
from gpuplan.executors.progress_core import ProgressCore
from gpuplan.executors.restart_gate import RestartGate, executor_change_costs, gate_kind
from gpuplan.executors.simulator.cluster import SimulatedCluster
from gpuplan.executors.simulator.run import simulate
from gpuplan.executors.standin import UsageError, parse_startup, startup_delay
from gpuplan.models import (
    Cluster,
    ClusterView,
    Elasticity,
    InputError,
    JobAllocation,
    JobSpec,
    Overheads,
    ThroughputProfile,
)
from gpuplan.models.scenario import ScenarioSpec
from gpuplan.solver_core.policy import Decision, PolicyBase
from gpuplan.solver_core.registry import make_policy, policy_names
from gpuplan.solver_core.restart_gate import (
    ChangeCosts,
    GateConfig,
    carry_out,
    change_cost,
    lent_shrink_gain,
    resize_gain,
    start_gain,
    within_dwell,
)

LINEAR = ThroughputProfile.linear(1.0)

# ---------------------------------------------------------------------------------- arithmetic


def test_cost_and_gain_formulas() -> None:
    assert change_cost(15.0, 4) == 60.0
    assert change_cost(-1.0, 4) == 0.0 and change_cost(3.0, 0) == 0.0
    # 120 iterations: 60 s on 2 GPUs, 30 s on 4; saved 30 s x 4 GPUs
    assert resize_gain(120.0, 2.0, 4.0, 4) == 120.0
    assert resize_gain(120.0, 4.0, 2.0, 2) == -60.0  # a shrink slows the job
    assert resize_gain(0.0, 1.0, 2.0, 2) == 0.0
    assert resize_gain(10.0, 0.0, 1.0, 1) > 1e9  # from no progress: finite, huge
    assert start_gain(7.0, 2) == 14.0 and start_gain(-3.0, 2) == 0.0
    assert within_dwell(10.0, 5.0, 6.0) and not within_dwell(10.0, 4.0, 6.0)
    assert not within_dwell(10.0, None, 6.0)
    # a grow is carried out exactly when it saves more than its restart
    for latency, saved in ((15.0, 14.9), (15.0, 15.0), (15.0, 15.1)):
        gain = saved * 4
        assert carry_out(gain, change_cost(latency, 4)) is (saved > latency)


def test_a_shrink_that_lends_its_gpus_loses_only_while_they_are_lent() -> None:
    # 4 -> 2 GPUs (rate 4 -> 2) with 400 iterations left: for good, 100 s -> 200 s
    assert resize_gain(400.0, 4.0, 2.0, 2) == -200.0
    # lent for 10 s: 20 iterations lost = 5 s at the old rate, x 2 GPUs
    assert lent_shrink_gain(400.0, 4.0, 2.0, 2, 10.0) == -10.0
    # lent for longer than the job has left: no worse than for good
    assert lent_shrink_gain(400.0, 4.0, 2.0, 2, 1e6) == -200.0
    assert lent_shrink_gain(400.0, 4.0, 2.0, 2, float("inf")) == -200.0


@given(
    st.floats(0, 1e6),
    st.floats(0.01, 100),
    st.floats(0.01, 100),
    st.integers(1, 8),
    st.floats(0, 1e6),
)
def test_lent_shrink_loss_is_bounded_by_the_permanent_one(
    left: float, before: float, after: float, gpus: int, lent: float
) -> None:
    lent_gain = lent_shrink_gain(left, before, after, gpus, lent)
    assert lent_gain >= resize_gain(left, before, after, gpus) - 1e-6
    assert lent_gain <= max(0.0, resize_gain(left, before, after, gpus)) + 1e-6


@given(gain=st.floats(-1e9, 1e9), cost=st.floats(0, 1e9), more=st.floats(0, 1e9))
def test_decision_is_monotone_in_cost_and_never_pays_more_than_it_gains(
    gain: float, cost: float, more: float
) -> None:
    if carry_out(gain, cost + more):
        assert carry_out(gain, cost)  # a dearer change carried out => the cheaper one too
    if cost > 0 and gain < cost:
        assert not carry_out(gain, cost)
    if carry_out(gain, cost) and cost > 0:
        assert gain > cost


@given(gain=st.floats(allow_nan=True, allow_infinity=True))
def test_zero_cost_is_always_carried_out(gain: float) -> None:
    assert carry_out(gain, 0.0)
    assert carry_out(gain, -1.0)


@given(st.lists(st.floats(0, 1e4), min_size=1, max_size=30), st.floats(0.01, 1.0))
def test_change_costs_stay_within_the_samples(samples: list[float], alpha: float) -> None:
    costs = ChangeCosts(alpha)
    for s in samples:
        costs.record("j", "resize", s)
    est = costs.estimate("j", "resize", prior=123.0)
    assert min(samples) - 1e-6 <= est <= max(samples) + 1e-6
    assert costs.estimate("other", "resize", prior=123.0) == pytest.approx(
        statistics.median(samples)
    )
    assert costs.estimate("other", "migrate", prior=123.0) == 123.0


def test_change_costs_per_job_first_then_kind_then_prior_and_restore() -> None:
    costs = ChangeCosts(alpha=0.5)
    assert costs.estimate("a", "resize", 3.0) == 3.0
    costs.record("a", "resize", 12.0)
    costs.record("b", "resize", 4.0)
    costs.record("b", "resize", 6.0)
    assert costs.estimate("a", "resize", 3.0) == 12.0  # its own figure
    assert costs.estimate("b", "resize", 3.0) == 5.0  # EWMA 4 then 6 at 0.5
    assert costs.estimate("c", "resize", 3.0) == 6.0  # the kind's median
    costs.forget("a")
    assert costs.estimate("a", "resize", 3.0) == 6.0
    again = ChangeCosts()
    again.restore({**costs.summary(), "bad": {"median_s": "x"}, "neg": {"median_s": -1}})
    assert again.estimate("z", "resize", 3.0) == 6.0 and again.samples["resize"] == 3
    assert again.estimate("z", "bad", 3.0) == 3.0 and again.estimate("z", "neg", 3.0) == 3.0
    with pytest.raises(ValueError):
        ChangeCosts(alpha=0.0)


def test_a_job_cannot_claim_a_huge_restart_cost() -> None:
    """The measurement's end point is written by the job: one that claims an hour moves
    neither the kind's median nor its own estimate beyond 3x that median."""
    costs = ChangeCosts()
    for job in ("a", "b", "c"):
        costs.record(job, "preempt", 12.0)
    costs.record("evil", "preempt", 3600.0)
    costs.record("evil", "preempt", 1e30)
    assert costs.estimate("x", "preempt", 3.0) == 12.0
    assert costs.estimate("evil", "preempt", 3.0) == 36.0


def test_progress_core_feeds_the_gate_per_job_and_kind() -> None:
    from gpuplan.executors.base import ExecutorCapabilities

    core = ProgressCore(
        ExecutorCapabilities(
            resize="restart", pin_gpus=False, preempt_modes=("checkpoint",), restart_latency_s=3.0
        ),
        max_restarts=3,
    )
    core.record_restart_latency(14.0, "vit", "resize")
    core.record_restart_latency(2.0)  # no job named: the median only
    assert core.change_costs.estimate("vit", "resize", 3.0) == 14.0
    assert core.change_costs.samples == {"resize": 1}

    class Holder:
        pass

    holder = Holder()
    holder.core = core  # type: ignore[attr-defined]
    assert executor_change_costs(holder) is core.change_costs  # type: ignore[arg-type]
    outer = Holder()
    outer.slurm = holder  # type: ignore[attr-defined]  # the controller's executor
    assert executor_change_costs(outer) is core.change_costs  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------- the filter


class _Scripted(PolicyBase):
    """Places jobs as ``script(view)`` says: {job: {node: gpus}} (running or pending only)."""

    name = "scripted"

    def __init__(self, script) -> None:  # type: ignore[no-untyped-def]
        self.script = script

    def decide(self, view: ClusterView) -> Decision:
        live = {**view.running, **view.pending}
        placements = {
            j: JobAllocation(job_id=j, placement=p)
            for j, p in self.script(view).items()
            if j in live
        }
        return Decision(shares={j: p.gpus for j, p in placements.items()}, placements=placements)


def _spec(
    job_id: str, submit: float, work: float, gpus: int, lo: int | None = None, hi: int | None = None
) -> JobSpec:
    elastic = Elasticity(min_gpus=lo, max_gpus=hi) if lo is not None and hi is not None else None
    return JobSpec(
        id=job_id,
        submit_time=submit,
        requested_gpus=gpus,
        total_iterations=work,
        throughput=LINEAR,
        elasticity=elastic,
    )


def _engine(
    jobs: list[JobSpec], policy: PolicyBase, restart_s: float, gate: RestartGate | None
) -> Engine:
    cluster = Cluster.uniform(1, 4)
    overheads = Overheads(
        start_s=0, resize_mode="checkpoint_restart", restart_s=restart_s, migrate_s=restart_s
    )
    executor = SimulatedCluster(cluster, jobs, overheads)
    engine = Engine(cluster, policy, executor, sample_interval_s=None, restart_gate=gate)
    engine.check_delta_plans = True
    return engine


def _shrink_for_b(view: ClusterView) -> dict[str, dict[str, tuple[int, ...]]]:
    """``a`` on all four GPUs; while ``b`` (1 GPU) is there, ``a`` shrinks to three for it."""
    if "b" in view.running or "b" in view.pending:
        return {"a": {"node000": (0, 1, 2)}, "b": {"node000": (3,)}}
    return {"a": {"node000": (0, 1, 2, 3)}}


FLAT = ThroughputProfile(points={1: 1.0, 2: 1.9, 3: 2.7, 4: 2.8})
"""Sublinear: a fourth GPU adds little, so giving it up for a waiting job can pay."""


@pytest.mark.parametrize(
    ("a_work", "carried"),
    [
        (196.0, False),  # a ends 30 s after b arrives: b's 30-s wait x 1 GPU - a's 1.1-s loss x
        # 3 GPUs = 27 GPU-s < the 30-s restart x 3 GPUs = 90: skipped
        (2112.0, True),  # a has 714 s to go: b's wait is worth 714 GPU-s, a loses 79: carried
    ],
)
def test_a_shrink_and_the_start_it_makes_room_for_go_or_stay_together(
    a_work: float, carried: bool
) -> None:
    jobs = [
        JobSpec(
            id="a",
            submit_time=0,
            requested_gpus=4,
            total_iterations=a_work,
            throughput=FLAT,
            elasticity=Elasticity(min_gpus=1, max_gpus=4),
        ),
        _spec("b", 40, 5, 1),
    ]
    gate = RestartGate(GateConfig(min_dwell_s=0))
    engine = _engine(jobs, _Scripted(_shrink_for_b), 30.0, gate)
    engine.run()
    rec = {r.job_id: r for r in engine.result().jobs}
    changes = gate.stats
    assert changes["shrink"]["proposed"] >= 1
    if carried:
        assert changes["shrink"]["done"] == 1 and rec["b"].first_start == pytest.approx(40.0)
    else:
        # skipped together: a kept its four GPUs, b started only when a had finished
        assert rec["a"].resizes == 0 and changes["shrink"]["done"] == 0
        assert changes["start"]["skipped"] >= 1
        assert rec["b"].first_start == pytest.approx(rec["a"].finish_time)
        assert rec["a"].finish_time == pytest.approx(a_work / 2.8)
    shrinks = [d for d in gate.decisions if "shrink" in d.changes.values()]
    assert shrinks and all(d.starts == ("b",) for d in shrinks)
    assert all(d.carried is carried for d in shrinks)
    assert all(d.gain <= d.cost and d.why == "too costly" for d in gate.decisions if not d.carried)
    assert engine.running == {} and all(len(g) == 4 for g in engine.free.values())


def test_a_held_job_is_not_resized_within_the_dwell() -> None:
    """``hold`` (what the controller does for the running jobs it adopts after a restart):
    held at 40 s, as a controller restarted then would, ``a`` is not shrunk for ``b`` although
    the shrink pays for itself (the carried case above), and ``b`` waits with it; not held, the
    shrink is carried out at once (``a`` started at 0 s, past the 30-s dwell)."""
    jobs = [
        JobSpec(
            id="a",
            submit_time=0,
            requested_gpus=4,
            total_iterations=2112.0,
            throughput=FLAT,
            elasticity=Elasticity(min_gpus=1, max_gpus=4),
        ),
        _spec("b", 40, 5, 1),
    ]
    for held in (True, False):
        gate = RestartGate(GateConfig(min_dwell_s=30.0))

        def restarted_at_b(
            view: ClusterView, held: bool = held, gate: RestartGate = gate
        ) -> dict[str, dict[str, tuple[int, ...]]]:
            if held and "b" in view.pending:
                gate.hold(list(view.running), view.now)
                gate.hold(list(view.running), view.now - 20.0)  # a later clock is kept
            return _shrink_for_b(view)

        engine = _engine(jobs, _Scripted(restarted_at_b), 30.0, gate)
        engine.run()
        rec = {r.job_id: r for r in engine.result().jobs}
        if held:
            assert gate.skipped_for_dwell >= 1 and rec["b"].first_start > 40.0
            assert any(d.why == "dwell" and d.starts == ("b",) for d in gate.decisions)
        else:
            assert gate.skipped_for_dwell == 0 and rec["b"].first_start == pytest.approx(40.0)


def test_zero_cost_passes_the_policys_plan_unchanged() -> None:
    jobs = [_spec("a", 0, 400, 4, 1, 4), _spec("b", 40, 5, 1)]
    results = []
    for gate in (None, RestartGate(GateConfig(min_dwell_s=1e9))):
        engine = _engine(jobs, _Scripted(_shrink_for_b), 0.0, gate)
        engine.run()
        results.append(
            engine.result().model_dump(
                exclude={"decision_ms", "solver_ms", "wall_s", "restart_gate"}
            )
        )
    assert results[0] == results[1]
    assert {j["job_id"]: j["resizes"] for j in results[0]["jobs"]}["a"] == 2  # shrink, grow


def test_dwell_holds_a_job_that_just_changed() -> None:
    """``a`` grows at 40 s when ``b`` ends; ``c`` arrives at 42 s and the script shrinks ``a``
    back for it. That shrink pays for itself, but ``a`` changed 2 s ago: with a 30-s dwell it
    is skipped (``c`` waits), with none it is carried out at once."""

    def script(view: ClusterView) -> dict[str, dict[str, tuple[int, ...]]]:
        live = {**view.running, **view.pending}
        if "b" in live:
            return {"a": {"node000": (0, 1)}, "b": {"node000": (2, 3)}}
        if "c" in live:
            return {"a": {"node000": (0, 1)}, "c": {"node000": (2, 3)}}
        return {"a": {"node000": (0, 1, 2, 3)}}

    curve = ThroughputProfile(points={1: 1.0, 2: 2.0, 4: 2.2})
    for dwell in (30.0, 0.0):
        gate = RestartGate(GateConfig(min_dwell_s=dwell))
        jobs = [
            JobSpec(
                id="a",
                submit_time=0,
                requested_gpus=2,
                total_iterations=2000,
                throughput=curve,
                elasticity=Elasticity(min_gpus=1, max_gpus=4),
            ),
            _spec("b", 0, 80, 2),
            _spec("c", 42, 20, 2),
        ]
        engine = _engine(jobs, _Scripted(script), 1.0, gate)
        engine.run()
        rec = {r.job_id: r for r in engine.result().jobs}
        assert gate.stats["grow"]["done"] >= 1
        if dwell:
            assert gate.skipped_for_dwell >= 1 and rec["c"].first_start >= 40.0 + dwell
            assert any(d.why == "dwell" and "c" in d.starts for d in gate.decisions)
        else:
            assert gate.skipped_for_dwell == 0 and rec["c"].first_start == pytest.approx(42.0)


def test_gate_kinds() -> None:
    from gpuplan.models import Action

    one = JobAllocation(job_id="j", placement={"n": (0,)})
    two = JobAllocation(job_id="j", placement={"n": (0, 1)})
    other = JobAllocation(job_id="j", placement={"n": (2,)})
    assert gate_kind(Action(kind="resize", job_id="j", before=one, after=two)) == "grow"
    assert gate_kind(Action(kind="resize", job_id="j", before=two, after=one)) == "shrink"
    assert gate_kind(Action(kind="resize", job_id="j", before=one, after=other)) == "migrate"
    assert gate_kind(Action(kind="migrate", job_id="j", before=one, after=other)) == "migrate"
    assert gate_kind(Action(kind="preempt", job_id="j", before=one)) == "preempt"
    assert gate_kind(Action(kind="start", job_id="j", after=one)) is None


# ---------------------------------------------------------------------------------- simulated


def _scenario(
    gate: bool,
    restart_s: float,
    jobs: int = 200,
    rate_per_h: float = 3600.0,
    mean_s: float = 20.0,
    seed: int = 1,
    nodes: int = 4,
) -> ScenarioSpec:
    """The lab's shape: 4 x 4 GPUs, short elastic jobs arriving faster than they finish."""
    return ScenarioSpec.model_validate(
        {
            "name": "gate",
            "seed": seed,
            "cluster": {"nodes": nodes, "gpus_per_node": 4},
            "workload": {
                "source": "synthetic",
                "jobs": jobs,
                "arrival_rate_per_h": rate_per_h,
                "mean_duration_s": mean_s,
                "mapping": "afs",
            },
            "overheads": {
                "start_s": restart_s,
                "restart_s": restart_s,
                "migrate_s": restart_s,
                "preempt_s": 0.0,
                "resize_mode": "checkpoint_restart",
                "stop_free_s": 0.0,
                "sidecar_s": 0.0,
            },
            "engine": {"restart_gate": {"enabled": gate}},
        }
    )


def _policies() -> list[str]:
    return sorted(policy_names())


def test_zero_overheads_every_policy_identical_with_the_gate_on() -> None:
    """Zero overheads: the gate on (simulation's opt-in) changes no result of any policy,
    though it weighs hundreds of proposed changes. (offline-optimal searches every event
    order: it gets 5 jobs, the others 12.)"""
    ran, weighed = [], 0
    for policy in _policies():
        jobs = 5 if policy == "offline-optimal" else 12
        dumps = []
        for gate in (False, True):
            try:
                prepared = prepare(
                    _scenario(gate, 0.0, jobs=jobs, rate_per_h=720.0, mean_s=60.0, nodes=2)
                )
                result = run(prepared, policy)
            except InputError:  # a policy this workload does not suit
                break
            assert (result.restart_gate is not None) is gate
            if result.restart_gate is not None:
                weighed += sum(
                    v["proposed"] for k, v in result.restart_gate["changes"].items() if k != "start"
                )
                assert all(v["skipped"] == 0 for v in result.restart_gate["changes"].values())
            dumps.append(
                result.model_dump(
                    exclude={  # timings, incl. offline's solve time
                        "decision_ms": True,
                        "solver_ms": True,
                        "wall_s": True,
                        "restart_gate": True,
                        "bound": {"wall_ms"},
                    }
                )
            )
        else:
            assert dumps[0] == dumps[1], policy
            ran.append(policy)
    assert len(ran) >= len(_policies()) - 3, sorted(set(_policies()) - set(ran))
    assert weighed >= 100


def test_with_restarts_of_15_s_the_gate_skips_changes_and_afs_l_finishes_sooner() -> None:
    """afs-l on the lab-shaped workload with 15-s restarts (a real job's 11-16 s): the gate
    skips the changes that cost more than they gain and the mean JCT and drain improve."""
    off = summarize(run(prepare(_scenario(False, 15.0)), "afs-l"))
    on_result = run(prepare(_scenario(True, 15.0)), "afs-l")
    on = summarize(on_result)
    changes = on_result.restart_gate["changes"]  # type: ignore[index]
    print(
        f"\n[afs-l, restart 15 s: mean JCT {off.avg_jct_s:.1f} -> {on.avg_jct_s:.1f} s, "
        f"drain {off.makespan_s:.1f} -> {on.makespan_s:.1f} s; gate {changes}]"
    )
    assert on.finished == off.finished == 200
    assert changes["grow"]["skipped"] + changes["shrink"]["skipped"] >= 1
    assert (
        on.gate_skipped
        and on.gate_done is not None
        and on.gate_proposed == on.gate_done + on.gate_skipped
    )
    assert on.resizes < off.resizes
    assert on.avg_jct_s < off.avg_jct_s and on.makespan_s <= off.makespan_s  # type: ignore[operator]


def test_scenario_block_validates() -> None:
    with pytest.raises(ValueError, match="min_dwell_s"):
        ScenarioSpec.model_validate(
            {"name": "x", "engine": {"restart_gate": {"enabled": True, "min_dwell_s": -1}}}
        )
    with pytest.raises(ValueError, match="extra"):
        ScenarioSpec.model_validate({"name": "x", "engine": {"restart_gate": {"on": True}}})


def test_simulate_without_a_gate_reports_none() -> None:
    cluster = Cluster.uniform(1, 4)
    result, engine, _ = simulate(cluster, [_spec("a", 0, 10, 2)], make_policy("fifo"))
    assert engine.restart_gate is None and result.restart_gate is None
    assert "restart_gate" not in result.model_dump()
    assert summarize(result).gate_proposed is None


# ---------------------------------------------------------------------------------- journal


def test_controller_journals_counters_and_restores_costs(tmp_path: Path) -> None:
    jobs = [_spec("a", 0, 400, 4, 1, 4), _spec("b", 40, 5, 1)]
    gate = RestartGate(GateConfig(min_dwell_s=0))
    engine = _engine(jobs, _Scripted(_shrink_for_b), 30.0, gate)
    engine.run()
    gate.costs.record("a", "resize", 13.0)
    saved: dict[str, str] = {}
    with Journal(tmp_path / "state" / "journal.db") as journal:
        save_gate(engine, journal, 7, saved)
        counters = json.loads(journal.meta("restart_gate:run:7") or "{}")
        assert counters["changes"]["shrink"] == gate.stats["shrink"]
        assert json.loads(journal.meta(COSTS_KEY) or "{}")["resize"]["median_s"] == 13.0
        fresh = _engine(jobs, _Scripted(_shrink_for_b), 30.0, RestartGate())
        restore_gate(fresh, journal)
        assert fresh.restart_gate is not None
        assert fresh.restart_gate.costs.estimate("z", "resize", 3.0) == 13.0
        journal.set_meta(COSTS_KEY, "[not json")
        restore_gate(_engine(jobs, _Scripted(_shrink_for_b), 30.0, RestartGate()), journal)


def test_controller_probe_measures_intent_to_running_again(tmp_path: Path) -> None:
    """The controller's figure: a journaled intent, then Slurm's RUNNING of the next
    incarnation; once per change, never for a first start, a start after a preemption as
    ``preempt``."""
    from gpuplan.executors.control.change_latency import ChangeLatencyProbe
    from gpuplan.executors.control.journal import ActionIntent
    from gpuplan.executors.slurm.cli import SlurmJob

    def sj(state: str, restarts: int) -> SlurmJob:
        return SlurmJob(
            job_id=5,
            name="a",
            state=state,
            reason="",
            nodes=("node1",),
            partition="p",
            comment="",
            admin_comment="",
            restart_count=restarts,
            user_id=0,
            priority=1,
            tres_per_node="",
            tres_per_job="",
            exit_code=None,
            batch_host="node1",
            raw={},
        )

    def act(journal: Journal, run: int, kind: str, restarts: int) -> float:
        _, ids = journal.record_plan(
            run,
            0.0,
            "p",
            "{}",
            [
                ActionIntent(
                    engine_id="a",
                    slurm_id=5,
                    kind=kind,
                    before={"node1": 1},
                    after={"node1": 2},
                    restart_count=restarts,
                )
            ],
        )
        journal.settle(ids, "applied")
        return journal.actions("a")[-1].intended_at

    clock = [0.0]
    costs = ChangeCosts()
    with Journal(tmp_path / "state" / "journal.db") as journal:
        run_id = journal.begin_run("p")
        probe = ChangeLatencyProbe(journal, costs, clock=lambda: clock[0])
        t = act(journal, run_id, "start", 0)
        clock[0] = t + 2.0
        assert probe.running_again("a", sj("RUNNING", 0)) is None  # a first start
        t = act(journal, run_id, "resize", 0)
        clock[0] = t + 14.0
        assert probe.running_again("a", sj("PENDING", 1)) is None
        assert probe.running_again("a", sj("RUNNING", 0)) is None  # the old incarnation
        assert probe.running_again("a", sj("RUNNING", 1)) == pytest.approx(14.0)
        assert probe.running_again("a", sj("RUNNING", 1)) is None  # measured once
        act(journal, run_id, "preempt", 1)
        t = act(journal, run_id, "start", 2)
        clock[0] = t + 9.0
        assert probe.running_again("a", sj("RUNNING", 2)) == pytest.approx(9.0)
    assert costs.estimate("a", "resize", 3.0) == pytest.approx(14.0)
    assert costs.estimate("a", "preempt", 3.0) == pytest.approx(9.0)


# ---------------------------------------------------------------------------------- stand-in


def test_startup_option_parsing_and_seeded_draws() -> None:
    assert parse_startup("12") == (12.0, 12.0)
    assert parse_startup("uniform:11:16") == (11.0, 16.0)
    for bad in ("x", "uniform:3:1", "uniform:1", "normal:1:2", "-1", "inf", "nan"):
        with pytest.raises(UsageError):
            parse_startup(bad)
    draws = {startup_delay((11.0, 16.0), 7, "job", float(i)) for i in range(20)}
    assert len(draws) == 20 and all(11.0 <= d <= 16.0 for d in draws)
    assert startup_delay((11.0, 16.0), 7, "job", 3.0) == startup_delay((11.0, 16.0), 7, "job", 3.0)
    assert startup_delay((11.0, 16.0), 8, "job", 3.0) != startup_delay((11.0, 16.0), 7, "job", 3.0)
    assert startup_delay((12.0, 12.0), 1, "job", 0.0) == 12.0


def _standin(state: Path, job: str, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1"}
    argv = [
        sys.executable,
        "-m",
        "gpuplan.executors.standin",
        f"--job-id={job}",
        "--work",
        "2",
        "--rate-per-gpu",
        "5",
        "--state-dir",
        str(state),
        *extra,
    ]
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_standin_waits_its_startup_before_its_first_progress(tmp_path: Path) -> None:
    launched = time.time()
    proc = _standin(tmp_path, "s", "--startup-s", "uniform:0.6:0.8", "--startup-seed", "3")
    assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    progress = json.loads((tmp_path / "s.progress").read_text())
    assert progress["started"] - launched >= 0.6  # training began only after the start-up
    assert json.loads((tmp_path / "s.ckpt").read_text())["done"] == 2.0
    bad = _standin(tmp_path, "t", "--startup-s", "uniform:2:1")
    assert bad.wait(timeout=120) == 2
    assert "--startup-s" in (bad.stderr.read() if bad.stderr else "")


def test_a_stop_during_startup_ends_the_run_without_touching_the_checkpoint(tmp_path: Path) -> None:
    code = (
        "import os, signal, sys, threading\n"
        "from gpuplan.executors import standin\n"
        "stop = standin.StopSignals()\n"
        "threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1)).start()\n"
        "print(standin.wait_startup(stop, 300.0))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=290, check=True
    )
    assert out.stdout.strip() == "False"
    # and through the command line: a stop while starting leaves no file behind
    proc = _standin(tmp_path, "u", "--startup-s", "300")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _in_startup(proc.pid):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0
    assert not (tmp_path / "u.ckpt").exists() and not (tmp_path / "u.progress").exists()


def _in_startup(pid: int) -> bool:
    """The process has installed its stop handlers (SIGTERM caught: /proc's SigCgt)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(
        (int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:")), 0
    )
    return bool(caught & (1 << (signal.SIGTERM - 1)))


# ---------------------------------------------------------------------------------- real lab


@pytest.fixture(scope="module")
def lab() -> Iterator[object]:
    from .. import slurm_fixtures as fx

    yield from fx.module_lab()


class _GrowEach(PolicyBase):
    """Starts ``w`` and, once the executor has measured a restart, ``s`` — each on one GPU of
    its own node — and proposes growing every running job to two GPUs at every decision
    (deciding again each second while a job is on one GPU)."""

    name = "grow-each"

    def __init__(self, measured: ChangeCosts) -> None:
        self.measured = measured

    def decide(self, view: ClusterView) -> Decision:
        placements: dict[str, JobAllocation] = {}
        homes = {"w": "node1", "s": "node2"}
        for job_id, node in homes.items():
            if job_id in view.running:
                placements[job_id] = JobAllocation(job_id=job_id, placement={node: (0, 1)})
            elif job_id in view.pending and (job_id == "w" or self.measured.samples):
                placements[job_id] = JobAllocation(job_id=job_id, placement={node: (0,)})
        return Decision(shares={j: p.gpus for j, p in placements.items()}, placements=placements)

    def next_wakeup(self, view: ClusterView) -> float | None:
        waiting = any(j.gpus == 1 for j in view.running.values()) or "s" in view.pending
        return view.now + 1.0 if waiting else None


def _with_startup(builder, seconds: float):  # type: ignore[no-untyped-def]
    def build(ctx) -> Sequence[str]:  # type: ignore[no-untyped-def]
        return [*builder(ctx), "--startup-s", repr(seconds)]

    return build


def test_real_lab_a_measured_restart_cost_decides_each_grow(lab: object, tmp_path: Path) -> None:
    """Two stand-in jobs with a 12-s start-up on the real Slurm lab. ``w`` (long) grows first:
    its gain dwarfs the prior cost, so it is carried out, and its restart is measured (~12 s).
    ``s`` (16 iterations) then starts, and its grow would save ~8 s x 2 GPUs: more than the
    3-s prior would cost, less than the measured ~12 s x 2 GPUs — the gate skips it."""
    from .. import slurm_fixtures as fx

    jobs = [fx.job("w", 0.0, 160.0, 1, 1, 2), fx.job("s", 0.0, 16.0, 1, 1, 2)]
    state = tmp_path / "state"
    cluster, executor = fx.make_executor(
        lab,
        jobs,
        state,
        nodes=("node1", "node2"),
        max_wall_s=400,  # type: ignore[arg-type]
        command=_with_startup(fx.standin_builder(), 12.0),
    )
    costs = executor_change_costs(executor)
    assert costs is not None
    gate = RestartGate(GateConfig(min_dwell_s=0), costs)
    prior = executor.capabilities.restart_latency_s
    engine = Engine(cluster, _GrowEach(costs), executor, sample_interval_s=None, restart_gate=gate)
    try:
        engine.run()
    finally:
        executor.cancel_all()
    fx.assert_progress_conserved(engine, executor, state, jobs)
    rec = {r.job_id: r for r in engine.result().jobs}
    decisions = list(gate.decisions)
    print(
        f"\n[lab: prior {prior:.2f} s, measured {costs.summary()}; decisions "
        f"{[(d.changes, round(d.gain, 1), round(d.cost, 1), d.why) for d in decisions]}]"
    )
    w = [d for d in decisions if "w" in d.changes]
    s = [d for d in decisions if "s" in d.changes]
    assert [d.carried for d in w] == [True] and rec["w"].resizes == 1
    assert s and not any(d.carried for d in s) and rec["s"].resizes == 0
    measured = costs.estimate("s", "resize", prior)
    assert measured >= 12.0 > prior  # the stand-in's start-up is in the measured cost
    first = s[0]
    assert first.cost == pytest.approx(measured * 2) and first.gain < first.cost
    assert first.gain > prior * 2  # the prior alone would have let this grow through
    assert gate.stats["grow"] == {"proposed": 1 + len(s), "done": 1, "skipped": len(s)}
