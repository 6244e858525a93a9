"""SideCar (paper 004): incoming jobs by "reshaping down" (Alg. 1), idle GPUs by "reshaping up"
(Alg. 2), both choosing the scheme of least predicted makespan.

Every decision (digest §2.3, the combined event loop):

1. **Alg. 1** for each pending job in queue order (FIFO): for every host, every optional count
   ``N_opt`` of the job (ascending), either the host's idle GPUs suffice (``T = [N_opt, null,
   0]``) or all of them plus ``N_opt - N_idle`` GPUs of a *single* running job on that host whose
   remaining count stays in its ``S_opt`` (``T = [N_opt, J_i, N_remove]``). The scheme with the
   smallest predicted makespan wins (strict ``<``: the first found among equals, paper
   lines 18/28; "equal" is to a relative ``TIE_RTOL``, see :func:`_better`); ``tie_break:
   sum`` adds the sum of predicted finishes as a second key. No
   candidate: the job stays pending (``T = [0, null, 0]``).
2. **Alg. 2** while idle GPUs remain: every ``(J_i, N_add)`` with ``N_current + N_add`` in
   ``S_opt`` and ``N_add`` idle GPUs on ``J_i``'s host; least predicted makespan wins, one job
   per step, repeated (each job reshaped at most once per decision). The paper has no "do
   nothing" comparison; ``guard: true`` grows only when the makespan prediction improves.

Hosts are the paper's containers: a job runs on one node (MirroredStrategy), so the idle GPUs
and the donor are counted per host (the paper counts ``N_idle`` cluster-wide, digest §2.1
"Host locality"), and a cross-host add is not considered (the paper would terminate and
restart the job; inferred simplification). Predictions: ``sidecar_model.py``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpuplan.models import ActiveJob, ClusterView, SolverStats

from ...params import Params
from ...placement.best_fit import best_fit_placement
from ...policy import Allocation, StagedPolicy, Stateless
from ...registry import PolicyDef
from .sidecar_accuracy import AccuracyTarget
from .sidecar_model import Costs, HostBook, Predictor, Remaining, options

TieBreak = Literal["paper", "sum"]
Key = tuple[float, ...]


TIE_RTOL = 1e-6
"""Predicted times that agree to this relative distance are one value when schemes are
compared. Why: WL4's accuracy-target fit predicts a job's work to about 1e-7 (relative) even
without noise, so schemes that tie exactly under the true work (two donors of one type, two
like hosts) would otherwise be ordered by the fit's rounding error, and the first-found rule of
the paper would depend on the floating-point details of the fit (and of the scipy release
behind it). A millionth of a predicted finish is far below any cost the model knows."""


def _key(ms: tuple[float, float], tie_break: TieBreak) -> Key:
    return (ms[0],) if tie_break == "paper" else ms


def _better(key: Key, best: Key | None) -> bool:
    """``key`` strictly before ``best`` lexicographically, entries within ``TIE_RTOL`` of each
    other counting as equal (so the first found among equals keeps its place)."""
    if best is None:
        return True
    for a, b in zip(key, best, strict=True):
        tol = TIE_RTOL * max(abs(a), abs(b), 1.0)
        if a < b - tol:
            return True
        if a > b + tol:
            return False
    return False


def algorithm1(
    book: HostBook, pred: Predictor, job: ActiveJob, tie_break: TieBreak
) -> tuple[str, int, str | None, int] | None:
    """Alg. 1 for one incoming job: ``(host, N_opt, donor or None, N_remove)`` of least
    predicted makespan, or None when no scheme is feasible."""
    best: Key | None = None
    choice: tuple[str, int, str | None, int] | None = None
    for node in book.nodes():
        idle = len(book.free[node])
        donors = sorted(
            (
                j
                for j, (n, _) in book.where.items()
                if n == node and j not in book.touched and j in book.view.running
            ),
            key=lambda j: (book.view.running[j].spec.submit_time, j),
        )
        for n_opt in options(job, book.size(node)):
            if idle >= n_opt:
                key = _key(pred.makespan({job.id: pred.new(job, node, n_opt)}), tie_break)
                if _better(key, best):
                    best, choice = key, (node, n_opt, None, 0)
                continue
            remove = n_opt - idle
            for donor in donors:
                cur = len(book.where[donor][1])
                left = cur - remove
                if left < 1 or left not in book.view.running[donor].spec.allowed_counts():
                    continue
                changed = {
                    job.id: pred.new(job, node, n_opt),
                    donor: pred.reshaped(donor, left, pred.costs.down_s),
                }
                key = _key(pred.makespan(changed), tie_break)
                if _better(key, best):
                    best, choice = key, (node, n_opt, donor, remove)
    return choice


def algorithm2(
    book: HostBook, pred: Predictor, tie_break: TieBreak, guard: bool
) -> tuple[str, int] | None:
    """Alg. 2: ``(J_i, N_add)`` of least predicted makespan among running jobs that can take
    ``N_add`` idle GPUs of their host, or None."""
    best: Key | None = None
    choice: tuple[str, int] | None = None
    most_idle = max((len(g) for g in book.free.values()), default=0)
    candidates = sorted(
        (j for j in book.where if j not in book.touched and j in book.view.running),
        key=lambda j: (book.view.running[j].spec.submit_time, j),
    )
    for add in range(1, most_idle + 1):
        for job_id in candidates:
            node, gpus = book.where[job_id]
            cur = len(gpus)
            if (
                len(book.free[node]) < add
                or cur + add not in book.view.running[job_id].spec.allowed_counts()
            ):
                continue
            key = _key(
                pred.makespan({job_id: pred.reshaped(job_id, cur + add, pred.costs.up_s)}),
                tie_break,
            )
            if _better(key, best):
                best, choice = key, (job_id, add)
    if guard and best is not None and not _better(best, _key(pred.makespan({}), tie_break)):
        return None
    return choice


class SidecarStage(Stateless):
    """The allocation stage: Alg. 1 for pending jobs, then Alg. 2 for idle GPUs."""

    def __init__(
        self, costs: Costs, tie_break: TieBreak, guard: bool, remaining: Remaining | None = None
    ) -> None:
        self.costs = costs
        self.tie_break = tie_break
        self.guard = guard
        self.remaining = remaining

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Allocation:
        book = HostBook.of(view)
        pred = Predictor(book, self.costs, self.remaining)
        for job in view.pending.values():
            choice = algorithm1(book, pred, job, self.tie_break)
            if choice is None:
                continue
            node, n_opt, donor, remove = choice
            if donor is not None:
                left = len(book.where[donor][1]) - remove
                pred.finish[donor] = pred.reshaped(donor, left, self.costs.down_s)
                book.shrink(donor, remove)
            book.place(job.id, node, n_opt)
            pred.finish[job.id] = pred.new(job, node, n_opt)
        while any(book.free.values()):
            step = algorithm2(book, pred, self.tie_break, self.guard)
            if step is None:
                break
            job_id, add = step
            cur = len(book.where[job_id][1])
            pred.finish[job_id] = pred.reshaped(job_id, cur + add, self.costs.up_s)
            book.grow(job_id, add)
        return book.allocation()


def resume_wakeup(view: ClusterView) -> float | None:
    """Decide again when a job still inside a start/reshape pause resumes while GPUs are idle:
    a job cannot be reshaped twice at once, so the next step waits for it."""
    if not view.free_gpus:
        return None
    later = [j.resume_time for j in view.running.values() if j.resume_time > view.now]
    return min(later) if later else None


class SidecarParams(Params):
    init_s: float = Field(
        174.0,
        ge=0,
        le=1e5,
        description="T_init^k8s + T_init^dl of a new job (s; case study: 633 -> 807 s)",
    )
    down_s: float = Field(27.0, ge=0, le=1e5, description="SideCar reshaping down (s)")
    up_s: float = Field(37.0, ge=0, le=1e5, description="SideCar reshaping up (s)")
    tail_s: float = Field(0.0, ge=0, le=1e5, description="T_ckpt + T_term^dl + T_term^k8s (s)")
    tie_break: TieBreak = Field(
        "sum",
        description="paper: first scheme of least makespan; "
        "sum: then least sum of predicted finishes",
    )
    guard: bool = Field(False, description="Alg. 2 grows only when the makespan improves")
    accuracy_noise: float | None = Field(
        None,
        ge=0,
        le=0.2,
        description="WL4 accuracy targets: predict each job's work by NNLS "
        "fitting of noisy accuracy points with this std (sidecar_accuracy.py); null: the "
        "policy knows the epochs (WL1-3)",
    )
    accuracy_target: float = Field(
        0.9,
        gt=0,
        lt=0.95,
        description="accuracy to reach (with accuracy_noise; the simulated asymptote is +0.05)",
    )


def _build(p: SidecarParams, seed: int) -> StagedPolicy:
    remaining = None
    if p.accuracy_noise is not None:
        remaining = AccuracyTarget(p.accuracy_target, noise=p.accuracy_noise, seed=seed).remaining
    stage = SidecarStage(
        Costs(p.init_s, p.down_s, p.up_s, p.tail_s), p.tie_break, p.guard, remaining
    )
    return StagedPolicy("sidecar", stage, best_fit_placement, resume_wakeup)


POLICIES = [PolicyDef("sidecar", _build, SidecarParams)]
"""``sidecar-accuracy`` (``accuracy_noise: 0.005``) is a preset declared in ``__init__.py``."""

__all__ = ["SidecarStage", "algorithm1", "algorithm2", "resume_wakeup"]
