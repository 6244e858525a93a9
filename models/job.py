"""Training jobs as submitted: size, elasticity, work, checkpointing, memory, model.

A job's *work* is a number of training iterations. Trace rows give a duration at the requested
GPU count instead; :class:`JobSpec` converts it with the job's throughput profile
(``iterations = duration x P(requested_gpus)``, the AFS trace mapping, 000 digest §3.2), so every
policy and executor reasons in iterations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .bounds import MAX_GPUS, MAX_GPUS_PER_NODE, MAX_ITERATIONS, MAX_LIST, MAX_TIME_S
from .goodput import GoodputModel
from .throughput import ThroughputProfile


class Elasticity(BaseModel):
    """How many GPUs an elastic job may run on.

    ``allowed`` restricts the counts (e.g. powers of two, or the network-packing units); when
    empty every count in ``[min_gpus, max_gpus]`` is allowed. It holds at most ``MAX_LIST``
    entries (``models/bounds.py``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    min_gpus: int = Field(default=1, ge=1, le=MAX_GPUS)
    max_gpus: int = Field(ge=1, le=MAX_GPUS)
    allowed: tuple[int, ...] = Field(default=(), max_length=MAX_LIST)

    @model_validator(mode="after")
    def _check(self) -> Elasticity:
        if self.max_gpus < self.min_gpus:
            raise ValueError(f"max_gpus ({self.max_gpus}) must be >= min_gpus ({self.min_gpus})")
        for count in self.allowed:
            if not self.min_gpus <= count <= self.max_gpus:
                raise ValueError(
                    f"allowed count {count} is outside [{self.min_gpus}, {self.max_gpus}]"
                )
        object.__setattr__(self, "allowed", tuple(sorted(set(self.allowed))))
        return self

    def counts(self) -> tuple[int, ...]:
        """Every GPU count the job may hold while running."""
        return self.allowed or tuple(range(self.min_gpus, self.max_gpus + 1))


class Checkpointing(BaseModel):
    """What survives a preemption.

    * ``on_signal``: the job checkpoints when asked to stop (SIGUSR1/SIGTERM), so a preemption
      loses nothing;
    * otherwise, with ``interval_s`` set, the job checkpoints periodically and loses the work
      since its last periodic checkpoint;
    * with neither, a preempted job restarts from zero.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    on_signal: bool = True
    interval_s: float | None = Field(default=None, gt=0, le=MAX_TIME_S)


class MemoryProfile(BaseModel):
    """OJPP's per-worker GPU memory model <gamma, delta, p> (002 digest §2), as fractions of a GPU.

    Basic requirement ``gamma`` always; a variable peak ``delta`` occurs with probability ``p``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    gamma: float = Field(ge=0, le=1)
    delta: float = Field(ge=0, le=1)
    p: float = Field(ge=0, le=1)
    compute: float = Field(default=1.0, gt=0, le=1, description="alpha: compute share per worker")

    @model_validator(mode="after")
    def _check(self) -> MemoryProfile:
        if self.gamma + self.delta > 1:
            raise ValueError(f"gamma + delta = {self.gamma + self.delta} exceeds one GPU's memory")
        return self


class NodeShape(BaseModel):
    """How a job's GPUs may be spread over nodes: what Slurm's ``--nodes`` and
    ``--gpus-per-node`` say, so a placement is one the job (and Slurm) can honour.

    ``max_nodes`` caps the nodes used (1: a single-node job, the shape of a batch script that does
    not start its own ranks — a second node's GPUs would sit idle); ``gpus_per_node`` makes every
    node used hold exactly that many (N x G). ``starts_ranks`` records that the job launches
    its own ranks on every node (``srun``/``torchrun``), the only case where spanning nodes is
    useful; the Slurm hook sets ``max_nodes: 1`` when it is false.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_nodes: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    gpus_per_node: int | None = Field(default=None, ge=1, le=MAX_GPUS_PER_NODE)
    starts_ranks: bool = False

    def allows(self, placement: Mapping[str, Sequence[int]]) -> bool:
        """True when ``placement`` (node -> GPU indices) has this shape."""
        if self.max_nodes is not None and len(placement) > self.max_nodes:
            return False
        g = self.gpus_per_node
        return g is None or all(len(gpus) == g for gpus in placement.values())

    def allows_count(self, gpus: int) -> bool:
        """True when some placement of ``gpus`` GPUs can have this shape."""
        g = self.gpus_per_node
        if g is None:
            return True
        return gpus % g == 0 and (self.max_nodes is None or gpus // g <= self.max_nodes)


class JobSpec(BaseModel):
    """A training job as submitted. Immutable; runtime state lives in :class:`ActiveJob`."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    id: str = Field(min_length=1, max_length=1000)
    user: str = ""
    submit_time: float = Field(
        ge=0, le=MAX_TIME_S, description="seconds since the scenario's origin"
    )
    requested_gpus: int = Field(ge=1, le=MAX_GPUS)
    elasticity: Elasticity | None = None
    total_iterations: float | None = Field(default=None, gt=0, le=MAX_ITERATIONS)
    duration: float | None = Field(
        default=None, gt=0, le=MAX_TIME_S, description="seconds at requested_gpus (trace duration)"
    )
    checkpoint: Checkpointing = Field(default_factory=Checkpointing)
    priority_weight: float = Field(default=1.0, gt=0, le=1e9)
    memory: MemoryProfile | None = None
    model: str | None = None
    gpu_type: str | None = Field(default=None, description="only run on this GPU type")
    heterogeneous: bool = Field(
        default=False,
        description="its workers may span GPU types at once (Aryl App. A heterogeneous "
        "training); ignored when gpu_type is set",
    )
    gpus_per_worker: int = Field(default=1, ge=1, le=MAX_GPUS_PER_NODE)
    node_shape: NodeShape | None = Field(
        default=None, description="how its GPUs may spread over nodes; None: any way"
    )
    throughput: ThroughputProfile = Field(default_factory=ThroughputProfile.linear)
    goodput: GoodputModel | None = Field(
        default=None,
        description="Pollux goodput inputs (models/goodput.py): the `pollux` policy picks the "
        "batch size with the allocation; work is then in scale-invariant iterations",
    )

    @model_validator(mode="after")
    def _fill_work(self) -> JobSpec:
        if self.total_iterations is None and self.duration is None:
            raise ValueError("total_iterations or duration: give at least one")
        if self.total_iterations is None:
            work = self.duration * self.throughput.rate(self.requested_gpus)  # type: ignore[operator]
            object.__setattr__(self, "total_iterations", work)
        if self.node_shape is not None and not self.node_shape.allows_count(self.requested_gpus):
            raise ValueError(
                f"requested_gpus: {self.requested_gpus} cannot have the node shape "
                f"{self.node_shape.gpus_per_node} GPUs per node"
                + (
                    f" on at most {self.node_shape.max_nodes} nodes"
                    if self.node_shape.max_nodes
                    else ""
                )
            )
        if self.elasticity is not None:
            e = self.elasticity
            if not e.min_gpus <= self.requested_gpus <= e.max_gpus:
                raise ValueError(
                    f"requested_gpus: {self.requested_gpus} is outside the elasticity range "
                    f"[{e.min_gpus}, {e.max_gpus}]"
                )
        return self

    @property
    def work(self) -> float:
        """Total iterations (always set after validation)."""
        return self.total_iterations  # type: ignore[return-value]

    @property
    def elastic(self) -> bool:
        return self.elasticity is not None and self.elasticity.max_gpus > self.elasticity.min_gpus

    @property
    def min_gpus(self) -> int:
        return self.elasticity.min_gpus if self.elasticity else self.requested_gpus

    @property
    def max_gpus(self) -> int:
        return self.elasticity.max_gpus if self.elasticity else self.requested_gpus

    def allowed_counts(self) -> tuple[int, ...]:
        """Every GPU count the job may run at (its elasticity, and its node shape's
        ``gpus_per_node`` multiples when it has one)."""
        counts = self.elasticity.counts() if self.elasticity else (self.requested_gpus,)
        if self.node_shape is not None and self.node_shape.gpus_per_node is not None:
            counts = tuple(c for c in counts if self.node_shape.allows_count(c))
        return counts
