"""``gpuplan solve`` solver x size matrix: every solver of mckp, reclaim and packing on seeded
random instances of growing size (``python -m tests.bench.solvers [--quick]``).

Per cell: the median wall time (ms) and the gap to the best objective any solver found on that
instance (%, lower is better for reclaim/packing, higher for mckp), with the number of proven
optima. The reference is measured in the same run, so the gaps survive a change of machine.
"""

from __future__ import annotations

import random
import statistics
import sys
from typing import Any

from gpuplan.solver_core.limits import SolveLimits
from gpuplan.solver_core.problems import mckp, packing, reclaim


def gen_mckp(n: int, seed: int) -> dict[str, Any]:
    """Aryl-like concave groups: k extra workers, diminishing value per worker."""
    rng = random.Random(seed)
    groups = []
    for i in range(n):
        base, step, w = rng.uniform(5, 50), rng.choice([1, 2, 4]), 0
        items, v = [], 0.0
        for k in range(rng.randint(1, 4)):
            w += step
            v += base / (k + 1)
            items.append({"weight": w, "value": round(v, 3)})
        groups.append({"id": f"g{i}", "items": items})
    total = sum(g["items"][-1]["weight"] for g in groups)
    return {"capacity": total // 3, "groups": groups}


def gen_reclaim(n: int, seed: int) -> dict[str, Any]:
    """n 8-GPU loaned servers; jobs spanning 1-8 servers, some elastic."""
    rng = random.Random(seed)
    servers = [f"s{i}" for i in range(n)]
    free = dict.fromkeys(servers, 8)
    jobs = []
    k = 0
    while any(free.values()) and k < 4 * n:
        span = min(rng.choice([1, 1, 2, 4, 8]), n)
        cand = [s for s in servers if free[s] > 0]
        on = rng.sample(cand, min(span, len(cand)))
        gpus = {s: rng.randint(1, free[s]) for s in on}
        for s, g in gpus.items():
            free[s] -= g
        job: dict[str, Any] = {"id": f"j{k}", "gpus": gpus}
        total = sum(gpus.values())
        if rng.random() < 0.3 and total > 1:
            job["allowed"] = list(range(max(1, total // 2), total + 1))
        jobs.append(job)
        k += 1
    return {"servers": servers, "jobs": jobs, "demand": max(1, n // 4)}


def gen_packing(n: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    jobs = [{"id": f"j{i}", "share": rng.randint(1, 12)} for i in range(n)]
    return {"unit": 4, "capacity": sum(j["share"] for j in jobs), "jobs": jobs}


PROBLEMS = {
    "mckp": (mckp, gen_mckp, +1, (10, 100, 1000)),
    "reclaim": (reclaim, gen_reclaim, -1, (10, 50, 200)),
    "packing": (packing, gen_packing, -1, (10, 100, 500)),
}


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    seeds = 2 if quick else 3
    limits = SolveLimits.wall(2.0 if quick else 10.0)
    for name, (mod, gen, sense, sizes) in PROBLEMS.items():
        solvers = mod.default_solvers()
        print(
            f"\n{name}: median ms / mean gap to best % / proven optima, "
            f"{seeds} seeds, limit {limits.wall_s:g} s"
        )
        print(f"{'solver':16}" + "".join(f"{f'n={n}':>24}" for n in sizes))
        cells: dict[str, list[str]] = {s: [] for s in solvers}
        for n in sizes:
            times: dict[str, list[float]] = {s: [] for s in solvers}
            gaps: dict[str, list[float]] = {s: [] for s in solvers}
            proven = dict.fromkeys(solvers, 0)
            for seed in range(seeds):
                inst = mod.load(gen(n, seed), f"{name}-{n}-{seed}")
                outs = {s: mod.run(inst, s, limits) for s in solvers}
                objs = [o.objective for o in outs.values() if o.objective is not None]
                best = max(objs) if sense > 0 else min(objs)
                for s, o in outs.items():
                    times[s].append(o.solve_ms + (o.build_ms or 0.0))
                    proven[s] += o.status == "optimal"
                    if o.objective is not None:
                        gaps[s].append(abs(o.objective - best) / max(1.0, abs(best)) * 100)
            for s in solvers:
                gap = f"{statistics.mean(gaps[s]):.1f}" if gaps[s] else "-"
                cells[s].append(f"{statistics.median(times[s]):.0f} / {gap} / {proven[s]}")
        for s in solvers:
            print(f"{s:16}" + "".join(f"{c:>24}" for c in cells[s]), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
