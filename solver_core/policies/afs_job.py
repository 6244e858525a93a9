"""What the AFS share algorithms see of a job, and the order they scan jobs in.

Kept apart from the algorithms so that the fast AFS-L (:mod:`.afs_l_fast`), the literal
references (:mod:`.afs_reference`) and the stages (:mod:`.afs`) share one input type without
importing each other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuplan.models import ActiveJob

__all__ = ["AfsJob", "scan_order"]


@dataclass(frozen=True, slots=True)
class AfsJob:
    """One job as the share algorithms see it.

    ``counts`` is the job's *ladder*: the GPU counts it may climb through, ascending, already cut
    by the saturation guard (``rates`` strictly increase) and by the cluster size; ``rates[i]``
    is ``P(counts[i])``. An empty ladder means the job cannot run (its minimum does not fit).
    ``remaining`` is in iterations; only AFS-L reads it. Build ladders with
    :func:`~.ladders.build_ladder` (``plateau="stop"``).
    """

    id: str
    remaining: float
    counts: tuple[int, ...]
    rates: tuple[float, ...]


def scan_order(jobs: Iterable[ActiveJob]) -> list[ActiveJob]:
    """Jobs in TOPPRIORITY's fixed scan order: ``(submit_time, id)``.

    Arrival order is what the paper's "any job in J" most plausibly means for an online
    scheduler, and the id breaks ties so the order never depends on dict iteration.
    """
    return sorted(jobs, key=lambda j: (j.spec.submit_time, j.spec.id))
