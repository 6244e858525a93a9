"""OJPAP inside the simulation loop (paper 002 Alg. 4, Fig. 10): benefit vs migration cost.

``python -m tests.bench.ojpp_online_run [--quick] [--out docs/results]``. Every run is the
simulator with OJPP's runtime model (``OjppInterference``: the placeholder matrix plus
collisions; observations draw a 100-iteration collision window from the seed) under ``fifo``
+ the ``ojpp`` wrapper at the paper's (tau, theta-bar, theta') = (0.1, 0.1, 0.2), with and
without OJPAP (a = 0.7, hold 3, rounds every 600 s, trigger at theta-bar + 0.05 for the
collision noise, budget c-bar = 0.05 per adjustment, migration pause = the scenarios'
``migrate_s`` = 30 s).

* **Queues**: the four embedded queues (all jobs at t = 0), the wrapper believing either the
  true matrix (``ojpp-paper``'s) or its conservative default prediction (0.1 across types,
  0.2 within one: what the wrapper assumes with no matrix).
* **Drift**: the Average queue at t = 0, then single-worker ResNet and VGG19 jobs arriving
  every 20 min from t = 3 h, with the wrapper believing the true matrix except for the two
  new models, predicted harmless (0.05: an AIP miss on new models). Interference rises as
  they land, the situation of Fig. 10. Its trace (observed max/mean per-GPU slowdown per
  round, EWMA, adjustments) is the interference-over-time plot ``ojpp-ojpap.png``; the
  baseline trace comes from a monitor-only run (budget 0: it observes but never moves).

Benefit: mean JCT and makespan against the run without OJPAP (same seed, same everything
else). Cost: migrations x migrate_s, as a share of all jobs' standalone time, of the moved
jobs' standalone time, and of the JCT saved.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from gpuplan import api
from gpuplan.executors.simulator.run import simulate
from gpuplan.models import JobSpec
from gpuplan.scenarios.ojpp_interference import OjppInterference
from gpuplan.scenarios.ojpp_workloads import interference_matrix
from gpuplan.solver_core.params import PolicyConfig
from gpuplan.solver_core.registry import make_policy

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


def _believed(name: str) -> dict[str, dict[str, float]] | None:
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


def _policy(ojpap: bool, believed: str, budget: float | None = None) -> Any:
    """The bench's wrapper; with ``budget`` (the monitor-only baseline) OJPAP observes but
    neither moves workers nor lets its learned floors steer new placements."""
    values: dict[str, Any] = {**BASE, "ojpap": ojpap}
    matrix = _believed(believed)
    if matrix is not None:
        values["interference"] = matrix
    if budget is not None:
        values["ojpap_budget"] = budget
        values["ojpap_floors_place"] = False
    cfg = PolicyConfig(name="ojpp-bench", base="fifo", wrappers=("ojpp",), values=values)
    return make_policy("ojpp-bench", SEED, configs={"ojpp-bench": cfg})


def _drift_jobs() -> tuple[Any, list[JobSpec]]:
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


def _standalone(jobs: list[JobSpec]) -> float:
    """Sum of the jobs' standalone times (dedicated GPUs, no interference)."""
    return sum(j.work / j.throughput.rate(j.requested_gpus) for j in jobs)


def _run(prepared: Any, jobs: list[JobSpec], policy: Any) -> dict[str, Any]:
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
    assert len(done) == len(jobs), "every job must finish"
    migrations = sum(r.migrations for r in result.jobs)
    memory = getattr(policy, "memory", None)
    moved = {r.job_id for r in result.jobs if r.migrations}
    return {
        "mean_jct_s": sum(r.jct for r in done if r.jct is not None) / len(done),
        "makespan_s": max(r.finish_time for r in done if r.finish_time is not None),
        "migrations": migrations,
        "pause_s": migrations * prepared.spec.overheads.migrate_s,
        "moved_standalone_s": _standalone([j for j in jobs if j.id in moved]),
        "jct": {r.job_id: r.jct for r in done},
        "moved": sorted(moved),
        "adjustments": sum(1 for row in getattr(memory, "trace", []) if row["moves"]),
        "trace": list(getattr(memory, "trace", [])),
        "wall_s": time.perf_counter() - t0,
    }


def _strip(run: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in run.items() if k not in ("trace", "jct")}


def _compare(prepared: Any, jobs: list[JobSpec], believed: str) -> dict[str, Any]:
    off = _run(prepared, jobs, _policy(False, believed))
    on = _run(prepared, jobs, _policy(True, believed))
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
        "cost_share": on["pause_s"] / _standalone(jobs),
        "cost_share_moved": on["pause_s"] / on["moved_standalone_s"]
        if on["moved_standalone_s"]
        else 0.0,
        "cost_per_saved": on["pause_s"] / saved if saved > 0 else None,
        "trace": on["trace"],
    }


def run(quick: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"queues": {}, "drift": {}}
    for queue in QUEUES[:1] if quick else QUEUES:
        prepared = api.prepare(f"ojpp-{queue}")
        for believed in ("true", "default"):
            row = _compare(prepared, list(prepared.jobs), believed)
            row.pop("trace")
            out["queues"][f"{queue}/{believed}"] = row
    prepared, jobs = _drift_jobs()
    drift = _compare(prepared, jobs, DRIFT_BELIEF)
    drift["monitor_trace"] = _run(prepared, jobs, _policy(True, DRIFT_BELIEF, 0.0))["trace"]
    for key, trace in (("with", drift["trace"]), ("without", drift["monitor_trace"])):
        after = [row for row in trace if row["t"] >= ARRIVE_S and row["gpus"]]
        drift[f"interference_{key}"] = {
            "mean_of_max": sum(row["max"] for row in after) / len(after),
            "mean_of_mean": sum(row["mean"] for row in after) / len(after),
            "rounds_max_above_0.3": sum(row["max"] > 0.3 for row in after),
        }
    out["drift"] = drift
    return out


def plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drift = result["drift"]
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for trace, style, name in (
        (drift["monitor_trace"], ":", "without OJPAP"),
        (drift["trace"], "-", "with OJPAP"),
    ):
        hours = [row["t"] / 3600 for row in trace]
        ax.plot(hours, [row["max"] for row in trace], style, label=f"max GPU, {name}")
        ax.plot(hours, [row["mean"] for row in trace], style, label=f"mean GPU, {name}", alpha=0.7)
    ax.plot(
        [row["t"] / 3600 for row in drift["trace"]],
        [row["ewma_max"] for row in drift["trace"]],
        "--",
        lw=0.8,
        label="max EWMA",
    )
    for row in drift["trace"]:
        if row["moves"]:
            ax.axvline(row["t"] / 3600, color="red", lw=0.6, alpha=0.6)
    ax.axhline(BASE["theta_max"], color="grey", lw=0.8, label="theta-bar")
    ax.axvline(ARRIVE_S / 3600, color="black", lw=0.8, ls="-.", label="arrivals begin")
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel("observed slowdown per GPU")
    ax.set_title("OJPAP in the loop: arrivals from 3 h, adjustments (red)")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "ojpp-ojpap.png", dpi=110)
    plt.close(fig)


def _line(name: str, row: dict[str, Any]) -> str:
    off, on = row["off"], row["on"]
    per = row["cost_per_saved"]
    return (
        f"  {name:18s} mean JCT {off['mean_jct_s'] / 3600:6.2f} h -> "
        f"{on['mean_jct_s'] / 3600:6.2f} h ({100 * row['jct_gain']:+5.1f} %), makespan "
        f"{off['makespan_s'] / 3600:6.2f} -> {on['makespan_s'] / 3600:6.2f} h "
        f"({100 * row['makespan_gain']:+5.1f} %); {on['migrations']:3d} migrations in "
        f"{on['adjustments']:2d} adjustments, cost {100 * row['cost_share']:.2f} % of all "
        f"/ {100 * row['cost_share_moved']:.2f} % of the moved jobs' standalone time"
        + (f", {100 * per:.1f} % of the JCT saved" if per else "")
        + f"; moved jobs' JCT {100 * row['moved_jct_gain']:+.1f} %"
        + f" [{off['wall_s']:.1f} / {on['wall_s']:.1f} s wall]"
    )


def main(argv: list[str]) -> None:
    result = run(quick="--quick" in argv)
    print("queue/believed matrix: without -> with OJPAP")
    for name, row in result["queues"].items():
        print(_line(name, row))
    drift = result["drift"]
    print(_line(f"drift ({DRIFT_BELIEF})", drift))
    for key in ("without", "with"):
        i = drift[f"interference_{key}"]
        print(
            f"  drift interference from 3 h, {key:7s} OJPAP: per-round max GPU "
            f"{i['mean_of_max']:.3f} on average, mean GPU {i['mean_of_mean']:.3f}, "
            f"{i['rounds_max_above_0.3']} rounds with a GPU above 0.3"
        )
    if "--out" in argv:
        out = Path(argv[argv.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        plot(result, out)
        (out / "ojpp-ojpap.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
