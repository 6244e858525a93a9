"""How much co-located jobs slow each other down (the simulator's pluggable interference model).

When jobs share a GPU (``JobAllocation.share`` < 1), each runs at its share of the GPU times a
slowdown caused by the others on that GPU: memory-bandwidth and cache contention that shares
alone do not capture (OJPP, paper 002 §2.4). The simulator asks an :class:`InterferenceModel`
for each job's factor whenever the set of jobs on one of its GPUs changes; a job spanning
several GPUs runs at the pace of its most slowed-down GPU (bulk-synchronous training).

Two models live here: :class:`NoInterference` (the default: shares alone set the speed) and
:class:`PairwiseInterference`, a table of measured pairwise slowdowns by model name composed
multiplicatively, as the co-location table of Gavel's artifact gives them. The co-location
issue adds OJPP's learned predictor behind the same protocol, and
``measured_interference.py`` replays a table measured on real hardware.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from .job import JobSpec

__all__ = ["InterferenceModel", "NoInterference", "PairwiseInterference"]


class InterferenceModel(Protocol):
    """``factor(job, others)`` in (0, 1]: the fraction of its solo speed ``job`` keeps on one GPU
    shared with ``others`` (never empty when called)."""

    def factor(self, job: JobSpec, others: Sequence[JobSpec]) -> float: ...


class NoInterference:
    """Co-located jobs do not slow each other beyond their shares."""

    def factor(self, job: JobSpec, others: Sequence[JobSpec]) -> float:
        return 1.0


class PairwiseInterference:
    """Measured pairwise slowdowns: ``table[(a, b)]`` is the fraction of its solo speed a job of
    model ``a`` keeps next to one of model ``b`` (asymmetric; ``(a, a)`` for two workers of one
    model). Several neighbours compose multiplicatively; an unknown pair keeps ``default``."""

    def __init__(self, table: Mapping[tuple[str, str], float], default: float = 1.0) -> None:
        for pair, value in table.items():
            if not 0.0 < value <= 1.0:
                raise ValueError(f"interference {pair}: {value} is not in (0, 1]")
        if not 0.0 < default <= 1.0:
            raise ValueError(f"default interference {default} is not in (0, 1]")
        self.table = dict(table)
        self.default = default

    def factor(self, job: JobSpec, others: Sequence[JobSpec]) -> float:
        keep = 1.0
        for other in others:
            keep *= self.table.get((job.model or "", other.model or ""), self.default)
        return keep
