"""Reasons for an engine's decisions: why each action, why each waiting job still waits.

Why a separate, opt-in module: the engine's loop is hot, and nobody needs reasons in a bench
run. An engine records reasons only when its ``reasons`` attribute holds a
:class:`DecisionReasons` (``simulate --out``, the Slurm controller); then, after each plan is
carried out, this module reads the plan, the engine's jobs and the policy's own state, and
hands one :class:`~gpuplan.models.reasons.DecisionRecord` to a sink. It reads and never
writes: no policy state, no engine state, no random draw, so a run with reasons decides exactly
as one without (``tests.bench.fingerprint --check``).

What a reason says depends on the policy (:func:`explainer_for`):

* AFS-L / AFS-P / AFS-S: the job's ``share`` (GPUs the share loop gave it) and its ``rank`` in
  the policy's scan order (AFS-P/-S: also its held-time ``counter``);
* Tiresias-L: the job's ``queue`` level and ``attained_gpu_s`` (service in its stint), the
  queue's ``threshold_gpu_s``; the waiting order is Tiresias' own (queue, then entry order);
* Aryl: the node's pool (a server on loan from inference, or training) and the job's SJF
  ``rank`` by remaining time; reclaims name each server given back and the jobs it held;
* OJPP (``*-ojpp`` policies): the GPUs chosen, the job's ``share`` and the predicted
  interference on its most crowded GPU (collision probability of the co-located workers'
  memory spikes, OJPP Eq. 4);
* SideCar: the ``donor`` a start took GPUs from and the ``predicted_makespan_s`` of the
  resulting schedule (SideCar's own training-time model);
* every other policy: the start's rank in the policy's order and the nodes it got;
* the restart gate: ``gain_gpu_s`` vs ``cost_gpu_s`` of the hand-over group, for changes it
  kept and (``carried`` False) those it skipped.

A waiting job's reason comes from the cluster after the decision (:func:`pending_reasons`):
"needs 4 GPUs on one node, at most 2 free on any node", "needs 8 GPUs, 3 free", or, when it
would fit, the policy's own terms; each names the jobs ahead of it in the policy's order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuplan.models import Action, ActiveJob, AllocationPlan, Node
from gpuplan.models.reasons import ActionReason, DecisionRecord, Reason, Term

from .reason_explainers import (
    DETAILED,
    SHOW_AHEAD,
    Explainer,
    action_nodes,
    explainer_for,
    gpus,
    short_id,
)

if TYPE_CHECKING:
    from .restart_gate import GateDecision

Sink = Callable[[DecisionRecord], None]


# ---------------------------------------------------------------------------- one decision
@dataclass
class _Context:
    """What one decision's reasons read: the engine after the plan, the proposed plan and the
    waiting order before it."""

    engine: Any
    plan: AllocationPlan
    now: float
    rank: dict[str, int]
    policy: str
    _on_gpu: dict[tuple[str, int], list[tuple[str, float]]] | None = None
    _makespan: tuple[bool, float | None] = (False, None)

    def job(self, job_id: str) -> ActiveJob | None:
        return self.engine.running.get(job_id) or self.engine.pending.get(job_id)

    @property
    def on_gpu(self) -> dict[tuple[str, int], list[tuple[str, float]]]:
        """(node, GPU) -> [(job, memory spike probability p)] of running jobs (built once)."""
        if self._on_gpu is None:
            out: dict[tuple[str, int], list[tuple[str, float]]] = {}
            for jid, job in self.engine.running.items():
                if job.allocation is None:
                    continue
                p = job.spec.memory.p if job.spec.memory is not None else 0.0
                for n, gs in job.allocation.placement.items():
                    for g in gs:
                        out.setdefault((n, g), []).append((jid, p))
            self._on_gpu = out
        return self._on_gpu

    def sidecar_makespan(self, stage: Any) -> float | None:
        if not self._makespan[0]:
            value = None
            try:
                from gpuplan.solver_core.policies.sidecar.sidecar_model import HostBook, Predictor

                view = self.engine._check_view(self.now)
                book = HostBook.of(view)
                value = Predictor(book, stage.costs, stage.remaining).makespan({})[0]
            except Exception:  # a reason must never break a run
                value = None
            self._makespan = (True, value)
        return self._makespan[1]


def _carried(engine: Any, a: Action) -> bool:
    """Whether ``a`` was carried out (the restart gate or the unpaid-grow filter may drop it):
    read from the engine's jobs after the plan."""
    if a.kind == "preempt":
        return a.job_id in engine.pending
    job = engine.running.get(a.job_id)
    return job is not None and (job.allocation is a.after or job.allocation == a.after)


def _gate_reason(d: GateDecision) -> Reason:
    kinds = ",".join(sorted(set(d.changes.values())))
    terms: dict[str, Term] = {
        "gain_gpu_s": round(d.gain, 3),
        "cost_gpu_s": round(d.cost, 3),
        "gate": d.why,
    }
    if d.carried:
        return Reason(
            code="gate-keep",
            text=f"restart gate keeps {kinds}: gain "
            f"{d.gain:.0f} > cost {d.cost:.0f} GPU-s ({d.why})",
            terms=terms,
        )
    if d.why == "dwell":
        return Reason(
            code="gate-skip",
            text=f"restart gate skips {kinds}: changed too recently (dwell)",
            terms=terms,
        )
    return Reason(
        code="gate-skip",
        text=f"restart gate skips {kinds}: gain {d.gain:.0f} <= cost {d.cost:.0f} GPU-s",
        terms=terms,
    )


class FreeSummary:
    """The free GPUs after a decision, per GPU type: total and the most on one node, and
    how many nodes have at least k free (for ``gpus_per_node`` shapes)."""

    def __init__(self, nodes: Mapping[str, Node], free: Mapping[str, Sequence[int]]) -> None:
        """``nodes``: the usable nodes; ``free``: node -> its wholly free GPUs (a
        :class:`ClusterView`'s ``nodes`` and ``free``, or the engine ledger's)."""
        self.total: dict[str | None, int] = {None: 0}
        self.most: dict[str | None, int] = {None: 0}
        self.per_node: dict[str | None, list[int]] = {None: []}
        for name, indices in free.items():
            node = nodes.get(name)
            if node is None:
                continue
            k = len(indices)
            for t in (None, node.gpu_type):
                self.total[t] = self.total.get(t, 0) + k
                self.most[t] = max(self.most.get(t, 0), k)
                self.per_node.setdefault(t, []).append(k)


def capacity_reason(job: ActiveJob, free: FreeSummary) -> Reason | None:
    """Why ``job`` cannot start on the free GPUs (None when it could): its minimum count on
    one node (a single-node job), per node (an N x G shape), or in all."""
    spec = job.spec
    need = spec.min_gpus
    t = spec.gpu_type
    of = f" {t}" if t else ""
    total, most = free.total.get(t, 0), free.most.get(t, 0)
    shape = spec.node_shape
    terms: dict[str, Term] = {"needs": need, "free": total, "most_free_on_a_node": most}
    if shape is not None and shape.gpus_per_node:
        g = shape.gpus_per_node
        fits = sum(k // g for k in free.per_node.get(t, []))
        if fits * g < need:
            terms["gpus_per_node"] = g
            return Reason.model_construct(
                code="no-node-fits",
                text=f"needs {need}{of} GPUs as {need // g} "
                f"nodes x {g}, room for {fits} such nodes",
                terms=terms,
            )
        return None
    if shape is not None and shape.max_nodes == 1:
        if most < need:
            return Reason.model_construct(
                code="no-node-fits",
                text=f"needs {gpus(need)}{of} on one node, at most {most} free on any node",
                terms=terms,
            )
        return None
    if total < need:
        return Reason.model_construct(
            code="no-capacity", text=f"needs {gpus(need)}{of}, {total} free", terms=terms
        )
    return None


def pending_reasons(
    state: Any,
    explainer: Explainer,
    now: float,
    order: Sequence[str],
    free: FreeSummary | None = None,
    detailed: int | None = None,
    known: Mapping[str, object] | None = None,
) -> dict[str, Reason]:
    """Every waiting job's reason, ``order`` being the policy's. ``state``: the engine after
    a decision, or a :class:`ClusterView` (its ``pending``, ``running``, ``cluster``, and
    its ``nodes``/``free`` unless ``free`` is given). With ``detailed``, only the first
    ``detailed`` jobs of ``order`` and those not in ``known`` get one (a long queue's tail
    keeps the reason it had: the cost per decision stays bounded)."""
    if free is None:
        free = FreeSummary(state.nodes, state.free)
    engine = state
    out: dict[str, Reason] = {}
    ahead: list[str] = []  # the first SHOW_AHEAD jobs ahead
    n = 0  # how many are ahead
    pending = engine.pending
    skip = known if detailed is not None and known is not None else None
    for jid in order:
        if skip is not None and n >= detailed and jid in skip:  # type: ignore[operator]
            n += 1
            continue
        job = pending.get(jid)
        if job is None:
            continue
        blocked = capacity_reason(job, free)
        if blocked is None:
            own = explainer.waiting(job, engine, now)
            blocked = (
                own
                if own is not None
                else Reason.model_construct(
                    code="behind",
                    text="the policy serves the jobs ahead of it first",
                    terms={"needs": job.spec.min_gpus},
                )
            )
        terms = {**explainer.terms(job, engine, now), **blocked.terms, "ahead": n}
        text = blocked.text
        if n:
            names = ", ".join(short_id(j) for j in ahead)
            text += f"; behind {n} job{'s' if n > 1 else ''} of higher priority: {names}" + (
                ", ..." if n > SHOW_AHEAD else ""
            )
        out[jid] = Reason.model_construct(code=blocked.code, text=text, terms=terms)
        n += 1
        if len(ahead) < SHOW_AHEAD:
            ahead.append(jid)
    return out


class DecisionReasons:
    """The engine's reason recorder (``engine.reasons``): one record per decision to ``sink``.

    ``changed_only``: a record's ``pending`` holds only the jobs whose kind of reason
    (``code``) changed since the previous record (simulation output stays small with long
    queues); False gives every waiting job at every record (the controller, which shows the
    current reason)."""

    def __init__(self, policy: Any, sink: Sink, *, changed_only: bool = True) -> None:
        self.explainer = explainer_for(policy)
        self.sink = sink
        self.changed_only = changed_only
        self._last: dict[str, str] = {}
        self._key: object = None
        self._current: dict[str, Reason] = {}
        """Every waiting job's latest reason (the tail of a long queue keeps its own)."""
        self.last: DecisionRecord | None = None
        """The latest record."""

    def before(self, engine: Any, now: float) -> tuple[dict[str, int], object]:
        """Taken before the plan is carried out: the waiting order (ranks from 1) and the
        restart gate's latest decision (to find the ones this plan adds)."""
        order = self.explainer.order(engine, now)
        gate = engine.restart_gate
        last = gate.decisions[-1] if gate is not None and gate.decisions else None
        return {j: i + 1 for i, j in enumerate(order)}, last

    def after(
        self, engine: Any, plan: AllocationPlan, now: float, mark: tuple[dict[str, int], object]
    ) -> DecisionRecord:
        """The record of ``plan`` (the policy's proposal) after the engine carried it out."""
        rank, last_gate = mark
        self.explainer.begin(engine, now)
        ctx = _Context(engine, plan, now, rank, plan.policy)
        gated: dict[str, Reason] = {}
        gate = engine.restart_gate
        if gate is not None:
            for d in _new_since(gate.decisions, last_gate):
                reason = _gate_reason(d)
                for jid in (*d.changes, *d.starts):
                    gated[jid] = reason
        actions = []
        for a in plan.actions:
            if a.kind == "keep":
                continue
            carried = _carried(engine, a)
            reason = self.explainer.action(a, ctx)
            g = gated.get(a.job_id)
            if g is not None:
                reason = Reason(
                    code=g.code if not carried else reason.code,
                    text=g.text if not carried else f"{reason.text}; {g.text}",
                    terms={**reason.terms, **g.terms},
                )
            elif not carried:
                reason = Reason(
                    code="skipped",
                    text=f"skipped: the restart would cost more than it saves ({reason.text})",
                    terms=reason.terms,
                )
            if carried:  # it starts or stops waiting: its next reason is news
                self._last.pop(a.job_id, None)
            actions.append(
                ActionReason(
                    kind=a.kind,
                    job_id=a.job_id,
                    gpus_before=a.gpus_before,
                    gpus_after=a.gpus_after,
                    nodes=action_nodes(a),
                    carried=carried,
                    reason=reason,
                )
            )
        free = FreeSummary(engine.ledger.usable, engine.ledger.free_view())
        order = self.explainer.order(engine, now)
        # Nothing that the first reasons depend on changed (free GPUs, the head of the
        # queue, no action): only newcomers need one.
        key = (tuple(free.total.items()), tuple(free.most.items()), tuple(order[:DETAILED]))
        same = key == self._key and not actions
        self._key = key
        waiting = pending_reasons(
            engine, self.explainer, now, order, free, 0 if same else DETAILED, self._current
        )
        current = self._current
        for j in [j for j in current if j not in engine.pending]:
            del current[j]
        current.update(waiting)
        record = DecisionRecord(
            time=now,
            policy=plan.policy,
            actions=actions,
            pending=self._changed(waiting, engine.pending) if self.changed_only else dict(current),
            waiting=len(engine.pending),
        )
        self.last = record
        self.sink(record)
        return record

    def reclaim(self, engine: Any, now: float, chosen: Iterable[str]) -> None:
        """A reclaim of loaned servers (Aryl's capacity loaning): each server given back and
        the jobs it held, before they scale in or are evicted."""
        from gpuplan.solver_core.policies.aryl.reclaim import Reclaimer  # only reached on a reclaim

        chooser = engine.reclaimer
        name = getattr(chooser, "__name__", type(chooser).__name__)  # a function or an object
        outcomes = chooser.outcomes if isinstance(chooser, Reclaimer) else None  # why these
        outcome = outcomes[-1] if outcomes and outcomes[-1].time == now else None
        why: dict[str, Term] = {}
        if outcome is not None:
            why = {
                "method": str(outcome.method),
                "preempts": len(outcome.preempted),
                "scale_ins": len(outcome.scaled_in),
                "collateral_gpus": int(outcome.collateral_gpus),
            }
        actions = []
        for server in chosen:
            hit = sorted(
                j
                for j, job in engine.running.items()
                if job.allocation is not None and server in job.allocation.placement
            )
            free = len(engine.ledger.free_view().get(server, []))
            terms: dict[str, Term] = {
                "server": server,
                "jobs_on_it": len(hit),
                "free_gpus": free,
                "reclaimer": name,
                **why,
            }
            how = (
                f" by {why['method']}: {why['preempts']} preemptions, {why['scale_ins']} "
                f"scale-ins in all"
                if why
                else ""
            )
            text = (
                f"reclaim: inference takes {server} back; {name} chose it{how} "
                f"({len(hit)} jobs on it, {free} GPUs idle)"
            )
            actions.append(
                ActionReason(
                    kind="reclaim",
                    job_id=server,
                    nodes=[server],
                    reason=Reason(code="reclaim", text=text, terms=terms),
                )
            )
            for jid in hit:
                actions.append(
                    ActionReason(
                        kind="reclaimed",
                        job_id=jid,
                        nodes=[server],
                        reason=Reason(
                            code="reclaimed",
                            text=f"server {server} reclaimed by inference: the "
                            "job scales in off it, or is evicted",
                            terms={"server": server},
                        ),
                    )
                )
        record = DecisionRecord(
            time=now,
            policy=engine.policy.name,
            actions=actions,
            waiting=len(engine.pending),
        )
        self.sink(record)

    def _changed(
        self, waiting: dict[str, Reason], pending: Mapping[str, object]
    ) -> dict[str, Reason]:
        """The reasons whose kind (``code``) changed: counts in a reason ("behind 12 jobs",
        "3 free") move with every decision, and writing each would make the output grow
        with the queue's length times the decisions."""
        last = self._last
        out = {j: r for j, r in waiting.items() if last.get(j) != r.code}
        if len(last) > len(pending) + 64:
            for j in [j for j in last if j not in pending]:
                del last[j]
        for j, r in out.items():
            last[j] = r.code
        return out


def _new_since(decisions: Any, last: object) -> list[GateDecision]:
    """The gate decisions appended after ``last`` (a bounded deque: newest last)."""
    out = []
    for d in reversed(decisions):
        if d is last:
            break
        out.append(d)
    out.reverse()
    return out
