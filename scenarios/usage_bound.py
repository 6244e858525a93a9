"""The highest GPU usage any schedule can reach over a window (Aryl Tab. 5 analysis).

Why: the Aryl results page measures usage from the first plan to the last submission. Under
linear scaling a job's GPU-time is the same at every size, so a scheduler cannot create work;
it can only do more of the submitted work *inside* the window. This bound says how much more
is possible at all, so a flat usage can be told apart from a scheduler that strands GPUs.

For a window ``[0, T]``, ``C`` GPUs and jobs j (arrival ``a_j``, GPU-time ``w_j``, at most
``g_j`` GPUs at once), the work done by ``T`` is at most, for every split point ``s``,

    sum_{a_j <= s} min(w_j, g_j (s - a_j))  +  C (T - s)

(what each job can have done by ``s`` running at its largest size from its arrival, plus the
whole cluster afterwards). The minimum over ``s`` is the bound; on each stretch between two
arrivals the expression is concave in ``s``, so the minimum lies at an arrival or at ``T``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuplan.models import InputError, JobSpec

__all__ = ["gpu_seconds", "window_usage_bound"]


def gpu_seconds(job: JobSpec) -> float:
    """GPU-time of ``job`` at its requested size (= at every size under linear scaling)."""
    rate = job.throughput.rate(job.requested_gpus)
    if rate <= 0:
        raise InputError(
            f"job {job.id}: zero throughput at {job.requested_gpus} GPUs", field="throughput"
        )
    return job.requested_gpus * job.work / rate


def window_usage_bound(
    jobs: Sequence[JobSpec], capacity: int, until: float, start: float = 0.0
) -> float:
    """Upper bound on (GPU-seconds done in ``[start, until]``) / (``capacity`` x window) for
    any schedule of ``jobs`` on ``capacity`` GPUs; a job may use up to its largest allowed
    count (``max_gpus`` if elastic, else its request) and none starts before its submission."""
    span = until - start
    if capacity <= 0 or span <= 0:
        raise InputError("need capacity > 0 and until > start", field="window")
    arr = np.asarray([max(j.submit_time, start) for j in jobs if j.submit_time <= until])
    if arr.size == 0:
        return 0.0
    kept = [j for j in jobs if j.submit_time <= until]
    work = np.asarray([gpu_seconds(j) for j in kept])
    size = np.asarray([float(max(j.allowed_counts())) for j in kept])
    best = float(np.minimum(work, size * (until - arr)).sum())  # s = until
    for s in np.unique(arr):
        m = arr <= s
        done = float(np.minimum(work[m], size[m] * (s - arr[m])).sum())
        best = min(best, done + capacity * (until - s))
    return best / (capacity * span)
