"""Turn a rigid allocation stage's counts into a :class:`~.policy.Delta` (the engine's fast path).

A rank-based rigid stage (SRTF, SRSF, SJF, Tiresias-L) computes its counts as before; under
best-fit placement, a running job whose count is unchanged keeps its very allocation, one
whose count drops to 0 is preempted, and the pending jobs that get GPUs are placed best-fit
on what is free once the preempted jobs have left. :func:`delta_from_shares` produces exactly
that as changes, placing the new jobs with the view's free-count index, so the decision
costs no pass over the running jobs beyond the stage's own. When the counts ask for anything
else (a running job resized, a job pinned to a GPU type, several GPU types or racks) it
returns the full :class:`~.policy.Decision` built from the *same* counts: a stateful stage
is never asked twice for one event.
"""

from __future__ import annotations

from gpuplan.models import ClusterView, SolverStats

from . import change_verify
from .placement.best_fit import best_fit_placement, place_new_best_fit
from .placement.shapes import enforce_shapes
from .policy import Decision, Delta, PlacementStage, Shares


def delta_ready(view: ClusterView, placement: PlacementStage) -> bool:
    """Whether a delta can stand for the full decision on ``view``: best-fit placement, a
    live view with the free-count index, no GPU shared between jobs, no shaped job."""
    return (
        placement is best_fit_placement
        and view.free_index is not None
        and not view.shared
        and not view.shaped
    )


def delta_from_shares(
    view: ClusterView, shares: Shares, placement: PlacementStage, stats: list[SolverStats]
) -> Delta | Decision:
    """The decision best fit would make for ``shares`` (whole-GPU counts), as a delta when it
    is only preemptions and starts, else in full (see the module docstring)."""
    preempts: list[str] = []
    released: dict[str, list[int]] = {}
    free = view.free
    want_of = shares.get
    for job_id, job in view.running.items():
        want = want_of(job_id, 0)
        if want == job.gpus:
            continue
        alloc = job.allocation
        if want or alloc is None:
            return _full(view, shares, placement, stats)
        preempts.append(job_id)
        for node, gpus in alloc.placement.items():
            if node in free:
                released.setdefault(node, []).extend(gpus)
    pending = view.pending
    wants = [(job_id, n) for job_id, n in shares.items() if n > 0 and job_id in pending]
    if not wants:
        return Delta(starts={}, preempts=preempts, stats=stats)
    starts = place_new_best_fit(view, wants, released)
    if starts is None:
        return _full(view, shares, placement, stats)
    return Delta(starts=starts, preempts=preempts, stats=stats)


def in_running_order(view: ClusterView, job_ids: list[str]) -> list[str]:
    """``job_ids`` (running jobs) in ``view.running`` order, the order best fit walks and
    releases in: by the engine's entry numbers (``running_since``) when the view has them,
    else a pass over ``running``. Under verify mode the pass checks the entry numbers and
    raises :class:`~.change_verify.ChangeSetMissed` where they disagree. One job needs no
    ordering."""
    if len(job_ids) <= 1:
        return job_ids
    since = view.running_since
    if since is not None:
        job_ids = sorted(job_ids, key=since.__getitem__)
    if since is None or change_verify.VERIFY:
        names = set(job_ids)
        scanned = [job_id for job_id in view.running if job_id in names]
        if since is not None and scanned != job_ids:
            raise change_verify.ChangeSetMissed(
                f"running_since orders {job_ids} but running holds {scanned}"
            )
        job_ids = scanned
    return job_ids


def delta_from_changes(
    view: ClusterView,
    starts: list[tuple[str, int]],
    preempts: list[str],
    placement: PlacementStage,
    stats: list[SolverStats],
) -> Delta | Decision:
    """The decision best fit would make when the running jobs ``preempts`` stop, every other
    running job keeps its GPUs and the pending jobs ``starts`` (job, GPUs, in rank order) get
    GPUs: :func:`delta_from_shares` for a stage that found the changes itself, so the cost
    is O(changes), not O(running jobs). Falls back to the full decision exactly where
    :func:`delta_from_shares` does (a preempted job without allocation, placement the
    free-count index cannot reproduce)."""
    running = view.running
    # The running-dict order delta_from_shares uses (released GPUs merge in that order).
    preempts = in_running_order(view, preempts)
    released: dict[str, list[int]] = {}
    free = view.free
    for job_id in preempts:
        alloc = running[job_id].allocation
        if alloc is None:
            return _full(view, _shares_of(view, starts, preempts), placement, stats)
        for node, gpus in alloc.placement.items():
            if node in free:
                released.setdefault(node, []).extend(gpus)
    if not starts:
        return Delta(starts={}, preempts=preempts, stats=stats)
    placed = place_new_best_fit(view, starts, released)
    if placed is None:
        return _full(view, _shares_of(view, starts, preempts), placement, stats)
    return Delta(starts=placed, preempts=preempts, stats=stats)


def _shares_of(view: ClusterView, starts: list[tuple[str, int]], preempts: list[str]) -> Shares:
    """The whole-count shares the changes stand for (running jobs keep their counts)."""
    stopping = set(preempts)
    shares: Shares = {
        job_id: job.gpus for job_id, job in view.running.items() if job_id not in stopping
    }
    shares.update(starts)
    return shares


def _full(
    view: ClusterView, shares: Shares, placement: PlacementStage, stats: list[SolverStats]
) -> Decision:
    """:meth:`StagedPolicy.decide`'s answer for plain counts (best fit never edits the view,
    so the live view serves)."""
    return Decision(
        shares=shares, placements=enforce_shapes(view, placement(view, shares, stats)), stats=stats
    )
