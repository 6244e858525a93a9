"""Scenario files -> (cluster, jobs).

``resolve_scenario`` accepts an embedded scenario name (``gpuplan scenarios`` lists them) or a
path to a YAML/JSON file; ``build_scenario`` loads the workload it names, applies filters,
time scaling and the job mapping, and checks every job can ever run on the cluster.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import yaml
from pydantic import ValidationError

from gpuplan.models import Cluster, InputError, JobSpec, ScenarioSpec, WorkloadSpec

from .trace_job import TraceJob
from .traces import resolve_trace_path

EMBEDDED_DIR = "data"


def embedded_scenarios() -> dict[str, Path]:
    """Scenario files shipped inside the package: name -> path."""
    folder = resources.files("gpuplan.scenarios").joinpath(EMBEDDED_DIR)
    found: dict[str, Path] = {}
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".scenario.yaml"):
            found[name.removesuffix(".scenario.yaml")] = Path(str(entry))
    return dict(sorted(found.items()))


def load_scenario_file(path: Path) -> ScenarioSpec:
    """Parse and validate one scenario file; errors name the file and the offending field."""
    try:
        text = path.read_text()
    except OSError as err:
        raise InputError(f"cannot read scenario file: {err.strerror}", source=str(path)) from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise InputError(f"not valid YAML/JSON: {err}", source=str(path)) from None
    if not isinstance(data, dict):
        raise InputError("a scenario file must hold a mapping", source=str(path))
    try:
        return ScenarioSpec.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(x) for x in first["loc"])
        raise InputError(first["msg"], source=str(path), field=field) from None


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


def _trace_path(workload: WorkloadSpec, base: Path) -> Path:
    if not workload.path:
        raise InputError(f"workload.path is required for source {workload.source!r}",
                         field="workload.path")
    return resolve_trace_path(workload.path, base)


def load_rows(workload: WorkloadSpec, base: Path, seed: int) -> list[TraceJob]:
    """Trace rows the workload names, windowed and capped."""
    src = workload.source
    window = {"start_s": workload.start_s, "end_s": workload.end_s, "max_jobs": workload.max_jobs}
    if src == "philly":
        from .philly import load_philly

        return load_philly(_trace_path(workload, base), vc=workload.vc, **window)
    if src == "itp":
        from .itp import load_itp

        return load_itp(_trace_path(workload, base), **window)
    if src == "itp_augmented":
        from .itp import load_itp_augmented

        return load_itp_augmented(_trace_path(workload, base), **window)
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
    if src == "synthetic":
        from .synthetic import synthetic_jobs

        missing = [f for f in ("jobs", "arrival_rate_per_h", "mean_duration_s")
                   if getattr(workload, f) is None]
        if missing:
            raise InputError(f"synthetic workloads need {', '.join(missing)}",
                             field=f"workload.{missing[0]}")
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
    kept = [r for r in rows if (lo is None or r.submit_time >= lo)
            and (hi is None or r.submit_time < hi)]
    return kept[: workload.max_jobs] if workload.max_jobs else kept


def _scale_and_rebase(rows: list[TraceJob], scale: float) -> list[TraceJob]:
    """Shift the first arrival to t=0 and multiply arrivals and work by ``scale`` (AFS §5.3
    runs traces at 1 % and 0.2 %)."""
    if not rows:
        return rows
    origin = min(r.submit_time for r in rows)
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
    for i, raw in enumerate(workload.inline_jobs or []):
        try:
            jobs.append(JobSpec.model_validate(raw))
        except ValidationError as err:
            first = err.errors()[0]
            field = ".".join(str(x) for x in first["loc"])
            raise InputError(first["msg"], source="workload.inline_jobs", row=i,
                             field=field) from None
    return jobs


def _gavel_profiles(base: Path) -> dict:
    from .profiles import gavel_profiles

    table = gavel_profiles(resolve_trace_path("gavel/simulation_throughputs.json", base))
    return {job_type: prof for (job_type, worker), prof in table.items() if worker == "v100"}


def build_scenario(spec: ScenarioSpec, base: Path) -> tuple[Cluster, list[JobSpec]]:
    """Cluster and jobs for ``spec``; every job is checked to fit the cluster."""
    cluster = spec.cluster.build()
    workload = spec.workload
    if workload.source == "inline":
        jobs = _inline_jobs(workload)
    else:
        rows = load_rows(workload, base, spec.seed)
        if workload.max_gpus is not None:
            rows = [r for r in rows if r.gpus <= workload.max_gpus]
        rows = _scale_and_rebase(rows, workload.time_scale)
        if workload.source == "pollux":
            from .pollux_jobs import map_pollux

            jobs = map_pollux(rows, resolve_trace_path("pollux/profiles", base))
        elif workload.mapping == "afs":
            from .mapping import map_afs
            from .zoo import load_afs_zoo

            jobs = map_afs(rows, load_afs_zoo(), spec.seed, cluster.total_gpus)
        else:
            from .mapping import map_rigid

            profiles = _gavel_profiles(base) if workload.source == "gavel" else None
            jobs = map_rigid(rows, profiles)
        if workload.mapping != "afs":
            by_id = {r.id: r for r in rows}
            for job in jobs:
                if job.min_gpus > cluster.total_gpus:
                    row = by_id.get(job.id)
                    raise InputError(
                        f"job {job.id} asks for {job.min_gpus} GPUs but the cluster has "
                        f"{cluster.total_gpus}; set workload.max_gpus to drop such jobs or use "
                        "mapping 'afs' (which clamps)",
                        source=row.source if row else None,
                        field="gpus",
                    )
    for job in jobs:
        if job.gpu_type is not None and all(n.gpu_type != job.gpu_type for n in cluster.nodes):
            raise InputError(f"job {job.id} needs GPU type {job.gpu_type!r}, which the cluster "
                             "lacks", field="gpu_type")
    return cluster, jobs
