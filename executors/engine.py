"""The scheduler loop: event -> state update -> policy -> diff into actions -> executor.

One loop drives every executor. The engine owns job *lifecycle* (pending / running / finished,
allocations, counters, which nodes are usable and which GPUs are free) and records metrics
(GPU-time, QL/CE/BI samples, decision latency). The executor owns *progress*.
Node membership/loaning lives in ``engine_nodes`` and plan application in ``engine_apply``
(mixins of :class:`Engine`).
"""

from __future__ import annotations

import logging
import time as wallclock
from collections.abc import Callable, Iterable
from typing import Literal

from gpuplan.models import (
    ActiveJob,
    AllocationPlan,
    CapacityChange,
    Cluster,
    ClusterView,
    Event,
    FreeIndex,
    InputError,
    JobAllocation,
    JobArrival,
    JobCompletion,
    JobFailure,
    JobRecord,
    JobSpec,
    LoanOffer,
    Node,
    NodeFailure,
    NodeRecovery,
    PlanRefused,
    ReclaimRequest,
    RunResult,
    Sample,
    ThroughputMeasured,
    occupy_gpu,
    vacate_gpu,
)
from gpuplan.solver_core.diff import build_delta_plan, build_plan
from gpuplan.solver_core.policy import Decision, Delta, Policy, Reclaimer

from .base import Executor
from .change_log import ChangeLog
from .engine_apply import PlanApplication
from .engine_nodes import NodeMembership, reclaim_least_used
from .metrics import job_record, run_result, take_sample
from .restart_gate import RestartGate, executor_change_costs

PlanHook = Callable[[ClusterView, AllocationPlan], None]
log = logging.getLogger(__name__)
ProgressHook = Callable[[int, float], None]


class Engine(NodeMembership, PlanApplication):
    """Runs ``policy`` over ``executor`` on ``cluster``.

    The policy decides admission (:meth:`Policy.admit`), allocations, its wake-ups and — unless
    ``reclaimer`` is given — which on-loan servers to give back (``policy.reclaimer``, else
    :func:`reclaim_least_used`). GPUs have capacity 1: whole-GPU jobs take a free GPU, jobs
    with ``share`` < 1 share a GPU while their shares sum to at most 1 (``self.shared``).
    """

    def __init__(
        self,
        cluster: Cluster,
        policy: Policy,
        executor: Executor,
        *,
        usable_nodes: Iterable[str] | None = None,
        sample_interval_s: float | None = 3600.0,
        round_interval_s: float | None = None,
        decide_only_at_rounds: bool = False,
        on_plan: PlanHook | None = None,
        reclaimer: Reclaimer | None = None,
        restart_gate: RestartGate | Literal["auto"] | None = "auto",
    ) -> None:
        self.cluster = cluster
        self.policy = policy
        self.executor = executor
        names = (
            list(usable_nodes)
            if usable_nodes is not None
            else [n.name for n in cluster.nodes if n.pool == "training"]
        )
        self.usable: dict[str, Node] = {}
        self.free: dict[str, set[int]] = {}
        self._free_lists: dict[str, list[int]] = {}
        """node -> its free GPUs ascending, re-sorted only when the node changes (so building a
        view does not sort every node's free set on every event)."""
        self._stale: set[str] = set()
        """Nodes whose ``free`` set changed since ``_free_lists`` was last brought up to date."""
        self._capacity = 0
        """Usable GPUs, kept as nodes come and go (read on every event)."""
        self._index = FreeIndex()
        """Usable nodes bucketed by free-GPU count, kept as GPUs are taken and given back
        (delta policies place with it in O(GPUs per node))."""
        self.shared: dict[str, dict[int, float]] = {}
        """node -> GPU -> summed share, for GPUs held by jobs with share < 1 only."""
        self._shared_nodes: set[str] = set()
        """Nodes with a shared GPU now, so a view copies only those (not every node)."""
        for name in names:
            self._add_node(name)
        self.running: dict[str, ActiveJob] = {}
        self.pending: dict[str, ActiveJob] = {}
        self._changes = ChangeLog(executor)
        self._touched = self._changes.touched
        """Jobs written since the last view (see :mod:`.change_log`)."""
        self.shaped: set[str] = set()
        """Active jobs with a node shape (the view passes it on; see ClusterView.shaped)."""
        self.records: list[JobRecord] = []
        self.rejected: list[tuple[str, str]] = []
        self.samples: list[Sample] = []
        self.decision_ms: list[float] = []
        self.solver_calls = 0
        self.solver_fallbacks = 0
        self.solver_ms: list[float] = []
        self.skipped_grows = 0
        """Grows not carried out because their restart would cost more than they save."""
        self.events = 0
        self.now: float | None = None
        self.start_time: float | None = None
        self.gpu_seconds_allocated = 0.0
        self.gpu_seconds_capacity = 0.0
        self._allocated = 0.0
        """GPUs allocated, shares counted as fractions (for utilisation)."""
        self._sample_interval = sample_interval_s
        self._next_sample: float | None = None
        self._round = round_interval_s
        if decide_only_at_rounds and not round_interval_s:
            raise InputError("decide_only_at_rounds needs round_interval_s", field="engine")
        self._only_rounds = decide_only_at_rounds
        self._next_round: float | None = None
        """With ``decide_only_at_rounds``: the next boundary at which the policy is asked."""
        self._timer_at: float | None = None
        self._recoveries: list[tuple[float, str]] = []
        self.on_plan = on_plan
        self.reclaimer: Reclaimer = reclaimer or policy.reclaimer or reclaim_least_used
        self.plans_refused = 0
        self.on_loan: list[str] = []
        self.down: set[str] = set()
        self.reclaim_log: list[tuple[float, list[str]]] = []
        self._degraded = self._warn_if_degraded()
        self.degraded_resizes = 0
        """Resizes of a policy that wants them stop-free, carried out by a restart."""
        if restart_gate == "auto":  # on where the executor measures change costs (real ones)
            costs = executor_change_costs(executor)
            restart_gate = None if costs is None else RestartGate(costs=costs)
        self.restart_gate: RestartGate | None = restart_gate
        """Drops the changes to running jobs that cost more than they gain (see
        :mod:`.restart_gate`); None: the policy's plan is carried out as it is."""

    def _warn_if_degraded(self) -> bool:
        """A policy that wants stop-free resizing (``wants_in_place_resize``) on an executor
        that resizes by restart still runs, every resize paying the restart: say so once, at
        start, and count those resizes (:attr:`degraded_resizes`)."""
        caps = self.executor.capabilities
        if not getattr(self.policy, "wants_in_place_resize", False) or caps.resize != "restart":
            return False
        log.warning("policy %s wants stop-free (in-place) resizing, but %s resizes by "
                    "checkpoint-restart: each resize is carried out as a restart and accounted "
                    "at its restart latency of %g s", self.policy.name,
                    type(self.executor).__name__, caps.restart_latency_s)
        return True

    @property
    def capacity(self) -> int:
        """Usable GPUs now."""
        return self._capacity

    # ------------------------------------------------------------------ job state helpers
    def _release(self, job: ActiveJob) -> None:
        alloc = job.allocation
        if alloc is None:
            return
        share = alloc.share
        whole = share >= 1.0  # vacate_gpu of a whole GPU only adds it back
        all_free, all_shared, stale, index = self.free, self.shared, self._stale, self._index
        for node, gpus in alloc.placement.items():
            free = all_free.get(node)
            if free is not None:
                shared = all_shared[node]
                stale.add(node)
                if whole:
                    free.update(gpus)
                else:
                    for g in gpus:
                        vacate_gpu(free, shared, g, share)
                index.set(node, len(free))
                if not shared:
                    self._shared_nodes.discard(node)
        self._allocated -= job.gpus * share

    def _acquire(self, job: ActiveJob) -> None:
        alloc = job.allocation
        assert alloc is not None
        share = alloc.share
        whole = share >= 1.0
        all_free, stale, index = self.free, self._stale, self._index
        for node, gpus in alloc.placement.items():
            free = all_free[node]
            stale.add(node)
            if whole and free.issuperset(gpus):  # occupy_gpu of free whole GPUs: discards
                free.difference_update(gpus)
            else:
                shared = self.shared[node]
                for g in gpus:
                    if not occupy_gpu(free, shared, g, share):
                        raise RuntimeError(
                            f"plan gives GPU {node}:{g} to {job.id} but it is taken")
            index.set(node, len(free))
            if not whole:
                self._shared_nodes.add(node)
        self._allocated += job.gpus * share

    def adopt(self, job: ActiveJob, allocation: JobAllocation) -> None:
        """Hold ``job`` as running on ``allocation``, the whole GPUs an executor observed it on
        (a job adopted after a controller restart, or one Slurm placed otherwise than planned):
        the books follow what runs, never an assumption. Raises RuntimeError, books unchanged,
        when a node is not usable or one of those GPUs is held by another job."""
        previous = job.allocation if self.running.get(job.id) is job else None
        if previous is not None:
            self._release(job)
        taken = [f"{n}:{g}" for n, gpus in allocation.placement.items()
                 for g in gpus if n not in self.free or g not in self.free[n]]
        if taken:
            if previous is not None:
                self._acquire(job)
            raise RuntimeError(f"cannot adopt {job.id}: GPUs {taken} are not free")
        job.set_allocation(allocation)
        self._changes.wrote(job.id, entered=job.id not in self.running)
        self._acquire(job)
        self.pending.pop(job.id, None)
        job.status = "running"
        self.running[job.id] = job
        self._note_shape(job.spec)

    def add_pending(self, job: ActiveJob) -> None:
        """Hold ``job`` as pending without an arrival (a held job a restarted controller
        adopts with its journaled progress). Every way into the engine's books goes through
        here, :meth:`adopt` or an arrival, so a job's node shape is always known to the
        policy (``ClusterView.shaped``: the delta fast path and the shape guard read it)."""
        job.status = "pending"
        self.pending[job.id] = job
        self._touched.add(job.id)
        self._note_shape(job.spec)

    def _note_shape(self, spec: JobSpec) -> None:
        if spec.node_shape is not None:
            self.shaped.add(spec.id)

    def _to_pending(self, job: ActiveJob, now: float) -> None:
        self._changes.left(job.id)
        self.running.pop(job.id, None)
        job.set_allocation(None)
        job.status = "pending"
        job.pending_since = now
        self.pending[job.id] = job

    # ------------------------------------------------------------------ metrics
    def _advance_clock(self, now: float) -> None:
        if self.now is None:
            self.now = self.start_time = now
            if self._sample_interval:
                self._next_sample = now
        if self._next_sample is not None and self._sample_interval \
                and self._next_sample <= now:
            jobs = [*self.running.values(), *self.pending.values()]
            while self._next_sample <= now:
                self.samples.append(take_sample(self._next_sample, jobs, self.capacity))
                self._next_sample += self._sample_interval
        dt = now - self.now
        if dt > 0:
            self.gpu_seconds_allocated += self._allocated * dt
            self.gpu_seconds_capacity += self._capacity * dt
        self.now = now

    # ------------------------------------------------------------------ events
    def _on_arrival(self, spec: JobSpec, now: float) -> None:
        if spec.id in self.running or spec.id in self.pending:
            self.rejected.append((spec.id, "duplicate job id"))
            return
        refused = self.policy.admit(spec, self.cluster)
        if refused is not None:
            self.rejected.append((spec.id, refused))
            return
        job = ActiveJob(spec=spec, anchor_time=now, resume_time=now, pending_since=now)
        self.pending[spec.id] = job
        self._touched.add(spec.id)
        self._note_shape(spec)

    def _on_completion(self, job_id: str, now: float) -> None:
        job = self.running.get(job_id)
        if job is None:
            return
        self._changes.left(job_id)
        job.settle(now)
        job.done = job.spec.work
        self._release(job)
        del self.running[job_id]
        job.status = "finished"
        self.shaped.discard(job_id)
        job.finish_time = now
        job.set_allocation(None)
        job.rate = 0.0
        self.records.append(self._record(job))

    def _on_failure(self, job_id: str, reason: str, now: float) -> None:
        job = self.running.get(job_id) or self.pending.get(job_id)
        if job is None:
            return
        self._changes.left(job_id)
        job.settle(now)
        self._release(job)
        self.running.pop(job_id, None)
        self.pending.pop(job_id, None)
        job.set_allocation(None)
        job.status = "finished"
        self.shaped.discard(job_id)
        job.rate = 0.0
        record = self._record(job)
        self.records.append(record.model_copy(update={"failed": True, "failure": reason}))

    def _record(self, job: ActiveJob) -> JobRecord:
        return job_record(job, self.now)

    def handle(self, now: float, events: list[Event]) -> AllocationPlan:
        """Apply one batch of simultaneous events, decide, and carry the plan out."""
        self._advance_clock(now)
        for event in events:
            self.events += 1
            if isinstance(event, JobArrival):
                self._on_arrival(event.job, now)
            elif isinstance(event, JobCompletion):
                self._on_completion(event.job_id, now)
            elif isinstance(event, JobFailure):
                self._on_failure(event.job_id, event.reason, now)
            elif isinstance(event, CapacityChange):
                for name in event.nodes:
                    if event.change in ("loan", "add"):
                        self._add_node(name)
                    else:
                        self._remove_node(name, now, graceful=True)
            elif isinstance(event, LoanOffer):
                self._loan(event.count, event.pool)
            elif isinstance(event, ReclaimRequest):
                self._reclaim(event.count, now)
            elif isinstance(event, ThroughputMeasured):
                self._on_measured(event.job_id, event.points)
            elif isinstance(event, NodeFailure):
                self.down.add(event.node)
                self._remove_node(event.node, now, graceful=False)
                if event.recover_after is not None:
                    self.executor.wake_at(now + event.recover_after)
                    self._recoveries.append((now + event.recover_after, event.node))
            elif isinstance(event, NodeRecovery):
                self.down.discard(event.node)
                self._add_node(event.node)
        self._recover_due(now)
        if self._only_rounds:
            return self._round_gate(now)
        return self._decided(self.decide(now))

    def _decided(self, plan: AllocationPlan) -> AllocationPlan:
        """Count every job of a carried-out plan as written (settled, started, stopped,
        resized, moved) for the next view's change set; number the started ones in the order
        ``_apply`` appended them to ``running``."""
        for a in plan.actions:
            self._changes.wrote(a.job_id, entered=a.kind == "start")
        return plan

    def _round_gate(self, now: float) -> AllocationPlan:
        """Pollux/Gavel rounds: decide at boundaries only; between them events just update
        state (a finished job's GPUs stay idle until the next boundary)."""
        assert self._round is not None
        if self._next_round is None:
            self._next_round = now  # the first event opens the first round
        if now + 1e-9 >= self._next_round:
            while self._next_round <= now + 1e-9:
                self._next_round += self._round
            plan = self._decided(self.decide(now))
        else:
            plan = AllocationPlan.model_construct(time=now, policy=self.policy.name,
                                                  allocations={}, actions=[], stats=[],
                                                  decision_ms=0.0)
        if (self.running or self.pending) and (
                self._timer_at is None or self._timer_at <= now
                or self._next_round < self._timer_at):
            self.executor.wake_at(self._next_round)
            self._timer_at = self._next_round
        return plan

    def _recover_due(self, now: float) -> None:
        due = [n for t, n in self._recoveries if t <= now]
        if due:
            self._recoveries = [(t, n) for t, n in self._recoveries if t > now]
            for name in due:
                self.down.discard(name)
                self._add_node(name)

    def _on_measured(self, job_id: str, points: dict[int, float]) -> None:
        """Replace the job's believed curve by what has been measured so far (AFS §4.5)."""
        job = self.running.get(job_id) or self.pending.get(job_id)
        if job is None:
            return
        self._touched.add(job_id)
        job.measured.update(points)
        belief = job.spec.throughput.believed_from(dict(job.measured))
        job.spec = job.spec.model_copy(update={"throughput": belief})

    def _refresh_free_lists(self) -> None:
        """Re-sort the free lists of the nodes changed since the last view (only those)."""
        if self._stale:
            lists, free = self._free_lists, self.free
            for node in self._stale:
                lists[node] = sorted(free[node])
            self._stale.clear()

    def _free_view(self) -> dict[str, list[int]]:
        """Every usable node's free GPUs, ascending: only nodes changed since the last view
        are re-sorted. The lists are shared between views (policies never mutate a view, and
        every placement stage copies what it edits); the dict itself is fresh each time."""
        self._refresh_free_lists()
        return dict(self._free_lists)

    def view(self, now: float, live: bool = False) -> ClusterView:
        """The policy's view. ``live``: ``free`` is the engine's own per-node lists (no
        O(nodes) copy) and the view carries the free-count index; only for delta decisions,
        which read both before the plan is applied and keep neither."""
        if live:
            self._refresh_free_lists()
        return ClusterView(
            now=now,
            cluster=self.cluster,
            nodes=self.usable,
            free=self._free_lists if live else self._free_view(),
            running=self.running,
            pending=self.pending,
            shared={n: dict(self.shared[n]) for n in sorted(self._shared_nodes)},
            shaped=self.shaped,
            interference=self.executor.observed_interference(now),
            capacity=self._capacity,
            free_index=self._index if live else None,
            changed=self._changes.take(),
            running_since=self._changes.since,
        )

    def _decide_delta(self, now: float) -> tuple[ClusterView, Delta | Decision, float] | None:
        """Ask a policy that offers a delta (``decide_delta``) for one on a live view; None
        when it offers none or declines this view (a stage may also answer with a full
        :class:`Decision` it built on the live view). Never with an ``on_plan`` hook, which
        reads the plan's full ``allocations``."""
        delta_of = getattr(self.policy, "decide_delta", None)
        if delta_of is None or self.on_plan is not None:
            return None
        view = self.view(now, live=True)
        t0 = wallclock.perf_counter()
        delta = delta_of(view)
        return None if delta is None else (view, delta, t0)

    check_delta_plans = False
    """Re-check plans built from a policy's delta (``check_actions`` in :meth:`Executor.accept`)
    on every executor. Off by default: an executor that trusts built plans (the simulator,
    ``Executor.trusts_built_plans``) then skips the check, as their starts are on GPUs the
    engine's free index holds and ``_acquire`` still refuses a taken GPU; the tests turn it on."""

    def decide(self, now: float) -> AllocationPlan:
        fast = self._decide_delta(now)
        built = False
        if fast is not None:
            view, answer, t0 = fast
            stats = answer.stats
            if isinstance(answer, Delta):
                plan = build_delta_plan(view, answer, self.policy.name)
                built = not self.check_delta_plans
            else:
                plan = build_plan(view, answer, self.policy.name)
        else:
            view = self.view(now)
            t0 = wallclock.perf_counter()
            decision = self.policy.decide(view)
            stats = decision.stats
            plan = build_plan(view, decision, self.policy.name)
        ms = (wallclock.perf_counter() - t0) * 1000.0
        # build_plan / build_delta_plan set every field, decision_ms included (so it is in the
        # fields set already): a plain write is what pydantic's __setattr__ would do, cheaper.
        plan.__dict__["decision_ms"] = ms
        self.decision_ms.append(ms)
        if stats:
            self.solver_calls += len(stats)
            self.solver_fallbacks += sum(1 for s in stats if s.fell_back)
            self.solver_ms.extend(s.wall_ms for s in stats)
        if self.on_plan is not None:
            self.on_plan(view, plan)
        try:
            self.executor.accept(view, plan, built=built)
        except PlanRefused:
            self.plans_refused += 1
            raise
        self._apply(plan, now)
        self._schedule_wakeup(view)
        return plan

    def _schedule_wakeup(self, view: ClusterView) -> None:
        wanted = self.policy.next_wakeup(view)
        if self._round is not None and self.running:
            boundary = view.now + self._round
            wanted = boundary if wanted is None else min(wanted, boundary)
        if wanted is None or wanted <= view.now:
            return
        if self._timer_at is None or self._timer_at <= view.now or wanted < self._timer_at:
            self.executor.wake_at(wanted)
            self._timer_at = wanted

    # ------------------------------------------------------------------ loop
    def run(self, progress: ProgressHook | None = None) -> None:
        """Handle events until the executor has none left."""
        while True:
            batch = self.executor.next_events()
            if batch is None:
                break
            now, events = batch
            self.handle(now, events)
            if progress is not None:
                progress(len(self.records), now)

    def result(self, scenario: str = "", seed: int = 0, wall_s: float = 0.0) -> RunResult:
        """Records of finished jobs plus unfinished ones (finish None)."""
        return run_result(self, scenario, seed, wall_s)
