"""Shared test helpers: small clusters, jobs, and a simulation runner with invariant checks."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import settings

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import AllocationPlan, Cluster, ClusterView, JobSpec, Overheads
from gpuplan.solver_core.diff import check_plan
from gpuplan.solver_core.registry import make_policy

# Determinism: property tests draw the same examples on every machine and every run, so CI
# never depends on a local example database or luck.
settings.register_profile("gpuplan", derandomize=True, deadline=None, database=None)
settings.load_profile("gpuplan")

NO_OVERHEADS = Overheads(start_s=0, restart_s=0, sidecar_s=0, stop_free_s=0, migrate_s=0)


def rigid(job_id: str, submit: float, gpus: int, duration: float, **kw: object) -> JobSpec:
    return JobSpec(id=job_id, submit_time=submit, requested_gpus=gpus, duration=duration, **kw)


class CapacityChecker:
    """Plan hook: every plan respects capacity and GPU exclusivity at the instant it is made."""

    def __init__(self) -> None:
        self.plans = 0
        self.max_used = 0

    def __call__(self, view: ClusterView, plan: AllocationPlan) -> None:
        check_plan(view, plan)
        used = sum(a.gpus * a.share for a in plan.allocations.values())
        assert used <= view.capacity + 1e-6, f"{used} GPUs used > capacity {view.capacity}"
        per_node: dict[str, float] = defaultdict(float)
        for alloc in plan.allocations.values():
            for node, gpus in alloc.placement.items():
                per_node[node] += len(gpus) * alloc.share
        for node, n in per_node.items():
            assert n <= view.nodes[node].gpus + 1e-6
        self.plans += 1
        self.max_used = max(self.max_used, used)


@pytest.fixture
def run_sim():
    def _run(cluster: Cluster, jobs: list[JobSpec], policy: str, overheads: Overheads | None = None,
             **kw: object):
        checker = CapacityChecker()
        result, engine, executor = simulate(
            cluster, jobs, make_policy(policy), overheads=overheads or NO_OVERHEADS,
            on_plan=checker, record_segments=True, **kw,
        )
        assert checker.plans > 0
        return result, engine, executor

    return _run


@pytest.fixture(autouse=True)
def _check_delta_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs with the engine re-checking the plans it builds from deltas (off by
    default for speed; tests/test_engine_delta_check.py covers both settings)."""
    from gpuplan.executors.engine import Engine

    monkeypatch.setattr(Engine, "check_delta_plans", True)
