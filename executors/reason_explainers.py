"""The per-policy part of the reasons (see :mod:`.reasons`): which terms each policy's reason
names and how its waiting order is read.

Why its own module: an explainer changes with its policy (a new policy, a new term), while
:mod:`.reasons`' recorder, pending-job reasons and gate reasons change with the engine; each
explainer only reads the policy's state after a decision, never writes it.
"""

from __future__ import annotations

import math
from types import MethodType
from typing import TYPE_CHECKING, Any

from gpuplan.models import Action, ActiveJob
from gpuplan.models.ojpp import collision_probability
from gpuplan.models.reasons import Reason, Term

if TYPE_CHECKING:
    from .reasons import _Context

SHOW_AHEAD = 3
"""How many of the jobs ahead of a waiting one its reason names."""
DETAILED = 100
"""Waiting jobs whose reason is recomputed at a decision that changed the free GPUs or the
head of the queue: the first ones in the policy's order (and every job that has none yet).
Deeper in a long queue a reason stands until the job moves up: recomputing thousands per
decision made a recorded run several times slower."""


def gpus(n: int) -> str:
    """``1 GPU``, ``4 GPUs``."""
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def short_id(job_id: str, limit: int = 40) -> str:
    """A job id cut for one line of text (ids may be long; the full id is in the record)."""
    return job_id if len(job_id) <= limit else job_id[: limit - 3] + "..."


def action_nodes(action: Action) -> list[str]:
    alloc = action.after if action.after is not None else action.before
    return sorted(alloc.placement) if alloc is not None else []


def _gpu_list(action: Action) -> str:
    if action.after is None:
        return ""
    placed = sorted(action.after.placement.items())
    return ",".join(f"{n}:{'+'.join(map(str, g))}" for n, g in placed)


# ---------------------------------------------------------------------------- policies
class Explainer:
    """The generic explainer: the policy's order is its pending queue's order."""

    name = "generic"

    def begin(self, engine: Any, now: float) -> None:
        """A new decision's reasons start (drop what was cached for the previous one)."""

    def order(self, engine: Any, now: float) -> list[str]:
        """Pending jobs in the order the policy serves them."""
        return list(engine.pending)

    def terms(self, job: ActiveJob, engine: Any, now: float) -> dict[str, Term]:
        """The policy's own terms for one job (running or pending)."""
        return {}

    def waiting(self, job: ActiveJob, engine: Any, now: float) -> Reason | None:
        """Why a job that would fit on the free GPUs still waits (None: the generic "the
        policy serves the jobs ahead of it first")."""
        return None

    def action(self, a: Action, ctx: _Context) -> Reason:
        """Why the policy proposed ``a``."""
        job = ctx.job(a.job_id)
        terms: dict[str, Term] = dict(self.terms(job, ctx.engine, ctx.now)) if job else {}
        nodes = ",".join(action_nodes(a))
        if a.kind == "start":
            rank = ctx.rank.get(a.job_id)
            terms.setdefault("rank", rank if rank is not None else -1)
            terms.setdefault("gpus", a.gpus_after)
            return Reason(
                code="start",
                text=f"start: rank {terms['rank']} in {ctx.policy}'s "
                f"order, {a.gpus_after} GPUs fit on {nodes}",
                terms=terms,
            )
        if a.kind == "preempt":
            takers = [x.job_id for x in ctx.plan.actions if x.kind == "start"]
            terms["gpus"] = a.gpus_before
            text = f"preempt: {ctx.policy} gives its {a.gpus_before} GPUs to " + (
                ", ".join(short_id(t) for t in takers[:SHOW_AHEAD]) if takers else "other jobs"
            )
            return Reason(code="preempt", text=text, terms=terms)
        if a.kind == "resize":
            terms.update(gpus_before=a.gpus_before, gpus_after=a.gpus_after)
            verb = (
                "grow"
                if a.gpus_after > a.gpus_before
                else "shrink"
                if a.gpus_after < a.gpus_before
                else "move"
            )
            return Reason(
                code=verb,
                text=f"{verb}: {ctx.policy} changes its share "
                f"{a.gpus_before} -> {a.gpus_after} GPUs on {nodes}",
                terms=terms,
            )
        if a.kind == "migrate":
            return Reason(
                code="migrate", text=f"migrate: {ctx.policy} moves it to {nodes}", terms=terms
            )
        return Reason(code=a.kind, text=f"{a.kind}: {ctx.policy}", terms=terms)


class AfsExplainer(Explainer):
    """AFS-L / AFS-P / AFS-S: share and rank in the scan order ``(submit_time, id)``."""

    name = "afs"

    def __init__(self, stage: Any, label: str) -> None:
        from gpuplan.solver_core.policies.afs.afs import AfsP

        self.stage, self.label = stage, label
        self.counter = stage.counter if isinstance(stage, AfsP) else None
        """AFS-P's and AFS-S's processor-sharing counter (AFS-L keeps none)."""
        self._rank: dict[str, int] | None = None

    def begin(self, engine: Any, now: float) -> None:
        self._rank = None

    def _ranks(self, engine: Any, now: float) -> dict[str, int]:
        if self._rank is None:
            jobs = sorted(
                (*engine.running.values(), *engine.pending.values()),
                key=lambda j: (j.spec.submit_time, j.spec.id),
            )
            self._rank = {j.spec.id: i + 1 for i, j in enumerate(jobs)}
        return self._rank

    def order(self, engine: Any, now: float) -> list[str]:
        return sorted(engine.pending, key=lambda j: (engine.pending[j].spec.submit_time, j))

    def terms(self, job: ActiveJob, engine: Any, now: float) -> dict[str, Term]:
        out: dict[str, Term] = {
            "share": job.gpus if job.allocation is not None else 0,
            "rank": self._ranks(engine, now).get(job.spec.id, -1),
        }
        if self.counter is not None:
            out["counter"] = self.counter(job, now)
        return out

    def waiting(self, job: ActiveJob, engine: Any, now: float) -> Reason | None:
        t = self.terms(job, engine, now)
        return Reason(
            code="share-zero", text=f"{self.label} gives it share 0 (rank {t['rank']})", terms=t
        )

    def action(self, a: Action, ctx: _Context) -> Reason:
        r = super().action(a, ctx)
        if a.kind in ("start", "resize"):
            return Reason(
                code=r.code,
                text=f"{r.code}: {self.label} share {a.gpus_after} GPUs"
                f" at rank {r.terms.get('rank')}",
                terms=r.terms,
            )
        return r


class TiresiasExplainer(Explainer):
    """Tiresias-L: queue level and attained service in the job's stint."""

    name = "tiresias"

    def __init__(self, stage: Any) -> None:
        self.stage = stage

    def order(self, engine: Any, now: float) -> list[str]:
        state = self.stage._state
        big = (math.inf, math.inf)

        def key(j: str) -> tuple[float, float]:
            st = state.get(j)
            return big if st is None else (st.queue, st.seq)

        return sorted(engine.pending, key=key)

    def terms(self, job: ActiveJob, engine: Any, now: float) -> dict[str, Term]:
        st = self.stage._state.get(job.spec.id)
        if st is None:
            return {"queue": 0}
        attained = self.stage._service(job, now) - st.service_base
        out: dict[str, Term] = {"queue": st.queue, "attained_gpu_s": round(attained, 3)}
        if st.queue < len(self.stage.thresholds):
            out["threshold_gpu_s"] = self.stage.thresholds[st.queue]
        return out

    def waiting(self, job: ActiveJob, engine: Any, now: float) -> Reason | None:
        t = self.terms(job, engine, now)
        return Reason(
            code="queue",
            text=f"queue Q{t['queue']} (attained {t.get('attained_gpu_s', 0):.0f} GPU-s)",
            terms=t,
        )

    def action(self, a: Action, ctx: _Context) -> Reason:
        r = super().action(a, ctx)
        t = r.terms
        where = f"Q{t.get('queue', 0)}, attained {float(t.get('attained_gpu_s', 0)):.0f} GPU-s"
        if a.kind == "start":
            return Reason(
                code="start",
                text=f"start: {where}; its {a.gpus_after} GPUs fit on {','.join(action_nodes(a))}",
                terms=t,
            )
        if a.kind == "preempt":
            return Reason(
                code="preempt",
                text=f"preempt: {where}; a job of a higher queue takes its GPUs",
                terms=t,
            )
        return r


class ArylExplainer(Explainer):
    """Aryl: the pool of the node (a server on loan from inference) and the SJF rank."""

    name = "aryl"

    def terms(self, job: ActiveJob, engine: Any, now: float) -> dict[str, Term]:
        out: dict[str, Term] = {"remaining_s": round(job.remaining(now), 3)}
        if job.allocation is not None:
            pools = {
                engine.cluster.node_by_name[n].pool
                for n in job.allocation.placement
                if n in engine.cluster.node_by_name
            }
            out["pool"] = "+".join(sorted(pools))
        return out

    def order(self, engine: Any, now: float) -> list[str]:
        return sorted(engine.pending, key=lambda j: (engine.pending[j].remaining(now), j))

    def action(self, a: Action, ctx: _Context) -> Reason:
        r = super().action(a, ctx)
        pool = r.terms.get("pool", "")
        if a.kind in ("start", "resize") and pool:
            loaned = (
                "on loaned inference servers" if "inference" in str(pool) else "on training servers"
            )
            return Reason(
                code=r.code,
                text=f"{r.text} ({loaned}, SJF rank {ctx.rank.get(a.job_id, '-')})",
                terms=r.terms,
            )
        return r


class OjppExplainer(Explainer):
    """OJPP co-location: GPUs chosen, share, predicted interference on the busiest GPU."""

    name = "ojpp"

    def action(self, a: Action, ctx: _Context) -> Reason:
        r = super().action(a, ctx)
        if a.after is None or a.kind not in ("start", "resize", "migrate", "reshare"):
            return r
        worst, mates = 0.0, set()
        for node, gpus in a.after.placement.items():
            for g in gpus:
                there = ctx.on_gpu.get((node, g), [])
                ps = [p for j, p in there]
                worst = max(worst, collision_probability(ps) if len(ps) > 1 else 0.0)
                mates.update(j for j, _ in there if j != a.job_id)
        terms = {
            **r.terms,
            "gpus_chosen": _gpu_list(a),
            "share": a.after.share,
            "predicted_collision": round(worst, 6),
            "colocated": len(mates),
        }
        with_ = (
            f", with {', '.join(short_id(m) for m in sorted(mates)[:SHOW_AHEAD])}" if mates else ""
        )
        return Reason(
            code=r.code,
            text=f"{r.code}: GPUs {terms['gpus_chosen']} share "
            f"{a.after.share:g}{with_}; predicted collision {worst:.3f}",
            terms=terms,
        )


class SidecarExplainer(Explainer):
    """SideCar: the donor a start shrank and the predicted makespan of the new schedule."""

    name = "sidecar"

    def __init__(self, stage: Any) -> None:
        self.stage = stage

    def action(self, a: Action, ctx: _Context) -> Reason:
        r = super().action(a, ctx)
        terms = dict(r.terms)
        makespan = ctx.sidecar_makespan(self.stage)
        if makespan is not None:
            terms["predicted_makespan_s"] = round(makespan, 3)
        if a.kind == "start":
            host = set(action_nodes(a))
            donors = [
                x.job_id
                for x in ctx.plan.actions
                if x.kind == "resize"
                and x.gpus_after < x.gpus_before
                and set(action_nodes(x)) & host
            ]
            if donors:
                terms["donor"] = donors[0]
            text = (
                f"start: Alg. 1 on {','.join(sorted(host))}"
                + (f", donor {short_id(donors[0])}" if donors else ", idle GPUs")
                + (f"; predicted makespan {makespan:.0f} s" if makespan is not None else "")
            )
            return Reason(code="start", text=text, terms=terms)
        if a.kind == "resize":
            text = (
                f"{r.code}: Alg. {'2' if a.gpus_after > a.gpus_before else '1 donor'} "
                f"{a.gpus_before} -> {a.gpus_after} GPUs"
                + (f"; predicted makespan {makespan:.0f} s" if makespan is not None else "")
            )
            return Reason(code=r.code, text=text, terms=terms)
        return Reason(code=r.code, text=r.text, terms=terms)


def explainer_for(policy: Any) -> Explainer:
    """The explainer of a policy: by its allocation stage's type (a wrapper that replaced the
    stage gets the generic one), OJPP by name."""
    from gpuplan.solver_core.policies.afs.afs import AfsL, AfsP, AfsS
    from gpuplan.solver_core.policies.aryl.aryl import ArylPolicy
    from gpuplan.solver_core.policies.baselines.tiresias import TiresiasL
    from gpuplan.solver_core.policies.sidecar.sidecar import SidecarStage
    from gpuplan.solver_core.policy import StagedPolicy

    stage = policy.allocation if isinstance(policy, StagedPolicy) else None
    if isinstance(stage, AfsS):
        return AfsExplainer(stage, "AFS-S")
    if isinstance(stage, AfsP):
        return AfsExplainer(stage, "AFS-P")
    if isinstance(stage, AfsL):
        return AfsExplainer(stage, "AFS-L")
    if isinstance(stage, TiresiasL):
        return TiresiasExplainer(stage)
    if isinstance(stage, SidecarStage):
        return SidecarExplainer(stage)
    if isinstance(stage, MethodType) and isinstance(stage.__self__, ArylPolicy):
        return ArylExplainer()
    if isinstance(policy, StagedPolicy) and "ojpp" in policy.name:
        return OjppExplainer()
    return Explainer()
