"""Library entry points: prepare a scenario, run policies on it, make one decision.

Every function returns plain gpuplan models (``RunResult``, ``AllocationPlan``), so callers can
serialise them with ``model_dump_json``.

Capacity loaning (a scenario's ``loaning`` block) is wired here, the one layer that may import
both the executors and the scenarios: :func:`run` hands the loan / reclaim events to the
simulator, measures pool usage with the scenarios' :class:`PoolUsage` hook, logs every reclaim
decision (the policy's own reclaimer, or the engine's default scored the same way) and attaches
:class:`~gpuplan.models.records.LoaningMetrics` to the result.

A scenario's ``simulator.interference`` block (the true interference of the simulated cluster)
is built here too, per run with the run's seed (its collisions are drawn from it), and handed to
the simulator; without the block the simulator applies shares alone, as before.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.executors.engine import ProgressHook, reclaim_least_used
from gpuplan.executors.restart_gate import gate_for_scenario
from gpuplan.executors.simulator.run import simulate
from gpuplan.models import (
    AllocationPlan,
    Cluster,
    ClusterState,
    ClusterView,
    Event,
    InputError,
    JobSpec,
    RunResult,
    ScenarioSpec,
)
from gpuplan.models.reasons import DecisionRecord
from gpuplan.models.scenario import Overheads
from gpuplan.scenarios.build import (
    build,
    embedded_scenarios,
    fit_error,
    resolve_scenario,
)
from gpuplan.solver_core.diff import build_plan
from gpuplan.solver_core.params import PolicyConfig
from gpuplan.solver_core.policy import Policy
from gpuplan.solver_core.registry import cost_model_of, make_policy

if TYPE_CHECKING:
    # Loaning only: Aryl's reclaim solvers load OR-Tools' CP-SAT, scipy.optimize and pandas
    # (seconds), so a scenario without a loaning block must not pay for them (issue 28).
    from gpuplan.models import JobSpec
    from gpuplan.models.measured_interference import MeasuredInterference
    from gpuplan.models.scenario import SimInterferenceSpec
    from gpuplan.scenarios.inference import InferenceLoad
    from gpuplan.scenarios.ojpp_interference import OjppInterference
    from gpuplan.solver_core.policies.aryl.reclaim import ReclaimOutcome

__all__ = [
    "PreparedScenario",
    "compare",
    "plan",
    "policy_configs",
    "prepare",
    "run",
    "run_scenario",
]


@dataclass(frozen=True)
class PreparedScenario:
    """A scenario with its cluster, jobs and loan events built once, to run several policies
    on. ``events`` and ``load`` are empty unless the scenario has a ``loaning`` block."""

    spec: ScenarioSpec
    cluster: Cluster
    jobs: list[JobSpec]
    events: tuple[Event, ...] = ()
    load: InferenceLoad | None = None
    notes: tuple[str, ...] = ()
    """Warnings about the selection (fewer jobs than asked) for the caller to show."""
    source: str = ""
    """Where the scenario came from (file path or name), for error messages."""

    @property
    def configs(self) -> dict[str, PolicyConfig]:
        """The scenario's named policy configurations (its ``policies:`` block)."""
        try:
            return policy_configs(self.spec)
        except InputError as err:
            raise in_file(err, self.source) from None

    def make_policy(self, policy: str) -> Policy:
        """``policy`` (a registered name, one of this scenario's configurations, or inline
        ``base(key=value)``) built with the scenario's seed. One of the scenario's
        configurations that cannot be built is refused naming the scenario."""
        configs = self.configs
        try:
            return make_policy(policy, seed=self.spec.seed, configs=configs)
        except InputError as err:
            if policy not in configs:
                raise
            raise in_file(err, self.source or self.spec.name) from None


def policy_configs(spec: ScenarioSpec) -> dict[str, PolicyConfig]:
    """A scenario's ``policies:`` block as configurations (one line per bad entry)."""
    return {
        name: PolicyConfig.from_mapping(name, raw, where=f"{spec.name}: policies")
        for name, raw in spec.policies.items()
    }


def in_file(err: InputError, source: str) -> InputError:
    """``err`` naming the scenario ``source`` (its file or embedded name) when it names no file
    of its own: an inline job's or a ``policies:`` entry's refusal otherwise says
    ``workload.inline_jobs, row 2`` or ``policies.x`` and leaves the user to guess which file.
    A source that already holds a path (a trace row's) is kept as it is."""
    if not source or (err.source and (os.sep in err.source or err.source == source)):
        return err
    where = f"{source}: {err.source}" if err.source else source
    return InputError(err.message, source=where, row=err.row, field=err.field)


def simulator_interference(
    spec: SimInterferenceSpec | None, jobs: Sequence[JobSpec], seed: int, source: str
) -> OjppInterference | MeasuredInterference | None:
    """``scenarios.sim_interference``'s model for ``spec``, None without a block: that module
    (OJPP matrices, measured tables) is imported only by a scenario that has one."""
    if spec is None:
        return None
    from gpuplan.scenarios.sim_interference import simulator_interference as build

    return build(spec, jobs, seed, source)


def _check_scenario_name(name: str) -> None:
    """A name that is neither embedded nor a file: one line, with the closest embedded names."""
    embedded = embedded_scenarios()
    if name in embedded or Path(name).expanduser().exists():
        return
    import difflib  # only for a misspelt name

    close = difflib.get_close_matches(name, list(embedded), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise InputError(
        f"no scenario named {name!r} and no such file; {hint}`gpuplan scenarios` "
        f"lists the {len(embedded)} embedded ones",
        field="scenario",
    )


def prepare(scenario: str | ScenarioSpec, *, seed: int | None = None) -> PreparedScenario:
    """Load an embedded scenario name, a scenario file, or a spec object.

    A scenario that selects no job is an error (a window past the trace's end would otherwise
    "succeed" with a table of dashes); one that selects fewer jobs than its ``max_jobs`` asks
    for carries a note (``PreparedScenario.notes``) the CLI prints as a warning.
    """
    if isinstance(scenario, ScenarioSpec):
        spec, base = scenario, None
    else:
        _check_scenario_name(scenario)
        spec, base = resolve_scenario(scenario)
    if seed is not None:
        spec = spec.model_copy(update={"seed": seed})
    source = scenario if isinstance(scenario, str) else spec.name
    try:
        built = build(spec, base)
    except InputError as err:
        raise in_file(err, source) from None
    if not built.jobs:
        raise InputError(
            "selects no jobs (check the window start_s/end_s, vc, max_gpus and the trace path)",
            source=source,
            field="workload",
        )
    notes: tuple[str, ...] = ()
    wanted = spec.workload.max_jobs
    if wanted is not None and len(built.jobs) < wanted:
        notes = (
            f"scenario {spec.name}: workload.max_jobs asks for {wanted} jobs, the "
            f"selection holds {len(built.jobs)}",
        )
    # Validate the interference block against the jobs now (bad input fails before any run).
    simulator_interference(spec.simulator.interference, built.jobs, spec.seed, source)
    return PreparedScenario(
        spec, built.cluster, built.jobs, tuple(built.events), built.load, notes, source
    )


class _ScoredDefaultReclaimer:
    """The engine's default reclaimer, each choice scored like Aryl's (a
    :class:`ReclaimOutcome`), so collateral damage is comparable across policies."""

    def __init__(self) -> None:
        self.outcomes: list[ReclaimOutcome] = []

    def __call__(self, view: ClusterView, on_loan: list[str], count: int) -> list[str]:
        from gpuplan.solver_core.policies.aryl.reclaim import ReclaimInstance, evaluate

        chosen = reclaim_least_used(view, on_loan, count)
        outcome = evaluate(ReclaimInstance.from_view(view, on_loan), chosen)
        outcome.method, outcome.time = "least-used", view.now
        self.outcomes.append(outcome)
        return chosen


def run(
    prepared: PreparedScenario,
    policy: str,
    progress: ProgressHook | None = None,
    reasons: Callable[[DecisionRecord], None] | None = None,
) -> RunResult:
    """Simulate ``policy`` on a prepared scenario (with its loan events, if any); ``reasons``
    gets one :class:`DecisionRecord` per decision (why each action, why jobs wait)."""
    spec = prepared.spec
    chosen = prepared.make_policy(policy)
    usage = reclaimer = mixed = None
    if spec.loaning is not None:
        from gpuplan.scenarios.loaning_usage import MixedCounter, PoolUsage

        # Usage over [first decision, last submission], as the Aryl results page measures it.
        last = max((j.submit_time for j in prepared.jobs), default=0.0)
        mixed = MixedCounter()
        usage = PoolUsage(prepared.cluster, prepared.load, until=last, chain=mixed)
        reclaimer = chosen.reclaimer or _ScoredDefaultReclaimer()
    interference = simulator_interference(
        spec.simulator.interference, prepared.jobs, spec.seed, prepared.source or spec.name
    )
    overheads = policy_overheads(spec.overheads, chosen)
    result, _, _ = simulate(
        prepared.cluster,
        prepared.jobs,
        chosen,
        overheads=overheads,
        events=prepared.events,
        scenario=spec.name,
        seed=spec.seed,
        sample_interval_s=spec.engine.sample_interval_s,
        round_interval_s=spec.engine.round_interval_s,
        decide_only_at_rounds=spec.engine.decide_only_at_rounds,
        on_plan=usage,
        progress=progress,
        learning=spec.learning,
        reclaimer=reclaimer,
        interference=interference,
        restart_gate=gate_for_scenario(spec.engine.restart_gate, overheads),
        reasons=reasons,
    )
    if usage is None or reclaimer is None:
        return result
    from gpuplan.scenarios.inference import normalised_slots
    from gpuplan.scenarios.loaning_usage import loaning_metrics
    from gpuplan.scenarios.usage_bound import window_usage_bound

    loan = spec.loaning
    assert loan is not None
    # Physical inference GPUs behind one modelled slot (8 T4 as 2 normalised slots: 4).
    slots = normalised_slots(loan.gpus_per_server, loan.ratio)[0] if loan.normalise else 0
    per_slot = loan.gpus_per_server / slots if slots else 1.0
    training = prepared.cluster.gpus_in_pool("training")
    last = max((j.submit_time for j in prepared.jobs), default=0.0)
    bound = window_usage_bound(prepared.jobs, training, last) if training and last > 0 else None
    metrics = loaning_metrics(
        usage,
        result,
        prepared.events,
        reclaimer.outcomes,
        cluster=prepared.cluster,
        per_slot=per_slot,
        bound=bound,
        jobs=prepared.jobs,
        mixed=mixed,
    )
    return result.model_copy(update={"loaning": metrics})


def policy_overheads(overheads: Overheads, policy: Policy) -> Overheads:
    """The scenario's overheads with the fields ``policy`` declares for its own mechanism
    (``PolicyDef.cost_model``: termination-based resizing pays a full restart per grow)
    replaced; unchanged for a policy that declares none."""
    cost = cost_model_of(policy)
    if not cost:
        return overheads
    return Overheads.model_validate({**overheads.model_dump(), **cost})


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


def plan(
    state: ClusterState, policy: str, include_keep: bool = True, seed: int = 0
) -> AllocationPlan:
    """One scheduling decision for a cluster snapshot (what ``gpuplan plan`` prints).

    A job that can never run on the usable nodes (its minimum GPU count exceeds their GPUs of
    its type) is an :class:`InputError` naming ``jobs[i].spec.<field>``: no policy could place
    it, and leaving it pending forever would hide the mistake.
    """
    view = state.to_view()
    for i, snap in enumerate(state.jobs):
        bad = fit_error(snap.spec, view.nodes.values(), state.cluster)
        if bad is not None:
            msg, where = bad
            raise InputError(msg, field=f"jobs[{i}].spec.{where}")
    chosen = make_policy(policy, seed=seed)
    t0 = time.perf_counter()
    decision = chosen.decide(view)
    ms = (time.perf_counter() - t0) * 1000
    built = build_plan(view, decision, chosen.name, ms, include_keep=include_keep)
    # Re-validate so a plan printed to users is a fully checked model.
    return AllocationPlan.model_validate(built.model_dump())
