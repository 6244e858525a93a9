"""OJPAP (paper 002 §3.5, Alg. 4): move cheap workers off persistently over-interfered GPUs.

Runtime interference drifts from the plan (jobs arrive and leave, the matrix was predicted).
Two pure steps, over a plan given as worker ids per GPU (the ``gpuplan solve`` solution shape):

* :func:`observe` folds one round of observed per-GPU interference into an EWMA, Eq. (18),
  ``e_t = a e_{t-1} + (1 - a) theta_t`` (a new GPU starts at its first observation), and counts
  for each GPU how many consecutive rounds its EWMA stayed above ``theta_max``. The trigger
  (:attr:`OnlineState.triggered`) fires when some GPU stayed above for ``hold`` rounds (default
  a = 0.7 as digest §7.1 #10 suggests, hold = 3; the paper fixes neither): a one-round spike
  moves the EWMA by ``(1 - a)`` of its size and decays by ``a`` per round, so it stays above
  only briefly, while a persistent rise keeps it there.
* :func:`adjust` is the corrected Alg. 4 of digest §2.10: the top half of the active GPUs by
  EWMA form the priority queue, less those whose EWMA is within ``theta_max`` (they need no
  relief, and moving their workers would only spend budget: our choice); from each, the worker
  of least migration cost (ties: the most slowed-down, then the lowest id) moves to the GPU
  where its arrival gives the lowest device slowdown among those meeting every rule, provided
  the move strictly lowers the worst slowdown of the two GPUs involved and the cumulative cost
  stays within ``budget`` (Eq. (19) read as a sum over one adjustment). At most one migration
  per priority GPU.

Rules checked for a move, with the instance's (current, observed-consistent) matrix: compute and
memory (Eq. 1, 3), collision (Eq. 5) and slowdown (Eq. 7) on the target, and balance (Eq. 8) for
every job touching either GPU -- not worse than ``theta_balance`` or than its spread before the
move (the plan being repaired may already break it). ``allow_new`` lets a move open an empty GPU
when no active one qualifies (OJPAP minimises interference, but GPUs are what OJPP saves).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuplan.models.ojpp import OJPP_TOL, OjppInstance, collision_probability, counts_slowdown

__all__ = ["GpuEwma", "Migration", "OnlineState", "adjust", "device_slowdowns", "observe"]


@dataclass(frozen=True, slots=True)
class OnlineState:
    """EWMA per GPU index and how many consecutive rounds each stayed above the bound."""

    ewma: tuple[float, ...] = ()
    above: tuple[int, ...] = ()
    hold: int = 3
    triggered: bool = False


def observe(
    state: OnlineState,
    observed: Sequence[float],
    theta_max: float,
    a: float = 0.7,
    margin: float = 0.0,
) -> OnlineState:
    """Fold one round of observed per-GPU interference into the state (see module doc);
    a GPU counts as above when its EWMA exceeds ``theta_max + margin`` (a margin absorbs
    measurement noise around a plan that sits exactly at the bound)."""
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"EWMA coefficient a = {a} is not in [0, 1]")
    ewma, above = [], []
    for k, theta in enumerate(observed):
        e = a * state.ewma[k] + (1.0 - a) * theta if k < len(state.ewma) else float(theta)
        ewma.append(e)
        prev = state.above[k] if k < len(state.above) else 0
        above.append(prev + 1 if e > theta_max + margin + OJPP_TOL else 0)
    return OnlineState(tuple(ewma), tuple(above), state.hold, any(n >= state.hold for n in above))


@dataclass(slots=True)
class GpuEwma:
    """:func:`observe` keyed by GPU name instead of position, for a monitor inside a
    simulation loop, where GPUs come and go between rounds: a GPU missing from a round's
    observations (no shared workers left) is forgotten. Unlike :func:`observe`, a GPU starts
    from e_0 = 0, not from its first observation: in a running cluster a GPU's first round is
    the one its workers started in, the start-up spike of the paper's t_2, which must not count
    in full. ``snapshot``/``restore`` carry it across a controller restart as JSON."""

    a: float = 0.7
    hold: int = 3
    ewma: dict[tuple[str, int], float] = field(default_factory=dict)
    above: dict[tuple[str, int], int] = field(default_factory=dict)

    def observe(self, observed: Mapping[tuple[str, int], float], threshold: float) -> bool:
        """Fold one round in (Eq. 18); True when some GPU has now stayed above ``threshold``
        for ``hold`` rounds in a row."""
        ewma: dict[tuple[str, int], float] = {}
        above: dict[tuple[str, int], int] = {}
        for key in sorted(observed):
            theta = float(observed[key])
            e = self.a * self.ewma.get(key, 0.0) + (1.0 - self.a) * theta
            ewma[key] = e
            above[key] = self.above.get(key, 0) + 1 if e > threshold + OJPP_TOL else 0
        self.ewma, self.above = ewma, above
        return any(n >= self.hold for n in above.values())

    def forget(self, keys: Sequence[tuple[str, int]]) -> None:
        """Restart GPUs whose workers just changed (an adjustment): their history no longer
        describes them, and a fresh hold must pass before they are adjusted again."""
        for key in keys:
            self.ewma.pop(key, None)
            self.above.pop(key, None)

    def snapshot(self) -> list[list[object]]:
        return [[k[0], k[1], self.ewma[k], self.above.get(k, 0)] for k in sorted(self.ewma)]

    def restore(self, rows: Sequence[Sequence[object]]) -> None:
        self.ewma = {(str(r[0]), int(r[1])): float(r[2]) for r in rows}  # type: ignore[arg-type]
        self.above = {(str(r[0]), int(r[1])): int(r[3]) for r in rows}  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True)
class Migration:
    worker: str
    source: int
    target: int
    cost: float


@dataclass(slots=True)
class _Plan:
    inst: OjppInstance
    gpus: list[list[str]]
    index: dict[str, int] = field(default_factory=dict)
    matrix: list[list[float]] = field(default_factory=list)
    _by_job: dict[int, list[tuple[int, float]]] | None = None

    def __post_init__(self) -> None:
        self.index = {job.id: i for i, job in enumerate(self.inst.jobs)}
        self.matrix = self.inst.matrix()

    def job(self, worker: str) -> int:
        return self.index[worker.rpartition("#")[0]]

    def slowdowns(self, gpu: Sequence[str]) -> dict[str, float]:
        counts = Counter(self.job(w) for w in gpu)
        per_job = {
            i: counts_slowdown(i, counts, self.matrix, self.inst.composition) for i in counts
        }
        return {w: per_job[self.job(w)] for w in gpu}

    def theta(self, gpu: Sequence[str]) -> float:
        return max(self.slowdowns(gpu).values(), default=0.0)

    def fits(self, gpu: Sequence[str]) -> bool:
        """Compute, memory, collision and slowdown rules, cheapest first (most candidate
        targets of a full cluster fail on compute or memory)."""
        jobs = [self.inst.jobs[self.job(w)] for w in gpu]
        if sum(j.alpha for j in jobs) > 1 + OJPP_TOL:
            return False
        if sum(j.gamma for j in jobs) + max((j.delta for j in jobs), default=0.0) > 1 + OJPP_TOL:
            return False
        if collision_probability(j.p for j in jobs) > self.inst.tau_max + OJPP_TOL:
            return False
        return self.theta(gpu) <= self.inst.theta_max + OJPP_TOL

    def by_job(self) -> dict[int, list[tuple[int, float]]]:
        """job -> (GPU index, slowdown) of each of its workers in the current plan; cached
        until :meth:`moved` (a candidate move then costs O(its jobs' workers), not a pass
        over every GPU)."""
        if self._by_job is None:
            self._by_job = {}
            for b, gpu in enumerate(self.gpus):
                for w, s in self.slowdowns(gpu).items():
                    self._by_job.setdefault(self.job(w), []).append((b, s))
        return self._by_job

    def moved(self) -> None:
        self._by_job = None

    def spreads(
        self, jobs: set[int], replaced: Mapping[int, Sequence[str]] | None = None
    ) -> dict[int, float]:
        """Largest minus smallest worker slowdown of each of ``jobs``, in the plan with the
        GPUs of ``replaced`` (index -> workers; an index past the end is a new GPU) swapped
        in."""
        replaced = replaced or {}
        values: dict[int, list[float]] = {
            i: [s for b, s in self.by_job().get(i, ()) if b not in replaced] for i in jobs
        }
        for gpu in replaced.values():
            for w, s in self.slowdowns(gpu).items():
                if self.job(w) in values:
                    values[self.job(w)].append(s)
        return {i: (max(v) - min(v)) if v else 0.0 for i, v in values.items()}


def device_slowdowns(inst: OjppInstance, gpus: Sequence[Sequence[str]]) -> list[float]:
    """theta_k, Eq. (6), of every GPU of a plan under the instance's matrix."""
    plan = _Plan(inst, [list(g) for g in gpus])
    return [plan.theta(g) for g in plan.gpus]


def _available(plan: _Plan, gpu: Sequence[str]) -> float:
    """Scalar free room of a GPU (digest §2.10: min of compute and memory headroom)."""
    jobs = [plan.inst.jobs[plan.job(w)] for w in gpu]
    compute = sum(j.alpha for j in jobs)
    memory = sum(j.gamma for j in jobs) + max((j.delta for j in jobs), default=0.0)
    return min(1.0 - compute, 1.0 - memory)


def _best_target(
    plan: _Plan,
    inst: OjppInstance,
    k: int,
    w: str,
    new_src: list[str],
    before_src: float,
    targets: Sequence[int],
    distinct: bool = False,
) -> tuple[float, int] | None:
    """(slowdown after, GPU) of the best legal target for worker ``w`` leaving GPU ``k``
    (index ``len(plan.gpus)`` stands for a new GPU), or None. ``distinct``: never a GPU that
    already holds a worker of the same job (the engine's one-share-per-GPU allocations)."""
    src = plan.gpus[k]
    job = plan.job(w)
    best: tuple[float, int] | None = None
    for b in targets:
        dst = plan.gpus[b] if b < len(plan.gpus) else []
        if distinct and any(plan.job(x) == job for x in dst):
            continue
        new_dst = [*dst, w]
        if not plan.fits(new_dst):
            continue
        theta_dst = plan.theta(new_dst)
        if max(theta_dst, plan.theta(new_src)) >= max(before_src, plan.theta(dst)) - OJPP_TOL:
            continue  # strict improvement of the pair's worst slowdown (digest §2.10)
        touched = {plan.job(x) for x in [*src, *dst]}
        before = plan.spreads(touched)
        after = plan.spreads(touched, {k: new_src, b: new_dst})
        if any(after[i] > max(inst.theta_balance, before[i]) + OJPP_TOL for i in touched):
            continue
        if best is None or theta_dst < best[0] - OJPP_TOL:  # ties: resource-queue order
            best = (theta_dst, b)
    return best


def adjust(
    inst: OjppInstance,
    gpus: Sequence[Sequence[str]],
    ewma: Sequence[float],
    cost: Mapping[str, float],
    budget: float,
    allow_new: bool = False,
    distinct: bool = False,
    margin: float = 0.0,
    max_new: int | None = None,
) -> tuple[list[list[str]], list[Migration]]:
    """Alg. 4: the adjusted plan (same GPU indices; an opened GPU is appended) and the
    migrations made, in order. ``cost[job id]`` is one worker's migration cost c_i (``inf``:
    the job must not move). ``distinct``: one worker per job per GPU (see
    :func:`_best_target`); ``margin``: a GPU needs relief above ``theta_max + margin``, the
    trigger's threshold (:func:`observe`); ``max_new``: at most that many GPUs opened (None:
    no limit)."""
    plan = _Plan(inst, [list(g) for g in gpus])
    active = [k for k, g in enumerate(plan.gpus) if g]
    active.sort(key=lambda k: (-(ewma[k] if k < len(ewma) else 0.0), k))
    queue = [
        k
        for k in active[: (len(active) + 1) // 2]
        if k < len(ewma) and ewma[k] > inst.theta_max + margin + OJPP_TOL
    ]
    spent = 0.0
    moves: list[Migration] = []
    for k in queue:
        src = plan.gpus[k]
        if len(src) < 2:
            continue  # a worker alone suffers no interference: nothing to relieve
        own = plan.slowdowns(src)
        w = min(src, key=lambda x: (cost[x.rpartition("#")[0]], -own[x], x))
        c = cost[w.rpartition("#")[0]]
        if spent + c > budget + OJPP_TOL:
            continue
        before_src = plan.theta(src)
        new_src = [x for x in src if x != w]
        targets = [b for b, g in enumerate(plan.gpus) if g and b != k]
        targets.sort(key=lambda b: (-_available(plan, plan.gpus[b]), b))
        best = _best_target(plan, inst, k, w, new_src, before_src, targets, distinct)
        opened = len(plan.gpus) - len(gpus)
        if best is None and allow_new and (max_new is None or opened < max_new):
            best = _best_target(plan, inst, k, w, new_src, before_src, [len(plan.gpus)], distinct)
        if best is None:
            continue
        b = best[1]
        if b == len(plan.gpus):
            plan.gpus.append([])
        plan.gpus[k] = new_src
        plan.gpus[b] = [*plan.gpus[b], w]
        plan.moved()
        spent += c
        moves.append(Migration(w, k, b, c))
    return plan.gpus, moves
