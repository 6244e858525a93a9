"""The restart gate's arithmetic: is a change to a running job worth what it costs?

A resize, migration or preemption of a running job stops it for a while (a checkpoint-restart
of a real PyTorch job takes 11-16 s; see docs/algorithms/restart-gate.md). Policies decide as if
those changes were free. The gate, applied by the engine after the policy (see
:mod:`gpuplan.executors.restart_gate`), carries a change out only when its predicted gain
exceeds its cost. This module holds the pure, side-effect-free pieces so they can be tested
(and property-tested) on their own:

* **cost** (:func:`change_cost`), in GPU-seconds: ``latency_s x GPUs idled``. During a restart
  the GPUs the job holds are reserved and do no work; that is the capacity the change destroys,
  and the unit in which it competes with everything else the cluster could do.
* **gain** (:func:`resize_gain`, :func:`start_gain`), in the same unit: the time the change
  saves a job times the GPUs that job holds (``saved_s x GPUs``). For a grow this makes the gate
  the same test as "the job finishes sooner even after paying the restart" (``saved_s >
  latency_s``), whatever the job's size.
* **decision** (:func:`carry_out`): ``cost <= 0 or gain > cost``. A free change is always
  carried out, so with zero costs the policy's plan passes unchanged (bit-identical results).
* **hysteresis** (:func:`within_dwell`): a job changed less than ``min_dwell_s`` ago is not
  changed again unless the change is free.
* **measured costs** (:class:`ChangeCosts`): per job and kind of change an EWMA of the
  latencies the executor measured (bounded by the kind's median), falling back to the kind's
  median and then to a prior.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

GATED_KINDS = ("grow", "shrink", "migrate", "preempt")
"""The kinds of change the gate weighs (a resize is a grow or a shrink by its GPU count)."""

MEASURED_KIND = {"grow": "resize", "shrink": "resize", "migrate": "migrate", "preempt": "preempt"}
"""Gate kind -> the kind executors measure latencies under (grows and shrinks both restart)."""

KIND_WINDOW = 64
"""Latest samples per kind whose median is the kind's cost."""

JOB_CAP = 3.0
"""A job's own cost estimate is at most this many times its kind's median."""

MAX_SAMPLE_S = 86400.0
"""A measured latency beyond a day is clamped to it."""

TIME_CAP_S = 1e12
"""Bound on a predicted time (a job at rate 0 would take for ever): keeps sums finite."""


def change_cost(latency_s: float, gpus_idled: int | float) -> float:
    """GPU-seconds a change destroys: ``latency_s x gpus_idled`` (negatives count as 0)."""
    return max(0.0, latency_s) * max(0.0, float(gpus_idled))


def finish_time(remaining: float, rate: float) -> float:
    """Seconds to do ``remaining`` iterations at ``rate`` (capped at :data:`TIME_CAP_S`)."""
    if remaining <= 0:
        return 0.0
    if rate <= 0:
        return TIME_CAP_S
    return min(TIME_CAP_S, remaining / rate)


def resize_gain(
    remaining: float, rate_before: float, rate_after: float, gpus_after: int | float
) -> float:
    """GPU-seconds a resize or move saves the job itself: ``(T_before - T_after) x gpus_after``
    with ``T = remaining / rate``. Negative for a change that slows the job (a shrink)."""
    saved = finish_time(remaining, rate_before) - finish_time(remaining, rate_after)
    return saved * max(0.0, float(gpus_after))


def lent_shrink_gain(
    remaining: float, rate_before: float, rate_after: float, gpus_after: int | float, lent_s: float
) -> float:
    """:func:`resize_gain` of a shrink whose GPUs go to jobs that hold them only ``lent_s``
    seconds (their predicted run): the job loses ``(rate_before - rate_after) x lent_s``
    iterations, i.e. that over ``rate_before`` seconds, not the whole rest at the smaller
    size, since the policy gives GPUs back when those jobs end. Never a larger loss than the
    permanent shrink's."""
    permanent = resize_gain(remaining, rate_before, rate_after, gpus_after)
    if not math.isfinite(lent_s) or rate_before <= 0:
        return permanent
    held = min(max(0.0, lent_s), finish_time(remaining, rate_after))
    delay = max(0.0, rate_before - rate_after) * held / rate_before
    return max(permanent, -delay * max(0.0, float(gpus_after)))


def start_gain(wait_s: float, gpus: int | float) -> float:
    """GPU-seconds gained by starting a waiting job ``wait_s`` earlier on ``gpus`` GPUs."""
    return max(0.0, min(TIME_CAP_S, wait_s)) * max(0.0, float(gpus))


def carry_out(gain: float, cost: float) -> bool:
    """Whether a change (or a group of changes) is carried out: free ones always, others only
    when their predicted gain exceeds their cost. Monotone: raising ``cost`` never turns a skip
    into a carry-out; never carries out a change whose gain is below its positive cost."""
    if cost <= 0:
        return True
    return not math.isnan(gain) and gain > cost


def within_dwell(now: float, last_change: float | None, min_dwell_s: float) -> bool:
    """True when the job was changed less than ``min_dwell_s`` before ``now`` (hysteresis)."""
    return last_change is not None and now - last_change < min_dwell_s


@dataclass(frozen=True, slots=True)
class GateConfig:
    """The gate's knobs (``engine.restart_gate`` in a scenario; defaults on real executors).

    ``priors``: seconds one change of each kind costs until the executor has measured it, keyed
    by gate kind (``grow``, ``shrink``, ...) or measured kind (``resize``, ``migrate``,
    ``preempt``); a kind missing here falls back to the executor's own figure.
    ``min_dwell_s``: hysteresis (see :func:`within_dwell`). ``ewma_alpha``: weight of the
    newest measured latency (see :class:`ChangeCosts`).
    """

    min_dwell_s: float = 10.0
    ewma_alpha: float = 0.3
    priors: Mapping[str, float] = field(default_factory=dict)


class ChangeCosts:
    """Measured change latencies (seconds from the executor's stop to the job's first progress
    again), per kind of change and per (job, kind).

    Per kind: the median of the latest :data:`KIND_WINDOW` samples. Per job: an EWMA of that
    job's own samples (restart costs drift, the newest figure should count most, and one
    sample is enough to replace the prior), capped at :data:`JOB_CAP` x its kind's median.
    Why both: jobs differ (a ViT-L with a 3.5 GB checkpoint restarts slower than a ResNet-50)
    and a job's own history predicts its next restart best. Why the median and the cap: the
    end point of each measurement is written by the job itself (its progress file's
    ``started``), and a hostile job owner could claim a huge restart cost to keep the gate
    from ever shrinking or preempting the job; the median ignores a minority of such
    samples, and the cap bounds what one job can claim for itself.
    """

    def __init__(self, alpha: float = 0.3) -> None:
        if not 0 < alpha <= 1:
            raise ValueError("alpha must be in (0, 1]")
        self.alpha = alpha
        self._by_kind: dict[str, deque[float]] = {}
        self._median: dict[str, float] = {}
        self._by_job: dict[tuple[str, str], float] = {}
        self.samples: dict[str, int] = {}

    def record(self, job_id: str, kind: str, seconds: float) -> None:
        """One measured latency of a ``kind`` change of ``job_id`` (clamped to [0, 1 day])."""
        if math.isnan(seconds):
            return
        seconds = min(max(0.0, seconds), MAX_SAMPLE_S)
        window = self._by_kind.setdefault(kind, deque(maxlen=KIND_WINDOW))
        window.append(seconds)
        self._median[kind] = statistics.median(window)
        key = (job_id, kind)
        old = self._by_job.get(key)
        self._by_job[key] = seconds if old is None else old + self.alpha * (seconds - old)
        self.samples[kind] = self.samples.get(kind, 0) + 1

    def forget(self, job_id: str) -> None:
        """Drop a finished job's own figures (its kinds' medians keep what it taught)."""
        for key in [k for k in self._by_job if k[0] == job_id]:
            del self._by_job[key]

    def estimate(self, job_id: str, kind: str, prior: float) -> float:
        """Expected latency of the next ``kind`` change of ``job_id``: its own EWMA (capped),
        else the kind's median, else ``prior``."""
        median = self._median.get(kind)
        own = self._by_job.get((job_id, kind))
        if own is not None:
            return own if median is None else min(own, JOB_CAP * median)
        return prior if median is None else median

    def summary(self) -> dict[str, dict[str, float]]:
        """Per kind: samples and current median (what the controller journals)."""
        return {
            k: {"samples": self.samples.get(k, 0), "median_s": round(v, 3)}
            for k, v in sorted(self._median.items())
        }

    def restore(self, summary: Mapping[str, Mapping[str, float]]) -> None:
        """Take per-kind medians from a :meth:`summary` (a restarted controller's memory);
        malformed entries are ignored."""
        for kind, row in summary.items():
            try:
                value = float(row["median_s"])
                count = int(row.get("samples", 0))
            except (KeyError, TypeError, ValueError):
                continue
            if math.isfinite(value) and 0 <= value <= MAX_SAMPLE_S:
                self._by_kind[str(kind)] = deque([value], maxlen=KIND_WINDOW)
                self._median[str(kind)] = value
                self.samples[str(kind)] = max(0, count)
