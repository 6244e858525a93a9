"""OJPP instances (paper 002, opportunistic job placement) and the model's arithmetic.

An instance is the ``ojpp`` file of ``gpuplan solve`` (shared/problems/README.md): jobs of
identical data-parallel workers with a compute share ``alpha`` and a memory profile
<gamma, delta, p>, the bounds (tau_max, theta_max, theta_balance) and an interference matrix by
job type. The two pieces of arithmetic every OJPP solver and checker needs live here, next to
the data, so they are written once:

* the collision probability of a set of independently spiking workers, Eq. (4):
  ``1 - P(no spike) - P(exactly one spike)``, kept as the pair (P0, P1) so that adding a worker
  costs O(1) (digest §2.3);
* the slowdown of a worker given the workers it shares its GPU with, under the three
  compositions of digest §2.4 (the paper leaves composition beyond pairs open).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import InputError

__all__ = [
    "OJPP_TOL",
    "Collision",
    "Composition",
    "OjppInstance",
    "OjppJob",
    "collision_probability",
    "compose_slowdown",
    "counts_slowdown",
    "load_ojpp",
]

OJPP_TOL = 1e-9
"""Absolute tolerance of every OJPP comparison (README: "Comparisons allow ... 1e-9")."""

MAX_WORKERS = 100_000
"""Workers per job accepted from a file (a bound on memory, not a modelling limit)."""

Composition = Literal["additive", "max", "multiplicative"]


class OjppJob(BaseModel):
    """One job: ``workers`` identical workers, each with compute ``alpha`` and memory
    <gamma, delta, p> (fractions of one GPU), of interference type ``type``."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    id: str = Field(min_length=1, max_length=200)
    workers: int = Field(ge=1, le=MAX_WORKERS)
    alpha: float = Field(ge=0, le=1)
    gamma: float = Field(ge=0, le=1)
    delta: float = Field(ge=0, le=1)
    p: float = Field(ge=0, le=1)
    type: str = Field(min_length=1, max_length=200)

    def worker_ids(self) -> list[str]:
        return [f"{self.id}#{j}" for j in range(self.workers)]


class OjppInstance(BaseModel):
    """A whole OJPP instance (see the module docstring); validated per the README."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    tau_max: float = Field(ge=0, le=1)
    theta_max: float = Field(ge=0)
    theta_balance: float = Field(ge=0)
    composition: Composition = "additive"
    jobs: tuple[OjppJob, ...]
    interference: dict[str, dict[str, float]]

    @model_validator(mode="after")
    def _check(self) -> OjppInstance:
        seen: set[str] = set()
        for job in self.jobs:
            if job.id in seen:
                raise ValueError(f"job id {job.id!r} appears twice")
            if "#" in job.id:
                raise ValueError(f"job id {job.id!r} contains '#' (worker ids are id#index)")
            seen.add(job.id)
        for a, row in self.interference.items():
            for b, value in row.items():
                if not (math.isfinite(value) and value >= 0):
                    raise ValueError(
                        f"interference[{a}][{b}] = {value!r} is not a finite number >= 0"
                    )
        types = sorted({job.type for job in self.jobs})
        for a in types:
            for b in types:
                if b not in self.interference.get(a, {}):
                    raise ValueError(
                        f"interference[{a}][{b}] is missing (every ordered pair "
                        "of job types present needs a value)"
                    )
        return self

    @property
    def total_workers(self) -> int:
        return sum(job.workers for job in self.jobs)

    def matrix(self) -> list[list[float]]:
        """``I[i][q]``: slowdown of a worker of job ``i`` from one worker of job ``q``."""
        return [[self.interference[a.type][b.type] for b in self.jobs] for a in self.jobs]


def load_ojpp(data: Any, source: str) -> OjppInstance:
    """An instance from parsed JSON, every rejection as one :class:`InputError` naming the
    field (``jobs.1.p``, ``interference``)."""
    if not isinstance(data, dict):
        raise InputError("an OJPP instance is a JSON object", source=source)
    try:
        return OjppInstance.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(x) for x in first.get("loc", ())) or None
        msg = " ".join(str(first.get("msg", err)).split())[:300]
        msg = msg.removeprefix("Value error, ")
        if loc is None:  # a whole-instance rule: name the part it is about
            loc = "interference" if msg.startswith("interference") else "jobs"
        raise InputError(msg, source=source, field=loc) from None


# ------------------------------------------------------------------------------ collision


@dataclass(frozen=True, slots=True)
class Collision:
    """(P0, P1): probabilities that no worker / exactly one worker of a set spikes.

    ``add(p)`` is the O(1) update when a worker with spike probability ``p`` joins;
    ``tau`` is Eq. (4), the probability that two or more spike at once."""

    p0: float = 1.0
    p1: float = 0.0

    def add(self, p: float, count: int = 1) -> Collision:
        p0, p1 = self.p0, self.p1
        for _ in range(count):
            p0, p1 = p0 * (1.0 - p), p1 * (1.0 - p) + p0 * p
        return Collision(p0, p1)

    @property
    def tau(self) -> float:
        return max(0.0, 1.0 - self.p0 - self.p1)


def collision_probability(ps: Iterable[float]) -> float:
    """Eq. (4) for workers spiking independently with probabilities ``ps``."""
    state = Collision()
    for p in ps:
        state = state.add(p)
    return state.tau


# ---------------------------------------------------------------------------- interference


def compose_slowdown(terms: Iterable[float], composition: Composition) -> float:
    """A worker's slowdown from the per-neighbour terms ``I[a][type(u)]`` (one per other worker
    on its GPU): their sum, their max, or ``prod(1 + t) - 1``; 0 with no neighbour."""
    values = list(terms)
    if not values:
        return 0.0
    if composition == "additive":
        return math.fsum(values)
    if composition == "max":
        return max(values)
    out = 1.0
    for t in values:
        out *= 1.0 + t
    return out - 1.0


def counts_slowdown(
    victim: int, counts: Mapping[int, int], matrix: list[list[float]], composition: Composition
) -> float:
    """Slowdown of one worker of job ``victim`` on a GPU holding ``counts[q]`` workers of each
    job ``q`` (the victim's own worker included in ``counts[victim]``)."""
    row = matrix[victim]
    if composition == "additive":
        return math.fsum(row[q] * (n - (q == victim)) for q, n in counts.items())
    if composition == "max":
        return max((row[q] for q, n in counts.items() if n - (q == victim) > 0), default=0.0)
    out = 1.0
    for q, n in counts.items():
        out *= (1.0 + row[q]) ** (n - (q == victim))
    return out - 1.0
