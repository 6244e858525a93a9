"""Tiresias-L: discretised two-dimensional least-attained-service (2D-LAS), rigid, preemptive.

The AFS paper's baseline for the job-length-unaware category (000 digest §2.13). Tiresias
(Gu et al., NSDI'19) cannot know job lengths, so it favours jobs that have received little
*service*, measured in two dimensions: GPUs x time. Continuous LAS would preempt constantly, so
priorities are discretised into K queues (a multi-level feedback queue):

* every job enters Q0; once its attained service since it last entered Q0 reaches the queue's
  upper threshold it is demoted to the next queue (it joins that queue's tail);
* queues are served in order; inside a queue running jobs come first, then waiting jobs in the
  order they entered the queue — so jobs of the same queue never preempt each other, only a
  higher queue preempts a lower one (the reason for discretising);
* each job gets exactly its size (requested GPUs; the Fig. 6 variant uses max useful GPUs) or
  nothing; a job that does not fit is skipped (work-conserving backfill, as Tiresias' simulator);
* starvation: a waiting job in a lower queue whose waiting time since it last ran in this stint
  reaches ``PROMOTEKNOB`` x its executed time is promoted back to Q0, and both counters restart.

Defaults (``docs/algorithms/baselines.md``): K = 2 queues, Q0 threshold 3600 GPU-seconds,
PROMOTEKNOB = 8 — the Tiresias paper's settings as reproduced by Vodascheduler
(``pkg/algorithm``: "Settings described in the original Tiresias paper"). Tiresias' own
simulator (``jobs.py``) ships ``queue_limit = [3250, 7200, 18000]`` and runs ``dlas-gpu`` with the
knob off; both are one constructor argument away.

Demotions and promotions happen *between* events, so the stage exposes
:meth:`TiresiasL.next_wakeup`: the earliest time a running job crosses its threshold or a
waiting job becomes due for promotion. The engine then re-decides at exactly that time.

Cost per decision (issue 28): the waiting queue follows the view's change set
(:class:`SizedQueue`), and on the engine's delta path so does the running side
(:mod:`.tiresias_running`): each running job's crossing time and rank are re-computed only
when the change set names it or its crossing time has come, so a decision reads the jobs an
event touched and the few at the preemption boundary, not every running job. The full path
(:meth:`TiresiasL.__call__`: any view, Elastic-Tiresias' base) reads every running job, and
both give the same floats, sequence numbers and wake-up times.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import Field

from gpuplan.models import ActiveJob, ClusterView, InputError, SolverStats

from ... import change_verify
from ...delta import delta_from_changes, delta_from_shares, delta_ready
from ...params import Params
from ...placement.best_fit import best_fit_placement
from ...policy import Decision, Delta, PlacementStage, Shares, StagedPolicy
from ...registry import PolicyDef
from .tiresias_queue import Entry, SizedQueue, SizeFn
from .tiresias_running import RunningSide, changes_by_queue, first_true

Service = Literal["gpu_time", "time"]
"""(job, usable capacity) -> the rigid GPU count the job runs at (0: cannot run)."""

TIRESIAS_THRESHOLDS_GPU_S: tuple[float, ...] = (3600.0,)
"""Upper attained-service limits of Q0..Q(K-2) in GPU-seconds (K = 2 queues)."""
TIRESIAS_PROMOTE_KNOB = 8.0
"""Promote when waiting time >= knob x executed time (None or 0 disables)."""

_SERVICE_EPS = 1e-6  # GPU-seconds: a timer fired at the exact crossing may land a hair short
_TIME_EPS = 1e-6


def requested_size(job: ActiveJob, limit: int) -> int:
    """The job's requested GPU count (the rigid baselines' size)."""
    return job.spec.requested_gpus


def rigid_walk(order: Iterable[tuple[str, int]], capacity: int) -> Shares:
    """Give each ``(job id, size)`` of ``order`` its size while GPUs last; skip misfits.

    The reference semantics of every rigid rank policy here; :meth:`SizedQueue.walk` computes
    the same result without visiting the jobs that are skipped.
    """
    free = capacity
    shares: Shares = {}
    for job_id, need in order:
        if 0 < need <= free:
            shares[job_id] = need
            free -= need
            if free == 0:
                break
    return shares


@dataclass(slots=True)
class _Stint:
    """A job's queue state. Bases are the job's counters when it last entered Q0."""

    queue: int
    seq: int
    service_base: float = 0.0
    held_base: float = 0.0
    pend_base: float | None = None  # total pending time when the job first ran in this stint
    version: int = 0  # invalidates stale promotion timers


class TiresiasL:
    """Shares stage for discretised 2D-LAS; keeps queues between decisions."""

    def __init__(
        self,
        thresholds: tuple[float, ...] = TIRESIAS_THRESHOLDS_GPU_S,
        promote_knob: float | None = TIRESIAS_PROMOTE_KNOB,
        size: SizeFn = requested_size,
        service: Service = "gpu_time",
    ) -> None:
        if service not in ("gpu_time", "time"):
            raise ValueError(f"service must be 'gpu_time' or 'time', got {service!r}")
        if any(t <= 0 for t in thresholds) or list(thresholds) != sorted(set(thresholds)):
            raise ValueError(f"thresholds must be positive and increasing, got {thresholds}")
        if promote_knob is not None and promote_knob < 0:
            raise ValueError(f"promote_knob must be >= 0 or None, got {promote_knob}")
        self.thresholds = tuple(float(t) for t in thresholds)
        self.promote_knob = promote_knob or None
        self.size = size
        self.service = service
        self._last = len(self.thresholds)  # index of the lowest-priority queue
        self._state: dict[str, _Stint] = {}
        # waiting jobs, entries (queue, 1, seq, id): running jobs (queue, 0, seq, id) go first
        self._waiting = SizedQueue(self._entry_of, size)
        self._promote: list[tuple[float, int, str]] = []  # (due time, version, id)
        self._seq = 0
        self._running_at_decision: list[str] | None = []
        """Running jobs at the last full-path decision (None after a fast one)."""
        self._side: RunningSide | None = None
        """The running side (:mod:`.tiresias_running`) after a fast decision, else None."""
        self._decided: tuple[list[tuple[str, int]], list[str]] | None = None
        """The last fast decision's (starts, preempts), until :meth:`next_wakeup`."""

    # ------------------------------------------------------------------ bookkeeping
    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def queue_of(self, job_id: str) -> int | None:
        """Current queue of a known job (0 = highest priority), for inspection and tests."""
        st = self._state.get(job_id)
        return None if st is None else st.queue

    def _stint(self, job_id: str) -> _Stint:
        st = self._state.get(job_id)
        if st is None:
            # Service counts from zero: a job restored from a state file with prior service
            # lands in the queue its total attained service deserves.
            st = self._state[job_id] = _Stint(queue=0, seq=self._next_seq())
        return st

    def snapshot(self) -> dict[str, Any]:
        """Each known job's queue and counter bases, the sequence counter and the jobs that
        ran at the last decision. Waiting order and promotion timers are rebuilt from these at
        the next decision (their due times depend only on the bases)."""
        return {
            "stints": {j: asdict(st) for j, st in self._state.items()},
            "seq": self._seq,
            "running_at_decision": list(
                self._side.rank_of
                if self._running_at_decision is None and self._side is not None
                else self._running_at_decision or []
            ),
        }

    def restore(self, state: dict[str, Any]) -> None:
        self._state = {str(j): _Stint(**st) for j, st in state.get("stints", {}).items()}
        self._seq = int(state.get("seq", 0))
        self._running_at_decision = [str(j) for j in state.get("running_at_decision", [])]
        self._waiting = SizedQueue(self._entry_of, self.size)
        self._promote = []
        self._side = None
        self._decided = None

    def _entry_of(self, job: ActiveJob, now: float) -> Entry:
        st = self._stint(job.spec.id)
        return (st.queue, 1, st.seq, job.spec.id)

    def _arm_promotion(self, job: ActiveJob, st: _Stint, now: float) -> None:
        """Schedule the promotion of a waiting lower-queue job (its due time is fixed while it
        waits: executed time is frozen and waiting time grows at rate 1)."""
        if self.promote_knob is None or st.queue == 0:
            return
        executed = job.held_time_at(now) - st.held_base
        if executed <= 0:
            return
        waited = job.pending_time_at(now) - (st.pend_base if st.pend_base is not None else 0.0)
        st.version += 1
        due = now + self.promote_knob * executed - waited
        heapq.heappush(self._promote, (due, st.version, job.spec.id))

    def _service(self, job: ActiveJob, now: float) -> float:
        """Attained service: GPU-seconds (AFS's Tiresias-L) or executed wall seconds (what the
        upstream Tiresias simulator's ``dlas`` counts)."""
        if self.service == "time":
            return job.held_time_at(now)
        return job.attained_service_at(now)

    def _demote(self, job: ActiveJob, st: _Stint, now: float) -> None:
        service = self._service(job, now) - st.service_base
        while st.queue < self._last and service >= self.thresholds[st.queue] - _SERVICE_EPS:
            st.queue += 1
            st.seq = self._next_seq()

    def _promote_due(self, view: ClusterView) -> None:
        now, heap = view.now, self._promote
        while heap and heap[0][0] <= now + _TIME_EPS:
            _, version, job_id = heapq.heappop(heap)
            st = self._state.get(job_id)
            job = view.pending.get(job_id)
            if st is None or job is None or st.version != version or st.queue == 0:
                continue
            self._waiting.remove(job_id)
            st.queue = 0
            st.seq = self._next_seq()
            st.service_base = self._service(job, now)
            st.held_base = job.held_time_at(now)
            st.pend_base = None
            st.version += 1
            self._waiting.insert(job, self._entry_of(job, now), view.capacity)

    def _wake_at(self, job: ActiveJob, st: _Stint, now: float) -> float:
        """When a running job below the last queue reaches its threshold, computed at ``now``
        (the next-wake-up candidate; the same floats in both paths)."""
        left = self.thresholds[st.queue] - (self._service(job, now) - st.service_base)
        pace = job.gpus if self.service == "gpu_time" else 1
        return now + max(left, 0.0) / pace

    def _crossing(self, job: ActiveJob, st: _Stint, now: float) -> float:
        """The first instant :meth:`_demote`'s test holds for ``job`` (running, not due at
        ``now``) as long as its fields stay as they are; inf in the last queue or with no
        GPUs (its service does not grow)."""
        if st.queue >= self._last or job.gpus <= 0:
            return math.inf
        limit = self.thresholds[st.queue] - _SERVICE_EPS
        base, service = st.service_base, self._service

        def due(t: float) -> bool:
            return service(job, t) - base >= limit

        pace = job.gpus if self.service == "gpu_time" else 1
        guess = now + (limit - (service(job, now) - base)) / pace
        return first_true(due, now, guess)

    def _key_running(self, side: RunningSide, job_id: str, job: ActiveJob, now: float) -> None:
        st = self._state[job_id]
        scale = (
            abs(now)
            + abs(job.anchor_time)
            + (abs(self._service(job, now)) + abs(st.service_base) + self.thresholds[-1])
            / max(1, job.gpus)
        )
        side.put(
            job_id,
            st.queue,
            st.seq,
            self.size(job, side.capacity),
            job.gpus,
            self._crossing(job, st, now),
            scale,
        )

    def _forget_gone(self, view: ClusterView) -> None:
        """Drop the stints of jobs no longer active: those that ran at the last decision
        (full path), or every stint of a job that left (after the fast path, which kept no
        list: a stint exists only for an active job or one that just left)."""
        running, pending = view.running, view.pending
        if self._running_at_decision is not None:
            for job_id in self._running_at_decision:
                if job_id not in running and job_id not in pending:
                    self._state.pop(job_id, None)
            return
        for job_id in [j for j in self._state if j not in running and j not in pending]:
            del self._state[job_id]

    def _demote_running(self, view: ClusterView, jobs: Iterable[str]) -> None:
        """Stint, first-run pending total and demotion for ``jobs`` (running, in the running
        dict's order: new stints and demotions take sequence numbers in that order)."""
        now, running = view.now, view.running
        for job_id in jobs:
            job = running[job_id]
            st = self._stint(job_id)
            if st.pend_base is None:
                st.pend_base = job.pending_time_at(now)
            self._demote(job, st, now)

    def _waiting_side(self, view: ClusterView) -> None:
        """Follow the waiting queue, arm the newcomers' promotions, promote those due."""
        now, running, pending = view.now, view.running, view.pending
        removed, added = self._waiting.sync(view)
        for job_id in removed:
            if job_id not in running:  # finished (or vanished): forget it
                self._state.pop(job_id, None)
        for job_id in added:
            self._arm_promotion(pending[job_id], self._state[job_id], now)
        self._promote_due(view)

    # ------------------------------------------------------------------ the stage
    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        """The full path: every running job's demotion checked and ranked (any view)."""
        self._forget_gone(view)
        self._side = None
        self._decided = None
        self._demote_running(view, view.running)
        self._waiting_side(view)
        self._running_at_decision = list(view.running)
        return self._walk_all(view)

    def _walk_all(self, view: ClusterView) -> Shares:
        state, size, capacity = self._state, self.size, view.capacity
        ranked_running = [
            ((state[j].queue, 0, state[j].seq, j), size(job, capacity))
            for j, job in view.running.items()
        ]
        return self._waiting.walk(ranked_running, capacity)

    def delta(self, view: ClusterView, placement: PlacementStage) -> Delta | Decision | None:
        """The decision as changes. None on a view a delta cannot stand for (checked before
        the stage runs: it keeps state), or for a subclass that decides otherwise.

        With the view's change set following the one of the last fast decision, only the
        running jobs it names and those whose crossing time has come are read
        (:mod:`.tiresias_running`), and the walk yields the starts and preemptions
        (:func:`~.tiresias_running.changes_by_queue`) for :func:`delta_from_changes`.
        Otherwise the running side is rebuilt from every running job first. A decision
        that would resize a running job (its size changed with the capacity) takes the
        full walk and :func:`delta_from_shares`, as before."""
        if not delta_ready(view, placement) or type(self).__call__ is not TiresiasL.__call__:
            return None
        stats: list[SolverStats] = []
        side = self._prepare_fast(view)
        if side.odd:
            self._side = None
            self._running_at_decision = list(view.running)
            return delta_from_shares(view, self._walk_all(view), placement, stats)
        starts, preempts = changes_by_queue(side, self._waiting.buckets, view.capacity)
        self._decided = (starts, preempts)
        return delta_from_changes(view, starts, preempts, placement, stats)

    def _prepare_fast(self, view: ClusterView) -> RunningSide:
        """Bring stints, the running side and the waiting queue up to ``view``."""
        now, running, pending = view.now, view.running, view.pending
        changed = view.changed
        side = self._side
        if (
            side is None
            or self._decided is not None  # the last fast decision was not carried out
            or changed is None
            or not changed.follows(side.seen)
            or view.capacity != side.capacity
            or view.running_since is None
        ):
            self._forget_gone(view)
            self._demote_running(view, running)
            side = self._side = RunningSide(self._last + 1, view.capacity)
            for job_id, job in running.items():
                self._key_running(side, job_id, job, now)
        else:
            jobs = changed.jobs
            for job_id in jobs:
                if job_id not in running:
                    side.drop(job_id)
                    if job_id not in pending:
                        self._state.pop(job_id, None)
            since = view.running_since
            touch = {j for j in jobs if j in running}
            touch.update(side.due(now))
            order = sorted(touch, key=since.__getitem__)
            self._demote_running(view, order)
            for job_id in order:
                self._key_running(side, job_id, running[job_id], now)
            if change_verify.VERIFY:
                self._verify_side(view, side)
        side.seen = None if changed is None else (changed.stream, changed.seq)
        self._running_at_decision = None
        self._decided = None
        self._waiting_side(view)
        return side

    def _verify_side(self, view: ClusterView, side: RunningSide) -> None:
        """Verify mode: the kept running side against one built afresh from every running
        job; raise :class:`~..change_verify.ChangeSetMissed` naming the jobs that differ."""
        now, running = view.now, view.running
        fresh = RunningSide(self._last + 1, view.capacity)
        differ: list[str] = []
        for job_id, job in running.items():
            st = self._state.get(job_id)
            if (
                st is None
                or st.pend_base is None
                or (
                    st.queue < self._last
                    and self._service(job, now) - st.service_base
                    >= self.thresholds[st.queue] - _SERVICE_EPS
                )
            ):
                differ.append(job_id)  # a stint not started or a demotion not done
                continue
            self._key_running(fresh, job_id, job, now)
            if (
                side.rank_of.get(job_id) != fresh.rank_of[job_id]
                or side.cross_of.get(job_id) != fresh.cross_of.get(job_id)
                or (job_id in side.odd) != (job_id in fresh.odd)
            ):
                differ.append(job_id)
        differ += [j for j in side.rank_of if j not in running]
        if differ:
            raise change_verify.missed("running (Tiresias-L crossing/rank)", differ)

    def next_wakeup(self, view: ClusterView) -> float | None:
        """Earliest threshold crossing of a running job or promotion of a waiting one.

        Called after the decision was carried out, so ``view.running`` holds the new
        allocation. Jobs preempted by that decision are queued here at once, so their
        promotion timers exist before the next event. After a fast decision the running
        side takes its starts and preemptions (checked against the running jobs: on any
        difference it is dropped and rebuilt at the next decision) and gives the earliest
        crossing from the few jobs nearest it; else every running job is read.
        """
        now = view.now
        side, decided = self._side, self._decided
        self._decided = None
        if decided is not None and side is not None:
            side = self._take_decision(view, side, *decided)
        elif self._running_at_decision is not None:
            for job_id in self._running_at_decision:
                job = view.pending.get(job_id)
                if job is not None and job_id not in self._waiting:
                    self._queue_preempted(view, job_id, job)
        best = math.inf
        running, state = view.running, self._state
        if side is not None:
            best = side.earliest(lambda j: self._wake_at(running[j], state[j], now))
        else:
            for job_id, job in running.items():
                st = state.get(job_id)
                if st is None or st.queue >= self._last or job.gpus <= 0:
                    continue
                best = min(best, self._wake_at(job, st, now))
        heap = self._promote
        while heap:
            due, version, job_id = heap[0]
            st = state.get(job_id)
            if st is not None and st.version == version and job_id in view.pending:
                best = min(best, due)
                break
            heapq.heappop(heap)
        if best == math.inf:
            return None
        return max(best, now + _TIME_EPS)

    def _queue_preempted(self, view: ClusterView, job_id: str, job: ActiveJob) -> None:
        st = self._stint(job_id)
        self._waiting.insert(job, self._entry_of(job, view.now), view.capacity)
        self._arm_promotion(job, st, view.now)

    def _take_decision(
        self,
        view: ClusterView,
        side: RunningSide,
        starts: list[tuple[str, int]],
        preempts: list[str],
    ) -> RunningSide | None:
        """Apply a fast decision's changes to the running side; None (side dropped) when
        the running jobs are not what they imply (a start the placement left out)."""
        now, running, pending = view.now, view.running, view.pending
        ok = True
        for job_id in preempts:
            side.drop(job_id)
            job = pending.get(job_id)
            if job is None:
                ok = False
            elif job_id not in self._waiting:
                self._queue_preempted(view, job_id, job)
        for job_id, _ in starts:
            job = running.get(job_id)
            if job is None:
                ok = False
            else:
                self._key_running(side, job_id, job, now)
        if ok and len(side) == len(running):
            return side
        self._side = None
        return None


def tiresias_l_shares(
    thresholds: tuple[float, ...] = TIRESIAS_THRESHOLDS_GPU_S,
    promote_knob: float | None = TIRESIAS_PROMOTE_KNOB,
    service: Service = "gpu_time",
) -> TiresiasL:
    """A fresh Tiresias-L shares stage (rigid at requested GPUs)."""
    return TiresiasL(thresholds, promote_knob, service=service)


def tiresias_l_policy(name: str = "tiresias-l", **kwargs: object) -> StagedPolicy:
    """Tiresias-L with best-fit placement and its demotion/promotion timers wired in."""
    stage = tiresias_l_shares(**kwargs)  # type: ignore[arg-type]
    return StagedPolicy(name, stage, best_fit_placement, stage.next_wakeup, memory=stage)


class TiresiasParams(Params):
    thresholds: tuple[float, ...] = Field(
        TIRESIAS_THRESHOLDS_GPU_S,
        min_length=1,
        max_length=16,
        description="upper service limits of Q0..Q(K-2), increasing (K queues)",
    )
    promote_knob: float | None = Field(
        TIRESIAS_PROMOTE_KNOB,
        ge=0,
        le=1e6,
        description="promote to Q0 when waiting >= knob x executed time; null/0: off",
    )
    service: Service = Field(
        "gpu_time",
        description="gpu_time: GPU-seconds (AFS); time: executed seconds (upstream Tiresias dlas)",
    )
    upstream_events: bool = Field(
        False,
        description="as the Tiresias simulator: demotion checked at its whole-second "
        "events, waiting jobs to the back of their queue after each pass (needs "
        "promote_knob: null)",
    )


def _build(p: TiresiasParams, seed: int) -> StagedPolicy:
    if p.upstream_events:
        return _build_upstream(p)
    try:
        return tiresias_l_policy(
            thresholds=p.thresholds, promote_knob=p.promote_knob, service=p.service
        )
    except ValueError as err:
        raise InputError(str(err), field="policies.tiresias-l") from None


def _build_upstream(p: TiresiasParams) -> StagedPolicy:
    """``upstream_events``: the simulator's loop (:mod:`.tiresias_upstream`), imported only
    when asked for."""
    if p.promote_knob:
        raise InputError(
            "upstream_events has no starvation knob (the simulator's dlas-gpu-N "
            "is not ported): set promote_knob to null",
            field="policies.tiresias-l.promote_knob",
        )
    from .tiresias_upstream import UpstreamMLFQ

    try:
        stage = UpstreamMLFQ(p.thresholds, p.service)
    except ValueError as err:
        raise InputError(str(err), field="policies.tiresias-l") from None
    return StagedPolicy("tiresias-l", stage, best_fit_placement, stage.next_wakeup, memory=stage)


POLICIES = [PolicyDef("tiresias-l", _build, TiresiasParams)]
