"""OJPP (paper 002): static placement of co-located workers on the fewest GPUs.

``solve(instance, solver, limits)`` runs one solver on an :class:`~gpuplan.models.OjppInstance`
and returns an :class:`~.exact.OjppAnswer` (``SolverStats`` + the GPUs' worker lists):

* exact: ``cp-sat`` (:mod:`.exact`), ``scip``, ``highs``, ``cbc``, ``pulp-cbc`` (:mod:`.milp`)
  -- ``optimal`` only when proven;
* heuristics (status ``heuristic``): ``heuristic`` (Alg. 3, the paper's OJPP),
  ``heuristic-ls`` (Alg. 3 + the GPU-emptying pass of :mod:`.improve`), ``heuristic-pg``
  (the better of a greedy over whole GPU contents, :mod:`.pattern_greedy`, and
  ``heuristic-ls``), ``greedy``
  (Alg. 1 + 2), and Table 4's baselines ``best-fit``, ``i-greedy``, ``b-greedy``,
  ``c-greedy`` (:mod:`.baselines`; they enforce only some rules, by design).

:func:`.check.check_solution` is the independent checker.
"""

from __future__ import annotations

import time

from gpuplan.models import InputError, SolverStats
from gpuplan.models.ojpp import OjppInstance

from ...limits import SolveLimits
from .baselines import BASELINE_RULES, run_baseline
from .check import check_solution
from .exact import OjppAnswer, lower_bound, solve_exact
from .greedy import run_greedy
from .heuristic import run_heuristic
from .milp import MIP_BACKENDS, solve_milp
from .pattern_greedy import run_heuristic_pg

__all__ = ["EXACT_SOLVERS", "HEURISTIC_SOLVERS", "SOLVERS", "OjppAnswer", "check_solution", "solve"]

EXACT_SOLVERS = ("cp-sat", *MIP_BACKENDS)
HEURISTIC_SOLVERS = ("heuristic", "heuristic-ls", "heuristic-pg", "greedy", *BASELINE_RULES)
SOLVERS = (*EXACT_SOLVERS, *HEURISTIC_SOLVERS)


def _heuristic(inst: OjppInstance, solver: str) -> OjppAnswer:
    start = time.perf_counter()
    if solver == "heuristic":
        gpus = run_heuristic(inst)
    elif solver == "heuristic-ls":
        gpus = run_heuristic(inst, improve=True)
    elif solver == "heuristic-pg":
        gpus = run_heuristic_pg(inst)
    elif solver == "greedy":
        gpus = run_greedy(inst)
    else:
        gpus = run_baseline(inst, solver)
    wall_ms = (time.perf_counter() - start) * 1000.0
    if gpus is None:
        stats = SolverStats(
            stage="ojpp",
            backend=solver,
            status="infeasible",
            wall_ms=wall_ms,
            message="a worker does not fit on a GPU even alone",
        )
        return OjppAnswer(stats, None)
    lb = float(lower_bound(inst))
    gap = abs(len(gpus) - lb) / max(1.0, len(gpus))
    stats = SolverStats(
        stage="ojpp",
        backend=solver,
        status="heuristic",
        objective=float(len(gpus)),
        bound=lb,
        gap=gap,
        wall_ms=wall_ms,
        deterministic=True,
    )
    return OjppAnswer(stats, gpus)


def solve(inst: OjppInstance, solver: str, limits: SolveLimits | None = None) -> OjppAnswer:
    """Run ``solver`` on ``inst``; exact solvers take ``limits`` (default: deterministic)."""
    if solver in HEURISTIC_SOLVERS:
        return _heuristic(inst, solver)
    if solver == "cp-sat":
        return solve_exact(inst, "cp-sat", limits)
    if solver in MIP_BACKENDS:
        return solve_milp(inst, solver, limits)
    raise InputError(
        f"unknown ojpp solver {solver!r}; choose from {', '.join(SOLVERS)}", field="solvers"
    )
