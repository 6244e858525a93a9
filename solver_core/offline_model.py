"""The offline optimum: minimum average JCT of a small job set whose arrivals are all known.

A time-indexed model on a grid of slots of length ``slot_s`` from the first arrival, solved by
CP-SAT under a deterministic budget (one worker, fixed seed, deterministic time):

* a job arriving at ``r`` may run from the first slot boundary at or after ``r``; in every
  slot it holds one of its allowed GPU counts ``g`` (or none) for the whole slot and makes
  ``rate(g) * slot_s`` iterations; the GPUs held in a slot sum to at most the cluster's;
* the objective is the sum of exact JCTs: a job finishes inside its last slot, at the slot's
  start plus the work left over ``rate(g)``. GPUs it frees there stay idle until the slot ends.

Every solution is a real schedule (the policy replays it in the simulator), so its average JCT
is an **upper bound** on the continuous optimum (allocations changing at any instant).
:mod:`.offline_bound` proves a **lower bound** on the same grid; the proven gap
``(upper - lower) / lower`` is at most what the discretisation and the solver budgets cost.
Discretisation: arrivals rounded up to the grid and GPUs idle after a mid-slot finish cost at
most about one slot per job. On rigid instances whose arrivals and durations are multiples of
the slot, a schedule that changes allocations only at arrivals and completions is itself a
slotted one, so (within the horizon) the slotted optimum is no worse than it.

The cluster is reduced to a GPU count: placement is ignored (no spread slowdown, no node
shapes), which :func:`offline_instance` enforces by refusing what the model could not honour.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuplan.models import Cluster, InputError, JobSpec, SolverStats

from .limits import SolveLimits
from .offline_bound import continuous_lower_bound

__all__ = [
    "MAX_OFFLINE_GPUS",
    "MAX_OFFLINE_JOBS",
    "OfflineInstance",
    "OfflineJob",
    "OfflineSchedule",
    "greedy_counts",
    "natural_slot",
    "offline_instance",
    "schedule_finish",
    "slot_horizon",
    "solve_offline",
]

MAX_OFFLINE_JOBS = 12
MAX_OFFLINE_GPUS = 16
DEFAULT_TARGET_SLOTS = 24
"""Slots the grid aims at for the estimated makespan (the model grows linearly with it)."""
WORK_SCALE = 1_000_000
"""The largest job's work in the integer units of the models' progress rows."""
EPS = 1e-9
FINISH_TOL = 1e-4
"""Relative work shortfall still counted as finished (the models' integer rounding)."""
TIME_SCALE = 1000
"""JCT units per slot in the slotted model's objective."""
DEFAULT_BOUND_NODES = 100
"""SCIP nodes for the lower bound: the root alone is far looser on these big-M rows."""
SUBSOLVERS = 1


@dataclass(frozen=True, slots=True)
class OfflineJob:
    """A job as the model sees it: arrival, work, and iterations/s at each allowed count."""

    id: str
    arrival: float
    work: float
    rates: dict[int, float]

    @property
    def fastest(self) -> float:
        return max(self.rates.values())


@dataclass(frozen=True, slots=True)
class OfflineInstance:
    jobs: tuple[OfflineJob, ...]
    capacity: int

    @property
    def origin(self) -> float:
        return min(j.arrival for j in self.jobs)


def offline_instance(
    cluster: Cluster,
    specs: Sequence[JobSpec],
    max_jobs: int = MAX_OFFLINE_JOBS,
    max_gpus: int = MAX_OFFLINE_GPUS,
) -> OfflineInstance:
    """The model's instance for ``specs`` on the training nodes of ``cluster``, or an
    :class:`InputError` naming why the exact model does not apply (too large, mixed GPU
    types, pinned types, node shapes, co-location)."""
    nodes = [n for n in cluster.nodes if n.pool == "training"]
    capacity = sum(n.gpus for n in nodes)
    if len(specs) > max_jobs or capacity > max_gpus:
        raise InputError(
            f"offline-optimal is exact only up to {max_jobs} jobs and {max_gpus} "
            f"GPUs; this instance has {len(specs)} jobs and {capacity} GPUs",
            field="policy",
        )
    if not specs:
        raise InputError("offline-optimal needs at least one job", field="jobs")
    types = {n.gpu_type for n in nodes}
    if len(types) != 1:
        raise InputError(
            f"offline-optimal needs one GPU type, the cluster has {sorted(types)}", field="cluster"
        )
    gpu_type = types.pop()
    jobs = []
    for s in specs:
        if (
            s.node_shape is not None
            or s.memory is not None
            or s.gpus_per_worker != 1
            or (s.gpu_type is not None and s.gpu_type != gpu_type)
        ):
            raise InputError(
                f"offline-optimal: job {s.id} has a node shape, a memory model, "
                "multi-GPU workers or another GPU type; the model counts whole "
                "GPUs only",
                field="jobs",
            )
        profile = s.throughput
        mult = profile.type_multiplier(
            gpu_type,
            cluster.gpu_type(gpu_type).relative_speed,
            cluster.gpu_type(profile.reference_gpu).relative_speed,
        )
        rates = {g: profile.rate(g) * mult for g in s.allowed_counts() if g <= capacity}
        if not rates:
            raise InputError(
                f"offline-optimal: job {s.id} cannot run on {capacity} GPUs", field="jobs"
            )
        jobs.append(OfflineJob(s.id, s.submit_time, s.work, rates))
    if len({j.id for j in jobs}) != len(jobs):
        raise InputError("offline-optimal: duplicate job ids", field="jobs")
    return OfflineInstance(tuple(jobs), capacity)


@dataclass
class OfflineSchedule:
    """The slotted schedule and what is proven about it (times in seconds)."""

    origin: float
    slot_s: float
    counts: dict[str, list[int]]
    """GPUs per slot for every job (one entry per slot of the horizon)."""
    finish: dict[str, float]
    avg_jct_s: float
    """Average JCT of ``counts`` run exactly (a job finishes inside its last slot)."""
    model_objective_s: float
    """The slotted model's objective (average JCT in seconds, rounded to a thousandth of a
    slot per job); the greedy schedule's average when CP-SAT found nothing better."""
    lower_bound_s: float
    """Proven lower bound on the continuous optimum's average JCT."""
    status: str
    """``optimal`` when CP-SAT proved the slotted optimum, else ``feasible``."""
    stats: list[SolverStats] = field(default_factory=list)

    @property
    def gap(self) -> float:
        """Proven relative gap of ``avg_jct_s`` to the continuous optimum."""
        return (self.avg_jct_s - self.lower_bound_s) / self.lower_bound_s

    def slot_of(self, now: float) -> int:
        return math.floor((now - self.origin) / self.slot_s + EPS)


def _arrival_slot(job: OfflineJob, origin: float, slot_s: float) -> int:
    return math.ceil((job.arrival - origin) / slot_s - EPS)


def _estimate_makespan(inst: OfflineInstance) -> float:
    """Last arrival after the first, plus the least GPU-time of all jobs spread over the
    cluster, plus the longest job's shortest duration: the scale the grid is cut to."""
    gpu_time = sum(j.work * min(g / r for g, r in j.rates.items()) for j in inst.jobs)
    longest = max(j.work / j.fastest for j in inst.jobs)
    span = max(j.arrival for j in inst.jobs) - inst.origin
    return span + gpu_time / inst.capacity + longest


def _greedy(inst: OfflineInstance, slot_s: float, spread: bool) -> dict[str, list[int]]:
    """One slotted list schedule, shortest remaining time first. ``spread`` False: each job in
    turn takes its fastest count that still fits; True: each takes its smallest count, then
    GPUs left go one step at a time to the largest cut in remaining time per GPU."""
    origin = inst.origin
    left = {j.id: j.work for j in inst.jobs}
    start = {j.id: _arrival_slot(j, origin, slot_s) for j in inst.jobs}
    counts: dict[str, list[int]] = {j.id: [] for j in inst.jobs}
    t = 0
    while any(v > EPS for v in left.values()):
        ready = sorted(
            (j for j in inst.jobs if start[j.id] <= t and left[j.id] > EPS),
            key=lambda j: (left[j.id] / j.fastest, j.id),
        )
        free = inst.capacity
        got: dict[str, int] = {}
        for j in ready:
            fits = [g for g in j.rates if g <= free]
            if fits:
                g = min(fits) if spread else max(fits, key=lambda c: (j.rates[c], -c))
                got[j.id], free = g, free - g
        while spread:
            best: tuple[float, str, int] | None = None
            for j in ready:
                have = got.get(j.id)
                if have is None:
                    continue
                for g in j.rates:
                    if have < g <= have + free and j.rates[g] > j.rates[have]:
                        cut = (left[j.id] / j.rates[have] - left[j.id] / j.rates[g]) / (g - have)
                        if best is None or cut > best[0]:
                            best = (cut, j.id, g)
            if best is None:
                break
            free -= best[2] - got[best[1]]
            got[best[1]] = best[2]
        rates = {j.id: j.rates for j in inst.jobs}
        for jid in counts:
            g = got.get(jid, 0)
            counts[jid].append(g)
            if g:
                left[jid] -= rates[jid][g] * slot_s
        t += 1
    return counts


def natural_slot(inst: OfflineInstance, max_slots: int) -> float | None:
    """The largest slot every arrival offset and every duration (at each allowed count) is a
    whole multiple of (to the millisecond), when the estimated makespan spans at most
    ``max_slots`` of it: on such a grid arrival rounding and mid-slot finishes cost nothing."""
    step = 0
    values = [j.arrival - inst.origin for j in inst.jobs]
    values += [j.work / r for j in inst.jobs for r in j.rates.values()]
    for v in values:
        ms = round(v * 1000)
        if abs(v * 1000 - ms) > 1e-6 * max(1.0, v * 1000):
            return None
        step = math.gcd(step, ms)
    if step == 0 or _estimate_makespan(inst) / (step / 1000) > max_slots:
        return None
    return step / 1000


def greedy_counts(inst: OfflineInstance, slot_s: float) -> dict[str, list[int]]:
    """The better of two feasible list schedules (:func:`_greedy`): the models' horizon is its
    length, and it is CP-SAT's first solution."""
    best: tuple[float, dict[str, list[int]]] | None = None
    for spread in (False, True):
        counts = _greedy(inst, slot_s, spread)
        finish = schedule_finish(inst, inst.origin, slot_s, counts)
        total = sum(finish[j.id] - j.arrival for j in inst.jobs)
        if best is None or total < best[0] - EPS:
            best = (total, counts)
    assert best is not None
    return best[1]


def slot_horizon(inst: OfflineInstance, slot_s: float) -> int:
    """Slots the models span: the longer of the two list schedules (a min-sum optimum may
    end later than the shorter one)."""
    return max(len(next(iter(_greedy(inst, slot_s, s).values()))) for s in (False, True))


def schedule_finish(
    inst: OfflineInstance, origin: float, slot_s: float, counts: dict[str, list[int]]
) -> dict[str, float]:
    """Finish time of every job when ``counts`` is run exactly (inf: it never finishes)."""
    out: dict[str, float] = {}
    for j in inst.jobs:
        done, out[j.id] = 0.0, math.inf
        for t, g in enumerate(counts[j.id]):
            if g == 0:
                continue
            step = j.rates[g] * slot_s
            if done + step >= j.work * (1 - FINISH_TOL):
                out[j.id] = origin + t * slot_s + max(0.0, j.work - done) / j.rates[g]
                break
            done += step
    return out


def _cp_solve(model: object, limits: SolveLimits, seed: int) -> tuple[object, int, float]:
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = limits.wall_s
    if limits.work_s is not None:
        p.max_deterministic_time = limits.work_s
    # A fixed set of subsolvers interleaved deterministically (CP-SAT's interleave_search) and
    # a fixed seed: the same answer at any load, with the large-neighbourhood search that a
    # single worker lacks.
    p.num_workers = SUBSOLVERS
    p.interleave_search = SUBSOLVERS > 1
    p.random_seed = seed
    t0 = time.perf_counter()
    code = solver.solve(model)  # type: ignore[arg-type]
    return solver, code, (time.perf_counter() - t0) * 1000.0


def _stats(
    stage: str,
    code: int,
    solver: object,
    ms: float,
    limits: SolveLimits,
    objective: float | None,
    bound: float | None,
) -> SolverStats:
    from ortools.sat.python import cp_model

    status = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible"}.get(code, "timeout")
    gap = None
    if objective is not None and bound is not None and objective > 0:
        gap = max(0.0, (objective - bound) / objective)
    return SolverStats(
        stage=stage,
        backend="cp-sat",
        status=status,  # type: ignore[arg-type]
        objective=objective,
        bound=bound,
        gap=gap,
        wall_ms=ms,
        time_limit_s=limits.wall_s,
        work_limit_s=limits.work_s,
        deterministic=limits.deterministic,
    )


def _solve_slotted(
    inst: OfflineInstance,
    slot_s: float,
    horizon: int,
    hint: dict[str, list[int]],
    limits: SolveLimits,
    seed: int,
) -> tuple[dict[str, list[int]], bool, SolverStats]:
    """CP-SAT on the slotted model; the objective is the sum of exact JCTs (a job finishes
    inside its last slot), in thousandths of a slot."""
    from ortools.sat.python import cp_model

    origin = inst.origin
    scale = WORK_SCALE / max(j.work for j in inst.jobs)
    m = cp_model.CpModel()
    x: dict[tuple[str, int, int], cp_model.IntVar] = {}
    jcts = []
    load: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in range(horizon)]
    for j in inst.jobs:
        a = _arrival_slot(j, origin, slot_s)
        rel = (j.arrival - origin) / slot_s
        # Progress per slot rounded down to a millionth of the largest job's work, and the work
        # required lowered by the horizon's worth of that rounding (< one unit a slot): a
        # schedule the model accepts finishes when run exactly, give or take a few millionths.
        need = math.ceil(j.work * scale) - horizon
        step = {g: math.floor(r * slot_s * scale + 1e-6) for g, r in j.rates.items()}
        z = [m.new_bool_var(f"z_{j.id}_{t}") for t in range(a, horizon)]
        jct = m.new_int_var(0, (horizon + 1) * TIME_SCALE, f"jct_{j.id}")
        jcts.append(jct)
        m.add(jct >= round(TIME_SCALE * (a - rel)) + TIME_SCALE * (sum(z) - 1))
        before: list[tuple[int, cp_model.IntVar]] = []
        for k, t in enumerate(range(a, horizon)):
            if k:
                m.add_implication(z[k], z[k - 1])
            here = []
            for g in j.rates:
                v = m.new_bool_var(f"x_{j.id}_{t}_{g}")
                x[j.id, t, g] = v
                here.append(v)
                load[t].append((g, v))
                m.add_hint(v, t < len(hint[j.id]) and hint[j.id][t] == g)
                # Last slot at g: JCT >= slot start + work left / rate(g) (rate per JCT unit
                # rounded up, so the objective is at most a fraction of a unit optimistic).
                per_unit = math.ceil(step[g] / TIME_SCALE)
                start = round(TIME_SCALE * (t - rel))
                row = m.add(per_unit * (jct - start) + sum(c * w for c, w in before) >= need)
                row.only_enforce_if([v] + ([z[k + 1].Not()] if k + 1 < len(z) else []))
            m.add(sum(here) <= z[k])
            before.extend((step[g], w) for g, w in zip(j.rates, here, strict=True))
        m.add(sum(c * w for c, w in before) >= need)
        m.add(sum(z) >= math.ceil(j.work / (j.fastest * slot_s) - 1e-6))
    for t in range(horizon):
        if load[t]:
            m.add(sum(g * v for g, v in load[t]) <= inst.capacity)
    m.minimize(sum(jcts))
    solver, code, ms = _cp_solve(m, limits, seed)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        stats = _stats("offline-slotted", code, solver, ms, limits, None, None)
        return (
            hint,
            False,
            stats.model_copy(update={"fell_back": True, "message": "greedy schedule kept"}),
        )
    counts = {j.id: [0] * horizon for j in inst.jobs}
    for (jid, t, g), v in x.items():
        if solver.value(v):  # type: ignore[attr-defined]
            counts[jid][t] = g
    unit = slot_s / TIME_SCALE / len(inst.jobs)  # objective -> average JCT in seconds
    obj = solver.objective_value * unit  # type: ignore[attr-defined]
    bound = solver.best_objective_bound * unit  # type: ignore[attr-defined]
    return (
        counts,
        code == cp_model.OPTIMAL,
        _stats("offline-slotted", code, solver, ms, limits, obj, bound),
    )


def solve_offline(
    inst: OfflineInstance,
    *,
    slot_s: float | None = None,
    target_slots: int = DEFAULT_TARGET_SLOTS,
    limits: SolveLimits | None = None,
    bound_nodes: int = DEFAULT_BOUND_NODES,
    seed: int = 0,
) -> OfflineSchedule:
    """The slotted optimum of ``inst`` and a proven lower bound on the continuous one.

    ``slot_s`` None: the instance's natural grid (:func:`natural_slot`, up to twice
    ``target_slots`` slots), else the estimated makespan cut into ``target_slots`` slots.
    ``limits``: the CP-SAT solve's budget (default: 5 deterministic seconds, one worker, ``seed``);
    ``bound_nodes``: SCIP's node limit for the lower bound (more nodes, a tighter bound).
    """
    limits = limits or SolveLimits.deterministic_budget(5.0)
    if slot_s is None:
        slot_s = natural_slot(inst, 2 * target_slots) or _estimate_makespan(inst) / target_slots
    if not (math.isfinite(slot_s) and slot_s > 0):
        raise InputError(f"slot length must be > 0 seconds, got {slot_s!r}", field="slot_s")
    greedy = greedy_counts(inst, slot_s)
    horizon = slot_horizon(inst, slot_s)
    counts, optimal, ub_stats = _solve_slotted(inst, slot_s, horizon, greedy, limits, seed)
    lower, lb_stats = continuous_lower_bound(
        [(j.arrival, j.work, j.rates) for j in inst.jobs],
        inst.capacity,
        inst.origin,
        slot_s,
        horizon,
        SolveLimits(wall_s=limits.wall_s, nodes=bound_nodes),
        seed,
    )
    origin, n = inst.origin, len(inst.jobs)
    finish = schedule_finish(inst, origin, slot_s, counts)
    avg = sum(finish[j.id] - j.arrival for j in inst.jobs) / n
    return OfflineSchedule(
        origin=origin,
        slot_s=slot_s,
        counts=counts,
        finish=finish,
        avg_jct_s=avg,
        model_objective_s=avg if ub_stats.objective is None else ub_stats.objective,
        lower_bound_s=lower / n,
        status="optimal" if optimal else "feasible",
        stats=[ub_stats, lb_stats],
    )
