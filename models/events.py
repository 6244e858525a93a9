"""Events that drive the scheduler loop.

The simulator pops them from a heap; real executors synthesise them from what they observe
(``squeue``, process exits). They are the engine's hottest objects (two or more per job: an
arrival, a completion, timers), built and read inside the loop, so they are slotted frozen
dataclasses rather than pydantic models (issue 27 item 4: pydantic stays at the file and JSON
boundaries; nothing in the engine writes events to a file, and ``TypeAdapter(Event)`` still
reads and writes them as JSON, ``kind`` being the discriminator). Every field is
keyword-only; the engine dispatches by class.

Construction still checks what the pydantic models declared: a time that is not a number
``>= 0`` (NaN included), a count below 1, a recovery delay not above 0 or an unknown capacity
change raise ``ValueError``; an integral time is stored as a float, a node list as a tuple.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import Field

from .job import JobSpec

__all__ = [
    "CapacityChange",
    "Event",
    "JobArrival",
    "JobCompletion",
    "JobFailure",
    "LoanOffer",
    "NodeFailure",
    "NodeRecovery",
    "ReclaimRequest",
    "ThroughputMeasured",
    "Timer",
]

_CHANGES = frozenset(("loan", "reclaim", "add", "remove"))


def _set(event: object, name: str, value: object) -> None:
    object.__setattr__(event, name, value)  # a frozen dataclass's own way to normalise a field


@dataclass(frozen=True, slots=True, kw_only=True)
class _Event:
    time: float

    def __post_init__(self) -> None:
        t = self.time
        if type(t) is not float:  # the loop's own events carry floats: one type check
            if isinstance(t, bool) or not isinstance(t, int | float):
                raise ValueError(f"{type(self).__name__}.time: a number, got {t!r}")
            _set(self, "time", t := float(t))
        if not t >= 0.0:
            raise ValueError(f"{type(self).__name__}.time: must be >= 0, got {t!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobArrival(_Event):
    kind: Literal["arrival"] = "arrival"
    job: JobSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class JobCompletion(_Event):
    kind: Literal["completion"] = "completion"
    job_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFailure(_Event):
    """A job failed for good (crashed past its restart budget, or its command is broken): the
    engine frees its GPUs and records it as failed instead of retrying forever."""

    kind: Literal["job_failure"] = "job_failure"
    job_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityChange(_Event):
    """Nodes join or leave the training side: Aryl loans (inference -> training) and reclaims."""

    kind: Literal["capacity"] = "capacity"
    change: Literal["loan", "reclaim", "add", "remove"]
    nodes: tuple[str, ...]

    def __post_init__(self) -> None:
        _Event.__post_init__(self)
        if self.change not in _CHANGES:
            raise ValueError(f"CapacityChange.change: one of {sorted(_CHANGES)}: {self.change!r}")
        if type(self.nodes) is not tuple:
            _set(self, "nodes", tuple(self.nodes))


def _at_least_one(event: _Event, count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"{type(event).__name__}.count: an integer >= 1, got {count!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class LoanOffer(_Event):
    """The inference side lends ``count`` idle servers; the engine picks which (Aryl §3)."""

    kind: Literal["loan_offer"] = "loan_offer"
    count: int
    pool: Literal["training", "inference"] = "inference"

    def __post_init__(self) -> None:
        _Event.__post_init__(self)
        _at_least_one(self, self.count)
        if self.pool not in ("training", "inference"):
            raise ValueError(f"LoanOffer.pool: 'training' or 'inference', got {self.pool!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReclaimRequest(_Event):
    """The inference side wants ``count`` on-loan servers back (Aryl's N_R); the engine's
    reclaimer chooses which, preempting or shrinking the training jobs on them."""

    kind: Literal["reclaim_request"] = "reclaim_request"
    count: int

    def __post_init__(self) -> None:
        _Event.__post_init__(self)
        _at_least_one(self, self.count)


@dataclass(frozen=True, slots=True, kw_only=True)
class ThroughputMeasured(_Event):
    """Measured iterations/s of a job at some GPU counts (AFS §4.5 throughput learning; real
    executors report what jobs log)."""

    kind: Literal["throughput"] = "throughput"
    job_id: str
    points: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFailure(_Event):
    kind: Literal["failure"] = "failure"
    node: str
    recover_after: float | None = None
    """Seconds until the node is back up (None: it stays down)."""

    def __post_init__(self) -> None:
        _Event.__post_init__(self)
        after = self.recover_after
        if after is not None and not after > 0:
            raise ValueError(f"NodeFailure.recover_after: must be > 0, got {after!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRecovery(_Event):
    kind: Literal["recovery"] = "recovery"
    node: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Timer(_Event):
    """A periodic scheduling round, or a policy-requested wake-up (e.g. AFS-P unit time)."""

    kind: Literal["timer"] = "timer"
    name: str = "round"


Event = Annotated[
    JobArrival
    | JobCompletion
    | JobFailure
    | CapacityChange
    | LoanOffer
    | ReclaimRequest
    | ThroughputMeasured
    | NodeFailure
    | NodeRecovery
    | Timer,
    Field(discriminator="kind"),
]
"""Any event the engine handles; ``TypeAdapter(Event)`` reads and writes one as JSON."""
