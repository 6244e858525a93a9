"""gavel-fifo: Gavel's FIFO (``FIFOPolicy``, mode ``base``) under Gavel's round-based mechanism.

Narayanan et al., OSDI'20; semantics read from ``stanford-futuredata/gavel`` at c4fa400
(``scheduler/policies/fifo.py`` and the rounds of ``scheduler/scheduler.py``); our own code.

**Allocation.** Jobs are walked in arrival order. A job that keeps running keeps its GPU type;
when a job finishes, the head of the queue inherits its type if it fits there. Then, strictly in
queue order, the head draws a type uniformly at random (the policy's seeded generator) among
the types sorted by name that still have ``scale_factor`` free GPUs; the first job that fits
no type ends the walk (no backfill). The answer is ``X[job][type] = 1`` for each allocated job.
As in Gavel, the walk is redone at most every ``reset_s`` (1,920 s) after the first redo;
in between, finished jobs drop out and new ones wait unallocated.

``type_choice`` says what the drawn type is used for:

* ``random`` -- the job gets the drawn type (what the code intends, and what the issue calls
  "random worker-type choice");
* ``as-shipped`` -- the job gets the *last* type of the cluster (by name), as Gavel's shipped
  code does: its base mode draws the index but never reads it, so ``worker_type`` keeps the last
  value of an earlier loop over the cluster's types, and that type's free count goes negative
  instead of stopping the walk. On 2 V100 + 4 K80 every job is allocated to the V100s and
  the K80s stay idle; Gavel's published artifact numbers (6,517.164 s average JCT) are this.
  The draws are still made, so the generator advances as upstream's does.

**Rounds.** :class:`~.maxmin_perf.MaxMinPerf`'s dispatcher: every ``round_s`` seconds jobs are
ranked by ``X[j][t]`` / the fraction of time ``j`` has run on ``t`` (never-served first), ties in
arrival order, and placed on their type while it has GPUs; a job not placed waits this round
(time slicing when more jobs hold a type than it has GPUs, as in ``as-shipped``).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from gpuplan.models import ActiveJob, ClusterView, SolverStats
from gpuplan.models.bounds import MAX_TIME_S

from ...params import Params
from ...policy import StagedPolicy
from ...registry import PolicyDef
from .maxmin_perf import ROUND_S, Allocation, MaxMinPerf

__all__ = ["POLICIES", "GavelFifo", "gavel_fifo"]

TypeChoice = Literal["random", "as-shipped"]

RESET_S = 1920.0
"""Gavel's ``minimum_time_between_allocation_resets``: the least time between two
recomputations of the allocation after the first."""


@dataclass
class GavelFifo(MaxMinPerf):
    """FIFO's persistent job -> GPU type allocation, dispatched in Gavel's rounds."""

    seed: int = 0
    type_choice: TypeChoice = "random"
    reset_s: float = RESET_S
    _reset_at: float | None = None
    """when the allocation was last recomputed (Gavel's ``_last_reset_time``)"""
    _rng: random.Random = field(default_factory=random.Random)
    _type: dict[str, str] = field(default_factory=dict)
    """allocated job -> its GPU type (kept until the job finishes)"""
    _seq: dict[str, int] = field(default_factory=dict)
    """job -> arrival number (Gavel's job id)"""

    def __post_init__(self) -> None:
        self._rng.seed(self.seed)

    def snapshot(self) -> dict[str, Any]:
        """The dispatcher's state plus each job's type, arrival number, the last
        recomputation and the generator's state (so a restored policy draws as this one)."""
        version, internal, gauss = self._rng.getstate()
        out = super().snapshot()
        out.update(
            types=dict(self._type),
            seq=dict(self._seq),
            reset_at=self._reset_at,
            rng=[version, list(internal), gauss],
        )
        return out

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self._type = {str(j): str(t) for j, t in state.get("types", {}).items()}
        self._seq = {str(j): int(n) for j, n in state.get("seq", {}).items()}
        reset_at = state.get("reset_at")
        self._reset_at = None if reset_at is None else float(reset_at)
        if state.get("rng") is not None:
            version, internal, gauss = state["rng"]
            self._rng.setstate((int(version), tuple(int(v) for v in internal), gauss))

    def order(self, job: ActiveJob) -> tuple[float | int | str, ...]:
        return (self._seq.get(job.id, len(self._seq)), job.id)

    def _allocation(self, view: ClusterView, stats: list[SolverStats]) -> Allocation:
        active = {j.id: j for j in view.active()}
        jobs = frozenset(active)
        if self._alloc is not None and jobs == self._alloc_jobs:
            return self._alloc
        start = time.perf_counter()
        for job in sorted(active.values(), key=lambda j: j.spec.submit_time):
            self._seq.setdefault(job.id, len(self._seq))
        capacity: dict[str, int] = {}
        for node in view.nodes.values():
            capacity[node.gpu_type] = capacity.get(node.gpu_type, 0) + node.gpus
        types = sorted(capacity)
        if self._reset_at is not None and not self._may_reset(view, active):
            # Gavel keeps the old allocation (finished jobs drop out) until its reset window.
            x = {j: {t: float(self._type.get(j) == t) for t in types} for j in active}
            stale = SolverStats(
                stage="shares",
                backend="heuristic",
                status="heuristic",
                wall_ms=(time.perf_counter() - start) * 1000.0,
                deterministic=True,
                message="gavel-fifo: allocation kept until its reset window",
            )
            return Allocation(x, 0.0, stale)
        self._reset_at = view.now
        self._walk(view, active, capacity)
        x = {j: {t: float(self._type.get(j) == t) for t in types} for j in active}
        stats.append(
            SolverStats(
                stage="shares",
                backend="heuristic",
                status="heuristic",
                wall_ms=(time.perf_counter() - start) * 1000.0,
                deterministic=True,
                message=f"gavel-fifo ({self.type_choice}): {len(self._type)} of "
                f"{len(active)} jobs allocated",
            )
        )
        self._alloc, self._alloc_jobs = Allocation(x, 0.0, stats[-1]), jobs
        return self._alloc

    def _may_reset(self, view: ClusterView, active: dict[str, ActiveJob]) -> bool:
        """Gavel recomputes the allocation when ``reset_s`` has passed since the last
        recomputation, while that was at time 0 (its ``_last_reset_time == 0`` test), or when
        no allocated job is left to run."""
        if self._reset_at is None or self._reset_at == 0.0:
            return True
        if view.now - self._reset_at >= self.reset_s:
            return True
        return not any(j in active for j in self._type)

    def _fits(self, view: ClusterView, job: ActiveJob, gpu_type: str) -> bool:
        return (
            job.spec.gpu_type in (None, gpu_type)
            and self._rates(view, job, {gpu_type: job.spec.requested_gpus}).get(gpu_type, 0.0) > 0.0
        )

    def _walk(
        self, view: ClusterView, active: dict[str, ActiveJob], capacity: dict[str, int]
    ) -> None:
        """Gavel's ``get_allocation``: hand finished jobs' types on, then draw for the queue."""
        free = dict(sorted(capacity.items()))
        last = next(reversed(free))
        queue = sorted((j for j in active if j not in self._type), key=self._seq.__getitem__)
        for job_id in sorted(self._type, key=lambda j: self._seq.get(j, -1)):
            gpu_type = self._type[job_id]
            if job_id in active:
                free[gpu_type] -= active[job_id].spec.requested_gpus
                continue
            del self._type[job_id]
            if queue:
                head = active[queue[0]]
                if head.spec.requested_gpus <= free[gpu_type] and self._fits(view, head, gpu_type):
                    queue.pop(0)
                    self._type[head.id] = gpu_type
                    free[gpu_type] -= head.spec.requested_gpus
        open_types = [t for t in free if free[t] > 0]
        while queue and open_types:
            job = active[queue.pop(0)]
            sf = job.spec.requested_gpus
            room = [(i, t) for i, t in enumerate(open_types) if free[t] >= sf]
            if not room:
                break
            k = self._rng.randrange(len(room))
            gpu_type = last if self.type_choice == "as-shipped" else room[k][1]
            if self._fits(view, job, gpu_type):
                self._type[job.id] = gpu_type
                free[gpu_type] -= sf
                if free[gpu_type] == 0:
                    open_types.pop(room[k][0])


def gavel_fifo(
    seed: int = 0,
    type_choice: TypeChoice = "random",
    round_s: float = ROUND_S,
    reset_s: float = RESET_S,
) -> StagedPolicy:
    """The ``gavel-fifo`` policy."""
    state = GavelFifo(round_s=round_s, seed=seed, type_choice=type_choice, reset_s=reset_s)
    return StagedPolicy("gavel-fifo", state.shares, state.placement, state.wakeup, memory=state)


class GavelFifoParams(Params):
    type_choice: TypeChoice = Field(
        "random",
        description="random: the seeded draw picks the job's GPU type; as-shipped: Gavel's "
        "shipped code, which draws but gives every job the cluster's last type by name",
    )
    round_s: float = Field(
        ROUND_S, gt=0, le=MAX_TIME_S, description="round length, seconds (Gavel: 360 s)"
    )
    reset_s: float = Field(
        RESET_S,
        ge=0,
        le=MAX_TIME_S,
        description="least time between recomputations of the allocation (Gavel's "
        "minimum_time_between_allocation_resets, 1920 s); 0: at every change",
    )


POLICIES = [
    PolicyDef(
        "gavel-fifo",
        lambda p, seed: gavel_fifo(seed, p.type_choice, p.round_s, p.reset_s),
        GavelFifoParams,
    ),
]
