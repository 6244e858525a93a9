"""FIFO for rigid gang-scheduled jobs, with and without backfill (the Slurm default).

Running jobs are never preempted. Pending jobs are considered in queue order; each gets exactly
its requested GPUs or nothing (gang). Without backfill the first job that does not fit blocks
everyone behind it (strict FIFO); with backfill later jobs that fit in the leftover GPUs start.
This is Slurm's "backfill" without reservations: it can delay the head job (documented in
docs/algorithms/baselines-rigid.md).
"""

from __future__ import annotations

from operator import attrgetter

from gpuplan.models import ClusterView, SolverStats

from ...helpers.size_buckets import SizeBuckets
from ...placement.best_fit import best_fit_placement, place_new_best_fit
from ...policy import Delta, PlacementStage, Shares, StagedPolicy, Stateless
from ...registry import parameterless

_GPUS = attrgetter("gpus")


def fifo_shares(
    view: ClusterView,
    stats: list[SolverStats],
    *,
    backfill: bool,
    buckets: SizeBuckets | None = None,
) -> Shares:
    # Every running job keeps its GPUs: built at C speed (zip/map), as this runs every event
    # over every running job.
    running = view.running
    shares: Shares = dict(zip(running.keys(), map(_GPUS, running.values()), strict=True))
    free = view.capacity - sum(shares.values())
    shares.update(fifo_starts(view, free, backfill, buckets))
    return shares


def fifo_starts(
    view: ClusterView, free: int, backfill: bool, buckets: SizeBuckets | None = None
) -> list[tuple[str, int]]:
    """The pending jobs FIFO starts with ``free`` GPUs left, in queue order: strict FIFO
    stops at the first job that does not fit, backfill takes every job that fits what is
    left. With ``buckets`` (backfill) the same jobs in the same order from the per-size
    buckets, at O(sizes) per start instead of a walk over the whole queue."""
    if backfill and buckets is not None:
        buckets.sync(view)  # at every decision, even with no GPU free: it follows each view
        return buckets.backfill(free)
    starts: list[tuple[str, int]] = []
    if free <= 0:
        return starts
    for job_id, job in view.pending.items():
        need = job.spec.requested_gpus
        if need <= free:
            starts.append((job_id, need))
            free -= need
            if free == 0:
                break
        elif not backfill:
            break
    return starts


class Fifo(Stateless):
    """FIFO's allocation stage (a :class:`~..policy.DeltaStage`): as a full decision, every
    running job keeps its GPUs and queued jobs start in order while they fit; as a delta, only
    the jobs it starts, placed with the view's free-count index. Without shared GPUs the
    index's free total is ``capacity`` minus the running jobs' GPUs, the full stage's budget,
    so both answers start the same jobs on the same GPUs. With backfill the pending jobs
    are kept per requested size across decisions (:class:`SizeBuckets`, a cache rebuilt
    from the view when it cannot follow the change set), so a decision does not walk the
    whole queue."""

    __slots__ = ("_buckets", "backfill")

    def __init__(self, backfill: bool) -> None:
        self.backfill = backfill
        self._buckets = SizeBuckets() if backfill else None

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        return fifo_shares(view, stats, backfill=self.backfill, buckets=self._buckets)

    def delta(self, view: ClusterView, placement: PlacementStage) -> Delta | None:
        index = view.free_index
        if (
            placement is not best_fit_placement
            or index is None
            or view.shared
            or view.shaped
            or type(self).__call__ is not Fifo.__call__
        ):  # a subclass decides itself
            return None
        wants = fifo_starts(view, index.total, self.backfill, self._buckets)
        if not wants:
            return Delta(starts={})
        starts = place_new_best_fit(view, wants)
        return None if starts is None else Delta(starts=starts)


fifo_strict = Fifo(backfill=False)
"""FIFO without backfill."""
fifo_backfill = Fifo(backfill=True)
"""FIFO with (reservation-free) backfill (the registry builds a fresh one per policy: its
buckets follow one engine's change set)."""


POLICIES = [
    parameterless("fifo", lambda: StagedPolicy("fifo", fifo_strict, best_fit_placement)),
    parameterless(
        "fifo-backfill",
        lambda: StagedPolicy("fifo-backfill", Fifo(backfill=True), best_fit_placement),
    ),
]
