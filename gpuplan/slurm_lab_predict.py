"""The simulator's prediction of the Slurm lab benchmark (docs/results/slurm.md): the same jobs
on 16 simulated GPUs with the lab's measured per-start and restart costs, and with free control.

``gpuplan reproduce slurm-prediction`` prints :func:`prediction_rows` (the doc's prediction
table, :func:`prediction_table`); ``slurm-prediction-startups`` the same with the H200
measurements' 11-16 s start-up paid at every start (Run S's setting); ``slurm-start-cost`` each
mode at the other side's per-start cost (:func:`start_cost_rows`). The lab harness
(``tests.bench.slurm_vs_native``) puts :func:`predict` beside each measured row. It lives beside
the public API, not in ``scenarios``, because it runs the simulator.
"""

from __future__ import annotations

import statistics
from typing import Any

from gpuplan.executors.restart_gate import gate_for_scenario
from gpuplan.executors.simulator.run import simulate
from gpuplan.models import (
    Cluster,
    Elasticity,
    JobSpec,
    Node,
    NodeShape,
    Overheads,
    ThroughputProfile,
)
from gpuplan.models.scenario import RestartGateSpec
from gpuplan.slurm_lab import (
    BASELINES,
    DEFAULT_JOBS,
    DEFAULT_MODES,
    LAB_GPUS_PER_NODE,
    LAB_NODES,
    REFERENCE,
    Item,
    drain_bound,
    p95,
    startup_mean,
    workload,
)
from gpuplan.solver_core.registry import make_policy

SLURM_START_S = 0.4
"""Seconds from GPUs freed (or a job's arrival on free GPUs) to its job running under Slurm
alone: Slurm's own turnover (0.32 s mean, docs/results/slurm.md) plus the stand-in's start."""
CONTROLLER_START_S = 1.0
"""The same under the controller: the arrival probe's lag (0.49 s median to the first
decision) plus release -> running (0.3-0.7 s per start, journal intent to Slurm's start)."""
LAB_RESTART_S = 2.5
"""A checkpoint-restart of the stand-in on the lab: 1.6 s resize latency end to end (journal)
plus the progress since its last checkpoint (2-s interval: 1 s on average)."""
RUN_S_STARTUP = "uniform:11:16"
"""Run S's stand-in start-up: the H200 measurements' 11-16 s from a fresh process to the first
training step (../shared/measurements/h200-restart/)."""

Prediction = dict[str, float]
"""``drain``, ``mean`` and ``p95`` seconds: the keys of a recorded row's ``lab`` and ``sim``."""


def lab_overheads(
    mode: str, startup_s: float = 0.0, *, free: bool = False, start_s: float | None = None
) -> Overheads:
    """What the simulator charges per start and restart to predict ``mode`` on the lab
    (``startup_s``: the stand-in's mean start-up cost, paid at every start and restart).
    ``free``: nothing at all (what a policy could do with instant, free control). ``start_s``:
    charge this per start instead of the mode's measured cost (what-if: Slurm alone at the
    controller's cost, a policy at Slurm's)."""
    if free:
        return Overheads(start_s=0.0, restart_s=0.0, migrate_s=0.0)
    if start_s is None:
        start_s = SLURM_START_S if mode in BASELINES else CONTROLLER_START_S
    start = start_s + startup_s
    return Overheads(
        start_s=start, restart_s=LAB_RESTART_S + startup_s, migrate_s=LAB_RESTART_S + startup_s
    )


def predict(
    items: list[Item],
    mode: str,
    startup_s: float = 0.0,
    *,
    free: bool = False,
    start_s: float | None = None,
) -> Prediction | None:
    """The simulator's run of the same jobs on the lab's 16 GPUs, single-node shapes. Slurm
    alone (``--nodes=1``) is rigid first-fit in submission order (``fifo-backfill``: Slurm's
    backfill with no time limits starts any job that fits); a policy runs with the restart
    gate on, as the controller does. None where no simulated counterpart exists (the
    multifactor and split-prone ``--gpus`` baselines)."""
    if mode in ("slurm-multifactor", "slurm-gpus"):
        return None
    rigid = mode in BASELINES
    specs = [
        JobSpec(
            id=it.name,
            submit_time=it.at,
            requested_gpus=it.gpus,
            total_iterations=it.work,
            elasticity=None
            if rigid or it.lo == it.hi
            else Elasticity(min_gpus=it.lo, max_gpus=it.hi),
            node_shape=NodeShape(max_nodes=1),
            throughput=ThroughputProfile.linear(1.0, reference_gpu="a100"),
        )
        for it in items
    ]
    cluster = Cluster(
        nodes=[
            Node(name=f"node{k}", gpus=LAB_GPUS_PER_NODE, gpu_type="a100")
            for k in range(1, LAB_NODES + 1)
        ]
    )
    overheads = lab_overheads(mode, startup_s, free=free, start_s=start_s)
    gate = None if rigid or free else gate_for_scenario(RestartGateSpec(enabled=True), overheads)
    result, _, _ = simulate(
        cluster,
        specs,
        make_policy("fifo-backfill" if rigid else mode, seed=0),
        overheads=overheads,
        sample_interval_s=None,
        restart_gate=gate,
    )
    jcts = [r.jct for r in result.jobs if r.jct is not None]
    ends = [r.finish_time for r in result.jobs if r.finish_time is not None]
    return {"drain": max(ends), "mean": statistics.mean(jcts), "p95": p95(jcts)}


def prediction_rows(
    items: list[Item], modes: list[str] | tuple[str, ...], startup_s: float = 0.0
) -> list[dict[str, Any]]:
    """Per mode with a simulated counterpart: the simulator's drain and mean JCT with the lab's
    costs and with none (``free_``: instant, free control), each also as a ratio (``_x``) to
    Slurm alone's prediction under the same costs and to the drain's lower bound
    (``_x_bound``, start-ups not counted). Flat objects, the table's columns and those two."""
    ref = predict(items, REFERENCE, startup_s)
    free_ref = predict(items, REFERENCE, startup_s, free=True)
    assert ref is not None and free_ref is not None  # slurm-nodes1 is always simulated
    bound, rows = drain_bound(items), []
    for mode in modes:
        got, free = predict(items, mode, startup_s), predict(items, mode, startup_s, free=True)
        if got is None or free is None:
            continue
        rows.append(
            {
                "mode": mode,
                "drain_s": got["drain"],
                "drain_x": got["drain"] / ref["drain"],
                "drain_x_bound": got["drain"] / bound,
                "mean_jct_s": got["mean"],
                "mean_jct_x": got["mean"] / ref["mean"],
                "free_drain_s": free["drain"],
                "free_drain_x": free["drain"] / free_ref["drain"],
                "free_drain_x_bound": free["drain"] / bound,
                "free_mean_jct_s": free["mean"],
                "free_mean_jct_x": free["mean"] / free_ref["mean"],
            }
        )
    return rows


def prediction_table(
    items: list[Item], modes: list[str] | tuple[str, ...], startup_s: float = 0.0
) -> str:
    """Markdown of :func:`prediction_rows` (docs/results/slurm.md's prediction table)."""
    lines = [
        "| mode | drain s | x nodes1 | mean JCT s | x nodes1 | free: drain s | x | "
        "free: mean JCT s | x |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in prediction_rows(items, modes, startup_s):
        lines.append(
            f"| {r['mode']} | {r['drain_s']:.1f} | {r['drain_x']:.2f} | "
            f"{r['mean_jct_s']:.1f} | {r['mean_jct_x']:.2f} | {r['free_drain_s']:.1f} | "
            f"{r['free_drain_x']:.2f} | {r['free_mean_jct_s']:.1f} | "
            f"{r['free_mean_jct_x']:.2f} |"
        )
    return "\n".join(lines)


def rows() -> list[dict[str, Any]]:
    """``gpuplan reproduce slurm-prediction``: the doc's prediction table, 200 jobs, every
    default mode with a simulated counterpart, the stand-in's instant start."""
    return prediction_rows(workload(DEFAULT_JOBS), DEFAULT_MODES)


def startup_rows() -> list[dict[str, Any]]:
    """``gpuplan reproduce slurm-prediction-startups``: the same with Run S's 11-16 s start-up
    (its mean, 13.5 s) paid at every start and restart."""
    return prediction_rows(workload(DEFAULT_JOBS), DEFAULT_MODES, startup_mean(RUN_S_STARTUP))


def start_cost_rows() -> list[dict[str, Any]]:
    """``gpuplan reproduce slurm-start-cost``: what the per-start cost alone does. Every default
    mode with a simulated counterpart at the other side's measured cost: Slurm alone charged the
    controller's 1.0 s per start (how much of the lab's gap the start cost explains), each
    policy Slurm's own 0.4 s (what starting jobs as fast as Slurm, "release ahead", would give);
    restarts as measured. Ratios (``_x``) to Slurm alone at its own 0.4 s."""
    items = workload(DEFAULT_JOBS)
    ref = predict(items, REFERENCE)
    assert ref is not None
    out = []
    for mode in DEFAULT_MODES:
        start_s = CONTROLLER_START_S if mode in BASELINES else SLURM_START_S
        got = predict(items, mode, start_s=start_s)
        if got is None:
            continue
        out.append(
            {
                "mode": mode,
                "start_s": start_s,
                "drain_s": got["drain"],
                "drain_x": got["drain"] / ref["drain"],
                "mean_jct_s": got["mean"],
                "mean_jct_x": got["mean"] / ref["mean"],
            }
        )
    return out
