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

from ..policy import Shares

_GPUS = attrgetter("gpus")


def fifo_shares(view: ClusterView, stats: list[SolverStats], *, backfill: bool) -> Shares:
    # Every running job keeps its GPUs: built at C speed (zip/map), as this runs every event
    # over every running job.
    running = view.running
    shares: Shares = dict(zip(running.keys(), map(_GPUS, running.values()), strict=True))
    free = view.capacity - sum(shares.values())
    if free <= 0:
        return shares
    for job_id, job in view.pending.items():
        need = job.spec.requested_gpus
        if need <= free:
            shares[job_id] = need
            free -= need
            if free == 0:
                break
        elif not backfill:
            break
    return shares


def fifo_strict(view: ClusterView, stats: list[SolverStats]) -> Shares:
    """FIFO without backfill."""
    return fifo_shares(view, stats, backfill=False)


def fifo_backfill(view: ClusterView, stats: list[SolverStats]) -> Shares:
    """FIFO with (reservation-free) backfill."""
    return fifo_shares(view, stats, backfill=True)
