"""Large-neighbourhood search for big coupled reclaims, and the LP bound that says how good it is.

Why: on ~1,000 loaned servers shared by multi-server jobs (one coupled component), the exact
ILP of :mod:`.reclaim_exact` proves nothing in seconds and its 1 s budget ended on Aryl's
heuristic answer, 20-29 % above the optimum on generated instances (issue 15). :func:`improve`
starts from a given answer and (1) anneals over single swaps -- one returned server out, one
kept server in, usually one sharing a job with it, each scored from the jobs of those two
servers alone -- then (2) repeatedly frees a neighbourhood (a random server plus the servers it
shares jobs with, breadth-first), keeps the number returned inside it, and lets CP-SAT choose
them optimally with everything outside fixed; a step is kept only if not worse.

Determinism: one :class:`random.Random` (seed 0), a move and a step count derived from the
deterministic budget, one CP-SAT worker with a fixed seed and a fixed deterministic-time cap
per step: the same instance and budget give the same servers on any machine at any load. With a
wall-clock budget only (``gpuplan solve --time-limit``) the annealing cools by the clock and
steps run until it says stop.

:func:`lp_bound` is the lower bound reported beside the answer: the LP relaxation of the tight
model of :mod:`.reclaim_rins` (``y_j >= x_s`` for every server whose loss alone kills job j, and
the slack row of elastic jobs), rounded up because preemptions are integral. The exact reclaim
follows this search with that module's RINS sub-MIP (:func:`.reclaim_exact._select_lns`).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model
from ortools.sat.python.cp_model import Domain

from ...limits import SolveLimits
from .reclaim_model import ReclaimInstance
from .reclaim_rins import lp_relaxation, survivable, tight_model

__all__ = ["ANNEAL_MOVES_PER_WORK_S", "LNS_STEPS_PER_WORK_S", "LnsResult", "improve", "lp_bound"]

LNS_NEIGHBOURHOOD = 32
"""Servers freed per step: CP-SAT closes such a sub-problem in a few milliseconds."""

ANNEAL_MOVES_PER_WORK_S = 100_000
"""Annealing swap moves per deterministic second (about 0.6 wall s here; 120,000 was not
better on the generated 1,000-server instances)."""

ANNEAL_TEMPERATURE = (0.3, 0.05)
"""Start and end temperature, in preemptions: a swap costing one more preemption is taken
with probability 3.6 % at the start and almost never at the end (tuned on generated
1,000-server instances among 0.2-1.5 starts and 0.02-0.15 ends)."""

LNS_STEP_WORK_S = 0.05
"""CP-SAT deterministic seconds a single step may use (most finish far below)."""

LNS_STEPS_PER_WORK_S = 25
"""CP-SAT steps per deterministic second of budget, after the annealing. With the annealing,
one deterministic second is about one wall second on this project's 2-core benchmark machine
(the work is mostly Python, which CP-SAT's work counter does not see)."""


@dataclass(frozen=True)
class _Job:
    gpus: tuple[tuple[int, int], ...]
    """(server index, GPUs) on loaned servers."""
    total: int
    survivable: tuple[int, ...]
    """GPU losses the job survives (0 always)."""


def _jobs(inst: ReclaimInstance, index: dict[str, int]) -> list[_Job]:
    out = []
    for job in inst.jobs:
        on = tuple((index[s], g) for s, g in job.gpus.items() if s in index and g > 0)
        if not on:
            continue
        out.append(_Job(on, job.total, survivable(job)))
    return out


@dataclass
class LnsResult:
    """The improved answer, its preemptions, the steps run and how many improved it."""

    servers: list[str]
    preempted: int
    steps: int
    improving: int
    work_s: float


def _score(jobs: list[_Job], chosen: list[bool], used: list[int], big: int) -> tuple[int, int]:
    dead = 0
    for job in jobs:
        lost = sum(g for s, g in job.gpus if chosen[s])
        if lost not in job.survivable:
            dead += 1
    busy = sum(u for s, u in enumerate(used) if chosen[s])
    return dead, dead * big + busy


def improve(
    inst: ReclaimInstance, start: list[str], limits: SolveLimits, *, seed: int = 0
) -> LnsResult:
    """Best answer found from ``start`` (``len(start)`` servers) within ``limits``.

    Two phases on one state: simulated annealing over single swaps (one returned server for one
    kept server, the kept one usually sharing a job with it), which moves fast through the many
    equal-cost answers, then CP-SAT steps on neighbourhoods (:func:`_solve_hood`), which make
    the multi-server exchanges a swap cannot. Objective: fewest preemptions; CP-SAT steps also
    prefer fewer busy GPUs returned, as the exact ILP does. With a deterministic budget
    (``limits.work_s``) move and step counts are fixed by it; the wall-clock guard still
    applies. Without one, the annealing cools over 70 % of ``limits.wall_s`` by the clock
    (as many moves as the machine makes), and steps take the rest.
    """
    t0 = time.perf_counter()
    deadline = t0 + limits.wall_s
    index = {s: i for i, s in enumerate(inst.servers)}
    n = len(inst.servers)
    jobs = _jobs(inst, index)
    used = [0] * n
    touching: list[list[int]] = [[] for _ in range(n)]
    for k, job in enumerate(jobs):
        for s, g in job.gpus:
            used[s] += g
            touching[s].append(k)
    big = sum(used) + 1
    chosen = [False] * n
    for s in start:
        chosen[index[s]] = True
    rng = random.Random(seed)
    if limits.work_s is not None:
        moves = round(limits.work_s * ANNEAL_MOVES_PER_WORK_S)
        max_steps: int | None = max(1, round(limits.work_s * LNS_STEPS_PER_WORK_S))
        anneal_end = deadline
    else:
        moves = 0  # cool by the clock
        max_steps = None
        anneal_end = t0 + 0.7 * limits.wall_s
    if 0 < len(start) < n:
        chosen = _anneal(jobs, touching, chosen, moves, rng, t0, anneal_end)
    dead, best = _score(jobs, chosen, used, big)
    step_cap = min(LNS_STEP_WORK_S, limits.work_s or LNS_STEP_WORK_S)
    steps = improving = 0
    work = 0.0
    while (
        (max_steps is None or steps < max_steps)
        and time.perf_counter() < deadline
        and 0 < len(start) < n
    ):
        steps += 1
        hood = _neighbourhood(rng, touching, jobs, n)
        res = _solve_hood(hood, jobs, touching, chosen, used, big, step_cap, seed)
        if res is None:
            continue
        picks, dtime = res
        work += dtime
        trial = chosen[:]
        for s, v in zip(hood, picks, strict=True):
            trial[s] = v
        tdead, tobj = _score(jobs, trial, used, big)
        if tobj < best:
            improving += 1
        if tobj <= best:
            chosen, best, dead = trial, tobj, tdead
    servers = [s for s in inst.servers if chosen[index[s]]]
    return LnsResult(servers, dead, steps, improving, work)


def _anneal(  # noqa: C901 (a named exception to the complexity gate)
    jobs: list[_Job],
    touching: list[list[int]],
    chosen: list[bool],
    moves: int,
    rng: random.Random,
    start: float,
    deadline: float,
) -> list[bool]:
    """The best answer seen in ``moves`` annealing swaps (or until ``deadline``); with
    ``moves`` = 0, swaps until ``deadline`` with the temperature following the clock from
    ``start`` (wall-clock budgets only: not deterministic).

    A move takes a random returned server r and a kept server u -- 70 % of the time one that
    shares a job with r (returning servers of jobs already lost is free), else, or when that
    one is returned already, any -- and swaps them; the change in preemptions comes from the
    jobs on r and u alone."""
    n = len(chosen)
    on: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for k, job in enumerate(jobs):
        for s, g in job.gpus:
            on[s].append((k, g))
    fatal = []
    for job in jobs:
        ok = set(job.survivable)
        fatal.append(bytes(v not in ok for v in range(sum(g for _, g in job.gpus) + 1)))
    near = [sorted({t for k in touching[s] for t, _ in jobs[k].gpus if t != s}) for s in range(n)]
    lost = [sum(g for s, g in job.gpus if chosen[s]) for job in jobs]
    returned = [s for s in range(n) if chosen[s]]
    state = chosen[:]
    cur = best = sum(f[v] for f, v in zip(fatal, lost, strict=True))
    best_set = list(returned)
    hot, cold = ANNEAL_TEMPERATURE
    ln_hot = math.log(hot)
    span = math.log(cold) - ln_hot
    by_clock = moves == 0
    total = 1 << 62 if by_clock else moves
    window = max(1e-9, deadline - start)
    temp = hot
    rand, pick = rng.random, rng.randrange
    for it in range(total):
        if it & 1023 == 0:
            now = time.perf_counter()
            if now > deadline:
                break
            if by_clock:
                temp = math.exp(ln_hot + span * min(1.0, (now - start) / window))
        i = pick(len(returned))
        r = returned[i]
        nb = near[r]
        u = nb[pick(len(nb))] if nb and rand() < 0.7 else pick(n)
        if state[u]:  # a returned neighbour: try one kept server at random instead
            u = pick(n)
            if state[u]:
                continue
        change: dict[int, int] = {}
        for k, g in on[r]:
            change[k] = -g
        for k, g in on[u]:
            change[k] = change.get(k, 0) + g
        d = 0
        for k, dl in change.items():
            f = fatal[k]
            d += f[lost[k] + dl] - f[lost[k]]
        if d > 0 and not by_clock:
            temp = math.exp(ln_hot + span * it / total)
        if d <= 0 or rand() < math.exp(-d / temp):
            for k, dl in change.items():
                lost[k] += dl
            state[r], state[u] = False, True
            returned[i] = u
            cur += d
            if cur < best:
                best, best_set = cur, list(returned)
    out = [False] * n
    for s in best_set:
        out[s] = True
    return out


def _neighbourhood(
    rng: random.Random, touching: list[list[int]], jobs: list[_Job], n: int
) -> list[int]:
    """A random server and the servers it shares jobs with, breadth-first, up to the size;
    random servers make up the rest. With ``n`` <= the size it is every server."""
    first = rng.randrange(n)
    seen = {first}
    queue = [first]
    head = 0
    while head < len(queue) and len(seen) < LNS_NEIGHBOURHOOD:
        s = queue[head]
        head += 1
        links = [t for k in touching[s] for t, _ in jobs[k].gpus if t not in seen]
        rng.shuffle(links)
        for t in links:
            if t not in seen and len(seen) < LNS_NEIGHBOURHOOD:
                seen.add(t)
                queue.append(t)
    while len(seen) < min(LNS_NEIGHBOURHOOD, n):  # a small component: fill with any servers,
        seen.add(rng.randrange(n))  # which lets the step move returns between components
    return sorted(seen)


def _solve_hood(
    hood: list[int],
    jobs: list[_Job],
    touching: list[list[int]],
    chosen: list[bool],
    used: list[int],
    big: int,
    cap_s: float,
    seed: int,
) -> tuple[list[bool], float] | None:
    """Best choice inside ``hood`` with the rest fixed; None when CP-SAT returns nothing."""
    model = cp_model.CpModel()
    xs = {s: model.new_bool_var(f"x{s}") for s in hood}
    model.add(sum(xs.values()) == sum(1 for s in hood if chosen[s]))
    for s, x in xs.items():
        model.add_hint(x, chosen[s])
    affected = sorted({k for s in hood for k in touching[s]})
    terms = [used[s] * x for s, x in xs.items()]
    for k in affected:
        job = jobs[k]
        fixed = sum(g for s, g in job.gpus if s not in xs and chosen[s])
        free = [(xs[s], g) for s, g in job.gpus if s in xs]
        reach = [v - fixed for v in job.survivable if fixed <= v <= fixed + sum(g for _, g in free)]
        if not reach:
            terms.append(big)  # dead whatever the neighbourhood does
            continue
        lost = sum(g * x for x, g in free)
        y = model.new_bool_var(f"y{k}")
        model.add_linear_expression_in_domain(lost, Domain.from_values(reach)).only_enforce_if(~y)
        terms.append(big * y)
    model.minimize(sum(terms))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    solver.parameters.max_deterministic_time = cap_s
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return [bool(solver.value(xs[s])) for s in hood], solver.response_proto.deterministic_time


def lp_bound(inst: ReclaimInstance, count: int) -> float | None:
    """A lower bound on the preemptions of returning ``count`` servers (None if the LP fails):
    the LP relaxation of :func:`.reclaim_rins.tight_model` (fatal servers force their job's
    preemption, the slack row of elastic jobs, exact rows for allowed sets with gaps), solved by
    HiGHS and rounded up because preemptions are integral."""
    return lp_relaxation(tight_model(inst, count))[0]
