"""Scenario files: cluster + workload source + filters + overheads + seed (+ capacity loaning).

A scenario is everything needed to reproduce one simulation. It round-trips through JSON and
YAML; ``gpuplan.scenarios`` turns it into a :class:`~gpuplan.models.cluster.Cluster`, a list
of :class:`~gpuplan.models.job.JobSpec` and, with a ``loaning`` block, the inference pool's
loan / reclaim events. These are pure data specs: the models layer imports no scenario code.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .bounds import (
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_HEADROOM,
    MAX_JOBS,
    MAX_JOBS_PER_HOUR,
    MAX_LIST,
    MAX_LOAN_RATIO,
    MAX_NODES,
    MAX_OVERHEAD_S,
    MAX_SEED,
    MAX_TIME_S,
    MAX_TIME_SCALE,
    MIN_LOAN_RATIO,
    MIN_TIME_SCALE,
)
from .cluster import Cluster, Node
from .measured_interference import MeasuredTable
from .ojpp import Composition

ResizeMode = Literal["stop_free", "checkpoint_restart", "sidecar"]
WorkloadSource = Literal[
    "philly",
    "itp",
    "itp_augmented",
    "pollux",
    "gavel",
    "tiresias",
    "synthetic",
    "inline",
    "aryl_testbed",
]
JobMapping = Literal["rigid", "afs", "elastic", "aryl", "goodput"]
WindowOrigin = Literal["trace", "first"]
"""``workload.origin``: the clock a trace's ``submit_time`` and window count on."""
ORIGIN_SOURCES = frozenset({"philly", "itp", "itp_augmented"})
"""Sources whose loaders can move that clock (the others start at their own first row)."""


class Overheads(BaseModel):
    """Seconds a job makes no progress around a change of its allocation (simulator knobs).

    ``resize_mode`` picks which cost a grow/shrink pays: EDL/CoDDL stop-free scaling (ms),
    checkpoint-restart (tens of seconds), or a SideCar process restart (a few seconds).
    Every pause is at most ``MAX_OVERHEAD_S`` (one day, ``models/bounds.py``).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    start_s: float = Field(default=0.0, ge=0, le=MAX_OVERHEAD_S)
    resize_mode: ResizeMode = "checkpoint_restart"
    stop_free_s: float = Field(
        default=0.004, ge=0, le=MAX_OVERHEAD_S, description="CoDDL ~4 ms grow/shrink"
    )
    restart_s: float = Field(
        default=30.0, ge=0, le=MAX_OVERHEAD_S, description="checkpoint-restart: tens of s"
    )
    sidecar_s: float = Field(
        default=3.0, ge=0, le=MAX_OVERHEAD_S, description="SideCar stop/restart"
    )
    migrate_s: float = Field(default=30.0, ge=0, le=MAX_OVERHEAD_S)
    preempt_s: float = Field(
        default=0.0, ge=0, le=MAX_OVERHEAD_S, description="checkpoint time on preemption"
    )
    expand_prep_s: float = Field(
        default=0.0,
        ge=0,
        le=MAX_OVERHEAD_S,
        description="CoDDL concurrent expansion: with stop_free resizes, a growing job keeps "
        "training on its old GPUs this long while the new ones load the graph, then switches",
    )
    resize_up_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_OVERHEAD_S,
        description="cost of a grow, overriding resize_mode's (EDL stop-free scale-out < 1 s, "
        "SideCar up 37 s, termination up 242 s); null: resize_mode's cost",
    )
    resize_down_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_OVERHEAD_S,
        description="cost of a shrink, overriding resize_mode's (EDL graceful exit ~0 s, "
        "SideCar down 27 s, termination down 204 s); null: resize_mode's cost",
    )
    early_init_s: float = Field(
        default=0.0,
        ge=0,
        le=MAX_OVERHEAD_S,
        description="SideCar early initialisation (004 digest §3.4): in a plan that starts a "
        "job and shrinks another, the shrinking job keeps training on all its GPUs this long "
        "(the new container comes up meanwhile), then pays its shrink cost; the new job "
        "trains once both are over. 0: off",
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

    def resize_cost_for(self, grow: bool) -> float:
        """Cost of one resize: the per-direction override when set, else ``resize_cost``."""
        override = self.resize_up_s if grow else self.resize_down_s
        return self.resize_cost() if override is None else override


class LearningSpec(BaseModel):
    """Throughput learning, AFS §4.5 "overestimate first, re-adjust later" (simulator mode).

    Policies see only measured points of each job's curve: on arrival a job is believed to scale
    linearly from its one-GPU rate; once it runs on c GPUs it measures every allocatable unit
    <= c (1, 2, 4, ... below a node, then multiples of the node size) within ``measure_s``, and
    the belief becomes those points with linear extrapolation from the last one.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = False
    measure_s: float = Field(
        default=60.0, ge=0, le=MAX_OVERHEAD_S, description="time to measure all units"
    )


class ClusterSpec(BaseModel):
    """Either ``nodes`` x ``gpus_per_node`` identical servers, or an explicit node list."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    nodes: int | list[Node] = Field(default=16)
    gpus_per_node: int = Field(default=4, ge=1, le=MAX_GPUS_PER_NODE)
    gpu_type: str = "v100"
    nodes_per_rack: int | None = Field(default=None, ge=1, le=MAX_NODES)

    @model_validator(mode="after")
    def _bounded(self) -> ClusterSpec:
        count = len(self.nodes) if isinstance(self.nodes, list) else self.nodes
        if not 1 <= count <= MAX_NODES:
            raise ValueError(f"nodes must be between 1 and {MAX_NODES}, got {count}")
        return self

    def build(self) -> Cluster:
        if isinstance(self.nodes, list):
            return Cluster(nodes=self.nodes)
        return Cluster.uniform(
            self.nodes, self.gpus_per_node, self.gpu_type, nodes_per_rack=self.nodes_per_rack
        )


class ArylMixSpec(BaseModel):
    """Aryl's job mix for ``mapping: aryl`` (``scenarios.inference.aryl_jobs``; 001 digest
    §3.1, §7.2): which trace jobs become elastic, GPU-type agnostic, checkpointing."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    elastic_fraction: float = Field(
        default=0.05, ge=0, le=1, description="share of all jobs made elastic (large first)"
    )
    agnostic_fraction: float = Field(
        default=0.21, ge=0, le=1, description="share of the others that may use any GPU type"
    )
    checkpoint_fraction: float = Field(default=0.5, ge=0, le=1)
    min_fraction: float = Field(
        default=0.5, ge=0, le=1, description="elastic range [ceil(g x min_fraction), g]"
    )
    min_elastic_gpus: int = Field(default=2, ge=1, le=MAX_GPUS)


MAX_SIZE_WEIGHT = 1e9
"""Largest ``size_mix`` weight: weights are relative, and 1e9 to 1 already makes a size vanish."""


def _check_size_mix(size_mix: dict[int, float]) -> None:
    """``{GPU count: weight}``: counts within ``MAX_GPUS``, weights finite, in [0, 1e9] and
    not all zero (weights are relative; two weights of 1e308 summed to infinity)."""
    if not size_mix:
        raise ValueError("give at least one {GPU count: weight}")
    for gpus, weight in size_mix.items():
        if not 1 <= gpus <= MAX_GPUS:
            raise ValueError(f"GPU count {gpus} is outside [1, {MAX_GPUS}]")
        if not 0 <= weight <= MAX_SIZE_WEIGHT:
            raise ValueError(
                f"weight {weight:g} of {gpus} GPUs is outside "
                f"[0, {MAX_SIZE_WEIGHT:g}] (weights are relative)"
            )
    if not any(size_mix.values()):
        raise ValueError("weights must not all be zero")


class WorkloadSpec(BaseModel):
    """Where jobs come from and which of them to keep."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    source: WorkloadSource
    path: str | None = Field(
        default=None,
        description="file; relative paths resolve against the scenario file, then the shared "
        "traces folder ($GPUPLAN_TRACES or ../shared/traces)",
    )
    vc: str | None = Field(default=None, description="Philly virtual cluster")
    throughputs: str | None = Field(
        default=None,
        max_length=4096,
        description="source gavel: Gavel's throughput table (e.g. "
        "gavel/physical_cluster_throughputs.json, what Gavel's physical-cluster runs read); "
        "resolved like path; null: gavel/simulation_throughputs.json",
    )
    start_s: float | None = Field(
        default=None, ge=0, le=MAX_TIME_S, description="window start (s after origin)"
    )
    end_s: float | None = Field(
        default=None, ge=0, le=MAX_TIME_S, description="window end (s after origin)"
    )
    origin: WindowOrigin = Field(
        default="trace",
        description="what submit_time (and so start_s / end_s) counts from, philly and itp "
        "sources: 'trace' = the loader's clock (Philly: the whole file's first submission; "
        "ITP: the file's submission_time); 'first' = the first submission of the selected "
        "rows (Philly: the VC's own first job; ITP: the file's earliest)",
    )
    max_jobs: int | None = Field(default=None, ge=1, le=MAX_JOBS)
    mapping: JobMapping = "rigid"
    time_scale: float = Field(
        default=1.0, ge=MIN_TIME_SCALE, le=MAX_TIME_SCALE, description="multiply arrivals and work"
    )
    max_gpus: int | None = Field(
        default=None, ge=1, le=MAX_GPUS, description="drop jobs asking for more"
    )
    # synthetic generator
    jobs: int | None = Field(default=None, ge=1, le=MAX_JOBS)
    arrival_rate_per_h: float | None = Field(default=None, gt=0, le=MAX_JOBS_PER_HOUR)
    size_mix: dict[int, float] | None = Field(
        default=None,
        max_length=MAX_LIST,
        description="{GPU count: weight}: counts in [1, MAX_GPUS], weights relative, each in "
        "[0, 1e9] and not all zero",
    )
    mean_duration_s: float | None = Field(default=None, gt=0, le=MAX_TIME_S)
    inline_jobs: list[dict] | None = None
    aryl: ArylMixSpec = Field(default_factory=ArylMixSpec, description="mapping 'aryl' knobs")
    heterogeneous_share: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="share of all jobs flagged heterogeneous (Aryl's Advanced scenario), drawn "
        "with the scenario's seed among the jobs not pinned to a GPU type",
    )

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        if self.start_s is not None and self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError("end_s must be after start_s")
        if self.origin != "trace" and self.source not in ORIGIN_SOURCES:
            raise ValueError(
                f"origin {self.origin!r} applies to the {', '.join(sorted(ORIGIN_SOURCES))} "
                f"sources, not {self.source!r}"
            )
        if self.throughputs is not None and self.source != "gavel":
            raise ValueError("throughputs (Gavel's throughput table) needs source: gavel")
        return self

    @field_validator("size_mix")
    @classmethod
    def _size_mix(cls, size_mix: dict[int, float] | None) -> dict[int, float] | None:
        if size_mix is not None:
            _check_size_mix(size_mix)
        return size_mix


class RestartGateSpec(BaseModel):
    """The engine's restart gate (docs/algorithms/restart-gate.md): a change to a running job
    (resize, migration, preemption) is carried out only when its predicted gain exceeds its
    cost. Off by default in simulation (results as published); on by default on the real
    executors (Slurm controller, SSH), where this block is not read. Turn it on here to
    predict what the cluster does."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = False
    min_dwell_s: float = Field(
        default=10.0,
        ge=0,
        le=MAX_TIME_S,
        description="hysteresis: a job changed less than this long ago is not changed again "
        "unless the change is free",
    )
    resize_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_OVERHEAD_S,
        description="cost of one resize (s); null: the overheads' (resize_up_s, else "
        "resize_mode's cost)",
    )
    migrate_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_OVERHEAD_S,
        description="cost of one move (s); null: overheads.migrate_s",
    )
    preempt_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_OVERHEAD_S,
        description="cost of one preemption (s); null: overheads.preempt_s + restart_s "
        "(the checkpoint, then the restart when the job runs again)",
    )


class EngineSpec(BaseModel):
    """Engine options: periodic rounds, metric sampling and the restart gate."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    round_interval_s: float | None = Field(default=None, gt=0, le=MAX_TIME_S)
    decide_only_at_rounds: bool = Field(
        default=False,
        description="decide only at round boundaries (every round_interval_s), as Pollux's "
        "60-s rounds and Gavel's rounds do; events between boundaries only update state",
    )

    @model_validator(mode="after")
    def _rounds(self) -> EngineSpec:
        if self.decide_only_at_rounds and self.round_interval_s is None:
            raise ValueError("decide_only_at_rounds needs round_interval_s")
        return self

    sample_interval_s: float = Field(default=3600.0, gt=0, le=MAX_TIME_S)
    restart_gate: RestartGateSpec = Field(default_factory=RestartGateSpec)


class LoaningSpec(BaseModel):
    """Aryl capacity loaning (001 digest §3-4): an inference pool that lends its idle servers.

    The inference side needs ``ceil(qps(t) (1 + headroom))`` servers (1 QPS per server after
    scaling) and lends the rest; every ``step_s`` the difference becomes a loan offer or a
    reclaim request. ``qps(t)`` is the series (one copy per ``period_s`` of simulated time,
    tiled) scaled so the fleet is ``peak_busy`` busy at the series' peak and ``base_busy`` at
    zero traffic. Inference servers of ``gpus_per_server`` x ``gpu_type`` GPUs, each worth
    ``ratio`` training GPUs (``cluster.gpu_type``); normalised (default) they are modelled as
    ``round(gpus_per_server x ratio)`` training-speed slots. The training pool is the
    ``cluster`` block, which must then give ``nodes`` as a count.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    servers: int = Field(ge=1, le=MAX_NODES, description="inference servers")
    gpus_per_server: int = Field(default=8, ge=1, le=MAX_GPUS_PER_NODE)
    gpu_type: str = "t4"
    ratio: float = Field(
        default=0.25,
        ge=MIN_LOAN_RATIO,
        le=MAX_LOAN_RATIO,
        description="one inference GPU in training GPUs",
    )
    normalise: bool = True
    qps: str | None = Field(
        default=None,
        description="QPS series file (t_s,qps or the raw Alibaba GenAI trace); relative paths "
        "resolve like workload.path. None: the embedded 5-minute series",
    )
    qps_step_s: float = Field(
        default=300.0, gt=0, le=MAX_TIME_S, description="bin width of the series"
    )
    request_types: list[str] | None = Field(
        default=None, max_length=MAX_LIST, description="raw trace filter"
    )
    period_s: float = Field(
        default=86400.0, gt=0, le=MAX_TIME_S, description="simulated time per series copy"
    )
    offset_s: float = Field(
        default=0.0, ge=0, le=MAX_TIME_S, description="phase shift of the series"
    )
    step_s: float = Field(
        default=300.0, gt=0, le=MAX_TIME_S, description="loan / reclaim decision interval"
    )
    peak_busy: float = Field(default=0.95, ge=0, le=1)
    base_busy: float = Field(default=0.3, ge=0, le=1)
    headroom: float = Field(default=0.1, ge=0, le=MAX_HEADROOM)
    horizon_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIME_S,
        description="last loan event time; default last submission + 2 x period_s",
    )
    lend: bool = Field(
        default=True,
        description="false: the inference pool and its load are there (usage is measured over "
        "both pools) but it never lends a server -- the no-loaning rows of a loaning study",
    )

    @model_validator(mode="after")
    def _check(self) -> LoaningSpec:
        if self.base_busy > self.peak_busy:
            raise ValueError(
                f"base_busy ({self.base_busy}) must be <= peak_busy ({self.peak_busy})"
            )
        if self.normalise and round(self.gpus_per_server * self.ratio) > MAX_GPUS_PER_NODE:
            raise ValueError(
                f"ratio: {self.gpus_per_server} GPUs x {self.ratio:g} makes "
                f"{round(self.gpus_per_server * self.ratio)} normalised slots per "
                f"server, more than {MAX_GPUS_PER_NODE}"
            )
        return self


InterferenceTable = Literal["ojpp", "h200"]
"""Named interference tables a scenario may pick instead of writing a matrix: ``ojpp`` is the
OJPP workloads' matrix (``scenarios.ojpp_workloads.interference_matrix``); ``h200`` is the
measured table of five training jobs sharing one NVIDIA H200 (``scenarios.measured_tables``),
replayed like a ``measured`` block."""

MEASURED_TABLES = frozenset({"h200"})
"""Named tables that are measured tables (replayed, no collision draws)."""


class SimInterferenceSpec(BaseModel):
    """The TRUE interference of the simulated cluster: how much co-located workers really slow
    each other down. Distinct from an ``ojpp`` policy's ``interference`` parameter, which is
    what the policy *believes* (predicts) when it packs; keeping both lets a scenario model a
    wrong prediction. ``matrix[a][b]`` is the slowdown of a model-``a`` worker next to one
    model-``b`` worker (jobs' ``model``); it must be square (every row names every type).
    ``collisions``: memory collisions (two or more peaks at once, Eq. 4's model) cost ``kappa``
    extra iterations each (digest 002 §7.1 #14), their frequency drawn from the run's seed
    over ``window`` iterations per co-located group; off, only the matrix slows workers.
    ``measured`` (or ``table: h200``): a table measured on real hardware, replayed exactly for
    the groups it measured and composed from its pairs otherwise; no collisions are drawn."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    table: InterferenceTable | None = Field(default=None, description="a named table")
    measured: MeasuredTable | None = Field(
        default=None,
        description="a measured co-location table, replayed (models/measured_interference.py)",
    )
    matrix: dict[str, dict[str, Annotated[float, Field(ge=0, le=100)]]] | None = Field(
        default=None, description="slowdown I[a][b] of a model-a worker next to a model-b one"
    )
    composition: Composition = Field(
        default="additive", description="slowdown of a worker with several neighbours"
    )
    collisions: bool | None = Field(
        default=None,
        description="charge drawn memory collisions "
        "(unset: true for a matrix; a measured table has none)",
    )
    kappa: float = Field(
        default=1.0, ge=0, le=100, description="extra iterations one overflowing iteration costs"
    )
    window: int = Field(
        default=100, ge=1, le=100_000, description="iterations whose collisions one draw samples"
    )

    @model_validator(mode="after")
    def _one_source(self) -> SimInterferenceSpec:
        if sum(x is not None for x in (self.table, self.matrix, self.measured)) != 1:
            raise ValueError("give exactly one of 'table' (a named table), 'matrix' and 'measured'")
        # Checked by value (not by which keys were written), so a dumped and reloaded spec (a
        # sweep's overrides) still validates.
        measured = self.measured is not None or self.table in MEASURED_TABLES
        if measured and (self.collisions or self.kappa != 1.0 or self.window != 100):
            raise ValueError(
                "collisions, kappa and window apply to a matrix: a measured "
                "table already holds everything its jobs suffered"
            )
        if self.matrix is not None:
            if not self.matrix:
                raise ValueError("matrix is empty")
            types = set(self.matrix)
            for a, row in self.matrix.items():
                missing = sorted(types - set(row))
                if missing:
                    raise ValueError(
                        f"matrix row {a!r} lacks the pair(s) {', '.join(missing)}"
                        " (the matrix must be square)"
                    )
                unknown = sorted(set(row) - types)
                if unknown:
                    raise ValueError(
                        f"matrix row {a!r} names type(s) {', '.join(unknown)} that have no row"
                    )
        return self


class SimulatorSpec(BaseModel):
    """What the simulated cluster itself does beyond shares (not what policies believe)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    interference: SimInterferenceSpec | None = Field(
        default=None,
        description="co-located workers slow down by this model; null: shares "
        "alone set their speed",
    )


class ScenarioSpec(BaseModel):
    """A reproducible simulation input."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    workload: WorkloadSpec
    overheads: Overheads = Field(default_factory=Overheads)
    engine: EngineSpec = Field(default_factory=EngineSpec)
    learning: LearningSpec = Field(default_factory=LearningSpec)
    loaning: LoaningSpec | None = None
    simulator: SimulatorSpec = Field(default_factory=SimulatorSpec)
    policies: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="named policy configurations: {name: {base: POLICY, wrappers: [...], "
        "PARAM: VALUE}}, usable wherever a policy name is (resolved by the policy registry)",
    )

    @model_validator(mode="after")
    def _policy_names(self) -> ScenarioSpec:
        for name in self.policies:
            if not name or len(name) > 200 or any(c in name for c in "/,()\\"):
                raise ValueError(f"policies: {name!r} is not a usable configuration name")
        return self
