"""``heuristic-pg``: a greedy over whole GPU contents (patterns), then the best of it and
``heuristic-ls``.

Why: Alg. 3 and the worker-at-a-time moves of :mod:`.improve` reach a state where a job's
workers sit alone (Placement's pass 2, ``min(v_i) = 0``) and no single move can pair them
with another job without breaking the job's balance. The optimum of such instances fills
GPUs with *mixes* in which all workers of a job see about the same slowdown. Choosing whole
GPU contents at once reaches those mixes directly:

* the patterns of :func:`.patterns.enumerate_patterns` (every count vector one GPU may hold,
  checked with the exact device rules) are sorted once by the weight of the workers they
  hold, heaviest first (weight: one of four sizes of a worker, below);
* the greedy opens one GPU at a time with the first pattern that still *fits*: no more
  workers of a job than are left, and every job's slowdowns so far plus this pattern's
  within ``theta_balance``. Fitting only gets harder as the greedy goes (fewer workers left,
  wider spreads), so one pointer walks the sorted list once: ``O(patterns)`` per run;
* a run can get stuck: workers of some job are left and no pattern fits. Two repairs,
  each tried: (a) double the stuck jobs' weight and run again (at most ``ROUNDS`` times), so
  they are placed earlier; (b) *pin* the stuck jobs to slowdowns near 0 (their range starts
  at 0, so a lone worker always fits) and run again; every run pins at least one new job,
  so (b) always ends with an answer.

Every answer meets every rule: each GPU is an enumerated pattern and each job's slowdowns lie
within ``theta_balance`` of each other. The best run's GPUs then go through the GPU-emptying
pass of :mod:`.improve` (its moves keep every rule from any state that meets them; it
saved 7 GPUs of 79 on 160 workers seed 0 of the bench). The solver returns that or
``heuristic-ls``'s answer, whichever uses fewer GPUs (never worse than ``heuristic-ls``);
with more patterns than :data:`PATTERN_LIMIT` it is ``heuristic-ls`` alone. Deterministic:
no random choice.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuplan.models.ojpp import OJPP_TOL, OjppInstance, counts_slowdown

from .exact import lower_bound
from .heuristic import run_heuristic
from .improve import empty_devices, packer_solution
from .packer import Packer, Rules
from .patterns import enumerate_patterns

__all__ = [
    "PATTERN_LIMIT",
    "ROUNDS",
    "count_matrix",
    "greedy_patterns",
    "run_heuristic_pg",
    "run_pattern_greedy",
    "worker_weights",
]

PATTERN_LIMIT = 5_000
"""Most patterns the greedy walks (beyond: ``heuristic-ls`` alone, to stay fast)."""
ROUNDS = 8
"""Weight doublings of repair (a) before it gives up."""


def greedy_patterns(
    inst: OjppInstance,
    patterns: Sequence[dict[int, int]],
    slow: Sequence[dict[int, float]],
    weight: Sequence[float],
    pinned: set[int],
    matrix: np.ndarray | None = None,
) -> tuple[list[int], list[int]]:
    """One greedy run: (pattern index per GPU, []) or ([], the jobs left with workers when
    no pattern fits). ``slow[t][i]`` is job i's slowdown on pattern t; ``matrix`` (patterns x
    jobs counts, built when not given) scores all patterns in one product."""
    jobs = inst.jobs
    rem = [job.workers for job in jobs]
    inf = float("inf")
    lo = [0.0 if i in pinned else inf for i in range(len(jobs))]
    hi = [0.0 if i in pinned else -inf for i in range(len(jobs))]
    limit = inst.theta_balance + OJPP_TOL
    balanced = [job.workers >= 2 for job in jobs]
    if matrix is None:
        matrix = count_matrix(patterns, len(jobs))
    # heaviest first, the pattern index breaking ties (a stable sort of the negated scores)
    order = np.argsort(-(matrix @ np.asarray(weight, dtype=float)), kind="stable").tolist()
    chosen: list[int] = []
    left = sum(rem)
    at = 0
    while left:
        while at < len(order):
            t = order[at]
            if all(c <= rem[i] for i, c in patterns[t].items()) and not any(
                balanced[i] and max(hi[i], s) - min(lo[i], s) > limit for i, s in slow[t].items()
            ):
                break
            at += 1
        else:
            return [], [i for i, r in enumerate(rem) if r]
        t = order[at]
        for i, c in patterns[t].items():
            rem[i] -= c
            left -= c
            lo[i] = min(lo[i], slow[t][i])
            hi[i] = max(hi[i], slow[t][i])
        chosen.append(t)
    return chosen, []


def count_matrix(patterns: Sequence[dict[int, int]], jobs: int) -> np.ndarray:
    """Patterns x jobs worker counts."""
    out = np.zeros((len(patterns), jobs))
    for t, pat in enumerate(patterns):
        for i, c in pat.items():
            out[t, i] = c
    return out


def worker_weights(inst: OjppInstance) -> list[list[float]]:
    """Sizes of a worker the greedy tries: its larger dimension, compute, peak memory, and
    their sum."""
    jobs = inst.jobs
    return [
        [max(j.alpha, j.gamma + j.delta) for j in jobs],
        [j.alpha for j in jobs],
        [j.gamma + j.delta for j in jobs],
        [j.alpha + j.gamma + j.delta for j in jobs],
    ]


def run_pattern_greedy(
    inst: OjppInstance, limit: int = PATTERN_LIMIT, floor: int = 0
) -> list[dict[int, int]] | None:
    """The fewest-GPU answer of the greedy runs (count vector per GPU), or None when the
    patterns number more than ``limit`` (or a worker fits no GPU). Stops at the first answer
    with at most ``floor`` GPUs (a lower bound: no later run could beat it)."""
    patterns = enumerate_patterns(inst, limit)
    if not patterns or any(not any(i in p for p in patterns) for i in range(len(inst.jobs))):
        return None
    matrix = inst.matrix()
    slow = [{i: counts_slowdown(i, p, matrix, inst.composition) for i in p} for p in patterns]
    counts = count_matrix(patterns, len(inst.jobs))
    best: list[int] | None = None
    for base, repair in ((w, r) for w in worker_weights(inst) for r in ("double", "pin")):
        if best is not None and len(best) <= floor:
            break
        weight, pinned = list(base), set[int]()
        for _ in range(ROUNDS if repair == "double" else len(inst.jobs) + 1):
            got, stuck = greedy_patterns(inst, patterns, slow, weight, pinned, counts)
            if not stuck:
                if best is None or len(got) < len(best):
                    best = got
                break
            if repair == "double":
                for i in stuck:
                    weight[i] *= 2.0
            else:
                pinned.update(stuck)
    return None if best is None else [patterns[t] for t in best]


def run_heuristic_pg(inst: OjppInstance) -> list[list[str]] | None:
    """Solver ``heuristic-pg``: the greedy's best answer after the GPU-emptying pass of
    :mod:`.improve`, or ``heuristic-ls``'s, whichever uses fewer GPUs (``heuristic-ls`` on a
    tie); None when a worker fits no GPU."""
    ls = run_heuristic(inst, improve=True)
    if ls is None:
        return None
    floor = lower_bound(inst)
    if len(ls) <= floor:
        return ls  # provably optimal already
    got = run_pattern_greedy(inst, floor=floor)
    if got is None:
        return ls
    # the greedy's GPUs meet every rule, so the emptying pass may start from them
    packer = Packer(inst, Rules())
    for counts in got:
        b = packer.open_device()
        if b is None:  # no device cap in Rules(): cannot happen
            return ls
        for i, c in sorted(counts.items()):
            for _ in range(c):
                packer.add(i, b)
    if len(got) > floor:
        empty_devices(packer)
    gpus = packer_solution(packer)
    return gpus if len(gpus) < len(ls) else ls
