"""SideCar's reshaping counts and overhead on Workloads One to Four (paper 004 Table VIII) as
the rows ``gpuplan reproduce sidecar-reshaping`` prints.

A run's summary counts resizes, not their direction, and the paper's table splits them into
*adds* (a job grows) and *removes* (a job shrinks) and charges each its reshaping time. Both
come from the run's decision records here: every carried ``resize`` action with its GPU counts
before and after (the same records ``gpuplan simulate --decisions`` writes), paid at the run's
own per-direction cost (``Overheads.resize_cost_for``: for ``termination`` its declared cost
model, 242 s up and 204 s down; for ``sidecar`` the scenario's 37 s / 27 s, whose 83 s early
initialisation overlaps training and is not counted). The overhead is that reshaping time over
the sum of the jobs' JCTs, and, as a second denominator, over the sum of their running times
(finish minus first start). This sits beside the public API because it runs the simulator.
"""

from __future__ import annotations

from typing import Any

from gpuplan.api import policy_overheads, prepare, run
from gpuplan.executors.metrics import summarize
from gpuplan.models.errors import InputError
from gpuplan.models.reasons import DecisionRecord

Row = dict[str, Any]

WORKLOADS = (1, 2, 3, 4)
POLICIES = ("k8s-default", "termination", "sidecar")
"""Table VIII's approaches: the Kubernetes default (static), termination-based reshaping and
SideCar, in the page's row order."""


def reshaping_row(workload: int, policy: str) -> Row:
    """One run of ``policy`` on ``sidecar-wl<workload>``: makespan, average JCT, adds, removes,
    reshaping seconds and the two overhead ratios (per cent)."""
    prepared = prepare(f"sidecar-wl{workload}")
    costs = policy_overheads(prepared.spec.overheads, prepared.make_policy(policy))
    moves: list[tuple[int, int]] = []

    def record(decision: DecisionRecord) -> None:
        moves.extend(
            (a.gpus_before, a.gpus_after)
            for a in decision.actions
            if a.kind == "resize" and a.carried
        )

    result = run(prepared, policy, reasons=record)
    summary = summarize(result)
    jobs = result.jobs
    if any(j.jct is None or j.first_start is None for j in jobs):
        raise InputError(f"sidecar-wl{workload}: {policy} left jobs unfinished")
    adds = sum(1 for before, after in moves if after > before)
    removes = len(moves) - adds
    reshaping_s = adds * costs.resize_cost_for(True) + removes * costs.resize_cost_for(False)
    total_jct = sum(j.jct for j in jobs)  # type: ignore[misc]
    total_running = sum(j.finish_time - j.first_start for j in jobs)  # type: ignore[operator]
    return {
        "workload": workload,
        "policy": policy,
        "makespan_s": summary.makespan_s,
        "avg_jct_s": summary.avg_jct_s,
        "resizes": summary.resizes,
        "adds": adds,
        "removes": removes,
        "reshaping_s": reshaping_s,
        "overhead_pct": 100.0 * reshaping_s / total_jct,
        "overhead_running_pct": 100.0 * reshaping_s / total_running,
    }


def rows() -> list[Row]:
    """Every workload's three approaches, in the page's order (workload, then policy)."""
    return [reshaping_row(w, p) for w in WORKLOADS for p in POLICIES]
