"""The four OJPP queues as embedded scenarios: they match their generator, have the paper's
shape (20 jobs of 1-10 workers, the queue's job types), and run to completion under
``fifo-ojpp`` with the OJPP interference model slowing co-located jobs down."""

from __future__ import annotations

from collections import Counter

import pytest

from gpuplan.api import prepare
from gpuplan.executors.simulator.run import simulate
from gpuplan.models.ojpp import OjppInstance
from gpuplan.scenarios.build import embedded_scenarios
from gpuplan.scenarios.ojpp_interference import OjppInterference, plan_slowdowns
from gpuplan.scenarios.ojpp_workloads import (
    PROFILES,
    QUEUES,
    interference_matrix,
    ojpp_instance_data,
    scenario_text,
    workload,
)
from gpuplan.solver_core.policies.ojpp import check_solution, solve


@pytest.mark.parametrize("queue", list(QUEUES))
def test_embedded_file_is_the_generator_output(queue: str) -> None:
    path = embedded_scenarios()[f"ojpp-{queue}"]
    assert path.read_text() == scenario_text(queue)


@pytest.mark.parametrize("queue", list(QUEUES))
def test_queue_shape(queue: str) -> None:
    prepared = prepare(f"ojpp-{queue}")
    jobs = prepared.jobs
    assert len(jobs) == 20
    assert all(1 <= j.requested_gpus <= 10 for j in jobs)
    high, rest = QUEUES[queue]
    types = Counter(j.model for j in jobs)
    assert set(types) <= set(high) | set(rest)
    if queue == "mixed":  # half high-collision / high-interference, half average
        assert sum(types[t] for t in high) == 10
    for j in jobs:
        prof = PROFILES[j.model or ""]
        assert j.memory is not None
        assert (j.memory.gamma, j.memory.delta, j.memory.p, j.memory.compute) == (
            prof.gamma,
            prof.delta,
            prof.p,
            prof.alpha,
        )
    assert prepared.spec.policies["ojpp-paper"]["interference"] == interference_matrix()
    assert workload(queue) == workload(queue) and workload(queue, 1) != workload(queue)


def test_paper_values_are_kept() -> None:
    m = interference_matrix()
    assert (m["ResNet"]["VGG19"], m["VGG19"]["ResNet"], m["LeNet"]["LSTM"]) == (1.22, 0.187, 0.18)
    assert (PROFILES["ResNet"].gamma, PROFILES["ResNet"].delta, PROFILES["ResNet"].p) == (
        0.3,
        0.62,
        0.2,
    )


@pytest.mark.parametrize("queue", ["mixed", "average"])
def test_runs_under_fifo_ojpp_and_interference_slows_it(queue: str) -> None:
    prepared = prepare(f"ojpp-{queue}")
    interference = OjppInterference(interference_matrix())
    results = {}
    for name, model in (("plain", None), ("interference", interference)):
        policy = prepared.make_policy("ojpp-paper")
        result, _engine, _cluster = simulate(
            prepared.cluster,
            prepared.jobs,
            policy,
            scenario=prepared.spec.name,
            seed=0,
            interference=model,
        )
        assert len(result.jobs) == 20
        assert all(r.jct is not None for r in result.jobs)
        results[name] = sum(r.jct for r in result.jobs)  # type: ignore[misc]
    assert results["interference"] > results["plain"]
    # and fifo-ojpp itself (the wrapper's default matrix) runs every job too
    result, _e, _c = simulate(
        prepared.cluster, prepared.jobs, prepared.make_policy("fifo-ojpp"), seed=0
    )
    assert len(result.jobs) == 20 and all(r.jct is not None for r in result.jobs)


@pytest.mark.parametrize("queue", list(QUEUES))
def test_static_placement_order_of_strategies(queue: str) -> None:
    """OJPP (Alg. 3) plans are valid and no worse than Best-fit in realised slowdown; Best-fit
    uses no more GPUs (it ignores every sharing rule)."""
    jobs = workload(queue)
    inst = OjppInstance.model_validate(ojpp_instance_data(jobs, 0.1, 0.1, 0.2))
    ojpp, bf = solve(inst, "heuristic"), solve(inst, "best-fit")
    assert ojpp.gpus is not None and bf.gpus is not None
    assert check_solution(inst, ojpp.gpus) == []
    assert len(bf.gpus) <= len(ojpp.gpus) <= inst.total_workers
    s_ojpp, s_bf = plan_slowdowns(inst, ojpp.gpus), plan_slowdowns(inst, bf.gpus)
    assert max(s_ojpp.values()) <= max(s_bf.values())
    assert sum(s_ojpp.values()) <= sum(s_bf.values())
