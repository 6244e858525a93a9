"""The exact continuous offline optimum (minimum sum of JCTs) of small instances.

Elastic and rigid alike: a rigid job is a job with one allowed count (its request), so its
configurations are "running at the request" and "paused".

No slots: allocations may change at any instant and, with no restart/migration/start
overheads, only *how long* each integer allocation is held between two consecutive events
(arrivals, completions) matters, not where inside that interval. So:

* a **configuration** of an active job set is a vector of allowed GPU counts (0 = paused)
  summing to at most the cluster's GPUs; one that could still raise a job to a faster count
  within the capacity is dominated and dropped;
* for a fixed **event order** (completions interleaved with the known arrivals) the least sum
  of completion times is a linear programme (:func:`order_lp`): ``t[k][c]`` >= 0 time spent in
  configuration ``c`` during interval ``k``, event times ``T_k`` (fixed to the arrival time for
  an arrival), ``T_k - T_{k-1} >= sum_c t[k][c]`` (the rest is idle), and a job completing at
  event ``k`` has done its work by then: ``sum_{k' <= k} sum_c t[k'][c] rate_j(c_j) >= W_j``.
  Every feasible point is a real schedule (hold each configuration for its time, one after the
  other, inside each interval; a job whose work is done early just finishes early) and every
  real schedule is a feasible point of the LP of its own event order, so
  ``OPT = min over orders of LP(order)``;
* a **branch and bound** over event orders (:func:`solve_elastic`) builds the order from the
  front. A prefix's bound is the LP of the prefix plus, for every job not yet completed, its
  completion no earlier than the prefix's last event plus its work left at its fastest rate
  (no earlier than its arrival plus its whole work at its fastest rate if it has not arrived),
  and the prefix's last event no later than the next arrival. (Stronger tail relaxations were
  tried, Queyranne's parallel inequalities on GPU-seconds and a mean-busy-time time-indexed
  tail: they raised the root bound but pruned almost no node on the bench instances tried,
  and cost LP time, so they are not used.) The first incumbents are event-driven list schedules
  (:data:`LIST_RULES`: SRPT, fastest count first; SRPT with GPUs spread by marginal gain; least
  remaining GPU-seconds first) re-optimised by the LP of their own order. The search is
  depth-first, children in order of the parent LP's predicted next event, and stops at a node
  limit (deterministic): the proven lower bound is then the least bound of the open nodes.

LPs are solved by HiGHS through :func:`scipy.optimize.linprog` (default 1e-7 feasibility
tolerance). The schedule handed out is the best order's LP re-solved with every job's work
raised by ``MARGIN`` (relative), so each job really finishes inside its last segment.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from gpuplan.models import SolverStats

from .offline_model import OfflineInstance

__all__ = [
    "DEFAULT_NODES",
    "ElasticSchedule",
    "Segment",
    "configurations",
    "order_lp",
    "order_of",
    "replay_finish",
    "retime",
    "solve_elastic",
]

DEFAULT_NODES = 3000
"""LPs the branch and bound may solve (its deterministic budget)."""
REL_TOL = 1e-7
"""A node is pruned when its bound is within this relative distance of the incumbent."""
MARGIN = 1e-6
"""Relative extra work the replayed schedule does per job (the LP's feasibility tolerance is
1e-7 absolute on works of 1e2-1e3): its JCTs exceed the LP optimum by at most about this."""
MIN_PIECE_S = 1e-9
"""Configuration times below this are dropped from the schedule (LP noise)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """From ``start`` to ``end`` (s) the listed jobs hold these GPU counts (others: none)."""

    start: float
    end: float
    counts: dict[str, int]


@dataclass
class ElasticSchedule:
    """The best schedule found and what is proven about it (times in seconds)."""

    origin: float
    segments: list[Segment]
    finish: dict[str, float]
    avg_jct_s: float
    """Average JCT of ``segments`` run exactly."""
    lower_bound_s: float
    """Proven lower bound on the continuous optimum's average JCT."""
    status: str
    """``optimal`` when the search closed (bound = schedule up to ``REL_TOL``), else
    ``feasible``."""
    nodes: int = 0
    order: list[tuple[str, str]] = field(default_factory=list)
    """The event order of the schedule: (``arrive`` | ``finish``, job id)."""
    stats: list[SolverStats] = field(default_factory=list)

    @property
    def gap(self) -> float:
        """Proven relative gap of ``avg_jct_s`` to the continuous optimum."""
        return (self.avg_jct_s - self.lower_bound_s) / self.lower_bound_s


Event = tuple[str, int]
"""(``arrive`` | ``finish``, job index)."""


def configurations(inst: OfflineInstance, active: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Undominated configurations of ``active``: count vectors (0 or an allowed count per
    job) summing to at most the capacity where no job could move to a faster count in the
    GPUs left. Deterministic order (lexicographic in the jobs' count lists)."""
    cap = inst.capacity
    options = [[0, *sorted(inst.jobs[i].rates)] for i in active]
    out = []
    for combo in itertools.product(*options):
        used = sum(combo)
        if used > cap:
            continue
        free = cap - used
        rates = [inst.jobs[i].rates for i in active]
        if any(
            g2 > g and g2 - g <= free and r[g2] > (r[g] if g else 0.0)
            for g, r in zip(combo, rates, strict=True)
            for g2 in r
        ):
            continue
        if any(combo):
            out.append(combo)
    return out


class _Lp:
    """The order LP (or a prefix's bound LP), built with numpy from cached per-active-set
    configuration matrices. Columns: the n completion times first (a finish event's time is
    its job's completion time), then fixed arrival times, then configuration times."""

    def __init__(self, inst: OfflineInstance) -> None:
        self.inst = inst
        self.n = len(inst.jobs)
        self.cache: dict[tuple[int, ...], np.ndarray] = {}
        self.configs_of: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        self.arrival = np.array([j.arrival for j in inst.jobs])
        self.work = np.array([j.work for j in inst.jobs])
        self.fast = np.array([j.fastest for j in inst.jobs])
        self.lps = 0

    def rates(self, active: tuple[int, ...]) -> np.ndarray:
        """Work rate of each active job (columns) in each configuration (rows)."""
        if active not in self.cache:
            cfgs = configurations(self.inst, active)
            self.configs_of[active] = cfgs
            self.cache[active] = np.array(
                [
                    [
                        self.inst.jobs[i].rates[g] if g else 0.0
                        for i, g in zip(active, c, strict=True)
                    ]
                    for c in cfgs
                ]
            ).reshape(len(cfgs), len(active))
        return self.cache[active]

    def solve(
        self, events: list[Event], margin: float = 0.0
    ) -> tuple[float, dict[str, object]] | None:
        """Least sum of completion times over schedules that start with ``events`` (all of
        them when every job finishes in ``events``; else the bound of the module docstring).
        ``margin``: every job must do that much more than its work (relative), so that when the
        schedule is replayed it finishes inside its last segment despite the LP's tolerance.
        None: infeasible."""
        self.lps += 1
        n = self.n
        origin = self.inst.origin
        lb = [origin] * n
        ub: list[float | None] = [None] * n
        ri: list[np.ndarray] = []
        ci: list[np.ndarray] = []
        vi: list[np.ndarray] = []
        rhs: list[float] = []
        nvar = n
        # per job: (column index arrays, rate arrays) of the intervals it was active in
        work: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {i: [] for i in range(n)}
        pieces: list[tuple[int, int, tuple[int, ...], int]] = []
        t_var: list[int] = []
        active: list[int] = []
        arrived: set[int] = set()
        done: set[int] = set()

        def add_row(cols: list[np.ndarray], vals: list[np.ndarray], b: float) -> None:
            c = np.concatenate(cols)
            ri.append(np.full(len(c), len(rhs)))
            ci.append(c)
            vi.append(np.concatenate(vals))
            rhs.append(b)

        for k, (kind, i) in enumerate(events):
            block = None
            if k:
                act = tuple(active)
                mat = self.rates(act)
                block = np.arange(nvar, nvar + len(mat))
                pieces.append((k, nvar, act, len(mat)))
                nvar += len(mat)
                lb.extend([0.0] * len(mat))
                ub.extend([None] * len(mat))
                for pos, jj in enumerate(act):
                    nz = mat[:, pos] > 0
                    work[jj].append((block[nz], mat[nz, pos]))
            if kind == "arrive":
                tv = nvar
                nvar += 1
                lb.append(float(self.arrival[i]))
                ub.append(float(self.arrival[i]))
                active.append(i)
                active.sort()
                arrived.add(i)
            else:
                tv = i
                active.remove(i)
                done.add(i)
                add_row(
                    [c for c, _ in work[i]], [-r for _, r in work[i]], -self.work[i] * (1 + margin)
                )
            if block is not None:
                add_row(
                    [np.array([t_var[-1], tv]), block],
                    [np.array([1.0, -1.0]), np.ones(len(block))],
                    0.0,
                )
            t_var.append(tv)
        tail = len(done) < n
        if tail:
            last = t_var[-1]
            future = [i for i in range(n) if i not in arrived]
            if future:
                ub[last] = float(min(self.arrival[i] for i in future))
            for i in range(n):
                if i in done:
                    continue
                if i in arrived:
                    # C_i >= T_last + (W_i - done_i) / fastest_i, and C_i >= T_last
                    add_row(
                        [np.array([last, i]), *(c for c, _ in work[i])],
                        [np.array([1.0, -1.0]), *(-r / self.fast[i] for _, r in work[i])],
                        -self.work[i] / self.fast[i],
                    )
                    add_row([np.array([last, i])], [np.array([1.0, -1.0])], 0.0)
                else:
                    lb[i] = float(self.arrival[i] + self.work[i] / self.fast[i])
        cost = np.zeros(nvar)
        cost[:n] = 1.0
        rows = np.concatenate(ri) if ri else np.zeros(0, dtype=int)
        a = coo_matrix(
            (
                np.concatenate(vi) if vi else np.zeros(0),
                (rows, np.concatenate(ci) if ci else np.zeros(0, dtype=int)),
            ),
            shape=(len(rhs), nvar),
        ).tocsr()
        b = np.array(rhs)
        bnd = np.array([lb, [np.inf if u is None else u for u in ub]]).T
        res = linprog(cost, A_ub=a, b_ub=b, bounds=bnd, method="highs")
        if res.status != 0:
            return None
        x = res.x
        left = {i: float(self.work[i] - sum(float(x[c] @ r) for c, r in work[i])) for i in active}
        return float(res.fun), {
            "x": x,
            "t": [float(x[v]) for v in t_var],
            "pieces": pieces,
            "left": left,
        }

    def piece_configs(self, act: tuple[int, ...]) -> list[tuple[int, ...]]:
        return self.configs_of[act]


def order_lp(inst: OfflineInstance, order: list[Event]) -> float | None:
    """The least sum of completion times (s) over schedules with exactly this event order
    (every job arrives and finishes in it); None when no schedule has it."""
    out = _Lp(inst).solve(order)
    return None if out is None else out[0]


LIST_RULES = ((False, "time"), (True, "time"), (False, "area"))
"""The list schedules whose event orders seed the search: (``spread``, ``key``) of
:func:`_list_schedule`; SRPT with the fastest count (srtf's rule), SRPT spreading GPUs by
marginal gain, and least remaining GPU-seconds first (srsf's rule)."""


def _list_schedule(inst: OfflineInstance, spread: bool, key: str = "time") -> list[Event]:
    """The event order of an event-driven list schedule: at every event, jobs in order of
    remaining time at their fastest count (``key`` "time") or of remaining GPU-seconds at that
    count ("area"); ``spread`` False: each in turn takes its fastest count that fits; True: each
    its smallest, then GPUs left go to the largest cut in remaining time per GPU."""
    jobs = inst.jobs
    top = [max(j.rates, key=lambda g, j=j: (j.rates[g], -g)) for j in jobs]

    def rank(i: int) -> tuple[float, int]:
        t = left[i] / jobs[i].fastest
        return (t * top[i] if key == "area" else t, i)

    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].arrival, i))
    left = [j.work for j in jobs]
    now = jobs[order[0]].arrival
    events: list[Event] = []
    nxt, active = 0, []
    while nxt < len(order) or active:
        while nxt < len(order) and jobs[order[nxt]].arrival <= now + 1e-12:
            events.append(("arrive", order[nxt]))
            active.append(order[nxt])
            nxt += 1
        ready = sorted(active, key=rank)
        free, got = inst.capacity, {}
        for i in ready:
            fits = [g for g in jobs[i].rates if g <= free]
            if fits:
                rates = jobs[i].rates
                g = min(fits) if spread else max(fits, key=lambda c: (rates[c], -c))
                got[i], free = g, free - g
        while spread:
            best: tuple[float, int, int] | None = None
            for i, have in got.items():
                rates = jobs[i].rates
                for g in rates:
                    if have < g <= have + free and rates[g] > rates[have]:
                        cut = (left[i] / rates[have] - left[i] / rates[g]) / (g - have)
                        if best is None or cut > best[0]:
                            best = (cut, i, g)
            if best is None:
                break
            free -= best[2] - got[best[1]]
            got[best[1]] = best[2]
        horizon = jobs[order[nxt]].arrival if nxt < len(order) else math.inf
        step = min([horizon - now] + [left[i] / jobs[i].rates[g] for i, g in got.items()])
        for i, g in got.items():
            left[i] -= jobs[i].rates[g] * step
        now += step
        for i in sorted(got, key=lambda i: (left[i], i)):
            if left[i] <= 1e-9 * jobs[i].work:
                events.append(("finish", i))
                active.remove(i)
    return events


def _schedule(inst: OfflineInstance, lp: _Lp, sol: dict[str, object]) -> list[Segment]:
    """Segments of an LP solution: each interval's configurations one after the other, then
    idle until the interval's end. Inside an interval the order changes no completion the LP
    counts (each job's work by the interval's end is the same), so configurations are chained
    greedily, each next one the one sharing most (job, count) pairs with the segment before
    (ties: the LP's column order): a job is not stopped and restarted inside an interval for
    nothing, which costs restarts when the schedule is replayed on a cluster with overheads."""
    x = sol["x"]
    times: list[float] = sol["t"]  # type: ignore[assignment]
    segs: list[Segment] = []
    for k, first, act, size in sol["pieces"]:  # type: ignore[attr-defined]
        pieces = []
        for v, c in zip(range(first, first + size), lp.piece_configs(act), strict=True):
            dur = float(x[v])  # type: ignore[index]
            if dur >= MIN_PIECE_S:
                pieces.append(({inst.jobs[i].id: g for i, g in zip(act, c, strict=True) if g}, dur))
        start = times[k - 1]
        while pieces:
            prev = segs[-1].counts if segs else {}
            pick = max(
                range(len(pieces)),
                key=lambda p: (sum(1 for j, g in pieces[p][0].items() if prev.get(j) == g), -p),
            )
            counts, dur = pieces.pop(pick)
            segs.append(Segment(start, start + dur, counts))
            start += dur
    return segs


def replay_finish(inst: OfflineInstance, segments: list[Segment]) -> dict[str, float]:
    """Finish time of every job when ``segments`` are run exactly (a job stops once its work
    is done; one left with at most ``1e-6`` of its work finishes at its last segment's end)."""
    by_id = {j.id: j for j in inst.jobs}
    done = dict.fromkeys(by_id, 0.0)
    out = dict.fromkeys(by_id, math.inf)
    last_end = dict.fromkeys(by_id, math.inf)
    for s in segments:
        for jid, g in s.counts.items():
            j = by_id[jid]
            if out[jid] < math.inf:
                continue
            rate = j.rates[g]
            if done[jid] + rate * (s.end - s.start) >= j.work:
                out[jid] = s.start + (j.work - done[jid]) / rate
            done[jid] += rate * (s.end - s.start)
            last_end[jid] = s.end
    for jid, j in by_id.items():
        if out[jid] == math.inf and done[jid] >= j.work * (1 - 1e-6):
            out[jid] = last_end[jid]
    return out


def order_of(inst: OfflineInstance, finish: dict[str, float]) -> list[Event]:
    """The event order of a schedule whose jobs finish at ``finish`` (job id -> s): events by
    time, a completion before an arrival at the same instant, ties by job index."""
    ranked = [(j.arrival, 1, i) for i, j in enumerate(inst.jobs)]
    ranked += [(finish[j.id], 0, i) for i, j in enumerate(inst.jobs)]
    return [("arrive" if kind else "finish", i) for _, kind, i in sorted(ranked)]


def retime(
    inst: OfflineInstance, order: list[Event]
) -> tuple[list[Segment], dict[str, float], float] | None:
    """The best schedule with this event order (its LP, with the replay margin): segments,
    finish times and average JCT when run exactly; None when no schedule has the order. A real
    schedule re-timed this way is never worse than itself (it is a point of its own LP)."""
    lp = _Lp(inst)
    out = lp.solve(order, margin=MARGIN)
    if out is None:
        return None
    segs = _schedule(inst, lp, out[1])
    finish = replay_finish(inst, segs)
    avg = sum(finish[j.id] - j.arrival for j in inst.jobs) / len(inst.jobs)
    return segs, finish, avg


def _children(inst: OfflineInstance, events: list[Event], sol: dict[str, object]) -> list[Event]:
    """Next events of a prefix, most promising first (depth-first takes the first)."""
    n = len(inst.jobs)
    arrived = {i for kind, i in events if kind == "arrive"}
    done = {i for kind, i in events if kind == "finish"}
    active = sorted(arrived - done)
    future = sorted(
        (i for i in range(n) if i not in arrived), key=lambda i: (inst.jobs[i].arrival, i)
    )
    last_t: float = sol["t"][-1]  # type: ignore[index]
    left: dict[int, float] = sol["left"]  # type: ignore[assignment]
    keyed = [(last_t + max(0.0, left[i]) / inst.jobs[i].fastest, 0, i) for i in active]
    if future:
        a = future[0]
        if events[-1][0] == "arrive" and inst.jobs[a].arrival == inst.jobs[events[-1][1]].arrival:
            return [("arrive", a)]  # simultaneous arrivals: no completion in between helps
        keyed.append((inst.jobs[a].arrival, 1, a))
    keyed.sort()
    return [("arrive" if kind else "finish", i) for _, kind, i in keyed]


def solve_elastic(inst: OfflineInstance, nodes: int = DEFAULT_NODES) -> ElasticSchedule:
    """Branch and bound over event orders (module docstring) with at most ``nodes`` LPs."""
    t0 = time.perf_counter()
    lp = _Lp(inst)
    n = len(inst.jobs)
    release = sum(j.arrival for j in inst.jobs)
    best: tuple[float, list[Event], dict[str, object]] | None = None
    for spread, key in LIST_RULES:
        order = _list_schedule(inst, spread, key)
        out = lp.solve(order)
        if out is not None and (best is None or out[0] < best[0] - 1e-9):
            best = (out[0], order, out[1])
    assert best is not None
    first = sorted(range(n), key=lambda i: (inst.jobs[i].arrival, i))[0]
    stack: list[tuple[float, list[Event]]] = [(-math.inf, [("arrive", first)])]
    closed = True
    while stack:
        parent_bound, events = stack.pop()
        if parent_bound >= best[0] - REL_TOL * abs(best[0]):
            continue
        if lp.lps >= nodes:
            stack.append((parent_bound, events))
            closed = False
            break
        out = lp.solve(events)
        if out is None:
            continue
        value, sol = out
        if value >= best[0] - REL_TOL * abs(best[0]):
            continue
        if sum(1 for kind, _ in events if kind == "finish") == n:
            best = (value, events, sol)
            continue
        for child in reversed(_children(inst, events, sol)):
            stack.append((value, [*events, child]))
    open_bound = min((b for b, _ in stack), default=math.inf) if not closed else math.inf
    lower = min(best[0], open_bound)
    final = lp.solve(best[1], margin=MARGIN)
    segs = _schedule(inst, lp, best[2] if final is None else final[1])
    finish = replay_finish(inst, segs)
    avg = (sum(finish.values()) - release) / n
    status = "optimal" if closed else "feasible"
    ms = (time.perf_counter() - t0) * 1000.0
    lower_avg = min((lower - release) / n, avg)
    stats = SolverStats(
        stage="offline-elastic",
        backend="highs-lp-bnb",
        status=status,
        objective=avg,
        bound=lower_avg,
        gap=max(0.0, (avg - lower_avg) / avg) if avg > 0 else 0.0,
        wall_ms=ms,
        node_limit=nodes,
        deterministic=True,
        message=f"{lp.lps} LPs, branch and bound over event orders",
    )
    return ElasticSchedule(
        origin=inst.origin,
        segments=segs,
        finish=finish,
        avg_jct_s=avg,
        lower_bound_s=lower_avg,
        status=status,
        nodes=lp.lps,
        order=[(k, inst.jobs[i].id) for k, i in best[1]],
        stats=[stats],
    )
