"""Pollux workload rows -> jobs, as the Pollux simulator runs its baselines.

A Pollux workload row names a model (``application``), a GPU count and a **global** batch, but
no duration: a job ends after its model's epoch count (Pollux ``applications.py``:
bert 2, cifar10 100, ncf 10, imagenet 90, deepspeech2 80, yolov3 50 -- the length of the
shortest ``validation-<batch>.csv``). Each job here keeps its own batch and GPU count:

* **work** (:func:`pollux_steps`): optimizer steps at the row's global batch ``B``. Pollux
  advances a job's *progress* (scale-invariant iterations) by ``gain`` per step, with
  ``gain = (var + sqr) / (var / scale + sqr)``, ``scale = B / init_batch`` and the gradient
  statistics of the current epoch interpolated between the validated batches that bracket
  ``B``; epoch ``e`` ends at the smallest ``progress[e]`` over the validation files. So the
  steps are ``sum_e (P(e+1) - P(e)) / gain_e``, computed once per (model, B).
* **step time**: Pollux splits ``B`` over ``k`` replicas as ``update_local_bsz`` does
  (``local = ceil(B / k)``, accumulation steps when ``local`` exceeds the model's largest
  per-GPU batch, one step at least on a single GPU above the initial batch; ``atomic =
  ceil(local / (accum + 1))``, capped so the batch stays within the largest validated batch)
  and the step time is the fitted Pollux model
  (:func:`~gpuplan.scenarios.throughput_fit.predict_step_time`) on the packed placement
  (``ceil(k / 4)`` nodes), with ``spread_factor`` for one GPU per node.
* **mapping**: ``rigid`` (Pollux's Tiresias baseline) runs each job at ``num_replicas``;
  ``elastic`` (its Optimus baseline) lets it use ``1 .. B // min_local_bsz`` GPUs (ncf: 1),
  capped at the cluster, the batch staying ``B`` -- exactly ``get_optimus_job_info``.
  ``goodput`` (Pollux itself, :func:`goodput_job`) ignores the row's batch and GPU count:
  the job carries a :class:`~gpuplan.models.goodput.GoodputModel`, its work is the progress
  at its last epoch end (scale-invariant iterations) and it may use ``1 .. min(64,
  max_batch // min_local_bsz)`` GPUs (ncf: 1, at Pollux's fixed batch 32,768), so that the
  ``pollux`` policy picks its batch with its allocation.

Differences kept (``docs/results/fidelity.md``): the steps are counted at ``B`` for every
``k`` (Pollux counts them at the rounded batch ``k x atomic x (accum + 1)``, within a few
percent of ``B``), and the epoch ends are not rounded to whole seconds.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from gpuplan.models import Elasticity, InputError, JobSpec, ThroughputProfile
from gpuplan.models.goodput import GoodputModel

from . import fit_cache
from .input_files import MAX_TRACE_BYTES, read_text
from .throughput_fit import FitResult, fit_pollux_params, pollux_samples, predict_step_time
from .trace_job import TraceJob

__all__ = [
    "PolluxApp",
    "goodput_job",
    "goodput_model",
    "map_pollux",
    "pollux_app",
    "pollux_steps",
    "pollux_step_time",
]

NODE_GPUS = 4
"""GPUs per node of the Pollux testbed and simulator (g4dn.12xlarge, 4 x T4)."""
FIXED_BATCH = {"ncf": 32768}
"""Pollux's simulator pins NCF's global batch (``target_batch_size = 32768``) under Pollux."""
MAX_REPLICAS = 64
"""Pollux's simulator caps a job at 64 replicas ("simulator can't handle more")."""
MAX_LOCAL_BSZ = {"yolov3": 8}
"""Upstream ``APPLICATIONS`` overrides of the per-GPU batch ceiling (else placements' max)."""


@dataclass(frozen=True)
class PolluxApp:
    """What Pollux's ``Application`` derives from one profile folder."""

    name: str
    validation: dict[int, list[dict[str, float]]]  # global batch -> per-epoch rows
    init_batch: int
    max_batch: int
    min_local: int
    max_local: int
    epochs: int
    fit: FitResult


def _read_csv(path: Path) -> list[dict[str, float]]:
    text = read_text(path, "throughput table", limit=MAX_TRACE_BYTES, bom=True)
    with io.StringIO(text, newline="") as fh:
        rows = list(csv.DictReader(fh))
    out = []
    for i, r in enumerate(rows, start=1):
        try:
            out.append({k: float(v) for k, v in r.items()})
        except (TypeError, ValueError):
            raise InputError("not a number", source=str(path), row=i) from None
    if not out:
        raise InputError("no rows", source=str(path))
    return out


APP_VERSION = 1
"""Version of :func:`_build_app`'s parse, part of the on-disk cache key: bump it when the parse
or what :class:`PolluxApp` holds changes."""


@cache
def pollux_app(model_dir: Path) -> PolluxApp:
    """Parse a ``pollux/profiles/<model>`` folder and fit its step-time model, cached in this
    process and on disk across processes (:mod:`~gpuplan.scenarios.fit_cache`, keyed by the
    folder's table bytes: a hit neither reads the tables nor fits)."""
    files = {int(p.stem.split("-")[1]): p for p in model_dir.glob("validation-*.csv")}
    if not files:
        raise InputError("no validation-<batch>.csv files", source=str(model_dir))
    paths = [files[b] for b in sorted(files)]
    paths += [model_dir / "placements.csv", model_dir / "scalability.csv"]
    key = fit_cache.content_key("pollux-app", APP_VERSION, paths)
    if key is not None:
        app = _app_from_json(fit_cache.load(key), model_dir.name)
        if app is not None:
            return app
    app = _build_app(model_dir, files)
    if key is not None:
        fit_cache.store(key, _app_to_json(app))
    return app


def _build_app(model_dir: Path, files: dict[int, Path]) -> PolluxApp:
    validation = {b: _read_csv(files[b]) for b in sorted(files)}
    for b, rows in validation.items():
        missing = {"progress", "grad_sqr", "grad_var"} - rows[0].keys()
        if missing:
            raise InputError(
                f"missing column(s) {', '.join(sorted(missing))}",
                source=str(files[b]),
                field=sorted(missing)[0],
            )
    samples = pollux_samples(model_dir)
    placements = _read_csv(model_dir / "placements.csv")
    local = [int(r["local_bsz"]) for r in placements]
    return PolluxApp(
        name=model_dir.name,
        validation=validation,
        init_batch=min(validation),
        max_batch=max(validation),
        min_local=min(local),
        max_local=MAX_LOCAL_BSZ.get(model_dir.name, max(local)),
        epochs=min(len(rows) for rows in validation.values()),
        fit=fit_pollux_params(samples),
    )


def _app_to_json(app: PolluxApp) -> dict[str, Any]:
    return {
        "validation": [[b, rows] for b, rows in app.validation.items()],
        "ints": [app.init_batch, app.max_batch, app.min_local, app.max_local, app.epochs],
        "fit": fit_cache.fit_to_json(app.fit),
    }


def _app_from_json(data: Any, name: str) -> PolluxApp | None:
    """The app :func:`_app_to_json` stored, or None unless every value has its type."""
    try:
        fit = fit_cache.fit_from_json(data["fit"])
        ints = data["ints"]
        validation = {b: rows for b, rows in data["validation"]}
        ok = (
            fit is not None
            and len(ints) == 5
            and all(type(i) is int for i in ints)
            and validation
            and all(type(b) is int for b in validation)
            and all(
                isinstance(rows, list)
                and rows
                and all(
                    isinstance(r, dict) and all(type(v) is float for v in r.values()) for r in rows
                )
                for rows in validation.values()
            )
        )
    except (KeyError, TypeError, ValueError):
        return None
    if not ok or fit is None:
        return None
    return PolluxApp(name, validation, *ints, fit=fit)


def _interp(app: PolluxApp, batch: float, epoch: int, column: str) -> float:
    """``column`` at ``epoch``, linear in the batch between the bracketing validated batches."""
    sizes = list(app.validation)
    lower = max((b for b in sizes if b <= batch), default=sizes[0])
    upper = min((b for b in sizes if b >= batch), default=sizes[-1])
    lo, hi = app.validation[lower][epoch][column], app.validation[upper][epoch][column]
    if lower == upper:
        return lo
    return ((batch - lower) * hi + (upper - batch) * lo) / (upper - lower)


@cache
def pollux_steps(model_dir: Path, batch: int) -> float:
    """Optimizer steps at global ``batch`` until the model's last epoch (see module doc)."""
    app = pollux_app(model_dir)
    b = min(max(batch, app.init_batch), app.max_batch)
    scale = b / app.init_batch

    def progress(epoch: int) -> float:
        if epoch == 0:
            return 0.0
        return min(rows[epoch - 1]["progress"] for rows in app.validation.values())

    steps = 0.0
    for epoch in range(app.epochs):
        sqr = _interp(app, b, epoch, "grad_sqr")
        var = _interp(app, b, epoch, "grad_var")
        gain = (var + sqr) / (var / scale + sqr)
        steps += (progress(epoch + 1) - progress(epoch)) / gain
    return steps


def split_batch(app: PolluxApp, batch: int, gpus: int) -> tuple[int, int]:
    """``(atomic per-GPU batch, accumulation steps)`` as Pollux's ``update_local_bsz``."""
    local = math.ceil(batch / gpus - 1e-8)
    accum = math.ceil(local / app.max_local - 1e-8) - 1
    if gpus == 1 and batch > app.init_batch:
        accum = max(1, accum)
    atomic = math.ceil(local / (accum + 1) - 1e-8)
    atomic = min(atomic, int(app.max_batch / (gpus * (accum + 1))))
    return max(1, atomic), accum


def pollux_step_time(model_dir: Path, batch: int, gpus: int, nodes: int) -> float:
    """Seconds per optimizer step of a job with global ``batch`` on ``gpus`` over ``nodes``."""
    app = pollux_app(model_dir)
    atomic, accum = split_batch(app, batch, gpus)
    return predict_step_time(app.fit.params, gpus, nodes, atomic, accum)


@cache
def _profile(model_dir: Path, batch: int, max_gpus: int) -> ThroughputProfile:
    """Steps/s at global ``batch`` for 1..``max_gpus`` packed GPUs (+ spread factors)."""
    points = {
        k: 1.0 / pollux_step_time(model_dir, batch, k, -(-k // NODE_GPUS))
        for k in range(1, max_gpus + 1)
    }
    spread = {
        k: min(1.0, 1.0 / pollux_step_time(model_dir, batch, k, k) / points[k])
        for k in range(2, min(NODE_GPUS, max_gpus) + 1)
    }
    return ThroughputProfile(
        points=points,
        reference_gpu="t4",
        spread_factor=spread,
        source=f"Pollux {model_dir.name} fitted step time, global batch {batch}, steps/s",
    )


def _epoch_end(app: PolluxApp, epoch: int) -> float:
    """Progress at which ``epoch`` (1-based count of finished epochs) ends: the smallest over
    the validation files, as Pollux's ``get_progress``."""
    return min(rows[epoch - 1]["progress"] for rows in app.validation.values())


@cache
def goodput_model(model_dir: Path) -> GoodputModel:
    """The :class:`GoodputModel` of a Pollux profile folder (fitted step time, statistics)."""
    app = pollux_app(model_dir)
    batches = tuple(app.validation)
    return GoodputModel(
        perf=app.fit.params.as_tuple(),  # type: ignore[arg-type]
        init_batch=app.init_batch,
        max_batch=app.max_batch,
        min_local=app.min_local,
        max_local=app.max_local,
        batches=batches,
        grad_sqr=tuple(
            tuple(r["grad_sqr"] for r in app.validation[b][: app.epochs]) for b in batches
        ),
        grad_var=tuple(
            tuple(r["grad_var"] for r in app.validation[b][: app.epochs]) for b in batches
        ),
        epoch_ends=tuple(_epoch_end(app, e) for e in range(1, app.epochs + 1)),
        fixed_batch=FIXED_BATCH.get(app.name),
    )


def goodput_max_gpus(model_dir: Path) -> int:
    """Most GPUs Pollux lets the job use (``get_pollux_job_info``'s bound, before the
    policy's exploration limit)."""
    app = pollux_app(model_dir)
    if app.name in FIXED_BATCH:
        return 1
    return max(1, min(MAX_REPLICAS, app.max_batch // app.min_local))


@cache
def _goodput_profile(model_dir: Path, max_gpus: int) -> ThroughputProfile:
    """Progress/s at 1..``max_gpus`` packed GPUs at the goodput-best batch, with the first
    epoch's statistics at the initial batch: the engine's base rate, which the ``pollux``
    policy corrects per decision through the allocation's ``efficiency``."""
    import numpy as np

    model = goodput_model(model_dir)
    sqr, var = model.grad_stats(model.init_batch, 0)
    good, _, _ = model.optimize(0, np.arange(1, max_gpus + 1), sqr, var)
    if not all(g > 0 for g in good):
        raise InputError(
            f"no feasible batch for some GPU count up to {max_gpus}", source=str(model_dir)
        )
    return ThroughputProfile(
        points={k: float(g) for k, g in enumerate(good, start=1)},
        reference_gpu="t4",
        source=f"Pollux {model_dir.name} goodput at the best batch, epoch 0, progress/s",
    )


def goodput_job(row: TraceJob, model_dir: Path, cluster_gpus: int | None) -> JobSpec:
    """The job Pollux itself runs for ``row`` (mapping ``goodput``, see the module doc)."""
    upper = goodput_max_gpus(model_dir)
    if cluster_gpus is not None:
        upper = min(upper, cluster_gpus)
    model = goodput_model(model_dir)
    return JobSpec(
        id=row.id,
        user=row.user,
        submit_time=row.submit_time,
        requested_gpus=min(row.gpus, upper),
        elasticity=Elasticity(min_gpus=1, max_gpus=upper),
        total_iterations=model.work,
        model=row.model,
        throughput=_goodput_profile(model_dir, upper),
        goodput=model,
    )


def map_pollux(
    rows: Sequence[TraceJob],
    profiles_dir: Path,
    mapping: str = "rigid",
    cluster_gpus: int | None = None,
) -> list[JobSpec]:
    """Jobs for Pollux workload rows under ``mapping`` (``rigid``, ``elastic``, ``goodput``).

    Errors name the row's source and field: a missing model folder (``application``), a
    mapping Pollux rows cannot take (``workload.mapping``), a request above the cluster.
    """
    if mapping not in ("rigid", "elastic", "goodput"):
        raise InputError(
            f"Pollux workloads take mapping 'rigid', 'elastic' or 'goodput', not {mapping!r}",
            field="workload.mapping",
        )
    jobs = []
    for row in rows:
        if row.model is None or row.batch_size is None:
            raise InputError(
                "Pollux rows need application and batch_size",
                source=row.source,
                field="application",
            )
        model_dir = profiles_dir / row.model
        if not model_dir.is_dir():
            raise InputError(
                f"no Pollux profile for model {row.model!r}", source=row.source, field="application"
            )
        if mapping == "goodput":
            jobs.append(goodput_job(row, model_dir, cluster_gpus))
            continue
        app = pollux_app(model_dir)
        upper = row.gpus
        elasticity = None
        if mapping == "elastic":
            upper = 1 if app.name == "ncf" else max(1, row.batch_size // app.min_local)
            if cluster_gpus is not None:
                upper = min(upper, cluster_gpus)
            elasticity = Elasticity(min_gpus=1, max_gpus=upper)
        top = max(upper, row.gpus)
        jobs.append(
            JobSpec(
                id=row.id,
                user=row.user,
                submit_time=row.submit_time,
                requested_gpus=min(row.gpus, top) if elasticity is None else min(row.gpus, upper),
                elasticity=elasticity,
                total_iterations=pollux_steps(model_dir, row.batch_size),
                model=row.model,
                throughput=_profile(model_dir, row.batch_size, top),
            )
        )
    return jobs
