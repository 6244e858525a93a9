"""Pollux (Qiao et al., OSDI'21): co-adaptive allocation and batch size, maximising goodput.

Every round (``interval_s``, 60 s as Pollux's simulator) the policy re-optimises, for every
active job at once, its GPU count and -- through the job's goodput model
(:mod:`gpuplan.models.goodput`) -- its batch size and gradient accumulation:

1. **speedups** (§4.2, Eq. 7): ``SPEEDUP_j(k) = GOODPUT_j(k) / GOODPUT_j(fair)``, each goodput at
   the batch that maximises it (Eq. 6) with ``k`` GPUs packed on ``ceil(k / 4)`` nodes, scored
   with the statistics of the job's *current* batch and epoch (what Pollux's agent reports).
   ``fair`` is Pollux's base configuration: ``ceil(G / J)`` replicas on one node (G GPUs, J
   jobs). A job without a goodput model uses its throughput profile (fixed batch).
2. **restart penalty** (§4.2, Eq. 9): a job whose allocation would change scores its speedup times
   ``max(age - restarts * delay, 0) / (age + delay)`` (``delay`` = ``restart_penalty_s``).
3. **fitness** (Eq. 8): the generalised mean with exponent ``p`` (-1, as upstream) of the
   scaled speedups ``SPEEDUP * N / G + 1e-3`` (Pollux's dominant-share scaling and epsilon; a
   job without GPUs scores 1e-3, so fairness first spreads GPUs over jobs).
4. **exploration** (Pollux's simulator): a job may use at most twice the most GPUs it has
   held so far (1 before its first allocation), and at most its ``Elasticity.max_gpus``.

**Optimiser.** Pollux searches allocation matrices with a genetic algorithm. Here the counts
are chosen *exactly* under the packed-node assumption: the fitness is a sum of per-job terms
(``(s_j + eps) ** p`` for ``p != 0``, ``log`` for ``p = 0``), so a knapsack dynamic programme
over the GPU budget finds the optimum in O(J x G x K) (no randomness, no wall-clock limit).
Placement is best fit (jobs keep their GPUs when their count is unchanged, the rest are
packed). After placement each job's batch is chosen for its *actual* node count and the
engine is told the job's goodput through the allocation's ``efficiency`` (true goodput at the
chosen batch and current epoch, over the engine's base rate): a batch change alone is a
``reshare`` (no restart), as in Pollux where the batch adapts without a checkpoint-restart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import Field

from gpuplan.models import (
    ActiveJob,
    ClusterView,
    JobAllocation,
    JobSpec,
    SolverStats,
    placement_rate,
)
from gpuplan.models.bounds import MAX_SPEED
from gpuplan.models.goodput import GoodputModel

from ...params import Params
from ...placement.best_fit import best_fit_placement
from ...policy import Decision, PolicyBase
from ...registry import PolicyDef

__all__ = ["PolluxParams", "PolluxPolicy", "fitness_terms", "knapsack_counts"]

EPS = 1e-3
"""Pollux's additive epsilon in the generalised mean (a job at speedup 0 still counts)."""


class PolluxParams(Params):
    p: float = Field(
        -1.0, ge=-10, le=1, description="fairness exponent of the generalised mean (0: geometric)"
    )
    restart_penalty_s: float = Field(
        30.0, ge=0, le=1e6, description="delay of one restart in the restart penalty, seconds"
    )
    interval_s: float = Field(
        60.0, gt=0, le=1e6, description="re-optimise every interval_s seconds (Pollux: 60)"
    )
    explore: bool = Field(
        True, description="cap a job at twice the most GPUs it has held (Pollux's simulator)"
    )


def fitness_terms(speedups: np.ndarray, p: float) -> np.ndarray:
    """Per-job terms whose sum the DP *minimises* for Eq. 8's generalised mean with exponent
    ``p`` (``speedups`` already scaled): ``(s + eps)^p`` for p < 0 (the mean falls as it grows),
    ``-(s + eps)^p`` for p > 0, ``-log(max(s, eps))`` for p = 0."""
    if p == 0:
        return -np.log(np.maximum(speedups, EPS))
    terms = (speedups + EPS) ** p
    return terms if p < 0 else -terms


def knapsack_counts(costs: list[np.ndarray], budget: int) -> list[int]:
    """Counts ``k_j`` (``costs[j][k]`` defined for k = 0..len-1) minimising ``sum costs[j][k_j]``
    with ``sum k_j <= budget``: exact dynamic programme; ties go to fewer GPUs for later jobs."""
    inf = math.inf
    best = np.full(budget + 1, inf)
    best[0] = 0.0
    choices: list[np.ndarray] = []
    for cost in costs:
        kmax = min(len(cost) - 1, budget)
        nxt = np.full(budget + 1, inf)
        pick = np.zeros(budget + 1, dtype=np.int64)
        for k in range(kmax + 1):
            cand = np.full(budget + 1, inf)
            cand[k:] = best[: budget + 1 - k] + cost[k]
            better = cand < nxt
            nxt = np.where(better, cand, nxt)
            pick = np.where(better, k, pick)
        best = nxt
        choices.append(pick)
    used = int(np.argmin(best))  # first minimum: the fewest GPUs in total
    counts = [0] * len(costs)
    for j in range(len(costs) - 1, -1, -1):
        k = int(choices[j][used])
        counts[j] = k
        used -= k
    return counts


@dataclass
class _Memory:
    """What Pollux's simulator remembers about a job between rounds."""

    held_max: int = 0
    """Most GPUs the job has held (``max_profiled_replicas``)."""
    allocations: int = 0
    """(Re)allocations so far; ``restarts = allocations - 1`` once allocated."""
    placement: dict[str, tuple[int, ...]] = field(default_factory=dict)
    batch: float | None = None
    """Global batch of its last configuration: the statistics its agent reports."""


class PolluxPolicy(PolicyBase):
    """The ``pollux`` policy (see the module doc)."""

    def __init__(self, params: PolluxParams, name: str = "pollux") -> None:
        self.name = name
        self.params = params
        self._memory: dict[str, _Memory] = {}

    # ------------------------------------------------------------------ memory
    def snapshot(self) -> dict[str, Any]:
        return {
            "jobs": {
                j: [
                    m.held_max,
                    m.allocations,
                    m.batch,
                    {n: list(g) for n, g in m.placement.items()},
                ]
                for j, m in self._memory.items()
            }
        }

    def restore(self, state: dict[str, Any]) -> None:
        self._memory = {
            j: _Memory(int(h), int(a), {n: tuple(g) for n, g in pl.items()}, b)
            for j, (h, a, b, pl) in state.get("jobs", {}).items()
        }

    def _observe(self, view: ClusterView) -> None:
        """Count the (re)allocations the engine carried out since the last round."""
        active = {job.id for job in view.active()}
        self._memory = {j: m for j, m in self._memory.items() if j in active}
        for job in view.active():
            mem = self._memory.setdefault(job.id, _Memory())
            placement = dict(job.allocation.placement) if job.allocation is not None else {}
            if placement and placement != mem.placement:
                mem.allocations += 1
            mem.placement = placement
            mem.held_max = max(mem.held_max, job.gpus)

    # ------------------------------------------------------------------ decisions
    def next_wakeup(self, view: ClusterView) -> float | None:
        return view.now + self.params.interval_s if view.active() else None

    def _epoch_stats(
        self, job: ActiveJob, model: GoodputModel, now: float
    ) -> tuple[int, float, float]:
        epoch = model.epoch_at(job.done_at(now))
        batch = self._memory[job.id].batch or float(model.init_batch)
        sqr, var = model.grad_stats(batch, epoch)
        return epoch, sqr, var

    def _speedups(
        self, job: ActiveJob, kmax: int, fair: int, now: float, node_gpus: int
    ) -> np.ndarray:
        """SPEEDUP(k) for k = 0..kmax, packed on nodes of ``node_gpus`` (index 0: 0)."""
        spec = job.spec
        model = spec.goodput
        if model is None:
            rate = spec.throughput.rate
            base = rate(min(fair, _max_gpus(spec)))
            return np.array([0.0] + [rate(k) / base for k in range(1, kmax + 1)])
        _, sqr, var = self._epoch_stats(job, model, now)
        good, _, _ = model.optimize(0, np.arange(1, kmax + 1), sqr, var, node_gpus)
        base, _, _ = model.optimize(1, np.array([fair]), sqr, var)
        ref = float(base[0]) if base[0] > 0 else float(good[0])
        return np.concatenate(([0.0], good / ref))

    def decide(self, view: ClusterView) -> Decision:
        self._observe(view)
        now, p = view.now, self.params
        jobs = sorted(
            view.active(), key=lambda j: (j.attained_service_at(now), j.spec.submit_time, j.id)
        )
        if not jobs:
            return Decision(shares={}, placements={})
        gpus = view.capacity
        nodes = max(1, len(view.nodes))
        fair = max(1, math.ceil(gpus / len(jobs)))
        scale = nodes / gpus
        node_gpus = max(n.gpus for n in view.nodes.values())  # the largest node packs best
        costs = []
        for job in jobs:
            mem = self._memory[job.id]
            kmax = min(_max_gpus(job.spec), gpus)
            if p.explore:  # never below the job's smallest count: a rigid job would starve
                smallest = min((c for c in job.spec.allowed_counts() if c > 0), default=1)
                kmax = min(kmax, max(2 * mem.held_max, smallest))
            s = self._speedups(job, kmax, fair, now, node_gpus) * scale
            age = now - job.spec.submit_time
            restarts = max(mem.allocations - 1, 0)
            delay = p.restart_penalty_s
            factor = max(age - restarts * delay, 0.0) / (age + delay) if age + delay > 0 else 1.0
            penalised = s * factor
            if job.gpus and job.gpus <= kmax:
                penalised[job.gpus] = s[job.gpus]  # same count: best fit keeps its GPUs
            cost = fitness_terms(penalised, p.p)
            cost[1:][~_allowed(job.spec, kmax)] = math.inf
            costs.append(cost)
        counts = knapsack_counts(costs, gpus)
        shares = {job.id: k for job, k in zip(jobs, counts, strict=True) if k > 0}
        stats: list[SolverStats] = []
        placed = best_fit_placement(view, shares, stats)
        by_id = {job.id: job for job in jobs}
        placements = {j: self._configure(by_id[j], alloc, view) for j, alloc in placed.items()}
        return Decision(shares=shares, placements=placements, stats=stats)

    def _configure(self, job: ActiveJob, alloc: JobAllocation, view: ClusterView) -> JobAllocation:
        """The allocation with the job's goodput at its best batch for the actual placement."""
        model = job.spec.goodput
        if model is None:
            return alloc
        k, n = alloc.gpus, len(alloc.placement)
        epoch, sqr, var = self._epoch_stats(job, model, view.now)
        _, atomic_a, accum_a = model.optimize(n, np.array([k]), sqr, var)
        atomic, accum = int(atomic_a[0]), int(accum_a[0])
        atomic = max(1, min(atomic, int(model.max_batch / (k * (accum + 1)))))
        self._memory[job.id].batch = float(k * atomic * (accum + 1))
        true = model.goodput(n, k, atomic, accum, epoch)
        plain = JobAllocation.fast(job.id, alloc.placement, alloc.share, 1.0)
        base = placement_rate(job.spec, view.cluster, plain)
        eff = min(MAX_SPEED, max(true / base, 1e-9)) if base > 0 else 1.0
        current = job.allocation
        if (
            current is not None
            and current.placement == alloc.placement
            and current.share == alloc.share
            and current.efficiency == eff
        ):
            return current
        return JobAllocation.fast(job.id, alloc.placement, alloc.share, eff)


def _allowed(spec: JobSpec, kmax: int) -> np.ndarray:
    """Which counts 1..kmax the job may run at (a rigid job: its request only)."""
    counts = np.arange(1, kmax + 1)
    el = spec.elasticity
    if el is None:
        return counts == spec.requested_gpus
    ok = counts >= el.min_gpus
    if el.allowed:
        ok &= np.isin(counts, list(el.allowed))
    return ok


def _max_gpus(spec: JobSpec) -> int:
    return spec.elasticity.max_gpus if spec.elasticity is not None else spec.requested_gpus


def _build(params: PolluxParams, seed: int) -> PolluxPolicy:
    del seed  # the optimiser is exact: no random choices
    return PolluxPolicy(params)


POLICIES = [PolicyDef("pollux", _build, PolluxParams)]
