"""Aryl worker placement (§5.3): best-fit decreasing with base and flexible server groups.

Servers are bins, workers (``D`` GPUs each, never split across servers) are items. A job first
tries to fit on a single server (fewest free GPUs that still fit, so large holes stay for large
jobs); otherwise its workers are packed best-fit one server at a time. Servers that already
host workers are preferred over empty ones, which keeps empty servers empty (reclaimable for
free) and limits fragmentation.

On on-loan servers the book keeps two *groups* apart: servers with base workers (and inelastic
jobs) and servers with only flexible workers of elastic jobs. A flexible-only server can go back
to the inference side by scaling jobs in, with no preemption (§4: "release the server group for
flexible demands first"); mixing a base worker into it would destroy that. So:

* base workers go to base-group or empty servers, taking empty servers from the low end of the
  name order;
* flexible workers go to flexible-group servers, then empty ones from the *high* end, then, as a
  last resort, leftover GPUs of base-group servers (a server that already holds base workers
  loses nothing by also holding flexible ones);
* only when that fails may a base worker use free GPUs of a flexible-only server (``relax``:
  idle GPUs help more than a clean group), and only when *that* fails may it *steal* GPUs of
  flexible workers (``steal``; Alg. 2's C^a counts them as available), which scales their jobs in.

Training servers are never reclaimed, so there the groups are not enforced. ``grouped=False``
turns grouping off everywhere (the "naive BFD" ablation of Tab. 6).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from gpuplan.models import Node

__all__ = ["Role", "ServerBook"]

Role = Literal["base", "flex"]
Placement = dict[str, list[int]]


class ServerBook:
    """Free GPUs and who holds what, per usable server, for one scheduling decision.

    ``hard[node]`` maps job -> GPUs of base / inelastic workers; ``soft[node]`` maps job ->
    GPUs of flexible workers (re-decided every round, so they may be stolen or released).
    """

    def __init__(
        self,
        nodes: Mapping[str, Node],
        free: Mapping[str, Sequence[int]],
        loan: Iterable[str] = (),
        grouped: bool = True,
    ) -> None:
        self.nodes = nodes
        self.free: dict[str, list[int]] = {n: sorted(free.get(n, ())) for n in nodes}
        self.loan = set(loan)
        self.grouped = grouped
        self.hard: dict[str, dict[str, list[int]]] = {n: {} for n in nodes}
        self.soft: dict[str, dict[str, list[int]]] = {n: {} for n in nodes}
        self.evicted: dict[str, int] = {}
        """GPUs of flexible workers stolen per job in this round (for the caller's bookkeeping)."""

    # ------------------------------------------------------------------ state
    def add(self, job: str, placement: Mapping[str, Iterable[int]], role: Role) -> None:
        """Record GPUs a job *already holds* (they are not in ``free``)."""
        book = self.hard if role == "base" else self.soft
        for node, gpus in placement.items():
            if node in book:
                book[node].setdefault(job, []).extend(gpus)

    def _grouped(self, node: str) -> bool:
        return self.grouped and node in self.loan

    def group(self, node: str) -> Literal["base", "flex", "empty"]:
        if self.hard[node]:
            return "base"
        if self.soft[node]:
            return "flex"
        return "empty"

    def soft_gpus(self, job: str) -> Placement:
        """The flexible GPUs ``job`` holds now, per node."""
        return {n: list(jobs[job]) for n, jobs in self.soft.items() if job in jobs}

    def holdings(self, job: str) -> Placement:
        """Everything ``job`` holds now (base + flexible), per node, sorted."""
        out: Placement = {}
        for book in (self.hard, self.soft):
            for node, jobs in book.items():
                if job in jobs:
                    out.setdefault(node, []).extend(jobs[job])
        return {n: sorted(g) for n, g in sorted(out.items())}

    def free_count(self, nodes: Iterable[str]) -> int:
        return sum(len(self.free[n]) for n in nodes)

    def soft_count(self, nodes: Iterable[str]) -> int:
        return sum(len(g) for n in nodes for g in self.soft[n].values())

    def release(self, job: str, node: str, count: int) -> None:
        """Give back ``count`` of ``job``'s flexible GPUs on ``node`` (highest indices first)."""
        gpus = self.soft[node][job]
        gpus.sort()
        back = gpus[len(gpus) - count :]
        del gpus[len(gpus) - count :]
        if not gpus:
            del self.soft[node][job]
        self.free[node].extend(back)
        self.free[node].sort()

    def _steal(self, node: str, count: int) -> None:
        """Free ``count`` flexible GPUs on ``node``, from the job holding the most there."""
        for job in sorted(self.soft[node], key=lambda j: (-len(self.soft[node][j]), j)):
            if count <= 0:
                break
            take = min(count, len(self.soft[node][job]))
            self.evicted[job] = self.evicted.get(job, 0) + take
            self.release(job, node, take)
            count -= take

    # ------------------------------------------------------------------ placement
    def _room(self, node: str, role: Role, relax: bool, steal: bool) -> int:
        """GPUs a new ``role`` worker could use on ``node`` (0 when the group forbids it)."""
        free = len(self.free[node]) + (self._soft_on(node) if steal else 0)
        if relax or role == "flex" or not self._grouped(node):
            return free
        return 0 if self.group(node) == "flex" else free

    def worker_slots(
        self,
        nodes: Iterable[str],
        per_worker: int,
        role: Role = "base",
        *,
        relax: bool = False,
        steal: bool = False,
    ) -> int:
        """Workers of ``per_worker`` GPUs that :meth:`place` could fit on ``nodes`` now (with
        the same ``relax`` / ``steal``), so a caller can split a job over node lists first."""
        return sum(self._room(n, role, relax or steal, steal) // per_worker for n in nodes)

    def _soft_on(self, node: str) -> int:
        return sum(len(g) for g in self.soft[node].values())

    def _tier(self, node: str, role: Role) -> int:
        """Preference tier (lower first): occupied servers of the worker's own group, empty
        servers, then occupied servers of the other group (grouped servers only)."""
        group = self.group(node)
        if group == "empty":
            return 1
        if self._grouped(node) and group != role:
            return 2
        return 0

    def place(
        self,
        job: str,
        workers: int,
        per_worker: int,
        nodes: Sequence[str],
        role: Role,
        *,
        relax: bool = False,
        steal: bool = False,
        partial: bool = False,
        prefer: Iterable[str] = (),
        one_node: bool = False,
    ) -> Placement | None:
        """Place ``workers`` workers of ``per_worker`` GPUs on ``nodes``; commit and return
        {node: GPUs}. All or nothing unless ``partial`` (then possibly fewer, possibly {}).
        ``one_node``: every worker on one server (a single-node job, ``max_nodes=1``), or
        none when no server of ``nodes`` holds them all.

        ``prefer`` nodes (e.g. where the job already has flexible workers) are filled first.
        Empty servers are taken in name order for base workers and reverse order for flexible
        ones, so the two groups grow from opposite ends of the on-loan server list.
        """
        if workers <= 0:
            return {}
        need = workers * per_worker
        room = {n: self._room(n, role, relax or steal, steal) for n in nodes}
        room = {n: r for n, r in room.items() if r >= per_worker}
        if not partial and sum(r - r % per_worker for r in room.values()) < need:
            return None
        rank = {n: i for i, n in enumerate(sorted(room, reverse=role == "flex"))}
        preferred = [n for n in prefer if n in room]

        plan: dict[str, int] = {}
        left = workers
        for n in preferred:
            fit = min(left, room[n] // per_worker)
            if fit:
                plan[n] = fit
                left -= fit
                room[n] -= fit * per_worker
        if left and not plan:
            # whole job on one server: tightest fit among occupied servers, else first empty
            fits = [n for n, r in room.items() if r >= left * per_worker]
            if fits:
                best = min(fits, key=lambda n: (self._tier(n, role), room[n], rank[n]))
                plan[best] = left
                room[best] -= left * per_worker
                left = 0
        if one_node and (left or len(plan) > 1):
            return None
        while left:
            cands = [n for n, r in room.items() if r >= per_worker]
            if not cands:
                break
            # best fit: tightest server in the best tier; empty servers in group order
            best = min(cands, key=lambda n: (self._tier(n, role), room[n], rank[n]))
            fit = min(left, room[best] // per_worker)
            plan[best] = plan.get(best, 0) + fit
            room[best] -= fit * per_worker
            left -= fit
        if left and not partial:
            return None
        return self._commit(job, plan, per_worker, role, steal)

    def _commit(
        self, job: str, plan: Mapping[str, int], per_worker: int, role: Role, steal: bool
    ) -> Placement:
        out: Placement = {}
        book = self.hard if role == "base" else self.soft
        for node, workers in plan.items():
            need = workers * per_worker
            short = need - len(self.free[node])
            if short > 0:
                if not steal:
                    raise RuntimeError(f"placement on {node} needs {short} more GPUs")
                self._steal(node, short)
            gpus = self.free[node][:need]
            del self.free[node][:need]
            book[node].setdefault(job, []).extend(gpus)
            out[node] = gpus
        return out
