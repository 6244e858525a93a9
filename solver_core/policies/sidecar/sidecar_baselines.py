"""SideCar's baselines (004 digest §2.5): ``k8s-default`` and ``termination``.

* **k8s-default** — the Kubernetes default scheduler as the paper used it: each job's GPU
  count is drawn once from its optional counts (``S_opt``) with the run's seed (``size:
  requested`` uses the request instead, as the case study's Table I does) and never changes.
  Every decision scans pending jobs in arrival order and starts each that fits on one host
  (first host in name order with enough free GPUs): no reservation, so a later small job may
  overtake a waiting 8-GPU job, the starvation the paper describes (§VI.A).
* **termination** — Optimus' algorithm with terminate-and-restart resizing: an incoming job
  gets its smallest option (1 GPU) on the host with the most idle GPUs, or waits when none is
  idle; idle GPUs are then added one step at a time (to the next option of ``S_opt``), each
  step a full termination and restart (``restart_s`` in the predictions, the executor's resize
  cost in the run), to the job whose predicted completion time drops most; no reshaping down.
  The next step of a job waits for its restart to finish (wake-up at its resume time).
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import Field

from gpuplan.models import ActiveJob, ClusterView, SolverStats

from ...params import Params
from ...placement.best_fit import best_fit_placement
from ...policy import Allocation, StagedPolicy, Stateless
from ...registry import PolicyDef
from .sidecar import resume_wakeup
from .sidecar_model import Costs, HostBook, Predictor, options

Size = Literal["random", "requested"]


def drawn_count(job: ActiveJob, seed: int, limit: int) -> int:
    """The job's static count: uniform over its options that fit a host, from a generator
    seeded by (run seed, job id) so the draw does not depend on decision order."""
    opts = options(job, limit) or (job.spec.min_gpus,)
    return random.Random(f"k8s-default/{seed}/{job.id}").choice(opts)


class K8sDefaultStage(Stateless):
    """Static counts, first-fit on one host, no head-of-line blocking."""

    def __init__(self, seed: int, size: Size) -> None:
        self.seed = seed
        self.size = size

    def count(self, job: ActiveJob, limit: int) -> int:
        if self.size == "requested":
            return job.spec.requested_gpus
        return drawn_count(job, self.seed, limit)

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Allocation:
        book = HostBook.of(view)
        limit = max((n.gpus for n in view.nodes.values()), default=0)
        for job in view.pending.values():
            need = self.count(job, limit)
            for node in book.nodes():
                if len(book.free[node]) >= need:
                    book.place(job.id, node, need)
                    break
        return book.allocation()


class TerminationStage(Stateless):
    """One GPU on arrival, then one option step at a time by terminate-and-restart."""

    def __init__(self, costs: Costs) -> None:
        self.costs = costs

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Allocation:
        book = HostBook.of(view)
        pred = Predictor(book, self.costs)
        for job in view.pending.values():
            node = min(book.nodes(), key=lambda n: (-len(book.free[n]), n), default=None)
            if node is None:
                break
            opts = options(job, book.size(node))
            if not opts or len(book.free[node]) < opts[0]:
                continue
            book.place(job.id, node, opts[0])
            pred.finish[job.id] = pred.new(job, node, opts[0])
        while True:
            best: tuple[float, str, int] | None = None
            for job_id in sorted(
                j for j in book.where if j in view.running and j not in book.touched
            ):
                node, gpus = book.where[job_id]
                cur = len(gpus)
                nxt = [c for c in view.running[job_id].spec.allowed_counts() if c > cur]
                if not nxt or nxt[0] - cur > len(book.free[node]):
                    continue
                after = pred.reshaped(job_id, nxt[0], self.costs.up_s)
                gain = pred.finish[job_id] - after
                if gain > 0 and (best is None or gain > best[0]):
                    best = (gain, job_id, nxt[0] - cur)
            if best is None:
                break
            _, job_id, add = best
            cur = len(book.where[job_id][1])
            pred.finish[job_id] = pred.reshaped(job_id, cur + add, self.costs.up_s)
            book.grow(job_id, add)
        return book.allocation()


class K8sParams(Params):
    size: Size = Field(
        "random",
        description="random: a count drawn from the job's options "
        "with the run's seed (paper §V.B); requested: the job's request",
    )


class TerminationParams(Params):
    init_s: float = Field(174.0, ge=0, le=1e5, description="start of a new job (s)")
    restart_s: float = Field(
        242.0,
        ge=0,
        le=1e5,
        description="terminate-and-restart with more "
        "GPUs, used in predictions (s; case study 815 -> 1057 s)",
    )
    tail_s: float = Field(0.0, ge=0, le=1e5, description="end-of-job overhead (s)")


def _k8s(p: K8sParams, seed: int) -> StagedPolicy:
    return StagedPolicy("k8s-default", K8sDefaultStage(seed, p.size), best_fit_placement)


def _termination(p: TerminationParams, seed: int) -> StagedPolicy:
    costs = Costs(init_s=p.init_s, down_s=p.restart_s, up_s=p.restart_s, tail_s=p.tail_s)
    return StagedPolicy("termination", TerminationStage(costs), best_fit_placement, resume_wakeup)


TERMINATION_DOWN_S = 204.0
"""SideCar's measured termination-based shrink (004 digest §3.4; termination never shrinks,
but a scenario's reclaim may)."""


def _termination_costs(p: TerminationParams) -> dict[str, object]:
    """What terminate-and-restart costs in the simulator: each grow is a full restart of
    ``restart_s`` (the same cost the policy predicts with), a shrink 204 s, and no early
    initialisation (a terminated job cannot keep training while its successor starts)."""
    return {
        "resize_mode": "checkpoint_restart",
        "resize_up_s": p.restart_s,
        "resize_down_s": TERMINATION_DOWN_S,
        "early_init_s": 0.0,
    }


POLICIES = [
    PolicyDef("k8s-default", _k8s, K8sParams),
    PolicyDef("termination", _termination, TerminationParams, cost_model=_termination_costs),
]
