"""A stop-free policy on a restart executor degrades to restarts, loudly and accounted (issue 11
item 3): one warning at start naming policy, executor and restart latency; every such resize
counted in ``RunResult.degraded_resizes`` / the summary; each one pays the restart latency."""

from __future__ import annotations

import logging

import pytest

from gpuplan.executors.metrics import summarize
from gpuplan.executors.simulator.run import simulate
from gpuplan.models import Cluster, Elasticity, JobSpec, Overheads
from gpuplan.solver_core.registry import make_policy

LINEAR = {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0}
ENGINE_LOG = "gpuplan.executors.engine"


def _jobs() -> list[JobSpec]:
    """Worked example on one 8-GPU machine under EDL's Elastic policy: ``a`` runs alone on 8
    GPUs, ``b`` arrives at t=100 so both hold 4 (``a`` shrinks), ``b`` ends at 200 and ``a``
    grows back to 8. Two resizes of ``a``."""
    elastic = Elasticity(min_gpus=1, max_gpus=8)
    return [
        JobSpec(
            id="a",
            submit_time=0.0,
            requested_gpus=4,
            total_iterations=1600.0,
            throughput={"points": LINEAR},
            elasticity=elastic,
        ),
        JobSpec(
            id="b",
            submit_time=100.0,
            requested_gpus=4,
            total_iterations=400.0,
            throughput={"points": LINEAR},
            elasticity=elastic,
        ),
    ]


def _run(policy: str, mode: str, caplog: pytest.LogCaptureFixture) -> tuple[dict, int, list]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=ENGINE_LOG):
        result, _engine, _ex = simulate(
            Cluster.uniform(1, 8, "v100"),
            _jobs(),
            make_policy(policy),
            overheads=Overheads(resize_mode=mode, restart_s=30.0),
            sample_interval_s=None,
        )
    warnings = [r.getMessage() for r in caplog.records if r.name == ENGINE_LOG]
    return {j.job_id: j for j in result.jobs}, result.degraded_resizes, warnings


def test_edl_on_a_restart_executor_warns_once_counts_and_pays(
    caplog: pytest.LogCaptureFixture,
) -> None:
    jobs, degraded, warnings = _run("edl-elastic", "checkpoint_restart", caplog)
    assert len(warnings) == 1
    assert "edl-elastic" in warnings[0] and "SimulatedCluster" in warnings[0]
    assert "30 s" in warnings[0]
    assert jobs["a"].resizes == 2 and degraded == 2
    # Stop-free, a does 800 iterations on 8 GPUs by t=100, 400 on 4 by 200, the last 400 on 8
    # by 250. Each restart stalls 30 s: 120 iterations lost on 4 GPUs, 240 on 8, made up on
    # 8 GPUs in 45 s, so a ends at 295.
    assert jobs["a"].finish_time == pytest.approx(295.0)
    assert jobs["b"].finish_time == pytest.approx(200.0)


def test_same_policy_stop_free_is_not_degraded(caplog: pytest.LogCaptureFixture) -> None:
    jobs, degraded, warnings = _run("edl-elastic", "stop_free", caplog)
    assert warnings == [] and degraded == 0
    assert jobs["a"].resizes == 2
    assert jobs["a"].finish_time == pytest.approx(250.0, abs=0.1)


def test_elastic_tiresias_is_counted_and_summarised(caplog: pytest.LogCaptureFixture) -> None:
    _jobs_by_id, degraded, warnings = _run("elastic-tiresias", "checkpoint_restart", caplog)
    assert len(warnings) == 1 and "elastic-tiresias" in warnings[0]
    assert degraded >= 1
    result, _e, _x = simulate(
        Cluster.uniform(1, 8, "v100"),
        _jobs(),
        make_policy("elastic-tiresias"),
        sample_interval_s=None,
    )
    summary = summarize(result)
    assert (
        summary.degraded_resizes
        == result.degraded_resizes
        == sum(j.resizes for j in result.jobs)
        >= 1
    )


@pytest.mark.parametrize("policy", ["fifo", "sidecar", "tiresias-l"])
def test_policies_not_wanting_in_place_never_warn(
    policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    _jobs_by_id, degraded, warnings = _run(policy, "checkpoint_restart", caplog)
    assert warnings == [] and degraded == 0
