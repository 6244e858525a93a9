"""Runtime state: active jobs with progress, and the read-only view policies decide on.

:class:`ActiveJob` is a slotted dataclass, not a pydantic model: the simulator updates tens of
thousands of them per second, and policies read them on every event. Progress is kept *lazily*
as an anchor (iterations done at ``anchor_time``) plus a constant ``rate`` since
``max(anchor_time, resume_time)``, so nothing has to be touched between events.
Ownership: the engine writes lifecycle fields (status, allocation, counters); the executor writes
the progress fields (anchor, rate, resume time), because only it knows how fast a job really runs.

:class:`ClusterState` is the JSON snapshot of the same information (``gpuplan plan --state``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .bounds import MAX_GPUS, MAX_TIME_S
from .cluster import Cluster, Node
from .free_index import FreeIndex
from .job import JobSpec
from .plan import JobAllocation

JobStatus = Literal["pending", "running", "finished"]

INF = float("inf")

NO_OBSERVATIONS: Mapping[tuple[str, int], float] = MappingProxyType({})
"""The ``ClusterView.interference`` of an executor that observes no interference."""


@dataclass(frozen=True, slots=True)
class ChangeSet:
    """The jobs whose progress or lifecycle fields were written since the previous view of the
    same stream (``ClusterView.changed``), so a policy that keeps per-job state across
    decisions can re-read only those instead of every running job on every event.

    ``jobs`` names every job started, stopped, preempted, resized, moved, settled, re-rated,
    finished, failed, adopted or given a new spec since view ``seq - 1`` of stream
    ``stream`` was built (jobs no longer active included). A consumer that last saw
    ``(stream, seq - 1)`` has seen every change; any other pair (another engine, a view it
    skipped) means it must re-read everything. Only an executor that reports every write it
    makes (the simulator) yields one; Slurm, SSH and hand-built views carry None."""

    stream: int
    """Which engine built the views (unique per engine in this process)."""
    seq: int
    """This view's number in its stream (1, 2, ...)."""
    jobs: frozenset[str]

    def follows(self, seen: tuple[int, int] | None) -> bool:
        """Whether a consumer that last saw ``seen`` = ``(stream, seq)`` saw every view of
        this stream before this one."""
        return seen is not None and seen[0] == self.stream and seen[1] == self.seq - 1


def remaining_work(job: ActiveJob, now: float) -> float:
    """Iterations ``job`` still has to do at ``now``: the one remaining-work formula (issue 27
    item 4), ``max(0, work - done_at(now))`` with :meth:`ActiveJob.done_at` inlined and
    ``min``/``max`` written as conditionals that pick the same operand, so the floats are
    those of the method pair. It is :meth:`ActiveJob.remaining`, and what every policy's
    per-job loop calls (SRTF/SRSF's keys, AFS-L's columns, Themis' rho): one module-level
    function, so one call per job."""
    work: float = job.spec.total_iterations  # type: ignore[assignment]
    done = job.done
    anchor, resume, rate = job.anchor_time, job.resume_time, job.rate
    start = anchor if anchor > resume else resume
    if not (now <= start or rate <= 0.0):
        moved = done + rate * (now - start)
        done = moved if moved < work else work  # min(work, moved)
    left = work - done
    return left if left > 0.0 else 0.0  # max(0.0, left)


def remaining_time(job: ActiveJob, now: float, gpus: int) -> float:
    """Seconds ``job`` needs from ``now`` on ``gpus`` GPUs at its profile's packed rate (AFS
    ``j.len(c)``, SRTF's key at the requested size); inf where that rate is 0 (no GPUs)."""
    rate = job.spec.throughput.rate(gpus)
    return remaining_work(job, now) / rate if rate > 0 else INF


@dataclass(slots=True, eq=False)
class ActiveJob:
    """A job the engine knows about, with its progress. Policies must treat it as read-only."""

    spec: JobSpec
    status: JobStatus = "pending"
    allocation: JobAllocation | None = None
    gpus: int = 0
    """GPUs held now; kept equal to ``allocation.gpus`` by :meth:`set_allocation` (read on
    every decision, so it is stored rather than summed from the placement each time)."""
    done: float = 0.0
    anchor_time: float = 0.0
    rate: float = 0.0
    resume_time: float = 0.0
    attained_service: float = 0.0
    held_time: float = 0.0
    pending_time: float = 0.0
    pending_since: float | None = None
    first_start: float | None = None
    finish_time: float | None = None
    last_checkpoint_done: float = 0.0
    segment_start: float = 0.0
    preemptions: int = 0
    resizes: int = 0
    migrations: int = 0
    lost_work: float = 0.0
    measured: dict[int, float] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.spec.id

    def set_allocation(self, allocation: JobAllocation | None) -> None:
        self.allocation = allocation
        self.gpus = allocation.gpus if allocation is not None else 0

    def done_at(self, now: float) -> float:
        start = self.anchor_time if self.anchor_time > self.resume_time else self.resume_time
        if now <= start or self.rate <= 0.0:
            return self.done
        return min(self.spec.work, self.done + self.rate * (now - start))

    remaining = remaining_work
    """``remaining(now)``: iterations still to do at ``now`` (:func:`remaining_work`)."""

    def attained_service_at(self, now: float) -> float:
        """GPU-seconds held so far (Tiresias' attained service)."""
        return self.attained_service + self.gpus * max(0.0, now - self.anchor_time)

    def held_time_at(self, now: float) -> float:
        return self.held_time + (max(0.0, now - self.anchor_time) if self.gpus else 0.0)

    def pending_time_at(self, now: float) -> float:
        extra = now - self.pending_since if self.pending_since is not None else 0.0
        return self.pending_time + max(0.0, extra)

    def settle(self, now: float) -> None:
        """Move the anchor to ``now`` (called by executors before changing the rate)."""
        self.done = self.done_at(now)
        self.attained_service = self.attained_service_at(now)
        self.held_time = self.held_time_at(now)
        self.anchor_time = now


def placement_rate(spec: JobSpec, cluster: Cluster, allocation: JobAllocation | None) -> float:
    """Iterations/s of ``spec`` on ``allocation``: profile x GPU-type speed x spread x share x
    the allocation's efficiency. A job with a compute demand ``memory.compute`` (alpha) is
    slowed by a share only below alpha (``min(1, share / alpha)``): co-located at its demand it
    runs at full speed, and only interference (the simulator's model) slows it.

    On mixed GPU types the slowest type sets the pace (bulk-synchronous training).
    """
    if allocation is None or not allocation.placement:
        return 0.0
    profile = spec.throughput
    gpus = allocation.gpus
    ref = cluster.gpu_type(profile.reference_gpu).relative_speed
    types = cluster.node_gpu_types
    if len(types) == 1:  # one GPU type: every node gives the same factor (no per-node lookups)
        (only,) = types
        slowest = profile.type_multiplier(only, cluster.gpu_type(only).relative_speed, ref)
    else:
        slowest = min(
            profile.type_multiplier(
                node.gpu_type, cluster.gpu_type(node.gpu_type).relative_speed, ref
            )
            for node in (cluster.node_by_name[n] for n in allocation.placement)
        )
    share = allocation.share
    if share < 1.0 and spec.memory is not None:
        # A job that declares its compute demand alpha (OJPP's model: the fraction of a
        # dedicated GPU it uses) runs at full speed on any share >= alpha; below, pro rata.
        share = min(1.0, share / spec.memory.compute)
    rate = profile.rate(gpus) * slowest * share * allocation.efficiency
    if len(allocation.placement) > 1:
        rate *= profile.spread(gpus)
    return rate


class ClusterView:
    """What a policy sees at one decision: time, cluster, usable nodes, free GPUs, active jobs.

    ``running`` and ``pending`` are kept incrementally by the engine (pending in the order jobs
    entered the queue), so a policy never scans finished jobs. ``free`` maps each usable node to
    its *wholly* free GPU indices (ascending). ``shared`` maps a node to the GPUs that jobs hold
    only a fraction of (``JobAllocation.share`` < 1) and the fraction in use on each: such a GPU
    is in neither ``free`` nor a whole-GPU job's placement, and has ``1 - used`` left for more
    co-located jobs. ``shaped`` names the active jobs with a ``node_shape``. ``interference``
    maps a shared GPU ``(node, index)`` to the slowdown its co-located workers were observed to
    suffer (the worst worker's, 0.5 = 50 % slower than alone): what an online adjuster such as
    OJPAP monitors. Only an executor that measures it fills it (the simulator with an
    interference model); elsewhere it is empty. Policies read the view and return a decision;
    they never mutate it. ``changed`` (:class:`ChangeSet`) names the jobs written since the
    previous view when the executor reports its writes, else None (read everything).
    """

    __slots__ = (
        "_capacity",
        "changed",
        "cluster",
        "free",
        "free_index",
        "interference",
        "nodes",
        "now",
        "pending",
        "running",
        "running_since",
        "shaped",
        "shared",
    )

    def __init__(
        self,
        now: float,
        cluster: Cluster,
        nodes: dict[str, Node],
        free: dict[str, list[int]],
        running: Mapping[str, ActiveJob],
        pending: Mapping[str, ActiveJob],
        shared: dict[str, dict[int, float]] | None = None,
        shaped: set[str] | None = None,
        interference: Mapping[tuple[str, int], float] | None = None,
        *,
        capacity: int | None = None,
        free_index: FreeIndex | None = None,
        changed: ChangeSet | None = None,
        running_since: Mapping[str, int] | None = None,
    ) -> None:
        self.now = now
        self.cluster = cluster
        self.nodes = nodes
        self.free = free
        self.running = running
        self.pending = pending
        self.shared = shared if shared is not None else {}
        self.shaped = (
            shaped
            if shaped is not None
            else {
                j
                for jobs in (running, pending)
                for j, job in jobs.items()
                if job.spec.node_shape is not None
            }
        )
        """Active jobs with a ``node_shape`` (kept by the engine, so shape checks cost
        O(shaped jobs) per decision)."""
        self.interference: Mapping[tuple[str, int], float] = (
            interference if interference is not None else NO_OBSERVATIONS
        )
        self._capacity = capacity
        """``capacity`` as the engine counts it (None: summed over ``nodes`` when asked)."""
        self.free_index = free_index
        """The engine's per-node free-count index over ``free`` (None when the view was built
        otherwise): read-only for policies; delta policies place with it in O(GPUs per node)
        (see :class:`~gpuplan.models.free_index.FreeIndex`)."""
        self.changed = changed
        """Jobs written since the previous view of the same engine (None: unknown)."""
        self.running_since = running_since
        """Running job -> a number ascending in ``running``'s order (the engine's; None when
        the view was built otherwise): a few running jobs sorted by it are in dict order."""

    def gpu_load(self, node: str, gpu: int) -> float:
        """Fraction of GPU ``node:gpu`` in use (0 free, 1 held whole, in between shared)."""
        used = self.shared.get(node, {}).get(gpu)
        if used is not None:
            return used
        return 0.0 if gpu in self.free.get(node, ()) else 1.0

    def capacity_by_type(self) -> dict[str, int]:
        """Usable GPUs per GPU type (name order)."""
        out: dict[str, int] = {}
        for node in self.nodes.values():
            out[node.gpu_type] = out.get(node.gpu_type, 0) + node.gpus
        return dict(sorted(out.items()))

    def free_by_type(self) -> dict[str, int]:
        """Wholly free GPUs per GPU type (name order; types with none free included as 0), so
        heterogeneity-aware policies see what each type has left."""
        out = dict.fromkeys(self.capacity_by_type(), 0)
        for name, gpus in self.free.items():
            out[self.nodes[name].gpu_type] += len(gpus)
        return out

    @property
    def capacity(self) -> int:
        """Usable GPUs right now (training pool + loaned servers - failed nodes)."""
        if self._capacity is not None:
            return self._capacity
        return sum(n.gpus for n in self.nodes.values())

    @property
    def free_gpus(self) -> int:
        return sum(len(g) for g in self.free.values())

    def active(self) -> list[ActiveJob]:
        """Running then pending jobs."""
        return [*self.running.values(), *self.pending.values()]

    def job(self, job_id: str) -> ActiveJob:
        return self.running.get(job_id) or self.pending[job_id]

    def rate(self, job: ActiveJob, gpus: int) -> float:
        """Packed iterations/s of ``job`` on ``gpus`` reference GPUs (for share decisions)."""
        return job.spec.throughput.rate(gpus)

    def remaining_time(self, job: ActiveJob, gpus: int) -> float:
        """Seconds to finish on ``gpus`` GPUs (AFS ``j.len(c)``); inf for 0 GPUs."""
        return remaining_time(job, self.now, gpus)


# --------------------------------------------------------------------------- JSON snapshot
class JobSnapshot(BaseModel):
    """An active job in a :class:`ClusterState` file."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    spec: JobSpec
    done_iterations: float = Field(default=0.0, ge=0)
    attained_service: float = Field(
        default=0.0, ge=0, le=MAX_TIME_S * MAX_GPUS, description="GPU-seconds received so far"
    )
    pending_time: float = Field(default=0.0, ge=0, le=MAX_TIME_S)
    allocation: JobAllocation | None = Field(
        default=None, description="where it runs; omit it (null) for a pending job"
    )

    @model_validator(mode="after")
    def _placed(self) -> JobSnapshot:
        # An allocation with no GPUs used to make the job silently pending: say what it is.
        if self.allocation is not None and not self.allocation.placement:
            raise ValueError(
                "allocation.placement: empty; a running job names its GPUs, a "
                "pending job has no allocation (omit it)"
            )
        return self


class ClusterState(BaseModel):
    """Serializable cluster state: input of ``gpuplan plan --state FILE``."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    now: float = Field(ge=0, le=MAX_TIME_S)
    cluster: Cluster
    usable_nodes: list[str] | None = Field(
        default=None, description="nodes training may use; default: the training pool"
    )
    jobs: list[JobSnapshot] = Field(default_factory=list)

    def check_snapshot(self) -> None:
        """What a state *file* must also satisfy: it describes jobs that exist at ``now``, so a
        job submitted after ``now`` is an error (it would be started early). Library callers
        building views for tests or what-if questions may use any submit times."""
        for i, snap in enumerate(self.jobs):
            if snap.spec.submit_time > self.now:
                raise ValueError(
                    f"jobs[{i}].spec.submit_time: {snap.spec.submit_time:g} is "
                    f"after the state's now ({self.now:g})"
                )

    def to_view(self) -> ClusterView:
        """Build the view; raises ValueError naming the job/node on an inconsistent state."""
        names = self.usable_nodes
        if names is None:
            names = [n.name for n in self.cluster.nodes if n.pool == "training"]
        nodes: dict[str, Node] = {}
        for name in names:
            if name not in self.cluster.node_by_name:
                raise ValueError(f"usable_nodes: unknown node {name!r}")
            nodes[name] = self.cluster.node_by_name[name]
        free = {name: set(range(node.gpus)) for name, node in nodes.items()}
        shared: dict[str, dict[int, float]] = {}
        running: dict[str, ActiveJob] = {}
        pending: dict[str, ActiveJob] = {}
        for i, snap in enumerate(self.jobs):
            if snap.spec.id in running or snap.spec.id in pending:
                raise ValueError(f"jobs[{i}].spec.id: duplicate job id {snap.spec.id!r}")
            if snap.done_iterations > snap.spec.work:
                raise ValueError(f"jobs[{i}].done_iterations: exceeds the job's work")
            if snap.allocation is not None and snap.allocation.job_id != snap.spec.id:
                raise ValueError(
                    f"jobs[{i}].allocation.job_id: {snap.allocation.job_id!r} "
                    f"is not this job ({snap.spec.id!r})"
                )
            job = ActiveJob(
                spec=snap.spec,
                done=snap.done_iterations,
                anchor_time=self.now,
                resume_time=self.now,
                attained_service=snap.attained_service,
                pending_time=snap.pending_time,
            )
            if snap.allocation is not None and snap.allocation.placement:
                for node, gpus in snap.allocation.placement.items():
                    if node not in free:
                        raise ValueError(f"jobs[{i}].allocation: node {node!r} is not usable")
                    for g in gpus:
                        if not occupy_gpu(
                            free[node], shared.setdefault(node, {}), g, snap.allocation.share
                        ):
                            raise ValueError(
                                f"jobs[{i}].allocation: GPU {node}:{g} is taken or out of range"
                            )
                job.set_allocation(snap.allocation)
                job.status = "running"
                job.rate = placement_rate(snap.spec, self.cluster, snap.allocation)
                running[snap.spec.id] = job
            else:
                job.pending_since = self.now
                pending[snap.spec.id] = job
        return ClusterView(
            now=self.now,
            cluster=self.cluster,
            nodes=nodes,
            free={n: sorted(g) for n, g in free.items()},
            running=running,
            pending=pending,
            shared={n: dict(sorted(g.items())) for n, g in shared.items() if g},
        )


SHARE_EPS = 1e-9
"""Slack when shares on one GPU are summed (0.1 + 0.2 + 0.7 must fit)."""


def occupy_gpu(free: set[int], shared: dict[int, float], gpu: int, share: float) -> bool:
    """Occupy ``share`` of ``gpu`` on one node, given the node's wholly free GPUs and its
    shared-GPU loads; False (nothing changed) if it does not fit. Shares on a GPU sum to at
    most one; a whole-GPU holder (share 1) needs a wholly free GPU."""
    if share >= 1.0:
        if gpu not in free:
            return False
        free.discard(gpu)
        return True
    if gpu in free:
        free.discard(gpu)
        shared[gpu] = share
        return True
    used = shared.get(gpu)
    if used is None or used + share > 1.0 + SHARE_EPS:
        return False
    shared[gpu] = used + share
    return True


def vacate_gpu(free: set[int], shared: dict[int, float], gpu: int, share: float) -> None:
    """Undo :func:`occupy_gpu`: a GPU whose last share leaves becomes wholly free again."""
    if share >= 1.0 or gpu not in shared:
        free.add(gpu)
        return
    left = shared[gpu] - share
    if left <= SHARE_EPS:
        del shared[gpu]
        free.add(gpu)
    else:
        shared[gpu] = left
