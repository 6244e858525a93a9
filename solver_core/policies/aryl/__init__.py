"""Aryl (001 digest): capacity loaning, dependent-value reclaiming, two-phase allocation.

* :mod:`.reclaim` -- which on-loan servers to return (flexible group first, Alg. 1's server
  preemption cost greedy, an exact ILP, SCF and Random baselines) and the reclaim metrics;
  split by concept into :mod:`.reclaim_model`, :mod:`.reclaim_greedy` and :mod:`.reclaim_exact`,
  all re-exported by :mod:`.reclaim`;
* :mod:`.mckp` -- the multiple-choice knapsack of phase 2 (DP, CP-SAT / MIP, greedy);
* :mod:`.two_phase` -- Alg. 2 over plain worker-level jobs (the paper's worked examples);
* :mod:`.placement` -- best-fit decreasing with base / flexible server groups;
* :mod:`.hetero` -- App. A's throughput of a job on mixed GPU types (heterogeneous training).

The policy that ties them to a live cluster is :mod:`gpuplan.solver_core.policies.aryl.aryl`.
"""

from .hetero import mixed_efficiency, theoretical_throughput
from .mckp import MckpGroup, MckpResult, solve_dp, solve_exact, solve_greedy, solve_mckp
from .placement import ServerBook
from .reclaim import (
    RECLAIM_METHODS,
    Reclaimer,
    ReclaimInstance,
    ReclaimJob,
    ReclaimOutcome,
    cost_table,
    evaluate,
    preemption_costs,
    reclaim_metrics,
    select,
    select_aryl,
    select_exact,
    select_random,
    select_scf,
)
from .two_phase import (
    ArylJob,
    TwoPhaseResult,
    allocate_elastic,
    allocate_inelastic,
    elastic_group,
    linear_jct,
    sort_jobs,
    two_phase_allocate,
)

__all__ = [
    "RECLAIM_METHODS",
    "ArylJob",
    "MckpGroup",
    "MckpResult",
    "ReclaimInstance",
    "ReclaimJob",
    "ReclaimOutcome",
    "Reclaimer",
    "ServerBook",
    "TwoPhaseResult",
    "allocate_elastic",
    "allocate_inelastic",
    "cost_table",
    "elastic_group",
    "evaluate",
    "linear_jct",
    "mixed_efficiency",
    "preemption_costs",
    "reclaim_metrics",
    "select",
    "select_aryl",
    "select_exact",
    "select_random",
    "select_scf",
    "solve_dp",
    "solve_exact",
    "solve_greedy",
    "solve_mckp",
    "sort_jobs",
    "theoretical_throughput",
    "two_phase_allocate",
]
