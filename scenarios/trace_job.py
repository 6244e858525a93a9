"""A job as read from a trace, before it is mapped to a :class:`JobSpec`.

Trace loaders return :class:`TraceJob` rows (what the file says, nothing invented); a mapping
(``rigid``, the AFS random-model mapping, ...) then decides the throughput profile and work.
Keeping the two apart lets one trace be replayed under several mappings with the same seed.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class TraceJob(BaseModel):
    """One trace row, normalised. Times in seconds; ``submit_time`` relative to the trace origin."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    submit_time: float = Field(ge=0)
    gpus: int = Field(ge=1)
    duration: float | None = Field(default=None, gt=0, description="seconds at `gpus`")
    iterations: float | None = Field(default=None, gt=0)
    model: str | None = None
    batch_size: int | None = Field(default=None, ge=1)
    user: str = ""
    vc: str | None = None
    source: str = Field(default="", description="file and row it came from")
