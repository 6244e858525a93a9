"""Node membership for the engine: servers joining and leaving training use.

Split out of ``engine.py`` because these change together: adding/removing a usable node
(and scaling in or evicting the jobs on it), loaning idle servers in from another pool and
reclaiming them through the pluggable reclaimer, plus the default reclaimer itself.
``Engine`` mixes :class:`NodeMembership` in; the state it reads (``usable``, ``free``,
``on_loan``, ...) is owned and initialised by ``Engine``.
"""

from __future__ import annotations

from gpuplan.models import Action, AllocationPlan, ClusterView, InputError, JobAllocation


def reclaim_least_used(view: ClusterView, on_loan: list[str], count: int) -> list[str]:
    """Default reclaimer: idle servers first, then those touched by the fewest jobs (ties: most
    recently loaned). Aryl's cost-based and exact reclaimers plug in through ``Engine``."""
    users: dict[str, int] = dict.fromkeys(on_loan, 0)
    for job in view.running.values():
        if job.allocation is not None:
            for node in job.allocation.placement:
                if node in users:
                    users[node] += 1
    order = {name: i for i, name in enumerate(on_loan)}
    ranked = sorted(on_loan, key=lambda n: (users[n], -order[n]))
    return ranked[:count]


class NodeMembership:
    """Engine mixin: add/remove usable nodes, loan servers in and reclaim them."""

    def _add_node(self, name: str) -> None:
        node = self.cluster.node_by_name.get(name)
        if node is None:
            raise InputError(f"unknown node {name!r}", field="nodes")
        if name not in self.usable:
            self.usable[name] = node
            self.free[name] = set(range(node.gpus))
            self._free_lists[name] = list(range(node.gpus))
            self._index.set(name, node.gpus)
            self.shared[name] = {}
            self._capacity += node.gpus

    def _remove_node(self, name: str, now: float, graceful: bool) -> None:
        if name not in self.usable:
            return
        hit = [j for j in self.running.values() if j.allocation and name in j.allocation.placement]
        for job in hit:
            self._touched.add(job.id)
            job.settle(now)
            self._release(job)
            alloc = job.allocation
            assert alloc is not None
            rest = {n: g for n, g in alloc.placement.items() if n != name}
            kept = sum(len(g) for g in rest.values())
            if graceful and kept and kept in job.spec.allowed_counts():
                # An elastic job loses only the workers on this node (scale-in, no preemption).
                after = JobAllocation.fast(job.id, rest, alloc.share, alloc.efficiency)
                job.set_allocation(after)
                self._acquire(job)
                job.resizes += 1
                self.degraded_resizes += self._degraded
                shrink = Action.model_construct(kind="resize", job_id=job.id, before=alloc,
                                                after=after)
                self.executor.apply(
                    AllocationPlan.model_construct(time=now, policy=self.policy.name,
                                                   allocations={}, actions=[shrink], stats=[],
                                                   decision_ms=0.0),
                    {job.id: job},
                )
                continue
            self.executor.evict(job, now, graceful)
            self._to_pending(job, now)
            job.preemptions += 1
        self._capacity -= self.usable[name].gpus
        del self.usable[name]
        del self.free[name]
        del self._free_lists[name]
        self._index.discard(name)
        self._stale.discard(name)
        del self.shared[name]
        self._shared_nodes.discard(name)

    def _loan(self, count: int, pool: str) -> None:
        """Take ``count`` idle servers of ``pool`` (name order) into training use."""
        idle = [n.name for n in self.cluster.nodes
                if n.pool == pool and n.name not in self.usable and n.name not in self.down]
        for name in idle[:count]:
            self._add_node(name)
            self.on_loan.append(name)

    def _reclaim(self, count: int, now: float) -> None:
        """Give back ``count`` on-loan servers chosen by the reclaimer."""
        count = min(count, len(self.on_loan))
        if count <= 0:
            return
        chosen = self.reclaimer(self.view(now), list(self.on_loan), count)
        if len(set(chosen)) != count or not set(chosen) <= set(self.on_loan):
            raise RuntimeError(f"reclaimer returned {chosen!r}, not {count} on-loan servers")
        self.reclaim_log.append((now, list(chosen)))
        for name in chosen:
            self.on_loan.remove(name)
            self._remove_node(name, now, graceful=True)
