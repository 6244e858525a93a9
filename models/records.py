"""What a run produces: per-job records, sampled time series, decision latencies."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class JobRecord(BaseModel):
    """One job's life, written to the per-job CSV."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    user: str = ""
    model: str | None = None
    requested_gpus: int
    work: float
    submit_time: float
    first_start: float | None
    finish_time: float | None
    queueing_time: float | None = Field(description="first start - submit")
    pending_time: float = Field(description="all time spent without GPUs before finishing")
    jct: float | None
    gpu_seconds: float
    done_iterations: float
    lost_iterations: float = 0.0
    preemptions: int = 0
    resizes: int = 0
    migrations: int = 0
    failed: bool = False
    failure: str | None = Field(default=None, description="why the job failed, if it did")


class Sample(BaseModel):
    """Cluster state at one instant, for the AFS QL / CE / BI time series (000 digest §5.3)."""

    model_config = ConfigDict(extra="forbid")

    time: float
    queue_length: int = Field(description="QL: jobs pending (no GPUs)")
    running: int
    cluster_efficiency: float = Field(description="CE: (1/M) sum_running P(c)/P(1)")
    blocking_index: float = Field(
        description="BI: mean over pending of pending time / remaining time on one GPU"
    )
    gpus_allocated: int
    capacity: int


class RunResult(BaseModel):
    """Everything one simulation (or real run) reports."""

    model_config = ConfigDict(extra="forbid")

    scenario: str
    policy: str
    seed: int = 0
    jobs: list[JobRecord]
    samples: list[Sample] = Field(default_factory=list)
    decision_ms: list[float] = Field(default_factory=list)
    gpu_seconds_allocated: float = 0.0
    gpu_seconds_capacity: float = 0.0
    start_time: float = 0.0
    end_time: float = 0.0
    events: int = 0
    wall_s: float = 0.0
    solver_calls: int = 0
    solver_fallbacks: int = 0
