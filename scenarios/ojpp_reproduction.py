"""The OJPP paper's static-placement experiments (paper 002 §5) as rows of numbers.

docs/results/ojpp.md prints these rows: Table 5 (performance and GPUs saved at six bound
settings), the per-queue split at the default bounds, the strategies per workload (Figs. 5
and 8), the degradation per job type (Fig. 7), the balance ablation (Fig. 9), AIP's held-out
error and the placement cost of planning with predicted interference. Each experiment places
the four embedded queues (:mod:`.ojpp_workloads`, seed 0) with one of the part-A solvers and
scores the plan with :func:`.ojpp_interference.plan_slowdowns` (matrix slowdown plus collision
penalty, a job at its slowest worker). ``gpuplan reproduce ojpp-*`` prints them
(``gpuplan.reproductions``); ``tests/bench/ojpp_table5.py`` draws the figures from the same
functions.

The experiments are deterministic: the queues are drawn with a fixed seed and every solver
used here is a heuristic without randomness (AIP's splits take the seeds they are given).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuplan.models.ojpp import OjppInstance
from gpuplan.solver_core.policies.ojpp import check_solution, solve

from .ojpp_interference import performance, plan_slowdowns
from .ojpp_workloads import QUEUES, TYPES, interference_matrix, ojpp_instance_data, workload

Row = dict[str, Any]

SETTINGS = [
    (0.05, 0.1, 0.1),
    (0.05, 0.2, 0.1),
    (0.05, 0.4, 0.1),
    (0.1, 0.2, 0.1),
    (0.1, 0.2, 0.2),
    (0.1, 0.4, 0.2),
]
"""(tau_max, theta_balance, theta_max): Table 5's header order (tau, theta', theta-bar)."""
PAPER_T5 = [(99.96, 17), (94.23, 39), (84.37, 57), (92.97, 46), (87.96, 52), (83.17, 61)]
"""Table 5 of the paper: (performance %, reduction %) per setting."""
STRATEGIES = ["best-fit", "i-greedy", "b-greedy", "c-greedy", "heuristic"]
"""The part-A solvers compared in Figs. 5, 7 and 8; ``heuristic`` is OJPP's Alg. 3."""
DEFAULT = (0.1, 0.2, 0.1)
"""The paper's default bounds (tau, theta', theta-bar)."""
ABLATION_WORKERS = (1, 2, 4, 6, 8, 10)
"""Fig. 9's worker counts (every Mixed job at w workers)."""
AIP_SEEDS = (0, 1, 2)
STAND_INS = {  # paper type -> Gavel job type whose measured pairs stand in for it
    "LeNet": "ResNet-18 (batch size 16)",
    "LSTM": "LM (batch size 20)",
    "ResNet": "ResNet-50 (batch size 64)",
    "VGG19": "Transformer (batch size 64)",
    "AlexNet": "Recommendation (batch size 1024)",
    "CNN": "A3C",
}
GAVEL_TABLE = "gavel/simulation_throughputs.json"
"""Gavel's measured pair throughputs, in the shared traces folder (AIP's training data)."""


def field(name: str) -> str:
    """``c-high`` / ``AlexNet`` as a row field's prefix (``c_high``, ``alexnet``)."""
    return name.lower().replace("-", "_")


def place_and_score(
    queue: str,
    setting: tuple[float, float, float],
    solver: str,
    matrix: dict[str, dict[str, float]] | None = None,
    score: dict[str, dict[str, float]] | None = None,
) -> dict[str, float]:
    """Place ``queue`` with ``solver`` (planning with ``matrix``), score under ``score``:
    GPUs used, workers, reduction (1 - GPUs / workers), performance (mean standalone over
    mean co-located time) and slowdown (1 / performance - 1)."""
    tau, bal, theta = setting
    jobs = workload(queue)
    inst = OjppInstance.model_validate(ojpp_instance_data(jobs, tau, theta, bal, matrix=matrix))
    answer = solve(inst, solver)
    if answer.gpus is None:
        raise RuntimeError(f"{solver} placed nothing for queue {queue} at {setting}")
    if solver == "heuristic":
        violations = check_solution(inst, answer.gpus)
        if violations:
            raise RuntimeError(f"Alg. 3 broke the constraints on {queue}: {violations[:3]}")
    slow = plan_slowdowns(inst, answer.gpus, matrix=score)
    perf = performance(slow, {j.id: j.standalone_s for j in jobs})
    return {
        "gpus": len(answer.gpus),
        "workers": inst.total_workers,
        "reduction": 1.0 - len(answer.gpus) / inst.total_workers,
        "performance": perf,
        "slowdown": 1.0 / perf - 1.0,
    }


def table5() -> list[dict]:
    """Table 5: Alg. 3 at each setting, per queue and the mean over the four queues."""
    rows = []
    for setting, paper in zip(SETTINGS, PAPER_T5, strict=True):
        per = {q: place_and_score(q, setting, "heuristic") for q in QUEUES}
        rows.append(
            {
                "setting": setting,
                "paper": paper,
                "queues": per,
                "performance": sum(r["performance"] for r in per.values()) / len(per),
                "reduction": sum(r["reduction"] for r in per.values()) / len(per),
            }
        )
    return rows


def strategies() -> dict[str, dict[str, dict[str, float]]]:
    """Every strategy on every queue at the default bounds."""
    return {s: {q: place_and_score(q, DEFAULT, s) for q in QUEUES} for s in STRATEGIES}


def per_model(queue: str = "mixed") -> dict[str, dict[str, dict[str, float]]]:
    """Fig. 7: degradation of each job type of ``queue`` under each strategy at the default
    bounds -- mean co-located over mean standalone time of that type's jobs, minus 1 (the
    per-type restriction of :func:`performance`)."""
    jobs = workload(queue)
    tau, bal, theta = DEFAULT
    inst = OjppInstance.model_validate(ojpp_instance_data(jobs, tau, theta, bal))
    out: dict[str, dict[str, dict[str, float]]] = {}
    for s in STRATEGIES:
        answer = solve(inst, s)
        if answer.gpus is None:
            raise RuntimeError(f"{s} placed nothing for queue {queue}")
        slow = plan_slowdowns(inst, answer.gpus)
        out[s] = {}
        for t in sorted({j.type for j in jobs}):
            mine = {j.id: j.standalone_s for j in jobs if j.type == t}
            perf = performance({j: slow[j] for j in mine}, mine)
            out[s][t] = {
                "slowdown": 1.0 / perf - 1.0,
                "jobs": len(mine),
                "worst": max(slow[j] for j in mine),
            }
    return out


def ablation(workers: tuple[int, ...] = ABLATION_WORKERS) -> list[dict]:
    """Fig. 9: the Mixed queue with every job at ``w`` workers, OJPP with balance
    (theta' = 0.1) and without (theta' = 100) at tau = 0.1, theta-bar = 0.4 (theta' can bind
    only below theta-bar, see docs/results/ojpp.md)."""
    rows = []
    for w in workers:
        jobs = [replace(j, workers=w) for j in workload("mixed")]
        row: dict = {"workers": w}
        for label, bal in (("balance", 0.1), ("no_balance", 100.0)):
            inst = OjppInstance.model_validate(ojpp_instance_data(jobs, 0.1, 0.4, bal))
            answer = solve(inst, "heuristic")
            if answer.gpus is None:
                raise RuntimeError(f"Alg. 3 placed nothing at {w} workers")
            perf = performance(
                plan_slowdowns(inst, answer.gpus), {j.id: j.standalone_s for j in jobs}
            )
            row[label] = {"slowdown": 1.0 / perf - 1.0, "gpus": len(answer.gpus)}
        rows.append(row)
    return rows


def aip(seeds: tuple[int, ...] = AIP_SEEDS, traces: str | None = None) -> dict:
    """Held-out error on unseen Gavel pairs (:func:`aip_held_out`) and the placement cost of
    planning with the predicted instead of the measured matrix (:func:`aip_placement_cost`)."""
    samples, rates = _gavel_pairs(traces)
    return {"held_out": aip_held_out(seeds, samples, rates), **aip_placement_cost(samples, rates)}


def _gavel_pairs(traces: str | None) -> tuple[list, dict]:
    """Gavel's one-GPU pair samples and solo rates (needs scikit-learn for what follows: the
    ``ml`` extra; and Gavel's table in the shared traces)."""
    from .ojpp_predictor import pair_samples
    from .traces import resolve_trace_path

    return pair_samples(resolve_trace_path(GAVEL_TABLE, traces))


def aip_held_out(seeds: tuple[int, ...], samples: list, rates: dict) -> list[dict]:
    """Per seed: the model AIP selects on 80 % of the pairs and its error on the 20 % of
    unordered job-type pairs it never saw."""
    from .ojpp_predictor import errors, held_out_split, select_and_fit

    held = []
    for seed in seeds:
        train, test = held_out_split(samples, 0.2, seed)
        pred = select_and_fit(train, rates)
        held.append(
            {"seed": seed, "chosen": pred.name, "cv_mae": pred.cv_mae, **errors(pred, test)}
        )
    return held


def aip_placement_cost(samples: list, rates: dict) -> dict:
    """Six Gavel jobs stand in for the paper's networks (:data:`STAND_INS`); their measured
    V100 block, scaled to the placeholder matrix's mean, against the block a predictor
    trained without any pair inside it gives: each queue is placed with either matrix and
    both plans are scored under the measured one."""
    from .ojpp_predictor import select_and_fit

    gavel = set(STAND_INS.values())
    block = [s for s in samples if s.victim in gavel and s.aggressor in gavel]
    train = [s for s in samples if not (s.victim in gavel and s.aggressor in gavel)]
    pred = select_and_fit(train, rates)
    measured_raw = {(s.victim, s.aggressor): s.slowdown for s in block if s.worker == "v100"}
    predicted_raw = {(a, b): pred.predict("v100", a, b) for a, b in measured_raw}
    placeholder = interference_matrix()
    scale = (sum(placeholder[a][b] for a in TYPES for b in TYPES) / len(TYPES) ** 2) / (
        sum(measured_raw.values()) / len(measured_raw)
    )

    def as_matrix(raw: dict[tuple[str, str], float]) -> dict[str, dict[str, float]]:
        return {a: {b: scale * raw[(STAND_INS[a], STAND_INS[b])] for b in TYPES} for a in TYPES}

    measured, predicted = as_matrix(measured_raw), as_matrix(predicted_raw)
    cells = list(measured_raw)
    block_rel = sum(
        abs(predicted_raw[c] - measured_raw[c]) / (1 + measured_raw[c]) for c in cells
    ) / len(cells)
    cost = {}
    for s in STRATEGIES:
        per = {}
        for q in QUEUES:
            ideal = place_and_score(q, DEFAULT, s, matrix=measured, score=measured)
            got = place_and_score(q, DEFAULT, s, matrix=predicted, score=measured)
            per[q] = {
                "ideal": ideal["performance"],
                "predicted": got["performance"],
                "gpus_ideal": ideal["gpus"],
                "gpus_predicted": got["gpus"],
                "drop": 1.0 - got["performance"] / ideal["performance"],
            }
        cost[s] = {"queues": per, "drop": sum(v["drop"] for v in per.values()) / len(per)}
    return {
        "block": {"chosen": pred.name, "relative": block_rel, "scale": scale},
        "placement_cost": cost,
    }


# The rows ``gpuplan reproduce`` prints: flat fields, percentages as percent.


def table5_rows() -> list[Row]:
    """One row per Table 5 setting: ours (mean of the four queues) and the paper's."""
    return [
        {
            "tau_max": r["setting"][0],
            "theta_balance": r["setting"][1],
            "theta_max": r["setting"][2],
            "performance_pct": 100 * r["performance"],
            "reduction_pct": 100 * r["reduction"],
            "paper_performance_pct": r["paper"][0],
            "paper_reduction_pct": r["paper"][1],
        }
        for r in table5()
    ]


def queue_rows() -> list[Row]:
    """One row per queue at the default bounds (Alg. 3), with the queue's mean standalone
    time (dedicated GPUs, no queueing: what the CLI runs' "x standalone" divides by)."""
    rows = []
    for q in QUEUES:
        r = place_and_score(q, DEFAULT, "heuristic")
        jobs = workload(q)
        rows.append(
            {
                "queue": q,
                "mean_standalone_h": sum(j.standalone_s for j in jobs) / len(jobs) / 3600,
                "performance_pct": 100 * r["performance"],
                "reduction_pct": 100 * r["reduction"],
                "gpus": r["gpus"],
                "workers": r["workers"],
            }
        )
    return rows


def _per_strategy(
    table: dict[str, dict[str, dict[str, float]]], count: str, extra: dict[str, Row] | None = None
) -> list[Row]:
    """One row per strategy of ``table`` (strategy -> part -> result): each part's
    degradation in percent and its ``count`` field (GPUs, jobs), after ``extra``'s fields."""
    rows = []
    for s, per in table.items():
        row: Row = {"strategy": s, **(extra or {}).get(s, {})}
        for part, r in per.items():
            row[f"{field(part)}_degradation_pct"] = 100 * r["slowdown"]
            row[f"{field(part)}_{count}"] = r[count]
        rows.append(row)
    return rows


def strategy_rows() -> list[Row]:
    """One row per strategy: mean degradation over the queues, each queue's and its GPUs."""
    table = strategies()
    mean = {
        s: {"mean_degradation_pct": 100 * sum(r["slowdown"] for r in per.values()) / len(per)}
        for s, per in table.items()
    }
    return _per_strategy(table, "gpus", mean)


def model_rows() -> list[Row]:
    """One row per strategy: the Mixed queue's degradation per job type (Fig. 7)."""
    return _per_strategy(per_model(), "jobs")


def ablation_rows() -> list[Row]:
    """One row per worker count: degradation and GPUs with and without the balance bound."""
    return [
        {
            "workers": r["workers"],
            "balance_degradation_pct": 100 * r["balance"]["slowdown"],
            "balance_gpus": r["balance"]["gpus"],
            "no_balance_degradation_pct": 100 * r["no_balance"]["slowdown"],
            "no_balance_gpus": r["no_balance"]["gpus"],
        }
        for r in ablation()
    ]


def aip_rows(traces: str | None = None) -> list[Row]:
    """One row per held-out seed: the model AIP chose, every candidate's CV MAE, the
    held-out MAE and relative error."""
    samples, rates = _gavel_pairs(traces)
    return [
        {
            "seed": h["seed"],
            "chosen": h["chosen"],
            **{f"cv_mae_{name}": v for name, v in h["cv_mae"].items()},
            "held_out_mae": h["mae"],
            "relative_error_pct": 100 * h["relative"],
            "pairs": int(h["pairs"]),
        }
        for h in aip_held_out(AIP_SEEDS, samples, rates)
    ]


def aip_cost_rows(traces: str | None = None) -> list[Row]:
    """One row per strategy: the mean performance drop of planning with the predicted
    matrix, each queue's drop and GPUs (measured -> predicted), and the block's error."""
    samples, rates = _gavel_pairs(traces)
    result = aip_placement_cost(samples, rates)
    block = result["block"]
    rows: list[Row] = []
    for s, c in result["placement_cost"].items():
        row: Row = {
            "strategy": s,
            "drop_pct": 100 * c["drop"],
            "block_relative_error_pct": 100 * block["relative"],
            "block_scale": block["scale"],
        }
        for q, v in c["queues"].items():
            row[f"{field(q)}_drop_pct"] = 100 * v["drop"]
            row[f"{field(q)}_gpus_measured"] = v["gpus_ideal"]
            row[f"{field(q)}_gpus_predicted"] = v["gpus_predicted"]
        rows.append(row)
    return rows
