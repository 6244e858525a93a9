"""Library entry points: prepare a scenario, run policies on it, make one decision.

Every function returns plain gpuplan models (``RunResult``, ``AllocationPlan``), so callers can
serialise them with ``model_dump_json``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from gpuplan.executors.engine import ProgressHook
from gpuplan.executors.simulator.run import simulate
from gpuplan.models import (
    AllocationPlan,
    Cluster,
    ClusterState,
    InputError,
    JobSpec,
    RunResult,
    ScenarioSpec,
)
from gpuplan.scenarios.build import build_scenario, resolve_scenario
from gpuplan.solver_core.diff import build_plan
from gpuplan.solver_core.registry import make_policy

__all__ = ["PreparedScenario", "compare", "plan", "prepare", "run", "run_scenario"]


@dataclass(frozen=True)
class PreparedScenario:
    """A scenario with its cluster and jobs built once, to run several policies on."""

    spec: ScenarioSpec
    cluster: Cluster
    jobs: list[JobSpec]


def prepare(scenario: str | ScenarioSpec, *, seed: int | None = None) -> PreparedScenario:
    """Load an embedded scenario name, a scenario file, or a spec object."""
    if isinstance(scenario, ScenarioSpec):
        spec, base = scenario, None
    else:
        spec, base = resolve_scenario(scenario)
    if seed is not None:
        spec = spec.model_copy(update={"seed": seed})
    cluster, jobs = build_scenario(spec, base)
    return PreparedScenario(spec, cluster, jobs)


def run(prepared: PreparedScenario, policy: str, progress: ProgressHook | None = None
        ) -> RunResult:
    """Simulate ``policy`` on a prepared scenario."""
    spec = prepared.spec
    result, _, _ = simulate(
        prepared.cluster,
        prepared.jobs,
        make_policy(policy),
        overheads=spec.overheads,
        scenario=spec.name,
        seed=spec.seed,
        sample_interval_s=spec.engine.sample_interval_s,
        round_interval_s=spec.engine.round_interval_s,
        progress=progress,
        learning=spec.learning,
    )
    return result


def run_scenario(
    scenario: str | ScenarioSpec,
    policy: str,
    *,
    seed: int | None = None,
    progress: ProgressHook | None = None,
) -> RunResult:
    """Simulate one policy on a scenario (name, file or spec)."""
    return run(prepare(scenario, seed=seed), policy, progress)


def compare(
    scenario: str | ScenarioSpec, policies: Sequence[str], *, seed: int | None = None
) -> list[RunResult]:
    """Run several policies on the same jobs, in the given order."""
    if not policies:
        raise InputError("give at least one policy", field="policies")
    prepared = prepare(scenario, seed=seed)
    return [run(prepared, p) for p in policies]


def plan(state: ClusterState, policy: str, include_keep: bool = True) -> AllocationPlan:
    """One scheduling decision for a cluster snapshot (what ``gpuplan plan`` prints)."""
    view = state.to_view()
    chosen = make_policy(policy)
    t0 = time.perf_counter()
    decision = chosen.decide(view)
    ms = (time.perf_counter() - t0) * 1000
    built = build_plan(view, decision, chosen.name, ms, include_keep=include_keep)
    # Re-validate so a plan printed to users is a fully checked model.
    return AllocationPlan.model_validate(built.model_dump())
