"""Throughput learning, policy side: "overestimate first, re-adjust later" (AFS §4.5).

In the simulator's learning mode (``LearningSpec``) a new job is believed to scale linearly, so a
share policy would happily hand it many GPUs. The paper limits that first share to the job's fair
share, ``floor(M / n)`` GPUs (at least one), until the job has measured its real curve; the next
decision after the measurement arrives re-adjusts it. :class:`FairShareUntilMeasured` wraps any
shares stage with that cap; GPUs the cap frees stay idle until the re-adjustment (the job's
measurement takes ``measure_s``), which is the price the paper accepts.
"""

from __future__ import annotations

from gpuplan.models import ClusterView, SolverStats

from ..placement.best_fit import best_fit_placement
from ..policy import Shares, SharesStage, StagedPolicy
from .afs import AfsL, AfsP


class FairShareUntilMeasured:
    """Cap unmeasured jobs' shares at ``max(1, M // n)`` (n = active jobs)."""

    def __init__(self, inner: SharesStage) -> None:
        self.inner = inner

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        shares = self.inner(view, stats)
        active = len(view.running) + len(view.pending)
        if not active:
            return shares
        fair = max(1, view.capacity // active)
        for job_id, gpus in shares.items():
            job = view.running.get(job_id) or view.pending.get(job_id)
            if job is not None and not job.measured and gpus > fair:
                allowed = [c for c in job.spec.allowed_counts() if c <= fair]
                shares[job_id] = max(allowed) if allowed else 0
        return shares

    def next_wakeup(self, view: ClusterView) -> float | None:
        inner = getattr(self.inner, "next_wakeup", None)
        return inner(view) if inner else None


def _learning(name: str, inner: SharesStage) -> StagedPolicy:
    stage = FairShareUntilMeasured(inner)
    return StagedPolicy(name, stage, best_fit_placement, stage.next_wakeup)


POLICIES = {
    "afs-l-learning": (
        lambda: _learning("afs-l-learning", AfsL()),
        "AFS-L with AFS §4.5 learning: unmeasured jobs capped at their fair share M/n",
    ),
    "afs-p-learning": (
        lambda seed=0: _learning("afs-p-learning", AfsP(seed=seed)),
        "AFS-P with AFS §4.5 learning: unmeasured jobs capped at their fair share M/n",
    ),
}
