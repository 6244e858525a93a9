"""Run metrics: AFS cluster samples, per-run summaries, policy comparisons and CSV output.

The definitions follow the AFS paper's §5.3 (000 digest): queue length (QL), cluster efficiency
(CE), blocking index (BI) and the avg-JCT *reduction rate* ``baseline / algorithm`` (> 1 means
better than the baseline). ``docs/metrics.md`` states every equation, unit and CSV column.

:func:`take_sample` runs inside the simulator's event loop, so it is a single pass over the
active jobs with scalar accumulators; :func:`job_record` (once per finished job) builds its
record without re-validation. Everything else runs once per run and favours clarity.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from rich.markup import escape
from rich.table import Table

from gpuplan.executors import pystats
from gpuplan.models import ActiveJob, JobRecord, RunResult, Sample
from gpuplan.models.records import LoaningMetrics

if TYPE_CHECKING:
    from .engine import Engine

__all__ = [
    "RunSummary",
    "compare_json",
    "compare_table",
    "format_duration",
    "job_record",
    "loaning_table",
    "mean_summary",
    "run_result",
    "summarize",
    "take_sample",
    "write_job_csv",
    "write_samples_csv",
]


# --------------------------------------------------------------------------- records
def job_record(job: ActiveJob, now: float | None) -> JobRecord:
    """The record of one job (finished, failed or, with ``finish_time`` None, still active at
    ``now``). Built once per finished job inside the event loop: validated construction, the
    cheapest public way for this 19-field model (``model_construct`` walks every field in
    Python, about twice the cost), and it checks the engine's values on the way out."""
    spec = job.spec
    finish = job.finish_time
    return JobRecord(
        job_id=spec.id,
        user=spec.user,
        model=spec.model,
        requested_gpus=spec.requested_gpus,
        work=spec.work,
        submit_time=spec.submit_time,
        first_start=job.first_start,
        finish_time=finish,
        queueing_time=None if job.first_start is None else job.first_start - spec.submit_time,
        pending_time=job.pending_time_at(finish if finish is not None else (now or 0.0)),
        jct=None if finish is None else finish - spec.submit_time,
        gpu_seconds=job.attained_service,
        done_iterations=job.done,
        lost_iterations=job.lost_work,
        preemptions=job.preemptions,
        resizes=job.resizes,
        migrations=job.migrations,
    )


def run_result(engine: Engine, scenario: str, seed: int, wall_s: float) -> RunResult:
    """What :meth:`Engine.result` returns: the records of finished jobs, then the unfinished
    ones (finish None), and the run's counters (the engine's :class:`~.recorder.RunRecorder`)."""
    rec = engine.recorder
    now = rec.now
    unfinished = [job_record(j, now) for j in (*engine.running.values(), *engine.pending.values())]
    return RunResult.model_construct(
        scenario=scenario,
        policy=engine.policy.name,
        seed=seed,
        jobs=[*rec.records, *unfinished],
        samples=rec.samples,
        decision_ms=rec.decision_ms,
        gpu_seconds_allocated=rec.gpu_seconds_allocated,
        gpu_seconds_capacity=rec.gpu_seconds_capacity,
        start_time=rec.start_time or 0.0,
        end_time=now or 0.0,
        events=rec.events,
        wall_s=wall_s,
        solver_calls=rec.solver_calls,
        solver_fallbacks=rec.solver_fallbacks,
        solver_ms=rec.solver_ms,
        rejected=list(rec.rejected),
        degraded_resizes=rec.degraded_resizes,
        restart_gate=None if engine.restart_gate is None else engine.restart_gate.summary(),
    )


# --------------------------------------------------------------------------- sampling
def take_sample(now: float, jobs: Iterable[ActiveJob], capacity: int) -> Sample:
    """Snapshot QL, CE and BI at ``now`` (AFS §5.3).

    A job counts as *pending* when it is not finished and holds no GPUs, whatever its status
    field says: QL and BI are about jobs that are waiting, and a job with a zero-GPU allocation
    is waiting. CE uses the job's packed profile speed-up ``P(c)/P(1)`` (not its placement rate),
    because the paper defines CE on identical GPUs as "how many single-GPU jobs' worth of
    progress the cluster makes"; GPU-type speed and sharing are deliberately left out so CE stays
    comparable across clusters. ``capacity`` is M, the usable GPUs at ``now``.

    A pending job with no work left would make BI infinite; it contributes 0 instead, because
    such a job is not blocked (it finishes the moment it starts).
    """
    queue_length = 0
    running = 0
    gpus_allocated = 0
    speedup_sum = 0.0
    blocking_sum = 0.0
    for job in jobs:
        if job.status == "finished":
            continue
        gpus = job.gpus
        profile = job.spec.throughput
        if gpus > 0:
            running += 1
            gpus_allocated += gpus
            speedup_sum += profile.rate(gpus) / profile.rate(1)
        else:
            queue_length += 1
            remaining = job.remaining(now)
            if remaining > 0.0:
                # pending / (remaining / P(1)) written without the intermediate division
                blocking_sum += job.pending_time_at(now) * profile.rate(1) / remaining
    return Sample(
        time=now,
        queue_length=queue_length,
        running=running,
        cluster_efficiency=speedup_sum / capacity if capacity > 0 else 0.0,
        blocking_index=blocking_sum / queue_length if queue_length else 0.0,
        gpus_allocated=gpus_allocated,
        capacity=capacity,
    )


# --------------------------------------------------------------------------- summary
class RunSummary(BaseModel):
    """One run reduced to the numbers policies are compared on.

    Durations are seconds. JCT and queueing statistics are over *finished* jobs only, so a run
    with unfinished jobs can look better than it is: always read them together with
    ``unfinished``. A statistic over an empty set is ``None`` rather than 0, so "no data" can't
    be mistaken for "instant".
    """

    model_config = ConfigDict(extra="forbid")

    scenario: str
    policy: str
    seed: int = 0
    jobs: int
    finished: int
    unfinished: int
    avg_jct_s: float | None = None
    median_jct_s: float | None = None
    p95_jct_s: float | None = None
    p99_jct_s: float | None = None
    avg_queueing_s: float | None = None
    median_queueing_s: float | None = None
    p95_queueing_s: float | None = None
    p99_queueing_s: float | None = None
    makespan_s: float | None = Field(
        default=None, description="last finish - first submit (over finished jobs' finishes)"
    )
    gpu_utilisation: float | None = Field(
        default=None, description="gpu_seconds_allocated / gpu_seconds_capacity"
    )
    gpu_seconds: float = Field(
        default=0.0,
        description="GPU-seconds held by jobs over the run (the run's gpu_seconds_allocated): "
        "what a policy's resizes and restarts cost in GPU time, beside the JCTs they buy",
    )
    preemptions: int = 0
    resizes: int = 0
    migrations: int = 0
    lost_iterations: float = 0.0
    mean_queue_length: float | None = None
    mean_cluster_efficiency: float | None = None
    mean_blocking_index: float | None = None
    decision_p50_ms: float | None = None
    decision_p95_ms: float | None = None
    decision_p99_ms: float | None = None
    decision_max_ms: float | None = None
    events: int = 0
    wall_s: float = 0.0
    jobs_per_s: float | None = Field(default=None, description="simulated jobs per wall second")
    solver_calls: int = 0
    solver_fallbacks: int = 0
    solver_p50_ms: float | None = Field(
        default=None, description="median wall time of one solver call (SolverStats.wall_ms)"
    )
    solver_p95_ms: float | None = None
    solver_p99_ms: float | None = None
    rejected: int = Field(
        default=0,
        description="arrivals the engine refused (duplicate id, larger than the "
        "cluster); not counted in ``jobs``",
    )
    loaning: LoaningMetrics | None = Field(
        default=None, description="Aryl capacity-loaning metrics (scenarios with a loaning block)"
    )
    degraded_resizes: int = Field(
        default=0, description="resizes a stop-free policy got as restarts (RunResult's field)"
    )
    gate_proposed: int | None = Field(
        default=None,
        description="restart gate: changes to running jobs the policy proposed "
        "(per kind in RunResult.restart_gate); None: no gate",
    )
    gate_done: int | None = Field(default=None, description="restart gate: carried out")
    gate_skipped: int | None = Field(default=None, description="restart gate: skipped")
    avg_jct_bound_s: float | None = Field(
        default=None,
        description="proven lower bound on the optimal average JCT, from a "
        "policy that has one (offline-optimal; RunResult.bound); None: no bound",
    )
    avg_jct_gap: float | None = Field(
        default=None,
        description="(avg_jct_s - avg_jct_bound_s) / avg_jct_bound_s: this run "
        "is at most this far above the optimum",
    )
    bound_status: str | None = Field(
        default=None,
        description="'optimal' (the policy's schedule is proven optimal) or "
        "'upper-bound' (the best found, not proven); None: no bound",
    )


def _jct(record: JobRecord) -> float:
    """JCT of a finished record, recomputed if the executor left the field empty."""
    if record.jct is not None:
        return record.jct
    return record.finish_time - record.submit_time  # type: ignore[operator]


def _queueing(record: JobRecord) -> float:
    """Queueing time (first start - submit) of a finished record."""
    if record.queueing_time is not None:
        return record.queueing_time
    start = record.first_start if record.first_start is not None else record.finish_time
    return start - record.submit_time  # type: ignore[operator]


def _stats(values: Sequence[float]) -> tuple[float | None, ...]:
    """Mean, median, p95, p99 as numpy's mean and linear percentile give them (``None`` x 4
    when empty): :mod:`~gpuplan.executors.pystats`, so a run's summary needs no numpy."""
    if not values:
        return (None, None, None, None)
    return (pystats.mean(values), *_percentiles(values))


def _percentiles(values: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """p50, p95, p99 as numpy's linear percentile gives them (``None`` x 3 when empty)."""
    if not values:
        return (None, None, None)
    p50, p95, p99 = pystats.percentiles(values, _QS)
    return (p50, p95, p99)


_QS = (50.0, 95.0, 99.0)


def _mean(values: Iterable[float]) -> float | None:
    return pystats.mean(values)


def summarize(result: RunResult) -> RunSummary:
    """Reduce a :class:`RunResult` to a :class:`RunSummary`.

    Sample means are plain means: the simulator takes samples at regular instants, so a plain
    mean *is* the time-weighted mean. Counters (preemptions, lost iterations, ...) are summed over
    all jobs, finished or not, because the disruption happened either way.
    """
    records = result.jobs
    finished = [r for r in records if r.finish_time is not None]
    jct = _stats([_jct(r) for r in finished])
    queueing = _stats([_queueing(r) for r in finished])

    makespan = None
    if finished:
        first_submit = min(r.submit_time for r in records)
        makespan = max(r.finish_time for r in finished) - first_submit  # type: ignore[type-var]

    utilisation = None
    if result.gpu_seconds_capacity > 0:
        utilisation = result.gpu_seconds_allocated / result.gpu_seconds_capacity

    p50_ms, p95_ms, p99_ms = _percentiles(result.decision_ms)
    max_ms = pystats.maximum(result.decision_ms) if result.decision_ms else None
    solver = _percentiles(result.solver_ms)
    samples = result.samples
    return RunSummary(
        scenario=result.scenario,
        policy=result.policy,
        seed=result.seed,
        jobs=len(records),
        finished=len(finished),
        unfinished=len(records) - len(finished),
        avg_jct_s=jct[0],
        median_jct_s=jct[1],
        p95_jct_s=jct[2],
        p99_jct_s=jct[3],
        avg_queueing_s=queueing[0],
        median_queueing_s=queueing[1],
        p95_queueing_s=queueing[2],
        p99_queueing_s=queueing[3],
        makespan_s=makespan,
        gpu_utilisation=utilisation,
        gpu_seconds=result.gpu_seconds_allocated,
        preemptions=sum(r.preemptions for r in records),
        resizes=sum(r.resizes for r in records),
        migrations=sum(r.migrations for r in records),
        lost_iterations=float(sum(r.lost_iterations for r in records)),
        mean_queue_length=_mean(s.queue_length for s in samples),
        mean_cluster_efficiency=_mean(s.cluster_efficiency for s in samples),
        mean_blocking_index=_mean(s.blocking_index for s in samples),
        decision_p50_ms=p50_ms,
        decision_p95_ms=p95_ms,
        decision_p99_ms=p99_ms,
        decision_max_ms=max_ms,
        events=result.events,
        wall_s=result.wall_s,
        jobs_per_s=len(records) / result.wall_s if result.wall_s > 0 else None,
        solver_calls=result.solver_calls,
        solver_fallbacks=result.solver_fallbacks,
        solver_p50_ms=solver[0],
        solver_p95_ms=solver[1],
        solver_p99_ms=solver[2],
        rejected=len(result.rejected),
        loaning=result.loaning,
        degraded_resizes=result.degraded_resizes,
        **_gate_totals(result.restart_gate),
        **_bound_fields(result, jct[0]),
    )


def _bound_fields(result: RunResult, avg_jct: float | None) -> dict[str, Any]:
    """The summary's bound columns from the policy's proven bound (none: all None). A run
    whose average JCT came out above the planned one (overheads or failures the model leaves
    out slowed the replay) is an ``upper-bound`` whatever the plan's status: it was not
    optimal. The lower bound still holds for it (such effects only slow a run down)."""
    b = result.bound
    if b is None:
        return {}
    status = b.status
    if avg_jct is None or avg_jct > b.planned_avg_jct_s * (1 + DIVERGED_REL):
        status = "upper-bound"
    return {
        "avg_jct_bound_s": b.lower_bound_s,
        "bound_status": status,
        "avg_jct_gap": _gap(avg_jct, b.lower_bound_s),
    }


def _gap(value: float | None, bound: float | None) -> float | None:
    if value is None or bound is None or bound <= 0:
        return None
    return max(0.0, (value - bound) / bound)


DIVERGED_REL = 1e-5
"""A run's average JCT this far (relative) above its plan's means the replay diverged."""


def _gate_totals(gate: dict[str, Any] | None) -> dict[str, int | None]:
    """The gate's proposed / done / skipped changes to running jobs, summed over kinds
    (starts that went with them not counted)."""
    if gate is None:
        return {"gate_proposed": None, "gate_done": None, "gate_skipped": None}
    rows = [v for k, v in gate.get("changes", {}).items() if k != "start"]
    return {
        f"gate_{n}": sum(int(r.get(n, 0)) for r in rows) for n in ("proposed", "done", "skipped")
    }


# --------------------------------------------------------------------------- comparison
RATIO_TITLE = "Avg JCT ratio\n(first / this; >1 = better)"


def format_duration(seconds: float | None) -> str:
    """Human-readable duration: s below a minute, min below an hour, h below a day, else d."""
    if seconds is None:
        return "—"
    magnitude = abs(seconds)
    if magnitude < 60:
        return f"{seconds:.1f} s"
    if magnitude < 3600:
        return f"{seconds / 60:.1f} min"
    if magnitude < 86400:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / 86400:.2f} d"


def _ratio(baseline: float | None, value: float | None) -> float | None:
    """AFS reduction rate ``baseline / value``; ``None`` when either side is missing or 0."""
    if baseline is None or value is None or value <= 0:
        return None
    return baseline / value


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def compare_table(summaries: list[tuple[str, RunSummary]]) -> Table:
    """One row per policy; the first entry is the baseline of the ratio column.

    An ``Unfinished`` column is included beside the brief's metrics because JCT statistics are
    over finished jobs only: a policy that starves jobs would otherwise look fast. A
    ``Rejected`` column (arrivals the engine refused) appears only when some run rejected a job,
    so a silently shrunken workload can't pass for a complete one. A ``Migrations`` column
    appears only when some run migrated a job (OJPAP's worker moves, Aryl's reclaims), so the
    usual table keeps its shape.
    """
    show_rejected = any(s.rejected for _, s in summaries)
    show_migrations = any(s.migrations for _, s in summaries)
    table = Table(title="Policy comparison")
    table.add_column("Policy", style="bold")
    for title in ("Avg JCT", "p99 JCT", "Avg queueing", "Makespan"):
        table.add_column(title, justify="right")
    table.add_column("GPU util", justify="right")
    table.add_column("Unfinished", justify="right")
    if show_rejected:
        table.add_column("Rejected", justify="right")
    table.add_column("Preemptions", justify="right")
    table.add_column("Resizes", justify="right")
    if show_migrations:
        table.add_column("Migrations", justify="right")
    table.add_column("Decision p95 (ms)", justify="right")
    table.add_column(RATIO_TITLE, justify="right")
    baseline = summaries[0][1].avg_jct_s if summaries else None
    for name, s in summaries:
        ratio = _ratio(baseline, s.avg_jct_s)
        label = name if s.bound_status != "upper-bound" else f"{name} (upper bound)"
        cells = [
            escape(label),  # inline configurations hold [...]: text, not rich markup
            format_duration(s.avg_jct_s),
            format_duration(s.p99_jct_s),
            format_duration(s.avg_queueing_s),
            format_duration(s.makespan_s),
            "—" if s.gpu_utilisation is None else f"{s.gpu_utilisation:.1%}",
            str(s.unfinished),
            *([str(s.rejected)] if show_rejected else []),
            str(s.preemptions),
            str(s.resizes),
            *([str(s.migrations)] if show_migrations else []),
            _fmt(s.decision_p95_ms, ".2f"),
            "—" if ratio is None else f"{ratio:.2f}x",
        ]
        table.add_row(*cells)
    return table


def bounds_table(summaries: list[tuple[str, RunSummary]]) -> Table | None:
    """The proven bound on the optimal average JCT and each bounded run's gap to it, one row
    per policy that has a bound (offline-optimal); ``None`` when none has. A separate narrow
    table (five short columns) so it reads in an 80-column terminal beside the wide one."""
    rows = [(n, s) for n, s in summaries if s.avg_jct_bound_s is not None]
    if not rows:
        return None
    table = Table(title="Proven bounds on the optimal avg JCT")
    table.add_column("Policy", style="bold")
    for title in ("Status", "Avg JCT", "Bound", "Gap"):
        table.add_column(title, justify="right")
    for name, s in rows:
        status = "optimal" if s.bound_status == "optimal" else "upper bound"
        table.add_row(
            escape(name),
            status,
            format_duration(s.avg_jct_s),
            format_duration(s.avg_jct_bound_s),
            _fmt_gap(s.avg_jct_gap),
        )
    return table


def _fmt_gap(gap: float | None) -> str:
    """A gap as a percentage; one too small for two decimals prints as ``<0.01%``, not 0."""
    if gap is None:
        return "—"
    return f"{gap:.2%}" if gap >= 5e-5 or gap == 0 else "<0.01%"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def loaning_table(summaries: list[tuple[str, RunSummary]]) -> Table | None:
    """Aryl's capacity-loaning metrics (Tab. 5 columns), one row per policy; ``None`` when no
    run has them (the scenario has no loaning block)."""
    if not any(s.loaning is not None for _, s in summaries):
        return None
    table = Table(title="Capacity loaning (usage over first decision .. last submission)")
    table.add_column("Policy", style="bold")
    for title in (
        "Usage training",
        "Usage both pools",
        "Loaned used",
        "Preemption ratio",
        "Collateral",
        "Reclaim met by flexible",
        "Loans",
        "Reclaims (servers)",
    ):
        table.add_column(title, justify="right")
    for name, s in summaries:
        m = s.loaning
        if m is None:
            table.add_row(escape(name), *["—"] * 8)
            continue
        table.add_row(
            escape(name),
            _pct(m.usage_training),
            _pct(m.usage_overall),
            _pct(m.usage_loaned),
            _pct(m.preemption_ratio),
            _pct(m.collateral_damage),
            _pct(m.met_by_flexible),
            str(m.loan_offers),
            f"{m.reclaims} ({m.servers_reclaimed})",
        )
    return table


def compare_json(summaries: list[tuple[str, RunSummary]]) -> list[dict[str, Any]]:
    """The :func:`compare_table` metrics as raw numbers (seconds, fractions), one dict a policy.

    ``avg_jct_ratio`` = first policy's avg JCT / this policy's (> 1 = better than the first).
    Missing values are ``None`` (JSON ``null``).
    """
    baseline = summaries[0][1].avg_jct_s if summaries else None
    return [
        {
            "policy": name,
            **s.model_dump(exclude={"policy"}),
            "avg_jct_ratio": _ratio(baseline, s.avg_jct_s),
        }
        for name, s in summaries
    ]


# --------------------------------------------------------------------------- CSV
def _write_models_csv(path: str | Path, fields: list[str], rows: Iterable[BaseModel]) -> Path:
    """Write pydantic rows with ``fields`` as header; ``None`` becomes an empty cell."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(fields)
        for row in rows:
            writer.writerow(["" if (v := getattr(row, f)) is None else v for f in fields])
    return out


def write_job_csv(result: RunResult, path: str | Path) -> Path:
    """One row per :class:`JobRecord`; header = the record's field names in declaration order."""
    return _write_models_csv(path, list(JobRecord.model_fields), result.jobs)


def write_samples_csv(result: RunResult, path: str | Path) -> Path:
    """One row per :class:`Sample`; header = the sample's field names in declaration order."""
    return _write_models_csv(path, list(Sample.model_fields), result.samples)


def mean_summary(summaries: Sequence[RunSummary]) -> RunSummary:
    """Field-wise mean of several runs of one policy (e.g. over seeds).

    Numbers are averaged; a field that is None in any run is None (a mean over a subset would
    silently compare different things). Text fields come from the first run; ``seed`` is -1.
    The nested loaning metrics are averaged field by field by the same rules.
    """
    if not summaries:
        raise ValueError("mean_summary needs at least one summary")
    first = summaries[0]
    merged = _mean_fields(summaries)
    merged["seed"] = -1 if len(summaries) > 1 else first.seed
    if merged.get("bound_status") is not None:  # the mean is proven only if every run is
        proven = all(s.bound_status == "optimal" for s in summaries)
        merged["bound_status"] = "optimal" if proven else "upper-bound"
        merged["avg_jct_gap"] = _gap(merged["avg_jct_s"], merged["avg_jct_bound_s"])
    return RunSummary.model_validate(merged)


def _mean_fields(models: Sequence[BaseModel]) -> dict[str, Any]:
    """Field-wise mean of models of one type (see :func:`mean_summary` for the rules)."""
    merged: dict[str, Any] = {}
    for name in type(models[0]).model_fields:
        values = [getattr(m, name) for m in models]
        if any(v is None for v in values):
            merged[name] = None
        elif isinstance(values[0], BaseModel):
            merged[name] = _mean_fields(values)
        elif isinstance(values[0], str):
            merged[name] = values[0]
        elif all(isinstance(v, int) for v in values):
            merged[name] = round(sum(values) / len(values))
        else:
            merged[name] = sum(values) / len(values)
    return merged
