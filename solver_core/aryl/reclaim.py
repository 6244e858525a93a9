"""Which on-loan servers to hand back (Aryl §4, App. B, Alg. 1), and how to score the choice.

The inference side asks for N_R of its servers back; every job with GPUs on a returned server
either *scales in* (an elastic job that still holds an allowed GPU count elsewhere) or is
*preempted*. The goal is to preempt as few jobs as possible ("so fewer users are affected").
Costs are coupled: a job spanning several servers is preempted once however many of them go,
so this is a knapsack with dependent item values (NP-hard in general).

Data model (pure, so tests and benchmarks need no cluster): a :class:`ReclaimInstance` lists the
on-loan servers in loan order and, per job, the GPUs it holds on every server (on-loan or not)
plus the GPU counts it may keep running with. A job survives a reclaim iff the GPUs it keeps are
one of those counts -- exactly the rule the engine applies when it removes a node, so a
prediction made here is what the simulator then does. Rigid jobs may keep only their full size.

Selectors (each returns ``count`` server names):

* :func:`select_aryl` -- Aryl: first release servers whose loss preempts nobody (the flexible
  group, plus idle servers), then Alg. 1's greedy on the *server preemption cost*
  ``c_s = sum_{j on s} 1/|S_j|`` with cost updates after every pick.
* :func:`select_exact` -- the optimum as an integer programme (CP-SAT or any backend of
  :mod:`gpuplan.solver_core.backends`), under a time limit, falling back to the heuristic.
* :func:`select_scf` -- Smallest (job) Count First, static costs (the naive 0-1 knapsack).
* :func:`select_random` -- seeded random servers.

:class:`Reclaimer` wraps any of them as the engine's ``reclaimer(view, on_loan, count)`` and logs
a :class:`ReclaimOutcome` per request; :func:`reclaim_metrics` reduces the log to the paper's
metrics (preemptions, collateral damage, share of demand met by the flexible group).
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuplan.models import ClusterView, SolverStats

from ..backends import MipModel, Solution, lin_sum, solve_with_fallback
from ..limits import SolveLimits, resolve_limits

__all__ = [
    "RECLAIM_METHODS",
    "ReclaimInstance",
    "ReclaimJob",
    "ReclaimOutcome",
    "Reclaimer",
    "cost_table",
    "evaluate",
    "preemption_costs",
    "reclaim_metrics",
    "select",
    "select_aryl",
    "select_exact",
    "select_random",
    "select_scf",
]

RECLAIM_METHODS = ("aryl", "exact", "scf", "random")
RECLAIM_WORK_S = 1.0
"""Deterministic budget of an exact reclaim made for a policy (CP-SAT deterministic seconds)."""
_EPS = 1e-9


# --------------------------------------------------------------------------------------------
# Data model
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ReclaimJob:
    """A running job: GPUs per server (every server it uses) and the GPU counts it may keep.

    ``allowed`` empty means rigid: the job survives only while it keeps all its GPUs.
    """

    id: str
    gpus: Mapping[str, int]
    allowed: frozenset[int] = frozenset()

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
                        per_job.setdefault(job, {})[server] = \
                            per_job.get(job, {}).get(server, 0) + gpus
        allowed = allowed or {}
        jobs = tuple(ReclaimJob(j, g, frozenset(allowed.get(j, ()))) for j, g in per_job.items())
        sizes = ({s: server_gpus for s in layout} if isinstance(server_gpus, int)
                 else dict(server_gpus))
        return cls(tuple(layout), jobs, sizes)

    @classmethod
    def from_view(cls, view: ClusterView, on_loan: Sequence[str],
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
                counts = {n: len(set(hint[n]) & set(g)) for n, g in alloc.placement.items()
                          if n in hint}
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


# --------------------------------------------------------------------------------------------
# Outcome of a choice
# --------------------------------------------------------------------------------------------
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
        servers=list(servers), preempted=preempted, scaled_in=scaled,
        collateral_gpus=collateral, returned_gpus=sum(inst.size(s) for s in servers),
        idle_servers=idle, flexible_servers=flexible,
    )


# --------------------------------------------------------------------------------------------
# Baselines
# --------------------------------------------------------------------------------------------
def _check_count(inst: ReclaimInstance, count: int) -> int:
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    return min(count, len(inst.servers))


def select_scf(inst: ReclaimInstance, count: int) -> list[str]:
    """Smallest (job) Count First: the ``count`` servers hosting the fewest jobs, static
    (no cost update, i.e. the naive 0-1 knapsack); ties in loan order."""
    count = _check_count(inst, count)
    on = inst.jobs_on()
    order = {s: i for i, s in enumerate(inst.servers)}
    return sorted(inst.servers, key=lambda s: (len(on[s]), order[s]))[:count]


def select_random(inst: ReclaimInstance, count: int, rng: random.Random | int = 0
                  ) -> list[str]:
    """``count`` servers drawn uniformly without replacement (seeded)."""
    count = _check_count(inst, count)
    r = rng if isinstance(rng, random.Random) else random.Random(rng)
    return r.sample(list(inst.servers), count)


# --------------------------------------------------------------------------------------------
# Aryl: flexible group first, then Alg. 1
# --------------------------------------------------------------------------------------------
class _GreedyState:
    """Mutable state shared by the two phases of :func:`select_aryl`.

    Plain dicts of precomputed values (GPUs per server, allowed counts) because the greedy
    evaluates "is job j at risk on server s" tens of thousands of times per decision. Built in
    one pass over the jobs; ``g`` holds the instance's own (read-only) GPU maps, not copies.
    """

    def __init__(self, inst: ReclaimInstance, dynamic: bool = True) -> None:
        self.dynamic = dynamic
        self.order = {s: i for i, s in enumerate(inst.servers)}
        self.avail: set[str] = set(inst.servers)
        on: dict[str, list[str]] = {s: [] for s in inst.servers}
        g: dict[str, Mapping[str, int]] = {}
        ok: dict[str, Collection[int]] = {}
        kept: dict[str, int] = {}
        left: dict[str, int] = {}
        get = on.get
        for job in inst.jobs:
            jid, gpus = job.id, job.gpus
            total = sum(gpus.values())
            g[jid] = gpus
            kept[jid] = total
            ok[jid] = job.allowed or (total,)  # rigid: only its full size
            n = 0
            for s in gpus:
                jobs = get(s)
                if jobs is not None:
                    jobs.append(jid)
                    n += 1
            left[jid] = n  # on-loan servers of j not returned yet (the dynamic fraction)
        self.on, self.g, self.ok, self.kept, self.left = on, g, ok, kept, left
        # |S_j| counts every server of j, training ones too (the static "server fraction")
        self.share = {} if dynamic else {j.id: 1.0 / len(j.gpus) for j in inst.jobs}
        self.alive = dict.fromkeys(kept, True)

    def at_risk(self, jid: str, s: str) -> bool:
        """Would returning ``s`` now preempt job ``jid``?"""
        if not self.alive[jid]:
            return False
        left = self.kept[jid] - self.g[jid][s]
        return left <= 0 or left not in self.ok[jid]

    def used(self, s: str) -> int:
        alive = self.alive
        return sum(self.g[j][s] for j in self.on[s] if alive[j])

    def scan(self) -> tuple[dict[str, float], dict[str, int], set[str]]:
        """For every available server at once: (cost, # jobs at risk, servers sharing a live
        job with another on-loan server not returned yet). One pass over the jobs rather than
        one ``cost`` call per server; the costs are summed in the same (job) order as
        ``cost``, so they are bit-identical to it."""
        avail, alive, kept, ok = self.avail, self.alive, self.kept, self.ok
        dynamic, left, share = self.dynamic, self.left, self.share
        costs = dict.fromkeys(avail, 0.0)
        risks = dict.fromkeys(avail, 0)
        multi: set[str] = set()
        for jid, gpus in self.g.items():
            if not alive[jid] or not left[jid]:
                continue
            f = (1.0 / left[jid]) if dynamic else share[jid]
            spread = left[jid] > 1
            total, allowed = kept[jid], ok[jid]
            for s, n in gpus.items():
                if s not in avail:
                    continue
                if spread:
                    multi.add(s)
                rest = total - n
                if rest <= 0 or rest not in allowed:
                    costs[s] += f
                    risks[s] += 1
        return costs, risks, multi

    def free_to_take(self, s: str) -> bool:
        """Whether returning ``s`` now preempts nobody (inlined ``at_risk``: phase A asks this
        of every server)."""
        alive, kept, g, ok = self.alive, self.kept, self.g, self.ok
        for jid in self.on[s]:
            if alive[jid]:
                rest = kept[jid] - g[jid][s]
                if rest <= 0 or rest not in ok[jid]:
                    return False
        return True

    def take(self, s: str) -> list[str]:
        """Return ``s``: preempt its at-risk jobs, scale in the others. Returns touched jobs."""
        self.avail.discard(s)
        touched = []
        for jid in self.on[s]:
            self.left[jid] -= 1
            if not self.alive[jid]:
                continue
            touched.append(jid)
            if self.at_risk(jid, s):
                self.alive[jid] = False
            else:
                self.kept[jid] -= self.g[jid][s]
        return touched

    # ---- Alg. 1 quantities ----
    def frac(self, jid: str) -> float:
        """Job j's server fraction: 1/|S_j| (Tab. 1) or, dynamic, 1/(its on-loan servers not
        returned yet) -- the servers its one preemption can still be shared with."""
        if self.dynamic:
            return 1.0 / max(1, self.left[jid])
        return self.share[jid]

    def cost(self, s: str) -> tuple[float, int]:
        """(server preemption cost, # jobs preempted by returning s alone)."""
        c = 0.0
        n = 0
        alive, kept, g, ok = self.alive, self.kept, self.g, self.ok
        dynamic, left, share = self.dynamic, self.left, self.share
        for jid in self.on[s]:
            if not alive[jid]:
                continue
            rest = kept[jid] - g[jid][s]
            if rest <= 0 or rest not in ok[jid]:  # at risk (inlined: the hot loop)
                c += 1.0 / left[jid] if dynamic else share[jid]
                n += 1
        return c, n

    def neighbours(self, s: str) -> set[str]:
        out: set[str] = set()
        avail = self.avail
        for jid in self.on[s]:
            if self.alive[jid]:
                g = self.g[jid]
                if len(g) > 1:
                    out.update(t for t in g if t in avail)
        out.discard(s)
        return out

    def look_ahead(self, s: str, costs: Mapping[str, float]) -> float:
        """Cheapest neighbour cost after returning ``s`` (its preempted jobs vanish there);
        +inf without neighbours. Prefers picks that leave a cheap server behind (Fig. 5)."""
        relief: dict[str, float] = {}
        avail, alive, kept, ok = self.avail, self.alive, self.kept, self.ok
        for jid in self.on[s]:
            g = self.g[jid]
            if len(g) == 1 or not alive[jid]:
                continue
            total, allowed = kept[jid], ok[jid]
            rest = total - g[s]
            if rest > 0 and rest in allowed:  # not at risk on s (``at_risk`` inlined)
                continue
            f = self.frac(jid)
            for t, n in g.items():
                if t != s and t in avail and (total - n <= 0 or total - n not in allowed):
                    relief[t] = relief.get(t, 0.0) + f
        if not relief:
            return math.inf
        return min(costs[t] - r for t, r in relief.items())

    def collateral(self, s: str) -> int:
        return sum(self.kept[j] - self.g[j][s] for j in self.on[s] if self.at_risk(j, s))


def preemption_costs(inst: ReclaimInstance, returned: Sequence[str] = ()
                     ) -> dict[str, tuple[float, int]]:
    """Alg. 1's view after ``returned`` servers went back (in that order): for every other
    on-loan server, (server preemption cost, # jobs its return would preempt). Jobs preempted
    by earlier returns no longer count, e.g. on Fig. 5 returning server 1 leaves server 2 at 0.
    """
    st = _GreedyState(inst)
    for s in returned:
        st.take(s)
    return {s: st.cost(s) for s in inst.servers if s in st.avail}


def _flexible_phase(st: _GreedyState, count: int,
                    flexible: Mapping[str, Mapping[str, int]] | None = None) -> list[str]:
    """Phase A: servers whose return preempts nobody -- idle ones, then flexible-only ones
    (per the ``flexible`` hint), then any other, fewest used GPUs first within each tier.
    Returning one only ever lowers other jobs' slack, so a server that stops being free never
    becomes free again: a lazily validated heap suffices."""
    flex_on: dict[str, int] = {}
    for per_server in (flexible or {}).values():
        for s, n in per_server.items():
            flex_on[s] = flex_on.get(s, 0) + n

    def tier(s: str, used: int) -> int:
        if used == 0:
            return 0
        return 1 if flex_on.get(s, 0) >= used else 2

    heap = []
    order, free_to_take = st.order, st.free_to_take
    for s in st.avail:
        if free_to_take(s):
            used = st.used(s)
            heap.append((tier(s, used), used, order[s], s))
    heapq.heapify(heap)
    picked: list[str] = []
    while heap and len(picked) < count:
        *_, s = heapq.heappop(heap)
        if s in st.avail and free_to_take(s):
            st.take(s)
            picked.append(s)
    return picked


_LAZY = -math.inf
"""Heap placeholder for a look-ahead not computed yet: sorts first among equal (cost, risks),
so it is computed exactly when the server could be the next pick."""


def select_aryl(inst: ReclaimInstance, count: int, *, flexible_first: bool = True,
                look_ahead: bool = True, dynamic: bool = True) -> list[str]:
    """Aryl's reclaim: phase A (no-preemption servers), then Alg. 1 ``SelectServers``.

    Alg. 1 pops the server with the lowest cost, then ``UpdateCost`` removes its preempted jobs
    from their other servers. Deterministic tie-breaks (unspecified in the paper; digest §2.2.4):
    lower cost, fewer jobs preempted, one-step look-ahead, loan order. A job that survives the
    pick (scale-in) keeps its place but loses slack, so its other servers may *gain* cost.
    When one server is left to choose -- always the case for N_R = 1, the paper's
    ``FindBestServer`` -- the fewest-preemptions server is taken directly (ties: less
    collateral damage, then loan order), since no later pick can benefit from a cheap partner.

    ``dynamic`` (default) divides a job's preemption by its on-loan servers *not yet returned*
    instead of the static |S_j| of Tab. 1. For jobs that live on on-loan servers only (all of
    Tab. 1 / Fig. 5) the two agree until the first pick. The static fraction keeps promising
    that a job's preemption will be shared by servers that can never be returned (training
    servers count in |S_j|) or were already returned by a scale-in, and the greedy then
    "completes" half-drained jobs at a loss; the benchmark measures both (``dynamic=False`` is
    Alg. 1 as printed).

    Speed: a heap keyed (cost, risks, look-ahead, loan order) with lazy invalidation (version
    numbers). The look-ahead -- the expensive key, a walk over the server's neighbours -- is
    computed *lazily*: a (re-)keyed server enters with the placeholder ``_LAZY``, and only when
    such an entry reaches the top is its look-ahead computed and the entry pushed back. Servers
    whose (cost, risks) never reach the top -- most of them when N_R is a tenth of the fleet --
    never pay for it. Every pick re-keys the servers whose cost or look-ahead it can change
    (those sharing a touched job, and their neighbours), so a computed look-ahead is never
    stale and the picks are identical to computing every key eagerly
    (``tests/test_aryl_reclaim_reference.py`` checks this against the eager version).
    """
    count = _check_count(inst, count)
    st = _GreedyState(inst, dynamic)
    picked = _flexible_phase(st, count, inst.flexible) if flexible_first else []
    if len(picked) >= count:
        return picked

    costs, risks, multi = st.scan()
    if not look_ahead:
        multi = set()  # the look-ahead only matters for servers sharing a job with another one
    version: dict[str, int] = dict.fromkeys(st.avail, 0)
    order = st.order
    heap = [(round(costs[s], 9), risks[s], _LAZY if s in multi else math.inf, order[s], 0, s)
            for s in st.avail]
    heapq.heapify(heap)

    while len(picked) < count:
        if count - len(picked) == 1:  # FindBestServer (``risks`` is current for every server)
            fewest = min(risks[s] for s in st.avail)
            best = min((s for s in st.avail if risks[s] == fewest),
                       key=lambda s: (st.collateral(s), order[s]))
            st.take(best)
            picked.append(best)
            break
        cost, risk, look, rank, ver, s = heapq.heappop(heap)
        if s not in st.avail or ver != version[s]:
            continue
        if look == _LAZY:
            look = st.look_ahead(s, costs)
            if look != math.inf:
                look = round(look, 9)
            heapq.heappush(heap, (cost, risk, look, rank, ver, s))
            continue
        touched = st.take(s)
        picked.append(s)
        # UpdateCost: servers sharing a touched job change cost; their neighbours' look-ahead
        # depends on those costs, so they are re-keyed too.
        changed: set[str] = set()
        for jid in touched:
            changed.update(t for t in st.g[jid] if t in st.avail)
        for t in changed:
            costs[t], risks[t] = st.cost(t)
        rekey = set(changed)
        if look_ahead:
            for t in changed:
                rekey |= st.neighbours(t)
        for t in rekey:
            version[t] += 1
            heapq.heappush(heap, (round(costs[t], 9), risks[t],
                                  _LAZY if t in multi else math.inf, order[t], version[t], t))
    return picked


# --------------------------------------------------------------------------------------------
# Exact
# --------------------------------------------------------------------------------------------
def _contiguous_floor(job: ReclaimJob) -> int | None:
    """Smallest allowed count a such that every count in [a, total] is allowed, when every
    allowed count <= total is in that range; None when the allowed set has gaps below total."""
    if not job.allowed:
        return job.total
    below = sorted(a for a in job.allowed if 0 < a <= job.total)
    if not below or below[-1] != job.total:
        return None if below else job.total + 1  # cannot keep its current size: any loss kills
    if below == list(range(below[0], job.total + 1)):
        return below[0]
    return None


def _components(inst: ReclaimInstance) -> list[list[str]]:
    """On-loan servers grouped by the jobs they share (union-find), each in loan order.

    Costs are coupled only through jobs spanning several on-loan servers, so the preemptions of
    a choice are the sum over components of what it takes from each."""
    parent = {s: s for s in inst.servers}

    def find(s: str) -> str:
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    for job in inst.jobs:
        loan = [s for s in job.gpus if s in parent]
        for s in loan[1:]:
            a, b = find(loan[0]), find(s)
            if a != b:
                parent[max(a, b)] = min(a, b)
    groups: dict[str, list[str]] = {}
    for s in inst.servers:
        groups.setdefault(find(s), []).append(s)
    return list(groups.values())


def _enumerate_component(servers: list[str], jobs: list[ReclaimJob], big: int, upto: int
                         ) -> list[tuple[int, int, int]]:
    """For m = 0..upto: (preemptions, busy GPUs, bit mask) of the best m-subset of ``servers``.

    Every subset is scored at once with numpy: bit i of a mask = ``servers[i]`` returned; a
    job's lost GPUs per mask are built by doubling the array once per server. Ties go to fewer
    busy GPUs, then to the lowest mask (earliest servers in loan order)."""
    k = len(servers)
    size = 1 << k
    preempted = np.zeros(size, dtype=np.int64)
    busy = np.zeros(size, dtype=np.int64)
    for job in jobs:
        lost = np.zeros(1, dtype=np.int64)
        for s in servers:
            lost = np.concatenate((lost, lost + job.gpus.get(s, 0)))
        total = job.total
        ok = np.zeros(total + 1, dtype=bool)
        for a in (job.allowed or {total}):
            if 0 < a <= total:
                ok[a] = True
        preempted += ~ok[total - lost]
        busy += lost
    masks = np.arange(size, dtype=np.int64)
    popcount = np.zeros(size, dtype=np.int64)
    for i in range(k):
        popcount += (masks >> i) & 1
    score = preempted * big + busy
    out = []
    for m in range(min(k, upto) + 1):
        idx = np.flatnonzero(popcount == m)
        best = int(idx[np.argmin(score[idx])])
        out.append((int(preempted[best]), int(busy[best]), best))
    return out


def select_exact(
    inst: ReclaimInstance,
    count: int,
    *,
    backend: str = "cp-sat",
    time_limit_s: float | None = None,
    limits: SolveLimits | None = None,
    enumerate_limit: int = 14,
) -> tuple[list[str], SolverStats]:
    """Fewest preemptions, exactly (the paper's exhaustive-search optimum as an ILP).

    Core model: ``x_s`` = server s returned, ``y_j`` = job j preempted, lost GPUs
    ``L_j = sum_s g_js x_s``; a job may lose up to its slack ``total - a_j`` (``a_j`` its smallest
    allowed count with everything above it allowed) without preemption:
    ``L_j <= slack_j + (total_j - slack_j) y_j``; rigid jobs also get ``y_j >= x_s``. Allowed sets
    with gaps are modelled exactly with one binary per allowed count.

    That model's LP bound is weak (spreading x fractionally makes every y small), so CP-SAT
    cannot prove optimality on a few hundred servers. The instance is therefore split into
    components of servers linked by shared jobs (:func:`_components`); components of at most
    ``enumerate_limit`` servers are solved exactly by enumeration for every m (the best m
    servers), and enter the ILP as a choice ``z_cm`` of how many servers to take from them;
    only larger components keep the x/y rows. ``sum_m m z_cm + sum x_s = N_R``.
    Objective: ``BIG * preemptions + busy GPUs returned`` -- fewest preemptions, then prefer
    idle servers (deterministic). Falls back to :func:`select_aryl` on timeout or failure.
    """
    count = _check_count(inst, count)
    if count == 0:
        return [], SolverStats(stage="reclaim", backend=backend, status="optimal", objective=0.0)
    on = inst.jobs_on()
    used = {s: sum(j.gpus[s] for j in on[s]) for s in inst.servers}
    big = sum(used.values()) + 1
    comps = _components(inst)
    small = [c for c in comps if len(c) <= enumerate_limit]
    large = [s for c in comps if len(c) > enumerate_limit for s in c]
    tables = []
    for comp in small:
        members = set(comp)
        jobs = [j for j in inst.jobs if not members.isdisjoint(j.gpus)]
        tables.append(_enumerate_component(comp, jobs, big, count))
    large_set = set(large)
    large_jobs = [j for j in inst.jobs if not large_set.isdisjoint(j.gpus)]
    xs: dict[str, object] = {}
    zs: dict[tuple[int, int], object] = {}
    greedy = set(select_aryl(inst, count))

    def build() -> MipModel:
        m = MipModel("reclaim")
        picked_terms = []
        obj_terms = []
        for ci, table in enumerate(tables):
            row = []
            for size, (pre, busy, _) in enumerate(table):
                z = m.bool_var(f"z_{ci}_{size}")
                zs[ci, size] = z
                row.append(z)
                picked_terms.append(size * z)
                obj_terms.append((big * pre + busy) * z)
            m.add(lin_sum(row) == 1, f"one_{ci}")
            take = sum(1 for s in small[ci] if s in greedy)
            for size in range(len(table)):
                m.hint(zs[ci, size], 1 if size == take else 0)  # type: ignore[arg-type]
        for s in large:
            xs[s] = m.bool_var(f"x_{s}")
            picked_terms.append(xs[s])
            obj_terms.append(used[s] * xs[s])  # type: ignore[operator]
            m.hint(xs[s], 1 if s in greedy else 0)  # type: ignore[arg-type]
        m.add(lin_sum(picked_terms) == count, "demand")  # type: ignore[arg-type]
        for k, job in enumerate(large_jobs):
            loan = [s for s in job.gpus if s in xs]
            y = m.bool_var(f"y_{k}")
            obj_terms.append(big * y)
            lost = lin_sum(job.gpus[s] * xs[s] for s in loan)  # type: ignore[operator]
            total = job.total
            floor = _contiguous_floor(job)
            if floor is not None:
                slack = max(0, total - floor)
                m.add(lost <= slack + (total - slack) * y, f"keep_{k}")
                if slack == 0:
                    for s in loan:
                        m.add(y >= xs[s], f"rigid_{k}_{s}")  # type: ignore[operator]
            else:
                options = sorted(a for a in job.allowed if 0 < a <= total)
                ws = [m.bool_var(f"w_{k}_{a}") for a in options]
                m.add(lin_sum(ws) + y == 1, f"choose_{k}")
                kept = total - lost - lin_sum(a * w for a, w in zip(options, ws, strict=True))
                m.add(kept <= total * y, f"kept_hi_{k}")
                m.add(kept >= -total * y, f"kept_lo_{k}")
        m.minimize(lin_sum(obj_terms))  # type: ignore[arg-type]
        return m

    def decode(sol: Solution) -> list[str]:
        chosen: set[str] = {s for s in large if sol.value(xs[s]) == 1}  # type: ignore[arg-type]
        for ci, table in enumerate(tables):
            for size, (_, _, mask) in enumerate(table):
                if sol.value(zs[ci, size]) == 1:  # type: ignore[arg-type]
                    chosen.update(s for i, s in enumerate(small[ci]) if mask >> i & 1)
        return [s for s in inst.servers if s in chosen]

    return solve_with_fallback(build, lambda: select_aryl(inst, count), decode, backend,
                               limits=resolve_limits(time_limit_s, limits, RECLAIM_WORK_S),
                               stage="reclaim")


def select(inst: ReclaimInstance, count: int, method: str = "aryl", *, seed: int = 0,
           **kw: object) -> tuple[list[str], SolverStats]:
    """Dispatch by name (:data:`RECLAIM_METHODS`): the servers and how they were chosen.

    The stats say whether the answer is proven: ``optimal`` from the exact method, ``heuristic``
    with ``fell_back`` when the exact method ran out of budget, ``heuristic`` for the others.
    """
    if method == "exact":
        return select_exact(inst, count, **kw)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    if method == "aryl":
        chosen = select_aryl(inst, count, **kw)  # type: ignore[arg-type]
    elif method == "scf":
        chosen = select_scf(inst, count)
    elif method == "random":
        chosen = select_random(inst, count, seed)
    else:
        raise ValueError(f"unknown reclaim method {method!r}; choose one of {RECLAIM_METHODS}")
    return chosen, SolverStats(stage="reclaim", backend=method, status="heuristic",
                               wall_ms=(time.perf_counter() - t0) * 1000.0)


# --------------------------------------------------------------------------------------------
# Engine adapter
# --------------------------------------------------------------------------------------------
class Reclaimer:
    """An engine ``reclaimer(view, on_loan, count) -> names`` that logs every decision.

    ``flexible_first`` defaults to on for Aryl (its phase A) and off for the baselines, which
    the paper runs as plain server choosers. Random draws from one seeded generator across the
    whole run, so a run is reproducible.
    """

    def __init__(self, method: str = "aryl", *, seed: int = 0, backend: str = "cp-sat",
                 limits: SolveLimits | None = None,
                 flexible_first: bool | None = None) -> None:
        if method not in RECLAIM_METHODS:
            raise ValueError(f"unknown reclaim method {method!r}; choose one of "
                             f"{RECLAIM_METHODS}")
        self.method = method
        self.backend = backend
        self.limits = limits
        """The exact method's budget; None: the deterministic default (:data:`RECLAIM_WORK_S`)."""
        self.flexible_first = method == "aryl" if flexible_first is None else flexible_first
        self.rng = random.Random(seed)
        self.outcomes: list[ReclaimOutcome] = []
        self.flexible_source: Callable[[], Mapping[str, Mapping[str, Sequence[int]]]] | None = \
            None
        """Set by a scheduler that knows its flexible workers (Aryl's policy does)."""

    def choose(self, inst: ReclaimInstance, count: int) -> tuple[list[str], SolverStats | None]:
        picked: list[str] = []
        if self.flexible_first and self.method != "aryl":
            st = _GreedyState(inst)
            picked = _flexible_phase(st, count, inst.flexible)
            if len(picked) == count:
                return picked, None
            rest = ReclaimInstance(tuple(s for s in inst.servers if s not in set(picked)),
                                   inst.jobs, inst.server_gpus, inst.flexible)
            # the remaining choice must see the scale-ins already made
            inst = _after(rest, st)
            count -= len(picked)
        stats = None
        if self.method == "aryl":
            chosen = select_aryl(inst, count, flexible_first=self.flexible_first)
        elif self.method == "exact":
            chosen, stats = select_exact(inst, count, backend=self.backend, limits=self.limits)
        elif self.method == "scf":
            chosen = select_scf(inst, count)
        else:
            chosen = select_random(inst, count, self.rng)
        return picked + chosen, stats

    def __call__(self, view: ClusterView, on_loan: list[str], count: int) -> list[str]:
        t0 = time.perf_counter()
        hint = self.flexible_source() if self.flexible_source is not None else None
        inst = ReclaimInstance.from_view(view, on_loan, hint)
        chosen, stats = self.choose(inst, count)
        wall = (time.perf_counter() - t0) * 1000.0
        outcome = evaluate(inst, chosen)
        outcome.method = self.method
        outcome.time = view.now
        outcome.wall_ms = wall
        outcome.stats = stats
        self.outcomes.append(outcome)
        return chosen


def _after(inst: ReclaimInstance, st: _GreedyState) -> ReclaimInstance:
    """``inst`` with the jobs as ``st`` left them (scaled-in jobs lose the returned servers)."""
    jobs = []
    for job in inst.jobs:
        if not st.alive[job.id]:
            continue
        gpus = {s: g for s, g in job.gpus.items() if s in st.avail or s not in st.order}
        if gpus:
            jobs.append(ReclaimJob(job.id, gpus, job.allowed))
    return ReclaimInstance(inst.servers, tuple(jobs), inst.server_gpus, inst.flexible)


def reclaim_metrics(outcomes: Sequence[ReclaimOutcome]) -> dict[str, float]:
    """Per-run reclaim metrics: events, servers returned, jobs preempted, mean per-event
    collateral damage (Fig. 8), mean share of demand met by the flexible group (§7.2: 52.6 %
    in the paper's Basic scenario) and without any preemption, decision latency."""
    if not outcomes:
        return {"events": 0, "servers": 0, "preemptions": 0, "collateral_gpus": 0,
                "mean_collateral_damage": 0.0, "met_by_flexible": 0.0,
                "met_without_preemption": 0.0, "decision_p50_ms": 0.0, "decision_max_ms": 0.0}
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
