"""Deciding for the engine: build the policy's view, ask it, have the plan accepted, apply it.

Split out of ``engine.py`` because these change together: the view (a live one for a policy
that answers with a delta), timing the decision, building the plan, the executor's
:meth:`~.base.Executor.accept` that every plan passes before anything is carried out, and
the wake-ups (the policy's, and Pollux/Gavel rounds). ``Engine`` mixes :class:`Deciding`
in; the state it reads (``ledger``, ``recorder``, ``running``, ``executor``, ...) is owned
and initialised by ``Engine``.
"""

from __future__ import annotations

import time as wallclock
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gpuplan.models import AllocationPlan, ClusterView, PlanRefused
from gpuplan.models.state import ChangeSet
from gpuplan.solver_core.diff import build_delta_plan, build_plan
from gpuplan.solver_core.hooks import DeltaPolicy
from gpuplan.solver_core.policy import Decision, Delta

from .reasons import DecisionReasons


class Deciding:
    """Engine mixin: views, decisions, plan acceptance and wake-ups."""

    _read_only: tuple[MappingProxyType[str, Any], MappingProxyType[str, Any]]
    """Set by ``Engine``: read-only windows on its ``running`` and ``pending`` books."""

    check_delta_plans = False
    """Re-check plans built from a policy's delta (``check_actions`` in :meth:`Executor.accept`)
    on every executor. Off by default: an executor that trusts built plans (the simulator,
    ``Executor.trusts_built_plans``) then skips the check, as their starts are on GPUs the
    engine's free index holds and the ledger's ``occupy`` still refuses a taken GPU; the tests
    turn it on."""

    _delta_of: tuple[object, Any] = (None, None)
    """(policy, its ``decide_delta`` or None): the :class:`DeltaPolicy` check, done once per
    policy object rather than per decision (a Protocol check costs tens of microseconds)."""

    reasons: DecisionReasons | None = None
    """Set to record why each plan's actions were taken and why waiting jobs wait
    (:mod:`.reasons`; ``simulate --out``, the Slurm controller). None (the default) costs
    nothing: the loop reads this attribute once per decision."""

    def view(self, now: float, live: bool = False) -> ClusterView:
        """The policy's view. ``live``: ``free`` is the ledger's own per-node lists (no
        O(nodes) copy) and the view carries the free-count index; only for delta decisions,
        which read both before the plan is applied and keep neither."""
        return self._view(now, live, self.executor.observed_interference(now), self._changes.take())

    def _check_view(self, now: float) -> ClusterView:
        """A view only for the executor to check a plan the engine made itself (a scale-in):
        it carries no change set and takes none, so the next policy view still names every
        job written since the previous one."""
        return self._view(now, False, None, None)

    def _view(
        self,
        now: float,
        live: bool,
        interference: Mapping[tuple[str, int], float] | None,
        changed: ChangeSet | None,
    ) -> ClusterView:
        ledger = self.ledger
        return ClusterView(
            now=now,
            cluster=self.cluster,
            nodes=ledger.usable,
            free=ledger.live_free() if live else ledger.free_view(),
            running=self._read_only[0],
            pending=self._read_only[1],
            shared=ledger.shared_view(),
            shaped=self.shaped,
            interference=interference,
            capacity=ledger.capacity,
            free_index=ledger.index if live else None,
            changed=changed,
            running_since=self._changes.since,
        )

    def _decide_delta(self, now: float) -> tuple[ClusterView, Delta | Decision, float] | None:
        """Ask a policy that offers a delta (``decide_delta``) for one on a live view; None
        when it offers none or declines this view (a stage may also answer with a full
        :class:`Decision` it built on the live view). Never with an ``on_plan`` hook, which
        reads the plan's full ``allocations``."""
        if self.on_plan is not None:
            return None
        policy, delta_of = self._delta_of
        if policy is not self.policy:  # the first decision, or the policy was swapped
            policy = self.policy
            delta_of = policy.decide_delta if isinstance(policy, DeltaPolicy) else None
            self._delta_of = (policy, delta_of)
        if delta_of is None:
            return None
        view = self.view(now, live=True)
        t0 = wallclock.perf_counter()
        delta = delta_of(view)
        return None if delta is None else (view, delta, t0)

    def decide(self, now: float) -> AllocationPlan:
        """Ask the policy, have the executor accept its plan, carry it out, arm the wake-up.
        Raises :class:`PlanRefused` (counted in ``recorder.plans_refused``), nothing carried
        out, when the executor refuses the plan."""
        fast = self._decide_delta(now)
        built = False
        if fast is not None:
            view, answer, t0 = fast
            stats = answer.stats
            if isinstance(answer, Delta):
                plan = build_delta_plan(view, answer, self.policy.name)
                built = not self.check_delta_plans
            else:
                plan = build_plan(view, answer, self.policy.name)
        else:
            view = self.view(now)
            t0 = wallclock.perf_counter()
            decision = self.policy.decide(view)
            stats = decision.stats
            plan = build_plan(view, decision, self.policy.name)
        ms = (wallclock.perf_counter() - t0) * 1000.0
        plan.decision_ms = ms
        self.recorder.decided(ms, stats)
        if self.on_plan is not None:
            self.on_plan(view, plan)
        try:
            self.executor.accept(view, plan, built=built)
        except PlanRefused:
            self.recorder.plans_refused += 1
            raise
        reasons = self.reasons
        if reasons is None:
            self._apply(plan, now)
        else:
            mark = reasons.before(self, now)
            self._apply(plan, now)
            reasons.after(self, plan, now, mark)
        self._schedule_wakeup(view)
        return plan

    def _decided(self, plan: AllocationPlan) -> AllocationPlan:
        """Count every job of a carried-out plan as written (settled, started, stopped,
        resized, moved) for the next view's change set; number the started ones in the order
        ``_apply`` appended them to ``running``."""
        for a in plan.actions:
            self._changes.wrote(a.job_id, entered=a.kind == "start")
        return plan

    def _round_gate(self, now: float) -> AllocationPlan:
        """Pollux/Gavel rounds: decide at boundaries only; between them events just update
        state (a finished job's GPUs stay idle until the next boundary)."""
        assert self._round is not None
        if self._next_round is None:
            self._next_round = now  # the first event opens the first round
        if now + 1e-9 >= self._next_round:
            while self._next_round <= now + 1e-9:
                self._next_round += self._round
            plan = self._decided(self.decide(now))
        else:
            plan = AllocationPlan.model_construct(
                time=now,
                policy=self.policy.name,
                allocations={},
                actions=[],
                stats=[],
                decision_ms=0.0,
            )
        if (self.running or self.pending) and (
            self._timer_at is None or self._timer_at <= now or self._next_round < self._timer_at
        ):
            self.executor.wake_at(self._next_round)
            self._timer_at = self._next_round
        return plan

    def _schedule_wakeup(self, view: ClusterView) -> None:
        wanted = self.policy.next_wakeup(view)
        if self._round is not None and self.running:
            boundary = view.now + self._round
            wanted = boundary if wanted is None else min(wanted, boundary)
        if wanted is None or wanted <= view.now:
            return
        if self._timer_at is None or self._timer_at <= view.now or wanted < self._timer_at:
            self.executor.wake_at(wanted)
            self._timer_at = wanted
