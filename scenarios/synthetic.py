"""Seeded synthetic workloads: Poisson arrivals, a GPU-size mix, heavy-tailed durations.

For experiments that need a controlled load (a sweep of arrival rates, a size mix the real
traces lack) rather than a replay. Durations are lognormal because production DL traces
(Philly, AFS App. F Fig. 14; Helios) are heavy-tailed: most jobs are short, a few run for days,
and that tail is exactly what separates length-aware from length-unaware policies. The output is
:class:`TraceJob` rows, so any mapping (rigid, AFS, elastic) applies to it as to a real trace.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from gpuplan.models.errors import InputError

from .mapping import afs_candidates
from .trace_job import TraceJob
from .zoo import ZooModel

__all__ = ["synthetic_jobs"]

_SOURCE = "synthetic_jobs"
_MIN_DURATION_S = 1e-3


def _fail(param: str, message: str) -> InputError:
    return InputError(message, source=_SOURCE, field=param)


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _positive_finite(value: object, param: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise _fail(param, f"must be a number, got {value!r}")
    out = float(value)  # type: ignore[arg-type]
    if not (math.isfinite(out) and out > 0):
        raise _fail(param, f"must be a finite number > 0, got {value!r}")
    return out


def _size_mix(size_mix: Mapping[int, float]) -> tuple[list[int], np.ndarray]:
    if not isinstance(size_mix, Mapping) or not size_mix:
        raise _fail("size_mix", "must be a non-empty mapping {GPU count: weight}")
    sizes, weights = [], []
    for size, weight in sorted(size_mix.items()):
        if not _is_int(size) or size < 1:
            raise _fail("size_mix", f"GPU count {size!r} must be an integer >= 1")
        if isinstance(weight, bool) or not isinstance(weight, int | float | np.number):
            raise _fail("size_mix", f"weight of {size} GPUs must be a number, got {weight!r}")
        w = float(weight)
        if not (math.isfinite(w) and w >= 0):
            raise _fail("size_mix", f"weight of {size} GPUs must be finite and >= 0, got {w!r}")
        sizes.append(int(size))
        weights.append(w)
    total = sum(weights)
    if total <= 0:
        raise _fail("size_mix", "weights must not all be zero")
    return sizes, np.asarray(weights) / total


def synthetic_jobs(
    n: int,
    arrival_rate_per_h: float,
    size_mix: Mapping[int, float],
    mean_duration_s: float,
    seed: int,
    zoo: Mapping[str, ZooModel] | None = None,
    *,
    duration_sigma: float = 1.5,
) -> list[TraceJob]:
    """``n`` jobs, arrivals a Poisson process of ``arrival_rate_per_h`` jobs per hour from t=0.

    * sizes drawn from ``size_mix`` (``{GPU count: weight}``, weights normalised);
    * durations (seconds at the drawn size) lognormal with mean ``mean_duration_s`` and log-space
      standard deviation ``duration_sigma`` (1.5: median ~ 0.32 x mean, a Philly-like tail),
      floored at 1 ms so a draw can never underflow to a zero duration;
    * with ``zoo``, each job also gets a model (uniform among the zoo models that scale to its
      size, the AFS rule of :func:`~gpuplan.scenarios.mapping.afs_candidates`) and that model's
      batch size, so a rigid mapping can use the model's curve.

    The draws come from ``numpy.random.default_rng(seed)`` in a fixed order (arrivals, sizes,
    durations, then models), so the same arguments always give the same jobs and adding a zoo
    does not change arrivals, sizes or durations.
    """
    if not _is_int(n) or n < 0:
        raise _fail("n", f"must be an integer >= 0, got {n!r}")
    rate = _positive_finite(arrival_rate_per_h, "arrival_rate_per_h")
    mean = _positive_finite(mean_duration_s, "mean_duration_s")
    sigma = _positive_finite(duration_sigma, "duration_sigma")
    if not _is_int(seed):
        raise _fail("seed", f"must be an integer, got {seed!r}")
    sizes, probs = _size_mix(size_mix)
    if zoo is not None and not zoo:
        raise _fail("zoo", "must not be empty when given")

    rng = np.random.default_rng(int(seed))
    times = np.cumsum(rng.exponential(3600.0 / rate, size=n))
    size_idx = rng.choice(len(sizes), size=n, p=probs)
    mu = math.log(mean) - sigma * sigma / 2.0  # E[lognormal(mu, sigma)] = exp(mu + sigma^2/2)
    durations = np.maximum(rng.lognormal(mu, sigma, size=n), _MIN_DURATION_S)

    width = len(str(max(n - 1, 0)))
    jobs: list[TraceJob] = []
    for i in range(n):
        gpus = sizes[int(size_idx[i])]
        model, batch = None, None
        if zoo is not None:
            candidates, _ = afs_candidates(zoo, gpus)
            chosen = candidates[int(rng.integers(len(candidates)))]
            model, batch = chosen.name, chosen.batch_size
        jobs.append(
            TraceJob(
                id=f"syn-{i:0{width}d}",
                submit_time=float(times[i]),
                gpus=gpus,
                duration=float(durations[i]),
                model=model,
                batch_size=batch,
                source=f"{_SOURCE}(seed={seed}) row {i}",
            )
        )
    return jobs
