"""Themis' answer to the engine's fast path: only the jobs whose count changed.

Why: between lease expiries most running jobs keep their leased GPUs, yet a decision answered
in full cost best-fit placement's pass over every running job and
:func:`~gpuplan.solver_core.diff.build_plan`'s pass over the same jobs (5.3 of 27.5 s on the
20k-job scale row). The stage knows which jobs its decision may have changed: those whose
leases it settled the long way (a lease lapsed, or the books disagree with what the job holds)
and those the auction or the leftover spread gave GPUs. Every other running job keeps the
count it holds, so under best fit it keeps its very allocation object and nothing placed
depends on it (:func:`~gpuplan.solver_core.placement.best_fit.place_changed`): the plan built
from the changed jobs alone is the full protocol's, action for action.

Where that cannot be shown cheaply (another placement stage, co-located GPUs, shaped jobs, a
running job without GPUs or allocation) the stage answers with the full
:class:`~gpuplan.solver_core.policy.Decision` from the same counts, as
:meth:`~gpuplan.solver_core.policy.StagedPolicy.decide` would. With
:data:`~gpuplan.solver_core.change_verify.VERIFY` on, the candidates are checked against a
scan of every active job and a job they missed raises
:class:`~gpuplan.solver_core.change_verify.ChangeSetMissed`.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuplan.models import ActiveJob, ClusterView, SolverStats

from ... import change_verify
from ...delta import in_running_order
from ...placement.best_fit import best_fit_placement, place_changed
from ...placement.shapes import enforce_shapes
from ...policy import Decision, Delta, PlacementStage, Shares

__all__ = ["shares_delta"]


def _scan(view: ClusterView, shares: Shares) -> set[str]:
    """Every active job whose count in ``shares`` differs from what it holds (verify mode)."""
    want_of = shares.get
    out = {j for j, job in view.running.items() if want_of(j, 0) != job.gpus}
    out.update(j for j in view.pending if want_of(j, 0) > 0)
    return out


def shares_delta(
    view: ClusterView,
    shares: Shares,
    candidates: Iterable[str],
    placement: PlacementStage,
    stats: list[SolverStats],
    full: bool = False,
) -> Delta | Decision:
    """The decision for ``shares`` as a delta naming the jobs whose count differs from what
    they hold, or in full where a delta cannot stand for it (see the module docstring).

    ``candidates``: job ids that include every active job whose count may differ (duplicates
    and unchanged jobs allowed); ``full``: the stage saw a running job the delta cannot
    stand for (no GPUs or no allocation)."""
    if full or placement is not best_fit_placement or view.shared or view.shaped:
        placed = placement(view, shares, stats)
        return Decision(shares=shares, placements=enforce_shapes(view, placed), stats=stats)
    running, pending = view.running, view.pending
    want_of = shares.get
    changed: list[tuple[str, ActiveJob]] = []
    new: list[tuple[str, int]] = []
    seen: set[str] = set()
    for job_id in candidates:
        if job_id in seen:
            continue
        seen.add(job_id)
        want = want_of(job_id, 0)
        job = running.get(job_id)
        if job is not None:
            if want != job.gpus:
                changed.append((job_id, job))
        elif want > 0 and job_id in pending:
            new.append((job_id, want))
    if change_verify.VERIFY:
        found = {j for j, _ in changed} | {j for j, _ in new}
        missed = sorted(_scan(view, shares) - found)
        if missed:
            raise change_verify.ChangeSetMissed(
                f"Themis' delta left out job(s) whose count changed, e.g. {missed[:5]}"
            )
    if not changed and not new:
        return Delta(starts={}, stats=stats)
    if len(changed) > 1:  # best fit walks the running jobs in view.running order
        order = in_running_order(view, [job_id for job_id, _ in changed])
        changed = [(job_id, running[job_id]) for job_id in order]
    preempts, moves, starts = place_changed(view, shares, changed, new)
    return Delta(starts=starts, preempts=preempts, stats=stats, moves=moves)
