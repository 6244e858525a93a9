"""The AFS stages' answer to the engine's fast path: only the jobs whose count changed.

Why: AFS re-divides every share at each decision, but few counts change from one decision to
the next. Answered in full, a decision cost best-fit placement's pass over every running job
(whose count mostly did not change) and :func:`~gpuplan.solver_core.diff.build_plan`'s pass
over the same jobs: at 10,000 active jobs on 8,192 GPUs more than the AFS solver itself.

:func:`counts_delta` compares the stage's new count per row with the GPUs each row's job
holds (:attr:`~.afs_columns.AfsColumns.gpus`, kept from the change set) in one numpy
comparison, and places only the jobs that differ with best fit's own rules
(:func:`~gpuplan.solver_core.placement.best_fit.place_changed`): under best fit a running job
whose count is unchanged keeps its very allocation object and nothing placed depends on it,
so the resulting plan is the one the full protocol builds, action for action. Where that
cannot be shown cheaply (another placement stage, co-located GPUs, shaped jobs, a running
job without GPUs) the stage answers with the full :class:`~gpuplan.solver_core.policy.Decision`
from the same counts, as :meth:`~gpuplan.solver_core.policy.StagedPolicy.decide` would.
"""

from __future__ import annotations

import numpy as np

from gpuplan.models import ActiveJob, ClusterView, SolverStats

from ...delta import in_running_order
from ...placement.best_fit import best_fit_placement, place_changed
from ...placement.shapes import enforce_shapes
from ...policy import Decision, Delta, PlacementStage, Shares
from .afs_columns import AfsColumns

__all__ = ["counts_delta"]


def counts_delta(
    view: ClusterView,
    cols: AfsColumns,
    counts: np.ndarray,
    placement: PlacementStage,
    stats: list[SolverStats],
    shares: Shares | None = None,
) -> Delta | Decision:
    """The decision for ``counts`` (one per row of the synced ``cols``) as a delta naming the
    jobs whose count differs from what they hold, or in full where a delta cannot stand for
    it (see the module docstring). ``shares``: the counts as the stage's dict, when it has
    one (the full answer uses it as it is; else it is built from ``counts``)."""
    running = view.running
    held = cols.gpus
    if (
        placement is not best_fit_placement
        or view.shared
        or view.shaped
        or int(np.count_nonzero(held)) != len(running)  # a running job holding no GPUs
    ):
        if shares is None:
            shares = cols.shares(counts)
        placed = placement(view, shares, stats)
        return Decision(shares=shares, placements=enforce_shapes(view, placed), stats=stats)
    rows = np.flatnonzero(counts != held)
    if len(rows) == 0:
        return Delta(starts={}, stats=stats)
    ids = cols.ids[rows].tolist()
    wants = counts[rows].tolist()
    had = held[rows].tolist()
    changed: list[tuple[str, ActiveJob]] = []
    new: list[tuple[str, int]] = []
    for job_id, want, gpus in zip(ids, wants, had, strict=True):
        if gpus:  # every job holding GPUs is running (checked above)
            changed.append((job_id, running[job_id]))
        else:  # pending (its count is positive: it differs from 0)
            new.append((job_id, want))
    if len(changed) > 1:  # best fit walks the running jobs in view.running order
        order = in_running_order(view, [job_id for job_id, _ in changed])
        changed = [(job_id, running[job_id]) for job_id in order]
    want_of = dict(zip(ids, wants, strict=True))
    preempts, moves, starts = place_changed(view, want_of, changed, new)
    return Delta(starts=starts, preempts=preempts, stats=stats, moves=moves)
