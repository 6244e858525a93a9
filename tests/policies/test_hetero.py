"""Heterogeneous GPU types: Gavel's per-model type speeds, one type per job, max-min-perf."""

from __future__ import annotations

import json

import pytest

from gpuplan.api import prepare
from gpuplan.executors.simulator.run import simulate
from gpuplan.models import (
    AllocationPlan,
    Cluster,
    ClusterView,
    JobSpec,
    Node,
    ThroughputProfile,
)
from gpuplan.models.scenario import ScenarioSpec
from gpuplan.scenarios.profiles import gavel_profiles
from gpuplan.solver_core.placement.gpu_types import spans_types
from gpuplan.solver_core.policies.baselines.maxmin_perf import max_min_perf, solve_allocation
from gpuplan.solver_core.registry import make_policy

from ..conftest import need_traces

GAVEL_JSON = ("gavel", "simulation_throughputs.json")
ARTIFACT = "gavel/physical_cluster/artifact_evaluation.trace"


def _mixed_nodes(one_gpu_v100: bool = False) -> list[Node]:
    """Gavel's artifact cluster: 2 V100 + 4 K80 (one 2-GPU V100 server by default)."""
    if one_gpu_v100:
        v100 = [Node(name=f"v{i}", gpus=1, gpu_type="v100") for i in range(2)]
    else:
        v100 = [Node(name="v0", gpus=2, gpu_type="v100")]
    return v100 + [Node(name=f"k{i}", gpus=1, gpu_type="k80") for i in range(4)]


def _gavel_spec(nodes: list[Node], trace: str = ARTIFACT, mapping: str = "rigid") -> ScenarioSpec:
    path = need_traces(*trace.split("/"))  # the one way tests find the shared traces
    return ScenarioSpec.model_validate(
        {
            "name": "gavel-mixed",
            "cluster": {"nodes": [n.model_dump() for n in nodes]},
            "workload": {"source": "gavel", "path": str(path), "mapping": mapping},
        }
    )


# ------------------------------------------------------------------ per-type profiles
@pytest.mark.parametrize(
    ("job_type", "k80_ratio"),
    [
        ("ResNet-18 (batch size 16)", 0.1482),
        ("ResNet-50 (batch size 64)", None),
        ("Transformer (batch size 128)", None),
        ("LM (batch size 40)", None),
    ],
)
def test_gavel_profiles_carry_the_measured_type_speeds(
    job_type: str, k80_ratio: float | None
) -> None:
    gavel_json = need_traces(*GAVEL_JSON)
    raw = json.loads(gavel_json.read_text())
    profiles = gavel_profiles(gavel_json)
    v100 = profiles[(job_type, "v100")]
    key = f"('{job_type}', 1)"
    for other in ("k80", "p100"):
        expected = raw[other][key]["null"] / raw["v100"][key]["null"]
        assert v100.type_speed[other] == pytest.approx(expected, rel=1e-12)
        # the multiplier the simulator applies is the table's, not the flat 0.25 / 0.6
        assert v100.type_multiplier(other, 0.25, 1.0) == pytest.approx(expected)
    assert "v100" not in v100.type_speed
    if k80_ratio is not None:
        assert v100.type_speed["k80"] == pytest.approx(k80_ratio, abs=1e-4)
    # the K80 profile sees V100 as the inverse ratio
    assert profiles[(job_type, "k80")].type_speed["v100"] == pytest.approx(
        1.0 / v100.type_speed["k80"]
    )


def test_type_speed_falls_back_to_relative_speed_and_rejects_zero() -> None:
    plain = ThroughputProfile(points={1: 2.0})
    assert plain.type_multiplier("k80", 0.25, 1.0) == 0.25
    with pytest.raises(ValueError, match="type_speed"):
        ThroughputProfile(points={1: 2.0}, type_speed={"k80": 0.0})


def test_free_by_type_counts_free_gpus_of_each_type() -> None:
    cluster = Cluster(nodes=_mixed_nodes())
    view = ClusterView(
        0.0,
        cluster,
        dict(cluster.node_by_name),
        {"v0": [1], "k0": [0], "k1": [], "k2": [0], "k3": [0]},
        {},
        {},
    )
    assert view.free_by_type() == {"v100": 1, "k80": 3}


# ------------------------------------------------------------------ one type per job
def test_gavel_artifact_rigid_2gpu_job_does_not_span_types() -> None:
    """Artifact row 10 (ResNet-18 bs16, 2 GPUs, 15,975 steps): ~160 s on the V100 pair; on
    main FIFO put it on 1 V100 + 1 K80 and it took 1,808 s."""
    prepared = prepare(_gavel_spec(_mixed_nodes()))
    spans: list[str] = []

    def check(view: ClusterView, plan: AllocationPlan) -> None:
        spans.extend(
            j for j, a in plan.allocations.items() if spans_types(prepared.cluster, a.placement)
        )

    result, _, _ = simulate(prepared.cluster, prepared.jobs, make_policy("fifo"), on_plan=check)
    assert spans == []
    job = next(j for j in result.jobs if j.job_id.endswith("-10"))
    assert job.requested_gpus == 2
    runtime = job.finish_time - job.first_start
    assert runtime == pytest.approx(15975 / 100.142, rel=0.01)  # V100 2-GPU steps/s
    assert runtime < 200.0


@pytest.mark.parametrize("policy", ["fifo", "srtf", "afs-l", "srtf-packed", "max-min-perf"])
def test_no_job_spans_gpu_types_on_a_mixed_cluster(policy: str) -> None:
    nodes = [
        Node(name=f"{t[0]}{i}", gpus=1, gpu_type=t)
        for t, n in (("v100", 3), ("p100", 2), ("k80", 3))
        for i in range(n)
    ]
    prepared = prepare(_gavel_spec(nodes, "gavel/physical_cluster/small_test.trace", "elastic"))
    cluster = prepared.cluster
    seen: list[int] = []
    bad: list[tuple[float, str]] = []

    def check(view: ClusterView, plan: AllocationPlan) -> None:
        for job_id, alloc in plan.allocations.items():
            seen.append(alloc.gpus)
            if spans_types(cluster, alloc.placement):
                bad.append((view.now, job_id))

    result, _, _ = simulate(cluster, prepared.jobs, make_policy(policy), on_plan=check)
    assert bad == []
    assert max(seen) >= 2  # multi-GPU jobs were placed, so spanning was possible
    assert all(j.finish_time is not None for j in result.jobs)


def test_heterogeneous_job_may_still_span_types() -> None:
    cluster = Cluster(
        nodes=[Node(name="v0", gpus=1, gpu_type="v100"), Node(name="k0", gpus=1, gpu_type="k80")]
    )
    jobs = [JobSpec(id="j", submit_time=0.0, requested_gpus=2, duration=100.0, heterogeneous=True)]
    placed: list[dict] = []
    simulate(
        cluster,
        jobs,
        make_policy("fifo"),
        on_plan=lambda v, p: placed.extend(a.placement for a in p.allocations.values()),
    )
    assert placed and spans_types(cluster, placed[0])


# ------------------------------------------------------------------ max-min-perf
RATES = {"a": {"v100": 1.0, "k80": 0.5}, "b": {"v100": 1.0, "k80": 0.1}}


def test_maxmin_lp_matches_the_hand_computed_optimum() -> None:
    """1 V100 + 2 K80, two 1-GPU jobs (K80 at 0.5x and 0.1x). Equal share: 1/3 V100, 2/3 K80,
    so thr_eq = 2/3 and 0.4. Rows are full at the optimum, so a (V100 share of a) solves
    0.75 + 0.75 a = 2.5 - 2.25 a: a = 7/12, z = 19/16."""
    alloc = solve_allocation(RATES, {"a": 1, "b": 1}, {"v100": 1, "k80": 2})
    assert alloc.stats.status == "optimal" and alloc.stats.backend == "glop"
    assert alloc.z == pytest.approx(19 / 16, abs=1e-6)
    assert alloc.stats.objective == pytest.approx(19 / 16, abs=1e-6)
    assert alloc.x["a"]["v100"] == pytest.approx(7 / 12, abs=1e-6)
    assert alloc.x["b"]["v100"] == pytest.approx(5 / 12, abs=1e-6)
    assert alloc.x["a"]["k80"] == pytest.approx(5 / 12, abs=1e-6)
    # brute force over a grid of a's V100 share (every job fills its row with K80)
    best = max(
        min((0.5 + 0.5 * a) / (2 / 3), (0.1 + 0.9 * (1 - a)) / 0.4)
        for a in (i / 1200 for i in range(1201))
    )
    assert alloc.z == pytest.approx(best, abs=1e-3) and alloc.z >= best - 1e-9


def test_maxmin_lp_priority_weights_and_capacity() -> None:
    # a weight of 2 gives a twice the normalised throughput of b at the optimum
    alloc = solve_allocation(RATES, {"a": 1, "b": 1}, {"v100": 1, "k80": 2}, {"a": 2.0})
    norm_a = (alloc.x["a"]["v100"] + 0.5 * alloc.x["a"]["k80"]) / (2 / 3)
    norm_b = (alloc.x["b"]["v100"] + 0.1 * alloc.x["b"]["k80"]) / 0.4
    assert norm_a >= 2 * alloc.z - 1e-6 and norm_b >= alloc.z - 1e-6
    assert norm_a == pytest.approx(2 * norm_b, rel=1e-5)
    # a 2-GPU job cannot use the 1-GPU V100 type at all
    two = solve_allocation(
        {"a": {"k80": 0.5}, "b": RATES["b"]}, {"a": 2, "b": 1}, {"v100": 1, "k80": 2}
    )
    for t in ("v100", "k80"):
        assert 2 * two.x["a"][t] + two.x["b"][t] <= {"v100": 1, "k80": 2}[t] + 1e-9


def test_rounds_attain_the_lp_time_fractions() -> None:
    cluster = Cluster(
        nodes=[
            Node(name="v0", gpus=1, gpu_type="v100"),
            Node(name="k0", gpus=1, gpu_type="k80"),
            Node(name="k1", gpus=1, gpu_type="k80"),
        ]
    )
    jobs = [
        JobSpec(
            id=j,
            submit_time=0.0,
            requested_gpus=1,
            total_iterations=1e7,
            throughput=ThroughputProfile(points={1: 1.0}, type_speed={"k80": k}),
        )
        for j, k in (("a", 0.5), ("b", 0.1))
    ]
    policy = max_min_perf(round_s=100.0)
    on_type: dict[str, dict[str, int]] = {"a": {}, "b": {}}

    def count(view: ClusterView, plan: AllocationPlan) -> None:
        for job_id, alloc in plan.allocations.items():
            t = cluster.node_by_name[next(iter(alloc.placement))].gpu_type
            on_type[job_id][t] = on_type[job_id].get(t, 0) + 1

    simulate(cluster, jobs, policy, on_plan=count, horizon_s=100.0 * 1200)
    rounds_a = sum(on_type["a"].values())
    assert rounds_a >= 1000
    assert on_type["a"]["v100"] / rounds_a == pytest.approx(7 / 12, abs=0.01)
    assert on_type["b"]["v100"] / sum(on_type["b"].values()) == pytest.approx(5 / 12, abs=0.01)


# ------------------------------------------------------------------ topology tie-breaking
def _rack_view(racks: dict[str, str]) -> ClusterView:
    cluster = Cluster(nodes=[Node(name=n, gpus=4, rack=r, switch="s0") for n, r in racks.items()])
    free = {n: [0, 1, 2, 3] for n in racks}
    job = JobSpec(id="big", submit_time=0.0, requested_gpus=8, duration=10.0)
    from gpuplan.models import ActiveJob

    return ClusterView(
        0.0, cluster, dict(cluster.node_by_name), free, {}, {"big": ActiveJob(spec=job)}
    )


def test_best_fit_keeps_a_multi_node_job_in_one_rack() -> None:
    from gpuplan.solver_core.placement.best_fit import best_fit_placement

    # equal free counts: plain best-fit takes n2 (largest), then n0 (smallest name that
    # fits): two racks; the hop tie-break takes n1, n2's rack mate
    view = _rack_view({"n0": "rack1", "n1": "rack0", "n2": "rack0"})
    assert view.cluster.hops("n1", "n2") == 2.0 and view.cluster.hops("n0", "n2") == 4.0
    got = best_fit_placement(view, {"big": 8}, [])
    assert sorted(got["big"].placement) == ["n1", "n2"]
    # one rack: the plain best-fit choice, unchanged
    flat = _rack_view({"n0": "rack0", "n1": "rack0", "n2": "rack0"})
    assert sorted(best_fit_placement(flat, {"big": 8}, [])["big"].placement) == ["n0", "n2"]


def test_a_job_larger_than_every_type_may_span_rather_than_starve() -> None:
    cluster = Cluster(nodes=_mixed_nodes())  # 2 V100 + 4 K80
    jobs = [
        JobSpec(id="five", submit_time=0.0, requested_gpus=5, duration=100.0),
        JobSpec(id="two", submit_time=0.0, requested_gpus=2, duration=100.0),
    ]
    placed: dict[str, dict] = {}
    for policy in ("fifo", "srtf"):
        result, _, _ = simulate(
            cluster,
            jobs,
            make_policy(policy),
            on_plan=lambda v, p: placed.update({j: a.placement for j, a in p.allocations.items()}),
        )
        assert all(j.finish_time is not None for j in result.jobs)
        assert spans_types(cluster, placed["five"]) and not spans_types(cluster, placed["two"])
