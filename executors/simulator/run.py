"""``simulate``: one policy over one workload on the simulated cluster."""

from __future__ import annotations

import time as wallclock
from collections.abc import Iterable, Sequence

from gpuplan.models import (
    Cluster,
    Event,
    JobSpec,
    LearningSpec,
    ObjectiveBound,
    Overheads,
    RunResult,
)
from gpuplan.models.bounds import SIMULATION_HORIZON_S
from gpuplan.models.interference import InterferenceModel
from gpuplan.solver_core.hooks import BoundReporting, Foreseeing
from gpuplan.solver_core.policy import Policy, Reclaimer

from ..engine import Engine, PlanHook, ProgressHook
from ..reasons import DecisionReasons, Sink
from ..restart_gate import RestartGate
from .cluster import SimulatedCluster


def simulate(
    cluster: Cluster,
    jobs: Sequence[JobSpec],
    policy: Policy,
    *,
    overheads: Overheads | None = None,
    events: Iterable[Event] = (),
    scenario: str = "",
    seed: int = 0,
    sample_interval_s: float | None = 3600.0,
    round_interval_s: float | None = None,
    decide_only_at_rounds: bool = False,
    on_plan: PlanHook | None = None,
    progress: ProgressHook | None = None,
    record_segments: bool = False,
    learning: LearningSpec | None = None,
    reclaimer: Reclaimer | None = None,
    horizon_s: float = SIMULATION_HORIZON_S,
    interference: InterferenceModel | None = None,
    restart_gate: RestartGate | None = None,
    reasons: Sink | None = None,
) -> tuple[RunResult, Engine, SimulatedCluster]:
    """Replay ``jobs`` under ``policy``; return the result, the engine and the executor.

    ``reclaimer`` picks the on-loan servers to give back on a ``ReclaimRequest``; by default the
    policy's own ``reclaimer`` (Aryl's), else the engine's default.
    The run ends at ``horizon_s`` of simulated time at the latest; jobs still running then are
    reported unfinished, never simulated for ever. ``interference`` slows co-located jobs
    (shares < 1) down; None: shares alone set their speed. A
    :class:`~gpuplan.solver_core.hooks.Foreseeing` policy (offline-optimal) is handed the
    whole job list first (``foresee``); a
    :class:`~gpuplan.solver_core.hooks.BoundReporting` policy's ``bound`` (what
    offline-optimal proved about the optimum) goes into the result.
    ``restart_gate``: drop changes that cost more than they gain (off by default here).
    ``reasons``: handed one :class:`~gpuplan.models.reasons.DecisionRecord` per decision
    (why each action, why each waiting job waits; :mod:`..reasons`); None records none.
    """
    if isinstance(policy, Foreseeing):  # offline-optimal
        policy.foresee(cluster, jobs)
    executor = SimulatedCluster(
        cluster,
        jobs,
        overheads,
        events,
        record_segments=record_segments,
        learning=learning,
        horizon_s=horizon_s,
        interference=interference,
        seed=seed,
    )
    engine = Engine(
        cluster,
        policy,
        executor,
        sample_interval_s=sample_interval_s,
        round_interval_s=round_interval_s,
        decide_only_at_rounds=decide_only_at_rounds,
        on_plan=on_plan,
        reclaimer=reclaimer,
        restart_gate=restart_gate,
    )
    if reasons is not None:
        engine.reasons = DecisionReasons(policy, reasons)
    t0 = wallclock.perf_counter()
    engine.run(progress)
    wall = wallclock.perf_counter() - t0
    result = engine.result(scenario=scenario, seed=seed, wall_s=wall)
    if isinstance(policy, BoundReporting) and isinstance(policy.bound, ObjectiveBound):
        result.bound = policy.bound  # what offline-optimal proved
    return result, engine, executor
