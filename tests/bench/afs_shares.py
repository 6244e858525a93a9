"""AFS-L share computation: literal Algorithm 1 vs the production implementation.

Grid: jobs in {100, 1000, 5000} x GPUs in {64, 1024, 8192}. Workload: elastic jobs drawn
uniformly from the AFS Table 4 zoo (each may grow from 1 GPU to its model's peak), remaining
work = a log-uniform 1 min .. 11.6 days at one GPU; ladders are shared per model, as the
AFS-L stage shares them. Both implementations get the same :class:`AfsJob` list, so ladder
building (cached per job in the stage) is outside the timing.

Times are wall-clock seconds (``time.perf_counter``), median of several runs; ``--clock cpu``
uses this process's CPU time instead (``time.process_time``), which stays meaningful on a
machine shared with other work (both are single-threaded). The reference costs about
``c x jobs x steps`` (steps = GPUs handed out); ``c`` is calibrated on a small instance and a
cell whose estimate exceeds ``--max-ref-seconds`` (default 20 s) is skipped, its speed-up then
printed as an estimate marked ``~``. Goal (AFS issue): 5,000 jobs x 8,192 GPUs in <= 20 ms and
>= 100x the reference. Run: ``python -m tests.bench.afs_shares``.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence

from gpuplan.models import Elasticity, JobSpec
from gpuplan.scenarios.zoo import load_afs_zoo
from gpuplan.solver_core.policies.afs.afs import AfsJob, afs_l_shares, build_ladder
from gpuplan.solver_core.policies.afs.afs_reference import afs_l_reference

JOBS = (100, 1000, 5000)
GPUS = (64, 1024, 8192)
HEADLINE = (5000, 8192)
GOAL_MS = 20.0
GOAL_SPEEDUP = 100.0


def workload(n: int, total: int, seed: int = 0) -> list[AfsJob]:
    """``n`` elastic zoo jobs in scan order for a ``total``-GPU cluster (deterministic)."""
    rng = random.Random(seed)
    zoo = load_afs_zoo()
    names = sorted(zoo)
    ladders = {}
    for name in names:
        model = zoo[name]
        spec = JobSpec(
            id=name,
            submit_time=0,
            requested_gpus=1,
            total_iterations=1.0,
            elasticity=Elasticity(min_gpus=1, max_gpus=model.max_gpus),
            throughput=model.profile,
        )
        ladders[name] = build_ladder(spec, total)
    jobs = []
    for i in range(n):
        counts, rates = ladders[names[rng.randrange(len(names))]]
        seconds = math.exp(rng.uniform(math.log(60.0), math.log(1e6)))
        jobs.append(AfsJob(f"j{i}", seconds * rates[0], counts, rates))
    return jobs


_clock: Callable[[], float] = time.perf_counter


def _median(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = _clock()
        fn()
        times.append(_clock() - t0)
    return statistics.median(times)


def _calibrate() -> float:
    """Reference seconds per (job x step) on this machine."""
    jobs = workload(200, 256, seed=1)
    steps = sum(afs_l_shares(jobs, 256))
    return _median(lambda: afs_l_reference(jobs, 256), 3) / (len(jobs) * steps)


def main(argv: Sequence[str] | None = None) -> list[dict[str, object]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--max-ref-seconds",
        type=float,
        default=20.0,
        help="skip the reference where its estimated time exceeds this",
    )
    parser.add_argument("--runs", type=int, default=5, help="production runs per cell")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args(argv)
    global _clock
    _clock = time.perf_counter if args.clock == "wall" else time.process_time
    print(f"clock: {args.clock}")
    per_op = _calibrate()
    print(f"reference calibration: {per_op * 1e9:.0f} ns per job x step")
    header = (
        f"{'jobs':>5} {'GPUs':>5} {'used':>5} {'prod ms':>8} {'ref ms':>10} {'speed-up':>9}  same"
    )
    print(header)
    print("-" * len(header))
    rows: list[dict[str, object]] = []
    for n in JOBS:
        for total in GPUS:
            jobs = workload(n, total)
            afs_l_shares(jobs, total)  # warm-up
            shares = afs_l_shares(jobs, total)
            prod = _median(lambda j=jobs, t=total: afs_l_shares(j, t), args.runs)
            est = per_op * n * sum(shares)
            row: dict[str, object] = {
                "jobs": n,
                "gpus": total,
                "used": sum(shares),
                "prod_s": prod,
                "ref_est_s": est,
            }
            if est > args.max_ref_seconds:
                ref_txt = f"skip ~{est:.0f}s"
                speed = f"~{est / prod:,.0f}x"
                same = "-"
                row["ref_s"] = None
                row["speedup"] = est / prod
            else:
                t0 = _clock()
                ref_shares = afs_l_reference(jobs, total)
                first = _clock() - t0
                ref = (
                    first
                    if first > 2.0
                    else statistics.median(
                        [
                            first,
                            _median(lambda j=jobs, t=total: afs_l_reference(j, t), 1),
                            _median(lambda j=jobs, t=total: afs_l_reference(j, t), 1),
                        ]
                    )
                )
                same = "yes" if ref_shares == shares else "NO"
                ref_txt = f"{ref * 1e3:,.1f}"
                speed = f"{ref / prod:,.0f}x"
                row["ref_s"] = ref
                row["speedup"] = ref / prod
                row["same"] = ref_shares == shares
            print(
                f"{n:>5} {total:>5} {sum(shares):>5} {prod * 1e3:>8.2f} {ref_txt:>10} "
                f"{speed:>9}  {same}"
            )
            rows.append(row)
    head = next(r for r in rows if (r["jobs"], r["gpus"]) == HEADLINE)
    prod_ms = float(head["prod_s"]) * 1e3  # type: ignore[arg-type]
    speedup = float(head["speedup"])  # type: ignore[arg-type]
    how = "measured" if head["ref_s"] is not None else "estimated"
    print(
        f"goal {HEADLINE[0]} jobs x {HEADLINE[1]} GPUs: {prod_ms:.2f} ms "
        f"({'met' if prod_ms <= GOAL_MS else 'NOT met'}, <= {GOAL_MS:.0f} ms); "
        f"{speedup:,.0f}x {how} ({'met' if speedup >= GOAL_SPEEDUP else 'NOT met'}, "
        f">= {GOAL_SPEEDUP:.0f}x)"
    )
    return rows


if __name__ == "__main__":
    main()
