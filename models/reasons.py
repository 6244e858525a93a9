"""Why a decision was made: reasons as data, one per action and one per waiting job.

Why data and not log text: the same reason is written to a simulation's ``decisions.jsonl``,
journalled by the Slurm controller, shown by ``gpuplan status`` / ``gpuplan explain``, shown to
a job's owner in its Slurm admin comment, and read by the metrics page; each consumer formats
it its own way, and tests assert on its ``terms`` (the policy's own numbers: an AFS share and
rank, a Tiresias queue level and attained service, a restart-gate gain and cost) rather than
on wording.

Reasons never feed back into a decision: they are computed after the plan is made (and only
when something records them), from the policy's state and the cluster view.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

Term = float | int | str
"""One term of a reason: a number in the policy's units, or a short name (a node, a job)."""


class Reason(BaseModel):
    """Why: ``code`` is stable and machine-readable (``fits``, ``no-node-fits``, ``behind``,
    ``gate-skip``, ...), ``text`` is one short line for people, ``terms`` the numbers behind it
    in the policy's own units (``share``, ``rank``, ``queue``, ``attained_gpu_s``, ``gain_gpu_s``
    ...)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str = Field(min_length=1, max_length=40)
    text: str = Field(max_length=1000)
    terms: dict[str, Term] = Field(default_factory=dict)

    @classmethod
    def from_journal(cls, text: str) -> Reason | None:
        """A journaled reason (its JSON) back as a :class:`Reason`; None for ``''`` or text
        that is not one (a reader shows no reason rather than failing)."""
        if not text:
            return None
        try:
            return cls.model_validate_json(text)
        except ValueError:
            return None


class ActionReason(BaseModel):
    """One action of a decision and why. ``carried`` is False for an action the policy proposed
    but the restart gate skipped (its reason says why); ``kind`` is the plan's action kind, or
    ``reclaim`` for a loaned server given back."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    job_id: str
    gpus_before: int = 0
    gpus_after: int = 0
    nodes: list[str] = Field(default_factory=list)
    carried: bool = True
    reason: Reason


class DecisionRecord(BaseModel):
    """One decision: its time (engine seconds), the policy, every action with its reason, and
    the reason of every job still waiting after it. In a simulation's ``decisions.jsonl``
    ``pending`` holds only the jobs whose kind of reason (``code``) changed since the previous
    record (a job's reason stands until replaced; its counts are those of that moment);
    ``waiting`` is how many jobs wait in all."""

    model_config = ConfigDict(extra="forbid")

    time: float
    policy: str
    actions: list[ActionReason] = Field(default_factory=list)
    pending: dict[str, Reason] = Field(default_factory=dict)
    waiting: int = 0
