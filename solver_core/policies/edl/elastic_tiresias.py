"""Elastic-Tiresias (EDL, paper 003 §5.1, Alg. 1 "Compaction and Expansion").

Tiresias-L (``tiresias.py``) decides first, rigidly, exactly as it does alone. Then, on the jobs
it left waiting (pending jobs and jobs it preempted), in Tiresias priority order (queue, then
arrival):

* **compaction** — when *more than* ``N`` jobs wait (line 1): for each waiting job ``J`` choose
  its size ``q`` in ``[min_J, P_J]`` and the GPUs ``r_j`` taken by scale-in from running
  elastic jobs of queues ``G_i, i >= 1`` (never below ``min_j``), maximising the gain in
  normalised cluster throughput ``U_J(q) - Σ_j [U_j(p_j) - U_j(p_j - r_j)]``, with
  ``U(p) = S(p)/S(1)`` (digest §2.1.3's formalisation, inferred). Free GPUs are used first
  (they cost nothing; the literal Alg. 1 uses released GPUs only — ``use_free: false``). For a
  fixed ``q`` the loss is separable and, on concave curves, convex in ``r_j``, so taking one GPU
  at a time from the donor with the smallest marginal loss is optimal; ``q`` is scanned. ``J``
  starts only when the best gain is positive. ``min`` is ``ceil(qos x requested)`` (the
  paper's "r = 0.5 for the quality of service guarantee", inferred meaning);
* **expansion** — when *no* job waits (line 7): each free GPU goes to the running elastic job
  with the largest relative throughput gain ``(S(p+1) - S(p)) / S(p)`` (line 10), while that
  gain exceeds ``min_gain`` (the loop's inferred guard) and the job is below its maximum;
* between the two (``0 <`` waiting ``<= N``) it is plain Tiresias-L; jobs expanded beyond their
  request get their request back by Tiresias' rigid pass (the digest's "reclaim beyond ``P_j``
  first" rule falls out of it).

Inelastic jobs are never scaled. The GPU-locality footnote (``ceil(P/m)`` machines) is left to
the placement stage (best-fit consolidates).
"""

from __future__ import annotations

import heapq
import math
from typing import Any

from pydantic import Field

from gpuplan.models import ActiveJob, ClusterView, InputError, SolverStats

from ...params import Params
from ...placement.best_fit import best_fit_placement
from ...policy import Shares, StagedPolicy
from ...registry import PolicyDef
from ..baselines.tiresias import TIRESIAS_PROMOTE_KNOB, TiresiasL
from .expansion import expand


def norm(job: ActiveJob, p: int) -> float:
    """``U_j(p) = S_j(p) / S_j(1)``: normalised throughput (0 at 0 GPUs)."""
    return job.spec.throughput.rate(p) / job.spec.throughput.rate(1) if p > 0 else 0.0


def qos_min(job: ActiveJob, qos: float) -> int:
    """The fewest GPUs a job may be scaled to: ``ceil(qos x request)``, within its range."""
    spec = job.spec
    floor = max(spec.min_gpus, math.ceil(qos * spec.requested_gpus - 1e-9))
    return min(floor, spec.requested_gpus)


def compact_one(
    job: ActiveJob,
    donors: dict[str, tuple[ActiveJob, int, int]],
    free: int,
    qos: float,
    use_free: bool,
) -> tuple[int, dict[str, int], int, float] | None:
    """Best ``(q, {donor: r}, free used, gain)`` for starting ``job``, or None.

    ``donors`` maps job id -> (job, current GPUs, minimum GPUs)."""
    best: tuple[int, dict[str, int], int, float] | None = None
    low, high = qos_min(job, qos), job.spec.requested_gpus
    if not job.spec.elastic:
        low = high
    spare = sum(p - m for _, p, m in donors.values())
    for q in range(low, high + 1):
        f = min(free, q) if use_free else 0
        need = q - f
        if need > spare:
            break
        taken: dict[str, int] = {}
        loss = 0.0
        heap = [(norm(j, p) - norm(j, p - 1), jid) for jid, (j, p, m) in donors.items() if p > m]
        heapq.heapify(heap)
        for _ in range(need):
            marginal, jid = heapq.heappop(heap)
            loss += marginal
            taken[jid] = taken.get(jid, 0) + 1
            j, p, m = donors[jid]
            now_p = p - taken[jid]
            if now_p > m:
                heapq.heappush(heap, (norm(j, now_p) - norm(j, now_p - 1), jid))
        gain = norm(job, q) - loss
        if best is None or gain > best[3] + 1e-12:
            best = (q, taken, f, gain)
    if best is None or best[3] <= 0:
        return None
    return best


class ElasticTiresias:
    """Shares stage: Tiresias-L, then EDL's compaction or expansion."""

    def __init__(
        self, base: TiresiasL, n: int, qos: float, min_gain: float, use_free: bool
    ) -> None:
        self.base = base
        self.n = n
        self.qos = qos
        self.min_gain = min_gain
        self.use_free = use_free
        self.compactions = 0
        """Decisions that ran the compaction branch (inspection and tests)."""

    def snapshot(self) -> dict[str, Any]:
        return {"tiresias": self.base.snapshot(), "compactions": self.compactions}

    def restore(self, state: dict[str, Any]) -> None:
        self.base.restore(state.get("tiresias", {}))
        self.compactions = int(state.get("compactions", 0))

    def next_wakeup(self, view: ClusterView) -> float | None:
        return self.base.next_wakeup(view)

    def _rank(self, job: ActiveJob) -> tuple[int, float, str]:
        queue = self.base.queue_of(job.id)
        return (queue if queue is not None else 0, job.spec.submit_time, job.id)

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        shares = dict(self.base(view, stats))
        waiting = sorted((j for j in view.active() if j.id not in shares), key=self._rank)
        free = view.capacity - sum(shares.values())
        if len(waiting) > self.n:
            self.compactions += 1
            self._compact(view, shares, waiting, free)
        elif not waiting and free > 0:
            self._expand(view, shares, free)
        return shares

    def _compact(
        self, view: ClusterView, shares: Shares, waiting: list[ActiveJob], free: int
    ) -> None:
        donors: dict[str, tuple[ActiveJob, int, int]] = {}
        for job_id, p in shares.items():
            job = view.running.get(job_id)
            queue = self.base.queue_of(job_id)
            if job is None or not job.spec.elastic or queue is None or queue == 0:
                continue
            low = qos_min(job, self.qos)
            if p > low:
                donors[job_id] = (job, p, low)
        for job in waiting:
            best = compact_one(job, donors, free, self.qos, self.use_free)
            if best is None:
                continue
            q, taken, used, _ = best
            shares[job.id] = q
            free -= used
            for jid, r in taken.items():
                shares[jid] -= r
                j, p, m = donors[jid]
                donors[jid] = (j, p - r, m)

    def _expand(self, view: ClusterView, shares: Shares, free: int) -> None:
        """Free GPUs one at a time to the largest relative gain (:mod:`.expansion`)."""
        jobs = [
            view.running[j] for j in shares if j in view.running and view.running[j].spec.elastic
        ]
        expand(jobs, shares, free, self._expand_rank, self.min_gain)

    def _expand_rank(self, job: ActiveJob) -> tuple[int, str]:
        """Expansion's tie order among equal gains: Tiresias queue, then id."""
        return (self.base.queue_of(job.id) or 0, job.id)


class ElasticTiresiasParams(Params):
    n: int = Field(
        10, ge=0, le=100_000, description="compaction when more than N jobs wait (paper: 10)"
    )
    qos: float = Field(
        0.5,
        gt=0,
        le=1,
        description="a scaled job keeps >= ceil(qos x request) GPUs (paper's r = 0.5)",
    )
    min_gain: float = Field(
        0.0,
        ge=0,
        le=10,
        description="expansion gives a GPU only for a relative throughput gain above this",
    )
    use_free: bool = Field(
        True,
        description="compaction also uses free GPUs (false: only "
        "GPUs released by scale-in, the literal Alg. 1)",
    )
    thresholds: tuple[float, ...] = Field(
        (500.0, 10000.0),
        min_length=1,
        max_length=16,
        description="Tiresias queue limits in GPU-s (paper: 3 queues, 500 and 10,000)",
    )
    promote_knob: float | None = Field(
        TIRESIAS_PROMOTE_KNOB, ge=0, le=1e6, description="Tiresias starvation knob; null/0: off"
    )


def elastic_tiresias_stage(p: ElasticTiresiasParams) -> ElasticTiresias:
    try:
        base = TiresiasL(p.thresholds, p.promote_knob)
    except ValueError as err:
        raise InputError(str(err), field="policies.elastic-tiresias") from None
    return ElasticTiresias(base, p.n, p.qos, p.min_gain, p.use_free)


def _build(p: ElasticTiresiasParams, seed: int) -> StagedPolicy:
    stage = elastic_tiresias_stage(p)
    return StagedPolicy(
        "elastic-tiresias",
        stage,
        best_fit_placement,
        stage.next_wakeup,
        memory=stage,
        wants_in_place_resize=True,
    )


POLICIES = [PolicyDef("elastic-tiresias", _build, ElasticTiresiasParams)]
