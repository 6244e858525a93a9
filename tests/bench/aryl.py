"""Aryl benchmarks: reclaim heuristic vs exact, MCKP DP vs CP-SAT, and the Tab. 5 replay.

``python -m tests.bench.aryl`` runs the two solver benchmarks (a minute or two);
``python -m tests.bench.aryl results`` also replays Philly / ITP traces under Baseline,
loaning-only, scaling-only, full Aryl and Aryl with heterogeneous training (Advanced) and prints
the tables of ``docs/results/aryl.md``; ``python -m tests.bench.aryl paper`` replays only the
rebuilt paper setting (``PAPER_SETTING``) of that page.

Every ratio is against a reference measured in the same run on the same instances (the exact
reclaim for the heuristic, and the eager-look-ahead greedy it replaced; CP-SAT for the DP), so
the numbers survive a change of machine; absolute times are printed beside them. Goals (Aryl
issue): reclaim heuristic <= 3 ms and within 5 % of the exact preemptions, exact <= 1 s, at
50 ... 500 loaned servers; MCKP CP-SAT <= 0.5 s and DP <= 50 ms at 2,048 GPUs / 1,000 jobs.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

# The library's Tab. 5 metrics (gpuplan compare prints the same); re-exported for the tests.
from gpuplan.scenarios.inference import heterogeneous_jobs
from gpuplan.scenarios.loaning_usage import MixedCounter, raw_overall
from gpuplan.solver_core.policies.aryl.mckp import MckpGroup, solve_dp, solve_exact, solve_greedy
from gpuplan.solver_core.policies.aryl.reclaim import (
    ReclaimInstance,
    evaluate,
    select_aryl,
    select_exact,
    select_random,
    select_scf,
)
from gpuplan.solver_core.policies.aryl.two_phase import ArylJob, elastic_group

RECLAIM_SIZES = (50, 100, 200, 500)
MCKP_SIZES = ((64, 100), (256, 250), (1024, 500), (2048, 1000))
GOAL_HEURISTIC_MS = 3.0
GOAL_EXACT_S = 1.0
GOAL_GAP = 0.05
GOAL_DP_MS = 50.0
GOAL_CPSAT_S = 0.5


def _timed(fn: Callable[[], Any], repeat: int = 1) -> tuple[Any, float]:
    """(result, best wall ms over ``repeat`` calls).

    The minimum, as ``timeit`` recommends: on a shared 2-core machine the median mostly
    measures the other processes. ``main`` prints the load average so the noise is visible."""
    times = []
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1000.0)
    return out, min(times)


# --------------------------------------------------------------------------------------------
# Reclaim
# --------------------------------------------------------------------------------------------
def reclaim_layout(
    servers: int,
    seed: int,
    *,
    gpus: int = 8,
    fill: float = 0.98,
    elastic_share: float = 0.1,
    split: float = 0.4,
) -> ReclaimInstance:
    """A busy on-loan fleet: jobs of 1-32 GPUs packed best-fit onto ``servers`` servers of
    ``gpus`` GPUs until ``fill`` of the GPUs are used. Jobs of a server or more span whole
    servers; with probability ``split`` a small job is split over two servers (fragmentation);
    a tenth of the multi-server jobs also hold GPUs on a training server (collateral damage);
    ``elastic_share`` of jobs are elastic down to half their size."""
    rng = random.Random(seed)
    names = [f"L{i:03d}" for i in range(servers)]
    free = dict.fromkeys(names, gpus)
    layout: dict[str, dict[str, int]] = {n: {} for n in names}
    extra: dict[str, dict[str, int]] = {}
    allowed: dict[str, range] = {}
    target = fill * servers * gpus
    used = 0
    k = 0
    while used < target:
        size = rng.choice([1, 1, 1, 2, 2, 4, 4, 8, 16, 32])
        job = f"j{k}"
        k += 1
        placed: dict[str, int] = {}
        if size >= gpus:
            whole = [n for n in names if free[n] == gpus]
            need = math.ceil(size / gpus)
            if len(whole) < need:
                continue
            for n in rng.sample(whole, need):
                take = min(gpus, size - sum(placed.values()))
                placed[n] = take
        else:
            fits = [n for n in names if free[n] >= size]
            if rng.random() < split and size >= 2:
                halves = [n for n in names if free[n] >= size // 2]
                if len(halves) >= 2:
                    a, b = rng.sample(halves, 2)
                    placed = {a: size // 2, b: size - size // 2}
            if not placed:
                if not fits:
                    if all(v < 1 for v in free.values()):
                        break
                    continue
                best = min(fits, key=lambda n: (free[n], n))
                placed = {best: size}
        if any(free[n] < g for n, g in placed.items()):
            continue
        for n, g in placed.items():
            free[n] -= g
            layout[n][job] = g
        used += sum(placed.values())
        if len(placed) > 1 and rng.random() < 0.1:
            extra.setdefault("T000", {})[job] = gpus
        if rng.random() < elastic_share:
            total = sum(placed.values()) + extra.get("T000", {}).get(job, 0)
            allowed[job] = range(max(1, total // 2), total + 1)
    return ReclaimInstance.from_server_jobs(layout, gpus, allowed, extra)


def bench_reclaim(
    sizes: Sequence[int] = RECLAIM_SIZES, seeds: int = 3, demand: float = 0.1
) -> list[dict[str, Any]]:
    """Heuristic vs exact (CP-SAT) on ``seeds`` layouts per size, reclaiming ``demand`` of the
    fleet; SCF and Random for context. Times are medians; quality is summed over seeds."""
    from tests.policies.test_aryl_reclaim_reference import (
        select_aryl_reference,  # (imports this module)
    )

    rows = []
    for n in sizes:
        h_ms, e_ms, scf_ms, ref_ms = [], [], [], []
        h_pre = e_pre = scf_pre = rnd_pre = static_pre = 0
        h_col = e_col = 0.0
        status = set()
        for seed in range(seeds):
            inst = reclaim_layout(n, seed)
            count = max(1, round(demand * n))
            h, t_h = _timed(lambda inst=inst, count=count: select_aryl(inst, count), repeat=9)
            ref, t_ref = _timed(
                lambda inst=inst, count=count: select_aryl_reference(inst, count), repeat=9
            )
            if ref != h:
                raise AssertionError(f"lazy greedy differs from the eager reference ({n}, {seed})")
            ref_ms.append(t_ref)
            (e, stats), t_e = _timed(
                lambda inst=inst, count=count: select_exact(inst, count, time_limit_s=10.0),
                repeat=3,
            )
            s, t_s = _timed(lambda inst=inst, count=count: select_scf(inst, count), repeat=5)
            r = select_random(inst, count, seed)
            status.add(stats.status)
            h_ms.append(t_h)
            e_ms.append(t_e)
            scf_ms.append(t_s)
            oh, oe = evaluate(inst, h), evaluate(inst, e)
            h_pre += len(oh.preempted)
            e_pre += len(oe.preempted)
            h_col += oh.collateral_damage
            e_col += oe.collateral_damage
            scf_pre += len(evaluate(inst, s).preempted)
            static_pre += len(evaluate(inst, select_aryl(inst, count, dynamic=False)).preempted)
            rnd_pre += len(evaluate(inst, r).preempted)
        th, te = statistics.median(h_ms), statistics.median(e_ms)
        rows.append(
            {
                "servers": n,
                "reclaim": max(1, round(demand * n)),
                "heuristic_ms": th,
                "exact_ms": te,
                "scf_ms": statistics.median(scf_ms),
                "speedup": te / th,
                "eager_ms": statistics.median(ref_ms),
                "lazy_speedup": statistics.median(ref_ms) / th,
                "heuristic_preemptions": h_pre,
                "exact_preemptions": e_pre,
                "scf_preemptions": scf_pre,
                "random_preemptions": rnd_pre,
                "static_preemptions": static_pre,
                "gap": (h_pre - e_pre) / e_pre if e_pre else 0.0,
                "heuristic_collateral": h_col / seeds,
                "exact_collateral": e_col / seeds,
                "exact_status": ",".join(sorted(status)),
            }
        )
    return rows


# --------------------------------------------------------------------------------------------
# MCKP
# --------------------------------------------------------------------------------------------
def mckp_instance(jobs: int, seed: int) -> list[MckpGroup]:
    """Elastic jobs as phase 2 sees them: w_min 1-4, up to 8 flexible workers, 1/2/4 GPUs per
    worker, heavy-tailed running times (lognormal, median ~1 h)."""
    rng = random.Random(seed)
    groups = []
    for i in range(jobs):
        w_min = rng.randint(1, 4)
        job = ArylJob.elastic_from_min_time(
            f"e{i}",
            w_min,
            w_min + rng.randint(1, 8),
            rng.lognormvariate(8.2, 1.5),
            gpus_per_worker=rng.choice([1, 1, 2, 4]),
        )
        groups.append(elastic_group(job))
    return groups


def bench_mckp(
    sizes: Sequence[tuple[int, int]] = MCKP_SIZES, seeds: int = 3
) -> list[dict[str, Any]]:
    """DP vs CP-SAT (time limit 10 s to see its real time) vs greedy per (GPUs, jobs)."""
    rows = []
    for gpus, jobs in sizes:
        dp_ms, cp_ms, gr_ms = [], [], []
        dp_val = cp_val = gr_val = 0.0
        status = set()
        for seed in range(seeds):
            groups = mckp_instance(jobs, seed)
            dp, t_dp = _timed(lambda g=groups, c=gpus: solve_dp(g, c), repeat=5)
            cp, t_cp = _timed(
                lambda g=groups, c=gpus: solve_exact(g, c, time_limit_s=10.0), repeat=3
            )
            gr, t_gr = _timed(lambda g=groups, c=gpus: solve_greedy(g, c), repeat=5)
            status.add(cp.stats.status if cp.stats else "?")
            dp_ms.append(t_dp)
            cp_ms.append(t_cp)
            gr_ms.append(t_gr)
            dp_val += dp.value
            cp_val += cp.value
            gr_val += gr.value
        tdp, tcp = statistics.median(dp_ms), statistics.median(cp_ms)
        rows.append(
            {
                "gpus": gpus,
                "jobs": jobs,
                "dp_ms": tdp,
                "cpsat_ms": tcp,
                "greedy_ms": statistics.median(gr_ms),
                "cpsat_over_dp": tcp / tdp,
                "cpsat_value_vs_dp": cp_val / dp_val if dp_val else 1.0,
                "greedy_value_vs_dp": gr_val / dp_val if dp_val else 1.0,
                "cpsat_status": ",".join(sorted(status)),
            }
        )
    return rows


def _print_reclaim(rows: list[dict[str, Any]], demand: float) -> None:
    print(
        f"Reclaim {demand:.0%} of the loaned fleet (3 layouts per size, 98 % of GPUs busy; "
        "exact = components + CP-SAT, 1 thread; preemptions summed over layouts; "
        "static = Alg. 1 with the printed 1/|S_j|)"
    )
    print(
        f"{'servers':>8} {'N_R':>4} {'heur ms':>8} {'eager ms':>9} {'eager/heur':>10} "
        f"{'exact ms':>9} {'exact/heur':>10} "
        f"{'pre h/e':>9} {'gap':>6} {'static':>6} {'SCF':>5} {'Rand':>5} {'coll h/e':>11}  goal"
    )
    for r in rows:
        ok = (
            r["heuristic_ms"] <= GOAL_HEURISTIC_MS
            and r["exact_ms"] <= GOAL_EXACT_S * 1000
            and r["gap"] <= GOAL_GAP
        )
        print(
            f"{r['servers']:>8} {r['reclaim']:>4} {r['heuristic_ms']:>8.2f} "
            f"{r['eager_ms']:>9.2f} {r['lazy_speedup']:>9.2f}x "
            f"{r['exact_ms']:>9.1f} {r['speedup']:>9.0f}x "
            f"{r['heuristic_preemptions']:>4}/{r['exact_preemptions']:<4} {r['gap']:>6.1%} "
            f"{r['static_preemptions']:>6} {r['scf_preemptions']:>5} "
            f"{r['random_preemptions']:>5} "
            f"{r['heuristic_collateral']:>5.2f}/{r['exact_collateral']:<5.2f}  "
            f"{'met' if ok else 'MISSED'} ({r['exact_status']})"
        )


def _print_mckp(rows: list[dict[str, Any]]) -> None:
    print("MCKP phase 2 (3 instances per size; CP-SAT 1 thread, greedy warm start)")
    print(
        f"{'GPUs':>6} {'jobs':>6} {'DP ms':>8} {'CP-SAT ms':>10} {'CP/DP':>7} "
        f"{'greedy ms':>10} {'CP val/DP':>10} {'greedy val/DP':>14}  goal"
    )
    for r in rows:
        ok = r["dp_ms"] <= GOAL_DP_MS and r["cpsat_ms"] <= GOAL_CPSAT_S * 1000
        print(
            f"{r['gpus']:>6} {r['jobs']:>6} {r['dp_ms']:>8.2f} {r['cpsat_ms']:>10.1f} "
            f"{r['cpsat_over_dp']:>6.0f}x {r['greedy_ms']:>10.2f} "
            f"{r['cpsat_value_vs_dp']:>10.5f} {r['greedy_value_vs_dp']:>14.5f}  "
            f"{'met' if ok else 'MISSED'} ({r['cpsat_status']})"
        )


# --------------------------------------------------------------------------------------------
# Tab. 5 replay (docs/results/aryl.md)
# --------------------------------------------------------------------------------------------
RESULT_CONFIGS: tuple[tuple[str, str, str, bool, float], ...] = (
    # (Tab. 5 scenario, solution, policy, loaning events on?, share of jobs heterogeneous)
    ("Baseline", "FIFO", "fifo", False, 0.0),
    ("Ablation", "SJF, no loaning/scaling", "aryl-sjf", False, 0.0),
    ("Capacity loaning", "Random", "aryl-loaning-random", True, 0.0),
    ("Capacity loaning", "SCF", "aryl-loaning-scf", True, 0.0),
    ("Capacity loaning", "Aryl", "aryl-loaning", True, 0.0),
    ("Capacity loaning", "Exact reclaim (CP-SAT)", "aryl-loaning-exact", True, 0.0),
    ("Elastic scaling", "AFS-L", "afs-l", False, 0.0),
    ("Elastic scaling", "AFS-P", "afs-p", False, 0.0),
    ("Elastic scaling", "Aryl", "aryl-scaling", False, 0.0),
    ("Loaning + scaling", "Aryl", "aryl", True, 0.0),
    ("Loaning + scaling", "Aryl, naive placement (Tab. 6)", "aryl-naive", True, 0.0),
    ("Advanced", "Aryl, 10 % of jobs heterogeneous at 70 %", "aryl-hetero", True, 0.1),
    ("Advanced", "Aryl, 10 % of jobs heterogeneous at 100 %", "aryl-hetero-ideal", True, 0.1),
)


def result_traces() -> dict[str, dict[str, Any]]:
    """The two replays: a Philly virtual cluster and an ITP cluster, each a window of steady
    load with a training pool sized for ~80 % average offered load (GPU-time submitted per
    second / training GPUs) and an inference pool of 1.17 servers per training server (the
    paper's 4,160 T4 / 3,544 V100), normalised at 1 T4 = 1/4 V100."""
    from gpuplan.scenarios.itp import load_itp
    from gpuplan.scenarios.philly import load_philly
    from gpuplan.scenarios.traces import resolve_trace_path

    def philly() -> list[Any]:
        return load_philly(
            resolve_trace_path("philly_pollux/philly.csv"),
            vc="6c71a0",
            vc_origin=True,
            start_s=18 * 86400,
            end_s=32 * 86400,
        )

    def itp() -> list[Any]:
        return load_itp(
            resolve_trace_path("elasticflow_itp/raw/cluster07.csv"),
            relative=True,
            start_s=14 * 86400,
            end_s=21 * 86400,
        )

    return {
        "Philly VC 6c71a0, days 18-32": {"rows": philly, "training": 10, "inference": 12},
        "ITP cluster07, days 14-21": {"rows": itp, "training": 48, "inference": 56},
    }


PAPER_CONFIGS: tuple[tuple[str, str, str, bool, float], ...] = (
    ("Baseline", "FIFO", "fifo", False, 0.0),
    ("Capacity loaning", "Aryl", "aryl-loaning", True, 0.0),
    ("Elastic scaling", "AFS-L", "afs-l", False, 0.0),
    ("Elastic scaling", "Aryl", "aryl-scaling", False, 0.0),
    ("Loaning + scaling", "Aryl", "aryl", True, 0.0),
)
"""The rows of the rebuilt paper setting (Tab. 5 rows 1, 7, 9, 11, 2)."""

PAPER_SETTING: dict[str, Any] = {"jobs_kw": {"max_factor": 2.0}, "base_busy": 0.1}
"""The paper's setting as far as the digest pins it down (docs/results/aryl.md, "Rebuilding
the paper's setting"): elastic jobs may grow to twice their traced size (the Basic scenario's
"given range" is not printed; with w_max = g no schedule can put them on idle GPUs), and the
inference side is ~32 % busy on average (the digest infers ~35 % from Tab. 5's 0.72 / 0.52)
instead of ~45 %, so more of it is lent."""


def run_result(
    trace: str,
    spec: dict[str, Any],
    configs=RESULT_CONFIGS,
    seed: int = 0,
    setting: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every configuration on one trace; one dict of metrics per configuration.
    ``setting``: ``jobs_kw`` for ``aryl_jobs`` and ``base_busy`` of the inference load
    (None: the defaults, the tables' main setting)."""
    from gpuplan.executors.metrics import summarize
    from gpuplan.executors.simulator.run import simulate
    from gpuplan.models import Overheads
    from gpuplan.scenarios.inference import loaning_scenario
    from gpuplan.scenarios.loaning_usage import PoolUsage, preemption_ratio
    from gpuplan.scenarios.usage_bound import window_usage_bound
    from gpuplan.solver_core.policies.aryl.reclaim import reclaim_metrics
    from gpuplan.solver_core.registry import make_policy, policy_names

    setting = setting or {}
    rows = spec["rows"]()
    origin = min(r.submit_time for r in rows)
    rows = [r.model_copy(update={"submit_time": r.submit_time - origin}) for r in rows]
    scen = loaning_scenario(
        rows,
        spec["training"],
        spec["inference"],
        seed=seed,
        name=trace,
        jobs_kw=setting.get("jobs_kw"),
        base_busy=setting.get("base_busy", 0.3),
    )
    last = max(j.submit_time for j in scen.jobs)
    bound = window_usage_bound(scen.jobs, scen.cluster.gpus_in_pool("training"), last)
    # 63 s per preemption (testbed average, §3.6); stop-free scaling at 4 % of it ([36]).
    overheads = Overheads(resize_mode="stop_free", stop_free_s=2.5, restart_s=63.0, migrate_s=63.0)
    known = policy_names()
    out = []
    for scenario, solution, policy, loaning, hetero in configs:
        if policy not in known:
            continue
        pol = make_policy(policy, seed=seed)
        mixed = MixedCounter()
        usage = PoolUsage(scen.cluster, scen.load, until=last, chain=mixed)
        jobs = heterogeneous_jobs(scen.jobs, hetero, seed)
        t0 = time.perf_counter()
        result, _, _ = simulate(
            scen.cluster,
            jobs,
            pol,
            overheads=overheads,
            events=scen.events if loaning else (),
            on_plan=usage,
            scenario=trace,
            seed=seed,
            sample_interval_s=None,
        )
        wall = time.perf_counter() - t0
        summary = summarize(result)
        use = usage.summary()
        rec = getattr(pol, "reclaimer", None)
        rm = reclaim_metrics(rec.outcomes) if rec is not None and loaning else None
        out.append(
            {
                "trace": trace,
                "scenario": scenario,
                "solution": solution,
                "policy": policy,
                "jobs": summary.jobs,
                "unfinished": summary.unfinished,
                "qt_mean": summary.avg_queueing_s,
                "qt_median": summary.median_queueing_s,
                "qt_p95": summary.p95_queueing_s,
                "jct_mean": summary.avg_jct_s,
                "jct_median": summary.median_jct_s,
                "jct_p95": summary.p95_jct_s,
                "usage_training": use["training"],
                "usage_overall": use["overall"],
                "usage_overall_raw": raw_overall(usage, scen.cluster),
                "usage_bound": bound,
                "usage_loaned": use["loaned"] if loaning else None,
                "preemption_ratio": preemption_ratio(result),
                "lost_gpu_h": summary.lost_iterations / 3600.0,
                "collateral": rm["mean_collateral_damage"] if rm else None,
                "met_by_flexible": rm["met_by_flexible"] if rm else None,
                "reclaims": rm["events"] if rm else None,
                "resizes": summary.resizes,
                "wall_s": wall,
                "elastic_jobs": sum(j.elastic for j in scen.jobs),
                "hetero_jobs": sum(j.heterogeneous for j in jobs),
                "mixed_jobs": len(mixed.jobs),
                "training_gpus": scen.cluster.gpus_in_pool("training"),
                "inference_gpus": scen.cluster.gpus_in_pool("inference"),
            }
        )
        print(f"  {trace:34} {scenario:18} {solution:32} {wall:6.1f} s", flush=True)
    return out


def _fmt(v: Any, kind: str) -> str:
    if v is None:
        return "NA"
    if kind == "s":
        return f"{v:,.0f}"
    if kind == "u":
        return f"{v:.2f}"
    return f"{v:.1%}"


def results_markdown(rows: list[dict[str, Any]]) -> str:
    """Tab. 5's structure, one table per trace, plus the headline ratios vs the Baseline."""
    lines = []
    for trace in dict.fromkeys(r["trace"] for r in rows):
        part = [r for r in rows if r["trace"] == trace]
        r0 = part[0]
        lines.append(
            f"### {trace}: {r0['jobs']} jobs ({r0['elastic_jobs']} elastic), "
            f"{r0['training_gpus']} training GPUs + {r0['inference_gpus']} "
            "normalised inference GPUs\n"
        )
        lines.append(
            f"Highest training usage any schedule can reach over the window "
            f"(`window_usage_bound`): {r0['usage_bound']:.3f}\n"
        )
        lines.append(
            "| Scenario | Solution | QT mean | QT median | QT p95 | JCT mean | "
            "JCT median | JCT p95 | Usage training | Usage overall | "
            "Usage overall (raw) | Preemption ratio | Lost work (GPU-h) | Collateral | "
            "Reclaim met by flexible | Unfinished |"
        )
        lines.append("|---" * 16 + "|")
        for r in part:
            lines.append(
                f"| {r['scenario']} | {r['solution']} | {_fmt(r['qt_mean'], 's')} | "
                f"{_fmt(r['qt_median'], 's')} | {_fmt(r['qt_p95'], 's')} | "
                f"{_fmt(r['jct_mean'], 's')} | {_fmt(r['jct_median'], 's')} | "
                f"{_fmt(r['jct_p95'], 's')} | {_fmt(r['usage_training'], 'u')} | "
                f"{_fmt(r['usage_overall'], 'u')} | {_fmt(r['usage_overall_raw'], 'u')} | "
                f"{_fmt(r['preemption_ratio'], '%')} | "
                f"{r['lost_gpu_h']:,.0f} | "
                f"{_fmt(r['collateral'], '%')} | {_fmt(r['met_by_flexible'], '%')} | "
                f"{r['unfinished']} |"
            )
        base = part[0]
        lines.append("")
        for r in part[1:]:
            if base["qt_mean"] and r["qt_mean"] and base["jct_mean"] and r["jct_mean"]:
                lines.append(
                    f"* {r['scenario']} / {r['solution']}: queueing "
                    f"{base['qt_mean'] / r['qt_mean']:.2f}x, JCT "
                    f"{base['jct_mean'] / r['jct_mean']:.2f}x, overall usage "
                    f"{(r['usage_overall'] / base['usage_overall'] - 1):+.1%} (raw "
                    f"{(r['usage_overall_raw'] / base['usage_overall_raw'] - 1):+.1%}) "
                    "vs Baseline"
                    + (
                        f" ({r['hetero_jobs']} jobs flagged heterogeneous, {r['mixed_jobs']} "
                        "ran on mixed GPU types)"
                        if r["hetero_jobs"]
                        else ""
                    )
                )
        lines.append("")
    return "\n".join(lines)


def results(seed: int = 0, paper: bool = False) -> list[dict[str, Any]]:
    """Replay both traces under every configuration; print the markdown tables. ``paper``:
    the rebuilt paper setting (``PAPER_SETTING``, ``PAPER_CONFIGS``) instead."""
    rows: list[dict[str, Any]] = []
    for trace, spec in result_traces().items():
        if paper:
            rows += run_result(trace, spec, PAPER_CONFIGS, seed=seed, setting=PAPER_SETTING)
        else:
            rows += run_result(trace, spec, seed=seed)
    print(results_markdown(rows))
    return rows


def bench_plain_models(limit_s: float = 5.0) -> list[dict[str, Any]]:
    """The exact models without their speed-ups, to show what the speed-ups buy: the reclaim
    ILP without component enumeration, the MCKP without LP reduced-cost fixing (seed 0)."""
    rows = []
    for n in (50, 100, 200):
        inst = reclaim_layout(n, 0)
        count = round(0.1 * n)
        best = len(evaluate(inst, select_exact(inst, count, time_limit_s=limit_s)[0]).preempted)
        for backend in ("cp-sat", "pulp-cbc"):
            (sel, stats), ms = _timed(
                lambda inst=inst, count=count, b=backend: select_exact(
                    inst, count, backend=b, time_limit_s=limit_s, enumerate_limit=0
                )
            )
            rows.append(
                {
                    "model": f"reclaim ILP, {n} servers, {backend}",
                    "ms": ms,
                    "status": stats.status,
                    "quality": len(evaluate(inst, sel).preempted),
                    "optimum": best,
                }
            )
    for gpus, jobs in MCKP_SIZES[2:]:
        groups = mckp_instance(jobs, 0)
        res, ms = _timed(
            lambda g=groups, c=gpus: solve_exact(g, c, time_limit_s=limit_s, reduce=False)
        )
        rows.append(
            {
                "model": f"MCKP steps, no fixing, {gpus} GPUs/{jobs} jobs",
                "ms": ms,
                "status": res.stats.status if res.stats else "?",
                "quality": res.value / solve_dp(groups, gpus).value,
                "optimum": 1,
            }
        )
    return rows


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    out: dict[str, Any] = {}
    if "paper" in argv:  # the rebuilt paper setting only (about 5 minutes)
        out["paper"] = results(paper=True)
        return out
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; times are the best "
        "of several runs (ms), ratios are against the reference measured here"
    )
    for demand in (0.1, 0.3):
        out[f"reclaim_{demand}"] = bench_reclaim(demand=demand)
        _print_reclaim(out[f"reclaim_{demand}"], demand)
        print()
    out["mckp"] = bench_mckp()
    _print_mckp(out["mckp"])
    print()
    print(
        "Without the speed-ups (time limit 5 s): quality = preemptions, or value / DP value; "
        "optimum = the decomposed model's / 1"
    )
    out["plain"] = bench_plain_models()
    for r in out["plain"]:
        print(
            f"  {r['model']:46} {r['ms']:9.1f} ms  {r['status']:9} quality {r['quality']:.5g}"
            f" (optimum {r['optimum']:.5g})"
        )
    if "results" in argv:
        print()
        out["results"] = results()
    return out


if __name__ == "__main__":
    main()
