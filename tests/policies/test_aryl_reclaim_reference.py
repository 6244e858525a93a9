"""Frozen reference for Aryl's reclaim greedy, and old-vs-new identity tests.

The code below is ``select_aryl`` (with its ``_GreedyState`` and ``_flexible_phase``) exactly as
it was before the lazy look-ahead rewrite of :mod:`gpuplan.solver_core.policies.aryl.reclaim`: every
server's heap key carried an eagerly computed look-ahead. The rewrite must return the *same
servers in the same order* on every instance (it only changes when the look-ahead is computed),
so the tests here compare the two on seeded benchmark layouts and on hypothesis instances.
``tests.bench.aryl`` also times it, to report the speed-up measured in the same run.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from gpuplan.solver_core.policies.aryl.reclaim import ReclaimInstance, select_aryl
from tests.bench.aryl import reclaim_layout
from tests.policies.test_aryl_reclaim import instances

__all__ = ["select_aryl_reference"]


# --------------------------------------------------------------------------------------------
# The reference (do not optimise: it is the oracle)
# --------------------------------------------------------------------------------------------
class _RefState:
    """The old ``_GreedyState`` (copied dicts, eager bookkeeping)."""

    def __init__(self, inst: ReclaimInstance, dynamic: bool = True) -> None:
        self.dynamic = dynamic
        self.order = {s: i for i, s in enumerate(inst.servers)}
        self.avail: set[str] = set(inst.servers)
        self.g = {j.id: dict(j.gpus) for j in inst.jobs}
        totals = {j.id: sum(j.gpus.values()) for j in inst.jobs}
        self.ok = {j.id: (j.allowed or frozenset({totals[j.id]})) for j in inst.jobs}
        self.on: dict[str, list[str]] = {s: [] for s in inst.servers}
        for job in inst.jobs:
            for s in job.gpus:
                if s in self.on:
                    self.on[s].append(job.id)
        self.kept = totals
        self.alive = dict.fromkeys(self.kept, True)
        # |S_j| counts every server of j, training ones too (the "server fraction" of Tab. 1).
        self.share = {j.id: 1.0 / len(j.gpus) for j in inst.jobs}
        # on-loan servers of j not returned yet (the dynamic server fraction)
        self.left = {j.id: sum(1 for s in j.gpus if s in self.on) for j in inst.jobs}

    def at_risk(self, jid: str, s: str) -> bool:
        """Would returning ``s`` now preempt job ``jid``?"""
        if not self.alive[jid]:
            return False
        left = self.kept[jid] - self.g[jid][s]
        return left <= 0 or left not in self.ok[jid]

    def used(self, s: str) -> int:
        alive = self.alive
        return sum(self.g[j][s] for j in self.on[s] if alive[j])

    def free_to_take(self, s: str) -> bool:
        return not any(self.at_risk(j, s) for j in self.on[s])

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
        avail = self.avail
        for jid in self.on[s]:
            g = self.g[jid]
            if len(g) == 1 or not self.at_risk(jid, s):
                continue
            f = self.frac(jid)
            for t in g:
                if t != s and t in avail and self.at_risk(jid, t):
                    relief[t] = relief.get(t, 0.0) + f
        if not relief:
            return math.inf
        return min(costs[t] - r for t, r in relief.items())

    def collateral(self, s: str) -> int:
        return sum(self.kept[j] - self.g[j][s] for j in self.on[s] if self.at_risk(j, s))


def _ref_flexible_phase(
    st: _RefState, count: int, flexible: Mapping[str, Mapping[str, int]] | None = None
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
    for s in st.avail:
        if st.free_to_take(s):
            used = st.used(s)
            heap.append((tier(s, used), used, st.order[s], s))
    heapq.heapify(heap)
    picked: list[str] = []
    while heap and len(picked) < count:
        *_, s = heapq.heappop(heap)
        if s in st.avail and st.free_to_take(s):
            st.take(s)
            picked.append(s)
    return picked


def select_aryl_reference(
    inst: ReclaimInstance,
    count: int,
    *,
    flexible_first: bool = True,
    look_ahead: bool = True,
    dynamic: bool = True,
) -> list[str]:
    """``select_aryl`` before the lazy look-ahead: eager look-ahead in every heap key."""
    count = min(count, len(inst.servers))
    st = _RefState(inst, dynamic)
    picked = _ref_flexible_phase(st, count, inst.flexible) if flexible_first else []
    if len(picked) >= count:
        return picked

    costs: dict[str, float] = {}
    risks: dict[str, int] = {}
    version: dict[str, int] = dict.fromkeys(st.avail, 0)
    multi = {s for s in st.avail if any(st.left[j] > 1 for j in st.on[s])}

    def key(s: str) -> tuple[float, int, float, int]:
        # the look-ahead only matters for servers sharing a job with another on-loan server
        look = st.look_ahead(s, costs) if look_ahead and s in multi else math.inf
        if look != math.inf:
            look = round(look, 9)
        return (round(costs[s], 9), risks[s], look, st.order[s])

    for s in st.avail:
        costs[s], risks[s] = st.cost(s)
    heap = [(*key(s), 0, s) for s in st.avail]
    heapq.heapify(heap)

    while len(picked) < count:
        if count - len(picked) == 1:  # FindBestServer (``risks`` is current for every server)
            fewest = min(risks[s] for s in st.avail)
            best = min(
                (s for s in st.avail if risks[s] == fewest),
                key=lambda s: (st.collateral(s), st.order[s]),
            )
            st.take(best)
            picked.append(best)
            break
        *_, ver, s = heapq.heappop(heap)
        if s not in st.avail or ver != version[s]:
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
            heapq.heappush(heap, (*key(t), version[t], t))
    return picked


# --------------------------------------------------------------------------------------------
# Old vs new: the same servers, in the same order
# --------------------------------------------------------------------------------------------
VARIANTS = ({}, {"dynamic": False}, {"flexible_first": False}, {"look_ahead": False})


@pytest.mark.parametrize("servers", [30, 100, 200])
def test_lazy_look_ahead_picks_what_the_eager_reference_picks(servers: int) -> None:
    # benchmark layouts (98 % busy, split jobs, elastic jobs, training-server GPUs), plus a
    # more fragmented variant, from a handful of servers to most of the fleet
    for seed in range(4):
        for split in (0.4, 0.8):
            inst = reclaim_layout(servers, seed, split=split)
            for share in (0.03, 0.1, 0.3, 0.7):
                count = max(1, round(share * servers))
                for kw in VARIANTS:
                    assert select_aryl(inst, count, **kw) == select_aryl_reference(
                        inst, count, **kw
                    ), (seed, split, count, kw)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=instances(), data=hst.data())
def test_lazy_look_ahead_matches_reference_on_random_instances(
    inst: ReclaimInstance, data: hst.DataObject
) -> None:
    count = data.draw(hst.integers(1, len(inst.servers)))
    # a flexible-GPU hint on some servers (orders phase A)
    flexible = {
        j.id: {s: g for s, g in j.gpus.items() if s in inst.servers}
        for j in inst.jobs
        if j.allowed and data.draw(hst.booleans())
    }
    hinted = ReclaimInstance(inst.servers, inst.jobs, inst.server_gpus, flexible)
    for kw in VARIANTS:
        assert select_aryl(hinted, count, **kw) == select_aryl_reference(hinted, count, **kw)
