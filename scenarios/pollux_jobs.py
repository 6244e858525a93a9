"""Pollux workload rows -> jobs, using the Pollux per-model profiles.

A Pollux workload row names a model (``application``), a GPU count and a global batch, but no
duration: a job ends when its model reaches the target epoch count (Pollux ``simulator.py``).
The profile folder's ``validation-<batch>.csv`` has one row per epoch, so its last row's
``iteration`` is the number of steps at that global batch to reach the target. The work is then
``steps x batch`` samples, expressed in the profile's iterations (one *local* batch of samples,
see :func:`gpuplan.scenarios.profiles.pollux_profile`): ``work = steps x batch / local_bsz``.
When no validation file exists for the row's batch, the nearest one is used and the steps are
scaled by the batch ratio (same epochs = same samples). Jobs are rigid at the row's count (the
"TunedJobs" size Pollux gives its non-adaptive baselines).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from gpuplan.models import InputError, JobSpec, ThroughputProfile

from .profiles import pollux_default_local_bsz, pollux_profile
from .trace_job import TraceJob


@cache
def _target_samples(model_dir: Path, batch: int) -> float:
    """Samples needed to reach the model's target epoch at global ``batch``."""
    files = {int(p.stem.split("-")[1]): p for p in model_dir.glob("validation-*.csv")}
    if not files:
        raise InputError("no validation-<batch>.csv files", source=str(model_dir))
    nearest = min(files, key=lambda b: (abs(b - batch), b))
    with files[nearest].open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or "iteration" not in rows[-1]:
        raise InputError("missing 'iteration' column or rows", source=str(files[nearest]),
                         field="iteration")
    try:
        steps = float(rows[-1]["iteration"])
    except ValueError:
        raise InputError("not a number", source=str(files[nearest]), row=len(rows),
                         field="iteration") from None
    return steps * nearest


@cache
def _profile(model_dir: Path) -> tuple[ThroughputProfile, int]:
    local = pollux_default_local_bsz(model_dir)
    return pollux_profile(model_dir, local), local


def map_pollux(rows: Sequence[TraceJob], profiles_dir: Path) -> list[JobSpec]:
    """Rigid jobs for Pollux workload rows; errors name the row's source and field."""
    jobs = []
    for row in rows:
        if row.model is None or row.batch_size is None:
            raise InputError("Pollux rows need application and batch_size", source=row.source,
                             field="application")
        model_dir = profiles_dir / row.model
        if not model_dir.is_dir():
            raise InputError(f"no Pollux profile for model {row.model!r}", source=row.source,
                             field="application")
        profile, local = _profile(model_dir)
        work = _target_samples(model_dir, row.batch_size) / local
        jobs.append(JobSpec(id=row.id, user=row.user, submit_time=row.submit_time,
                            requested_gpus=row.gpus, total_iterations=work, model=row.model,
                            throughput=profile))
    return jobs
