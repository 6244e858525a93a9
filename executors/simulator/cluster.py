"""A discrete-event simulated GPU cluster.

A heap of typed events (arrivals, predicted completions, timers, failures) — no fixed-step
ticking. Between events every running job progresses at a constant rate (its throughput on its
placement), so progress is integrated exactly as a piecewise-constant function.

Overheads (``Overheads``): a start, resize, migration or restart after preemption pauses the
job's progress for a configurable time while it keeps its GPUs. A preemption loses the work since
the job's last checkpoint (nothing if it checkpoints on signal; the tail since the last periodic
checkpoint if it checkpoints every ``interval_s``; everything if it never checkpoints).

A completion is predicted whenever a job's rate changes; a stale prediction is skipped by
comparing a per-job version number, so resizes never leave phantom completions behind.

CoDDL's mechanisms (000 digest §4.1) are modelled by two knobs: with ``stop_free`` resizes and
``expand_prep_s`` > 0 a growing job keeps training on its old GPUs while the new ones prepare,
then switches in ``stop_free_s`` (concurrent share expansion); with ``cancel_inflight`` False a
new order for a job that is still reconfiguring waits for the in-flight one (no reconfiguration
cancelling: orders run back to back). Cancelling applies to reconfigurations only: a job still
inside its start (or restart) pause cannot be reconfigured before it is up, so an order during
that pause begins when the start ends (the start's cost is never cancelled away).

Per-direction resize costs and SideCar early initialisation (EDL/SideCar, 003/004 digests):
``resize_up_s`` / ``resize_down_s`` override the mode's resize cost for grows / shrinks (EDL's
stop-free scale-out vs graceful scale-in; SideCar's 37 s up vs 27 s down); with
``early_init_s`` > 0 a shrink in a plan that also starts a job keeps its old rate that long,
then pauses for its shrink cost, and the started job trains once both are over. Executor-
internal events (``_push_internal`` / ``_internal``) let subclasses such as the straggler
simulator (``stragglers.py``) change a job's speed without an engine event.

Shared GPUs: a job with ``share`` < 1 runs at that fraction of its rate, times the factor an
:class:`~gpuplan.models.interference.InterferenceModel` gives for the jobs co-located on its
GPUs (none by default). Whenever the set of jobs on a shared GPU changes (a start, a move, a
``reshare``, a preemption or a completion), every job left on it is re-rated at that instant.

Throughput learning (AFS §4.5): with a :class:`LearningSpec` enabled, the engine is told only a
linear belief on arrival and then measured points (``ThroughputMeasured`` events) after a job
has run on a share; the simulator alone keeps the true curves.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuplan.models import (
    ActiveJob,
    AllocationPlan,
    Cluster,
    Event,
    JobArrival,
    JobCompletion,
    JobSpec,
    LearningSpec,
    Overheads,
    ThroughputMeasured,
    ThroughputProfile,
    Timer,
    allocatable_units,
    placement_rate,
)
from gpuplan.models.bounds import SIMULATION_HORIZON_S
from gpuplan.models.interference import InterferenceModel
from gpuplan.models.state import NO_OBSERVATIONS

from ..base import Executor, ExecutorCapabilities
from .observe import ObservedInterference

_COMPLETION, _ARRIVAL, _OTHER, _TIMER, _SWITCH, _INTERNAL = 0, 1, 2, 3, 4, 5


@dataclass(slots=True)
class Segment:
    """One constant-rate stretch of a job's execution (recorded for invariant tests)."""

    job_id: str
    start: float
    end: float
    rate: float
    gpus: int


class SimulatedCluster(Executor):
    """The simulated executor. Feed it jobs (and optional external events), then run an Engine."""

    trusts_built_plans = True  # the engine's delta plans skip the re-check (docs/performance.md)

    def __init__(
        self,
        cluster: Cluster,
        jobs: Iterable[JobSpec],
        overheads: Overheads | None = None,
        events: Iterable[Event] = (),
        record_segments: bool = False,
        learning: LearningSpec | None = None,
        horizon_s: float = SIMULATION_HORIZON_S,
        interference: InterferenceModel | None = None,
        seed: int = 0,
    ) -> None:
        self.cluster = cluster
        self.interference = interference
        self.seed = seed
        """Seeds the collision draws of :meth:`observed_interference` (nothing else)."""
        self._colocated: dict[tuple[str, int], set[str]] = {}
        """(node, GPU) -> jobs holding a share < 1 of it."""
        self.horizon_s = horizon_s
        """Simulated time at which the run ends, jobs still running or pending reported as
        unfinished (see ``models/bounds.py``)."""
        self.learning = learning if learning is not None and learning.enabled else None
        self._true: dict[str, JobSpec] = {}
        self._reported: dict[str, set[int]] = {}
        self._busy_until: dict[str, float] = {}
        self._starting_until: dict[str, float] = {}
        """Job -> end of its start/restart pause: resizes and migrations wait for it."""
        self._jobs_by_id: dict[str, ActiveJob] = {}
        self.touched: set[str] = set()
        """Jobs written since the engine last took the set: every rate change goes through
        :meth:`_predict_completion`, every stop through :meth:`_stop`, and :meth:`apply`
        names its plan's jobs (the engine's ``ClusterView.changed``)."""
        self.overheads = overheads or Overheads()
        mode = self.overheads.resize_mode
        self.capabilities = ExecutorCapabilities(
            resize="in_place" if mode == "stop_free" else "restart",
            pin_gpus=True,
            preempt_modes=("checkpoint", "kill"),
            restart_latency_s=self.overheads.resize_cost_for(True),
            fractional_gpus=True,
        )
        self._heap: list[tuple[float, int, int, object]] = []
        self._seq = 0
        self._version: dict[str, int] = {}
        self.now = 0.0
        self.segments: list[Segment] | None = [] if record_segments else None
        self._open: dict[str, Segment] = {}
        for spec in jobs:
            self._true[spec.id] = spec
            self._push(spec.submit_time, _ARRIVAL, spec)
        for event in events:
            self._push(event.time, _OTHER, event)

    def _push(self, time: float, kind: int, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time, kind, self._seq, payload))

    # ------------------------------------------------------------------ events
    def next_events(self) -> tuple[float, list[Event]] | None:
        heap = self._heap
        while heap:
            time = heap[0][0]
            if time > self.horizon_s:
                return None
            batch: list[Event] = []
            while heap and heap[0][0] == time:
                _, kind, _, payload = heapq.heappop(heap)
                if kind == _COMPLETION:
                    job_id, version = payload  # type: ignore[misc]
                    if self._version.get(job_id) != version:
                        continue
                    if self.segments is not None:
                        self._close_segment(job_id, time)
                    if self._colocated:  # else the job held no shared GPU: nothing to re-rate
                        self._leave_shared(job_id, time)
                    batch.append(JobCompletion(time=time, job_id=job_id))
                elif kind == _ARRIVAL:
                    batch.append(JobArrival(time=time, job=self._believed(payload)))
                elif kind == _SWITCH:
                    self._switch(time, payload)  # type: ignore[arg-type]
                elif kind == _INTERNAL:
                    self._internal(time, payload)
                elif kind == _TIMER:
                    batch.append(Timer(time=time))
                else:
                    batch.append(payload)  # type: ignore[arg-type]
            if batch:
                self.now = time
                return time, batch
        return None

    def wake_at(self, time: float) -> None:
        self._push(time, _TIMER, None)

    # ------------------------------------------------------------------ actions
    def _believed(self, spec: JobSpec) -> JobSpec:
        """What the engine may know on arrival: the true spec, or in learning mode only a linear
        extrapolation of the one-GPU rate (the user submits a single-GPU model)."""
        if self.learning is None:
            return spec
        one = spec.throughput.rate(1)
        belief = ThroughputProfile(
            points={1: one},
            reference_gpu=spec.throughput.reference_gpu,
            extrapolation="linear",
            source="linear assumption",
        )
        return spec.model_copy(update={"throughput": belief})

    def true_rate(self, job: ActiveJob) -> float:
        spec = self._true.get(job.id, job.spec)
        rate = placement_rate(spec, self.cluster, job.allocation)
        alloc = job.allocation
        if self.interference is None or alloc is None or alloc.share >= 1.0 or rate <= 0:
            return rate
        worst = 1.0
        for node, gpus in alloc.placement.items():
            for g in gpus:
                others = [
                    self._true.get(o) or self._jobs_by_id[o].spec
                    for o in sorted(self._colocated.get((node, g), ()))
                    if o != job.id
                ]
                if others:
                    worst = min(worst, self.interference.factor(spec, others))
        return rate * worst

    # ------------------------------------------------------------------ shared GPUs
    def observed_interference(self, now: float) -> Mapping[tuple[str, int], float]:
        """What a monitor on each shared GPU would report now (see :mod:`.observe`); empty
        without an interference model, and computed only if a policy reads it."""
        if self.interference is None:
            return NO_OBSERVATIONS
        return ObservedInterference(self, now)

    def _shared_gpus(self, alloc: object) -> list[tuple[str, int]]:
        if alloc is None or alloc.share >= 1.0:  # type: ignore[attr-defined]
            return []
        return [(n, g) for n, gs in alloc.placement.items() for g in gs]  # type: ignore[attr-defined]

    def _leave_shared(self, job_id: str, now: float) -> None:
        """A job left its shared GPUs outside a plan (completion): re-rate who stays."""
        job = self._jobs_by_id.get(job_id)
        if job is None:
            return
        touched: set[tuple[str, int]] = set()
        for key in self._shared_gpus(job.allocation):
            self._colocated.get(key, set()).discard(job_id)
            touched.add(key)
        self._rerate(touched, {job_id}, now)

    def _rerate(self, gpus: set[tuple[str, int]], skip: set[str], now: float) -> None:
        """Re-rate running jobs on ``gpus`` (other than ``skip``) whose neighbours changed."""
        if self.interference is None or not gpus:
            return
        for job_id in sorted({j for key in gpus for j in self._colocated.get(key, ())} - skip):
            job = self._jobs_by_id[job_id]
            if job.status != "running" or job.rate <= 0:
                continue
            job.settle(now)
            self._close_segment(job_id, now)
            job.segment_start = now
            job.rate = self.true_rate(job)
            self._predict_completion(job)

    def apply(self, plan: AllocationPlan, jobs: Mapping[str, ActiveJob]) -> None:
        now = plan.time
        self.touched.update(jobs)
        touched: set[tuple[str, int]] = set()
        for action in plan.actions:  # who sits on which shared GPU after this plan
            self._jobs_by_id[action.job_id] = jobs[action.job_id]
            for key in self._shared_gpus(action.before):
                self._colocated.get(key, set()).discard(action.job_id)
                touched.add(key)
            for key in self._shared_gpus(action.after):
                self._colocated.setdefault(key, set()).add(action.job_id)
                touched.add(key)
        self._apply_actions(plan, jobs, now)
        self._rerate(touched, {a.job_id for a in plan.actions}, now)

    def _apply_actions(
        self, plan: AllocationPlan, jobs: Mapping[str, ActiveJob], now: float
    ) -> None:
        ov = self.overheads
        # SideCar early initialisation: a shrink in a plan that also starts a job is delayed
        # while the new job's container comes up (off unless early_init_s > 0).
        early = (
            ov.early_init_s
            if ov.early_init_s > 0 and any(a.kind == "start" for a in plan.actions)
            else 0.0
        )
        early_pause = 0.0
        if early:
            shrinks = [
                a for a in plan.actions if a.kind == "resize" and a.gpus_after < a.gpus_before
            ]
            early = early if shrinks else 0.0
            early_pause = early + ov.resize_cost_for(False) if shrinks else 0.0
        for action in plan.actions:
            job = jobs[action.job_id]
            kind = action.kind
            if kind == "keep":
                continue
            if kind == "reshare":  # a new fraction of the same GPUs: no restart, no pause
                self._close_segment(job.id, now)
                job.segment_start = now
                job.rate = self.true_rate(job)
                self._predict_completion(job)
                continue
            if kind == "preempt":
                self._stop(job, now, graceful=True)
                self._busy_until.pop(job.id, None)
                self._starting_until.pop(job.id, None)
                continue
            # Without reconfiguration cancelling, an order waits for the in-flight one; with
            # it, an order still waits for a start in progress (only reconfigurations cancel).
            begin = now
            if not ov.cancel_inflight:
                begin = max(now, self._busy_until.get(job.id, now))
            if kind != "start":
                begin = max(begin, self._starting_until.get(job.id, now))
            grow_concurrently = (
                kind == "resize"
                and ov.resize_mode == "stop_free"
                and ov.expand_prep_s > 0
                and action.gpus_after > action.gpus_before
                and job.rate > 0
            )
            self._close_segment(job.id, now)
            job.segment_start = now
            if grow_concurrently:
                # Keep the old rate (job.rate unchanged) until the new GPUs are ready.
                switch_at = begin + ov.expand_prep_s
                self._predict_completion(job)
                self._push(switch_at, _SWITCH, (job.id, self._version[job.id], ov.stop_free_s))
                self._busy_until[job.id] = switch_at + ov.stop_free_s
                self._measure(job, switch_at + ov.stop_free_s)
                continue
            if (
                early
                and kind == "resize"
                and action.gpus_after < action.gpus_before
                and job.rate > 0
            ):
                # Keep the old rate until the incoming job is initialised, then stop.
                down = ov.resize_cost_for(False)
                switch_at = begin + early
                job.last_checkpoint_done = job.done_at(switch_at)
                self._predict_completion(job)
                self._push(switch_at, _SWITCH, (job.id, self._version[job.id], down))
                self._busy_until[job.id] = switch_at + down
                continue
            if kind == "start":
                pause = ov.start_s if job.preemptions == 0 else ov.restart_s
                if early_pause:
                    pause = early_pause
            elif kind == "resize":
                pause = ov.resize_cost_for(action.gpus_after > action.gpus_before)
                if ov.resize_mode != "stop_free":
                    job.last_checkpoint_done = job.done
            else:  # migrate
                pause = ov.migrate_s
                job.last_checkpoint_done = job.done
            job.rate = self.true_rate(job)
            job.resume_time = begin + pause
            self._busy_until[job.id] = job.resume_time
            if kind == "start":
                self._starting_until[job.id] = job.resume_time
            self._predict_completion(job)
            self._measure(job, job.resume_time)

    def _internal(self, time: float, payload: object) -> None:
        """An executor-internal event (no engine event): subclasses such as the straggler
        simulator (``stragglers.py``) push them with :meth:`_push_internal`."""

    def _push_internal(self, time: float, payload: object) -> None:
        self._push(time, _INTERNAL, payload)

    def _switch(self, time: float, payload: tuple[str, int, float]) -> None:
        """Concurrent expansion (or a SideCar early-initialised shrink) done: the job moves to
        its new share after a pause of ``payload[2]`` seconds."""
        job_id, version, pause = payload
        job = self._jobs_by_id.get(job_id)
        if job is None or self._version.get(job_id) != version:
            return
        job.settle(time)
        self._close_segment(job_id, time)
        job.rate = self.true_rate(job)
        job.resume_time = time + pause
        job.segment_start = time
        self._predict_completion(job)

    def _measure(self, job: ActiveJob, ready_at: float) -> None:
        """Learning mode: report the allocatable units <= the job's share not yet measured."""
        if self.learning is None:
            return
        done = self._reported.setdefault(job.id, set())
        units = [
            u for u in allocatable_units(job.gpus, self.cluster.gpus_per_node) if u not in done
        ]
        if not units:
            return
        done.update(units)
        true = self._true.get(job.id, job.spec).throughput
        event = ThroughputMeasured(
            time=ready_at + self.learning.measure_s,
            job_id=job.id,
            points={u: true.rate(u) for u in units},
        )
        self._push(event.time, _OTHER, event)

    def evict(self, job: ActiveJob, now: float, graceful: bool) -> None:
        self._stop(job, now, graceful)
        touched: set[tuple[str, int]] = set()
        for key in self._shared_gpus(job.allocation):
            self._colocated.get(key, set()).discard(job.id)
            touched.add(key)
        self._rerate(touched, {job.id}, now)

    def _stop(self, job: ActiveJob, now: float, graceful: bool) -> None:
        """Take a job off its GPUs, rolling progress back to its last checkpoint."""
        self.touched.add(job.id)
        self._close_segment(job.id, now)
        ck = job.spec.checkpoint
        ran_since = max(job.segment_start, job.resume_time)
        if graceful and ck.on_signal:
            loss = 0.0
        elif ck.interval_s is not None:
            run = max(0.0, now - ran_since)
            loss = job.rate * (run % ck.interval_s)
        else:
            loss = job.done - job.last_checkpoint_done
        loss = min(loss, job.done - job.last_checkpoint_done)
        if loss > 0:
            job.done -= loss
            job.lost_work += loss
        job.last_checkpoint_done = job.done
        job.rate = 0.0
        self._version[job.id] = self._version.get(job.id, 0) + 1

    def _predict_completion(self, job: ActiveJob) -> None:
        """Called after every write to a job's rate or pause: also records the job as
        written (``touched``)."""
        job_id = job.id
        self.touched.add(job_id)
        version = self._version.get(job_id, 0) + 1
        self._version[job_id] = version
        rate = job.rate
        if rate <= 0.0:
            return
        anchor, resume = job.anchor_time, job.resume_time
        start = resume if resume > anchor else anchor  # max(anchor, resume), as before
        finish = start + (job.spec.work - job.done) / rate
        self._seq += 1  # self._push, inlined (once per start)
        heapq.heappush(self._heap, (finish, _COMPLETION, self._seq, (job_id, version)))
        if self.segments is not None:
            self._open[job_id] = Segment(job_id, start, finish, rate, job.gpus)

    def _close_segment(self, job_id: str, now: float) -> None:
        if self.segments is None:
            return
        seg = self._open.pop(job_id, None)
        if seg is not None:
            seg.end = max(seg.start, now)
            self.segments.append(seg)
