"""The engine's GPU books: which nodes are usable, which of their GPUs are free or shared.

Before this module the engine kept eight parallel structures (usable nodes, free sets, sorted
free lists and their stale marks, the capacity counter, the free-count index, shared loads and
the nodes with a shared GPU) and updated them by hand in four places. :class:`GpuLedger` owns
them all; the engine only asks it to occupy, vacate, add or remove, and reads views of it.

Invariants (:meth:`GpuLedger.check` asserts every one; the hypothesis tests in
``tests/engine/test_ledger.py`` drive random occupy / vacate / add / remove / loan / reclaim
sequences against a brute-force model and call it after each step):

1. ``usable``, ``free`` and ``shared`` have the same keys; ``free[n]`` and ``shared[n]`` are
   disjoint subsets of ``range(usable[n].gpus)``.
2. A GPU is wholly free (in ``free``), shared (in ``shared``, load in ``(SHARE_EPS, 1 +
   SHARE_EPS]``) or held whole (in neither); shares on one GPU sum to at most 1.
3. ``capacity`` is the sum of the usable nodes' GPUs; ``index`` equals one rebuilt from
   ``free`` (its ``total`` the free GPUs).
4. The nodes with a shared GPU are exactly those whose ``shared`` map is not empty.
5. After :meth:`live_free`, every usable node's free list is its free set, ascending.
6. ``allocated`` is the GPUs held, shares counted as fractions (each holder's GPUs x share).
7. A node leaves only with every GPU wholly free (the engine moves or evicts its jobs first);
   a refused :meth:`occupy` changes nothing.
8. ``on_loan`` (servers loaned in, in loan order) holds no name twice.
"""

from __future__ import annotations

from gpuplan.models import FreeIndex, JobAllocation, Node, occupy_gpu, vacate_gpu
from gpuplan.models.state import SHARE_EPS

__all__ = ["GpuLedger"]


class GpuLedger:
    """Free, shared and capacity books of the usable nodes (see the module's invariants)."""

    __slots__ = (
        "_free_lists",
        "_shared_nodes",
        "_stale",
        "allocated",
        "capacity",
        "down",
        "free",
        "index",
        "on_loan",
        "shared",
        "usable",
    )

    def __init__(self) -> None:
        self.usable: dict[str, Node] = {}
        """Nodes training may use now, in the order they joined."""
        self.free: dict[str, set[int]] = {}
        """node -> its wholly free GPUs."""
        self.shared: dict[str, dict[int, float]] = {}
        """node -> GPU -> summed share, for GPUs held by jobs with share < 1 only."""
        self.capacity = 0
        """Usable GPUs (read on every event)."""
        self.index = FreeIndex()
        """Usable nodes bucketed by free-GPU count (delta policies place with it in O(GPUs per
        node))."""
        self.allocated = 0.0
        """GPUs held, shares counted as fractions (for utilisation)."""
        self.on_loan: list[str] = []
        """Servers loaned in from another pool, in loan order (reclaim candidates)."""
        self.down: set[str] = set()
        """Nodes that failed and have not recovered (never loaned in)."""
        self._free_lists: dict[str, list[int]] = {}
        """node -> its free GPUs ascending, re-sorted only when the node changed (so building a
        view does not sort every node's free set on every event)."""
        self._stale: set[str] = set()
        """Nodes whose free set changed since their free list was last re-sorted."""
        self._shared_nodes: set[str] = set()
        """Nodes with a shared GPU now, so a view copies only those."""

    # ------------------------------------------------------------------ membership
    def add_node(self, node: Node) -> None:
        """``node`` joins with every GPU free (nothing if it is usable already)."""
        name = node.name
        if name in self.usable:
            return
        self.usable[name] = node
        self.free[name] = set(range(node.gpus))
        self._free_lists[name] = list(range(node.gpus))
        self.index.set(name, node.gpus)
        self.shared[name] = {}
        self.capacity += node.gpus

    def remove_node(self, name: str) -> None:
        """``name`` leaves (nothing if it is not usable). Raises RuntimeError, books unchanged,
        while a GPU of it is held: its jobs must be moved or evicted first."""
        node = self.usable.get(name)
        if node is None:
            return
        if len(self.free[name]) != node.gpus or self.shared[name]:
            raise RuntimeError(f"node {name} leaves while jobs hold its GPUs")
        self.capacity -= node.gpus
        del self.usable[name]
        del self.free[name]
        del self._free_lists[name]
        self.index.discard(name)
        self._stale.discard(name)
        del self.shared[name]
        self._shared_nodes.discard(name)

    def lend(self, node: Node) -> None:
        """``node``, a server of another pool, joins as loaned in."""
        self.add_node(node)
        self.on_loan.append(node.name)

    def give_back(self, name: str) -> None:
        """``name`` is no longer on loan (the caller then removes it once its jobs are off)."""
        self.on_loan.remove(name)

    # ------------------------------------------------------------------ GPUs
    def is_free(self, node: str, gpus: tuple[int, ...]) -> bool:
        """Whether ``node`` is usable and every one of ``gpus`` on it is wholly free."""
        free = self.free.get(node)
        return free is not None and free.issuperset(gpus)

    def occupy(self, job_id: str, alloc: JobAllocation, gpus: int) -> None:
        """``job_id`` takes ``alloc`` (``gpus`` = ``alloc.gpus``, the caller's cached count).
        Raises RuntimeError naming the GPU, books unchanged, when a node is not usable or a GPU
        cannot take the share (whole: not free; shared: its load would pass 1)."""
        share = alloc.share
        placement = alloc.placement
        all_free, stale, index = self.free, self._stale, self.index
        if share >= 1.0:
            for node, held in placement.items():  # check first: a refusal changes nothing
                free = all_free.get(node)
                if free is None or not free.issuperset(held):
                    raise self._refusal(job_id, node, held)
            for node, held in placement.items():
                free = all_free[node]
                free.difference_update(held)
                stale.add(node)
                index.set(node, len(free))
        else:
            self._occupy_shared(job_id, placement, share)
        self.allocated += gpus * share

    def _refusal(self, job_id: str, node: str, held: tuple[int, ...]) -> RuntimeError:
        """Why ``job_id`` cannot take ``held`` whole on ``node``: the node or the first GPU."""
        free = self.free.get(node)
        if free is None:
            return RuntimeError(f"plan gives GPUs of {node} to {job_id} but it is not usable")
        taken = next(g for g in held if g not in free)
        return RuntimeError(f"plan gives GPU {node}:{taken} to {job_id} but it is taken")

    def _occupy_shared(
        self, job_id: str, placement: dict[str, tuple[int, ...]], share: float
    ) -> None:
        all_free, all_shared = self.free, self.shared
        for node, held in placement.items():  # check first: a refusal changes nothing
            free, loads = all_free.get(node), all_shared.get(node)
            if free is None or loads is None:
                raise RuntimeError(f"plan gives GPUs of {node} to {job_id} but it is not usable")
            for g in held:
                used = 0.0 if g in free else loads.get(g)
                if used is None or used + share > 1.0 + SHARE_EPS:
                    raise RuntimeError(f"plan gives GPU {node}:{g} to {job_id} but it is taken")
        for node, held in placement.items():
            free, loads = all_free[node], all_shared[node]
            for g in held:
                occupy_gpu(free, loads, g, share)
            self._stale.add(node)
            self.index.set(node, len(free))
            self._shared_nodes.add(node)

    def vacate(self, alloc: JobAllocation, gpus: int) -> None:
        """Give back what :meth:`occupy` took for ``alloc`` (nodes no longer usable skipped)."""
        share = alloc.share
        whole = share >= 1.0  # vacate_gpu of a whole GPU only adds it back
        all_free, all_shared, stale, index = self.free, self.shared, self._stale, self.index
        for node, held in alloc.placement.items():
            free = all_free.get(node)
            if free is not None:
                loads = all_shared[node]
                stale.add(node)
                if whole:
                    free.update(held)
                else:
                    for g in held:
                        vacate_gpu(free, loads, g, share)
                index.set(node, len(free))
                if not loads:
                    self._shared_nodes.discard(node)
        self.allocated -= gpus * share

    # ------------------------------------------------------------------ views
    def live_free(self) -> dict[str, list[int]]:
        """Every usable node's free GPUs, ascending: the ledger's own dict (a live view reads
        it before the plan is applied and keeps nothing). Only nodes changed since the last
        call are re-sorted."""
        if self._stale:
            lists, free = self._free_lists, self.free
            for node in self._stale:
                lists[node] = sorted(free[node])
            self._stale.clear()
        return self._free_lists

    def free_view(self) -> dict[str, list[int]]:
        """:meth:`live_free` in a fresh dict; the lists are shared between views (policies
        never mutate a view, and every placement stage copies what it edits)."""
        return dict(self.live_free())

    def shared_view(self) -> dict[str, dict[int, float]]:
        """Copies of the shared loads of the nodes that have any, in name order."""
        return {n: dict(self.shared[n]) for n in sorted(self._shared_nodes)}

    # ------------------------------------------------------------------ invariants
    def check(self, holders: list[tuple[JobAllocation, int]] | None = None) -> None:
        """Raise AssertionError unless every invariant of the module holds; with ``holders``
        (every held allocation and its GPU count) also that the books are exactly theirs."""
        usable, free, shared = self.usable, self.free, self.shared
        assert usable.keys() == free.keys() == shared.keys(), "books name different nodes"
        for name, node in usable.items():
            every = set(range(node.gpus))
            assert free[name] <= every and shared[name].keys() <= every, f"{name}: bad GPU"
            assert not free[name] & shared[name].keys(), f"{name}: a GPU free and shared"
            for g, load in shared[name].items():
                assert SHARE_EPS < load <= 1.0 + SHARE_EPS, f"{name}:{g}: load {load}"
        assert self.capacity == sum(n.gpus for n in usable.values()), "capacity"
        self.index.check(free)
        assert self.index.total == sum(len(f) for f in free.values()), "index total"
        assert self._shared_nodes == {n for n, s in shared.items() if s}, "shared nodes"
        assert self._stale <= usable.keys(), "stale marks of a node that left"
        lists = self.live_free()
        assert lists.keys() == usable.keys(), "free lists name different nodes"
        assert all(lists[n] == sorted(free[n]) for n in usable), "free lists"
        assert len(set(self.on_loan)) == len(self.on_loan), "a server on loan twice"
        if holders is not None:
            self._check_holders(holders)

    def _check_holders(self, holders: list[tuple[JobAllocation, int]]) -> None:
        load: dict[tuple[str, int], float] = {}
        whole: set[tuple[str, int]] = set()
        total = 0.0
        for alloc, gpus in holders:
            assert alloc.gpus == gpus, f"{alloc.job_id}: cached GPU count"
            total += gpus * alloc.share
            for node, held in alloc.placement.items():
                assert node in self.usable, f"{alloc.job_id} holds GPUs of {node}, not usable"
                for g in held:
                    load[(node, g)] = load.get((node, g), 0.0) + alloc.share
                    if alloc.share >= 1.0:
                        whole.add((node, g))
        for name, node in self.usable.items():
            free, loads = self.free[name], self.shared[name]
            for g in range(node.gpus):
                used = load.get((name, g), 0.0)
                if (name, g) in whole:
                    assert used == 1.0 and g not in free and g not in loads, (
                        f"{name}:{g} held whole: booked free or shared, or held twice"
                    )
                elif used <= SHARE_EPS:
                    assert g in free, f"{name}:{g} unheld but not free"
                else:
                    assert abs(loads.get(g, -1.0) - used) <= 1e-6, (
                        f"{name}:{g} booked load {loads.get(g)} != held {used}"
                    )
        assert abs(self.allocated - total) <= 1e-6 * max(1.0, total), "allocated"
