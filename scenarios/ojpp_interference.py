"""OJPP's runtime slowdown: the interference matrix plus the cost of memory collisions.

One model serves the simulator (:class:`OjppInterference`, an ``InterferenceModel``) and the
static evaluation of a plan (:func:`plan_slowdowns`, used for Table 5 and the figures), so both
charge the same thing. A worker sharing a GPU slows down by

    s = I-composition over its neighbours  +  kappa * P(overflow on its GPU)

* the first term is the matrix (measured, placeholder or AIP-predicted) under the instance's
  composition (additive, max or multiplicative; digest §2.4);
* the second is digest §7.1 #14's collision penalty, taken as an exact expectation rather than
  Monte-Carlo draws: each worker spikes independently with its ``p`` (Eq. 4's model), and when
  the basic parts plus the spiking variable parts exceed the GPU (``sum gamma + sum_spiking
  delta > 1``) the iteration costs ``kappa`` extra iterations (default 1: the overflowing
  iteration is redone after the allocator frees memory). Under Eq. (3) one spike always fits,
  so only collisions (two or more spikes) can overflow; the penalty is thus at most
  ``kappa * tau_k``. By default no random draw is needed for the rates, so a run's seed does
  not enter them; only a monitor's *observation* (:meth:`OjppInterference.observe`, what OJPAP
  reads) draws the collisions of a window from the seed. With ``draw_seed`` (a scenario's
  ``simulator.interference`` block, seeded by the run's seed) the rates charge *drawn*
  collisions instead: each co-located group (the set of jobs on one GPU) gets the overflow
  count of ``window`` iterations drawn from ``(seed, group)``, so equal seeds give identical
  runs and different seeds differ only through collisions.

A data-parallel job runs at its slowest worker (bulk-synchronous training): its slowdown is the
max over its GPUs, which is why the balance bound of Eq. (8) matters. The simulator applies the
same rule (it re-rates a job at its most slowed-down GPU).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence

from gpuplan.models import JobSpec
from gpuplan.models.ojpp import Composition, OjppInstance, compose_slowdown, counts_slowdown

__all__ = [
    "KAPPA",
    "WINDOW",
    "OjppInterference",
    "overflow_probability",
    "performance",
    "plan_slowdowns",
]

WINDOW = 100
"""Iterations a monitoring window samples for collisions (:meth:`OjppInterference.observe`)."""

KAPPA = 1.0
"""Extra iterations an overflowing (collided) iteration costs (inferred; the paper gives none)."""


def overflow_probability(members: Sequence[tuple[float, float, float]]) -> float:
    """P(sum gamma + sum of the spiking deltas > 1) for workers ``(gamma, delta, p)`` spiking
    independently; exact, by a distribution over the spiking total (rounded to 1e-9)."""
    base = sum(g for g, _d, _p in members)
    dist: dict[float, float] = {0.0: 1.0}
    for _g, d, p in members:
        nxt: dict[float, float] = {}
        for total, prob in dist.items():
            nxt[total] = nxt.get(total, 0.0) + prob * (1.0 - p)
            key = round(total + d, 9)
            nxt[key] = nxt.get(key, 0.0) + prob * p
        dist = nxt
    return sum(prob for total, prob in dist.items() if base + total > 1.0 + 1e-9)


class OjppInterference:
    """``InterferenceModel`` for the simulator: the fraction of solo speed a job keeps on one
    GPU is ``1 / (1 + s)`` with ``s`` as in the module docstring. Types are ``JobSpec.model``;
    a pair missing from ``matrix`` costs ``default_cross`` (``default_same`` within a type),
    the ojpp wrapper's conservative defaults. Jobs without a memory profile add no collision
    term (their memory is not modelled)."""

    def __init__(
        self,
        matrix: Mapping[str, Mapping[str, float]],
        composition: Composition = "additive",
        kappa: float = KAPPA,
        default_cross: float = 0.1,
        default_same: float = 0.2,
        draw_seed: int | None = None,
        window: int = WINDOW,
    ) -> None:
        if kappa < 0:
            raise ValueError(f"kappa = {kappa} is negative")
        if window < 1:
            raise ValueError(f"window = {window} must be at least 1")
        self.matrix = {a: dict(row) for a, row in matrix.items()}
        self.composition = composition
        self.kappa = kappa
        self.default_cross, self.default_same = default_cross, default_same
        self.draw_seed, self.window = draw_seed, window
        """``draw_seed`` None: the rates charge the expected collision penalty; else drawn."""

    def term(self, victim: str, aggressor: str) -> float:
        fallback = self.default_same if victim == aggressor else self.default_cross
        return self.matrix.get(victim, {}).get(aggressor, fallback)

    def slowdown(self, job: JobSpec, others: Sequence[JobSpec]) -> float:
        own = job.model or "unknown"
        s = compose_slowdown(
            (self.term(own, o.model or "unknown") for o in others), self.composition
        )
        members = [
            (j.memory.gamma, j.memory.delta, j.memory.p)
            for j in (job, *others)
            if j.memory is not None
        ]
        if self.kappa == 0:
            return s
        q = overflow_probability(members)
        if self.draw_seed is None or q <= 0:
            return s + self.kappa * q
        # One draw per co-located group, keyed by its members (not by call order), so every
        # worker of the group and every re-rating of it sees the same realised collisions.
        group = ",".join(sorted(j.id for j in (job, *others)))
        rng = random.Random(f"{self.draw_seed}:{group}")
        hits = sum(rng.random() < q for _ in range(self.window))
        return s + self.kappa * hits / self.window

    def factor(self, job: JobSpec, others: Sequence[JobSpec]) -> float:
        return 1.0 / (1.0 + self.slowdown(job, others))

    def observe(self, job: JobSpec, others: Sequence[JobSpec], rng: random.Random) -> float:
        """What a monitor measures over a window of ``WINDOW`` iterations (the simulator's
        ``ClusterView.interference``): the matrix term plus ``kappa`` times the fraction of
        those iterations that overflowed, each overflowing with the exact P(overflow). Its
        mean is :meth:`slowdown`; its noise is the collisions' own."""
        own = job.model or "unknown"
        s = compose_slowdown(
            (self.term(own, o.model or "unknown") for o in others), self.composition
        )
        members = [
            (j.memory.gamma, j.memory.delta, j.memory.p)
            for j in (job, *others)
            if j.memory is not None
        ]
        q = overflow_probability(members)
        hits = sum(rng.random() < q for _ in range(WINDOW)) if q > 0 else 0
        return s + self.kappa * hits / WINDOW


def plan_slowdowns(
    inst: OjppInstance,
    gpus: Sequence[Sequence[str]],
    matrix: Mapping[str, Mapping[str, float]] | None = None,
    kappa: float = KAPPA,
) -> dict[str, float]:
    """Realised slowdown of every job of a static plan (worker ids per GPU): the max over its
    GPUs of matrix slowdown plus collision penalty. ``matrix`` (by type) overrides the
    instance's, e.g. to score a plan made with a predicted matrix under the measured one."""
    jobs = {job.id: n for n, job in enumerate(inst.jobs)}
    if matrix is None:
        table = inst.matrix()
    else:
        table = [[matrix[a.type][b.type] for b in inst.jobs] for a in inst.jobs]
    out = {job.id: 0.0 for job in inst.jobs}
    for gpu in gpus:
        counts = Counter(jobs[w.rpartition("#")[0]] for w in gpu)
        members = [
            (inst.jobs[i].gamma, inst.jobs[i].delta, inst.jobs[i].p)
            for i, n in counts.items()
            for _ in range(n)
        ]
        penalty = kappa * overflow_probability(members) if len(members) > 1 else 0.0
        for i in counts:
            s = counts_slowdown(i, counts, table, inst.composition) + penalty
            job_id = inst.jobs[i].id
            out[job_id] = max(out[job_id], s)
    return out


def performance(slowdowns: Mapping[str, float], standalone: Mapping[str, float]) -> float:
    """Guaranteed performance (digest §7.1 #12): mean standalone time / mean co-located time,
    ``t'_i = t_i (1 + s_i)``."""
    t = sum(standalone[j] for j in slowdowns)
    t_shared = sum(standalone[j] * (1.0 + s) for j, s in slowdowns.items())
    return t / t_shared
