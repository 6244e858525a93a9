"""Heuristic reclaim selectors: Aryl's (flexible group first, then Alg. 1), SCF and Random.

Aryl (§4, App. B, Alg. 1): first release servers whose loss preempts nobody (the flexible
group, plus idle servers), then the greedy on the *server preemption cost*
``c_s = sum_{j on s} 1/|S_j|`` with cost updates after every pick. The baselines: Smallest
(job) Count First with static costs (the naive 0-1 knapsack), and seeded random servers.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Collection, Mapping, Sequence

from .reclaim_model import ReclaimInstance, ReclaimJob, clamp_count

__all__ = [
    "preemption_costs",
    "select_aryl",
    "select_random",
    "select_scf",
    "take_flexible",
]


def select_scf(inst: ReclaimInstance, count: int) -> list[str]:
    """Smallest (job) Count First: the ``count`` servers hosting the fewest jobs, static
    (no cost update, i.e. the naive 0-1 knapsack); ties in loan order."""
    count = clamp_count(inst, count)
    on = inst.jobs_on()
    order = {s: i for i, s in enumerate(inst.servers)}
    return sorted(inst.servers, key=lambda s: (len(on[s]), order[s]))[:count]


def select_random(inst: ReclaimInstance, count: int, rng: random.Random | int = 0) -> list[str]:
    """``count`` servers drawn uniformly without replacement (seeded)."""
    count = clamp_count(inst, count)
    r = rng if isinstance(rng, random.Random) else random.Random(rng)
    return r.sample(list(inst.servers), count)


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


def preemption_costs(
    inst: ReclaimInstance, returned: Sequence[str] = ()
) -> dict[str, tuple[float, int]]:
    """Alg. 1's view after ``returned`` servers went back (in that order): for every other
    on-loan server, (server preemption cost, # jobs its return would preempt). Jobs preempted
    by earlier returns no longer count, e.g. on Fig. 5 returning server 1 leaves server 2 at 0.
    """
    st = _GreedyState(inst)
    for s in returned:
        st.take(s)
    return {s: st.cost(s) for s in inst.servers if s in st.avail}


def _flexible_phase(
    st: _GreedyState, count: int, flexible: Mapping[str, Mapping[str, int]] | None = None
) -> list[str]:
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


def select_aryl(
    inst: ReclaimInstance,
    count: int,
    *,
    flexible_first: bool = True,
    look_ahead: bool = True,
    dynamic: bool = True,
) -> list[str]:
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
    (``tests/policies/test_aryl_reclaim_reference.py`` checks this against the eager version).
    """
    count = clamp_count(inst, count)
    st = _GreedyState(inst, dynamic)
    picked = _flexible_phase(st, count, inst.flexible) if flexible_first else []
    if len(picked) >= count:
        return picked

    costs, risks, multi = st.scan()
    if not look_ahead:
        multi = set()  # the look-ahead only matters for servers sharing a job with another one
    version: dict[str, int] = dict.fromkeys(st.avail, 0)
    order = st.order
    heap = [
        (round(costs[s], 9), risks[s], _LAZY if s in multi else math.inf, order[s], 0, s)
        for s in st.avail
    ]
    heapq.heapify(heap)

    while len(picked) < count:
        if count - len(picked) == 1:  # FindBestServer (``risks`` is current for every server)
            fewest = min(risks[s] for s in st.avail)
            best = min(
                (s for s in st.avail if risks[s] == fewest),
                key=lambda s: (st.collateral(s), order[s]),
            )
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
            heapq.heappush(
                heap,
                (
                    round(costs[t], 9),
                    risks[t],
                    _LAZY if t in multi else math.inf,
                    order[t],
                    version[t],
                    t,
                ),
            )
    return picked


def take_flexible(inst: ReclaimInstance, count: int) -> tuple[list[str], ReclaimInstance]:
    """Aryl's phase A alone, for the baselines run with ``flexible_first``: the no-preemption
    servers it returns (at most ``count``), and the instance left for choosing the rest -- the
    servers not returned, the jobs as the scale-ins left them (``inst`` itself when phase A
    met the whole demand)."""
    st = _GreedyState(inst)
    picked = _flexible_phase(st, count, inst.flexible)
    if len(picked) == count:
        return picked, inst
    rest = ReclaimInstance(
        tuple(s for s in inst.servers if s not in set(picked)),
        inst.jobs,
        inst.server_gpus,
        inst.flexible,
    )
    return picked, _after(rest, st)


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
