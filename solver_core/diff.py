"""Turn a decision into an :class:`AllocationPlan`, and check a plan before anyone carries it out.

Action rules, per job:

* pending -> placed: ``start``;
* running -> not placed: ``preempt``;
* running, same GPUs, share and efficiency: ``keep`` (listed only with ``include_keep``; the
  simulator does not need thousands of no-op actions per event);
* running, same GPUs, another share or efficiency: ``reshare`` (co-located jobs change their
  fraction of each GPU, or Pollux changes a job's batch size; nothing restarts);
* running, different GPU count: ``resize``;
* running, same count on different GPUs: ``migrate``.

:func:`check_plan` validates a whole plan (``gpuplan plan`` and the test suite run it on every
plan); :func:`check_actions` validates only what a plan changes, against the view's free and
shared GPUs, in time proportional to the actions — every executor runs it through
:meth:`~gpuplan.executors.base.Executor.accept` before it carries a plan out.
"""

from __future__ import annotations

from gpuplan.models import (
    SHARE_EPS,
    Action,
    AllocationPlan,
    ClusterView,
    JobAllocation,
    NodeShape,
)

from .policy import Decision, Delta


def build_plan(
    view: ClusterView,
    decision: Decision,
    policy: str,
    decision_ms: float = 0.0,
    include_keep: bool = False,
) -> AllocationPlan:
    actions: list[Action] = []
    placements = decision.placements
    running = view.running.items()
    if not include_keep:  # a job placed on its very allocation object yields no action
        get = placements.get
        running = [
            (j, job)
            for j, job in running
            if (after := get(j)) is None or after is not job.allocation
        ]
    for job_id, job in running:
        before = job.allocation
        after = placements.get(job_id)
        if after is None:
            actions.append(Action(kind="preempt", job_id=job_id, before=before, after=None))
        elif after is before or (
            after.placement == before.placement  # type: ignore[union-attr]
            and after.share == before.share  # type: ignore[union-attr]
            and after.efficiency == before.efficiency  # type: ignore[union-attr]
        ):
            if include_keep:
                actions.append(Action(kind="keep", job_id=job_id, before=before, after=after))
        elif after.placement == before.placement:  # type: ignore[union-attr]
            actions.append(Action(kind="reshare", job_id=job_id, before=before, after=after))
        elif after.gpus != job.gpus:
            actions.append(Action(kind="resize", job_id=job_id, before=before, after=after))
        else:
            actions.append(Action(kind="migrate", job_id=job_id, before=before, after=after))
    for job_id, after in placements.items():
        if job_id in view.pending:
            actions.append(Action(kind="start", job_id=job_id, before=None, after=after))
    return AllocationPlan.model_construct(
        time=view.now,
        policy=policy,
        allocations=placements,
        actions=actions,
        stats=decision.stats,
        decision_ms=decision_ms,
    )


def build_delta_plan(view: ClusterView, delta: Delta, policy: str) -> AllocationPlan:
    """The plan of a :class:`~.policy.Delta`: its preemptions then its starts, in O(changes).

    The same actions, in the same order, as :func:`build_plan` on the equivalent full decision
    (``keep`` actions are never listed). ``allocations`` holds only the started jobs' (every
    other running job keeps the allocation it holds), which is what :func:`check_actions`
    reads; the engine never takes this path when a hook needs the full allocations."""
    running = view.running
    actions: list[Action] = []
    if delta.moves:
        return _moves_plan(view, delta, policy)
    # plain loops, skipped when empty: most deltas start one job or none (a comprehension is
    # a function call of its own in Python 3.11)
    if delta.preempts:
        for job_id in delta.preempts:
            actions.append(
                Action(
                    kind="preempt",
                    job_id=job_id,
                    before=running[job_id].allocation,
                    after=None,
                )
            )
    if delta.starts:
        for job_id, after in delta.starts.items():
            actions.append(Action(kind="start", job_id=job_id, before=None, after=after))
    return AllocationPlan.model_construct(
        time=view.now,
        policy=policy,
        allocations=delta.starts,
        actions=actions,
        stats=delta.stats,
        decision_ms=0.0,
    )


def _moves_plan(view: ClusterView, delta: Delta, policy: str) -> AllocationPlan:
    """:func:`build_delta_plan` for a delta with ``moves``: the running jobs' actions
    (preempt, resize or migrate, as :func:`build_plan` names them) in ``view.running`` order
    (by the engine's entry numbers, else a pass over ``running``), then the starts;
    ``allocations`` holds the moved and started jobs'."""
    running = view.running
    moves = delta.moves
    changed = [*delta.preempts, *moves]
    since = view.running_since
    if since is not None:
        changed.sort(key=since.__getitem__)
    else:
        named = set(changed)
        changed = [job_id for job_id in running if job_id in named]
    actions: list[Action] = []
    for job_id in changed:
        job = running[job_id]
        before = job.allocation
        after = moves.get(job_id)
        if after is None:
            kind = "preempt"
        elif before is not None and after.placement == before.placement:
            kind = "reshare"
        elif after.gpus != job.gpus:
            kind = "resize"
        else:
            kind = "migrate"
        actions.append(Action(kind=kind, job_id=job_id, before=before, after=after))
    for job_id, after in delta.starts.items():
        actions.append(Action(kind="start", job_id=job_id, before=None, after=after))
    return AllocationPlan.model_construct(
        time=view.now,
        policy=policy,
        allocations={**moves, **delta.starts},
        actions=actions,
        stats=delta.stats,
        decision_ms=0.0,
    )


PLACING = frozenset(("start", "resize", "migrate"))
"""Actions that put a job on GPUs it did not hold: each must keep the job's node shape."""


def shape_violation(job_id: str, kind: str, alloc: JobAllocation, shape: NodeShape) -> str:
    """Why ``alloc`` breaks ``shape`` (one line: the job, the action, the nodes, the rule)."""
    spread = ", ".join(f"{n}: {len(g)}" for n, g in sorted(alloc.placement.items()))
    if shape.max_nodes is not None and len(alloc.placement) > shape.max_nodes:
        rule = (
            "a single-node job (max_nodes=1)"
            if shape.max_nodes == 1
            else f"limited to {shape.max_nodes} nodes (max_nodes={shape.max_nodes})"
        )
        return (
            f"job {job_id}: {kind} over {len(alloc.placement)} nodes ({spread} GPUs), "
            f"but it is {rule}"
        )
    return (
        f"job {job_id}: {kind} on {spread} GPUs, but its node shape needs exactly "
        f"{shape.gpus_per_node} GPUs on each node it uses (gpus_per_node)"
    )


def check_shapes(view: ClusterView, plan: AllocationPlan) -> None:
    """Raise ``ValueError`` if an action places a job outside its ``node_shape`` (a
    single-node job over two nodes, an N x G job with another count on a node). O(actions);
    :func:`check_actions` makes the same check in its own pass, and executors run this alone
    on the plans whose per-GPU check they skip (``Executor.trusts_built_plans``)."""
    running, pending = view.running, view.pending
    for a in plan.actions:
        after = a.after
        if after is None or a.kind not in PLACING:
            continue
        job = pending.get(a.job_id) if a.kind == "start" else running.get(a.job_id)
        shape = job.spec.node_shape if job is not None else None
        if shape is not None and not shape.allows(after.placement):
            raise ValueError(shape_violation(a.job_id, a.kind, after, shape))


def _check_gpus(view: ClusterView, job_id: str, alloc: JobAllocation) -> None:
    for node, gpus in alloc.placement.items():
        if node not in view.nodes:
            raise ValueError(f"job {job_id}: node {node!r} is not usable")
        size = view.nodes[node].gpus
        for g in gpus:
            if not 0 <= g < size:
                raise ValueError(f"job {job_id}: GPU {node}:{g} does not exist")


def check_plan(view: ClusterView, plan: AllocationPlan) -> None:
    """Raise ``ValueError`` if the plan uses a GPU beyond its capacity (shares on one GPU sum
    to at most 1), an unusable node, a GPU index that does not exist, or a job the view does
    not know; then check its actions with :func:`check_actions`."""
    load: dict[tuple[str, int], float] = {}
    for job_id, alloc in plan.allocations.items():
        _check_gpus(view, job_id, alloc)
        for node, gpus in alloc.placement.items():
            for g in gpus:
                key = (node, g)
                load[key] = load.get(key, 0.0) + alloc.share
                if load[key] > 1.0 + SHARE_EPS:
                    raise ValueError(f"job {job_id}: GPU {node}:{g} is over-committed")
    for job_id, alloc in plan.allocations.items():
        if job_id not in view.running and job_id not in view.pending:
            raise ValueError(f"job {job_id}: not an active job")
        if alloc.job_id != job_id:
            raise ValueError(f"job {job_id}: its allocation names job {alloc.job_id!r}")
    check_actions(view, plan)


def check_actions(view: ClusterView, plan: AllocationPlan) -> None:  # noqa: C901 (a named exception to the complexity gate)
    """Raise ``ValueError`` unless every action can be carried out on the view's cluster.

    Each action must name an active job in the right state (``start`` a pending job, the rest a
    running one, ``before`` its current allocation, ``after`` what the plan allocates), use
    usable nodes and existing GPUs, keep the job's ``node_shape`` when it places the job (no
    single-node job over two nodes: :func:`check_shapes`), and after all releases no GPU may
    hold more than one whole job or shares summing past 1. Costs O(GPUs the actions touch), so
    executors run it on every plan.
    """
    actions = plan.actions
    if not actions:
        return
    running, pending, allocations = view.running, view.pending, plan.allocations
    delta: dict[tuple[str, int], float] = {}
    get = delta.get
    for a in actions:
        job_id, kind, before = a.job_id, a.kind, a.before
        if kind == "start":
            job = pending.get(job_id)
            if job is None:
                raise ValueError(f"job {job_id}: start of a job that is not pending")
        else:
            job = running.get(job_id)
            if job is None:
                raise ValueError(f"job {job_id}: {kind} of a job that is not running")
            if before is not job.allocation and before != job.allocation:
                raise ValueError(f"job {job_id}: {kind} from an allocation it does not hold")
        if kind in ("keep", "preempt"):
            if kind == "preempt" and job_id in allocations:
                raise ValueError(f"job {job_id}: preempted but still allocated")
            if kind == "preempt" and before is not None:
                share = before.share
                for node, gpus in before.placement.items():
                    for g in gpus:
                        delta[(node, g)] = get((node, g), 0.0) - share
            continue
        after = a.after
        planned = allocations.get(job_id)
        if after is None or (planned is not after and planned != after):
            raise ValueError(f"job {job_id}: {kind} to an allocation the plan does not hold")
        if after.job_id != job_id:
            raise ValueError(f"job {job_id}: its allocation names job {after.job_id!r}")
        _check_gpus(view, job_id, after)
        shape = job.spec.node_shape
        if shape is not None and kind in PLACING and not shape.allows(after.placement):
            raise ValueError(shape_violation(job_id, kind, after, shape))
        if before is not None:
            share = before.share
            for node, gpus in before.placement.items():
                for g in gpus:
                    delta[(node, g)] = get((node, g), 0.0) - share
        share = after.share
        for node, gpus in after.placement.items():
            for g in gpus:
                delta[(node, g)] = get((node, g), 0.0) + share
    shared, free = view.shared, view.free
    for (node, g), change in delta.items():
        if change > SHARE_EPS:
            # view.gpu_load(node, g), inlined (one call per GPU a plan takes)
            used = shared[node].get(g) if node in shared else None
            if used is None:
                used = 0.0 if g in free.get(node, ()) else 1.0
            if used + change > 1.0 + SHARE_EPS:
                raise ValueError(f"GPU {node}:{g} is over-committed by the plan")
