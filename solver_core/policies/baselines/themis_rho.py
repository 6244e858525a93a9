"""Finish-time fairness (rho) of the Themis stage, split out of ``themis.py``.

Everything that computes Themis' rho = T_shared / T_ideal lives here because it changes
together: the integral of the number of active jobs over time (for ``N_avg``), the average
contention since a job's submit time, rho itself, and its inlined fast path used to rank the
bidders. :class:`RhoMixin` is a base class of :class:`~.themis.Themis`, which owns the state
(``_times``, ``_areas``, ``_active``, ``_facts``, ``_lts``) these methods read and extend.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING

from gpuplan.models import ActiveJob, ClusterView
from gpuplan.models.state import remaining_work

from .themis_state import JobFacts

_EPS = 1e-9


class RhoMixin:
    """rho and the contention integral of :class:`~.themis.Themis` (state lives there)."""

    ideal: str
    _times: list[float]
    _areas: list[float]
    _active: int
    _lts: dict[tuple[str, int, float], float]

    if TYPE_CHECKING:  # provided by Themis

        def _job_facts(self, job: ActiveJob, capacity: int) -> JobFacts: ...

    def _advance(self, view: ClusterView) -> None:
        """Extend the integral of the number of active jobs over time (for N_avg)."""
        now = view.now
        if not self._times:
            self._times.append(now)
            self._areas.append(0.0)
        elif now > self._times[-1]:
            self._areas.append(self._areas[-1] + self._active * (now - self._times[-1]))
            self._times.append(now)
        self._active = len(view.running) + len(view.pending)

    def mean_contention(self, since: float, now: float) -> float:
        """Average number of active jobs over ``[since, now]`` (>= 1)."""
        times, areas = self._times, self._areas
        since = max(since, times[0]) if times else since
        if not times or now - since <= _EPS:
            return float(max(self._active, 1))
        i = bisect.bisect_right(times, since) - 1
        if i + 1 < len(times):
            slope = (areas[i + 1] - areas[i]) / (times[i + 1] - times[i])
        else:
            slope = float(self._active)
        area_since = areas[i] + slope * (since - times[i])
        area_now = areas[-1] + self._active * (now - times[-1])
        return max((area_now - area_since) / (now - since), 1.0)

    def rho(
        self, job: ActiveJob, count: int, view: ClusterView, capacity: int | None = None
    ) -> float:
        """Finish-time fairness of ``job`` holding ``count`` GPUs (infinite with none)."""
        if count <= 0:
            return math.inf
        if capacity is None:
            capacity = view.capacity
        facts = self._job_facts(job, capacity)
        return self._rho(facts, job, count, view.now, self._area_at(view.now))

    def _area_at(self, now: float) -> float:
        """The contention integral up to ``now`` (0 before the first time point)."""
        times = self._times
        return self._areas[-1] + self._active * (now - times[-1]) if times else 0.0

    def _contention(self, facts: JobFacts, now: float, area_now: float) -> float:
        """:meth:`mean_contention` since the job's submit time, with the same float operations;
        the integral up to the submit time is cached once a later time point fixes it."""
        times = self._times
        since = facts.submit
        if not times:
            return float(max(self._active, 1))
        since = max(since, times[0])
        if now - since <= _EPS:
            return float(max(self._active, 1))
        area_since = facts.area_since
        if area_since is None:
            areas = self._areas
            i = bisect.bisect_right(times, since) - 1
            if i + 1 < len(times):
                slope = (areas[i + 1] - areas[i]) / (times[i + 1] - times[i])
                area_since = facts.area_since = areas[i] + slope * (since - times[i])
                facts.since = since
            else:  # the last segment is still growing: not final, not cached
                area_since = areas[i] + float(self._active) * (since - times[i])
        return max((area_now - area_since) / (now - since), 1.0)

    def _rho(
        self, facts: JobFacts, job: ActiveJob, count: int, now: float, area_now: float
    ) -> float:
        """rho of ``job`` at ``count`` > 0 GPUs from its cached facts: :meth:`mean_contention`
        inlined, same float operations in the same order."""
        work = facts.work
        rate = facts.rate
        t_shared = (now - facts.submit) + remaining_work(job, now) / rate(count)
        peak = facts.ladder[-1]
        contention = self._contention(facts, now, area_now)
        if self.ideal == "afs":
            ideal_rate = min(peak / contention * rate(1), rate(peak))
        else:
            share = min(facts.capacity / contention, peak)
            if share < 1:
                ideal_rate = share * rate(1)
            else:
                lo = math.floor(share)
                frac = share - lo
                ideal_rate = rate(lo) + (frac * (rate(lo + 1) - rate(lo)) if frac > 0 else 0.0)
        return t_shared / (work / ideal_rate)

    def _log_t_shared(self, job: ActiveJob, count: int, now: float) -> float:
        """log T_shared of ``job`` at ``count`` GPUs, memoised within one decision (cleared at
        each call of the stage): the auction and each hidden-payment rerun ask for the same
        (job, count) many times, and the value is the same each time."""
        key = (job.spec.id, count, now)
        value = self._lts.get(key)
        if value is None:
            spec = job.spec
            value = self._lts[key] = math.log(
                (now - spec.submit_time) + job.remaining(now) / spec.throughput.rate(count)
            )
        return value

    def _ranked_by_rho(
        self,
        finite: list[tuple[float, float, ActiveJob, tuple[int, ...], JobFacts]],
        held: dict[str, int],
        now: float,
    ) -> list[tuple[float, float, ActiveJob, tuple[int, ...], JobFacts]]:
        """``finite`` with ``-rho`` in front: :meth:`_rho` inlined for the AFS ideal once a
        job's contention integral is cached (every decision after its first), with the same
        float operations in the same order; otherwise :meth:`_rho` itself."""
        area_now = self._area_at(now)
        active = float(max(self._active, 1))
        afs = self.ideal == "afs"
        out = []
        for _, key, job, ladder, f in finite:
            count = held[f.spec.id]
            a = f.area_since
            rate = f.rate_at.get(count)
            if a is None or not afs or rate is None:
                out.append((-self._rho(f, job, count, now, area_now), key, job, ladder, f))
                continue
            work = f.work
            t_shared = (now - f.submit) + remaining_work(job, now) / rate
            since = f.since
            if now - since <= _EPS:
                contention = active
            else:
                contention = max((area_now - a) / (now - since), 1.0)
            rate_one = f.rate_one
            if rate_one is None:
                rate_one = f.rate_one = f.rate(1)
            ideal_rate = min(f.peak / contention * rate_one, f.rate_peak)
            out.append((-(t_shared / (work / ideal_rate)), key, job, ladder, f))
        return out
