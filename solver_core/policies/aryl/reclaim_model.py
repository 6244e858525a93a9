"""Reclaim data model: on-loan servers, the jobs on them, and what returning some of them does.

Pure data (tests and benchmarks need no cluster): a :class:`ReclaimInstance` lists the on-loan
servers in loan order and, per job, the GPUs it holds on every server (on-loan or not) plus the
GPU counts it may keep running with. A job survives a reclaim iff the GPUs it keeps are one of
those counts -- exactly the rule the engine applies when it removes a node, so a prediction
made here is what the simulator then does. Rigid jobs may keep only their full size.
:func:`evaluate` scores a choice as a :class:`ReclaimOutcome` and :func:`reclaim_metrics`
reduces a run's outcomes to the paper's metrics. The selectors are in :mod:`.reclaim_greedy`
(Aryl, SCF, Random) and :mod:`.reclaim_exact`; :mod:`.reclaim` re-exports everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuplan.models import ClusterView, SolverStats

__all__ = [
    "ReclaimInstance",
    "ReclaimJob",
    "ReclaimOutcome",
    "clamp_count",
    "cost_table",
    "evaluate",
    "reclaim_metrics",
]


@dataclass(frozen=True, slots=True)
class ReclaimJob:
    """A running job: GPUs per server (every server it uses) and the GPU counts it may keep.

    ``allowed`` empty means rigid: the job survives only while it keeps all its GPUs.
    """

    id: str
    gpus: Mapping[str, int]
    allowed: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        for server, gpus in self.gpus.items():
            if isinstance(gpus, bool) or int(gpus) != gpus or gpus < 0:
                raise ValueError(
                    f"job {self.id!r}: GPUs on {server!r} must be an int >= 0, got {gpus}"
                )
        for a in self.allowed:
            if isinstance(a, bool) or int(a) != a or a < 0:
                raise ValueError(f"job {self.id!r}: allowed count {a} must be an int >= 0")

    @property
    def total(self) -> int:
        return sum(self.gpus.values())

    def survives(self, kept: int) -> bool:
        """Whether the job keeps running (possibly scaled in) with ``kept`` GPUs."""
        if kept <= 0:
            return False
        return kept in self.allowed if self.allowed else kept == self.total


@dataclass(frozen=True)
class ReclaimInstance:
    """On-loan servers (in loan order, the final tie-break) and the jobs touching them."""

    servers: tuple[str, ...]
    jobs: tuple[ReclaimJob, ...]
    server_gpus: Mapping[str, int] = field(default_factory=dict)
    flexible: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Optional hint: job -> server -> GPUs of *flexible* workers (the scheduler knows which
    workers it added on top of the base demand). Only orders phase A: among servers whose
    return preempts nobody, flexible-only ones go before those holding base workers."""

    def __post_init__(self) -> None:
        if len(set(self.servers)) != len(self.servers):
            raise ValueError("duplicate server names")
        ids = [j.id for j in self.jobs]
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate job ids")

    def size(self, server: str) -> int:
        """GPUs of an on-loan server (8 when unknown, the paper's server size)."""
        return self.server_gpus.get(server, 8)

    def jobs_on(self) -> dict[str, list[ReclaimJob]]:
        """On-loan server -> jobs with GPUs on it (in job order)."""
        on: dict[str, list[ReclaimJob]] = {s: [] for s in self.servers}
        for job in self.jobs:
            for s in job.gpus:
                if s in on:
                    on[s].append(job)
        return on

    @classmethod
    def from_server_jobs(
        cls,
        layout: Mapping[str, Mapping[str, int] | Iterable[str]],
        server_gpus: int | Mapping[str, int] = 8,
        allowed: Mapping[str, Iterable[int]] | None = None,
        extra_servers: Mapping[str, Mapping[str, int]] | None = None,
    ) -> ReclaimInstance:
        """Build from ``{server: {job: gpus}}`` (or ``{server: [job, ...]}`` = 1 GPU each).

        Every server in ``layout`` is on loan; ``extra_servers`` lists GPUs jobs hold on servers
        that are *not* on loan (training servers), which count in |S_j| and collateral damage.
        ``allowed`` makes jobs elastic (GPU counts they may keep); others are rigid.
        """
        per_job: dict[str, dict[str, int]] = {}
        for part in (layout, extra_servers or {}):
            for server, jobs in part.items():
                items = jobs.items() if isinstance(jobs, Mapping) else ((j, 1) for j in jobs)
                for job, gpus in items:
                    if gpus > 0:
                        per_job.setdefault(job, {})[server] = (
                            per_job.get(job, {}).get(server, 0) + gpus
                        )
        allowed = allowed or {}
        jobs = tuple(ReclaimJob(j, g, frozenset(allowed.get(j, ()))) for j, g in per_job.items())
        sizes = (
            {s: server_gpus for s in layout} if isinstance(server_gpus, int) else dict(server_gpus)
        )
        return cls(tuple(layout), jobs, sizes)

    @classmethod
    def from_view(
        cls,
        view: ClusterView,
        on_loan: Sequence[str],
        flexible: Mapping[str, Mapping[str, Sequence[int]]] | None = None,
    ) -> ReclaimInstance:
        """The running jobs of ``view`` that hold GPUs on any of the ``on_loan`` servers.

        ``allowed`` is the job's ``allowed_counts()``: the engine keeps a job that loses a node
        iff the GPUs it has left are one of them (``Engine._remove_node``). ``flexible`` (job ->
        node -> GPU indices of flexible workers) is intersected with the current allocations.
        """
        loan = set(on_loan)
        jobs = []
        flex: dict[str, dict[str, int]] = {}
        for job in view.running.values():
            alloc = job.allocation
            if alloc is None or loan.isdisjoint(alloc.placement):
                continue
            gpus = {n: len(g) for n, g in alloc.placement.items()}
            jobs.append(ReclaimJob(job.id, gpus, frozenset(job.spec.allowed_counts())))
            hint = (flexible or {}).get(job.id)
            if hint:
                counts = {
                    n: len(set(hint[n]) & set(g)) for n, g in alloc.placement.items() if n in hint
                }
                flex[job.id] = {n: c for n, c in counts.items() if c}
        sizes = {s: view.nodes[s].gpus for s in on_loan if s in view.nodes}
        return cls(tuple(on_loan), tuple(jobs), sizes, flex)


def cost_table(inst: ReclaimInstance) -> dict[str, tuple[int, float, float]]:
    """Tab. 1's three candidate server costs: (# running jobs, sum of the jobs' GPU fractions,
    sum of the jobs' server fractions 1/|S_j|). Aryl uses the third."""
    out = {}
    for s, jobs in inst.jobs_on().items():
        out[s] = (
            len(jobs),
            sum(j.gpus[s] / j.total for j in jobs),
            sum(1.0 / len(j.gpus) for j in jobs),
        )
    return out


@dataclass(slots=True)
class ReclaimOutcome:
    """What returning ``servers`` does to the jobs (the paper's per-event metrics)."""

    servers: list[str]
    preempted: list[str]
    scaled_in: list[str]
    collateral_gpus: int
    """GPUs freed on servers *not* returned, by preempting jobs (training servers included)."""
    returned_gpus: int
    idle_servers: int
    flexible_servers: int
    """Returned servers that hosted jobs but preempted none (the flexible group at work)."""
    method: str = ""
    time: float = 0.0
    wall_ms: float = 0.0
    stats: SolverStats | None = None

    @property
    def collateral_damage(self) -> float:
        """GPUs vacated beyond the demand / GPUs returned (digest §5.3; denominator inferred)."""
        return self.collateral_gpus / self.returned_gpus if self.returned_gpus else 0.0

    @property
    def met_by_flexible(self) -> float:
        """Share of the demand met by servers that hosted only scale-in-able workers."""
        return self.flexible_servers / len(self.servers) if self.servers else 0.0

    @property
    def met_without_preemption(self) -> float:
        """Share of the demand met by idle or flexible servers."""
        if not self.servers:
            return 0.0
        return (self.flexible_servers + self.idle_servers) / len(self.servers)


def evaluate(inst: ReclaimInstance, servers: Sequence[str]) -> ReclaimOutcome:
    """Preemptions, scale-ins and collateral damage of returning ``servers`` together."""
    chosen = set(servers)
    preempted: list[str] = []
    scaled: list[str] = []
    collateral = 0
    for job in inst.jobs:
        lost = sum(g for s, g in job.gpus.items() if s in chosen)
        if lost == 0:
            continue
        if job.survives(job.total - lost):
            scaled.append(job.id)
        else:
            preempted.append(job.id)
            collateral += job.total - lost
    dead = set(preempted)
    on = inst.jobs_on()
    idle = sum(1 for s in servers if not on[s])
    flexible = sum(1 for s in servers if on[s] and not any(j.id in dead for j in on[s]))
    return ReclaimOutcome(
        servers=list(servers),
        preempted=preempted,
        scaled_in=scaled,
        collateral_gpus=collateral,
        returned_gpus=sum(inst.size(s) for s in servers),
        idle_servers=idle,
        flexible_servers=flexible,
    )


def clamp_count(inst: ReclaimInstance, count: int) -> int:
    """``count`` servers to return, at most all of them (a negative count is an error)."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    return min(count, len(inst.servers))


def reclaim_metrics(outcomes: Sequence[ReclaimOutcome]) -> dict[str, float]:
    """Per-run reclaim metrics: events, servers returned, jobs preempted, mean per-event
    collateral damage (Fig. 8), mean share of demand met by the flexible group (§7.2: 52.6 %
    in the paper's Basic scenario) and without any preemption, decision latency."""
    if not outcomes:
        return {
            "events": 0,
            "servers": 0,
            "preemptions": 0,
            "collateral_gpus": 0,
            "mean_collateral_damage": 0.0,
            "met_by_flexible": 0.0,
            "met_without_preemption": 0.0,
            "decision_p50_ms": 0.0,
            "decision_max_ms": 0.0,
        }
    lat = np.asarray([o.wall_ms for o in outcomes])
    return {
        "events": len(outcomes),
        "servers": sum(len(o.servers) for o in outcomes),
        "preemptions": sum(len(o.preempted) for o in outcomes),
        "scale_ins": sum(len(o.scaled_in) for o in outcomes),
        "collateral_gpus": sum(o.collateral_gpus for o in outcomes),
        "mean_collateral_damage": float(np.mean([o.collateral_damage for o in outcomes])),
        "met_by_flexible": float(np.mean([o.met_by_flexible for o in outcomes])),
        "met_without_preemption": float(np.mean([o.met_without_preemption for o in outcomes])),
        "decision_p50_ms": float(np.median(lat)),
        "decision_max_ms": float(lat.max()),
    }
