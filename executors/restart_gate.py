"""The engine's restart gate: drop the changes to running jobs that cost more than they gain.

The engine (:meth:`Engine._apply`) hands every accepted plan to :meth:`RestartGate.filter`
before carrying it out. The gate groups the plan's actions into *hand-over groups*: two actions
are in one group when one takes a GPU the other frees (a shrink and the start it makes room for,
a preemption and the job that gets its GPUs, chains of those). Each group with a change to a
running job (grow, shrink, migrate, preempt) is carried out or skipped as a whole:

* cost = sum over its changes of ``latency x GPUs idled`` (GPU-seconds), the latency being what
  the executor measured for that job and kind (a
  :class:`~gpuplan.solver_core.restart_gate.ChangeCosts` held by the executor's progress
  core), else the configured prior for the kind, else the executor's own figure. GPUs idled:
  those the job holds while it restarts (after a resize or move), or those it will hold again
  when a preempted job restarts (its current ones);
* gain = sum over its resizes and moves of the time each saves its own job (negative for a
  shrink; a shrink that lends GPUs to the group's starts loses only while they run) x the GPUs
  it holds after, plus for each start the time the waiting job gains x its
  GPUs; a start gains the time it would otherwise wait: until the group's jobs that free GPUs
  end, or sooner, when running jobs holding as many GPUs as it needs on the nodes it was placed
  on end first (all at their current rates);
* carried out when ``cost <= 0 or gain > cost`` and no changed job of the group was changed
  less than ``min_dwell_s`` ago (hysteresis, only for groups that cost something).

Skipping a whole group keeps the plan valid: no kept action takes a GPU a skipped action would
have freed (it would be in the same group), skipped starts leave their jobs pending and skipped
changes leave their jobs on the GPUs they hold. With zero costs every group is carried out and
the plan passes unchanged. The gate keeps counters (proposed / carried out / skipped per kind)
for the run's result and the controller's journal.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuplan.models import Action, ActiveJob, AllocationPlan, Cluster, Overheads, placement_rate
from gpuplan.models.scenario import RestartGateSpec
from gpuplan.solver_core.restart_gate import (
    GATED_KINDS,
    MEASURED_KIND,
    ChangeCosts,
    GateConfig,
    carry_out,
    change_cost,
    finish_time,
    lent_shrink_gain,
    resize_gain,
    start_gain,
    within_dwell,
)

if TYPE_CHECKING:
    from .base import Executor, ExecutorCapabilities


def gate_kind(action: Action) -> str | None:
    """``grow`` / ``shrink`` / ``migrate`` / ``preempt`` for a change the gate weighs, else
    None (a start, a keep, a reshare, or a resize that keeps the GPU count, which is a move)."""
    kind = action.kind
    if kind == "preempt":
        return "preempt"
    if kind == "migrate":
        return "migrate"
    if kind == "resize":
        if action.gpus_after > action.gpus_before:
            return "grow"
        if action.gpus_after < action.gpus_before:
            return "shrink"
        return "migrate"
    return None


def executor_change_costs(executor: Executor) -> ChangeCosts | None:
    """The :class:`ChangeCosts` an executor measures into, if it measures any: the real
    executors' progress core holds one (Slurm, SSH, and the controller's Slurm executor); the
    simulator has none. Where there is one the gate is on by default."""
    for holder in (executor, getattr(executor, "slurm", None)):
        core = getattr(holder, "core", None)
        costs = getattr(core, "change_costs", None)
        if isinstance(costs, ChangeCosts):
            return costs
    return None


@dataclass(frozen=True, slots=True)
class GateDecision:
    """One hand-over group the gate weighed: its changes (job id -> kind), the GPU-seconds it
    was predicted to gain and cost, and whether it was carried out (``why``: ``paid``,
    ``free``, ``too costly`` or ``dwell``)."""

    time: float
    changes: dict[str, str]
    starts: tuple[str, ...]
    gain: float
    cost: float
    carried: bool
    why: str


def gate_for_scenario(spec: RestartGateSpec, overheads: Overheads) -> RestartGate | None:
    """The simulator's gate from a scenario's ``engine.restart_gate`` block (None when off):
    each kind's cost is the block's figure, else what the simulator charges for it
    (``overheads``), so the gate weighs the same pauses the simulated jobs then pay."""
    if not spec.enabled:
        return None
    priors = {
        "grow": spec.resize_s if spec.resize_s is not None else overheads.resize_cost_for(True),
        "shrink": spec.resize_s if spec.resize_s is not None else overheads.resize_cost_for(False),
        "migrate": spec.migrate_s if spec.migrate_s is not None else overheads.migrate_s,
        "preempt": spec.preempt_s
        if spec.preempt_s is not None
        else overheads.preempt_s + overheads.restart_s,
    }
    return RestartGate(GateConfig(min_dwell_s=spec.min_dwell_s, priors=priors))


def empty_stats() -> dict[str, dict[str, int]]:
    stats = {k: {"proposed": 0, "done": 0, "skipped": 0} for k in GATED_KINDS}
    stats["start"] = {"proposed": 0, "done": 0, "skipped": 0}
    return stats


class RestartGate:
    """Filters plans (see the module docstring). One per engine."""

    def __init__(self, config: GateConfig | None = None, costs: ChangeCosts | None = None) -> None:
        self.config = config or GateConfig()
        self.costs = costs if costs is not None else ChangeCosts(self.config.ewma_alpha)
        self.stats = empty_stats()
        """Per kind: changes proposed by the policy, carried out, skipped. ``start`` counts
        only starts that depended on a gated change (those skipped went with it)."""
        self.skipped_for_dwell = 0
        """Groups skipped because a job in them was changed less than ``min_dwell_s`` ago."""
        self.decisions: deque[GateDecision] = deque(maxlen=256)
        """The latest weighed groups, newest last (for logs and tests; bounded)."""
        self._last_change: dict[str, float] = {}

    # ------------------------------------------------------------------ cost and gain
    def latency(self, job_id: str, kind: str, caps: ExecutorCapabilities) -> float:
        """Expected seconds of one ``kind`` change of ``job_id``: measured, else the configured
        prior, else the executor's figure (its in-place pause for a resize it does in place,
        its restart latency otherwise)."""
        measured = MEASURED_KIND[kind]
        priors = self.config.priors
        prior = priors.get(kind, priors.get(measured))
        if prior is None:
            how, pause = caps.resize_cost()
            prior = pause if measured == "resize" and how == "in_place" else caps.restart_latency_s
        return self.costs.estimate(job_id, measured, prior)

    def _weigh(
        self,
        group: list[Action],
        kinds: dict[int, str | None],
        jobs: dict[str, ActiveJob],
        cluster: Cluster,
        now: float,
        caps: ExecutorCapabilities,
        ends: _Ends,
        pending: dict[str, ActiveJob],
    ) -> tuple[float, float]:
        cost = gain = 0.0
        frees_until = float("inf")
        lent = 0.0  # how long the group's starts hold what they get (inf: unknown)
        for a in group:
            if a.kind == "start":
                waiting = pending.get(a.job_id)
                lent = max(
                    lent,
                    float("inf")
                    if waiting is None
                    else finish_time(
                        waiting.remaining(now), placement_rate(waiting.spec, cluster, a.after)
                    ),
                )
        for a in group:
            kind = kinds[id(a)]
            job = jobs.get(a.job_id)
            if kind is None or job is None:
                continue
            left = job.remaining(now)
            rate_before = placement_rate(job.spec, cluster, a.before)
            latency = self.latency(a.job_id, kind, caps)
            if kind == "preempt":
                cost += change_cost(latency, a.gpus_before)
            else:
                cost += change_cost(latency, a.gpus_after)
                rate_after = placement_rate(job.spec, cluster, a.after)
                if kind == "shrink" and lent > 0:
                    gain += lent_shrink_gain(left, rate_before, rate_after, a.gpus_after, lent)
                else:
                    gain += resize_gain(left, rate_before, rate_after, a.gpus_after)
            before = a.before.gpu_set() if a.before is not None else frozenset()
            after = a.after.gpu_set() if a.after is not None else frozenset()
            if before - after:
                frees_until = min(frees_until, _pause(job, now) + finish_time(left, rate_before))
        if frees_until != float("inf"):
            gain += sum(
                start_gain(min(frees_until, ends.soonest(a)), a.gpus_after)
                for a in group
                if a.kind == "start"
            )
        return gain, cost

    # ------------------------------------------------------------------ the filter
    def filter(
        self,
        plan: AllocationPlan,
        running: dict[str, ActiveJob],
        cluster: Cluster,
        now: float,
        caps: ExecutorCapabilities,
        pending: dict[str, ActiveJob] | None = None,
    ) -> AllocationPlan:
        """``plan`` without the hand-over groups whose changes do not pay (same object when
        nothing is dropped). ``running`` / ``pending``: the engine's jobs (before the plan);
        ``caps``: the executor's capabilities (the last-resort latency priors)."""
        actions = [a for a in plan.actions if a.kind != "keep"]
        kinds = {id(a): (gate_kind(a) if a.job_id in running else None) for a in actions}
        if not any(kinds.values()):
            self._remember(actions, now, running)
            return plan
        dropped: set[str] = set()
        ends = _Ends(running, cluster, now)
        for group in _groups(actions):
            gated = [a for a in group if kinds[id(a)] is not None]
            if not gated:
                continue
            gain, cost = self._weigh(group, kinds, running, cluster, now, caps, ends, pending or {})
            go = carry_out(gain, cost)
            why = ("free" if cost <= 0 else "paid") if go else "too costly"
            if (
                go
                and cost > 0
                and any(
                    within_dwell(now, self._last_change.get(a.job_id), self.config.min_dwell_s)
                    for a in gated
                )
            ):
                go, why = False, "dwell"
                self.skipped_for_dwell += 1
            self.decisions.append(
                GateDecision(
                    now,
                    {a.job_id: kinds[id(a)] or "" for a in gated},
                    tuple(a.job_id for a in group if a.kind == "start"),
                    gain,
                    cost,
                    go,
                    why,
                )
            )
            for a in group:
                kind = kinds[id(a)] or ("start" if a.kind == "start" else None)
                if kind is None:
                    continue
                row = self.stats[kind]
                row["proposed"] += 1
                row["done" if go else "skipped"] += 1
            if not go:
                dropped.update(a.job_id for a in group)
        kept = [a for a in plan.actions if a.job_id not in dropped]
        self._remember(kept, now, running)
        if not dropped:
            return plan
        return plan.model_copy(update={"actions": kept})

    def hold(self, job_ids: Iterable[str], now: float) -> None:
        """Start the dwell clock of ``job_ids`` at ``now`` without a change, as if each had
        just been changed (a later clock is kept).

        The controller calls this for the running jobs it adopts after a restart: the clocks of
        the run before are not journaled, and a policy that re-divides GPUs at every event
        (AFS-L, Max-Min) would otherwise resize a job in the first plan after the restart, so a
        restart would stop a running job. Held, such a change waits ``min_dwell_s`` like any
        change right after another; a change that costs nothing is never held."""
        last = self._last_change
        for job_id in job_ids:
            last[job_id] = max(now, last.get(job_id, now))

    def _remember(
        self, actions: Iterable[Action], now: float, running: dict[str, ActiveJob]
    ) -> None:
        """Start the dwell clock of every job started, resized or moved now. Jobs that left
        (finished, failed, preempted) are dropped once the clocks outnumber the running jobs
        twice, so a long-lived controller keeps memory bounded at amortised O(1) per plan."""
        last = self._last_change
        for a in actions:
            if a.kind == "preempt":
                last.pop(a.job_id, None)
            elif a.kind in ("start", "resize", "migrate"):
                last[a.job_id] = now
        if len(last) > 2 * len(running) + 64:
            for job_id in [j for j in last if j not in running]:
                del last[job_id]
                self.costs.forget(job_id)

    def summary(self) -> dict[str, Any]:
        """Counters and measured costs (the run's result, the controller's journal)."""
        return {
            "changes": {k: dict(v) for k, v in self.stats.items()},
            "skipped_for_dwell": self.skipped_for_dwell,
            "costs": self.costs.summary(),
        }


class _Ends:
    """When the running jobs would free their GPUs without the plan (at their current rates):
    how long a waiting job would wait anyway for as many GPUs as it got, counting only GPUs on
    the nodes the policy placed it on (it chose those nodes; GPUs freed elsewhere may not suit
    it), so a change that makes room for it is credited only with the wait it really saves.
    Computed lazily, once per plan."""

    def __init__(self, running: dict[str, ActiveJob], cluster: Cluster, now: float) -> None:
        self._running, self._cluster, self._now = running, cluster, now
        self._ends: list[tuple[float, dict[str, int]]] | None = None

    def soonest(self, start: Action) -> float:
        """Seconds until jobs holding ``start``'s GPU count on its nodes have ended (inf if
        never)."""
        if start.after is None:
            return float("inf")
        if self._ends is None:
            now, cluster = self._now, self._cluster
            self._ends = sorted(
                (
                    (
                        _pause(j, now)
                        + finish_time(
                            j.remaining(now), placement_rate(j.spec, cluster, j.allocation)
                        ),
                        {n: len(g) for n, g in j.allocation.placement.items()},
                    )
                    for j in self._running.values()
                    if j.allocation is not None
                ),
                key=lambda e: e[0],
            )
        nodes = start.after.placement.keys()
        freed, wanted = 0, start.gpus_after
        for end, held in self._ends:
            freed += sum(held.get(n, 0) for n in nodes)
            if freed >= wanted:
                return end
        return float("inf")


def _pause(job: ActiveJob, now: float) -> float:
    """Seconds the job still makes no progress (starting or restarting) before it resumes."""
    return max(0.0, job.resume_time - now)


def _groups(actions: list[Action]) -> list[list[Action]]:
    """Hand-over groups: connected components of "takes a GPU the other one holds before the
    plan" (a GPU shared by several jobs links the taker to each). Order within a group and of
    the groups follows the plan."""
    parent = list(range(len(actions)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    freed_by: dict[tuple[str, int], list[int]] = {}
    for i, a in enumerate(actions):
        if a.before is not None:
            for gpu in a.before.gpu_set():
                freed_by.setdefault(gpu, []).append(i)
    for j, a in enumerate(actions):
        if a.after is None:
            continue
        for gpu in a.after.gpu_set():
            for i in freed_by.get(gpu, ()):
                if i != j:
                    parent[find(i)] = find(j)
    out: dict[int, list[Action]] = {}
    for i, a in enumerate(actions):
        out.setdefault(find(i), []).append(a)
    return list(out.values())
