"""Max useful GPUs, and the rigid "max GPUs" variants of SRTF, SRSF and Tiresias-L (AFS Fig. 6).

AFS §5.2 / Fig. 6 asks what happens if the non-elastic baselines may "allocate enough GPUs for
peak throughput of each job" instead of the requested count (000 digest §2.13, "Max-GPU"
variants). Each job then runs rigidly at its *max useful* GPU count: the smallest allowed count
at which its throughput profile reaches its peak, capped by the job's ``max_gpus`` and by the
cluster. The paper reports this makes average JCT worse by up to 4.85x / 5.84x / 16.14x, because
a big rigid share lowers cluster efficiency; these policies let the project reproduce that.

The same notion caps every elastic baseline (Max-Min, Optimus, Themis, SRTF-E/SRSF-E):
:func:`~.ladders.useful_ladder` lists the counts worth stepping through and
:class:`~.ladders.Ladders` caches it per job. Both live in :mod:`.ladders` (with AFS's ladders)
and are re-exported here, where they used to be defined.
"""

from __future__ import annotations

import math

from gpuplan.models import ActiveJob, ClusterView, SolverStats

from ...helpers.ladders import Ladders, max_useful_gpus, useful_ladder
from ...placement.best_fit import best_fit_placement
from ...policy import Shares, StagedPolicy, Stateless
from ...registry import parameterless
from .tiresias import Entry, SizedQueue, TiresiasL

__all__ = [
    "POLICIES",
    "Ladders",
    "MaxGpusShortestFirst",
    "max_useful_gpus",
    "srsf_max_shares",
    "srtf_max_shares",
    "tiresias_l_max_shares",
    "useful_ladder",
]


class MaxGpusShortestFirst(Stateless):
    """SRTF / SRSF where every job runs rigidly at its max useful GPU count ``u``.

    Rank key: remaining time at ``u`` (SRTF), times ``u`` (SRSF) — the job's own speed at the
    size it will actually run. As for the requested-size SRTF, a waiting job's key is static,
    so the queue is kept sorted across decisions; its size is fixed when it is queued
    (:class:`~.tiresias.SizedQueue`), which lets the walk stop once nothing ahead fits.
    """

    def __init__(self, service: bool) -> None:
        self.service = service
        self.ladders = Ladders()
        self._limit = 0
        self._queue = SizedQueue(self._entry, self.size)

    def size(self, job: ActiveJob, limit: int) -> int:
        return self.ladders.max_useful(job, limit)

    def _key(self, job: ActiveJob, now: float) -> float:
        u = self.ladders.max_useful(job, self._limit)
        if u == 0:
            return math.inf
        left = job.remaining(now) / job.spec.throughput.rate(u)
        return left * u if self.service else left

    def _entry(self, job: ActiveJob, now: float) -> Entry:
        return (self._key(job, now), job.spec.submit_time, job.spec.id)

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        self._limit = capacity = view.capacity
        self._queue.sync(view)
        now = view.now
        running = [
            (self._entry(job, now), self.size(job, capacity)) for job in view.running.values()
        ]
        return self._queue.walk(running, capacity)


def srtf_max_shares() -> MaxGpusShortestFirst:
    """A fresh SRTF shares stage at max useful GPUs."""
    return MaxGpusShortestFirst(service=False)


def srsf_max_shares() -> MaxGpusShortestFirst:
    """A fresh SRSF shares stage at max useful GPUs."""
    return MaxGpusShortestFirst(service=True)


def tiresias_l_max_shares() -> TiresiasL:
    """A fresh Tiresias-L shares stage whose jobs run at their max useful GPUs."""
    return TiresiasL(size=Ladders().max_useful)


def _staged(name: str, stage: MaxGpusShortestFirst | TiresiasL) -> StagedPolicy:
    if isinstance(stage, TiresiasL):  # its queues and stints are its memory
        return StagedPolicy(name, stage, best_fit_placement, stage.next_wakeup, memory=stage)
    return StagedPolicy(name, stage, best_fit_placement)


POLICIES = [
    parameterless("srtf-max", lambda: _staged("srtf-max", srtf_max_shares())),
    parameterless("srsf-max", lambda: _staged("srsf-max", srsf_max_shares())),
    parameterless("tiresias-l-max", lambda: _staged("tiresias-l-max", tiresias_l_max_shares())),
]
