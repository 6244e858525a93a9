"""Core v2: shared GPUs, demands, admission, parameters, configurations and wrappers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import gpuplan
from gpuplan.executors.engine import Engine
from gpuplan.executors.simulator.cluster import SimulatedCluster
from gpuplan.executors.simulator.run import simulate
from gpuplan.models import (
    Cluster,
    ClusterState,
    ClusterView,
    InputError,
    JobAllocation,
    JobSnapshot,
    JobSpec,
    MemoryProfile,
    PlanRefused,
    ThroughputProfile,
)
from gpuplan.models.interference import PairwiseInterference
from gpuplan.solver_core.diff import build_plan, check_plan
from gpuplan.solver_core.placement.best_fit import best_fit_placement
from gpuplan.solver_core.policy import Decision, Demand, PolicyBase, StagedPolicy
from gpuplan.solver_core.registry import make_policy

from ..conftest import NO_OVERHEADS, CapacityChecker

LINEAR = ThroughputProfile.linear(1.0)


def _job(
    job_id: str, gpus: int = 1, work: float = 100.0, submit: float = 0.0, **kw: object
) -> JobSpec:
    return JobSpec(
        id=job_id,
        submit_time=submit,
        requested_gpus=gpus,
        total_iterations=work,
        throughput=LINEAR,
        **kw,
    )


def _half(view: ClusterView, stats: list) -> dict[str, Demand]:
    """Every active job asks for half of one GPU."""
    return {j: Demand(gpus=1, share=0.5) for j in [*view.running, *view.pending]}


# --------------------------------------------------------------------------- shared GPUs
def test_two_jobs_at_half_a_gpu_share_one_gpu_in_the_simulator() -> None:
    cluster = Cluster.uniform(1, 1)
    policy = StagedPolicy("half", _half, best_fit_placement)
    checker = CapacityChecker()
    result, engine, _ = simulate(
        cluster, [_job("a"), _job("b")], policy, overheads=NO_OVERHEADS, on_plan=checker
    )
    done = {r.job_id: r for r in result.jobs}
    # each runs at half speed on the one GPU: 100 iterations at 0.5/s
    assert done["a"].finish_time == pytest.approx(200.0)
    assert done["b"].finish_time == pytest.approx(200.0)
    assert engine.free == {"node000": {0}} and engine.shared == {"node000": {}}


def test_interference_slows_co_located_jobs_and_a_completion_speeds_the_other_up() -> None:
    cluster = Cluster.uniform(1, 1)
    jobs = [_job("a", work=50.0, model="m1"), _job("b", work=100.0, model="m2")]
    table = PairwiseInterference({("m1", "m2"): 0.8, ("m2", "m1"): 0.5})
    result, _, _ = simulate(
        cluster,
        jobs,
        StagedPolicy("half", _half, best_fit_placement),
        overheads=NO_OVERHEADS,
        interference=table,
    )
    done = {r.job_id: r.finish_time for r in result.jobs}
    # a: 0.5 x 0.8 = 0.4 it/s -> 125 s. b: 0.5 x 0.5 = 0.25 it/s for 125 s (31.25 it), then
    # alone at 0.5 it/s for the remaining 68.75 it -> 137.5 s more.
    assert done["a"] == pytest.approx(125.0)
    assert done["b"] == pytest.approx(125.0 + 137.5)


def test_a_share_only_change_is_a_reshare_action() -> None:
    state = ClusterState(
        now=0,
        cluster=Cluster.uniform(1, 2),
        jobs=[
            JobSnapshot(
                spec=_job("a"),
                allocation=JobAllocation(job_id="a", placement={"node000": (0,)}, share=0.5),
            ),
        ],
    )
    view = state.to_view()
    assert view.shared == {"node000": {0: 0.5}} and view.free == {"node000": [1]}
    after = JobAllocation(job_id="a", placement={"node000": (0,)}, share=1.0)
    plan = build_plan(view, Decision({"a": 1}, {"a": after}), "t")
    assert [a.kind for a in plan.actions] == ["reshare"]
    check_plan(view, plan)


def test_a_gpu_is_never_over_committed_and_whole_jobs_avoid_shared_gpus() -> None:
    state = ClusterState(
        now=0,
        cluster=Cluster.uniform(1, 2),
        jobs=[
            JobSnapshot(
                spec=_job("a"),
                allocation=JobAllocation(job_id="a", placement={"node000": (0,)}, share=0.6),
            ),
            JobSnapshot(spec=_job("b")),
            JobSnapshot(spec=_job("c")),
        ],
    )
    view = state.to_view()
    alloc = {"a": Demand(1, 0.6), "b": Demand(1, 0.5), "c": 1}
    decision = StagedPolicy("t", lambda v, s: alloc, best_fit_placement).decide(view)
    placements = decision.placements
    assert placements["a"].placement == {"node000": (0,)}  # kept in place
    assert placements["c"].placement == {"node000": (1,)}  # the whole GPU left
    assert "b" not in placements  # 0.6 + 0.5 > 1 and GPU 1 is held whole
    check_plan(view, build_plan(view, decision, "t"))
    bad = JobAllocation.fast("b", {"node000": (0,)}, 0.5)
    with pytest.raises(ValueError, match="over-committed"):
        check_plan(view, build_plan(view, Decision({}, {**placements, "b": bad}), "t"))


# --------------------------------------------------------------------------- executors check
class _Overcommit(PolicyBase):
    name = "overcommit"

    def decide(self, view: ClusterView) -> Decision:
        places = {j: JobAllocation.fast(j, {"node000": (0,)}) for j in view.pending}
        return Decision({j: 1 for j in places}, places)


def test_every_executor_refuses_a_plan_that_gives_a_gpu_twice() -> None:
    cluster = Cluster.uniform(1, 2)
    executor = SimulatedCluster(cluster, [_job("a"), _job("b")], NO_OVERHEADS)
    engine = Engine(cluster, _Overcommit(), executor, sample_interval_s=None)
    with pytest.raises(PlanRefused, match=r"GPU node000:0 is over-committed"):
        engine.run()
    assert engine.plans_refused == 1 and engine.running == {}  # nothing was carried out


def test_a_real_executor_refuses_fractional_shares() -> None:
    from gpuplan.executors.base import Executor, ExecutorCapabilities

    class _NoSharing(SimulatedCluster):
        pass

    cluster = Cluster.uniform(1, 1)
    executor = _NoSharing(cluster, [_job("a")], NO_OVERHEADS)
    executor.capabilities = ExecutorCapabilities(
        resize="restart", pin_gpus=False, preempt_modes=("checkpoint",), restart_latency_s=1.0
    )
    assert isinstance(executor, Executor)
    engine = Engine(cluster, StagedPolicy("half", _half, best_fit_placement), executor)
    with pytest.raises(PlanRefused, match="cannot share GPUs"):
        engine.run()


# --------------------------------------------------------------------------- demands
def test_typed_demands_are_placed_on_their_type_only() -> None:
    cluster = Cluster(
        nodes=[
            {"name": "k", "gpus": 4, "gpu_type": "k80"},
            {"name": "v", "gpus": 4, "gpu_type": "v100"},
        ]
    )
    state = ClusterState(
        now=0,
        cluster=cluster,
        jobs=[JobSnapshot(spec=_job("a", gpus=2)), JobSnapshot(spec=_job("b", gpus=2))],
    )
    view = state.to_view()
    assert view.free_by_type() == {"k80": 4, "v100": 4}
    alloc = {"a": Demand(2, gpu_type="v100"), "b": Demand(2, gpu_type="k80")}
    placements = StagedPolicy("t", lambda v, s: alloc, best_fit_placement).decide(view).placements
    assert set(placements["a"].placement) == {"v"}
    assert set(placements["b"].placement) == {"k"}


# --------------------------------------------------------------------------- admission
def test_admission_is_a_policy_stage() -> None:
    cluster = Cluster.uniform(1, 4)

    def small_only(spec: JobSpec, _cluster: Cluster) -> str | None:
        return "too big for this queue" if spec.requested_gpus > 2 else None

    base = make_policy("fifo")
    assert isinstance(base, StagedPolicy)
    policy = StagedPolicy("fifo-small", base.allocation, base.placement, admission=small_only)
    result, engine, _ = simulate(
        cluster, [_job("a", 4), _job("b", 2)], policy, overheads=NO_OVERHEADS
    )
    assert engine.rejected == [("a", "too big for this queue")]
    assert [r.job_id for r in result.jobs if r.finish_time is not None] == ["b"]


# --------------------------------------------------------------------------- parameters
def test_parameters_reach_the_policy_and_bad_ones_are_one_line() -> None:
    p = make_policy("tiresias-l(thresholds=[500, 1000], promote_knob=null, service=time)")
    assert p.allocation.thresholds == (500.0, 1000.0) and p.allocation.promote_knob is None
    assert p.allocation.service == "time"
    for bad, field in [
        ("tiresias-l(thresholds=[2, 1])", "tiresias-l"),
        ("tiresias-l(knob=1)", "knob"),
        ("afs-l(wrappers=[nope])", "wrappers"),
        ("tiresias-l(promote_knob=.nan)", "promote_knob"),
        ("tiresias-l(thresholds=[1", "policies"),
    ]:
        with pytest.raises(InputError) as err:
            make_policy(bad)
        assert field in str(err.value) and "\n" not in str(err.value)


def test_presets_equal_their_wrapped_configuration() -> None:
    jobs = [
        _job(
            f"j{i}",
            gpus=1 + i % 3,
            work=300.0 + 40 * i,
            submit=5.0 * i,
            elasticity={"min_gpus": 1, "max_gpus": 8},
        )
        for i in range(12)
    ]
    cluster = Cluster.uniform(2, 4)
    preset, _, _ = simulate(cluster, jobs, make_policy("srtf-packed"), overheads=NO_OVERHEADS)
    inline, _, _ = simulate(
        cluster, jobs, make_policy("srtf(wrappers=[network-packing])"), overheads=NO_OVERHEADS
    )
    assert [r.finish_time for r in preset.jobs] == [r.finish_time for r in inline.jobs]


def _scenario(tmp_path: Path, policies: dict) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "tl",
                "seed": 0,
                "cluster": {"nodes": 1, "gpus_per_node": 4},
                "workload": {
                    "source": "inline",
                    "inline_jobs": [
                        {
                            "id": f"j{i}",
                            "submit_time": 10.0 * i,
                            "requested_gpus": 4 if i % 3 == 0 else 1,
                            "duration": 2000.0 if i % 3 == 0 else 300.0,
                        }
                        for i in range(9)
                    ],
                },
                "policies": policies,
            }
        )
    )
    return path


def test_a_policies_block_changes_results(tmp_path: Path) -> None:
    path = _scenario(
        tmp_path, {"tl-100": {"base": "tiresias-l", "thresholds": [100], "promote_knob": None}}
    )
    default, tuned = gpuplan.compare(str(path), ["tiresias-l", "tl-100"])
    assert tuned.policy == "tl-100"
    jct = [sum(r.jct for r in res.jobs) for res in (default, tuned)]
    assert jct[0] != pytest.approx(jct[1])
    assert sum(r.preemptions for r in tuned.jobs) > sum(r.preemptions for r in default.jobs)


def test_cli_policies_shows_parameters_and_refuses_bad_values(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "gpuplan"]
    shown = subprocess.run(
        [*cli, "policies", "tiresias-l"], capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0 and "promote_knob" in shown.stdout
    path = _scenario(tmp_path, {"bad": {"base": "tiresias-l", "thresholds": "x"}})
    bad = subprocess.run(
        [*cli, "compare", "--scenario", str(path), "--policies", "fifo,bad"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "policies.bad.thresholds" in bad.stderr
    ok = subprocess.run(
        [
            *cli,
            "compare",
            "--scenario",
            str(path),
            "--json",
            "--policies",
            "fifo,tiresias-l(thresholds=[100],promote_knob=null)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ok.returncode == 0, ok.stderr
    rows = json.loads(ok.stdout)
    assert [r["policy"] for r in rows] == ["fifo", "tiresias-l(thresholds=[100],promote_knob=null)"]


# --------------------------------------------------------------------------- wrappers
def test_co_location_wrapper_shares_gpus_between_small_jobs() -> None:
    mem = MemoryProfile(gamma=0.2, delta=0.1, p=0.1, compute=0.5)
    jobs = [_job(j, work=100.0, memory=mem) for j in "abcd"]
    policy = make_policy("fifo-backfill(wrappers=[co-location])")
    checker = CapacityChecker()
    result, _, _ = simulate(
        Cluster.uniform(1, 2), jobs, policy, overheads=NO_OVERHEADS, on_plan=checker
    )
    # four jobs that each need half a GPU (alpha = 0.5) on two GPUs: all start at once and,
    # getting their whole demand, run at full speed (no interference model)
    assert all(r.first_start == 0.0 and r.finish_time == pytest.approx(100.0) for r in result.jobs)


def test_learning_wrapper_caps_unmeasured_jobs_at_the_fair_share() -> None:
    view = ClusterState(
        now=0,
        cluster=Cluster.uniform(1, 8),
        jobs=[JobSnapshot(spec=_job(j, elasticity={"min_gpus": 1, "max_gpus": 8})) for j in "ab"],
    ).to_view()
    plain = make_policy("afs-l").decide(view).shares
    capped = make_policy("afs-l(wrappers=[learning])").decide(view).shares
    assert max(plain.values()) > 4 and max(capped.values()) <= 4


@pytest.mark.parametrize(("service", "b_starts"), [("gpu_time", 50.0), ("time", 100.0)])
def test_tiresias_service_counts_gpu_seconds_or_executed_seconds(
    service: str, b_starts: float
) -> None:
    """a (4 GPUs) runs alone from 0; b (4 GPUs) arrives at 50. Threshold 100: in GPU-seconds a
    leaves Q0 at t = 25, so b (Q0) preempts it on arrival; in executed seconds a stays in Q0
    until t = 100, and only then does b take the GPUs."""
    jobs = [_job("a", 4, work=4000.0), _job("b", 4, work=400.0, submit=50.0)]
    policy = make_policy(f"tiresias-l(thresholds=[100],promote_knob=null,service={service})")
    result, _, _ = simulate(Cluster.uniform(1, 4), jobs, policy, overheads=NO_OVERHEADS)
    b = next(r for r in result.jobs if r.job_id == "b")
    assert b.first_start == pytest.approx(b_starts)


def test_decisions_only_at_round_boundaries() -> None:
    """Pollux's 60-s rounds: a holds all four GPUs until 100; b (t = 10) starts only at the
    next boundary, 120 (the GPUs idle from 100 to 120); c (t = 130) waits for 180. Deciding at
    every event, b would start at 100 and c at 130."""
    jobs = [
        _job("a", 4, work=400.0),
        _job("b", 1, work=10.0, submit=10.0),
        _job("c", 4, work=40.0, submit=130.0),
    ]
    result, _, _ = simulate(
        Cluster.uniform(1, 4),
        jobs,
        make_policy("fifo-backfill"),
        overheads=NO_OVERHEADS,
        round_interval_s=60.0,
        decide_only_at_rounds=True,
    )
    starts = {r.job_id: r.first_start for r in result.jobs}
    assert starts == {"a": 0.0, "b": 120.0, "c": 180.0}
    plain, _, _ = simulate(
        Cluster.uniform(1, 4), jobs, make_policy("fifo-backfill"), overheads=NO_OVERHEADS
    )
    assert {r.job_id: r.first_start for r in plain.jobs} == {"a": 0.0, "b": 100.0, "c": 130.0}
