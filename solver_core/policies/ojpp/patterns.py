"""Exact OJPP as a configuration ("pattern") model: why it proves what the count model cannot.

The count model of :mod:`.model` states the slowdown and balance rules with big-M rows whose
LP relaxation is weak when the bounds are loose (``theta_max`` 0.3-0.5, ``theta_balance``
0.4): CP-SAT finds the optimum of 40-worker instances early and then cannot raise its bound.
Here every device rule is settled *before* the solve instead:

* a **pattern** is a count vector ``{job: workers}`` one GPU may hold; all of them are
  enumerated depth-first and checked with :func:`.model.device_violation` (the exact float
  rules: compute, memory, collision Eq. (4), slowdown). Every device rule is monotone in
  added workers, so a branch stops at the first vector that breaks one. Workers of a job are
  identical and GPUs are identical, so a solution is a multiset of patterns: integer
  ``z[p]`` GPUs use pattern ``p``, ``sum_p n[i][p] z[p] = omega_i``, minimise ``sum z``.
  No device symmetry is left and no collision cut is ever needed;
* **balance** (16) is the one rule across GPUs. All of job ``i``'s workers on a pattern see
  the same slowdown ``s[i][p]``, and the spread is at most ``theta_balance`` iff every used
  ``s[i][p]`` lies in a window ``[lo, lo + theta_balance]`` whose ``lo`` is one of the values
  (the smallest used). A boolean ``u[i][w]`` picks the window (exactly one per job that has
  values farther apart than the bound) and ``sum_{p: s[i][p] not in w} n[i][p] z[p] <=
  omega_i (1 - u[i][w])`` keeps the workers inside it. The rows are integral (counts only),
  so CP-SAT needs no coefficient scaling either.

The LP of such a model is the classic Gilmore-Gomory bound, far tighter than the count
model's. Its size is the number of patterns: :func:`enumerate_patterns` gives up beyond
``limit`` (the caller then keeps the count model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.models.ojpp import OJPP_TOL, OjppInstance, counts_slowdown

from ...mip_model import MipModel, Var, lin_sum
from .model import device_violation

__all__ = [
    "PATTERN_LIMIT",
    "PatternModel",
    "build_pattern_model",
    "enumerate_patterns",
    "hint_patterns",
]

PATTERN_LIMIT = 20_000
"""Most patterns the model takes; beyond it the exact solver keeps the count model."""
CLEAR = 1e-7
"""Margin beyond a bound at which the running totals reject a vector without the exact
check (see :func:`enumerate_patterns`)."""


def enumerate_patterns(
    inst: OjppInstance, limit: int = PATTERN_LIMIT
) -> list[dict[int, int]] | None:
    """Every non-empty count vector one GPU may hold (None when more than ``limit``).

    Depth-first over the jobs in index order, adding workers of the current job one at a
    time and stopping at the first count that breaks a rule (monotone rules: no larger count
    of this job, with the same others, can pass). Jobs whose single worker cannot go beside
    a job already in the vector are skipped without a check.

    Speed: running totals carried down the recursion (compute, basic memory, largest peak,
    collision ``(P0, P1)``, additive slowdowns) settle a vector that breaks a rule, or meets
    every rule, by more than ``CLEAR``; only a vector within ``CLEAR`` of a bound (or any
    kept vector under a non-additive composition) goes through
    :func:`.model.device_violation`. The float error of these short sums is ~1e-15, far
    below ``CLEAR``, so the output is exactly the exact check's (a test compares them on
    every count vector)."""
    matrix = inst.matrix()
    jobs = inst.jobs
    additive = inst.composition == "additive"
    out: list[dict[int, int]] = []
    pair_ok = [
        [
            device_violation(inst, matrix, {i: 1, q: 1} if i != q else {i: 1}) is None
            for q in range(len(jobs))
        ]
        for i in range(len(jobs))
    ]
    bounds = (1 + OJPP_TOL, inst.tau_max + OJPP_TOL, inst.theta_max + OJPP_TOL)

    def verdict(i: int, total: list[float], slow: dict[int, float]) -> int:
        """Add one worker of job ``i`` to the running totals: 1 when a rule is broken by
        more than ``CLEAR`` (the totals are then half-updated: the caller drops them), -1
        when every rule holds with more than ``CLEAR`` to spare (additive only: the other
        compositions keep no running slowdown), 0 when the exact check must decide."""
        job = jobs[i]
        total[0] += job.alpha
        total[1] += job.gamma
        total[2] = max(total[2], job.delta)
        p0, p1 = total[3], total[4]
        total[3], total[4] = p0 * (1.0 - job.p), p1 * (1.0 - job.p) + p0 * job.p
        if additive:
            for v in slow:
                slow[v] += matrix[v][i]
            if i not in slow:
                slow[i] = math.fsum(matrix[i][q] * c for q, c in counts.items() if q != i)
        worst = max(
            total[0] - bounds[0],
            total[1] + total[2] - bounds[0],
            1.0 - total[3] - total[4] - bounds[1],
            max(slow.values()) - bounds[2] if additive else -1.0,
        )
        if worst > CLEAR:
            return 1
        return -1 if additive and worst < -CLEAR else 0

    counts: dict[int, int] = {}

    def grow(cands: list[int], total: list[float], slow: dict[int, float]) -> bool:
        """Extend ``counts`` by jobs of ``cands`` (later than every job in it, each
        compatible with all of them)."""
        for at, i in enumerate(cands):
            later: list[int] | None = None
            run, run_slow = list(total), dict(slow)
            c = 0
            while c < jobs[i].workers:
                seen = verdict(i, run, run_slow)
                counts[i] = c + 1
                if seen > 0 or (seen == 0 and device_violation(inst, matrix, counts)):
                    break
                c += 1
                out.append(dict(counts))
                if later is None:
                    later = [q for q in cands[at + 1 :] if pair_ok[i][q]]
                if len(out) > limit or not grow(later, list(run), dict(run_slow)):
                    del counts[i]
                    return False
            counts.pop(i, None)
        return True

    everyone = [i for i in range(len(jobs)) if pair_ok[i][i]]
    return out if grow(everyone, [0.0, 0.0, 0.0, 1.0, 0.0], {}) else None


@dataclass
class PatternModel:
    """The model, its pattern variables and what a hint or a decode needs."""

    model: MipModel
    patterns: list[dict[int, int]]
    z: list[Var]
    windows: dict[int, list[tuple[float, Var]]]


def _windows(values: list[float], spread: float) -> list[float]:
    """Window starts worth a variable: each distinct value whose window does not lie inside
    the window of a smaller start that covers the same values (a window whose covered set is
    a subset of another's is dominated and dropped)."""
    distinct = sorted(set(values))
    starts: list[float] = []
    covered: list[frozenset[float]] = []
    for lo in distinct:
        cover = frozenset(v for v in distinct if lo - 1e-15 <= v <= lo + spread)
        if any(cover <= c for c in covered):
            continue
        starts.append(lo)
        covered.append(cover)
    return starts


def build_pattern_model(
    inst: OjppInstance, patterns: list[dict[int, int]], upper: int, lower: int
) -> PatternModel:
    """The configuration model over ``patterns`` with at most ``upper`` and at least
    ``lower`` GPUs (see the module docstring)."""
    jobs = inst.jobs
    matrix = inst.matrix()
    m = MipModel("ojpp-patterns")
    z = []
    for t, pat in enumerate(patterns):
        most = min(jobs[i].workers // c for i, c in pat.items())
        z.append(m.int_var(0, min(most, upper), f"z_{t}"))
    by_job: list[list[int]] = [[] for _ in jobs]
    for t, pat in enumerate(patterns):
        for i in pat:
            by_job[i].append(t)
    for i, job in enumerate(jobs):
        m.add(lin_sum(patterns[t][i] * z[t] for t in by_job[i]) == job.workers, f"all_{i}")
    spread = inst.theta_balance + OJPP_TOL
    windows: dict[int, list[tuple[float, Var]]] = {}
    for i, job in enumerate(jobs):
        if job.workers < 2:
            continue
        slow = {t: counts_slowdown(i, patterns[t], matrix, inst.composition) for t in by_job[i]}
        starts = _windows(list(slow.values()), spread)
        if len(starts) <= 1:
            continue  # every value within one window: balance cannot bind
        picks = []
        for w, lo in enumerate(starts):
            u = m.bool_var(f"u_{i}_{w}")
            outside = [t for t in by_job[i] if not lo - 1e-15 <= slow[t] <= lo + spread]
            if outside:
                m.add(
                    lin_sum(patterns[t][i] * z[t] for t in outside) <= job.workers * (1 - u),
                    f"window_{i}_{w}",
                )
            picks.append((lo, u))
        m.add(lin_sum(u for _, u in picks) == 1, f"one_window_{i}")
        windows[i] = picks
    total = lin_sum(z)
    m.add(total <= upper, "upper")
    m.add(total >= lower, "lower")
    m.minimize(total)
    return PatternModel(m, patterns, z, windows)


def hint_patterns(pm: PatternModel, inst: OjppInstance, counts: list[dict[int, int]]) -> bool:
    """Hint a known solution (count vector per GPU); False when one of its GPUs is not an
    enumerated pattern (then no hint is given)."""
    index = {tuple(sorted(p.items())): t for t, p in enumerate(pm.patterns)}
    uses = [0] * len(pm.patterns)
    for c in counts:
        t = index.get(tuple(sorted(c.items())))
        if t is None:
            return False
        uses[t] += 1
    for t, v in enumerate(pm.z):
        pm.model.hint(v, uses[t])
    matrix = inst.matrix()
    spread = inst.theta_balance + OJPP_TOL
    for i, picks in pm.windows.items():
        used = [counts_slowdown(i, c, matrix, inst.composition) for c in counts if i in c]
        chosen = next(
            (
                w
                for w, (lo, _) in enumerate(picks)
                if all(lo - 1e-15 <= s <= lo + spread for s in used)
            ),
            None,
        )
        if chosen is None:
            return False
        for w, (_, u) in enumerate(picks):
            pm.model.hint(u, 1 if w == chosen else 0)
    return True
