"""The scheduler loop: event -> state update -> policy -> diff into actions -> executor.

One loop drives every executor. The engine owns job *lifecycle* (pending / running / finished,
allocations); the executor owns *progress*. The engine is three parts: this event loop, the
GPU books it keeps through :class:`~.ledger.GpuLedger` (usable nodes, free and shared GPUs,
capacity, loaned servers) and what it measures through :class:`~.recorder.RunRecorder`
(records, samples, GPU-time, latencies, counters). The loop's own code is split by purpose
into mixins of :class:`Engine`: asking the policy and having its plan accepted
(``engine_decide``), carrying an accepted plan out in the books (``engine_apply``), and nodes
joining and leaving, loans and reclaims (``engine_nodes``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from operator import attrgetter
from types import MappingProxyType
from typing import Any, Literal

from gpuplan.models import (
    ActiveJob,
    AllocationPlan,
    CapacityChange,
    Cluster,
    ClusterView,
    Event,
    InputError,
    JobAllocation,
    JobArrival,
    JobCompletion,
    JobFailure,
    JobSpec,
    LoanOffer,
    NodeFailure,
    NodeRecovery,
    ReclaimRequest,
    RunResult,
    ThroughputMeasured,
)
from gpuplan.solver_core.hooks import ResizePreference
from gpuplan.solver_core.policy import Policy, Reclaimer

from .base import Executor
from .change_log import ChangeLog
from .engine_apply import PlanApplication
from .engine_decide import Deciding
from .engine_nodes import NodeMembership, reclaim_least_used
from .ledger import GpuLedger
from .metrics import run_result
from .recorder import RunRecorder
from .restart_gate import RestartGate, executor_change_costs

PlanHook = Callable[[ClusterView, AllocationPlan], None]
log = logging.getLogger(__name__)
ProgressHook = Callable[[int, float], None]


def _read_through(part: str, name: str) -> Any:
    """A read-only attribute of the engine that is ``self.<part>.<name>``: the names the
    engine had before its books and counters moved out (the Slurm controller, the benches
    and the tests read them). Lists come back as the part's own list, so the controller's
    in-place trims still reach it."""
    return property(attrgetter(f"{part}.{name}"), doc=f"``{part}.{name}`` (see :class:`Engine`).")


class Engine(NodeMembership, PlanApplication, Deciding):
    """Runs ``policy`` over ``executor`` on ``cluster``.

    The policy decides admission (:meth:`Policy.admit`), allocations, its wake-ups and — unless
    ``reclaimer`` is given — which on-loan servers to give back (``policy.reclaimer``, else
    :func:`reclaim_least_used`). GPUs have capacity 1: whole-GPU jobs take a free GPU, jobs
    with ``share`` < 1 share a GPU while their shares sum to at most 1 (:attr:`ledger`).
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
        self.ledger = GpuLedger()
        """The GPU books (every change to them goes through it)."""
        self.recorder = RunRecorder(sample_interval_s)
        """What the run measured (read back by :meth:`result`)."""
        names = (
            list(usable_nodes)
            if usable_nodes is not None
            else [n.name for n in cluster.nodes if n.pool == "training"]
        )
        for name in names:
            self._add_node(name)
        self.running: dict[str, ActiveJob] = {}
        self.pending: dict[str, ActiveJob] = {}
        self._read_only = (MappingProxyType(self.running), MappingProxyType(self.pending))
        """What views hand policies: read-only windows on ``running`` and ``pending`` (made
        once: O(1) per decision, and always showing the books' current contents)."""
        self._changes = ChangeLog(executor)
        self._touched = self._changes.touched
        """Jobs written since the last view (see :mod:`.change_log`)."""
        self.shaped: set[str] = set()
        """Active jobs with a node shape (the view passes it on; see ClusterView.shaped)."""
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
        self._degraded = self._warn_if_degraded()
        if restart_gate == "auto":  # on where the executor measures change costs (real ones)
            costs = executor_change_costs(executor)
            restart_gate = None if costs is None else RestartGate(costs=costs)
        self.restart_gate: RestartGate | None = restart_gate
        """Drops the changes to running jobs that cost more than they gain (see
        :mod:`.restart_gate`); None: the policy's plan is carried out as it is."""

    def _warn_if_degraded(self) -> bool:
        """A policy that wants stop-free resizing (``wants_in_place_resize``) on an executor
        that resizes by restart still runs, every resize paying the restart: say so once, at
        start, and count those resizes (``recorder.degraded_resizes``)."""
        caps = self.executor.capabilities
        wants = isinstance(self.policy, ResizePreference) and self.policy.wants_in_place_resize
        if not wants or caps.resize != "restart":
            return False
        log.warning(
            "policy %s wants stop-free (in-place) resizing, but %s resizes by "
            "checkpoint-restart: each resize is carried out as a restart and accounted "
            "at its restart latency of %g s",
            self.policy.name,
            type(self.executor).__name__,
            caps.restart_latency_s,
        )
        return True

    # The names the engine's books and counters had before they moved out (read-only).
    usable = _read_through("ledger", "usable")
    free = _read_through("ledger", "free")
    shared = _read_through("ledger", "shared")
    capacity = _read_through("ledger", "capacity")
    on_loan = _read_through("ledger", "on_loan")
    down = _read_through("ledger", "down")
    now = _read_through("recorder", "now")
    start_time = _read_through("recorder", "start_time")
    records = _read_through("recorder", "records")
    rejected = _read_through("recorder", "rejected")
    samples = _read_through("recorder", "samples")
    decision_ms = _read_through("recorder", "decision_ms")
    plans_refused = _read_through("recorder", "plans_refused")
    skipped_grows = _read_through("recorder", "skipped_grows")
    degraded_resizes = _read_through("recorder", "degraded_resizes")
    reclaim_log = _read_through("recorder", "reclaim_log")

    # ------------------------------------------------------------------ job state helpers
    def adopt(self, job: ActiveJob, allocation: JobAllocation) -> None:
        """Hold ``job`` as running on ``allocation``, the whole GPUs an executor observed it on
        (a job adopted after a controller restart, or one Slurm placed otherwise than planned):
        the books follow what runs, never an assumption. Raises RuntimeError, books unchanged,
        when a node is not usable or one of those GPUs is held by another job."""
        ledger = self.ledger
        previous = job.allocation if self.running.get(job.id) is job else None
        if previous is not None:
            ledger.vacate(previous, job.gpus)
        taken = [
            f"{n}:{g}"
            for n, gpus in allocation.placement.items()
            for g in gpus
            if not ledger.is_free(n, (g,))
        ]
        if taken:
            if previous is not None:
                ledger.occupy(job.id, previous, job.gpus)
            raise RuntimeError(f"cannot adopt {job.id}: GPUs {taken} are not free")
        job.set_allocation(allocation)
        self._changes.wrote(job.id, entered=job.id not in self.running)
        ledger.occupy(job.id, allocation, job.gpus)
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

    def _release(self, job: ActiveJob) -> None:
        """Give the job's GPUs back to the books (its allocation itself is left as it is)."""
        if job.allocation is not None:
            self.ledger.vacate(job.allocation, job.gpus)

    def _to_pending(self, job: ActiveJob, now: float) -> None:
        self._changes.left(job.id)
        self.running.pop(job.id, None)
        job.set_allocation(None)
        job.status = "pending"
        job.pending_since = now
        self.pending[job.id] = job

    # ------------------------------------------------------------------ events
    def _on_arrival(self, spec: JobSpec, now: float) -> None:
        if spec.id in self.running or spec.id in self.pending:
            self.recorder.rejected.append((spec.id, "duplicate job id"))
            return
        refused = self.policy.admit(spec, self.cluster)
        if refused is not None:
            self.recorder.rejected.append((spec.id, refused))
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
        self.recorder.finished(job)

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
        self.recorder.finished(job, failure=reason)

    def handle(self, now: float, events: list[Event]) -> AllocationPlan:
        """Apply one batch of simultaneous events, decide, and carry the plan out."""
        self.recorder.advance(
            now, self.running, self.pending, self.ledger.allocated, self.ledger.capacity
        )
        self.recorder.events += len(events)
        for event in events:
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
                self._fail_node(event.node, event.recover_after, now)
            elif isinstance(event, NodeRecovery):
                self._recover_node(event.node)
        self._recover_due(now)
        if self._only_rounds:
            return self._round_gate(now)
        return self._decided(self.decide(now))

    def _on_measured(self, job_id: str, points: dict[int, float]) -> None:
        """Replace the job's believed curve by what has been measured so far (AFS §4.5)."""
        job = self.running.get(job_id) or self.pending.get(job_id)
        if job is None:
            return
        self._touched.add(job_id)
        job.measured.update(points)
        belief = job.spec.throughput.believed_from(dict(job.measured))
        job.spec = job.spec.model_copy(update={"throughput": belief})

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
                progress(len(self.recorder.records), now)

    def result(self, scenario: str = "", seed: int = 0, wall_s: float = 0.0) -> RunResult:
        """Records of finished jobs plus unfinished ones (finish None)."""
        return run_result(self, scenario, seed, wall_s)
