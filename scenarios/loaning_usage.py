"""What a capacity-loaning run measures (Aryl Tab. 5, Fig. 7): GPU usage per pool, raw
and normalised, jobs that mixed GPU types, and the run's
:class:`~gpuplan.models.records.LoaningMetrics`.

* :class:`PoolUsage` (a plan hook) measures GPU usage of the training pool, of the loaned
  servers and of both pools including the inference side's own busy GPUs;
* :func:`raw_overall` counts the same usage in physical GPUs (a normalised loaned slot is
  ``per_slot`` T4);
* :class:`MixedCounter` (a plan hook) collects jobs that ran on more than one GPU type at once;
* :func:`loaning_metrics` reduces them, the preemption ratio and the reclaim log of one run to a
  :class:`~gpuplan.models.records.LoaningMetrics`.

Kept apart from :mod:`.inference` (which makes the scenario: load, loan events, cluster, job
mix) because it only observes a run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from gpuplan.models import AllocationPlan, Cluster, ClusterView, JobSpec, LoanOffer, RunResult
from gpuplan.models.records import LoaningMetrics
from gpuplan.solver_core.policies.aryl.reclaim import ReclaimOutcome, reclaim_metrics

if TYPE_CHECKING:
    from .inference import InferenceLoad

__all__ = [
    "RAW_PER_SLOT",
    "MixedCounter",
    "PoolUsage",
    "loaning_metrics",
    "preemption_ratio",
    "raw_overall",
]


class PoolUsage:
    """Plan hook integrating GPU usage per pool (exact: allocations and usable nodes only
    change at decisions, and every event batch ends with one).

    * ``training`` = GPU-seconds of jobs on training servers / training GPU-seconds;
    * ``loaned`` = GPU-seconds of jobs on loaned servers / loaned GPU-seconds (Fig. 7);
    * ``overall`` = (all job GPU-seconds + the inference side's busy GPU-seconds) / (every GPU
      of both pools x time) -- Tab. 5's "overall", with inference busy = its load without
      headroom. In a normalised cluster these are V100-equivalent GPUs.

    ``chain`` is called after recording, so this can wrap a test's capacity checker.
    """

    def __init__(
        self,
        cluster: Cluster,
        load: InferenceLoad | None = None,
        chain: Callable[[ClusterView, AllocationPlan], None] | None = None,
        until: float | None = None,
    ) -> None:
        self.cluster = cluster
        self.load = load
        self.chain = chain
        self.until = until
        """Stop integrating here (e.g. the last submission, so runs with different makespans
        are compared over the same window)."""
        self.pool = {n.name: n.pool for n in cluster.nodes}
        self.start: float | None = None
        self.now: float | None = None
        self._used = {"training": 0, "inference": 0}
        self._cap = {"training": 0, "inference": 0}
        self.used_s = {"training": 0.0, "inference": 0.0}
        self.cap_s = {"training": 0.0, "inference": 0.0}

    def _advance(self, t: float) -> None:
        if self.until is not None:
            t = min(t, self.until)
        if self.now is None:
            self.start = self.now = t
            return
        dt = t - self.now
        if dt > 0:
            for p in self._used:
                self.used_s[p] += self._used[p] * dt
                self.cap_s[p] += self._cap[p] * dt
            self.now = t

    def __call__(self, view: ClusterView, plan: AllocationPlan) -> None:
        self._advance(view.now)
        used = {"training": 0, "inference": 0}
        for alloc in plan.allocations.values():
            for node, gpus in alloc.placement.items():
                used[self.pool[node]] += len(gpus)
        cap = {"training": 0, "inference": 0}
        for node in view.nodes.values():
            cap[node.pool] += node.gpus
        self._used, self._cap = used, cap
        if self.chain is not None:
            self.chain(view, plan)

    def inference_busy_gpu_s(self, start: float, end: float, step_s: float = 60.0) -> float:
        """Integral of the inference side's busy GPUs over ``[start, end]`` (midpoint rule)."""
        if self.load is None or end <= start:
            return 0.0
        n = max(1, math.ceil((end - start) / step_s))
        h = (end - start) / n
        return sum(self.load.busy_gpus(start + (i + 0.5) * h) for i in range(n)) * h

    def summary(self, end: float | None = None) -> dict[str, float]:
        """Usage fractions over ``[first plan, end]`` (end defaults to the last plan)."""
        if end is not None:
            self._advance(end)
        start = self.start or 0.0
        stop = self.now or start
        span = stop - start
        total = sum(n.gpus for n in self.cluster.nodes) * span
        train_total = sum(n.gpus for n in self.cluster.nodes if n.pool == "training") * span
        jobs = self.used_s["training"] + self.used_s["inference"]
        busy = self.inference_busy_gpu_s(start, stop)
        return {
            "span_s": span,
            "training": self.used_s["training"] / train_total if train_total else 0.0,
            "loaned": (
                self.used_s["inference"] / self.cap_s["inference"]
                if self.cap_s["inference"]
                else 0.0
            ),
            "loaned_share": (
                self.cap_s["inference"] / (total - train_total) if total > train_total else 0.0
            ),
            "overall": (jobs + busy) / total if total else 0.0,
            "inference_busy": busy / (total - train_total) if total > train_total else 0.0,
        }


RAW_PER_SLOT = 4
"""Physical T4 GPUs behind one normalised loaned slot (8 T4 = 2 V100-equivalents)."""


def raw_overall(usage: PoolUsage, cluster: Cluster, per_slot: float = RAW_PER_SLOT) -> float:
    """Overall usage counting physical GPUs (a loaned slot busy = ``per_slot`` T4 busy), the
    way the paper's "overall" most likely counts (its 0.52 mixes 3,544 V100 and 4,160 T4).
    Over the same window as ``usage.summary()``."""
    span = usage.summary()["span_s"]
    train = sum(n.gpus for n in cluster.nodes if n.pool == "training") * span
    inf = sum(n.gpus for n in cluster.nodes if n.pool != "training") * span
    busy = usage.inference_busy_gpu_s(usage.start or 0.0, usage.now or 0.0)
    used = usage.used_s["training"] + per_slot * (usage.used_s["inference"] + busy)
    total = train + per_slot * inf
    return used / total if total else 0.0


class MixedCounter:
    """Plan hook: jobs that ever ran with workers on more than one GPU type (Advanced
    scenario: heterogeneous training across training and loaned servers)."""

    def __init__(self) -> None:
        self.jobs: set[str] = set()

    def __call__(self, view: ClusterView, plan: AllocationPlan) -> None:
        nodes = view.nodes
        for job_id, alloc in plan.allocations.items():
            if len({nodes[n].gpu_type for n in alloc.placement}) > 1:
                self.jobs.add(job_id)


def preemption_ratio(result: RunResult) -> float:
    """Tab. 5's preemption ratio: total preemptions / total job submissions."""
    jobs = result.jobs
    return sum(r.preemptions for r in jobs) / len(jobs) if jobs else 0.0


def loaning_metrics(
    usage: PoolUsage,
    result: RunResult,
    events: Sequence[object],
    outcomes: Sequence[ReclaimOutcome],
    *,
    cluster: Cluster | None = None,
    per_slot: float = RAW_PER_SLOT,
    bound: float | None = None,
    jobs: Sequence[JobSpec] = (),
    mixed: MixedCounter | None = None,
) -> LoaningMetrics:
    """One run's capacity-loaning metrics from its :class:`PoolUsage` hook, its result, the
    scenario's loan events and the reclaimer's outcome log (:func:`reclaim_metrics`).
    With ``cluster``: the raw overall usage (:func:`raw_overall`, ``per_slot`` physical GPUs a
    normalised slot); ``bound``: the window's usage bound; ``jobs`` / ``mixed``: how many were
    flagged heterogeneous and how many ran on mixed GPU types (:class:`MixedCounter`)."""
    use = usage.summary()
    rm = reclaim_metrics(outcomes)
    reclaimed = bool(outcomes)
    return LoaningMetrics(
        window_s=use["span_s"],
        usage_training=use["training"],
        usage_overall=use["overall"],
        usage_loaned=use["loaned"],
        loaned_share=use["loaned_share"],
        loaned_gpu_s=usage.used_s["inference"],
        preemption_ratio=preemption_ratio(result),
        loan_offers=sum(1 for e in events if isinstance(e, LoanOffer)),
        reclaims=int(rm["events"]),
        servers_reclaimed=int(rm["servers"]),
        reclaim_preemptions=int(rm["preemptions"]),
        collateral_damage=rm["mean_collateral_damage"] if reclaimed else None,
        met_by_flexible=rm["met_by_flexible"] if reclaimed else None,
        usage_overall_raw=raw_overall(usage, cluster, per_slot) if cluster is not None else None,
        usage_bound=bound,
        heterogeneous_jobs=sum(j.heterogeneous for j in jobs),
        mixed_jobs=len(mixed.jobs) if mixed is not None else 0,
    )
