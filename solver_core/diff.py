"""Turn a decision into an :class:`AllocationPlan`: allocations plus the actions to get there.

Action rules, per job:

* pending -> placed: ``start``;
* running -> not placed: ``preempt``;
* running, same GPUs: ``keep`` (listed only with ``include_keep``; the simulator does not need
  thousands of no-op actions per event);
* running, different GPU count: ``resize``;
* running, same count on different GPUs: ``migrate``.
"""

from __future__ import annotations

from gpuplan.models import Action, AllocationPlan, ClusterView

from .policy import Decision


def build_plan(
    view: ClusterView,
    decision: Decision,
    policy: str,
    decision_ms: float = 0.0,
    include_keep: bool = False,
) -> AllocationPlan:
    actions: list[Action] = []
    placements = decision.placements
    for job_id, job in view.running.items():
        before = job.allocation
        after = placements.get(job_id)
        if after is None:
            actions.append(Action.model_construct(kind="preempt", job_id=job_id, before=before,
                                                  after=None))
        elif after is before or after.placement == before.placement:  # type: ignore[union-attr]
            if include_keep:
                actions.append(Action.model_construct(kind="keep", job_id=job_id, before=before,
                                                      after=after))
        elif after.gpus != job.gpus:
            actions.append(Action.model_construct(kind="resize", job_id=job_id, before=before,
                                                  after=after))
        else:
            actions.append(Action.model_construct(kind="migrate", job_id=job_id, before=before,
                                                  after=after))
    for job_id, after in placements.items():
        if job_id in view.pending:
            actions.append(Action.model_construct(kind="start", job_id=job_id, before=None,
                                                  after=after))
    return AllocationPlan.model_construct(
        time=view.now,
        policy=policy,
        allocations=placements,
        actions=actions,
        stats=decision.stats,
        decision_ms=decision_ms,
    )


def check_plan(view: ClusterView, plan: AllocationPlan) -> None:
    """Raise ``ValueError`` if the plan uses a GPU twice (beyond shares of 1), an unusable node,
    or a GPU index that does not exist. The test suite runs it on every plan of every simulated
    run (``tests/conftest.py``); executors do not call it yet (the core-v2 issue adds that)."""
    load: dict[tuple[str, int], float] = {}
    for job_id, alloc in plan.allocations.items():
        for node, gpus in alloc.placement.items():
            if node not in view.nodes:
                raise ValueError(f"job {job_id}: node {node!r} is not usable")
            size = view.nodes[node].gpus
            for g in gpus:
                if not 0 <= g < size:
                    raise ValueError(f"job {job_id}: GPU {node}:{g} does not exist")
                key = (node, g)
                load[key] = load.get(key, 0.0) + alloc.share
                if load[key] > 1.0 + 1e-9:
                    raise ValueError(f"job {job_id}: GPU {node}:{g} is over-committed")
