"""Node membership for the engine: servers joining and leaving training use.

Split out of ``engine.py`` because these change together: adding/removing a usable node
(and scaling in or evicting the jobs on it), node failures and recoveries, loaning idle
servers in from another pool and reclaiming them through the pluggable reclaimer, plus the
default reclaimer itself. ``Engine`` mixes :class:`NodeMembership` in; the books it changes
are the engine's :class:`~.ledger.GpuLedger`, and every scale-in it plans goes through the
executor's ``accept`` like any policy plan.
"""

from __future__ import annotations

import logging

from gpuplan.models import (
    Action,
    ActiveJob,
    AllocationPlan,
    ClusterView,
    InputError,
    JobAllocation,
    PlanRefused,
)

log = logging.getLogger(__name__)


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
    """Engine mixin: add/remove usable nodes, fail and recover them, loan servers in and
    reclaim them."""

    def _add_node(self, name: str) -> None:
        node = self.cluster.node_by_name.get(name)
        if node is None:
            raise InputError(f"unknown node {name!r}", field="nodes")
        self.ledger.add_node(node)

    def _remove_node(self, name: str, now: float, graceful: bool) -> None:
        """Take ``name`` out of use: each job on it scales in off it (``graceful``, an elastic
        job whose remaining GPUs are an allowed count) or is evicted back to pending."""
        if name not in self.ledger.usable:
            return
        hit = [j for j in self.running.values() if j.allocation and name in j.allocation.placement]
        for job in hit:
            shrink = self._scale_in_plan(job, name, now) if graceful else None
            self._touched.add(job.id)
            job.settle(now)
            self._release(job)
            if shrink is not None:
                (action,) = shrink.actions
                job.set_allocation(action.after)
                self.ledger.occupy(job.id, action.after, job.gpus)
                job.resizes += 1
                self.recorder.degraded_resizes += self._degraded
                self.executor.apply(shrink, {job.id: job})
                continue
            self.executor.evict(job, now, graceful)
            self._to_pending(job, now)
            job.preemptions += 1
        self.ledger.remove_node(name)

    def _scale_in_plan(self, job: ActiveJob, name: str, now: float) -> AllocationPlan | None:
        """The accepted plan that shrinks ``job`` off node ``name`` (an elastic job loses only
        its workers there: scale-in, no preemption), or None when it cannot (no GPUs left, a
        count it does not allow, or the executor refuses the plan: it is evicted then)."""
        alloc = job.allocation
        assert alloc is not None
        rest = {n: g for n, g in alloc.placement.items() if n != name}
        kept = sum(len(g) for g in rest.values())
        if not kept or kept not in job.spec.allowed_counts():
            return None
        after = JobAllocation.fast(job.id, rest, alloc.share, alloc.efficiency)
        shrink = Action(kind="resize", job_id=job.id, before=alloc, after=after)
        plan = AllocationPlan.model_construct(
            time=now,
            policy=self.policy.name,
            allocations={job.id: after},
            actions=[shrink],
            stats=[],
            decision_ms=0.0,
        )
        try:
            self.executor.accept(self._check_view(now), plan)
        except PlanRefused as err:
            log.warning(
                "scale-in of %s off %s refused (%s): evicting it instead", job.id, name, err
            )
            return None
        return plan

    def _fail_node(self, name: str, recover_after: float | None, now: float) -> None:
        """``name`` failed: its jobs are evicted; it comes back after ``recover_after``."""
        self.ledger.down.add(name)
        self._remove_node(name, now, graceful=False)
        if recover_after is not None:
            self.executor.wake_at(now + recover_after)
            self._recoveries.append((now + recover_after, name))

    def _recover_node(self, name: str) -> None:
        self.ledger.down.discard(name)
        self._add_node(name)

    def _recover_due(self, now: float) -> None:
        due = [n for t, n in self._recoveries if t <= now]
        if due:
            self._recoveries = [(t, n) for t, n in self._recoveries if t > now]
            for name in due:
                self._recover_node(name)

    def _loan(self, count: int, pool: str) -> None:
        """Take ``count`` idle servers of ``pool`` (name order) into training use."""
        ledger = self.ledger
        idle = [
            n
            for n in self.cluster.nodes
            if n.pool == pool and n.name not in ledger.usable and n.name not in ledger.down
        ]
        for node in idle[:count]:
            ledger.lend(node)

    def _reclaim(self, count: int, now: float) -> None:
        """Give back ``count`` on-loan servers chosen by the reclaimer."""
        on_loan = self.ledger.on_loan
        count = min(count, len(on_loan))
        if count <= 0:
            return
        chosen = self.reclaimer(self.view(now), list(on_loan), count)
        if len(set(chosen)) != count or not set(chosen) <= set(on_loan):
            raise RuntimeError(f"reclaimer returned {chosen!r}, not {count} on-loan servers")
        self.recorder.reclaim_log.append((now, list(chosen)))
        if self.reasons is not None:
            self.reasons.reclaim(self, now, chosen)
        for name in chosen:
            self.ledger.give_back(name)
            self._remove_node(name, now, graceful=True)
