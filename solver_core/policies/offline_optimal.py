"""``offline-optimal``: replay the minimum-average-JCT schedule of a small, fully known job set.

No online policy can know the future; this one is told it, so ``gpuplan compare`` can show how
far each online policy is from the best possible schedule. It declares ``needs_future``; the
simulator (:func:`~gpuplan.executors.simulator.run.simulate`) then calls :meth:`foresee` with
the whole job list before the first event. The policy solves the time-indexed model of
:mod:`..offline_model` once and from then on only replays it: at every decision each job gets
the GPU count of the current slot, and a wake-up is set at the next slot boundary.

Elastic instances (a job with more than one allowed count) are solved exactly in continuous
time instead (:mod:`..offline_elastic`: branch and bound over event orders, an LP per order);
the schedule is a list of segments (GPU counts held from one instant to another) and a wake-up
is set at every segment boundary.

If the run diverges from the model (restart or migration overheads make a job slower than the
model assumed, a node fails), a job still unfinished after its planned last slot gets the GPUs
no planned job holds, largest allowed count first, so the run always ends. On an executor that
does not pass the future (a real cluster), the first decision is an :class:`InputError`.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from pydantic import Field

from gpuplan.models import Cluster, ClusterView, InputError, JobSpec, SolverStats

from ..limits import SolveLimits
from ..offline_elastic import DEFAULT_NODES, ElasticSchedule, solve_elastic
from ..offline_model import (
    DEFAULT_TARGET_SLOTS,
    OfflineSchedule,
    offline_instance,
    solve_offline,
)
from ..params import Params
from ..placement.best_fit import best_fit_placement
from ..placement.shapes import enforce_shapes
from ..policy import Decision, PolicyBase, Shares
from ..registry import PolicyDef

__all__ = ["OfflineOptimal", "OfflineParams"]


class OfflineParams(Params):
    slot_s: float | None = Field(default=None, gt=0, description="slot length (s); None: the "
                                 "instance's natural grid, else the makespan over target_slots")
    target_slots: int = Field(default=DEFAULT_TARGET_SLOTS, ge=2, le=200)
    work_s: float = Field(default=5.0, gt=0, le=600,
                          description="CP-SAT deterministic seconds for each of the two models")
    elastic_nodes: int = Field(default=DEFAULT_NODES, ge=1, le=1_000_000,
                               description="LPs the elastic branch and bound may solve")

TOL_S = 1e-6
"""Two instants closer than this (s) are one: the simulator's clock and the LP's times."""


class OfflineOptimal(PolicyBase):
    """Solves once from the whole job list (:meth:`foresee`), then replays the schedule."""

    name = "offline-optimal"
    needs_future = True
    """The simulator passes the scenario's jobs to :meth:`foresee` before the first event."""

    def __init__(self, params: OfflineParams | None = None, seed: int = 0) -> None:
        self.params = params or OfflineParams()
        self.seed = seed
        self.schedule: OfflineSchedule | ElasticSchedule | None = None
        self._starts: list[float] = []
        self._unreported: list[SolverStats] = []

    def foresee(self, cluster: Cluster, jobs: Sequence[JobSpec]) -> None:
        """Solve the offline model for ``jobs`` (InputError when it is too large)."""
        p = self.params
        inst = offline_instance(cluster, jobs)
        if any(len(j.rates) > 1 for j in inst.jobs):
            e = solve_elastic(inst, nodes=p.elastic_nodes)
            self.schedule, self._starts = e, [seg.start for seg in e.segments]
            note = (f"continuous schedule avg JCT {e.avg_jct_s:.1f} s, lower bound "
                    f"{e.lower_bound_s:.1f} s, proven gap {100 * e.gap:.2f} %")
            self._unreported = [st.model_copy(update={"message": f"{st.message}; {note}"})
                                for st in e.stats]
            return
        self.schedule = solve_offline(inst, slot_s=p.slot_s, target_slots=p.target_slots,
                                      limits=SolveLimits.deterministic_budget(p.work_s),
                                      seed=self.seed)
        s = self.schedule
        note = (f"slot {s.slot_s:g} s; schedule avg JCT {s.avg_jct_s:.1f} s, lower bound "
                f"{s.lower_bound_s:.1f} s, proven gap {100 * s.gap:.2f} %")
        self._unreported = [st.model_copy(update={"message": (st.message + "; " + note).strip(
            "; ")}) for st in s.stats]

    def _segment(self, now: float) -> dict[str, int]:
        """Counts of the elastic schedule's segment running at ``now`` (none: idle)."""
        assert isinstance(self.schedule, ElasticSchedule)
        i = bisect.bisect_right(self._starts, now + TOL_S) - 1
        if i < 0 or now >= self.schedule.segments[i].end - TOL_S:
            return {}
        return self.schedule.segments[i].counts

    def _elastic_overdue(self, job_id: str, now: float) -> bool:
        assert isinstance(self.schedule, ElasticSchedule)
        ends = [s.end for s in self.schedule.segments if job_id in s.counts]
        return not ends or now >= max(ends) - TOL_S

    def _planned(self, job_id: str, slot: int) -> int:
        assert isinstance(self.schedule, OfflineSchedule)
        counts = self.schedule.counts.get(job_id)
        return counts[slot] if counts is not None and 0 <= slot < len(counts) else 0

    def _overdue(self, job_id: str, slot: int) -> bool:
        assert isinstance(self.schedule, OfflineSchedule)
        counts = self.schedule.counts.get(job_id)
        if counts is None:
            return True
        return slot > max(t for t, g in enumerate(counts) if g)

    def decide(self, view: ClusterView) -> Decision:
        if self.schedule is None:
            raise InputError("offline-optimal needs the whole job list in advance; only the "
                             "simulator gives it (gpuplan simulate / compare)", field="policy")
        jobs = sorted([*view.running, *view.pending])
        shares: Shares = {}
        if isinstance(self.schedule, ElasticSchedule):
            seg = self._segment(view.now)
            shares = {j: seg[j] for j in jobs if j in seg}
            overdue = [j for j in jobs if self._elastic_overdue(j, view.now)]
        else:
            slot = self.schedule.slot_of(view.now)
            for job_id in jobs:
                g = self._planned(job_id, slot)
                if g:
                    shares[job_id] = g
            overdue = [j for j in jobs if self._overdue(j, slot)]
        free = sum(n.gpus for n in view.nodes.values()) - sum(shares.values())
        for job_id in overdue:
            if job_id in shares:
                continue
            job = view.running.get(job_id) or view.pending[job_id]
            fits = [c for c in job.spec.allowed_counts() if c <= free]
            if fits:
                shares[job_id] = max(fits)
                free -= shares[job_id]
        stats, self._unreported = self._unreported, []
        placements = best_fit_placement(view, shares, stats)
        return Decision(shares=shares, placements=enforce_shapes(view, placements), stats=stats)

    def next_wakeup(self, view: ClusterView) -> float | None:
        if self.schedule is None or not (view.running or view.pending):
            return None
        s = self.schedule
        if isinstance(s, ElasticSchedule):
            i = bisect.bisect_right(self._starts, view.now + TOL_S)
            ends = [seg.end for seg in s.segments[max(0, i - 1):i] if seg.end > view.now + TOL_S]
            nxt = [*ends, *self._starts[i:i + 1]]
            return min(nxt) if nxt else None
        return s.origin + (s.slot_of(view.now) + 1) * s.slot_s


POLICIES = [
    PolicyDef("offline-optimal", build=lambda params, seed: OfflineOptimal(params, seed),
              params=OfflineParams),
]
