"""The engine's re-check of the plans it builds from a delta (``Engine.check_delta_plans``).

Off by default since round 4 (docs/performance.md): the check changes no result, which the
first test shows on runs with node failures and preemptions; the second shows what it is
for: with the check on, a delta that starts a job on a GPU another job holds is refused
(:class:`PlanRefused`) before anything changes; with it off, ``_acquire`` still refuses it
(RuntimeError), so a broken delta never passes silently. Only the simulator skips the check
(``Executor.trusts_built_plans``): real-cluster executors re-check every plan whatever the
engine's setting, which the third test shows. The tests' conftest turns the check on for
every other test.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.executors.control.executor import ControllerExecutor
from gpuplan.executors.engine import Engine
from gpuplan.executors.simulator.cluster import SimulatedCluster
from gpuplan.executors.simulator.run import simulate
from gpuplan.executors.slurm.executor import SlurmExecutor
from gpuplan.executors.ssh.executor import SshExecutor
from gpuplan.models import Cluster, JobAllocation, JobSpec, PlanRefused
from gpuplan.solver_core.policy import Delta, StagedPolicy
from gpuplan.solver_core.registry import make_policy

from .test_delta_protocol import _digest, _failures, _jobs


@pytest.mark.parametrize("policy", ["fifo", "fifo-backfill", "srtf", "srsf"])
def test_the_check_changes_no_result(policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster.uniform(6, 8)
    jobs = _jobs(160, cluster.total_gpus, seed=11)
    events = _failures(cluster)
    monkeypatch.setattr(Engine, "check_delta_plans", False)
    off, engine, _ = simulate(cluster, jobs, make_policy(policy), events=events)
    monkeypatch.setattr(Engine, "check_delta_plans", True)
    on, _, _ = simulate(cluster, jobs, make_policy(policy), events=events)
    assert len(off.jobs) == len(jobs) and len(engine.decision_ms) > 100
    assert _digest(off) == _digest(on)


class _Overlapping:
    """FIFO whose delta starts every job on the GPUs of a running job (a broken stage)."""

    def __init__(self, inner: StagedPolicy) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def decide_delta(self, view: Any) -> Delta | None:
        delta = self.inner.decide_delta(view)
        if not isinstance(delta, Delta) or not delta.starts or not view.running:
            return delta
        held = next(iter(view.running.values())).allocation
        starts = {j: JobAllocation.fast(j, dict(held.placement)) for j in delta.starts}
        return Delta(starts=starts)


def _broken_run() -> None:
    jobs = [
        JobSpec(id=f"j{i}", submit_time=float(i), requested_gpus=8, duration=100.0)
        for i in range(2)
    ]
    simulate(Cluster.uniform(2, 8), jobs, _Overlapping(make_policy("fifo")))  # type: ignore[arg-type]


def test_a_broken_delta_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Engine, "check_delta_plans", True)
    with pytest.raises(PlanRefused, match="over-committed"):
        _broken_run()
    monkeypatch.setattr(Engine, "check_delta_plans", False)
    with pytest.raises(RuntimeError, match="but it is taken"):
        _broken_run()


def test_only_the_simulator_skips_the_re_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Engine, "check_delta_plans", False)
    monkeypatch.setattr(SimulatedCluster, "trusts_built_plans", False)
    with pytest.raises(PlanRefused, match="over-committed"):
        _broken_run()
    assert not any(
        cls.trusts_built_plans for cls in (SlurmExecutor, SshExecutor, ControllerExecutor)
    )
