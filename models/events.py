"""Events that drive the scheduler loop.

The simulator pops them from a heap; real executors synthesise them from what they observe
(``squeue``, process exits). ``kind`` is the discriminator so events round-trip through JSON.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from .job import JobSpec


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    time: float = Field(ge=0)


class JobArrival(_Event):
    kind: Literal["arrival"] = "arrival"
    job: JobSpec


class JobCompletion(_Event):
    kind: Literal["completion"] = "completion"
    job_id: str


class JobFailure(_Event):
    """A job failed for good (crashed past its restart budget, or its command is broken): the
    engine frees its GPUs and records it as failed instead of retrying forever."""

    kind: Literal["job_failure"] = "job_failure"
    job_id: str
    reason: str = ""


class CapacityChange(_Event):
    """Nodes join or leave the training side: Aryl loans (inference -> training) and reclaims."""

    kind: Literal["capacity"] = "capacity"
    change: Literal["loan", "reclaim", "add", "remove"]
    nodes: tuple[str, ...]


class LoanOffer(_Event):
    """The inference side lends ``count`` idle servers; the engine picks which (Aryl §3)."""

    kind: Literal["loan_offer"] = "loan_offer"
    count: int = Field(ge=1)
    pool: Literal["training", "inference"] = "inference"


class ReclaimRequest(_Event):
    """The inference side wants ``count`` on-loan servers back (Aryl's N_R); the engine's
    reclaimer chooses which, preempting or shrinking the training jobs on them."""

    kind: Literal["reclaim_request"] = "reclaim_request"
    count: int = Field(ge=1)


class ThroughputMeasured(_Event):
    """Measured iterations/s of a job at some GPU counts (AFS §4.5 throughput learning; real
    executors report what jobs log)."""

    kind: Literal["throughput"] = "throughput"
    job_id: str
    points: dict[int, float]


class NodeFailure(_Event):
    kind: Literal["failure"] = "failure"
    node: str
    recover_after: float | None = Field(default=None, gt=0, description="seconds until back up")


class NodeRecovery(_Event):
    kind: Literal["recovery"] = "recovery"
    node: str


class Timer(_Event):
    """A periodic scheduling round, or a policy-requested wake-up (e.g. AFS-P unit time)."""

    kind: Literal["timer"] = "timer"
    name: str = "round"


Event = Annotated[
    JobArrival | JobCompletion | CapacityChange | NodeFailure | NodeRecovery | Timer,
    Field(discriminator="kind"),
]
