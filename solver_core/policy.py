"""The policy interface: admission -> allocation -> placement, plus wake-ups and reclaim choice.

This is the Blox split (admission -> allocation -> placement -> launch; launch is the
executor's job) written in Gavel's style of small functions:

* **admission** (:data:`Admission`) is asked once per arriving job and may refuse it with a
  reason (default :func:`admit_if_fits`: refuse only what could never run on the cluster);
* **allocation** (:data:`AllocationStage`) decides what each
  job gets: a whole-GPU count (``int``) or a :class:`Demand` — a count on one GPU type, a
  fraction of each GPU (co-location), or a placement already chosen by a joint policy such as
  Aryl's. Jobs left out get nothing;
* **placement** (:data:`PlacementStage`) turns whole-GPU counts into GPUs
  (``{job_id: JobAllocation}``); it may place fewer jobs than asked when free GPUs are too
  fragmented, and those jobs stay pending. Typed, fractional and pre-placed demands are routed
  around it by :func:`~.placement.demands.place_demands`, so every placement stage works with
  them unchanged;
* **wake-ups** (:data:`Wakeup`): the absolute time a policy wants to decide again without an
  event (Tiresias' demotions, Themis' leases, AFS-P's unit boundaries, round-based policies);
* **reclaim choice** (:data:`Reclaimer`): which on-loan servers to give back when the
  inference side asks (Aryl's dependent-value reclaim); None leaves the engine's default.

Every stage reads a :class:`~gpuplan.models.ClusterView` and appends a
:class:`~gpuplan.models.SolverStats` for every solver call it makes. Policies may keep state
between calls (AFS-P counters, Tiresias queues); everything they know about jobs comes from the
view, so one policy object drives simulated and real clusters alike. Wrappers
(:mod:`.wrappers`) transform a :class:`StagedPolicy` into another, so network packing, reuse
placement, throughput learning and co-location compose with any policy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from gpuplan.models import Cluster, ClusterView, JobAllocation, JobSpec, SolverStats

from .hooks import DeltaStage, Stateful, Stateless, undeclared_state

__all__ = [
    "Admission",
    "Allocation",
    "AllocationStage",
    "Decision",
    "Delta",
    "DeltaStage",
    "Demand",
    "PlacementStage",
    "Placements",
    "Policy",
    "PolicyBase",
    "Reclaimer",
    "Shares",
    "StagedPolicy",
    "Stateful",
    "Stateless",
    "Wakeup",
    "admit_if_fits",
    "demand_counts",
    "with_counts",
]


@dataclass(frozen=True, slots=True)
class Demand:
    """What an allocation stage asks for one job, beyond a plain whole-GPU count.

    ``gpus`` GPUs, each used at ``share`` (< 1: co-located with other jobs on the same GPUs),
    all of ``gpu_type`` when set (heterogeneity-aware policies decide per type). ``placement``
    set means the allocation stage chose the GPUs itself (a joint policy); the placement stage
    keeps it as it is.
    """

    gpus: int
    share: float = 1.0
    gpu_type: str | None = None
    placement: JobAllocation | None = None

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise ValueError(f"Demand.gpus must be >= 0, got {self.gpus}")
        if not 0.0 < self.share <= 1.0:
            raise ValueError(f"Demand.share must be in (0, 1], got {self.share}")


Shares = dict[str, int]
"""Whole-GPU counts per job (what placement stages take)."""
Allocation = Mapping[str, "int | Demand"]
"""An allocation stage's answer: a count or a :class:`Demand` per job."""
Placements = dict[str, JobAllocation]
AllocationStage = Callable[[ClusterView, list[SolverStats]], Allocation]
PlacementStage = Callable[[ClusterView, Shares, list[SolverStats]], Placements]
Admission = Callable[[JobSpec, Cluster], "str | None"]
"""(arriving job, cluster) -> None to admit, or the reason it is refused."""
Wakeup = Callable[[ClusterView], "float | None"]
Reclaimer = Callable[[ClusterView, list[str], int], list[str]]
"""(view, on-loan node names in loan order, count) -> the nodes to give back."""


def admit_if_fits(spec: JobSpec, cluster: Cluster) -> str | None:
    """Refuse only a job that could never run: its minimum GPU count exceeds the cluster's GPUs
    (of its GPU type, when it is pinned to one). Everything else waits in the queue."""
    if spec.gpu_type is not None:
        have = sum(n.gpus for n in cluster.nodes if n.gpu_type == spec.gpu_type)
        if spec.min_gpus > have:
            return f"needs {spec.min_gpus} {spec.gpu_type} GPUs; the cluster has {have}"
        return None
    if spec.min_gpus > cluster.total_gpus:
        return f"needs {spec.min_gpus} GPUs; the cluster has {cluster.total_gpus}"
    return None


def demand_counts(allocation: Allocation) -> Shares:
    """GPU counts of an allocation (``Decision.shares``), whatever its entries' form."""
    return {j: (d if isinstance(d, int) else d.gpus) for j, d in allocation.items()}


@dataclass(slots=True)
class Decision:
    """A policy's answer: the GPU counts it wanted and the placements it got."""

    shares: Shares
    placements: Placements
    stats: list[SolverStats] = field(default_factory=list)


@dataclass(slots=True)
class Delta:
    """A decision given as changes only (the engine's optional fast path).

    Every running job not in ``preempts`` keeps its allocation object unchanged, so the plan is
    built from the changes alone, in O(changes) rather than O(running jobs). ``starts`` maps
    pending jobs to their new allocations in the order the full protocol would list their
    ``start`` actions; ``preempts`` lists running jobs to stop in ``view.running`` order. A
    delta must describe exactly the plan :meth:`StagedPolicy.decide` would have produced
    (the tests compare both on random event sequences). ``moves`` maps running jobs to the
    new allocations they are resized or moved to (AFS, which changes a few counts per
    decision); the plan lists them with ``preempts`` in ``view.running`` order."""

    starts: Placements
    preempts: list[str] = field(default_factory=list)
    stats: list[SolverStats] = field(default_factory=list)
    moves: Placements = field(default_factory=dict)


class Policy(Protocol):
    """What the engine drives: admission, a decision per event, wake-ups, reclaim choice, and
    the memory a restart must carry over (``snapshot``/``restore``)."""

    name: str
    reclaimer: Reclaimer | None

    def admit(self, spec: JobSpec, cluster: Cluster) -> str | None: ...

    def snapshot(self) -> dict[str, Any]: ...

    def restore(self, state: dict[str, Any]) -> None: ...

    def decide(self, view: ClusterView) -> Decision: ...

    def next_wakeup(self, view: ClusterView) -> float | None:
        """Absolute time the policy wants to be asked again without an event (or None)."""
        ...


class PolicyBase:
    """Defaults for a hand-written policy class (one that decides placements itself, as tests'
    scripted policies do): admit what fits, no wake-ups, the engine's default reclaim."""

    name: str = "policy"
    reclaimer: Reclaimer | None = None
    wants_in_place_resize: bool = False
    """See :attr:`StagedPolicy.wants_in_place_resize`."""

    def admit(self, spec: JobSpec, cluster: Cluster) -> str | None:
        return admit_if_fits(spec, cluster)

    def next_wakeup(self, view: ClusterView) -> float | None:
        return None

    def snapshot(self) -> dict[str, Any]:
        return {}

    def restore(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"policy {self.name} keeps no state, got {sorted(state)}")


def with_counts(allocation: Allocation, counts: Mapping[str, int]) -> dict[str, int | Demand]:
    """``allocation`` with the GPU counts ``counts`` (a wrapper regulated them): entries whose
    count is unchanged keep their form; a changed :class:`Demand` keeps its type and share but
    loses a pre-chosen placement (it no longer fits the count)."""
    out: dict[str, int | Demand] = {}
    for job_id, count in counts.items():
        d = allocation.get(job_id)
        if isinstance(d, Demand):
            out[job_id] = d if d.gpus == count else replace(d, gpus=count, placement=None)
        else:
            out[job_id] = count
    return out


@dataclass
class StagedPolicy:
    """admission, then ``allocation``, then ``placement``; optional wake-ups and reclaim.

    An allocation of plain counts goes straight to ``placement``; one with :class:`Demand`
    entries goes through :func:`~.placement.demands.place_demands`, which places typed demands
    per GPU type with the same stage, keeps pre-placed ones, and co-locates fractional ones.
    Placements that break a job's ``node_shape`` are then left out
    (:func:`~.placement.shapes.enforce_shapes`).

    Every stage declares how its state is saved (:mod:`.hooks`): a stage object is of a
    :class:`Stateless` class, or :class:`Stateful` and the policy's ``memory`` (or one of its
    :class:`~.hooks.Memories` parts); a function's closure holds only values and declared
    stages. Construction (``replace`` included) raises ``TypeError`` otherwise, so a stage with
    state cannot silently lose it on a controller restart.
    """

    name: str
    allocation: AllocationStage
    placement: PlacementStage
    wakeup: Wakeup | None = None
    admission: Admission = admit_if_fits
    reclaimer: Reclaimer | None = None
    no_network_sharing: bool = False
    """Set by the network-packing wrapper: later placement wrappers must keep the rule."""
    memory: Stateful | None = None
    """The stage whose state outlives a decision (None: every stage is stateless)."""
    wants_in_place_resize: bool = False
    """The policy resizes often because it assumes stop-free scaling (EDL). On an executor
    that resizes by restart the engine still runs it, but warns once and counts every such
    resize (``RunResult.degraded_resizes``): the restarts are paid, never hidden."""
    _delta_of: tuple[object, Any] = field(
        default=(None, None), init=False, repr=False, compare=False
    )
    """(allocation stage, its ``delta`` or None): the Protocol check, done once per stage."""

    def __post_init__(self) -> None:
        if self.memory is not None and not isinstance(self.memory, Stateful):
            raise TypeError(f"policy {self.name}: memory {self.memory!r} is not Stateful")
        stages = {
            "allocation": self.allocation,
            "placement": self.placement,
            "wakeup": self.wakeup,
            "admission": self.admission,
            "reclaimer": self.reclaimer,
        }
        for part, stage in stages.items():
            why = None if stage is None else undeclared_state(stage, self.memory)
            if why is not None:
                raise TypeError(
                    f"policy {self.name}: its {part} stage does not declare how its state is "
                    f"saved ({why}): make its class Stateless, or Stateful and the policy's "
                    "memory"
                )

    def admit(self, spec: JobSpec, cluster: Cluster) -> str | None:
        return self.admission(spec, cluster)

    def decide(self, view: ClusterView) -> Decision:
        stats: list[SolverStats] = []
        from .placement.demands import place_demands  # placement imports this module
        from .placement.shapes import enforce_shapes

        allocation = self.allocation(view, stats)
        if set(map(type, allocation.values())) <= {int}:  # plain counts (C-speed check)
            placements = self.placement(view, allocation, stats)  # type: ignore[arg-type]
            shares: Shares = allocation  # type: ignore[assignment]
        else:
            placements = place_demands(view, allocation, self.placement, stats)
            shares = demand_counts(allocation)
        return Decision(shares=shares, placements=enforce_shapes(view, placements), stats=stats)

    def decide_delta(self, view: ClusterView) -> Delta | Decision | None:
        """The decision as changes only, when the allocation stage is a :class:`DeltaStage`
        (FIFO's, SRTF's, ...) and can answer on ``view``; else None and the engine calls
        :meth:`decide`. A wrapper that replaces the allocation stage drops the fast path with
        it (the new stage is no ``DeltaStage``), and the stage itself declines a placement
        stage it does not reproduce, so a delta never bypasses one."""
        stage, delta = self._delta_of
        if stage is not self.allocation:  # first call, or the stage was replaced
            stage = self.allocation
            delta = stage.delta if isinstance(stage, DeltaStage) else None
            self._delta_of = (stage, delta)
        return None if delta is None else delta(view, self.placement)

    def next_wakeup(self, view: ClusterView) -> float | None:
        return self.wakeup(view) if self.wakeup else None

    def snapshot(self) -> dict[str, Any]:
        """The policy's memory as JSON data (``{}`` when every stage is stateless)."""
        return self.memory.snapshot() if self.memory is not None else {}

    def restore(self, state: dict[str, Any]) -> None:
        """Load what :meth:`snapshot` returned, on a freshly built policy."""
        if self.memory is not None:
            self.memory.restore(state)
        elif state:
            raise ValueError(f"policy {self.name} keeps no state, got {sorted(state)}")

    def renamed(self, name: str) -> StagedPolicy:
        """The same stages under another name (configurations and wrappers name their result)."""
        return replace(self, name=name)
