"""Trace rows -> :class:`JobSpec`: deciding each job's throughput profile, work and elasticity.

A trace says when a job came, how many GPUs it asked for and how long it ran; it rarely says
what it trained. A *mapping* fills that in, and the choice changes results a lot, so each one is
a separate, seeded, deterministic function:

* :func:`map_rigid` — the job runs on exactly its requested GPUs for its trace duration; a
  known model gets its profile, otherwise linear scaling (the only assumption that reproduces
  the trace duration without inventing a model). Iteration columns count only with a profile.
  With ``require_profile`` (traces whose rows name an entry of a
  throughput table, e.g. Gavel's) a model missing from the table is an error instead: the
  row's work is counted in that model's iterations, so a guessed profile would silently give
  it a wrong duration.
* :func:`map_afs` — the AFS/CoDDL mapping (NSDI'21 §5.1, App. F; digest §3.2): a random model of
  the Table 4 zoo that scales to the requested size, elastic from 1 GPU to the model's
  Max #GPUs, with work set so that the job takes its trace duration at the requested size.
* :func:`map_elastic` — rigid profiles, but elastic in ``[1, factor x requested]``: for
  elastic policies on traces without model information.

Every bad row raises :class:`InputError` naming the row's ``source`` (file and row), never a
pydantic traceback.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

from pydantic import ValidationError

from gpuplan.models.errors import InputError
from gpuplan.models.job import Elasticity, JobSpec
from gpuplan.models.throughput import ThroughputProfile

from .trace_job import TraceJob
from .zoo import ZooModel

__all__ = ["afs_candidates", "map_afs", "map_elastic", "map_rigid", "row_work"]


def _where(row: TraceJob) -> str:
    return row.source or f"trace job {row.id}"


def _require_work(row: TraceJob) -> None:
    if row.duration is None and row.iterations is None:
        raise InputError(
            f"job {row.id} has neither a duration nor an iteration count",
            source=_where(row),
            field="duration",
        )


def _job(row: TraceJob, **fields: object) -> JobSpec:
    """Validated JobSpec; a rejection is reported against the trace row, not as a traceback."""
    try:
        return JobSpec(**fields)  # type: ignore[arg-type]
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(x) for x in first.get("loc", ())) or None
        raise InputError(first.get("msg", str(err)), source=_where(row), field=field) from None


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be an integer >= 1, got {value!r}", field=name)
    return value


def map_rigid(
    rows: Sequence[TraceJob],
    profiles: Mapping[str, ThroughputProfile] | None = None,
    *,
    require_profile: str | None = None,
) -> list[JobSpec]:
    """Rigid jobs at the trace's GPU count, each taking its trace duration there.

    Profile: ``profiles[row.model]`` when the row names a model of the table, else
    :meth:`ThroughputProfile.linear` (at a rigid size only ``rate(gpus)`` matters, and linear
    makes the work equal GPU-seconds).

    Work (:func:`row_work`): a row's ``iterations`` are counted in steps of *its* model, so
    they are used only when that model has a real profile here; otherwise the work is
    ``duration x rate(gpus)``, which reproduces the trace duration. A row with iterations but
    neither a profile nor a duration has no derivable work and is an :class:`InputError`
    naming the row (earlier versions ran such iterations at 1 iteration/s per GPU, silently
    turning a 164-s Tiresias job into a 606-s one).

    ``require_profile``: the trace column that names the model (e.g. ``"job_type"``); when
    set, a row whose model is missing from ``profiles`` raises :class:`InputError` naming the
    row and that column instead of falling back to linear scaling.
    """
    table = profiles or {}
    jobs = []
    for row in rows:
        _require_work(row)
        profile = table.get(row.model) if row.model else None
        if profile is None and require_profile is not None:
            known = ", ".join(sorted(table)[:5]) + (", ..." if len(table) > 5 else "")
            raise InputError(
                f"no throughput profile for model {row.model!r} (known: {known or 'none'})",
                source=_where(row),
                field=require_profile,
            )
        jobs.append(
            _job(
                row,
                id=row.id,
                user=row.user,
                submit_time=row.submit_time,
                requested_gpus=row.gpus,
                total_iterations=row_work(row, profile is not None),
                duration=row.duration,
                model=row.model,
                throughput=profile if profile is not None else ThroughputProfile.linear(),
            )
        )
    return jobs


def row_work(row: TraceJob, has_profile: bool) -> float | None:
    """The iterations a rigid job must run, or ``None`` to derive them from the duration.

    Iterations count steps of the row's model, so without that model's profile they say
    nothing about time; the duration does. Raises :class:`InputError` naming the row when
    neither can be used.
    """
    if has_profile and row.iterations is not None:
        return row.iterations
    if row.duration is not None:
        return None
    raise InputError(
        f"job {row.id}: its iterations count steps of model {row.model!r}, which has no "
        "throughput profile, and the row has no duration; the work cannot be derived",
        source=_where(row),
        field="iterations",
    )


def map_elastic(
    rows: Sequence[TraceJob],
    profiles: Mapping[str, ThroughputProfile] | None = None,
    *,
    cluster_gpus: int | None = None,
    max_factor: float = 2.0,
    require_profile: str | None = None,
) -> list[JobSpec]:
    """As :func:`map_rigid`, but each job may run on 1..``ceil(max_factor x requested)`` GPUs.

    The upper bound is capped at ``cluster_gpus`` (and the request with it) so every job can
    run; the work stays what the trace implies at the original request. With the linear
    fallback profile, growing is assumed to pay off linearly: use it to exercise elastic
    policies, not to measure how much elasticity is worth. ``require_profile`` as in
    :func:`map_rigid`.
    """
    total = None if cluster_gpus is None else _positive_int(cluster_gpus, "cluster_gpus")
    if not (isinstance(max_factor, int | float) and math.isfinite(max_factor) and max_factor >= 1):
        raise InputError(
            f"max_factor must be a finite number >= 1, got {max_factor!r}", field="max_factor"
        )
    jobs = []
    rigid_jobs = map_rigid(rows, profiles, require_profile=require_profile)
    for rigid, row in zip(rigid_jobs, rows, strict=True):
        upper = max(rigid.requested_gpus, math.ceil(rigid.requested_gpus * max_factor))
        if total is not None:
            upper = min(upper, total)
        fields = rigid.model_dump(exclude={"throughput", "elasticity"})
        requested = min(rigid.requested_gpus, upper)
        fields.update(
            throughput=rigid.throughput,
            requested_gpus=requested,
            elasticity=Elasticity(min_gpus=1, max_gpus=upper),
        )
        if requested != rigid.requested_gpus:
            fields["duration"] = None  # the trace duration was at the unclamped size
        jobs.append(_job(row, **fields))
    return jobs


def afs_candidates(zoo: Mapping[str, ZooModel], gpus: int) -> tuple[list[ZooModel], int]:
    """Zoo models a job requesting ``gpus`` may train, and the request it keeps.

    The AFS rule (App. F): models "whose training throughput scales up to the requested number
    of GPUs", i.e. ``max_gpus >= gpus``. The paper leaves requests above the largest Max #GPUs
    (52, Inception-v4) unspecified; here they are clamped to that largest max and drawn among the
    models that have it, the only ones that scale that far. Candidates are in name order so the
    draw does not depend on the zoo's dict order.
    """
    if not zoo:
        raise InputError("the model zoo is empty", field="zoo")
    models = sorted(zoo.values(), key=lambda m: m.name)
    eligible = [m for m in models if m.max_gpus >= gpus]
    if eligible:
        return eligible, gpus
    largest = max(m.max_gpus for m in models)
    return [m for m in models if m.max_gpus == largest], largest


def map_afs(
    rows: Sequence[TraceJob],
    zoo: Mapping[str, ZooModel],
    seed: int,
    cluster_gpus: int,
) -> list[JobSpec]:
    """The AFS trace -> job mapping (AFS NSDI'21 §5.1, App. F).

    For each row, in order, one seeded uniform draw among :func:`afs_candidates`; then

    * ``requested_gpus = min(request, largest zoo max if above it, cluster_gpus)``: a job must
      be able to run at its requested size, and the trace duration is reproduced there;
    * ``total_iterations = duration x P_model(requested_gpus)`` (the job takes its trace
      duration at the requested size). A row with iterations but no duration keeps them when
      it names no model or the drawn model is its own (they count that model's steps); a row
      naming another model has no derivable work: :class:`InputError` naming the row;
    * elasticity ``[1, min(model max_gpus, cluster_gpus)]``: CoDDL jobs are submitted as
      single-GPU models and scaled by the scheduler up to the peak; more GPUs would not help.

    Deterministic: the same rows, zoo and seed give identical jobs (``random.Random(seed)``,
    one draw per row, even when only one model is eligible, so rows never shift each other's
    draws).
    """
    total = _positive_int(cluster_gpus, "cluster_gpus")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(f"seed must be an integer, got {seed!r}", field="seed")
    rng = random.Random(seed)
    jobs = []
    for row in rows:
        _require_work(row)
        candidates, kept = afs_candidates(zoo, row.gpus)
        model = candidates[rng.randrange(len(candidates))]
        upper = min(model.max_gpus, total)
        requested = min(kept, upper)
        if row.duration is not None:
            work = row.duration * model.profile.rate(requested)
        else:
            # iterations count steps of the row's model: usable when the row names none (they
            # are then read in the drawn model's steps) or the draw is that model
            work = row_work(row, row.model is None or row.model == model.name)
        jobs.append(
            _job(
                row,
                id=row.id,
                user=row.user,
                submit_time=row.submit_time,
                requested_gpus=requested,
                elasticity=Elasticity(min_gpus=1, max_gpus=upper),
                total_iterations=work,
                duration=row.duration,
                model=model.name,
                throughput=model.profile,
            )
        )
    return jobs
