"""OJPAP (paper 002 Alg. 4) as an online stage of the ``ojpp`` wrapper.

Why: OJPP packs with a *predicted* interference matrix; what workers really suffer drifts as
jobs come and go and as the prediction errs. OJPAP watches the observed per-GPU slowdown
(``ClusterView.interference``: the simulator fills it from its own rate model, with the
collisions of a monitoring window drawn from the run's seed; Slurm and SSH leave it as
:data:`~gpuplan.models.state.NO_OBSERVATIONS`, and then OJPAP does nothing and never asks for
a wake-up) and moves single workers off persistently over-interfered GPUs.

* **Monitoring rounds** are at multiples of ``ojpap_interval_s``: the wrapper asks the engine
  for a wake-up at the next one while OJPP jobs are active and the executor observes. Between
  rounds decisions (arrivals, completions) do not observe.
* **Trigger**: the EWMA of Eq. (18) per GPU (:class:`~..ojpp.online.GpuEwma`, a = ``ojpap_a``)
  must stay above ``theta_max + ojpap_margin`` for ``ojpap_hold`` rounds in a row, so a
  one-round spike never fires it.
* **Adjustment**: Alg. 4 (:func:`~..ojpp.online.adjust`) on the decision's OJPP plan, the
  workers being the running jobs the wrapper keeps in place (jobs it is starting or re-placing
  this decision cannot move: their cost is infinite), one worker per job per GPU, new GPUs from
  the wrapper's pool as a last resort (``ojpap_allow_new``).
* **Cost** of moving one worker of job i: the engine carries the new placement out as a
  ``migrate`` of the whole job (one GPU differs), and the simulator pauses the job for its
  ``Overheads.migrate_s``. So c_i = ``ojpap_migration_s`` / (job i's remaining time at its
  current rate): the fraction of its remaining time the move costs it. The budget c-bar
  (``ojpap_budget``) bounds the sum over one adjustment (Eq. 19). Set
  ``ojpap_migration_s`` to the executor's migration pause.
* **Observed-consistent matrix**: a prediction that let a bad pair share will also call the
  GPU holding that pair a good target. So every round, a GPU observed with exactly two workers
  raises that type pair's floor (both directions) to the observed slowdown, and Alg. 4 checks
  its moves against ``max(predicted, floor)``. The packer uses the same corrected matrix for
  *new* placements (jobs starting or re-placed), so it stops re-creating pairs it has seen
  interfere; kept jobs are checked under the prediction (a changed matrix there would evict
  and re-place whole jobs outside the budget).
* After a move, the EWMA of both GPUs restarts (:meth:`GpuEwma.forget`).

State (EWMA, hold counters, pair floors, last round) is the policy's memory:
:meth:`Ojpap.snapshot` and :meth:`Ojpap.restore` carry it across a controller restart.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from gpuplan.models import ClusterView, SolverStats
from gpuplan.models.ojpp import OjppInstance
from gpuplan.models.state import NO_OBSERVATIONS

from .online import GpuEwma, Migration, adjust

if TYPE_CHECKING:
    from .ojpp import OjppParams, _Pack

__all__ = ["Ojpap"]

Gpu = tuple[str, int]


class Ojpap:
    """The monitor and adjuster of one ``ojpp``-wrapped policy (see the module doc)."""

    def __init__(self, p: OjppParams) -> None:
        self.p = p
        self.ewma = GpuEwma(a=p.ojpap_a, hold=p.ojpap_hold)
        self.round = -1
        """Index of the last monitoring round observed (rounds are at k * interval)."""
        self.observing = False
        """The executor observes interference (seen on the last decision)."""
        self.active = False
        """OJPP jobs were active at the last decision (wake-ups are wanted only then)."""
        self.floor: dict[tuple[str, str], float] = {}
        """Observed pair floors by sorted type pair (see :meth:`_learn`)."""
        self.trace: list[dict[str, Any]] = []
        """One row per monitoring round (for benchmarks and plots; not part of the memory)."""

    # ------------------------------------------------------------------ rounds
    def due(self, view: ClusterView) -> bool:
        """A monitoring round is due at this decision."""
        self.observing = view.interference is not NO_OBSERVATIONS
        return self.observing and math.floor(view.now / self.p.ojpap_interval_s) > self.round

    def next_wakeup(self, view: ClusterView) -> float | None:
        if not (self.observing and self.active):
            return None
        return (self.round + 1) * self.p.ojpap_interval_s

    def step(
        self,
        view: ClusterView,
        pack: _Pack,
        kept: set[str],
        pool: list[Gpu],
        stats: list[SolverStats],
    ) -> list[Migration]:
        """One monitoring round at ``view.now``: observe, and adjust ``pack`` in place when
        the trigger fires. Returns the migrations made (workers named ``j<n>#<k>``)."""
        start = time.perf_counter()
        p = self.p
        self.round = math.floor(view.now / p.ojpap_interval_s)
        observed = dict(view.interference)
        fired = self.ewma.observe(observed, p.theta_max + p.ojpap_margin)
        self._learn(view, observed)
        row: dict[str, Any] = {
            "t": view.now,
            "gpus": len(observed),
            "max": max(observed.values(), default=0.0),
            "mean": sum(observed.values()) / len(observed) if observed else 0.0,
            "ewma_max": max(self.ewma.ewma.values(), default=0.0),
            "triggered": fired,
            "moves": [],
            "cost": 0.0,
        }
        self.trace.append(row)
        if not fired:
            return []
        gpus: list[list[str]] = [[] for _ in pack.gpu_of]
        for i, devices in sorted(pack.placed.items()):
            for k, b in enumerate(devices):
                gpus[b].append(f"j{i}#{k}")
        ewma = [self.ewma.ewma.get(gpu, 0.0) for gpu in pack.gpu_of]
        cost = {f"j{i}": self._cost(view, job_id, kept) for i, job_id in enumerate(pack.ids)}
        _, moves = adjust(
            self.corrected(pack.inst),
            gpus,
            ewma,
            cost,
            p.ojpap_budget,
            allow_new=p.ojpap_allow_new,
            distinct=True,
            margin=p.ojpap_margin,
            max_new=len(pool),
        )
        touched: list[Gpu] = []
        for m in moves:
            if m.target == len(pack.gpu_of):  # adjust opened a GPU: take one from the pool
                gpu = pool.pop(0)
                pack.device[gpu] = len(pack.gpu_of)
                pack.gpu_of.append(gpu)
            job, _, k = m.worker.rpartition("#")
            pack.placed[int(job[1:])][int(k)] = m.target
            touched += [pack.gpu_of[m.source], pack.gpu_of[m.target]]
        self.ewma.forget(touched)
        row["moves"] = [
            (
                pack.ids[int(m.worker.rpartition("#")[0][1:])],
                *pack.gpu_of[m.source],
                *pack.gpu_of[m.target],
            )
            for m in moves
        ]
        row["cost"] = sum(m.cost for m in moves)
        stats.append(
            SolverStats(
                stage="ojpap",
                backend="alg4",
                status="heuristic",
                objective=row["cost"],
                deterministic=True,
                wall_ms=(time.perf_counter() - start) * 1000.0,
                message=f"{len(moves)} worker migrations, cost {row['cost']:.4f} of budget "
                f"{p.ojpap_budget:g}",
            )
        )
        return moves

    def _learn(self, view: ClusterView, observed: dict[Gpu, float]) -> None:
        """Raise the pair floor of every GPU observed with exactly two workers: both
        directions of that pair interfere at least this much (the observation is the worse
        worker's, collisions included, so the floor errs on the safe side)."""
        types: dict[Gpu, list[str]] = {}
        for job in view.running.values():
            alloc = job.allocation
            if alloc is None or alloc.share >= 1.0 or job.spec.memory is None:
                continue
            for node, gs in alloc.placement.items():
                for g in gs:
                    types.setdefault((node, g), []).append(job.spec.model or "unknown")
        for gpu, theta in sorted(observed.items()):
            pair = types.get(gpu, [])
            if len(pair) == 2:
                a, b = sorted(pair)
                self.floor[(a, b)] = max(self.floor.get((a, b), 0.0), theta)

    def corrected(self, inst: OjppInstance) -> OjppInstance:
        """``inst`` with its matrix raised to the observed pair floors: moves and new
        placements are checked against what was seen, not only against the prediction that
        went wrong (the "observed-consistent matrix" Alg. 4 needs). Idempotent."""
        if not self.floor:
            return inst

        def floor(a: str, b: str) -> float:
            return self.floor.get((a, b) if a <= b else (b, a), 0.0)

        matrix = {
            a: {b: max(v, floor(a, b)) for b, v in row.items()}
            for a, row in inst.interference.items()
        }
        return inst.model_copy(update={"interference": matrix})

    def _cost(self, view: ClusterView, job_id: str, kept: set[str]) -> float:
        """c_i: the migration pause as a fraction of the job's remaining time (inf: it must
        not move this decision)."""
        job = view.running.get(job_id)
        if job_id not in kept or job is None or job.rate <= 0:
            return math.inf
        left = job.remaining(view.now) / job.rate
        return self.p.ojpap_migration_s / left if left > 0 else math.inf

    # ------------------------------------------------------------------ memory
    def snapshot(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "observing": self.observing,
            "active": self.active,
            "ewma": self.ewma.snapshot(),
            "floor": [[a, b, v] for (a, b), v in sorted(self.floor.items())],
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.round = int(state["round"])
        self.observing = bool(state["observing"])
        self.active = bool(state["active"])
        self.ewma.restore(state["ewma"])
        self.floor = {(str(a), str(b)): float(v) for a, b, v in state["floor"]}
