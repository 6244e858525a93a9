"""Scenario files: cluster + workload source + filters + overheads + seed.

A scenario is everything needed to reproduce one simulation. It round-trips through JSON and
YAML; ``gpuplan.scenarios`` turns it into a :class:`~gpuplan.models.cluster.Cluster` and a list
of :class:`~gpuplan.models.job.JobSpec`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .cluster import Cluster, Node

ResizeMode = Literal["stop_free", "checkpoint_restart", "sidecar"]
WorkloadSource = Literal[
    "philly", "itp", "itp_augmented", "pollux", "gavel", "tiresias", "synthetic", "inline"
]
JobMapping = Literal["rigid", "afs", "elastic"]


class Overheads(BaseModel):
    """Seconds a job makes no progress around a change of its allocation (simulator knobs).

    ``resize_mode`` picks which cost a grow/shrink pays: EDL/CoDDL stop-free scaling (ms),
    checkpoint-restart (tens of seconds), or a SideCar process restart (a few seconds).
    """

    model_config = ConfigDict(extra="forbid")

    start_s: float = Field(default=0.0, ge=0)
    resize_mode: ResizeMode = "checkpoint_restart"
    stop_free_s: float = Field(default=0.004, ge=0, description="CoDDL ~4 ms grow/shrink")
    restart_s: float = Field(default=30.0, ge=0, description="checkpoint-restart: tens of s")
    sidecar_s: float = Field(default=3.0, ge=0, description="SideCar stop/restart")
    migrate_s: float = Field(default=30.0, ge=0)
    preempt_s: float = Field(default=0.0, ge=0, description="checkpoint time on preemption")
    expand_prep_s: float = Field(
        default=0.0, ge=0,
        description="CoDDL concurrent expansion: with stop_free resizes, a growing job keeps "
        "training on its old GPUs this long while the new ones load the graph, then switches",
    )
    cancel_inflight: bool = Field(
        default=True,
        description="CoDDL reconfiguration cancelling: a new order for a job cancels its "
        "in-flight reconfiguration; when False, orders queue and run back to back",
    )

    def resize_cost(self) -> float:
        return {
            "stop_free": self.stop_free_s,
            "checkpoint_restart": self.restart_s,
            "sidecar": self.sidecar_s,
        }[self.resize_mode]


class LearningSpec(BaseModel):
    """Throughput learning, AFS §4.5 "overestimate first, re-adjust later" (simulator mode).

    Policies see only measured points of each job's curve: on arrival a job is believed to scale
    linearly from its one-GPU rate; once it runs on c GPUs it measures every allocatable unit
    <= c (1, 2, 4, ... below a node, then multiples of the node size) within ``measure_s``, and
    the belief becomes those points with linear extrapolation from the last one.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    measure_s: float = Field(default=60.0, ge=0, description="time to measure all units")


class ClusterSpec(BaseModel):
    """Either ``nodes`` x ``gpus_per_node`` identical servers, or an explicit node list."""

    model_config = ConfigDict(extra="forbid")

    nodes: int | list[Node] = 16
    gpus_per_node: int = Field(default=4, ge=1)
    gpu_type: str = "v100"
    nodes_per_rack: int | None = None

    def build(self) -> Cluster:
        if isinstance(self.nodes, list):
            return Cluster(nodes=self.nodes)
        return Cluster.uniform(
            self.nodes, self.gpus_per_node, self.gpu_type, nodes_per_rack=self.nodes_per_rack
        )


class WorkloadSpec(BaseModel):
    """Where jobs come from and which of them to keep."""

    model_config = ConfigDict(extra="forbid")

    source: WorkloadSource
    path: str | None = Field(
        default=None,
        description="file; relative paths resolve against the scenario file, then the shared "
        "traces folder ($GPUPLAN_TRACES or ../shared/traces)",
    )
    vc: str | None = Field(default=None, description="Philly virtual cluster")
    start_s: float | None = Field(default=None, ge=0, description="window start (s after origin)")
    end_s: float | None = Field(default=None, ge=0, description="window end (s after origin)")
    max_jobs: int | None = Field(default=None, ge=1)
    mapping: JobMapping = "rigid"
    time_scale: float = Field(default=1.0, gt=0, description="multiply arrivals and work")
    max_gpus: int | None = Field(default=None, ge=1, description="drop jobs asking for more")
    # synthetic generator
    jobs: int | None = Field(default=None, ge=1)
    arrival_rate_per_h: float | None = Field(default=None, gt=0)
    size_mix: dict[int, float] | None = None
    mean_duration_s: float | None = Field(default=None, gt=0)
    inline_jobs: list[dict] | None = None

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        if self.start_s is not None and self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError("end_s must be after start_s")
        return self


class EngineSpec(BaseModel):
    """Engine options: periodic rounds and metric sampling."""

    model_config = ConfigDict(extra="forbid")

    round_interval_s: float | None = Field(default=None, gt=0)
    sample_interval_s: float = Field(default=3600.0, gt=0)


class ScenarioSpec(BaseModel):
    """A reproducible simulation input."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    seed: int = 0
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    workload: WorkloadSpec
    overheads: Overheads = Field(default_factory=Overheads)
    engine: EngineSpec = Field(default_factory=EngineSpec)
    learning: LearningSpec = Field(default_factory=LearningSpec)
