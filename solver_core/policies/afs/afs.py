"""AFS share policies: AFS-L, AFS-P and AFS-S (Hwang et al., NSDI'21; 000 digest §2.1-2.8).

AFS ("Apathetic Future Share") hands out GPUs one at a time. Each GPU goes to the job that
TOPPRIORITY picks by the pairwise inequality (3)::

    (p'_b - p_b) / p'_b  >  (p'_a - p_a) / p_a          (j_a shorter, j_b longer)

with ``p = P(cnt)`` and ``p' = P(next count)``; when (3) holds the longer job gets the GPU.
This module provides the three variants as *shares stages* (``(view, stats) -> {job: gpus}``)
so that they compose with any placement:

* :class:`AfsL` — Algorithm 1 with known lengths (``len(c) = remaining iterations / P(c)``);
* :class:`AfsP` — length-unaware: (3) is tested both ways (a seeded coin decides when neither
  way holds), and processor-sharing counters time-slice the cluster when jobs outnumber GPUs;
* :class:`AfsS` — AFS-P that knows only each job's peak-throughput GPU count, so it shares by
  max-min fairness capped at that count (App. D).

Choices where the paper is silent (docs/algorithms/afs.md has the full list):

* **scan order** — TOPPRIORITY visits jobs sorted by ``(submit_time, id)``. (3) is not
  transitive (§7.1 counterexample), so the result depends on the order, which must be fixed;
* **ladders and the saturation guard** — a job may only move to its next *allowed* count
  (``0 -> min_gpus``, then one GPU at a time or to the next entry of ``allowed``), only while
  the step fits in the GPUs left, and only if its throughput strictly rises
  (``P(next) > P(cnt)``) — the ladder stops at the first count that would not help. GPUs no job
  can use stay idle rather than slowing a job down;
* a job with no GPUs compares by its length at its first count (``len(1)`` in the paper).

Modules. This one holds the three stages, AFS-P's loop and AFS-S's capped max-min; the fast
AFS-L is :mod:`.afs_l_fast` (Algorithm 1 without its O(M·n) cost, identical shares), the
input type and scan order :mod:`.afs_job`, the per-job columns the stages keep across
decisions :mod:`.afs_columns`, ladders :mod:`.ladders` (shared with the
baselines) and water-filling :mod:`.water_fill` (shared with Max-Min). Their public names
(:class:`AfsJob`, :func:`afs_l_shares`, :func:`build_ladder`, :func:`scan_order`) stay
importable from here.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any

import numpy as np
from pydantic import Field

from gpuplan.models import ActiveJob, ClusterView, SolverStats
from gpuplan.models.bounds import MAX_TIME_S

from ...helpers.ladders import Ladder, LadderCache, build_ladder
from ...helpers.water_fill import water_fill
from ...params import Params
from ...placement.best_fit import best_fit_placement
from ...policy import Decision, Delta, PlacementStage, Shares, StagedPolicy, Stateless
from ...registry import PolicyDef, parameterless
from .afs_columns import AfsColumns
from .afs_delta import counts_delta
from .afs_job import AfsJob, scan_order
from .afs_l_fast import afs_l_shares, afs_l_solve

__all__ = [
    "DEFAULT_UNIT_TIME_S",
    "AfsJob",
    "AfsL",
    "AfsP",
    "AfsS",
    "POLICIES",
    "Ladder",
    "afs_l_shares",
    "afs_p_loop",
    "build_ladder",
    "maxmin_shares",
    "scan_order",
]

INF = math.inf
DEFAULT_UNIT_TIME_S = 7200.0
"""AFS-P unit time at full trace scale (2 h, paper footnote 11); scale it with the trace."""


# --------------------------------------------------------------------------- AFS-P / AFS-S cores
def afs_p_loop(jobs: Sequence[AfsJob], total: int, rng: random.Random) -> list[int]:
    """Algorithm 1's loop with AFS-P's TOPPRIORITY (the ``n <= M`` branch of AFS-P).

    For the incumbent ``j*`` and each scanned ``j``: if (3) holds with ``a = j*, b = j`` the
    scanned job wins; if it holds with ``a = j, b = j*`` the incumbent stays; if neither holds
    the true priority depends on the unknown finishing order, and ``rng`` flips a fair coin.
    (3) never holds both ways (it would need ``G_j > H_x >= G_x > H_j >= G_j``). Lengths are
    never read. O(M·n); AFS-P only runs it when jobs do not outnumber GPUs.
    """
    n = len(jobs)
    lvl = [-1] * n
    cnt = [0] * n
    g = [1.0] * n
    h = [INF] * n
    steps = [j.counts[0] if j.counts else 0 for j in jobs]
    m = total
    # The eligible jobs (a next count, its step fits in m), in scan order, kept across grants
    # rather than rebuilt from every job per grant: m only falls and only the winner's step
    # changes, so a job that left never returns and the list needs filtering only when some
    # step may exceed m (``top`` bounds the steps in it from above).
    elig = [i for i in range(n) if jobs[i].counts and steps[i] <= m]
    top = max((steps[i] for i in elig), default=0)
    rand = rng.random
    while m > 0 and elig:
        star = elig[0]
        for j in islice(elig, 1, None):
            if g[j] > h[star]:
                star = j
            elif g[star] > h[j]:
                pass
            elif rand() < 0.5:
                star = j
        job = jobs[star]
        level = lvl[star] + 1
        lvl[star] = level
        cnt[star] = job.counts[level]
        m -= steps[star]
        if level + 1 < len(job.counts):
            p, pn = job.rates[level], job.rates[level + 1]
            g[star] = (pn - p) / pn
            h[star] = (pn - p) / p
            steps[star] = step = job.counts[level + 1] - cnt[star]
            if step > top:
                top = step
        else:
            elig.remove(star)
        if top > m:
            elig = [i for i in elig if steps[i] <= m]
            top = max((steps[i] for i in elig), default=0)
    return cnt


def maxmin_shares(jobs: Sequence[AfsJob], total: int) -> list[int]:
    """Max-min fair counts, each capped at the top of its ladder (AFS-S's ``n <= M`` branch).

    Water-filling (:func:`~.water_fill.water_fill`, fewest GPUs first): first steps in scan
    order, then the next step always goes to the job holding the fewest GPUs whose step fits
    (ties: scan order). The ladder top is the job's peak-throughput count, the only throughput
    fact AFS-S may use.
    """
    filled = water_fill((j.counts for j in jobs), total)
    return [filled.get(i, 0) for i in range(len(jobs))]


# --------------------------------------------------------------------------- shares stages
class AfsL(Stateless):
    """AFS-L shares stage: Algorithm 1 with known remaining lengths, on ``view.capacity`` GPUs.

    Stateless between decisions apart from caches rebuilt from the view (the paper recomputes
    every share from scratch at each churn event; placement keeps jobs where they are): a
    ladder cache and the per-job columns (:class:`~.afs_columns.AfsColumns`), which the view's
    change set keeps up to date.
    """

    def __init__(self) -> None:
        self._ladders = LadderCache("stop")
        self.columns = AfsColumns(self._ladders)

    def items(self, view: ClusterView) -> list[AfsJob]:
        """The view's active jobs as :class:`AfsJob` in scan order (with remaining work)."""
        cap = view.capacity
        now = view.now
        out = []
        for job in scan_order(view.active()):
            counts, rates = self._ladders.ladder(job, cap)
            out.append(AfsJob(job.spec.id, job.remaining(now), counts, rates))
        return out

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        # The same computation as afs_l_shares(self.items(view)), on columns kept across
        # decisions: only the jobs the view's change set names are re-read, and no AfsJob is
        # built (items() is the readable version).
        return self.columns.shares(self._counts(view))

    def _counts(self, view: ClusterView) -> np.ndarray:
        """Algorithm 1's count per row of the columns, synced to ``view``."""
        cols = self.columns
        cols.sync(view)
        rem = cols.remaining(view.now)
        return afs_l_solve(rem, cols.ladders, cols.did, cols.ladder_arrays(), view.capacity)

    def delta(self, view: ClusterView, placement: PlacementStage) -> Delta | Decision:
        """The engine's fast path: the same counts, answered as the jobs whose count changed
        (:func:`~.afs_delta.counts_delta`; in full where a delta cannot stand for them)."""
        return counts_delta(view, self.columns, self._counts(view), placement, [])


class AfsP:
    """AFS-P shares stage (length-unaware), with processor-sharing counters.

    * ``n <= M`` (every job's first step fits at once): counters are ignored and shares come
      from :func:`afs_p_loop` — (3) both ways, seeded coin when neither way holds.
    * otherwise ("stage one"): one first step each, in increasing order of the jobs' counters
      (ties: submit time, id). A counter counts whole ``unit_time`` periods the job has held at
      least one GPU (wall time, from ``ActiveJob.held_time_at``; it also runs while ``n <= M``).
      With ``preemptive=False`` (the default, digest §7.2 item 9) a running job keeps its slot
      until it completes or finishes its current unit; only then it is evicted and competes
      again with its increased counter. ``preemptive=True`` re-ranks everyone at every decision.

    The stage asks to be woken at the next unit boundary of a running job (``next_wakeup``), so
    time slicing happens even without arrivals or completions. Counters seen at the previous
    decision are kept to detect that boundary. Randomness: ``random.Random`` seeded from
    ``(seed, view.now)``, so a decision is a pure function of the view and the policy state.
    """

    def __init__(
        self, unit_time: float = DEFAULT_UNIT_TIME_S, seed: int = 0, preemptive: bool = False
    ) -> None:
        if not unit_time > 0:
            raise ValueError(f"unit_time must be > 0, got {unit_time}")
        self.unit_time = float(unit_time)
        self.seed = seed
        self.preemptive = preemptive
        self._ladders = LadderCache("stop")
        self.columns = AfsColumns(self._ladders)
        """Per-job columns kept across decisions; each row's ``mark`` is the counter this
        stage saw for the job at its last decision (-1: none yet)."""
        self.time_slicing = False
        """Whether the last decision was in the jobs-outnumber-GPUs mode."""

    def snapshot(self) -> dict[str, Any]:
        """Counters seen at the last decision and the mode: what decides who keeps a slot."""
        return {"counters": self.columns.marks(), "time_slicing": self.time_slicing}

    def restore(self, state: dict[str, Any]) -> None:
        counters = {str(k): int(v) for k, v in state.get("counters", {}).items()}
        self.columns.restore_marks(counters)
        self.time_slicing = bool(state.get("time_slicing", False))

    def counter(self, job: ActiveJob, now: float) -> int:
        """Whole units ``job`` has held GPUs for (a 1e-9 unit tolerance absorbs float drift so a
        wakeup scheduled exactly at a boundary counts it)."""
        return math.floor(job.held_time_at(now) / self.unit_time + 1e-9)

    def counters(self) -> dict[str, int]:
        """Counters seen at the last decision (a copy)."""
        return self.columns.marks()

    def _share_loop(self, items: list[AfsJob], total: int, view: ClusterView) -> list[int]:
        rng = random.Random(f"afs-p:{self.seed}:{view.now!r}")
        return afs_p_loop(items, total, rng)

    def __call__(self, view: ClusterView, stats: list[SolverStats]) -> Shares:
        return self._counts(view)[1]

    def _counts(self, view: ClusterView) -> tuple[np.ndarray, Shares]:
        """The decision's count per row of the columns (synced to ``view``) and the same
        counts as the shares dict, in the order the stage hands them out."""
        cap = view.capacity
        # Per-job columns kept across decisions (as AFS-L); counters computed over the columns
        # (self.counter(job, now) vectorised: the same float operations). The AfsJob inputs of
        # the share loop are built only when it runs (n <= M).
        cols = self.columns
        cols.sync(view)
        held = cols.held_at(view.now)
        current = np.floor(held / self.unit_time + 1e-9).astype(np.int64)
        previous = cols.mark
        cols.mark = current
        cflat, _, doff, dlev = cols.ladder_arrays()
        runnable = np.flatnonzero(dlev[cols.did] > 0)
        first = cflat[doff[cols.did[runnable]]]
        need = int(first.sum())
        counts = np.zeros(len(cols.ids), np.int64)
        if need <= cap:
            self.time_slicing = False
            # remaining is never read by AFS-P: NaN makes any accidental use visible
            lads = cols.ladders
            items = [
                AfsJob(job_id, math.nan, *lads[d])
                for job_id, d in zip(
                    cols.ids[runnable].tolist(), cols.did[runnable].tolist(), strict=True
                )
            ]
            counts[runnable] = self._share_loop(items, cap, view)
            return counts, cols.shares(counts)  # scan order, as the items
        self.time_slicing = True

        # Rank: (counter, submit_time, id). The rows are in scan order, (submit_time, id), so
        # a stable sort by the counter alone gives exactly that order (ids are unique).
        order = np.argsort(current[runnable], kind="stable")
        ranked = runnable[order]
        steps = first[order]
        rows: list[int] = []
        given: list[int] = []
        free = cap
        if not self.preemptive:
            # Keepers: running jobs that have not crossed a unit boundary since last decision.
            keep = cols.busy[ranked] & (current[ranked] == previous[ranked])
            for k in np.flatnonzero(keep).tolist():
                step = int(steps[k])
                if step <= free:
                    rows.append(int(ranked[k]))
                    given.append(step)
                    free -= step
        if free > 0:
            taken = set(rows)
            for row, step in zip(ranked.tolist(), steps.tolist(), strict=True):
                if free <= 0:
                    break
                if row not in taken and step <= free:
                    rows.append(row)
                    given.append(step)
                    free -= step
        counts[rows] = given
        return counts, dict(zip(cols.ids[rows].tolist(), given, strict=True))

    def delta(self, view: ClusterView, placement: PlacementStage) -> Delta | Decision:
        """The engine's fast path: the jobs whose count changed (see :meth:`AfsL.delta`)."""
        counts, shares = self._counts(view)
        return counts_delta(view, self.columns, counts, placement, [], shares)

    def next_wakeup(self, view: ClusterView) -> float | None:
        """Next unit boundary of a job holding GPUs, while time slicing (else None)."""
        if not self.time_slicing:
            return None
        best = INF
        unit = self.unit_time
        now = view.now
        for job in view.running.values():
            if job.gpus <= 0:
                continue
            held = job.held_time_at(now)
            boundary = (self.counter(job, now) + 1) * unit
            best = min(best, now + max(boundary - held, 1e-9 * unit))
        return best if best < INF else None


class AfsS(AfsP):
    """AFS-S (App. D): AFS-P knowing only each job's peak-throughput GPU count.

    Without throughput values (3) cannot be evaluated, so while jobs do not outnumber GPUs the
    cluster is shared max-min fairly, each job capped at its peak count (the top of its ladder);
    when they do, AFS-P's counters time-slice it exactly as in AFS-P.
    """

    def _share_loop(self, items: list[AfsJob], total: int, view: ClusterView) -> list[int]:
        return maxmin_shares(items, total)


# --------------------------------------------------------------------------- registry
def _staged(
    name: str,
    shares: Callable[[ClusterView, list[SolverStats]], Shares],
    wakeup: Callable[[ClusterView], float | None] | None = None,
    memory: AfsP | None = None,
) -> StagedPolicy:
    return StagedPolicy(name, shares, best_fit_placement, wakeup, memory=memory)


class AfsPParams(Params):
    unit_time_s: float = Field(
        DEFAULT_UNIT_TIME_S,
        gt=0,
        le=MAX_TIME_S,
        description="processor-sharing unit (counter window), seconds",
    )
    preemptive: bool = Field(
        False,
        description="re-rank running jobs at every decision "
        "instead of letting them keep their slot until a unit ends",
    )


def _afs_p_like(name: str, cls: type[AfsP]) -> Callable[[AfsPParams, int], StagedPolicy]:
    def build(p: AfsPParams, seed: int) -> StagedPolicy:
        stage = cls(unit_time=p.unit_time_s, seed=seed, preemptive=p.preemptive)
        return _staged(name, stage, stage.next_wakeup, memory=stage)

    return build


POLICIES = [
    parameterless("afs-l", lambda: _staged("afs-l", AfsL())),
    PolicyDef("afs-p", _afs_p_like("afs-p", AfsP), AfsPParams),
    PolicyDef("afs-s", _afs_p_like("afs-s", AfsS), AfsPParams),
]
