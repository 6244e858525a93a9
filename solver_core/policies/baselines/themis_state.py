"""Themis' per-job memory between decisions: lease books and the constants rho reads.

Themis decides at every lease expiry as well as at arrivals and completions: on the AFS
reproduction's 64-GPU Philly VCs that is 18-100 decisions per job (149,372 for 1,435 jobs on
0e4a51), and each one used to walk every running job's leases (sums, a filtered copy, a ladder
lookup) and, when few jobs wait, compute every running job's ``rho`` from scratch (the job's
spec properties, a bisect over the contention integral, three profile calls). This module
keeps what does not change between those decisions, so the values are the very same floats:

* :class:`LeaseBook`: a job's leases with their total and earliest expiry kept current, so a
  job whose leases neither expired nor disagree with the GPUs it holds is settled by two
  comparisons;
* :class:`JobFacts`: per job, its spec's constants (submit time, work, tie-break key, the
  useful ladder under the current capacity, the rates rho uses) and the contention integral up
  to its submit time, which no later decision can change once a later time point exists (the
  integral is append-only). Rebuilt when the engine installs a new spec object or the usable
  capacity changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpuplan.models import JobSpec

__all__ = ["JobFacts", "Lease", "LeaseBook"]


@dataclass(slots=True)
class Lease:
    """``gpus`` GPUs of one job, leased until ``expires``."""

    gpus: int
    expires: float


@dataclass(slots=True)
class LeaseBook:
    """One job's leases plus their ``total`` GPUs and ``first`` (earliest) expiry."""

    leases: list[Lease] = field(default_factory=list)
    total: int = 0
    first: float = float("inf")

    @classmethod
    def of(cls, leases: list[Lease]) -> LeaseBook:
        book = cls(leases)
        book.recount()
        return book

    def recount(self) -> None:
        """Recompute ``total`` and ``first`` after the lease list was edited."""
        self.total = sum(lease.gpus for lease in self.leases)
        self.first = min((lease.expires for lease in self.leases), default=float("inf"))

    def add(self, gpus: int, expires: float) -> None:
        """Append a lease (the newest expires last, so ``first`` only moves for an empty book)."""
        self.leases.append(Lease(gpus, expires))
        self.total += gpus
        if expires < self.first:
            self.first = expires


@dataclass(slots=True)
class JobFacts:
    """Constants of one job spec under one capacity, for the stage's per-decision loops."""

    spec: JobSpec
    capacity: int
    ladder: tuple[int, ...]
    key: float
    submit: float
    work: float
    rate: Callable[[int], float]
    rate_at: dict[int, float]
    """``rate(c)`` for every count ``c`` of the ladder (the ladder's own rates)."""
    peak: int
    """Top of the ladder (0 when empty)."""
    rate_peak: float
    area_since: float | None = None
    """Contention integral at ``since``; None until it is final (a later time point exists)."""
    since: float = 0.0
    """``max(submit, first time point)``: where the job's mean contention starts."""
    rate_one: float | None = None
    """``rate(1)``, read the first time rho needs it."""
