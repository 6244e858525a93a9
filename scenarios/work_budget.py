"""The work budget: how much a scenario would make the simulator do, checked before it runs.

Why: every field of a scenario can be within its own bound and the run still never end. A
metric sample every microsecond (``engine.sample_interval_s: 1e-6``) over a week is 6e11
samples; a loan step every microsecond is as many loan events; 131,072 inference servers
re-decided every 5 minutes for two days is 76 million server changes. Each of these used to
hang with memory growing without bound. :func:`estimate` counts that work from the built
scenario (jobs, cluster, loaning block) and :func:`check` refuses, in one line naming the field
to change, a scenario whose count exceeds the :class:`Budget`. The budget is about total work,
not per-field minima: ``sample_interval_s: 0.001`` on two jobs lasting 10 s is some 10,000
samples (31,000 estimated) and runs; on the week-long ``philly-default`` it is refused.

**The horizon** (:func:`horizon_s`) is the estimate every count rests on: an upper estimate of
the simulated span. Each job's span is the time it takes alone at its *minimum* GPU count on the
*slowest* GPU type it may use, with the worst spread factor of its profile, plus one start pause
(``overheads.start_s``); its *area* is that span x its minimum GPU count / the training GPUs it
may use. The horizon is the last submission + 2 x the total area + the longest span, the
shape of the list-scheduling bound (Garey and Graham): a schedule that starts a waiting job
whenever it fits keeps about half the GPUs busy or is in the longest job's tail. It is an
estimate, not a guarantee: a policy that idles GPUs while jobs wait (strict FIFO behind a job
of more than half the cluster) or pays many preemption and resize pauses can run longer, and
the pauses' own bound (``MAX_OVERHEAD_S``) and the simulator's stop still bound that. On the
embedded scenarios real spans are 0.2-0.5 of it (``tests/scenarios/test_work_budget.py`` checks it).
With a ``loaning`` block the run lasts at least until the last loan event
(``loaning.horizon_s``, default last submission + 2 x ``period_s``). The horizon is capped at
the simulator's stop, ``SIMULATION_HORIZON_S`` (40 years), which no run passes. A workload near
a limit may be refused although its real span would fit: raise the interval.

Counts (each compared with its :class:`Budget` limit, the field named in the refusal):

* samples ``horizon / engine.sample_interval_s + 1`` (``engine.sample_interval_s``);
* rounds ``horizon / engine.round_interval_s`` (``engine.round_interval_s``): every round is
  a decision;
* loan steps ``loaning horizon / loaning.step_s`` (``loaning.step_s``, or
  ``loaning.horizon_s`` / ``loaning.period_s`` when the step is not below its default) and
  server steps = loan steps x ``loaning.servers`` (``loaning.servers``): every step may move
  every server between the pools;
* events ``2 x jobs + rounds + loan steps`` (arrivals, completions, timers, loan events;
  named by the largest part);
* jobs, the workload's (``workload.max_jobs``); a generated workload's declared count
  (synthetic ``workload.jobs``, the Aryl testbed's ``jobs.count``) is checked before it is
  generated;
* candidate sizes ``sum over jobs of min(GPU counts it may run at, usable GPUs)``: what one
  decision's solver may have to consider when every job is active (``elasticity.allowed`` or
  the elasticity range of the largest contributor).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpuplan.models import Cluster, InputError, JobSpec, Node, ScenarioSpec
from gpuplan.models.bounds import SIMULATION_HORIZON_S

__all__ = [
    "Budget",
    "DEFAULT_BUDGET",
    "WorkEstimate",
    "check",
    "check_jobs",
    "estimate",
    "horizon_s",
    "job_span_s",
]

DEFAULT_LOAN_STEP_S = 300.0
"""``loaning.step_s``'s default: a step at or above it is not what makes a run long."""


@dataclass(frozen=True)
class Budget:
    """Largest counts a scenario may ask for. Each limit is far above any real run and far
    below what hangs: a metric sample costs 50-130 us (measured with two jobs, quiet and
    loaded machine) and one object kept to the end, a round or an event one policy decision
    (0.1-10 ms), a server step one node moved between the pools (about 0.1 ms)."""

    samples: int = 1_000_000
    """Metric samples: 1 million is 114 years at the default hourly sampling, or a year at
    30 s; one to two minutes."""
    rounds: int = 1_000_000
    """Scheduling rounds: a year of Pollux's 60-s rounds is 525,600."""
    loan_steps: int = 1_000_000
    """Loan / reclaim decisions: 9.5 years at Aryl's 5-minute step."""
    loan_server_steps: int = 1_000_000
    """Loan steps x inference servers: 1,000 servers re-decided every 5 minutes for 3.5 days.
    A server moved between the pools costs about 0.1 ms; 131,072 servers for two days
    (76 million) ran for hours."""
    events: int = 25_000_000
    """Arrivals, completions, round timers and loan events together."""
    candidates: int = 20_000_000
    """Sum over jobs of the GPU counts each may run at (clipped to the usable GPUs)."""
    jobs: int = 1_000_000
    """Jobs a workload generates (synthetic ``jobs``, Aryl testbed ``jobs.count``) or keeps:
    each job is a few kB of rows, specs and results (10 million generated grew memory by more
    than 1.5 GiB before any other check); 1 million is ten times the Philly trace. Checked on
    the *declared* count before anything is generated (:func:`check_jobs`)."""


DEFAULT_BUDGET = Budget()


@dataclass(frozen=True)
class WorkEstimate:
    """What a scenario would make the simulator do (see the module docstring)."""

    horizon_s: float
    jobs: int
    samples: int
    rounds: int
    loan_horizon_s: float
    loan_steps: int
    loan_server_steps: int
    events: int
    candidates: int
    candidates_job: int | None
    """Index (in ``jobs``) of the job contributing most candidate sizes, for the message."""


def _count(span: float, interval: float | None) -> int:
    """``ceil(span / interval)`` as an int that cannot overflow (huge ratios saturate)."""
    if interval is None or span <= 0:
        return 0
    ratio = span / interval
    return int(min(math.ceil(ratio), 1 << 62)) if math.isfinite(ratio) else 1 << 62


def job_span_s(
    job: JobSpec, cluster: Cluster, nodes: Sequence[Node], start_s: float = 0.0
) -> float:
    """Seconds ``job`` takes alone at its minimum GPU count on the slowest GPU type of
    ``nodes`` it may use, spread with its profile's worst spread factor, plus ``start_s``
    (may be ``inf`` for a near-zero rate; the horizon caps it)."""
    profile = job.throughput
    types = {n.gpu_type for n in nodes if job.gpu_type is None or n.gpu_type == job.gpu_type}
    try:
        ref = cluster.gpu_type(profile.reference_gpu).relative_speed
        speed = min(
            (profile.type_multiplier(t, cluster.gpu_type(t).relative_speed, ref) for t in types),
            default=1.0,
        )
    except KeyError:  # a type the cluster does not declare: the simulator refuses it later
        speed = 1.0
    spread = min(1.0, profile.default_spread_factor, *profile.spread_factor.values())
    try:
        rate = profile.rate(job.min_gpus)
    except ValueError:  # extrapolation 'none' beyond the measured counts
        rate = profile.rate(max(profile.points))
    rate *= speed * spread
    span = job.work / rate if rate > 0 else math.inf
    return span + start_s


def horizon_s(
    jobs: Sequence[JobSpec], cluster: Cluster, nodes: Sequence[Node], start_s: float = 0.0
) -> float:
    """Upper estimate of the simulated span of ``jobs`` on ``nodes`` (module docstring):
    last submission + 2 x GPU-seconds at minimum sizes / usable GPUs + longest job, capped at
    ``SIMULATION_HORIZON_S``."""
    last = max((j.submit_time for j in jobs), default=0.0)
    training = [n for n in nodes if n.pool == "training"] or list(nodes)
    capacity = {None: sum(n.gpus for n in training)}
    area = longest = 0.0
    for job in jobs:
        span = job_span_s(job, cluster, nodes, start_s)
        if job.gpu_type not in capacity:
            capacity[job.gpu_type] = sum(n.gpus for n in training if n.gpu_type == job.gpu_type)
        area += span * job.min_gpus / max(1, capacity[job.gpu_type])
        longest = max(longest, span)
        if area >= SIMULATION_HORIZON_S or longest >= SIMULATION_HORIZON_S:
            return SIMULATION_HORIZON_S
    return min(last + 2 * area + longest, SIMULATION_HORIZON_S)


def _candidates(job: JobSpec, capacity: int) -> int:
    """GPU counts ``job`` may run at, clipped to ``capacity`` (without building the list)."""
    e = job.elasticity
    if e is None:
        return 1
    if e.allowed:
        return min(len(e.allowed), capacity)
    return max(1, min(e.max_gpus, capacity) - e.min_gpus + 1)


def estimate(
    spec: ScenarioSpec, cluster: Cluster, jobs: Sequence[JobSpec], nodes: Sequence[Node]
) -> WorkEstimate:
    """Count the work ``spec`` asks for with these built ``jobs`` on the usable ``nodes``."""
    horizon = horizon_s(jobs, cluster, nodes, spec.overheads.start_s)
    last = max((j.submit_time for j in jobs), default=0.0)
    loan = spec.loaning
    loan_horizon = loan_steps = server_steps = 0
    if loan is not None:
        loan_horizon = loan.horizon_s if loan.horizon_s is not None else last + 2 * loan.period_s
        loan_steps = _count(loan_horizon, loan.step_s)
        server_steps = loan_steps * loan.servers
        horizon = min(max(horizon, loan_horizon), SIMULATION_HORIZON_S)
    engine = spec.engine
    samples = _count(horizon, engine.sample_interval_s) + 1
    rounds = _count(horizon, engine.round_interval_s)
    capacity = sum(n.gpus for n in nodes)
    candidates, biggest, worst = 0, None, 0
    for i, job in enumerate(jobs):
        c = _candidates(job, capacity)
        candidates += c
        if c > worst:
            biggest, worst = i, c
    return WorkEstimate(
        horizon_s=horizon,
        jobs=len(jobs),
        samples=samples,
        rounds=rounds,
        loan_horizon_s=float(loan_horizon),
        loan_steps=loan_steps,
        loan_server_steps=server_steps,
        events=2 * len(jobs) + rounds + loan_steps,
        candidates=candidates,
        candidates_job=biggest,
    )


def check_jobs(
    count: int, *, source: str | None, field: str, budget: Budget = DEFAULT_BUDGET
) -> None:
    """Refuse a workload declaring more than ``budget.jobs`` jobs, before generating them."""
    if count > budget.jobs:
        raise InputError(
            f"{count:,} jobs exceed the work budget of {budget.jobs:,} jobs (docs/cli.md, work "
            "budget)",
            source=source,
            field=field,
        )


def _loan_field(spec: ScenarioSpec) -> str:
    """The loaning field to change for too many loan steps: a step below its default is the
    cause; otherwise the span (an explicit horizon, else the period that sets the default)."""
    loan = spec.loaning
    assert loan is not None
    if loan.step_s < DEFAULT_LOAN_STEP_S:
        return "loaning.step_s"
    return "loaning.horizon_s" if loan.horizon_s is not None else "loaning.period_s"


def check(
    spec: ScenarioSpec,
    work: WorkEstimate,
    budget: Budget = DEFAULT_BUDGET,
    job_field: tuple[str | None, int | None, str] | None = None,
) -> None:
    """Refuse (:class:`InputError`, one line naming the field) a scenario whose estimated work
    exceeds ``budget``. ``job_field`` = (source, row, field) locates the job contributing most
    candidate sizes, for that refusal; default ``workload``."""
    h = f"{work.horizon_s:.4g} s"
    check_jobs(work.jobs, source=None, field="workload.max_jobs", budget=budget)
    if work.samples > budget.samples:
        raise InputError(
            f"{work.samples:.3g} metric samples (horizon estimate {h} / sample_interval_s "
            f"{spec.engine.sample_interval_s:g} s) exceed the work budget of "
            f"{budget.samples:,}; raise sample_interval_s (docs/cli.md, work budget)",
            field="engine.sample_interval_s",
        )
    if work.rounds > budget.rounds:
        raise InputError(
            f"{work.rounds:.3g} scheduling rounds (horizon estimate {h} / round_interval_s "
            f"{spec.engine.round_interval_s:g} s) exceed the work budget of "
            f"{budget.rounds:,}; raise round_interval_s (docs/cli.md, work budget)",
            field="engine.round_interval_s",
        )
    loan = spec.loaning
    if loan is not None and work.loan_steps > budget.loan_steps:
        raise InputError(
            f"{work.loan_steps:.3g} loan steps (loaning horizon {work.loan_horizon_s:.4g} s / "
            f"step_s {loan.step_s:g} s) exceed the work budget of {budget.loan_steps:,}; "
            "raise loaning.step_s or shorten the horizon (docs/cli.md, work budget)",
            field=_loan_field(spec),
        )
    if loan is not None and work.loan_server_steps > budget.loan_server_steps:
        raise InputError(
            f"{work.loan_server_steps:.3g} server steps ({work.loan_steps:,} loan steps x "
            f"{loan.servers:,} servers) exceed the work budget of "
            f"{budget.loan_server_steps:,}; use fewer servers, a longer step_s or a shorter "
            "horizon (docs/cli.md, work budget)",
            field="loaning.servers",
        )
    if work.events > budget.events:
        parts = {
            "workload": 2 * work.jobs,
            "engine.round_interval_s": work.rounds,
            "loaning.step_s": work.loan_steps,
        }
        raise InputError(
            f"{work.events:.3g} events ({work.jobs:,} jobs, {work.rounds:,} rounds, "
            f"{work.loan_steps:,} loan steps) exceed the work budget of {budget.events:,} "
            "(docs/cli.md, work budget)",
            field=max(parts, key=parts.__getitem__),
        )
    if work.candidates > budget.candidates:
        source, row, where = job_field or (None, None, "workload")
        raise InputError(
            f"{work.candidates:.3g} candidate GPU counts over all jobs exceed the work budget "
            f"of {budget.candidates:,} (each elastic job may run at every count of its range "
            "or allowed list); narrow the elasticity ranges (docs/cli.md, work budget)",
            source=source,
            row=row,
            field=where,
        )
