"""Greedy vs exact: network-packing regulation and reuse-maximising placement under churn.

Why: the greedy placement runs at every scheduling event; the exact CP-SAT model is the
reference that says how much reuse (kept jobs, reused GPUs) the greedy leaves on the table
and what the optimum costs in wall time. ``python -m tests.bench.placement_gap [--quick]``.

Instances (seeded, deterministic): a cluster of ``m x G`` GPUs, ``n`` active jobs with
log-normal weights; the share vector gives every GPU away (App. E's ``sum s = N``) by largest
remainder over the ``N`` heaviest jobs, then the Prop. 2 greedy regulates it. Between steps
20 % of the jobs finish, 30 % of the others get a new weight and 0.2 n new jobs arrive. The
cluster state follows the greedy placement (the production path); at every step after the
first both solvers place the same regulated vector from the same state. Gaps are
``exact - greedy`` (absolute, and relative to the exact value).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass, field

from gpuplan.solver_core.placement.network_packing import (
    assign_gpus,
    regulate_exact,
    regulate_greedy,
    regulation_cost,
)
from gpuplan.solver_core.placement.reuse import (
    PlacementJob,
    PlacementProblem,
    place_exact,
    place_greedy,
    reuse_score,
)

CONFIGS: tuple[tuple[int, int, int], ...] = (
    (16, 4, 10),
    (16, 4, 30),
    (16, 4, 100),
    (64, 8, 50),
    (64, 8, 100),
    (64, 8, 200),
)
"""(nodes, GPUs per node, active jobs)"""


def apportion(weights: dict[str, float], total: int) -> dict[str, int]:
    """Largest remainder: the ``total`` heaviest jobs share ``total`` GPUs, each >= 1."""
    ids = sorted(weights, key=lambda j: (-weights[j], j))[:total]
    mass = sum(weights[j] for j in ids)
    raw = {j: total * weights[j] / mass for j in ids}
    shares = {j: max(1, int(raw[j])) for j in ids}
    while sum(shares.values()) > total:
        j = max((j for j in ids if shares[j] > 1), key=lambda j: (shares[j] - raw[j], j))
        shares[j] -= 1
    for j in sorted(ids, key=lambda j: (-(raw[j] - int(raw[j])), j))[
        : total - sum(shares.values())
    ]:
        shares[j] += 1
    return shares


@dataclass
class Samples:
    """Per-configuration measurements."""

    held: list[int] = field(default_factory=list)
    kept: list[tuple[int, int]] = field(default_factory=list)  # (greedy, exact)
    kept_1pass: list[tuple[int, int]] = field(default_factory=list)  # (one greedy pass, exact)
    reused: list[tuple[int, int]] = field(default_factory=list)
    ms: list[tuple[float, float]] = field(default_factory=list)
    optimal: int = 0
    reg_l1: list[tuple[int, int, int]] = field(default_factory=list)  # deficit, marginal, exact
    reg_ms: list[tuple[float, float, float]] = field(default_factory=list)


def run_config(
    nodes: int, unit: int, n: int, seeds: int, steps: int, time_limit_s: float
) -> Samples:
    out = Samples()
    total = nodes * unit
    pools = {f"n{i:03d}": tuple(range(unit)) for i in range(nodes)}
    for seed in range(seeds):
        rng = random.Random(1000 * seed + 7 * n + nodes)
        weights = {f"j{i:04d}": rng.lognormvariate(0.0, 1.0) for i in range(n)}
        fresh = n
        held: dict[str, dict[str, tuple[int, ...]]] = {}
        for step in range(steps + 1):
            shares = apportion(weights, total)
            t0 = time.perf_counter()
            regulated = regulate_greedy(shares, unit, total)
            t1 = time.perf_counter()
            marginal = regulate_greedy(shares, unit, total, rule="marginal")
            t2 = time.perf_counter()
            exact_reg = regulate_exact(shares, unit, total, time_limit_s=time_limit_s)
            t3 = time.perf_counter()
            out.reg_l1.append(
                tuple(
                    regulation_cost(shares, r, unit, total)[1]  # type: ignore
                    for r in (regulated, marginal, exact_reg)
                )
            )
            out.reg_ms.append(((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3))
            problem = PlacementProblem(
                pools,
                unit,
                tuple(PlacementJob(j, c, held.get(j, {})) for j, c in sorted(regulated.items())),
            )
            t0 = time.perf_counter()
            greedy = place_greedy(problem)
            t1 = time.perf_counter()
            if step > 0:
                stats: list = []
                exact = place_exact(problem, greedy=greedy, stats=stats, time_limit_s=time_limit_s)
                t2 = time.perf_counter()
                g, e = reuse_score(problem, greedy), reuse_score(problem, exact)
                out.held.append(sum(1 for j in problem.jobs if j.held))
                out.kept.append((g.kept_jobs, e.kept_jobs))
                one_pass = reuse_score(problem, place_greedy(problem, improve=0))
                out.kept_1pass.append((one_pass.kept_jobs, e.kept_jobs))
                out.reused.append((g.reused_gpus, e.reused_gpus))
                out.ms.append(((t1 - t0) * 1e3, (t2 - t1) * 1e3))
                out.optimal += stats[0].status == "optimal"
            held = assign_gpus(pools, greedy, {j.id: j.held for j in problem.jobs})
            for j in sorted(weights):
                if rng.random() < 0.2:
                    del weights[j]
                elif rng.random() < 0.3:
                    weights[j] = rng.lognormvariate(0.0, 1.0)
            for _ in range(max(1, n // 5)):
                weights[f"j{fresh:04d}"] = rng.lognormvariate(0.0, 1.0)
                fresh += 1
    return out


def _gap(pairs: list[tuple[int, int]]) -> tuple[float, int, float]:
    """mean and max absolute gap (exact - greedy), mean relative gap in % of exact."""
    gaps = [e - g for g, e in pairs]
    rel = [100.0 * (e - g) / e if e else 0.0 for g, e in pairs]
    return statistics.fmean(gaps), max(gaps), statistics.fmean(rel)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds x 2 steps per config")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=20.0)
    args = parser.parse_args(argv)
    seeds, steps = (2, 2) if args.quick else (args.seeds, args.steps)
    print(
        f"reuse placement, greedy vs exact (CP-SAT, {args.time_limit:g} s limit); "
        f"{seeds} seeds x {steps} churn steps per row"
    )
    print(
        "| cluster | jobs | samples | jobs holding GPUs | kept (exact) | kept gap mean/max "
        "(rel %) | reused (exact) | reused gap mean/max (rel %) | greedy ms mean/max | "
        "exact ms mean/max | exact optimal | kept gap, one pass (no pinning) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    reg_rows = []
    for nodes, unit, n in CONFIGS:
        s = run_config(nodes, unit, n, seeds, steps, args.time_limit)
        km, kx, kr = _gap(s.kept)
        rm, rx, rr = _gap(s.reused)
        gms, ems = [g for g, _ in s.ms], [e for _, e in s.ms]
        print(
            f"| {nodes}x{unit} | {n} | {len(s.kept)} | {statistics.fmean(s.held):.1f} | "
            f"{statistics.fmean(e for _, e in s.kept):.1f} | {km:.2f}/{kx} ({kr:.1f}%) | "
            f"{statistics.fmean(e for _, e in s.reused):.1f} | {rm:.2f}/{rx} ({rr:.1f}%) | "
            f"{statistics.fmean(gms):.1f}/{max(gms):.1f} | "
            f"{statistics.fmean(ems):.0f}/{max(ems):.0f} | {s.optimal}/{len(s.kept)} | "
            f"{_gap(s.kept_1pass)[0]:.2f}/{_gap(s.kept_1pass)[1]} |"
        )
        reg_rows.append((nodes, unit, n, s))
    print()
    print(
        "regulation L1 change: Prop. 2 greedy (largest deficit first), greedy (least L1 per "
        "GPU first) and exact (CP-SAT); all reach sum r = N"
    )
    print(
        "| cluster | jobs | vectors | L1 exact mean | deficit gap mean/max | "
        "marginal gap mean/max | deficit ms | marginal ms | exact ms mean/max |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for nodes, unit, n, s in reg_rows:
        dgap = [d - e for d, _, e in s.reg_l1]
        mgap = [m - e for _, m, e in s.reg_l1]
        ems = [e for _, _, e in s.reg_ms]
        print(
            f"| {nodes}x{unit} | {n} | {len(s.reg_l1)} | "
            f"{statistics.fmean(e for _, _, e in s.reg_l1):.1f} | "
            f"{statistics.fmean(dgap):.2f}/{max(dgap)} | "
            f"{statistics.fmean(mgap):.2f}/{max(mgap)} | "
            f"{statistics.fmean(d for d, _, _ in s.reg_ms):.2f} | "
            f"{statistics.fmean(m for _, m, _ in s.reg_ms):.2f} | "
            f"{statistics.fmean(ems):.0f}/{max(ems):.0f} |"
        )


if __name__ == "__main__":
    main()
