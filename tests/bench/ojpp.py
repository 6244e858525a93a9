"""OJPP benchmark: exact solve time vs size, heuristic time at 200 workers, heuristic vs exact.

``python -m tests.bench.ojpp [--quick]``. Instances come from ``tests/ojpp_gen.py`` (seeded,
values on a 0.01 grid, jobs of 1-6 workers, mixed bounds). Goals (OJPP issue): 40 workers
proven optimal by CP-SAT within 10 s; the heuristic (Alg. 3) <= 5 ms for 200 workers and
within 10 % of the exact GPU count where exact finishes (reported for Alg. 3 alone and with
the GPU-emptying pass, ``heuristic-ls``). Ratios are against the exact answer
measured in the same run; absolute times are printed beside them. No asserts: this reports.
"""

from __future__ import annotations

import statistics
import sys
import time

from gpuplan.solver_core.limits import SolveLimits
from gpuplan.solver_core.ojpp import solve
from gpuplan.solver_core.ojpp.exact import solve_exact
from tests.ojpp_gen import random_instance

SIZES = (10, 20, 30, 40)
GOAL_EXACT_S = 10.0
GOAL_HEURISTIC_MS = 5.0
GOAL_RATIO = 1.10


def _exact_table(seeds: int) -> None:
    print(f"{'workers':>7} {'seed':>4} {'status':>9} {'exact':>5} {'bound':>5} {'heur':>5} "
          f"{'h-ls':>5} {'greedy':>6} {'h/exact':>7} {'ls/exact':>8} {'exact s':>8}")
    ratios: list[float] = []
    ls_ratios: list[float] = []
    for workers in SIZES:
        proven = 0
        for seed in range(seeds):
            inst = random_instance(seed, workers, "additive", max_per_job=6)
            t0 = time.perf_counter()
            ex = solve_exact(inst, "cp-sat", SolveLimits.wall(GOAL_EXACT_S), shortcut=False)
            secs = time.perf_counter() - t0
            heur = solve(inst, "heuristic").stats.objective or 0.0
            ls = solve(inst, "heuristic-ls").stats.objective or 0.0
            greedy = solve(inst, "greedy").stats.objective or 0.0
            obj = ex.stats.objective or 0.0
            ratio = heur / obj if obj else float("nan")
            ls_ratio = ls / obj if obj else float("nan")
            if ex.stats.status == "optimal":
                proven += 1
                ratios.append(ratio)
                ls_ratios.append(ls_ratio)
            print(f"{workers:>7} {seed:>4} {ex.stats.status:>9} {obj:>5.0f} "
                  f"{ex.stats.bound or 0:>5.0f} {heur:>5.0f} {ls:>5.0f} {greedy:>6.0f} "
                  f"{ratio:>7.3f} {ls_ratio:>8.3f} {secs:>8.2f}")
        print(f"  {workers} workers: {proven}/{seeds} proven optimal within {GOAL_EXACT_S:g} s")
    for name, rs in (("heuristic", ratios), ("heuristic-ls", ls_ratios)):
        if rs:
            print(f"{name} / exact GPUs where proven: mean {statistics.mean(rs):.3f}, "
                  f"max {max(rs):.3f} (goal <= {GOAL_RATIO}); within goal: "
                  f"{sum(r <= GOAL_RATIO + 1e-9 for r in rs)}/{len(rs)}")


def _heuristic_time(repeats: int) -> None:
    """The solver's own time (``stats.wall_ms``: the placement, what the goal is about) and
    the time of the whole ``solve`` call, which adds the lower bound reported as ``bound``."""
    for solver, workers in [("heuristic", w) for w in (50, 100, 200)] + [("heuristic-ls", 200)]:
        inst = random_instance(1, workers, "additive", max_per_job=8)
        own, total = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            got = solve(inst, solver)
            total.append((time.perf_counter() - t0) * 1000.0)
            own.append(got.stats.wall_ms or 0.0)
        best = min(own)
        print(f"{solver}, {workers} workers ({len(inst.jobs)} jobs): best {best:.2f} ms, "
              f"median {statistics.median(own):.2f} ms, {got.stats.objective:.0f} GPUs, bound "
              f"{got.stats.bound:.0f}; with the bound: median {statistics.median(total):.2f} "
              f"ms (goal <= {GOAL_HEURISTIC_MS:g} ms at 200: ratio "
              f"{best / GOAL_HEURISTIC_MS:.2f})")


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    _heuristic_time(5 if quick else 20)
    _exact_table(2 if quick else 5)


if __name__ == "__main__":
    main(sys.argv[1:])
