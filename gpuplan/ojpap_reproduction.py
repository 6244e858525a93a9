"""OJPAP inside the simulation loop (paper 002 Alg. 4, Fig. 10): benefit against migration
cost, as the rows ``gpuplan reproduce ojpp-ojpap-queues`` and ``ojpp-ojpap-drift`` print.

Every run is the simulator with OJPP's runtime model (``OjppInterference``: the placeholder
matrix plus collisions; observations draw a 100-iteration collision window from the seed)
under ``fifo`` + the ``ojpp`` wrapper at the paper's (tau, theta-bar, theta') = (0.1, 0.1,
0.2), with and without OJPAP (a = 0.7, hold 3, rounds every 600 s, trigger at theta-bar + 0.05
for the collision noise, budget c-bar = 0.05 per adjustment, migration pause = the scenarios'
``migrate_s`` = 30 s).

* **Queues**: the four embedded queues (all jobs at t = 0), the wrapper believing either the
  true matrix (``ojpp-paper``'s) or its conservative default prediction (0.1 across types,
  0.2 within one: what the wrapper assumes with no matrix).
* **Drift**: the Average queue at t = 0, then single-worker ResNet and VGG19 jobs arriving
  every 20 min from t = 3 h, with the wrapper believing the true matrix except for the two
  new models, predicted harmless (0.05: an AIP miss on new models). Interference rises as
  they land, the situation of Fig. 10. Its trace (observed max/mean per-GPU slowdown per
  round, EWMA, adjustments) is the interference-over-time plot ``ojpp-ojpap.png``
  (``tests/bench/ojpp_online_run.py``); the baseline trace comes from a monitor-only run
  (budget 0: it observes but never moves).

Benefit: mean JCT and makespan against the run without OJPAP (same seed, same everything
else). Cost: migrations x migrate_s, as a share of all jobs' standalone time, of the moved
jobs' standalone time, and of the JCT saved. This module sits beside the public API (it runs
``gpuplan.api.prepare`` and the simulator), not in ``scenarios``, which the executors do not
serve.
"""

from __future__ import annotations

import time
from typing import Any

from gpuplan import api
from gpuplan.executors.simulator.run import simulate
from gpuplan.models import JobSpec
from gpuplan.scenarios.ojpp_interference import OjppInterference
from gpuplan.scenarios.ojpp_workloads import interference_matrix
from gpuplan.solver_core.params import PolicyConfig
from gpuplan.solver_core.registry import make_policy

Row = dict[str, Any]

QUEUES = ("mixed", "c-high", "i-high", "average")
ROUND_S, ARRIVE_S, ARRIVALS, SEED = 600.0, 3 * 3600.0, 8, 0
DRIFT_BELIEF = "new-blind"
BASE = {
    "tau_max": 0.1,
    "theta_max": 0.1,
    "theta_balance": 0.2,
    "ojpap_interval_s": ROUND_S,
    "ojpap_margin": 0.05,
    "ojpap_budget": 0.05,
    "ojpap_migration_s": 30.0,
}
"""The ``ojpp`` wrapper's settings in every run (OJPAP itself switched per run)."""


def believed_matrix(name: str) -> dict[str, dict[str, float]] | None:
    """The matrix the wrapper plans with: the truth, its default prediction (None), or the
    truth with ResNet and VGG19 predicted harmless (new models AIP got wrong)."""
    if name == "default":
        return None
    matrix = interference_matrix()
    if name == "new-blind":
        for row in matrix.values():
            row["VGG19"] = min(row["VGG19"], 0.05)
        matrix["ResNet"] = {b: min(v, 0.05) for b, v in matrix["ResNet"].items()}
    return matrix


def ojpp_policy(ojpap: bool, believed: str, budget: float | None = None) -> Any:
    """fifo + ``ojpp`` at :data:`BASE`; with ``budget`` (the monitor-only baseline) OJPAP
    observes but neither moves workers nor lets its learned floors steer new placements."""
    values: dict[str, Any] = {**BASE, "ojpap": ojpap}
    matrix = believed_matrix(believed)
    if matrix is not None:
        values["interference"] = matrix
    if budget is not None:
        values["ojpap_budget"] = budget
        values["ojpap_floors_place"] = False
    cfg = PolicyConfig(name="ojpp-bench", base="fifo", wrappers=("ojpp",), values=values)
    return make_policy("ojpp-bench", SEED, configs={"ojpp-bench": cfg})


def drift_jobs() -> tuple[Any, list[JobSpec]]:
    """The Average queue, then single-worker ResNet / VGG19 jobs (4-8 h alone) arriving every
    20 min from t = 3 h: each lands next to a worker of a running job."""
    base = api.prepare("ojpp-average")
    models = ("ResNet", "VGG19")
    profile = {
        m: next(j for j in api.prepare("ojpp-i-high").jobs if j.model == m).memory for m in models
    }
    heavy = [
        JobSpec(
            id=f"new-{n}",
            submit_time=ARRIVE_S + n * 1200.0,
            requested_gpus=1,
            total_iterations=3600.0 * (4 + n % 5),
            model=models[n % 2],
            memory=profile[models[n % 2]],
        )
        for n in range(ARRIVALS)
    ]
    return base, [*base.jobs, *heavy]


def standalone_s(jobs: list[JobSpec]) -> float:
    """Sum of the jobs' standalone times (dedicated GPUs, no interference)."""
    return sum(j.work / j.throughput.rate(j.requested_gpus) for j in jobs)


def run_once(prepared: Any, jobs: list[JobSpec], policy: Any) -> dict[str, Any]:
    """One simulated run under the true interference; every job must finish."""
    t0 = time.perf_counter()
    result, _, _ = simulate(
        prepared.cluster,
        jobs,
        policy,
        overheads=prepared.spec.overheads,
        seed=SEED,
        sample_interval_s=None,
        interference=OjppInterference(interference_matrix()),
    )
    done = [r for r in result.jobs if r.jct is not None and r.finish_time is not None]
    if len(done) != len(jobs):
        raise RuntimeError(f"{len(jobs) - len(done)} jobs did not finish")
    migrations = sum(r.migrations for r in result.jobs)
    memory = getattr(policy, "memory", None)
    moved = {r.job_id for r in result.jobs if r.migrations}
    return {
        "mean_jct_s": sum(r.jct for r in done if r.jct is not None) / len(done),
        "makespan_s": max(r.finish_time for r in done if r.finish_time is not None),
        "migrations": migrations,
        "pause_s": migrations * prepared.spec.overheads.migrate_s,
        "moved_standalone_s": standalone_s([j for j in jobs if j.id in moved]),
        "jct": {r.job_id: r.jct for r in done},
        "moved": sorted(moved),
        "adjustments": sum(1 for row in getattr(memory, "trace", []) if row["moves"]),
        "trace": list(getattr(memory, "trace", [])),
        "wall_s": time.perf_counter() - t0,
    }


def _strip(run: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in run.items() if k not in ("trace", "jct")}


def compare(prepared: Any, jobs: list[JobSpec], believed: str) -> dict[str, Any]:
    """The same jobs without and with OJPAP: gains, cost shares and the with-run's trace."""
    off = run_once(prepared, jobs, ojpp_policy(False, believed))
    on = run_once(prepared, jobs, ojpp_policy(True, believed))
    saved = (off["mean_jct_s"] - on["mean_jct_s"]) * len(jobs)
    moved = on["moved"]
    return {
        "moved_jct_gain": 1.0 - sum(on["jct"][j] for j in moved) / sum(off["jct"][j] for j in moved)
        if moved
        else 0.0,
        "believed": believed,
        "jobs": len(jobs),
        "off": _strip(off),
        "on": _strip(on),
        "jct_gain": 1.0 - on["mean_jct_s"] / off["mean_jct_s"],
        "makespan_gain": 1.0 - on["makespan_s"] / off["makespan_s"],
        "cost_share": on["pause_s"] / standalone_s(jobs),
        "cost_share_moved": on["pause_s"] / on["moved_standalone_s"]
        if on["moved_standalone_s"]
        else 0.0,
        "cost_per_saved": on["pause_s"] / saved if saved > 0 else None,
        "trace": on["trace"],
    }


def queues(quick: bool = False) -> dict[str, dict[str, Any]]:
    """``queue/believed`` -> :func:`compare` of that queue (trace dropped)."""
    out: dict[str, dict[str, Any]] = {}
    for queue in QUEUES[:1] if quick else QUEUES:
        prepared = api.prepare(f"ojpp-{queue}")
        for believed in ("true", "default"):
            row = compare(prepared, list(prepared.jobs), believed)
            row.pop("trace")
            out[f"{queue}/{believed}"] = row
    return out


def drift() -> dict[str, Any]:
    """The drift run: :func:`compare` plus the monitor-only trace and, for both, the
    interference observed from the first arrival on."""
    prepared, jobs = drift_jobs()
    result = compare(prepared, jobs, DRIFT_BELIEF)
    monitor = run_once(prepared, jobs, ojpp_policy(True, DRIFT_BELIEF, 0.0))
    result["monitor_trace"] = monitor["trace"]
    for key, trace in (("with", result["trace"]), ("without", result["monitor_trace"])):
        after = [row for row in trace if row["t"] >= ARRIVE_S and row["gpus"]]
        result[f"interference_{key}"] = {
            "mean_of_max": sum(row["max"] for row in after) / len(after),
            "mean_of_mean": sum(row["mean"] for row in after) / len(after),
            "rounds_max_above_0.3": sum(row["max"] > 0.3 for row in after),
        }
    return result


def queue_rows() -> list[Row]:
    """One row per queue and believed matrix (``true``, ``default``): without -> with OJPAP."""
    rows = []
    for name, r in queues().items():
        queue, believed = name.split("/")
        rows.append(
            {
                "queue": queue,
                "believed": believed,
                "jct_gain_pct": 100 * r["jct_gain"],
                "makespan_gain_pct": 100 * r["makespan_gain"],
                "migrations": r["on"]["migrations"],
                "adjustments": r["on"]["adjustments"],
                "cost_moved_pct": 100 * r["cost_share_moved"],
                "mean_jct_without_s": r["off"]["mean_jct_s"],
                "mean_jct_with_s": r["on"]["mean_jct_s"],
            }
        )
    return rows


def drift_rows() -> list[Row]:
    """Two rows, without and with OJPAP (gains and costs relative to the first, so 0 there):
    the interference observed from t = 3 h (the without row's from the monitor-only run,
    which observes without moving), mean JCT, makespan, migrations; the cost (migrations x
    30 s) as a share of all jobs' standalone time, of the moved jobs' and of the JCT saved."""
    r = drift()
    rows = []
    cost = (r["cost_share"], r["cost_share_moved"], r["cost_per_saved"] or 0.0)
    for key, run, gain, moved_gain, (cost_all, cost_moved, cost_saved) in (
        ("without", r["off"], 0.0, 0.0, (0.0, 0.0, 0.0)),
        ("with", r["on"], r["jct_gain"], r["moved_jct_gain"], cost),
    ):
        seen = r[f"interference_{key}"]
        rows.append(
            {
                "ojpap": key,
                "worst_gpu_mean": seen["mean_of_max"],
                "mean_gpu_mean": seen["mean_of_mean"],
                "rounds_above_0_3": seen["rounds_max_above_0.3"],
                "mean_jct_h": run["mean_jct_s"] / 3600,
                "makespan_h": run["makespan_s"] / 3600,
                "jct_gain_pct": 100 * gain,
                "moved_jct_gain_pct": 100 * moved_gain,
                "migrations": run["migrations"],
                "adjustments": run["adjustments"],
                "cost_all_pct": 100 * cost_all,
                "cost_moved_pct": 100 * cost_moved,
                "cost_saved_pct": 100 * cost_saved,
                "jobs": r["jobs"],
            }
        )
    return rows
