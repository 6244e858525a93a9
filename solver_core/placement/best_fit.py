"""Consolidating best-fit placement.

Turns GPU counts into GPUs while moving as little as possible:

1. a running job whose count is unchanged keeps its GPUs;
2. a shrinking job gives back GPUs from the nodes where it holds the fewest (so what it keeps
   stays packed);
3. a growing job first takes free GPUs on nodes it already uses, then more as below;
4. a new job (or the rest of a growing one) is placed best-fit: if one node can hold it, the
   node with the *fewest* free GPUs that still fits (leaving large holes for large jobs);
   otherwise whole nodes with the most free GPUs first, then best-fit for the remainder,
   so the job spans as few nodes as possible.

Jobs are placed largest first (best-fit decreasing). A job restricted to one GPU type only sees
nodes of that type; on a mixed cluster a job not flagged ``heterogeneous`` also stays on one
type: the one it already holds, else the fastest for it with enough free GPUs
(:func:`.gpu_types.one_type_nodes`). A job with a ``node_shape`` (single node, or N nodes x G
GPUs) is placed, grown and shrunk only in that shape (:mod:`.shapes`). A job that cannot be
placed is left out and stays pending.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuplan.models import ActiveJob, Cluster, ClusterView, JobAllocation, SolverStats
from gpuplan.models.free_index import FreeIndex

from ..policy import Placements, Shares
from .gpu_types import one_type_nodes
from .shapes import shrink_shaped, take_shaped


def _take_best_fit(
    free: dict[str, list[int]],
    need: int,
    nodes: list[str],
    prefer: tuple[str, ...] = (),
    cluster: Cluster | None = None,
) -> dict[str, tuple[int, ...]] | None:
    """Pick ``need`` GPUs from ``free`` on ``nodes``; None if impossible. ``free`` is updated
    by replacing a node's list, never editing it in place (lists may be shared with a view).

    With a multi-rack ``cluster``, once a job holds a node, ties in the free-GPU count are
    broken by hop distance to the nodes it already has (same rack first), then by name; on a
    single rack every distance is equal and the choice is the plain best-fit one."""
    if sum(map(len, map(free.__getitem__, nodes))) < need:
        return None
    taken: dict[str, list[int]] = {}

    def take(node: str, count: int) -> None:
        gpus = free[node]
        taken.setdefault(node, []).extend(gpus[:count])
        free[node] = gpus[count:]

    for node in prefer:
        if need == 0:
            break
        if free.get(node):
            count = min(need, len(free[node]))
            take(node, count)
            need -= count
    topo = cluster if cluster is not None and cluster.multi_rack else None

    def near(node: str) -> float:
        if topo is None or not taken:
            return 0.0
        return min(topo.hops(node, t) for t in taken)

    while need > 0:
        if topo is None:
            # Every distance is 0: the same choice as below in one pass without key tuples.
            node = _tightest(free, nodes, need)
            if node is not None:
                take(node, need)
                need = 0
                continue
            node = max(nodes, key=lambda n: (len(free[n]), n))
            count = len(free[node])
            take(node, count)
            need -= count
            continue
        fitting = [n for n in nodes if len(free[n]) >= need]
        if fitting:
            node = min(fitting, key=lambda n: (len(free[n]), near(n), n))
            take(node, need)
            need = 0
        else:
            node = max(nodes, key=lambda n: (len(free[n]), -near(n), n))
            count = len(free[node])
            take(node, count)
            need -= count
    return {n: tuple(sorted(g)) for n, g in taken.items()}


def _tightest(free: dict[str, list[int]], nodes: list[str], need: int) -> str | None:
    """The node of ``nodes`` with the fewest free GPUs that still holds ``need`` (ties: the
    smallest name), or None: ``min`` by ``(free, name)`` over the fitting nodes, written as
    one loop because it runs once per placed job over every node."""
    best: str | None = None
    best_len = 0
    for n in nodes:
        size = len(free[n])
        if size >= need and (best is None or size < best_len or (size == best_len and n < best)):
            best, best_len = n, size
    return best


def _keep_or_release(
    view: ClusterView,
    shares: Shares,
    released: dict[str, list[int]],
    jobs: Iterable[tuple[str, ActiveJob]] | None = None,
) -> tuple[Placements, list[tuple[str, int]]]:
    """Running jobs that keep or shrink their GPUs (in ``view.running`` order), and those that
    grow; what shrinking or stopping jobs give back goes into ``released``. ``jobs``: only
    these ``(id, job)`` running pairs, in ``view.running`` order (a stage that knows which
    counts changed, :func:`place_changed`); default every running job."""
    view_free = view.free
    want_of = shares.get
    result: Placements = {}
    grow: list[tuple[str, int]] = []
    for job_id, job in view.running.items() if jobs is None else jobs:
        alloc = job.allocation
        if alloc is None:
            continue
        want = want_of(job_id, 0)
        if want == job.gpus:
            result[job_id] = alloc
            continue
        have = job.gpus
        if want == 0:
            for node, gpus in alloc.placement.items():
                if node in view_free:
                    released.setdefault(node, []).extend(gpus)
        elif want < have and job.spec.node_shape is not None:
            kept = shrink_shaped(alloc, want, job.spec.node_shape)
            if kept is None:  # no legal smaller shape: keep the job as it is
                result[job_id] = alloc
                continue
            for node, gpus in alloc.placement.items():
                if node in view_free:
                    released.setdefault(node, []).extend(
                        g for g in gpus if g not in kept.get(node, ())
                    )
            result[job_id] = JobAllocation.fast(job_id, kept, alloc.share, alloc.efficiency)
        elif want < have:
            keep: dict[str, tuple[int, ...]] = {}
            budget = want
            for node, gpus in sorted(alloc.placement.items(), key=lambda kv: (-len(kv[1]), kv[0])):
                kept = gpus[: min(budget, len(gpus))]
                if kept:
                    keep[node] = kept
                    budget -= len(kept)
                given = gpus[len(kept) :]
                if given and node in view_free:
                    released.setdefault(node, []).extend(given)
            result[job_id] = JobAllocation.fast(job_id, keep, alloc.share, alloc.efficiency)
        else:
            grow.append((job_id, want))

    return result, grow


def best_fit_placement(view: ClusterView, shares: Shares, stats: list[SolverStats]) -> Placements:
    # GPUs released by shrinking/stopping jobs, by node; merged into the free lists only when
    # some job is to be placed (most events place nothing new). The view's lists are ascending
    # (ClusterView's contract) and shared, never edited: a node's list is replaced when it
    # changes, so an event costs no per-node copy or sort.
    released: dict[str, list[int]] = {}
    want_of = shares.get
    running = view.running
    # Fast path: every running job keeps its count (always under FIFO, and under SRTF between
    # preemptions), so each keeps its allocation: the comprehension builds the same dict as
    # _keep_or_release, in the same order, at a fraction of the cost.
    result: Placements = {
        job_id: alloc
        for job_id, job in running.items()
        if (alloc := job.allocation) is not None and want_of(job_id, 0) == job.gpus
    }
    grow: list[tuple[str, int]] = []
    if len(result) != len(running):
        result, grow = _keep_or_release(view, shares, released)
    pending = view.pending
    if len(pending) < len(shares):  # the same set, scanned from its smaller side
        new = [(job_id, n) for job_id in pending if (n := want_of(job_id, 0)) > 0]
    else:
        new = [(job_id, n) for job_id, n in shares.items() if n > 0 and job_id in pending]
    if not grow and not new:
        return result
    return _place(view, grow, new, released, result)


def _place(
    view: ClusterView,
    grow: list[tuple[str, int]],
    new: list[tuple[str, int]],
    released: dict[str, list[int]],
    result: Placements,
) -> Placements:
    """Place the growing running jobs and the new ones (job, GPUs wanted in all) best-fit,
    largest first, on what is free plus ``released``; adds their allocations to ``result``
    (a job that cannot grow keeps its allocation, one that cannot start is left out)."""
    free = dict(view.free)
    for node, gpus in released.items():
        free[node] = sorted(free[node] + gpus)
    all_nodes = sorted(free)
    one_type = len({node.gpu_type for node in view.nodes.values()}) <= 1
    for job_id, want in sorted(grow + new, key=lambda x: (-x[1], x[0])):
        job = view.running.get(job_id) or view.pending[job_id]
        nodes = all_nodes
        if job.spec.gpu_type is not None:
            nodes = [n for n in all_nodes if view.nodes[n].gpu_type == job.spec.gpu_type]
        held = job.allocation.placement if job.allocation else {}
        extra = want - sum(len(g) for g in held.values())
        if not one_type:  # on a one-type cluster it would return ``nodes`` unchanged
            nodes = one_type_nodes(view, job, nodes, free, extra)
        shape = job.spec.node_shape
        if shape is not None and (shape.max_nodes == 1 or shape.gpus_per_node is not None):
            got = take_shaped(free, extra, nodes, shape, dict(held), job.spec.allowed_counts())
        else:
            got = _take_best_fit(
                free, extra, nodes, prefer=tuple(sorted(held)), cluster=view.cluster
            )
        if got is None:
            if held:  # cannot grow: keep what it has
                result[job_id] = job.allocation  # type: ignore[assignment]
            continue
        merged = {n: tuple(sorted(held.get(n, ()) + got.get(n, ()))) for n in {*held, *got}}
        result[job_id] = JobAllocation.fast(job_id, dict(sorted(merged.items())))
    return result


def place_changed(
    view: ClusterView,
    shares: Shares,
    changed: list[tuple[str, ActiveJob]],
    new: list[tuple[str, int]],
) -> tuple[list[str], Placements, Placements]:
    """:func:`best_fit_placement` for a stage that knows which counts changed: ``changed``
    lists the running jobs whose count in ``shares`` differs from what they hold (in
    ``view.running`` order), ``new`` the pending jobs ``shares`` gives GPUs. Every other
    running job keeps its count, so best fit keeps its very allocation and nothing it
    places depends on it: this is the same computation on the changed jobs alone.

    Returns ``(preempts, moved, starts)``: the running jobs best fit leaves out (in
    ``view.running`` order), those given another allocation (same order) and the pending
    jobs placed (in the order best fit places them). Views with shaped jobs are the
    caller's to avoid (:func:`~.shapes.enforce_shapes` is not applied here)."""
    released: dict[str, list[int]] = {}
    kept, grow = _keep_or_release(view, shares, released, changed)
    placed: Placements = {}
    if grow or new:
        indexed = _place_indexed(view, grow, new, released)
        placed = _place(view, grow, new, released, {}) if indexed is None else indexed
    preempts: list[str] = []
    moved: Placements = {}
    running = view.running
    for job_id, job in changed:
        after = kept.get(job_id)
        if after is None:
            after = placed.get(job_id)
        before = job.allocation
        if after is None:
            preempts.append(job_id)
        elif after is not before and not (
            before is not None
            and after.placement == before.placement
            and after.share == before.share
            and after.efficiency == before.efficiency
        ):  # build_plan's test for "keep"
            moved[job_id] = after
    starts = {j: a for j, a in placed.items() if j not in running}
    return preempts, moved, starts


def _place_indexed(
    view: ClusterView,
    grow: list[tuple[str, int]],
    new: list[tuple[str, int]],
    released: dict[str, list[int]],
) -> Placements | None:
    """:func:`_place` with the view's free-count index: the same allocations in the same
    order (a growing job first takes free GPUs on the nodes it holds, by name, then best fit
    as :func:`_take_best_fit`; the index answers its "tightest" and "fullest" questions as
    ``_tightest`` and ``max`` do over every node), at O(GPUs per node) per take instead of
    a copy of ``view.free``, a sort of its node names and a scan of every node per job.

    None where the index cannot reproduce :func:`_place` (the caller runs it instead): no
    index on the view, several GPU types or racks (type choice and hop tie-breaks), shaped
    views or jobs, a job pinned to a GPU type. The index is scratch here, put back before
    returning; ``view.free`` is only read."""
    index = view.free_index
    jobs = _indexable(view, grow + new)
    if index is None or jobs is None:
        return None
    free = view.free
    left: dict[str, list[int]] = {}
    """Node -> its free GPUs after this decision's releases and takes so far."""
    undo: list[tuple[str, int]] = []
    result: Placements = {}
    try:
        for node, gpus in released.items():  # only nodes of view.free (_keep_or_release)
            undo.append((node, index.count(node)))
            left[node] = sorted(free[node] + gpus)
            index.set(node, len(left[node]))
        for job_id, want, job in jobs:
            alloc = job.allocation
            held = alloc.placement if alloc is not None else {}
            need = want - sum(len(g) for g in held.values())
            if index.total < need:  # _take_best_fit's "not enough free GPUs"
                if held:  # cannot grow: keep what it has
                    result[job_id] = alloc  # type: ignore[assignment]
                continue
            taken: dict[str, tuple[int, ...]] = {}
            for node in sorted(held) if held else ():  # _take_best_fit's ``prefer``
                if need == 0:
                    break
                gpus = left[node] if node in left else free.get(node)
                if gpus:
                    count = min(need, len(gpus))
                    taken[node] = _take_from(index, left, undo, node, gpus, count)
                    need -= count
            while need > 0:
                node = index.tightest(need)
                if node is None:  # no node holds the rest: the fullest node, wholly
                    node = index.fullest()
                    assert node is not None  # total >= need > 0
                    count = index.count(node)
                else:
                    count = need
                # A node is taken from at most once per job (after a take it has no free
                # GPU left or need is 0), and its list ascends: each tuple is sorted.
                gpus = left[node] if node in left else free[node]
                taken[node] = _take_from(index, left, undo, node, gpus, count)
                need -= count
            if held:
                merged = {
                    n: tuple(sorted(held.get(n, ()) + taken.get(n, ()))) for n in {*held, *taken}
                }
                placement = dict(sorted(merged.items()))
            else:
                placement = taken if len(taken) == 1 else dict(sorted(taken.items()))
            result[job_id] = JobAllocation.fast(job_id, placement)
    finally:
        for node, count in reversed(undo):
            index.set(node, count)
    return result


def _indexable(
    view: ClusterView, wants: list[tuple[str, int]]
) -> list[tuple[str, int, ActiveJob]] | None:
    """``wants`` (job, GPUs) in best fit's placing order (largest first, then id) with their
    jobs, or None where :func:`_place_indexed` cannot stand for :func:`_place`."""
    cluster = view.cluster
    if view.shaped or cluster.multi_rack or len(cluster.node_gpu_types) > 1:
        return None
    if len(wants) > 1:
        wants.sort(key=lambda x: (-x[1], x[0]))
    running = view.running
    pending = view.pending
    jobs: list[tuple[str, int, ActiveJob]] = []
    for job_id, want in wants:
        job = running.get(job_id) or pending[job_id]
        if job.spec.gpu_type is not None or job.spec.node_shape is not None:
            return None
        jobs.append((job_id, want, job))
    return jobs


def _take_from(
    index: FreeIndex,
    left: dict[str, list[int]],
    undo: list[tuple[str, int]],
    node: str,
    gpus: list[int],
    count: int,
) -> tuple[int, ...]:
    """Take the first ``count`` of ``gpus`` (``node``'s free GPUs, ascending) for
    :func:`_place_indexed`: the rest go to ``left``, the index learns the new count and
    ``undo`` the old one."""
    left[node] = gpus[count:]
    undo.append((node, len(gpus)))
    index.set(node, len(gpus) - count)
    return tuple(gpus[:count])


def place_new_best_fit(
    view: ClusterView, wants: list[tuple[str, int]], released: dict[str, list[int]] | None = None
) -> Placements | None:
    """Best fit of pending jobs ``wants`` (job, GPUs) with the view's free-count index, when
    every running job keeps its GPUs or stops (``released``: the GPUs stopping jobs give back,
    by node): the allocations :func:`best_fit_placement` would give them, in the same order,
    at O(GPUs per node) per job instead of O(nodes).

    None when the index cannot reproduce it: no index on the view, several GPU types or racks
    (type choice and hop tie-breaks), shaped jobs, or a job pinned to a GPU type. The index is
    used as scratch (each take updates it, so later jobs see what earlier ones took) and put
    back before returning; ``view.free`` is only read."""
    index = view.free_index
    cluster = view.cluster
    if index is None or view.shaped or cluster.multi_rack or len(cluster.node_gpu_types) > 1:
        return None
    pending = view.pending
    for j, _ in wants:  # a loop, not any(genexpr): usually one job
        spec = pending[j].spec
        # A shaped job is placed by best_fit_placement (take_shaped), never here: checked per
        # job as well as through view.shaped, so a view whose shaped set missed a job (one
        # put into the books some other way) cannot split it over nodes.
        if spec.gpu_type is not None or spec.node_shape is not None:
            return None
    free = view.free
    left: dict[str, list[int]] = {}
    """Node -> its free GPUs after this decision's takes so far."""
    undo: list[tuple[str, int]] = []
    result: Placements = {}
    try:
        for node, gpus in (released or {}).items():
            if node in free:
                undo.append((node, index.count(node)))
                left[node] = sorted(free[node] + gpus)
                index.set(node, len(left[node]))
        order = sorted(wants, key=lambda x: (-x[1], x[0])) if len(wants) > 1 else wants
        last = len(order) - 1
        for i, (job_id, want) in enumerate(order):
            if index.total < want:  # _take_best_fit's "not enough free GPUs": left pending
                continue
            need = want
            taken: dict[str, tuple[int, ...]] = {}
            while need > 0:
                node = index.tightest(need)
                if node is None:  # no node holds the rest: the fullest node, wholly
                    node = index.fullest()
                    assert node is not None  # total >= need > 0
                    count = index.count(node)
                else:
                    count = need
                gpus = left[node] if node in left else free[node]
                # A node is taken from at most once per job (after a take it either has
                # ``need`` fewer GPUs and need is 0, or none left), and ``gpus`` ascends, so
                # each node's tuple is already sorted.
                taken[node] = tuple(gpus[:count])
                need -= count
                if need == 0 and i == last:  # the decision's last take: nothing reads the
                    break  # index or ``left`` again, so neither is updated (nor undone)
                left[node] = gpus[count:]
                undo.append((node, len(gpus)))
                index.set(node, len(gpus) - count)
            result[job_id] = JobAllocation.fast(
                job_id, taken if len(taken) == 1 else dict(sorted(taken.items()))
            )
    finally:
        for node, count in reversed(undo):
            index.set(node, count)
    return result


take_best_fit = _take_best_fit
"""Public name of the best-fit GPU picker, for placement stages that choose the nodes
(e.g. max-min-perf's one-type-per-round placement)."""
