"""What a run produces: per-job records, sampled time series, decision latencies."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer


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


class LoaningMetrics(BaseModel):
    """Aryl capacity-loaning outcome of one run (001 digest Tab. 5, Fig. 7-8).

    Usage fractions are GPU-seconds used / GPU-seconds available over ``window_s`` (from the
    first decision to the last submission, so policies with different makespans are compared
    over the same window). In a normalised cluster the inference GPUs are training-GPU
    equivalents. Reclaim statistics are ``None`` when no server was reclaimed.
    """

    model_config = ConfigDict(extra="forbid")

    window_s: float = Field(ge=0)
    usage_training: float = Field(ge=0, description="training-pool GPU usage")
    usage_overall: float = Field(
        ge=0, description="(job + inference-busy GPU-s) / GPU-s of both pools"
    )
    usage_loaned: float = Field(ge=0, description="job GPU-s on loaned servers / loaned GPU-s")
    loaned_share: float = Field(ge=0, description="share of inference GPU-s that was on loan")
    loaned_gpu_s: float = Field(ge=0, description="job GPU-seconds run on loaned servers")
    preemption_ratio: float = Field(ge=0, description="preemptions / job submissions")
    loan_offers: int = Field(ge=0, description="LoanOffer events in the scenario")
    reclaims: int = Field(ge=0, description="reclaim requests that returned servers")
    servers_reclaimed: int = Field(ge=0)
    reclaim_preemptions: int = Field(ge=0, description="jobs preempted by reclaims")
    collateral_damage: float | None = Field(
        default=None, description="mean per reclaim of GPUs vacated beyond the demand / returned"
    )
    met_by_flexible: float | None = Field(
        default=None, description="mean per reclaim of the demand met by flexible-group servers"
    )
    usage_overall_raw: float | None = Field(
        default=None,
        ge=0,
        description="usage_overall counting physical GPUs: a busy normalised loaned slot is "
        "1 / ratio busy inference GPUs (8 T4 = 2 slots: 4 T4 a slot)",
    )
    usage_bound: float | None = Field(
        default=None,
        ge=0,
        description="highest training usage any schedule of the jobs reaches over the window "
        "(scenarios.usage_bound.window_usage_bound)",
    )
    heterogeneous_jobs: int = Field(default=0, ge=0, description="jobs flagged heterogeneous")
    mixed_jobs: int = Field(
        default=0, ge=0, description="jobs that ever ran on more than one GPU type at once"
    )


class ObjectiveBound(BaseModel):
    """What a reference policy proves about the optimum of the run's average JCT.

    Only ``offline-optimal`` has one: it solves the whole instance before the run, so it knows
    a proven lower bound on the best average JCT any schedule can reach (no overheads, no
    placement effects: both only slow a run down, so the bound holds for every policy's run of
    the instance). ``status`` ``optimal``: its schedule was proven optimal; ``upper-bound``: the
    schedule is the best found within a deterministic budget, not proven.
    """

    model_config = ConfigDict(extra="forbid")

    status: Literal["optimal", "upper-bound"]
    method: str = Field(
        description="how the schedule was found, e.g. 'continuous' (branch "
        "and bound over event orders) or 'slotted' (the time-indexed fallback)"
    )
    planned_avg_jct_s: float = Field(description="the schedule's average JCT as planned")
    lower_bound_s: float = Field(description="proven lower bound on the optimal average JCT")
    wall_ms: float = Field(default=0.0, description="wall time of the solves (not deterministic)")
    message: str = ""


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
    solver_ms: list[float] = Field(
        default_factory=list, description="wall ms of every solver call (SolverStats.wall_ms)"
    )
    rejected: list[tuple[str, str]] = Field(
        default_factory=list,
        description="(job id, reason) of arrivals the engine refused: a duplicate id or more "
        "GPUs than the cluster has; they are not in ``jobs``",
    )
    loaning: LoaningMetrics | None = Field(
        default=None, description="capacity-loaning metrics, for scenarios with a loaning block"
    )
    degraded_resizes: int = Field(
        default=0,
        description="resizes of a policy that wants them stop-free (in place), "
        "carried out by a checkpoint-restart because the executor cannot resize in place",
    )
    restart_gate: dict[str, Any] | None = Field(
        default=None,
        description="the restart gate's counters (changes proposed / done / "
        "skipped per kind) and measured costs; absent when the run had no gate",
    )
    bound: ObjectiveBound | None = Field(
        default=None,
        description="the policy's proven bound on the optimal average JCT "
        "(offline-optimal); absent for policies without one",
    )

    @model_serializer(mode="wrap")
    def _drop_absent_gate(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave ``restart_gate`` out when there was no gate and ``bound`` when the policy has
        none, so such results dump exactly as before the fields existed (fingerprints stay
        comparable)."""
        data = handler(self)
        if isinstance(data, dict):
            for key in ("restart_gate", "bound"):  # absent, as before the fields existed
                if key in data and data[key] is None:
                    del data[key]
        return data
