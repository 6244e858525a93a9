"""Allocation plans: what every decision returns.

A plan states, for every active job, how many GPUs it holds and where (node -> GPU indices),
the actions that turn the previous allocation into this one, and the statistics of every solver
call made to reach it. Executors consume plans; nothing else crosses that boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from .bounds import MAX_SPEED

ActionKind = Literal["start", "resize", "preempt", "migrate", "reshare", "keep"]
"""``reshare``: same GPUs, another ``share`` of each (co-located jobs; no restart)."""
SolverStatus = Literal[
    "optimal", "feasible", "infeasible", "timeout", "heuristic", "error", "not_solved"
]

_new = object.__new__
_set = object.__setattr__
"""How a frozen dataclass sets its own fields (what its generated ``__init__`` does)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobAllocation:
    """Where one job runs. ``placement`` maps node name -> sorted GPU indices on that node.

    ``share`` < 1 means each worker uses that fraction of its GPU (co-location, OJPP); several
    jobs may then name the same GPU as long as shares on it sum to at most 1.

    ``efficiency`` multiplies the rate the engine derives from the placement (profile x slowest
    GPU type x spread x share) for effects it does not model itself: Aryl's heterogeneous
    training (App. A) paces a job on mixed GPU types by their mean speed times ``e``, not by the
    slowest GPU, so its policy sets ``efficiency = e * mean speed / min speed``. It says nothing
    about GPU occupancy, unlike ``share``.

    A slotted frozen dataclass, not a pydantic model: one is built for every start, resize and
    move inside the engine's loop (issue 27 item 4). Pydantic still reads and writes it where it
    crosses a file or JSON boundary (``AllocationPlan``, ``ClusterState``), with the same field
    checks. Building one checks it (:meth:`__post_init__`); :meth:`fast` is for our own
    placement code's output.
    """

    job_id: str
    placement: dict[str, tuple[int, ...]] = field(default_factory=dict)
    share: Annotated[float, Field(gt=0, le=1)] = 1.0
    efficiency: Annotated[float, Field(gt=0, le=MAX_SPEED)] = 1.0

    def __post_init__(self) -> None:
        """The checks the pydantic model made: each GPU list a non-empty tuple of distinct
        indices >= 0, not empty; ``0 < share <= 1``, ``0 < efficiency <= MAX_SPEED``."""
        if not isinstance(self.job_id, str):
            raise ValueError(f"job_id: a string, got {self.job_id!r}")
        placement: dict[str, tuple[int, ...]] = {}
        for node, gpus in self.placement.items():
            gpus = tuple(gpus)
            if not gpus:
                raise ValueError(f"placement[{node!r}]: empty GPU list")
            if not all(type(g) is int for g in gpus):
                raise ValueError(f"placement[{node!r}]: GPU indices must be integers: {gpus}")
            if len(set(gpus)) != len(gpus):
                raise ValueError(f"placement[{node!r}]: repeated GPU index in {gpus}")
            if min(gpus) < 0:
                raise ValueError(f"placement[{node!r}]: negative GPU index")
            placement[node] = gpus
        _set(self, "placement", placement)
        for name, top in (("share", 1.0), ("efficiency", MAX_SPEED)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name}: a number, got {value!r}")
            if not 0.0 < value <= top:
                raise ValueError(f"{name}: must be > 0 and <= {top:g}, got {value!r}")
            _set(self, name, float(value))

    @property
    def gpus(self) -> int:
        return sum(map(len, self.placement.values()))  # at C speed: read on every start

    @property
    def nodes(self) -> int:
        return len(self.placement)

    def gpu_set(self) -> frozenset[tuple[str, int]]:
        return frozenset((n, g) for n, gs in self.placement.items() for g in gs)

    @classmethod
    def fast(
        cls,
        job_id: str,
        placement: dict[str, tuple[int, ...]],
        share: float = 1.0,
        efficiency: float = 1.0,
    ) -> JobAllocation:
        """Build without the checks: for placements produced by our own placement code (valid
        by construction; ``check_plan`` / ``check_actions`` still check what a plan does)."""
        a = _new(cls)
        _set(a, "job_id", job_id)
        _set(a, "placement", placement)
        _set(a, "share", share)
        _set(a, "efficiency", efficiency)
        return a


_KINDS = frozenset(get_args(ActionKind))


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    """One change an executor must carry out (a slotted frozen dataclass, like
    :class:`JobAllocation`: built for every change a plan makes)."""

    kind: ActionKind
    job_id: str
    before: JobAllocation | None = None
    after: JobAllocation | None = None

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"Action.kind: one of {sorted(_KINDS)}, got {self.kind!r}")

    @property
    def gpus_before(self) -> int:
        return self.before.gpus if self.before else 0

    @property
    def gpus_after(self) -> int:
        return self.after.gpus if self.after else 0


class SolverStats(BaseModel):
    """What one solver call (exact or heuristic) reports."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: str = Field(description="e.g. 'shares' or 'placement'")
    backend: str = Field(description="e.g. 'cp-sat', 'scip', 'pulp-cbc', 'heuristic'")
    status: SolverStatus
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    wall_ms: float = 0.0
    time_limit_s: float | None = Field(default=None, description="wall-clock limit (s)")
    work_limit_s: float | None = Field(
        default=None, description="deterministic work budget (CP-SAT deterministic seconds)"
    )
    node_limit: int | None = Field(default=None, description="branch-and-bound node limit")
    deterministic: bool = Field(
        default=False, description="the answer depends on the model and seed alone"
    )
    fell_back: bool = Field(default=False, description="exact solver failed; heuristic used")
    message: str = ""


class AllocationPlan(BaseModel):
    """The result of one scheduling decision."""

    model_config = ConfigDict(extra="forbid")

    time: float
    policy: str
    allocations: dict[str, JobAllocation] = Field(default_factory=dict)
    actions: list[Action] = Field(default_factory=list)
    stats: list[SolverStats] = Field(default_factory=list)
    decision_ms: float = 0.0

    def gpus_of(self, job_id: str) -> int:
        alloc = self.allocations.get(job_id)
        return alloc.gpus if alloc else 0

    @property
    def gpus_used(self) -> int:
        return sum(a.gpus for a in self.allocations.values())
