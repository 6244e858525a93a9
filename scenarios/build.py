"""Scenario files -> (cluster, jobs, loan events).

``resolve_scenario`` accepts an embedded scenario name (``gpuplan scenarios`` lists them) or a
path to a YAML/JSON file; ``build`` loads the workload it names, applies filters, time scaling
and the job mapping, builds the inference pool and its loan / reclaim events when the scenario
has a ``loaning`` block, and rejects impossible input before any simulation starts:

* two jobs with one id (any source): the engine would drop the second silently;
* a job whose minimum GPU count exceeds the GPUs it may ever use -- the training pool plus,
  with a loaning block, the inference pool, counting only nodes of its ``gpu_type`` when it
  has one; such a job would never start;
* a ``gpu_type`` no node of the cluster has;
* work beyond the documented work budget (``work_budget.py``: metric samples, rounds, loan
  steps, events and candidate sizes over an upper estimate of the simulated span), which would
  run for hours or exhaust memory; checked after the jobs are built and before the loan events
  are generated.

Each error names the trace row (``<file>, row <n>``) or the inline job (``workload.inline_jobs,
row <n>``, from 1) and the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from gpuplan.models import (
    Cluster,
    Event,
    InputError,
    JobSpec,
    Node,
    ScenarioSpec,
    WorkloadSpec,
)

from .input_files import check_regular_file, parse_structured, read_text
from .trace_job import TraceJob
from .traces import resolve_trace_path
from .work_budget import check as check_budget
from .work_budget import check_jobs
from .work_budget import estimate as estimate_work

if TYPE_CHECKING:
    from .inference import InferenceLoad

EMBEDDED_DIR = "data"
INLINE_SOURCE = "workload.inline_jobs"

__all__ = [
    "BuiltScenario",
    "build",
    "build_scenario",
    "embedded_scenarios",
    "fit_error",
    "load_rows",
    "load_scenario_file",
    "resolve_scenario",
]


def embedded_scenarios() -> dict[str, Path]:
    """Scenario files shipped inside the package: name -> path."""
    folder = resources.files("gpuplan.scenarios").joinpath(EMBEDDED_DIR)
    found: dict[str, Path] = {}
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".scenario.yaml"):
            found[name.removesuffix(".scenario.yaml")] = Path(str(entry))
    return dict(sorted(found.items()))


def _first_error(err: ValidationError) -> tuple[str, str]:
    first = err.errors()[0]
    return first["msg"], ".".join(str(x) for x in first["loc"])


def load_scenario_file(path: Path) -> ScenarioSpec:
    """Parse and validate one scenario file; errors name the file and the offending field."""
    text = read_text(path, "scenario file")
    data = parse_structured(text, str(path), json_only=path.suffix == ".json")
    if not isinstance(data, dict):
        raise InputError("a scenario file must hold a mapping", source=str(path))
    try:
        return ScenarioSpec.model_validate(data)
    except ValidationError as err:
        msg, loc = _first_error(err)
        raise InputError(msg, source=str(path), field=loc) from None


def resolve_scenario(name_or_path: str) -> tuple[ScenarioSpec, Path]:
    """An embedded scenario by name, or a scenario file by path; returns (spec, its folder)."""
    embedded = embedded_scenarios()
    if name_or_path in embedded:
        path = embedded[name_or_path]
    else:
        path = Path(name_or_path).expanduser()
        if not path.exists():
            raise InputError(
                f"no scenario named {name_or_path!r} and no such file; embedded scenarios: "
                f"{', '.join(embedded) or 'none'}",
                field="scenario",
            )
    return load_scenario_file(path), path.parent


def _secondary(err: InputError, field: str) -> InputError:
    """A refusal of a file the scenario names (``workload.path``, ``loaning.qps``) as a
    refusal of the scenario's ``field``, the secondary path kept in the message. Its source is
    left empty so that the caller (``api.in_file``) puts the scenario file in front: the user
    learns which file and which field to fix, not only that ``/dev/zero`` is a device."""
    inner = ", ".join(
        part
        for part in (
            err.source,
            None if err.row is None else f"row {err.row}",
            None if not err.field else f"field '{err.field}'",
        )
        if part
    )
    return InputError(f"{inner}: {err.message}" if inner else err.message, field=field)


def _trace_path(workload: WorkloadSpec, base: Path | None) -> Path:
    """The trace file ``workload.path`` names: found, and a regular file (checked before a
    loader opens it, so a device or a FIFO is refused naming the scenario's field)."""
    if not workload.path:
        raise InputError(
            f"workload.path is required for source {workload.source!r}", field="workload.path"
        )
    try:
        path = resolve_trace_path(workload.path, base)
        check_regular_file(path, "trace file")
    except InputError as err:
        raise _secondary(err, "workload.path") from None
    return path


def load_rows(workload: WorkloadSpec, base: Path | None, seed: int) -> list[TraceJob]:
    """Trace rows the workload names, windowed and capped."""
    src = workload.source
    window = {"start_s": workload.start_s, "end_s": workload.end_s, "max_jobs": workload.max_jobs}
    if src == "philly":
        from .philly import load_philly

        vc_origin = workload.origin == "first" and workload.vc is not None
        return load_philly(
            _trace_path(workload, base), vc=workload.vc, vc_origin=vc_origin, **window
        )
    relative = workload.origin == "first"
    if src == "itp":
        from .itp import load_itp

        return load_itp(_trace_path(workload, base), relative=relative, **window)
    if src == "itp_augmented":
        from .itp import load_itp_augmented

        return load_itp_augmented(_trace_path(workload, base), relative=relative, **window)
    if src == "gavel":
        from .gavel import load_gavel_trace

        rows = load_gavel_trace(_trace_path(workload, base))
        return _cap(rows, workload)
    if src == "tiresias":
        from .tiresias import load_tiresias

        return _cap(load_tiresias(_trace_path(workload, base)), workload)
    if src == "pollux":
        from .pollux import load_pollux_workload

        return _cap(load_pollux_workload(_trace_path(workload, base)), workload)
    if src == "aryl_testbed":
        from .inference import aryl_testbed_rows

        path = _trace_path(workload, base) if workload.path else None
        try:
            return _cap(aryl_testbed_rows(seed, path), workload)
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as err:
            raise InputError(
                f"not an Aryl testbed description ({err!r})",
                source=str(path or "aryl_testbed.json"),
                field="workload.path",
            ) from None
    if src == "synthetic":
        from .synthetic import synthetic_jobs

        missing = [
            f
            for f in ("jobs", "arrival_rate_per_h", "mean_duration_s")
            if getattr(workload, f) is None
        ]
        if missing:
            raise InputError(
                f"synthetic workloads need {', '.join(missing)}", field=f"workload.{missing[0]}"
            )
        check_jobs(workload.jobs, source=None, field="workload.jobs")  # type: ignore[arg-type]
        return synthetic_jobs(
            workload.jobs,  # type: ignore[arg-type]
            workload.arrival_rate_per_h,  # type: ignore[arg-type]
            workload.size_mix or {1: 1.0},
            workload.mean_duration_s,  # type: ignore[arg-type]
            seed,
        )
    raise InputError(f"source {src!r} has no trace rows", field="workload.source")


def _cap(rows: list[TraceJob], workload: WorkloadSpec) -> list[TraceJob]:
    """Window + max_jobs for loaders that don't take them."""
    lo, hi = workload.start_s, workload.end_s
    kept = [
        r
        for r in rows
        if (lo is None or r.submit_time >= lo) and (hi is None or r.submit_time < hi)
    ]
    return kept[: workload.max_jobs] if workload.max_jobs else kept


def _scale_and_rebase(rows: list[TraceJob], scale: float, rebase: bool = True) -> list[TraceJob]:
    """Shift the first arrival to t=0 (unless ``rebase`` is off) and multiply arrivals and work
    by ``scale`` (AFS §5.3 runs traces at 1 % and 0.2 %)."""
    if not rows:
        return rows
    origin = min(r.submit_time for r in rows) if rebase else 0.0
    out = []
    for r in rows:
        update: dict[str, float] = {"submit_time": (r.submit_time - origin) * scale}
        if scale != 1.0:
            if r.duration is not None:
                update["duration"] = r.duration * scale
            if r.iterations is not None:
                update["iterations"] = r.iterations * scale
        out.append(r.model_copy(update=update))
    return out


def _inline_jobs(workload: WorkloadSpec) -> list[JobSpec]:
    jobs = []
    for i, raw in enumerate(workload.inline_jobs or [], start=1):
        try:
            jobs.append(JobSpec.model_validate(raw))
        except ValidationError as err:
            msg, loc = _first_error(err)
            raise InputError(msg, source=INLINE_SOURCE, row=i, field=loc) from None
    return jobs


GAVEL_THROUGHPUTS = "gavel/simulation_throughputs.json"
"""Gavel's throughput table when a scenario names none (``workload.throughputs``)."""


def _gavel_profiles(base: Path | None, throughputs: str | None = None) -> dict:
    from .profiles import gavel_profiles

    try:
        path = resolve_trace_path(throughputs or GAVEL_THROUGHPUTS, base)
        check_regular_file(path, "throughput table")
    except InputError as err:
        raise _secondary(err, "workload.throughputs") from None
    table = gavel_profiles(path)
    return {job_type: prof for (job_type, worker), prof in table.items() if worker == "v100"}


# --------------------------------------------------------------------------------------------
# Cluster (+ inference pool)
# --------------------------------------------------------------------------------------------
def _cluster(spec: ScenarioSpec) -> Cluster:
    """The training cluster, plus the inference pool of a loaning block (``loaning_cluster``)."""
    c = spec.cluster
    loan = spec.loaning
    if loan is None:
        try:
            return c.build()
        except ValidationError as err:
            msg, loc = _first_error(err)
            raise InputError(msg, field=f"cluster.{loc}") from None
    from .inference import loaning_cluster

    if not isinstance(c.nodes, int) or c.nodes_per_rack is not None:
        raise InputError(
            "with a loaning block, give the training pool as a server count "
            "(cluster.nodes: N, no nodes_per_rack)",
            field="cluster.nodes",
        )
    for where, name in (("cluster.gpu_type", c.gpu_type), ("loaning.gpu_type", loan.gpu_type)):
        try:
            Cluster.uniform(1, 1).gpu_type(name)
        except KeyError:
            raise InputError(f"unknown GPU type {name!r}", field=where) from None
    return loaning_cluster(
        c.nodes,
        loan.servers,
        training_gpus=c.gpus_per_node,
        inference_gpus=loan.gpus_per_server,
        training_type=c.gpu_type,
        inference_type=loan.gpu_type,
        inference_ratio=loan.ratio,
        normalise=loan.normalise,
    )


def _usable_nodes(cluster: Cluster, spec: ScenarioSpec) -> list[Node]:
    """Nodes a run may ever use: the training pool, plus the inference pool when it lends."""
    pools = {"training", "inference"} if spec.loaning is not None else {"training"}
    return [n for n in cluster.nodes if n.pool in pools]


# --------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------
def fit_error(
    job: JobSpec, nodes: Iterable[Node], cluster: Cluster | None = None
) -> tuple[str, str] | None:
    """``(message, field)`` when ``job`` can never run on ``nodes``, else ``None``.

    The field is the :class:`JobSpec` field at fault: ``gpu_type`` when no node of ``cluster``
    (default: ``nodes``) has the job's type, ``elasticity.min_gpus`` / ``requested_gpus`` when
    its minimum exceeds the GPUs of the nodes it may use.
    """
    nodes = list(nodes)
    every = cluster.nodes if cluster is not None else nodes
    if job.gpu_type is not None and all(n.gpu_type != job.gpu_type for n in every):
        return f"job {job.id} needs GPU type {job.gpu_type!r}, which the cluster lacks", "gpu_type"
    if job.gpu_type is None:
        have, kind = sum(n.gpus for n in nodes), ""
    else:
        have = sum(n.gpus for n in nodes if n.gpu_type == job.gpu_type)
        kind = f" {job.gpu_type}"
    if job.min_gpus > have:
        where = "elasticity.min_gpus" if job.elasticity is not None else "requested_gpus"
        return (
            f"job {job.id} needs at least {job.min_gpus}{kind} GPUs but the cluster has {have}"
        ), where
    return None


@dataclass(frozen=True)
class _Origin:
    """Where a job came from, for error messages: a trace row or an inline list entry."""

    source: str | None
    row: int | None
    trace: bool  # trace rows name the trace's GPU column 'gpus', inline jobs the JobSpec field


def _check_jobs(
    jobs: Sequence[JobSpec], origins: Sequence[_Origin], cluster: Cluster, usable: list[Node]
) -> None:
    """Duplicate ids and never-fitting jobs are input errors naming the row and field."""
    seen: dict[str, _Origin] = {}
    for job, origin in zip(jobs, origins, strict=True):
        first = seen.get(job.id)
        if first is not None:
            at = f"{first.source}, row {first.row}" if first.row is not None else first.source
            raise InputError(
                f"duplicate job id {job.id!r} (first at {at})",
                source=origin.source,
                row=origin.row,
                field="id",
            )
        seen[job.id] = origin
        bad = fit_error(job, usable, cluster)
        if bad is None:
            continue
        msg, where = bad
        if origin.trace and where != "gpu_type":
            where = "gpus"
            msg += "; set workload.max_gpus to drop such jobs or use mapping 'afs' (which clamps)"
        raise InputError(msg, source=origin.source, row=origin.row, field=where)


def _check_budget(
    spec: ScenarioSpec,
    cluster: Cluster,
    jobs: Sequence[JobSpec],
    origins: Sequence[_Origin],
    usable: list[Node],
) -> None:
    """The work budget (``work_budget.py``); a refusal for too many candidate sizes names the
    job contributing most."""
    work = estimate_work(spec, cluster, jobs, usable)
    where = None
    if work.candidates_job is not None:
        job, origin = jobs[work.candidates_job], origins[work.candidates_job]
        field_name = (
            "elasticity.allowed"
            if job.elasticity is not None and job.elasticity.allowed
            else "elasticity.max_gpus"
        )
        if origin.trace:
            field_name = "workload.mapping"
        where = (origin.source, origin.row, field_name)
    check_budget(spec, work, job_field=where)


# --------------------------------------------------------------------------------------------
# Jobs
# --------------------------------------------------------------------------------------------
def _map_rows(
    spec: ScenarioSpec, rows: list[TraceJob], base: Path | None, capacity: int
) -> list[JobSpec]:
    """One JobSpec per row, in row order, by the workload's mapping."""
    workload = spec.workload
    if workload.source == "pollux":
        from .pollux_jobs import map_pollux

        return map_pollux(
            rows, resolve_trace_path("pollux/profiles", base), workload.mapping, capacity
        )
    if workload.mapping == "goodput":
        raise InputError(
            "mapping 'goodput' needs Pollux rows (source: pollux): other traces have no "
            "gradient statistics",
            field="workload.mapping",
        )
    if workload.mapping == "afs":
        from .mapping import map_afs
        from .zoo import load_afs_zoo

        return map_afs(rows, load_afs_zoo(), spec.seed, capacity)
    if workload.mapping == "aryl":
        from .inference import aryl_jobs

        mix = workload.aryl
        return aryl_jobs(
            rows,
            seed=spec.seed,
            elastic_fraction=mix.elastic_fraction,
            agnostic_fraction=mix.agnostic_fraction,
            checkpoint_fraction=mix.checkpoint_fraction,
            min_fraction=mix.min_fraction,
            min_elastic_gpus=mix.min_elastic_gpus,
            training_type=spec.cluster.gpu_type,
        )
    from .mapping import map_elastic, map_rigid

    # Gavel rows count work in their job type's steps: a missing profile is an error.
    gavel = workload.source == "gavel"
    profiles = _gavel_profiles(base, workload.throughputs) if gavel else None
    strict = "job_type" if gavel else None
    if workload.mapping == "elastic":
        return map_elastic(rows, profiles, cluster_gpus=capacity, require_profile=strict)
    return map_rigid(rows, profiles, require_profile=strict)


# --------------------------------------------------------------------------------------------
# Loan events
# --------------------------------------------------------------------------------------------
def _loan_events(
    spec: ScenarioSpec, cluster: Cluster, jobs: Sequence[JobSpec], base: Path | None
) -> tuple[InferenceLoad, list[Event]]:
    """The inference load and its loan / reclaim events (``InferenceLoad.for_fleet`` +
    ``loan_events``, as ``loaning_scenario`` composes them)."""
    from .inference import InferenceLoad, load_qps, loan_events

    loan = spec.loaning
    assert loan is not None
    try:
        path = resolve_trace_path(loan.qps, base) if loan.qps else None
        if path is not None:
            check_regular_file(path, "QPS series")
    except InputError as err:
        raise _secondary(err, "loaning.qps") from None
    try:
        series = load_qps(path, step_s=loan.qps_step_s, request_types=loan.request_types)
    except (ValueError, KeyError, TypeError) as err:
        raise InputError(
            f"not a QPS series ({err})", source=str(path or "embedded"), field="loaning.qps"
        ) from None
    except OSError as err:
        raise InputError(
            f"cannot read QPS series: {err.strerror or err}",
            source=str(path or "embedded"),
            field="loaning.qps",
        ) from None
    slots = next(n.gpus for n in cluster.nodes if n.pool == "inference")
    load = InferenceLoad.for_fleet(
        loan.servers,
        series=series,
        peak_busy=loan.peak_busy,
        base_busy=loan.base_busy,
        headroom=loan.headroom,
        period_s=loan.period_s,
        offset_s=loan.offset_s,
        gpus_per_server=slots,
    )
    last = max((j.submit_time for j in jobs), default=0.0)
    horizon = loan.horizon_s if loan.horizon_s is not None else last + 2 * loan.period_s
    return load, list(loan_events(load, 0.0, horizon, loan.step_s))


# --------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BuiltScenario:
    """What a scenario file describes, ready to simulate."""

    cluster: Cluster
    jobs: list[JobSpec]
    events: list[Event] = field(default_factory=list)
    load: InferenceLoad | None = None
    """The inference side's load model (loaning scenarios), for the both-pools usage."""


def build(spec: ScenarioSpec, base: Path | None) -> BuiltScenario:
    """Cluster, jobs and loan events for ``spec``; impossible input raises :class:`InputError`
    (see the module docstring)."""
    cluster = _cluster(spec)
    usable = _usable_nodes(cluster, spec)
    capacity = sum(n.gpus for n in usable)
    workload = spec.workload
    if workload.source == "inline":
        jobs = _inline_jobs(workload)
        origins = [_Origin(INLINE_SOURCE, i, trace=False) for i in range(1, len(jobs) + 1)]
    else:
        rows = load_rows(workload, base, spec.seed)
        if workload.max_gpus is not None:
            rows = [r for r in rows if r.gpus <= workload.max_gpus]
        # The testbed generator already starts at t = 0, where its inference series starts.
        rows = _scale_and_rebase(
            rows, workload.time_scale, rebase=workload.source != "aryl_testbed"
        )
        jobs = _map_rows(spec, rows, base, capacity)
        origins = [_Origin(r.source or f"trace job {r.id}", None, trace=True) for r in rows]
    if workload.heterogeneous_share > 0:
        from .inference import heterogeneous_jobs

        jobs = heterogeneous_jobs(jobs, workload.heterogeneous_share, spec.seed)
    _check_jobs(jobs, origins, cluster, usable)
    _check_budget(spec, cluster, jobs, origins, usable)
    if spec.loaning is None:
        return BuiltScenario(cluster, jobs)
    load, events = _loan_events(spec, cluster, jobs, base)
    # lend: false keeps the inference pool and its load (usage over both pools) without loans.
    return BuiltScenario(cluster, jobs, events if spec.loaning.lend else [], load)


def build_scenario(spec: ScenarioSpec, base: Path | None) -> tuple[Cluster, list[JobSpec]]:
    """Cluster and jobs for ``spec`` (:func:`build` without the loan events)."""
    built = build(spec, base)
    return built.cluster, built.jobs
