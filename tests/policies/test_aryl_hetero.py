"""Aryl heterogeneous training (App. A; Advanced / Ideal scenarios of §7.1).

Worked examples on a loaning cluster with normalised inference servers (8 T4 = 2 slots of a
V100's speed): a flagged job spans training and loaned GPUs only when no single pool fits it,
runs at efficiency x App. A's theoretical throughput, and nothing else ever mixes GPU types.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.executors.metrics import summarize
from gpuplan.executors.simulator.run import simulate
from gpuplan.models import (
    AllocationPlan,
    ClusterView,
    Elasticity,
    JobAllocation,
    JobSpec,
    LoanOffer,
    placement_rate,
)
from gpuplan.scenarios.inference import loaning_cluster
from gpuplan.solver_core.policies.aryl.aryl import ArylConfig
from gpuplan.solver_core.policies.aryl.hetero import mixed_efficiency, theoretical_throughput
from gpuplan.solver_core.registry import make_policy
from tests.conftest import NO_OVERHEADS
from tests.policies.test_aryl_end_to_end import PoolChecker, draw_loan_events

EFFICIENCY = {"aryl-hetero": 0.7, "aryl-hetero-ideal": 1.0}


def job(job_id: str, submit: float, gpus: int, duration: float, **kw: object) -> JobSpec:
    return JobSpec(id=job_id, submit_time=submit, requested_gpus=gpus, duration=duration, **kw)


def run(jobs: Sequence[JobSpec], policy: str, cluster=None, events=None):
    """(result, engine, plans) on 1 training server (8 V100) + 2 loaned (2 slots each)."""
    cluster = cluster or loaning_cluster(1, 2)
    plans: list[AllocationPlan] = []
    check = PoolChecker(list(jobs))

    def hook(view: ClusterView, plan: AllocationPlan) -> None:
        check(view, plan)
        plans.append(plan)

    events = [LoanOffer(time=0, count=2)] if events is None else events
    result, engine, _ = simulate(
        cluster,
        list(jobs),
        make_policy(policy),
        overheads=NO_OVERHEADS,
        events=events,
        on_plan=hook,
    )
    return result, engine, plans


def first_alloc(plans: list[AllocationPlan], job_id: str) -> JobAllocation:
    return next(p.allocations[job_id] for p in plans if job_id in p.allocations)


# ------------------------------------------------------------------------------- the model
def test_theoretical_throughput_reproduces_table_10() -> None:
    # App. A, Tab. 10: homogeneous V100 throughput, then (V100, T4) mixes -> "theoretical"
    speed = {"v100": 1.0, "t4": 0.25}
    rows = {
        18883: (16, [((12, 4), 15342), ((8, 8), 11801), ((4, 12), 8261)]),  # ResNet-50
        791771: (16, [((12, 4), 643313), ((8, 8), 494856), ((4, 12), 346399)]),  # GNMT
        1572: (32, [((24, 8), 1277), ((16, 16), 982), ((8, 24), 687)]),  # BERT
    }
    for homogeneous, (n, mixes) in rows.items():
        for (v100, t4), printed in mixes:
            assert v100 + t4 == n
            got = theoretical_throughput(homogeneous, {"v100": v100, "t4": t4}, speed)
            assert got == pytest.approx(printed, abs=1.5)  # the paper truncates


def test_mixed_efficiency() -> None:
    assert mixed_efficiency([1.0] * 8, 0.7) == pytest.approx(0.7)  # normalised slots
    assert mixed_efficiency([1.0] * 8, 1.0) == 1.0
    # 4 V100 + 16 physical T4: e * mean/min = 0.7 * 0.4/0.25 = 1.12 > 1 (faster than the slowest)
    assert mixed_efficiency([1.0] * 4 + [0.25] * 16, 0.7) == pytest.approx(0.7 * 0.4 / 0.25)
    assert mixed_efficiency([1.0, 1.0, 0.5, 0.5], 0.6) == pytest.approx(0.6 * 0.75 / 0.5)
    with pytest.raises(ValueError):
        mixed_efficiency([1.0], 0.0)
    with pytest.raises(ValueError):
        ArylConfig(heterogeneous=True, hetero_efficiency=1.5)


def test_jobspec_flag_round_trips_and_defaults_off() -> None:
    spec = job("h", 0, 8, 100, heterogeneous=True)
    again = JobSpec.model_validate_json(spec.model_dump_json())
    assert again == spec and again.heterogeneous is True
    old = JobSpec.model_validate_json(
        '{"id": "o", "submit_time": 0, "requested_gpus": 2, "duration": 10}'
    )  # JSON written before the flag
    assert old.heterogeneous is False
    assert JobSpec.model_validate(old.model_dump()) == old


# ------------------------------------------------------------------------------- worked examples
@pytest.mark.parametrize("policy", ["aryl-hetero", "aryl-hetero-ideal"])
def test_rigid_job_spans_both_pools_at_the_stated_efficiency(policy: str) -> None:
    # fill holds 4 of the 8 training GPUs for 10,000 s; h (8 GPUs, 1,000 s at 8 V100) arrives:
    # neither pool alone fits it (4 free V100, 2 x 2 loaned slots), so it runs on both.
    jobs = [job("fill", 0, 4, 10_000, gpu_type="v100"), job("h", 1, 8, 1000, heterogeneous=True)]
    result, _, plans = run(jobs, policy)
    eff = EFFICIENCY[policy]
    alloc = first_alloc(plans, "h")
    assert dict(alloc.placement) == {"t000": (4, 5, 6, 7), "i000": (0, 1), "i001": (0, 1)}
    assert alloc.efficiency == pytest.approx(eff)
    # App. A: 4 V100 + 16 T4 (4 normalised slots) = 4 + 16/4 = 8 V100-equivalents
    spec = jobs[1]
    cluster = loaning_cluster(1, 2)
    theory = theoretical_throughput(
        spec.throughput.rate(20), {"v100": 4, "t4": 16}, {"v100": 1.0, "t4": 0.25}
    )
    assert theory == pytest.approx(spec.throughput.rate(8))
    assert placement_rate(spec, cluster, alloc) == pytest.approx(eff * theory)
    h = {r.job_id: r for r in result.jobs}["h"]
    assert h.first_start == 1.0
    assert h.finish_time == pytest.approx(1 + 1000 / eff)


def test_without_the_option_the_flag_is_ignored() -> None:
    jobs = [job("fill", 0, 4, 10_000, gpu_type="v100"), job("h", 1, 8, 1000, heterogeneous=True)]
    result, _, plans = run(jobs, "aryl")
    assert dict(first_alloc(plans, "h").placement) == {"t000": tuple(range(8))}
    assert {r.job_id: r for r in result.jobs}["h"].first_start == 10_000.0


def test_homogeneous_fit_is_preferred() -> None:
    # 8 free training GPUs: the flagged job stays on one GPU type at full speed
    result, _, plans = run([job("h", 0, 8, 1000, heterogeneous=True)], "aryl-hetero")
    alloc = first_alloc(plans, "h")
    assert set(alloc.placement) == {"t000"} and alloc.efficiency == 1.0
    assert result.jobs[0].finish_time == pytest.approx(1000)


def test_pinned_jobs_never_mix_even_when_flagged() -> None:
    jobs = [
        job("fill", 0, 4, 10_000, gpu_type="v100"),
        job("p", 1, 8, 1000, heterogeneous=True, gpu_type="v100"),
    ]
    result, _, plans = run(jobs, "aryl-hetero")
    assert set(first_alloc(plans, "p").placement) == {"t000"}
    assert {r.job_id: r for r in result.jobs}["p"].first_start == 10_000.0


@pytest.mark.parametrize(
    ("policy", "finish"),
    [("aryl", 2000.0), ("aryl-hetero", 1000 / 0.7), ("aryl-hetero-ideal", 1000.0)],
)
def test_elastic_job_base_on_training_flexible_on_loaned(policy: str, finish: float) -> None:
    # e: elastic 4..8 GPUs, 1,000 s at 8. Plain Aryl puts its base on the loaned servers (and
    # then has no room to grow: 4 GPUs, 2,000 s). Heterogeneous: base on the 4 free training
    # GPUs (§5.3), the 4 flexible GPUs on loaned servers -> 8 V100-equivalents at e.
    jobs = [
        job("fill", 0, 4, 10_000, gpu_type="v100"),
        job("e", 0, 8, 1000, heterogeneous=True, elasticity=Elasticity(min_gpus=4, max_gpus=8)),
    ]
    result, _, plans = run(jobs, policy)
    alloc = first_alloc(plans, "e")
    if policy == "aryl":
        assert set(alloc.placement) == {"i000", "i001"} and alloc.gpus == 4
    else:
        # (SJF: e, 2,000 s at its base, is admitted before fill, on t000's first half)
        assert dict(alloc.placement) == {"t000": (0, 1, 2, 3), "i000": (0, 1), "i001": (0, 1)}
        assert alloc.efficiency == pytest.approx(EFFICIENCY[policy])
    assert {r.job_id: r for r in result.jobs}["e"].finish_time == pytest.approx(finish)


def test_mixing_is_skipped_when_it_does_not_pay() -> None:
    # base 8 on training (+2 loaned slots would give 0.7 x 10 = 7 < 8): stay homogeneous
    jobs = [
        job("e", 0, 10, 1000, heterogeneous=True, elasticity=Elasticity(min_gpus=8, max_gpus=10))
    ]
    result, _, plans = run(jobs, "aryl-hetero", events=[LoanOffer(time=0, count=1)])
    assert all(set(p.allocations["e"].placement) == {"t000"} for p in plans if "e" in p.allocations)
    assert result.jobs[0].finish_time == pytest.approx(1000 * 10 / 8)


def test_no_loans_no_penalty_for_flagged_elastic_jobs() -> None:
    jobs = [
        job("fill", 0, 2, 10_000, gpu_type="v100"),
        job("e", 0, 6, 600, heterogeneous=True, elasticity=Elasticity(min_gpus=2, max_gpus=6)),
    ]
    out = {}
    for policy in ("aryl", "aryl-hetero"):
        result, _, plans = run(jobs, policy, events=[])
        out[policy] = {r.job_id: r.finish_time for r in result.jobs}["e"]
        assert first_alloc(plans, "e").gpus == 6  # scales to its max on training GPUs
    assert out["aryl-hetero"] == pytest.approx(out["aryl"]) == pytest.approx(600)


# ------------------------------------------------------------------------------- property
class MixChecker(PoolChecker):
    """PoolChecker + only flagged, unpinned jobs mix GPU types, at exactly the efficiency."""

    def __init__(self, jobs: list[JobSpec], eff: float) -> None:
        super().__init__(jobs)
        self.eff = eff
        self.mixed = 0

    def __call__(self, view: ClusterView, plan: AllocationPlan) -> None:
        super().__call__(view, plan)
        for job_id, alloc in plan.allocations.items():
            spec = self.spec[job_id]
            types = {view.nodes[n].gpu_type for n in alloc.placement}
            if len(types) > 1:
                assert spec.heterogeneous and spec.gpu_type is None, job_id
                assert alloc.efficiency == pytest.approx(self.eff), job_id
                self.mixed += 1
            elif not spec.heterogeneous:
                assert alloc.efficiency == 1.0, job_id
            else:  # a scale-in on reclaim keeps the efficiency until the next resize
                assert alloc.efficiency in (1.0, pytest.approx(self.eff)), job_id


@st.composite
def hetero_workloads(draw: st.DrawFn):
    jobs = []
    for i in range(draw(st.integers(1, 8))):
        gpus = draw(st.integers(1, 8))
        kw: dict[str, object] = {"heterogeneous": draw(st.booleans())}
        kind = draw(st.sampled_from(["pinned", "agnostic", "elastic"]))
        if kind == "pinned":
            kw["gpu_type"] = "v100"
        elif kind == "elastic":
            kw["elasticity"] = Elasticity(min_gpus=draw(st.integers(1, gpus)), max_gpus=gpus)
        kw["checkpoint"] = {"on_signal": draw(st.booleans())}
        jobs.append(job(f"j{i}", draw(st.integers(0, 200)), gpus, draw(st.integers(10, 300)), **kw))
    first = [LoanOffer(time=0, count=draw(st.integers(1, 3)))]  # loans from the start
    return jobs, draw_loan_events(draw, first)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=hetero_workloads(), policy=st.sampled_from(sorted(EFFICIENCY)))
def test_only_flagged_jobs_mix_and_capacity_holds(data, policy: str) -> None:
    jobs, events = data
    cluster = loaning_cluster(2, 3, training_gpus=4)  # 8 V100 + 3 x 2 loaned slots
    check = MixChecker(jobs, EFFICIENCY[policy])
    pol = make_policy(policy)
    result, engine, _ = simulate(
        cluster, jobs, pol, overheads=NO_OVERHEADS, events=events, on_plan=check
    )
    assert check.plans > 0
    assert all(r.finish_time is not None for r in result.jobs)
    # the reclaimer still predicts exactly what the engine does
    predicted = sum(len(o.preempted) for o in pol.reclaimer.outcomes)
    assert predicted == summarize(result).preemptions
    assert [o.servers for o in pol.reclaimer.outcomes] == [c for _, c in engine.reclaim_log]
