"""What the AFS share algorithms see of a job, and the order they scan jobs in.

Kept apart from the algorithms so that the fast AFS-L (:mod:`.afs_l_fast`), the literal
references (:mod:`.afs_reference`) and the stages (:mod:`.afs`) share one input type without
importing each other.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable, KeysView, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat

from gpuplan.models import ActiveJob, ClusterView
from gpuplan.models.state import remaining_work

__all__ = ["AfsJob", "ScanOrder", "follow_scan_keys", "remaining_all", "scan_order"]

_RESORT = 64
"""New jobs at one decision beyond which :class:`ScanOrder` re-sorts instead of inserting."""


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


class ScanOrder:
    """:func:`scan_order` of a view's active jobs, kept across decisions.

    Why: re-sorting every active job at every event is most of AFS's per-event cost with
    thousands of jobs. The key ``(submit_time, id)`` of a job never changes while it is
    active (the engine may swap in a new spec when it learns a job's throughput, never a new
    submit time), so the order only needs the jobs that arrived or left since the last
    decision: a set difference of ids, then one ``insort`` per new job (a re-sort when many
    arrive at once). The result equals ``scan_order(view.active())``; ties cannot occur (ids
    are unique).
    """

    __slots__ = ("_key_of", "_keys")

    def __init__(self) -> None:
        self._keys: list[tuple[float, str]] = []
        self._key_of: dict[str, tuple[float, str]] = {}

    @property
    def ids(self) -> KeysView[str]:
        """Ids of the jobs in the last order returned (do not modify)."""
        return self._key_of.keys()

    def jobs(self, view: ClusterView) -> list[ActiveJob]:
        """The view's running and pending jobs in scan order."""
        running, pending = view.running, view.pending
        self._keys = follow_scan_keys(self._keys, self._key_of, running, pending)
        get = running.get
        return [get(j) or pending[j] for _, j in self._keys]


def follow_scan_keys(
    keys: list[tuple[float, str]],
    key_of: dict[str, tuple[float, str]],
    running: Mapping[str, ActiveJob],
    pending: Mapping[str, ActiveJob],
) -> list[tuple[float, str]]:
    """``keys`` (sorted ``(submit_time, id)``, one per id of ``key_of``) brought up to the
    active jobs ``running | pending`` from the ids that came and went: leavers dropped, one
    ``insort`` per newcomer (a re-sort when more than ``_RESORT`` arrive). Updates ``key_of``
    in place and returns the keys list (a new list when jobs left). Shared by
    :class:`ScanOrder` and the AFS columns' rebuild (:mod:`.afs_columns`)."""
    ids_now = running.keys() | pending.keys()
    if ids_now == key_of.keys():
        return keys
    gone = key_of.keys() - ids_now
    if gone:
        keys = [k for k in keys if k[1] not in gone]
        for job_id in gone:
            del key_of[job_id]
    new = [(running.get(j) or pending[j]) for j in ids_now - key_of.keys()]
    added = [(job.spec.submit_time, job.spec.id) for job in new]
    if len(added) > _RESORT:
        keys.extend(added)
        keys.sort()
    else:
        for key in added:
            insort(keys, key)
    for key in added:
        key_of[key[1]] = key
    return keys


def remaining_all(jobs: Sequence[ActiveJob], now: float) -> list[float]:
    """``[job.remaining(now) for job in jobs]``: :func:`~gpuplan.models.state.remaining_work`
    mapped over the jobs (one C-level map, one call per job)."""
    return list(map(remaining_work, jobs, repeat(now, len(jobs))))
