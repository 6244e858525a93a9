"""Multiple-choice knapsack (MCKP): Aryl's phase 2 (Alg. 2 ``AllocateElastic`` / ``MaxValueDP``).

Each elastic job is a *group*; each item of a group is one possible flexible allocation
("k extra workers") with a weight (GPUs) and a value (running-time reduction). At most one item
per group may be taken, and the taken weights must fit the capacity left after phase 1.

Three solvers, all over the same :class:`MckpGroup` input so they can be compared on one
instance (tests, ``tests/bench/aryl.py``):

* :func:`solve_dp` -- the paper's dynamic programme, exact and pseudo-polynomial,
  O(C x total items). Vectorised with numpy over the capacity axis, because a pure-Python DP at
  2,048 GPUs x 1,000 jobs costs seconds and the policy runs it at every scheduling event.
* :func:`solve_exact` -- the same problem as a 0/1 integer programme through
  :mod:`gpuplan.solver_core.backends` (CP-SAT by default, any backend works), under a time limit,
  falling back to the greedy.
* :func:`solve_greedy` -- incremental-efficiency greedy (best value gained per extra GPU first),
  the AFS-like baseline; not optimal, but O(items log groups).

Ties are broken towards *less* weight (the empty item first, then lower item index), so the DP
never hands out GPUs that buy nothing and results are deterministic.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuplan.models import SolverStats

from ...backends import MipModel, Solution, lin_sum, solve_with_fallback
from ...limits import SolveLimits, resolve_limits

__all__ = [
    "MckpGroup",
    "MckpResult",
    "check_groups",
    "solve_dp",
    "solve_exact",
    "solve_greedy",
    "solve_mckp",
]

MCKP_WORK_S = 1.0
"""Deterministic budget of an exact MCKP solve made for a policy (CP-SAT deterministic s)."""


@dataclass(frozen=True, slots=True)
class MckpGroup:
    """One group: ``items[i] = (weight, value)``; taking nothing (0, 0) is always allowed."""

    key: str
    items: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        for weight, value in self.items:
            if isinstance(weight, bool) or weight < 1 or int(weight) != weight:
                raise ValueError(f"group {self.key!r}: item weight {weight} must be an int >= 1")
            if not math.isfinite(value):
                raise ValueError(f"group {self.key!r}: item value {value} is not finite")
        # An integral float weight (2.0, from JSON) would index numpy arrays in the DP and
        # crash it; store it as the int it equals.
        if any(type(w) is not int for w, _ in self.items):
            object.__setattr__(self, "items", tuple((int(w), v) for w, v in self.items))


def check_groups(groups: Sequence[MckpGroup]) -> None:
    """Reject repeated group keys: answers are keyed by group, so two groups with one key would
    collapse into one entry and every solver would report an over-capacity choice."""
    seen: set[str] = set()
    for g in groups:
        if g.key in seen:
            raise ValueError(f"duplicate MCKP group key {g.key!r}")
        seen.add(g.key)


@dataclass(slots=True)
class MckpResult:
    """``choice[key]`` = index of the taken item, or -1 for none."""

    choice: dict[str, int]
    value: float
    weight: int
    stats: SolverStats | None = None
    extra: dict[str, float] = field(default_factory=dict)

    def weight_of(self, groups: Sequence[MckpGroup], key: str) -> int:
        """Weight taken in group ``key`` (0 when nothing)."""
        idx = self.choice.get(key, -1)
        if idx < 0:
            return 0
        return next(g for g in groups if g.key == key).items[idx][0]


def _evaluate(groups: Sequence[MckpGroup], choice: dict[str, int]) -> tuple[float, int]:
    value = 0.0
    weight = 0
    for g in groups:
        i = choice.get(g.key, -1)
        if i >= 0:
            w, v = g.items[i]
            value += v
            weight += w
    return value, weight


def _stats(stage: str, backend: str, status: str, value: float, t0: float) -> SolverStats:
    return SolverStats(
        stage=stage,
        backend=backend,
        status=status,  # type: ignore[arg-type]
        objective=value,
        wall_ms=(time.perf_counter() - t0) * 1000.0,
    )


# --------------------------------------------------------------------------------------------
# Dynamic programming (MaxValueDP)
# --------------------------------------------------------------------------------------------
def solve_dp(groups: Sequence[MckpGroup], capacity: int, *, stage: str = "mckp") -> MckpResult:
    """Exact MCKP optimum by dynamic programming over the capacity.

    ``dp[c]`` = best value with total weight <= c, so it is non-decreasing in c and the
    back-track starts at the full capacity. Items with non-positive value are never worth taking
    and are skipped. When every group's heaviest item fits together, the answer is simply each
    group's most valuable item (common when the cluster is lightly loaded), and the DP is skipped.
    """
    t0 = time.perf_counter()
    check_groups(groups)
    capacity = max(0, int(capacity))
    useful = [
        (g, [(i, w, v) for i, (w, v) in enumerate(g.items) if v > 0 and w <= capacity])
        for g in groups
    ]
    useful = [(g, items) for g, items in useful if items]
    choice: dict[str, int] = {g.key: -1 for g in groups}
    if not useful:
        return MckpResult(choice, 0.0, 0, _stats(stage, "dp", "optimal", 0.0, t0))

    if sum(max(w for _, w, _ in items) for _, items in useful) <= capacity:
        for g, items in useful:
            best = max(items, key=lambda t: (t[2], -t[1], -t[0]))
            choice[g.key] = best[0]
        value, weight = _evaluate(groups, choice)
        return MckpResult(choice, value, weight, _stats(stage, "dp", "optimal", value, t0))

    cap = min(capacity, sum(max(w for _, w, _ in items) for _, items in useful))
    dp = np.zeros(cap + 1)
    width = max(len(items) for _, items in useful)
    dtype = np.int8 if width < 127 else np.int32
    picks = np.zeros((len(useful), cap + 1), dtype=dtype)
    cand = np.empty(cap + 1)
    better = np.empty(cap + 1, dtype=bool)
    for gi, (_, items) in enumerate(useful):
        new = dp.copy()
        row = picks[gi]
        for slot, (_, w, v) in enumerate(items, start=1):
            n = cap + 1 - w
            c, b = cand[:n], better[:n]
            np.add(dp[:n], v, out=c)
            seg = new[w:]
            np.greater(c, seg, out=b)  # strict: exact ties keep the lighter / earlier choice
            np.copyto(seg, c, where=b)
            np.copyto(row[w:], slot, where=b)
        dp = new
    c = cap
    for gi in range(len(useful) - 1, -1, -1):
        slot = int(picks[gi, c])
        if slot:
            g, items = useful[gi]
            idx, w, _ = items[slot - 1]
            choice[g.key] = idx
            c -= w
    value, weight = _evaluate(groups, choice)
    return MckpResult(choice, value, weight, _stats(stage, "dp", "optimal", value, t0))


# --------------------------------------------------------------------------------------------
# Greedy (incremental efficiency)
# --------------------------------------------------------------------------------------------
def _best_upgrade(
    items: tuple[tuple[int, float], ...], cur: int, room: int
) -> tuple[float, int] | None:
    """Most efficient move from item ``cur`` (-1 = none) to a heavier, more valuable item that
    fits in ``room`` extra weight: (value gained per extra weight, target index)."""
    w0, v0 = (0, 0.0) if cur < 0 else items[cur]
    best: tuple[float, int] | None = None
    for i, (w, v) in enumerate(items):
        dw = w - w0
        if dw <= 0 or dw > room or v <= v0:
            continue
        eff = (v - v0) / dw
        if best is None or eff > best[0] + 1e-12:
            best = (eff, i)
    return best


def solve_greedy(groups: Sequence[MckpGroup], capacity: int, *, stage: str = "mckp") -> MckpResult:
    """Give capacity to the best value-per-GPU upgrade first (AFS-like marginal greedy).

    Each step moves one group from its current item to the heavier item with the highest
    (value gained) / (weight added) that still fits. Capacity only shrinks, so a group's stored
    efficiency is an upper bound and is simply re-evaluated when popped (lazy heap).
    """
    t0 = time.perf_counter()
    check_groups(groups)
    room = max(0, int(capacity))
    current = {g.key: -1 for g in groups}
    heap: list[tuple[float, int, int]] = []
    for gi, g in enumerate(groups):
        up = _best_upgrade(g.items, -1, room)
        if up is not None:
            heap.append((-up[0], gi, up[1]))
    heapq.heapify(heap)
    while heap and room > 0:
        neg_eff, gi, target = heapq.heappop(heap)
        g = groups[gi]
        cur = current[g.key]
        up = _best_upgrade(g.items, cur, room)
        if up is None:
            continue
        if up[1] != target or abs(-neg_eff - up[0]) > 1e-12:
            heapq.heappush(heap, (-up[0], gi, up[1]))  # stale: re-queue with the true value
            continue
        w0 = 0 if cur < 0 else g.items[cur][0]
        room -= g.items[target][0] - w0
        current[g.key] = target
        nxt = _best_upgrade(g.items, target, room)
        if nxt is not None:
            heapq.heappush(heap, (-nxt[0], gi, nxt[1]))
    value, weight = _evaluate(groups, current)
    return MckpResult(current, value, weight, _stats(stage, "greedy", "heuristic", value, t0))


# --------------------------------------------------------------------------------------------
# Integer programme (CP-SAT / MIP backends)
# --------------------------------------------------------------------------------------------
def _integral(values: Sequence[float]) -> bool:
    return all(float(v).is_integer() and abs(v) < 2**40 for v in values)


def _chain(group: MckpGroup, capacity: int) -> list[int] | None:
    """Item indices of ``group`` as a concave chain, or None if it is not one.

    Dominated items (heavier but not more valuable) are dropped -- an optimum never needs them.
    The rest, by weight, must have non-increasing value per extra GPU ("k extra workers" of
    Aryl's linear-scaling values are: each extra worker saves less than the one before).
    """
    order = sorted((w, -v, i) for i, (w, v) in enumerate(group.items) if w <= capacity and v > 0)
    chain: list[int] = []
    best = 0.0
    for _, neg_v, i in order:
        if -neg_v > best + 1e-12:
            chain.append(i)
            best = -neg_v
    prev_w, prev_v, prev_eff = 0, 0.0, math.inf
    for i in chain:
        w, v = group.items[i]
        eff = (v - prev_v) / (w - prev_w)
        if eff > prev_eff * (1 + 1e-12) + 1e-12:
            return None
        prev_w, prev_v, prev_eff = w, v, eff
    return chain


def _reduce(
    groups: Sequence[MckpGroup], chains: list[list[int]], capacity: int, lower: float
) -> tuple[dict[tuple[int, int], int], float]:
    """LP bound + reduced-cost fixing on the step formulation.

    Step k of group g = moving from chain item k-1 to item k (extra weight d, extra value e).
    With concave chains the LP relaxation is solved greedily by e/d (Dantzig); lambda = the
    efficiency of the split step. A step whose reduced cost ``e - lambda d`` exceeds
    ``UB - lower`` in absolute value takes its LP value in every solution better than
    ``lower``. Returns {(g, k): fixed 0/1} and UB.
    """
    steps = []
    for gi, chain in enumerate(chains):
        pw, pv = 0, 0.0
        for k, i in enumerate(chain):
            w, v = groups[gi].items[i]
            steps.append(((v - pv) / (w - pw), gi, k, w - pw, v - pv))
            pw, pv = w, v
    steps.sort(key=lambda t: (-t[0], t[1], t[2]))
    room = capacity
    upper = 0.0
    price = 0.0
    for eff, _, _, d, e in steps:
        if d <= room:
            room -= d
            upper += e
        else:
            upper += e * room / d
            price = eff
            break
    gap = max(0.0, upper - lower) + 1e-9 * max(1.0, abs(upper))
    fixed: dict[tuple[int, int], int] = {}
    for _, gi, k, d, e in steps:
        r = e - price * d
        if r > gap:
            fixed[gi, k] = 1
        elif r < -gap:
            fixed[gi, k] = 0
    # precedence: a fixed step forces the earlier (1) or later (0) steps of its chain
    for gi, chain in enumerate(chains):
        ones = [k for k in range(len(chain)) if fixed.get((gi, k)) == 1]
        zeros = [k for k in range(len(chain)) if fixed.get((gi, k)) == 0]
        for k in range(max(ones) + 1 if ones else 0):
            fixed[gi, k] = 1
        for k in range(min(zeros) if zeros else len(chain), len(chain)):
            fixed[gi, k] = 0
    return fixed, upper


def solve_exact(  # noqa: C901 (a named exception to the complexity gate)
    groups: Sequence[MckpGroup],
    capacity: int,
    *,
    backend: str = "cp-sat",
    time_limit_s: float | None = None,
    limits: SolveLimits | None = None,
    stage: str = "mckp",
    value_resolution: float = 1e-9,
    reduce: bool = True,
) -> MckpResult:
    """MCKP as a 0/1 programme, solved by ``backend`` (CP-SAT by default) under a time limit.

    When every group is a concave chain (always so for Aryl's linear-scaling values) the model
    uses *steps* -- binary ``y_gk`` for "the k-th increment of group g", ``y_gk <= y_g,k-1`` --
    and, with ``reduce``, first fixes every step whose LP reduced cost proves its value
    (:func:`_reduce`, bounds from the Dantzig LP and the greedy), so the solver only sees the
    few "core" steps near the LP split; the answer is still the exact optimum. Otherwise the
    plain choice model ``max sum v x, sum_i x_gi <= 1, sum w x <= C``.

    CP-SAT is exact only on integers: non-integral values are scaled so the largest becomes
    ``1 / value_resolution`` and rounded (errors far below any real value difference); the
    reported value is recomputed from the original values. Falls back to :func:`solve_greedy`
    on timeout or failure (``SolverStats.fell_back``).
    """
    t0 = time.perf_counter()
    capacity = max(0, int(capacity))
    greedy = solve_greedy(groups, capacity)  # also rejects duplicate group keys
    chains = [_chain(g, capacity) for g in groups]
    nested = all(c is not None for c in chains)
    fixed: dict[tuple[int, int], int] = {}
    upper = None
    if nested and reduce:
        fixed, upper = _reduce(groups, chains, capacity, greedy.value)  # type: ignore[arg-type]

    # variables: steps (nested) or items (plain); coefficients (weight, value)
    cols: dict[tuple[int, int], tuple[int, float]] = {}
    const_w = 0
    const_v = 0.0
    if nested:
        for gi, chain in enumerate(chains):
            pw, pv = 0, 0.0
            for k, i in enumerate(chain):  # type: ignore[arg-type]
                w, v = groups[gi].items[i]
                d, e = w - pw, v - pv
                pw, pv = w, v
                f = fixed.get((gi, k))
                if f == 1:
                    const_w += d
                    const_v += e
                elif f is None:
                    cols[gi, k] = (d, e)
    else:
        for gi, g in enumerate(groups):
            for i, (w, v) in enumerate(g.items):
                if v > 0 and w <= capacity:
                    cols[gi, i] = (w, v)
    values = [e for _, e in cols.values()]
    if _integral(values):
        scale = 1.0
    else:
        top = max((abs(v) for v in values), default=1.0) or 1.0
        scale = 1.0 / (top * value_resolution)

    def choice_of(taken: Mapping[tuple[int, int], int]) -> dict[str, int]:
        choice = {g.key: -1 for g in groups}
        if nested:
            for gi, chain in enumerate(chains):
                k = sum(1 for kk in range(len(chain)) if taken.get((gi, kk), 0))  # type: ignore[arg-type]
                if k:
                    choice[groups[gi].key] = chain[k - 1]  # type: ignore[index]
        else:
            for (gi, i), t in taken.items():
                if t:
                    choice[groups[gi].key] = i
        return choice

    xs: dict[tuple[int, int], object] = {}
    hint = {}
    for gi, g in enumerate(groups):
        idx = greedy.choice.get(g.key, -1)
        if nested:
            chain = chains[gi]
            n = chain.index(idx) + 1 if idx in chain else 0  # type: ignore[union-attr]
            for k in range(len(chain)):  # type: ignore[arg-type]
                hint[gi, k] = 1 if k < n else 0
        elif idx >= 0:
            hint[gi, idx] = 1

    def build() -> MipModel:
        m = MipModel(stage)
        for key in cols:
            xs[key] = m.bool_var(f"x_{key[0]}_{key[1]}")
            m.hint(xs[key], hint.get(key, 0))  # type: ignore[arg-type]
        if nested:
            for (gi, k), x in xs.items():
                if (gi, k - 1) in xs:
                    m.add(x <= xs[gi, k - 1], f"order_{gi}_{k}")  # type: ignore[operator]
        else:
            rows: dict[int, list[object]] = {}
            for (gi, _), x in xs.items():
                rows.setdefault(gi, []).append(x)
            for gi, row in rows.items():
                m.add(lin_sum(row) <= 1, f"one_{gi}")  # type: ignore[arg-type]
        m.add(
            lin_sum(w * xs[k] for k, (w, _) in cols.items())  # type: ignore[operator]
            <= capacity - const_w,
            "capacity",
        )
        m.maximize(lin_sum(round(e * scale) * xs[k] for k, (_, e) in cols.items()))  # type: ignore[operator]
        return m

    def decode(sol: Solution) -> dict[str, int]:
        taken = {k: 1 for k, f in fixed.items() if f == 1}
        taken.update({k: int(sol.value(x)) for k, x in xs.items()})  # type: ignore[arg-type]
        return choice_of(taken)

    choice, stats = solve_with_fallback(
        build,
        lambda: dict(greedy.choice),
        decode,
        backend,
        limits=resolve_limits(time_limit_s, limits, MCKP_WORK_S),
        stage=stage,
    )
    value, weight = _evaluate(groups, choice)
    if value < greedy.value - 1e-9 and not stats.fell_back:
        # the fixings only admit solutions better than the greedy; none exists, so it is optimal
        choice, (value, weight) = dict(greedy.choice), (greedy.value, greedy.weight)
    note = f"{len(cols)} free {'steps' if nested else 'items'}" + (
        f", {len(fixed)} fixed by LP reduced costs (LP bound {upper:.6g})"
        if upper is not None
        else ""
    )
    stats = stats.model_copy(
        update={
            "objective": value,
            "bound": (value if stats.status == "optimal" else None),
            "wall_ms": (time.perf_counter() - t0) * 1000.0,
            "message": "; ".join(x for x in (stats.message, note) if x),
        }
    )
    return MckpResult(
        choice,
        value,
        weight,
        stats,
        {"scale": scale, "free": float(len(cols)), "fixed": float(len(fixed))},
    )


def solve_mckp(
    groups: Sequence[MckpGroup], capacity: int, method: str = "dp", **kw: object
) -> MckpResult:
    """Dispatch by name: ``dp``, ``greedy``, or an exact backend (``cp-sat``, ``pulp-cbc``, ...)."""
    if method == "dp":
        return solve_dp(groups, capacity)
    if method == "greedy":
        return solve_greedy(groups, capacity)
    return solve_exact(groups, capacity, backend=method, **kw)  # type: ignore[arg-type]
