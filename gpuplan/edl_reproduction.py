"""EDL's synthetic 32-GPU experiment (paper 003 §6.3) as the rows ``gpuplan reproduce
edl-synthetic`` prints: cluster and per-GPU throughput over time, Static against Elastic.

The paper's setting: 16 jobs, one every 30 s, on 4 machines of 8 GPUs; Static gives each job
its 4 requested GPUs (``fifo``), Elastic (``edl-elastic``) lets a job scale out onto idle GPUs
and back as others arrive. The paper names no models, so the jobs take turns over three
concave speed-up curves (:data:`CURVES`: one near-linear, one middling, one that saturates
early), every job elastic in [1, 8] GPUs and long enough to run past the last arrival.
Cluster throughput is the sum over running jobs of ``S(p) / S(1)`` (each job's speed-up on the
GPUs it holds), per-GPU throughput that over the GPUs in use, both after the last decision at
each sampled instant (the simulator's ``on_plan`` hook records every plan). This sits beside
the public API because it runs the simulator.
"""

from __future__ import annotations

from typing import Any

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import Cluster, ClusterView, Elasticity, JobSpec
from gpuplan.solver_core.registry import make_policy

Row = dict[str, Any]

CURVES: tuple[dict[int, float], ...] = (
    {1: 1.0, 2: 1.95, 4: 3.7, 8: 6.6},
    {1: 1.0, 2: 1.9, 4: 3.4, 8: 5.6},
    {1: 1.0, 2: 1.7, 4: 2.6, 8: 3.4},
)
"""Speed-up S(p) at 1, 2, 4 and 8 GPUs (linear in between): job ``i`` uses ``CURVES[i % 3]``."""
JOBS, EVERY_S, REQUEST = 16, 30.0, 4
INSTANTS = (0.0, 90.0, 210.0, 300.0, 450.0)
"""The instants the page's table shows: the first arrival, the fourth (the machines are
each one job's), the eighth (Static's GPUs are all taken), a mid point and the last arrival."""


def synthetic_jobs() -> list[JobSpec]:
    """The 16 jobs: one every 30 s, 4 GPUs requested, elastic in [1, 8], far from done."""
    return [
        JobSpec(
            id=f"j{i:02d}",
            submit_time=EVERY_S * i,
            requested_gpus=REQUEST,
            total_iterations=1e9,
            throughput={"points": CURVES[i % len(CURVES)]},
            elasticity=Elasticity(min_gpus=1, max_gpus=8),
        )
        for i in range(JOBS)
    ]


def allocations(policy: str) -> dict[float, dict[str, int]]:
    """GPUs per running job after the last decision at each decision instant."""
    seen: dict[float, dict[str, int]] = {}

    def hook(view: ClusterView, plan: Any) -> None:
        seen[view.now] = {j: a.gpus for j, a in plan.allocations.items()}

    simulate(
        Cluster.uniform(4, 8, "v100"),
        synthetic_jobs(),
        make_policy(policy),
        on_plan=hook,
        horizon_s=INSTANTS[-1] + EVERY_S,
        sample_interval_s=None,
    )
    return seen


def _throughput(held: dict[str, int], jobs: dict[str, JobSpec]) -> tuple[float, int]:
    """Sum of S(p) / S(1) over the jobs holding GPUs, and the GPUs they hold."""
    total = sum(
        jobs[j].throughput.rate(p) / jobs[j].throughput.rate(1) for j, p in held.items() if p
    )
    return total, sum(held.values())


def _at(seen: dict[float, dict[str, int]], t: float) -> dict[str, int]:
    """The allocation in force at ``t``: the last decision at or before it."""
    return seen[max(s for s in seen if s <= t)]


def rows() -> list[Row]:
    """One row per instant of :data:`INSTANTS`: Static's and Elastic's cluster throughput,
    GPUs in use and throughput per GPU."""
    jobs = {j.id: j for j in synthetic_jobs()}
    static, elastic = allocations("fifo"), allocations("edl-elastic")
    out = []
    for t in INSTANTS:
        row: Row = {"t_s": t}
        for name, seen in (("static", static), ("elastic", elastic)):
            held = _at(seen, t)
            total, gpus = _throughput(held, jobs)
            row[f"{name}_throughput"] = total
            row[f"{name}_gpus"] = gpus
            row[f"{name}_per_gpu"] = total / gpus if gpus else 0.0
            row[f"{name}_jobs"] = sum(1 for p in held.values() if p)
        out.append(row)
    return out
