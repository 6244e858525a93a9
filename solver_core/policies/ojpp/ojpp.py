"""The ``ojpp`` wrapper: jobs with a memory profile become co-located workers packed by OJPP.

Why: the ``co-location`` wrapper shares GPUs by compute fraction alone; paper 002 packs workers
under memory (Eq. 3), collision (Eq. 4-5), slowdown (Eq. 7) and balance (Eq. 8) rules. This
wrapper keeps the base policy's decision of *how many* workers each job gets and decides
*where* they run for the jobs that carry ``JobSpec.memory``:

1. every job the allocation stage gives ``c > 0`` GPUs and that has a memory profile (and no
   pinned GPU type) becomes an OJPP job of ``c`` workers, ``alpha = memory.compute``;
2. running ones whose count is unchanged keep their GPUs when the rules still hold there;
3. the others are packed by the chosen OJPP solver (Alg. 3 by default) onto the GPUs already
   hosting OJPP workers, then onto GPUs with nothing else on them (``ClusterView.free``, and
   GPUs only OJPP jobs held), in node order; a job that does not fit stays pending;
4. queued OJPP jobs the base left out are added (``min_gpus`` workers) while they fit on GPUs
   that already host OJPP workers, so packing never takes a GPU the base gave a whole job;
5. each becomes a pre-placed ``Demand(gpus, share=alpha, placement=...)``; the placement stage
   is wrapped so whole-GPU jobs never get a GPU this decision reserved.

**Anti-affinity.** The engine's ``JobAllocation`` holds one share per job per GPU and distinct
GPU indices, so inside this wrapper the workers of one job use distinct GPUs (``Rules.distinct``).
The standalone ``gpuplan solve ojpp`` follows the README and lets them share.

**Interference matrix.** Job types are ``JobSpec.model`` (``"unknown"`` when unset). The matrix
is the ``interference`` parameter when given; missing pairs (and the default) are conservative
constants: 0.1 between types, 0.2 within one type. Gavel's measured co-location table
(``scenarios/profiles.py``) cannot be imported from solver_core (dependency direction); a
scenario can pass it through ``interference`` later.

Limits: the wrapper's solvers are the packers (``heuristic``, ``greedy`` and the Table 4
baselines), which place incrementally around kept jobs; the exact model solves whole static
instances and is left to ``gpuplan solve``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import Field

from gpuplan.models import ActiveJob, ClusterView, JobAllocation, SolverStats
from gpuplan.models.ojpp import OjppInstance, OjppJob

from ...hooks import Memories
from ...params import Params
from ...policy import (
    Allocation,
    AllocationStage,
    Demand,
    Placements,
    PlacementStage,
    Shares,
    StagedPolicy,
    Stateful,
)
from ...registry import WrapperDef
from .baselines import BASELINE_RULES
from .greedy import greedy_order
from .heuristic import heuristic_order
from .ojpap import Ojpap
from .packer import Device, Packer, Rules

__all__ = ["WRAPPERS", "OjppParams", "ojpp_wrap"]

DEFAULT_CROSS = 0.1
DEFAULT_SAME = 0.2
UNKNOWN_TYPE = "unknown"
Gpu = tuple[str, int]


class OjppParams(Params):
    tau_max: float = Field(0.1, ge=0, le=1, description="collision probability bound (Eq. 5)")
    theta_max: float = Field(0.1, ge=0, le=100, description="device slowdown bound (Eq. 7)")
    theta_balance: float = Field(
        0.2, ge=0, le=100, description="slowdown spread bound per job (Eq. 8)"
    )
    composition: Literal["additive", "max", "multiplicative"] = Field(
        "additive", description="slowdown of a worker with several neighbours"
    )
    solver: Literal["heuristic", "greedy", "best-fit", "i-greedy", "b-greedy", "c-greedy"] = Field(
        "heuristic", description="OJPP packer (Alg. 3, Alg. 1, Table 4 baselines)"
    )
    work_limit_s: float | None = Field(
        None, gt=0, le=3600, description="reserved for exact solvers (the packers need none)"
    )
    interference: dict[str, dict[str, Annotated[float, Field(ge=0, le=100)]]] | None = Field(
        None, description="slowdown I[a][b] of a model-a worker next to a model-b worker"
    )
    ojpap: bool = Field(
        False,
        description="OJPAP (Alg. 4): move workers off persistently "
        "over-interfered GPUs at monitoring rounds (needs observations)",
    )
    ojpap_interval_s: float = Field(
        600.0, gt=0, le=86400, description="seconds between monitoring rounds"
    )
    ojpap_a: float = Field(0.7, ge=0, le=1, description="EWMA coefficient a of Eq. (18)")
    ojpap_hold: int = Field(
        3, ge=1, le=100, description="rounds the EWMA must stay above before adjusting"
    )
    ojpap_margin: float = Field(
        0.0, ge=0, le=10, description="trigger at theta_max + margin (measurement noise)"
    )
    ojpap_budget: float = Field(
        0.05, ge=0, le=100, description="migration-cost budget c-bar per adjustment (Eq. 19)"
    )
    ojpap_migration_s: float = Field(
        30.0, ge=0, le=86400, description="pause a migrated job pays (the executor's migrate_s)"
    )
    ojpap_allow_new: bool = Field(
        True, description="a move may open an unused GPU as a last resort"
    )
    ojpap_floors_place: bool = Field(
        True,
        description="new placements use max(predicted, learned pair floor), so the "
        "packer stops re-creating pairs OJPAP saw interfere (false: only moves use the floors)",
    )


def _matrix(
    types: list[str], given: dict[str, dict[str, float]] | None
) -> dict[str, dict[str, float]]:
    given = given or {}
    return {
        a: {b: given.get(a, {}).get(b, DEFAULT_SAME if a == b else DEFAULT_CROSS) for b in types}
        for a in types
    }


def _rules(p: OjppParams) -> Rules:
    base = BASELINE_RULES.get(p.solver, Rules())
    return replace(base, distinct=True)


def _ojpp_job(job: ActiveJob) -> bool:
    return job.spec.memory is not None and job.spec.gpu_type is None


class _Pack:
    """One decision's packing: real GPUs as devices, kept jobs first."""

    def __init__(
        self, view: ClusterView, p: OjppParams, counts: dict[str, int], extra: list[str]
    ) -> None:
        self.view, self.p = view, p
        self.ids = [*counts, *extra]
        jobs = [self._active(j) for j in self.ids]
        types = sorted({j.spec.model or UNKNOWN_TYPE for j in jobs})
        self.inst = OjppInstance.model_validate(
            {
                "tau_max": p.tau_max,
                "theta_max": p.theta_max,
                "theta_balance": p.theta_balance,
                "composition": p.composition,
                "interference": _matrix(types, p.interference),
                "jobs": [
                    OjppJob(
                        id=f"j{n}",
                        workers=max(1, counts.get(j, job.spec.min_gpus)),
                        alpha=job.spec.memory.compute,  # type: ignore[union-attr]
                        gamma=job.spec.memory.gamma,  # type: ignore[union-attr]
                        delta=job.spec.memory.delta,  # type: ignore[union-attr]
                        p=job.spec.memory.p,  # type: ignore[union-attr]
                        type=job.spec.model or UNKNOWN_TYPE,
                    )
                    for n, (j, job) in enumerate(zip(self.ids, jobs, strict=True))
                ],
            }
        )
        self.packer = Packer(self.inst, _rules(p))
        self.gpu_of: list[Gpu] = []
        self.device: dict[Gpu, int] = {}
        self.placed: dict[int, list[int]] = {}

    def _active(self, job_id: str) -> ActiveJob:
        return self.view.running.get(job_id) or self.view.pending[job_id]

    def _device(self, gpu: Gpu) -> int:
        if gpu not in self.device:
            self.packer.devices.append(Device())
            self.device[gpu] = len(self.gpu_of)
            self.gpu_of.append(gpu)
        return self.device[gpu]

    def keep_running(self, counts: dict[str, int]) -> set[str]:
        """Running OJPP jobs whose count is unchanged keep their GPUs, as long as the state
        they form together meets the rules; offenders are evicted one at a time (and placed
        again like new jobs)."""
        wanted: dict[int, list[Gpu]] = {}
        for i, job_id in enumerate(self.ids):
            job = self.view.running.get(job_id)
            alloc = job.allocation if job is not None else None
            if (
                job_id in counts
                and alloc is not None
                and alloc.gpus == counts[job_id]
                and all(n in self.view.nodes for n in alloc.placement)
            ):
                wanted[i] = sorted(alloc.gpu_set())
        while wanted:
            trial = Packer(self.inst, self.packer.rules)
            index: dict[Gpu, int] = {}
            for i, gpus in wanted.items():
                for gpu in gpus:
                    if gpu not in index:
                        index[gpu] = len(trial.devices)
                        trial.devices.append(Device())
                    trial.add(i, index[gpu])
            bad = trial.broken_job()
            if bad is None:
                break
            del wanted[bad]
        for i, gpus in wanted.items():
            devices = [self._device(gpu) for gpu in gpus]
            for b in devices:
                self.packer.add(i, b)
            self.placed[i] = devices
        return {self.ids[i] for i in wanted}

    def use_instance(self, inst: OjppInstance) -> None:
        """Pack the rest of this decision under ``inst`` (same jobs, another matrix): the kept
        workers are replayed onto a fresh packer in their order, so devices keep their
        indices and only the slowdown bookkeeping changes."""
        packer = Packer(inst, self.packer.rules, self.packer.max_devices)
        packer.devices.extend(Device() for _ in self.packer.devices)
        for i, devices in self.placed.items():
            for b in devices:
                packer.add(i, b)
        self.inst, self.packer = inst, packer

    def pool(self, kept: set[str]) -> list[Gpu]:
        """GPUs with nothing else on them: wholly free, or held only by OJPP jobs that moved."""
        load: dict[Gpu, float] = {}
        ojpp_load: dict[Gpu, float] = {}
        for job_id, job in self.view.running.items():
            if job.allocation is None:
                continue
            for n, gs in job.allocation.placement.items():
                for g in gs:
                    load[(n, g)] = load.get((n, g), 0.0) + job.allocation.share
                    if _ojpp_job(job) and job_id not in kept:
                        ojpp_load[(n, g)] = ojpp_load.get((n, g), 0.0) + job.allocation.share
        out = {(n, g) for n, gs in self.view.free.items() for g in gs}
        out |= {
            gpu
            for gpu, used in ojpp_load.items()
            if abs(load[gpu] - used) < 1e-9 and gpu[0] in self.view.nodes
        }
        return sorted(out - set(self.device))

    def place(self, order: list[int], pool: list[Gpu], allow_new: bool) -> None:
        for i in order:
            self.packer.max_devices = len(self.packer.devices) + (len(pool) if allow_new else 0)
            got = self.packer.place_job(i)
            if got is None:
                continue
            while len(self.gpu_of) < len(self.packer.devices):
                gpu = pool.pop(0)
                self.device[gpu] = len(self.gpu_of)
                self.gpu_of.append(gpu)
            self.placed[i] = got

    def allocation(self, i: int, efficiency: float = 1.0) -> JobAllocation:
        placement: dict[str, list[int]] = {}
        for b in self.placed[i]:
            node, g = self.gpu_of[b]
            placement.setdefault(node, []).append(g)
        job_id = self.ids[i]
        return JobAllocation.fast(
            job_id,
            {n: tuple(sorted(gs)) for n, gs in sorted(placement.items())},
            self.inst.jobs[i].alpha,
            efficiency,
        )


def ojpp_wrap(
    inner: AllocationStage, placement: PlacementStage, p: OjppParams, online: Ojpap | None = None
) -> tuple[AllocationStage, PlacementStage]:
    """The wrapped allocation stage and the placement stage that respects its reservations;
    with ``online``, OJPAP adjusts the kept jobs at its monitoring rounds."""
    reserved: set[Gpu] = set()

    def stage(view: ClusterView, stats: list[SolverStats]) -> Allocation:
        start = time.perf_counter()
        allocation = inner(view, stats)
        reserved.clear()
        counts: dict[str, int] = {}
        for job_id, d in allocation.items():
            job = view.running.get(job_id) or view.pending.get(job_id)
            gpus = d if isinstance(d, int) else d.gpus
            pre = not isinstance(d, int) and d.placement is not None
            if job is not None and _ojpp_job(job) and gpus > 0 and not pre:
                counts[job_id] = gpus
        extra = [j for j, job in view.pending.items() if j not in allocation and _ojpp_job(job)]
        if online is not None:
            online.active = bool(counts or extra)
            due = online.due(view)
        if not counts and not extra:
            return allocation
        pack = _Pack(view, p, counts, extra)
        kept = pack.keep_running(counts)
        if online is not None and online.floor and p.ojpap_floors_place:
            # New placements see max(predicted, learned floor): the packer must not re-create
            # a pair OJPAP has seen interfere. Kept jobs were checked under the prediction
            # (re-checking them would evict whole jobs outside OJPAP's migration budget).
            pack.use_instance(online.corrected(pack.inst))
        pool = pack.pool(kept)
        by_id = {job_id: i for i, job_id in enumerate(pack.ids)}
        order = (heuristic_order if p.solver == "heuristic" else greedy_order)(pack.inst)
        pack.place(
            [i for i in order if pack.ids[i] in counts and pack.ids[i] not in kept],
            pool,
            allow_new=True,
        )
        pack.place([i for i in order if pack.ids[i] in extra], pool, allow_new=False)
        if online is not None and due:
            online.step(view, pack, kept, pool, stats)
        out: dict[str, int | Demand] = {j: d for j, d in allocation.items() if j not in counts}
        for job_id in pack.ids:
            i = by_id[job_id]
            if i not in pack.placed:
                continue
            job = view.running.get(job_id)
            eff = job.allocation.efficiency if job_id in kept and job and job.allocation else 1.0
            alloc = pack.allocation(i, eff)
            reserved.update(alloc.gpu_set())
            out[job_id] = Demand(gpus=alloc.gpus, share=alloc.share, placement=alloc)
        used = len({b for bs in pack.placed.values() for b in bs})
        stats.append(
            SolverStats(
                stage="ojpp",
                backend=p.solver,
                status="heuristic",
                objective=float(used),
                deterministic=True,
                wall_ms=(time.perf_counter() - start) * 1000.0,
                message=f"{len(pack.placed)} of {len(pack.ids)} OJPP jobs placed, {len(kept)} kept",
            )
        )
        return out

    def place(view: ClusterView, shares: Shares, stats: list[SolverStats]) -> Placements:
        if reserved:
            free = {n: [g for g in gs if (n, g) not in reserved] for n, gs in view.free.items()}
            view = ClusterView(
                view.now,
                view.cluster,
                view.nodes,
                free,
                view.running,
                view.pending,
                view.shared,
                view.shaped,
                view.interference,
            )
        return placement(view, shares, stats)

    stage.__name__ = f"ojpp_{getattr(inner, '__name__', 'allocation')}"
    return stage, place


def _apply(policy: StagedPolicy, p: OjppParams, seed: int) -> StagedPolicy:
    if not p.ojpap:
        shares, placement = ojpp_wrap(policy.allocation, policy.placement, p)
        return replace(policy, allocation=shares, placement=placement)
    online = Ojpap(p)
    shares, placement = ojpp_wrap(policy.allocation, policy.placement, p, online)
    base_wakeup, base_memory = policy.wakeup, policy.memory

    def wakeup(view: ClusterView) -> float | None:
        ours = online.next_wakeup(view)
        theirs = base_wakeup(view) if base_wakeup is not None else None
        return theirs if ours is None else ours if theirs is None else min(ours, theirs)

    memory = online if base_memory is None else _Memory(base_memory, online)
    return replace(policy, allocation=shares, placement=placement, wakeup=wakeup, memory=memory)


class _Memory(Memories):
    """The base policy's memory and OJPAP's, side by side in one snapshot."""

    def __init__(self, base: Stateful, online: Ojpap) -> None:
        self.base, self.online = base, online

    @property
    def parts(self) -> tuple[Stateful, ...]:
        return (self.base, self.online)

    def snapshot(self) -> dict[str, Any]:
        return {"base": self.base.snapshot(), "ojpap": self.online.snapshot()}

    def restore(self, state: dict[str, Any]) -> None:
        self.base.restore(state["base"])
        self.online.restore(state["ojpap"])


WRAPPERS = [WrapperDef("ojpp", _apply, OjppParams)]
"""The ``<base>-ojpp`` and ``<base>-ojpp-ojpap`` presets are declared in ``__init__.py``."""
