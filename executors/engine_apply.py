"""Plan application for the engine: carry an :class:`AllocationPlan` into job state.

Split out of ``engine.py`` because these change together: the restart gate / unpaid-grow
filter, the GPU-relabel shortcut for executors that cannot pin indices, and the
release-then-occupy bookkeeping in the ledger that hands the plan to the executor. ``Engine``
mixes :class:`PlanApplication` in; the state it reads (``running``, ``pending``, ``ledger``,
``recorder``, ``executor``, ...) is owned and initialised by ``Engine``.
"""

from __future__ import annotations

from gpuplan.models import ActiveJob, AllocationPlan, JobAllocation, placement_rate


class PlanApplication:
    """Engine mixin: filter a plan (restart gate, unpaid grows, relabels) and apply it."""

    def _relabels(self, plan: AllocationPlan) -> set[str]:
        """Jobs whose ``migrate`` only changes GPU *indices* within the same per-node counts, on
        an executor that cannot pin indices (``capabilities.pin_gpus`` False, e.g. Slurm): the
        executor could not carry such a move out (the job would restart on the same nodes with
        the same counts), so the engine only relabels its GPUs and pays nothing for it."""
        if self.executor.capabilities.pin_gpus:
            return set()

        def counts(alloc: JobAllocation | None) -> dict[str, int]:
            return {n: len(g) for n, g in alloc.placement.items()} if alloc else {}

        return {
            a.job_id
            for a in plan.actions
            if a.kind == "migrate" and counts(a.before) == counts(a.after)
        }

    def _unpaid_grows(self, plan: AllocationPlan, now: float) -> set[str]:
        """Grows the executor would carry out by a restart that costs more than it saves.

        On an executor whose resizes restart the job (``capabilities.resize == "restart"``,
        Slurm, SSH, or the simulator's checkpoint-restart mode), a grow costs
        ``restart_latency_s`` of no progress. A pure grow (the job keeps every GPU it has and
        adds some) is dropped when ``latency + remaining / new rate >= remaining / old rate``:
        the job would finish no sooner, and its restart would be wasted. Dropping it is always
        safe: the added GPUs simply stay free, and no other job was planned onto the ones the
        job keeps. Shrinks and moves are never dropped (other jobs may be planned onto the
        GPUs they free)."""
        caps = self.executor.capabilities
        latency = caps.restart_latency_s
        if caps.resize != "restart" or latency <= 0:
            return set()
        unpaid: set[str] = set()
        for a in plan.actions:
            if (
                a.kind != "resize"
                or a.before is None
                or a.after is None
                or a.gpus_after <= a.gpus_before
                or not a.before.gpu_set() <= a.after.gpu_set()
            ):
                continue
            job = self.running.get(a.job_id)
            if job is None:
                continue
            left = job.remaining(now)
            old = placement_rate(job.spec, self.cluster, a.before)
            new = placement_rate(job.spec, self.cluster, a.after)
            if old > 0 and new > 0 and latency + left / new >= left / old:
                unpaid.add(a.job_id)
        return unpaid

    def _apply(self, plan: AllocationPlan, now: float) -> None:  # noqa: C901 (a named exception to the complexity gate)
        if not plan.actions:  # nothing to carry out (and no grow to drop, nothing to relabel)
            return
        caps = self.executor.capabilities
        gate = self.restart_gate
        if gate is not None:  # replaces the grow-only test below
            plan = gate.filter(plan, self.running, self.cluster, now, caps, self.pending)
            if not plan.actions:
                return
        # (the two helpers' own first tests, read here: most executors need neither)
        elif caps.resize == "restart" and caps.restart_latency_s > 0:
            unpaid = self._unpaid_grows(plan, now)
            if unpaid:
                plan = plan.model_copy(
                    update={"actions": [a for a in plan.actions if a.job_id not in unpaid]}
                )
                self.recorder.skipped_grows += len(unpaid)
        relabels = set() if caps.pin_gpus else self._relabels(plan)
        actions = plan.actions
        running, pending, ledger = self.running, self.pending, self.ledger
        touched: dict[str, ActiveJob] = {}
        # Release everything first so GPUs can change hands within one plan. (Jobs are keyed
        # by id, so ``action.job_id`` is the job's id: read it rather than ``job.id``.)
        for action in actions:
            job_id = action.job_id
            job = running.get(job_id) or pending[job_id]
            touched[job_id] = job
            job.settle(now)
            if action.kind != "start" and job.allocation is not None:
                ledger.vacate(job.allocation, job.gpus)
        for action in actions:
            job_id = action.job_id
            job = touched[job_id]
            kind = action.kind
            if kind == "start":
                del pending[job_id]
                job.pending_time = job.pending_time_at(now)
                job.pending_since = None
                job.status = "running"
                if job.first_start is None:
                    job.first_start = now
                job.set_allocation(action.after)
                running[job_id] = job
                ledger.occupy(job_id, action.after, job.gpus)
            elif kind == "preempt":
                job.preemptions += 1
                self._to_pending(job, now)
            else:
                if kind == "resize":
                    job.resizes += 1
                    self.recorder.degraded_resizes += self._degraded
                elif kind == "migrate" and job_id not in relabels:
                    job.migrations += 1
                job.set_allocation(action.after)
                ledger.occupy(job_id, action.after, job.gpus)
        if relabels:
            carried = [a for a in actions if a.job_id not in relabels]
            plan = plan.model_copy(update={"actions": carried})
            touched = {j: touched[j] for j in touched if j not in relabels}
        if plan.actions:
            self.executor.apply(plan, touched)
