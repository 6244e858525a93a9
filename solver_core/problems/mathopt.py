"""OR-Tools MathOpt (``ortools.math_opt.python``) as another way to solve a :class:`MipModel`.

Why: the issue asks whether OR-Tools' own modelling layer could replace the project's
translation to pywraplp; this module translates the same backend-neutral model to MathOpt and
solves it with MathOpt's HiGHS or SCIP (``mathopt-highs``, ``mathopt-scip``), so the bench can
compare the two paths on identical models. It returns a :class:`Solution` whose stats follow the
MIP layer's contract: ``optimal`` only on MathOpt's OPTIMAL at relative gap 0, a solution stopped
by the limit is ``feasible``, no solution at the limit is ``timeout``. Policies do not use it.
"""

from __future__ import annotations

import math
import time
from datetime import timedelta

from gpuplan.models import SolverStats

from ..backends import MipModel, Solution
from ..limits import SolveLimits

__all__ = ["MATHOPT_SOLVERS", "mathopt_available", "solve_mathopt"]

MATHOPT_SOLVERS = ("mathopt-highs", "mathopt-scip")


def mathopt_available() -> tuple[str, ...]:
    """The MathOpt solver names that import in this environment."""
    try:
        from ortools.math_opt.python import mathopt  # noqa: F401
    except ImportError:  # pragma: no cover - ortools ships it since 9.8
        return ()
    return MATHOPT_SOLVERS


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def solve_mathopt(model: MipModel, name: str, limits: SolveLimits, stage: str = "solve"
                  ) -> Solution:
    """Solve ``model`` with MathOpt's solver ``name`` (``mathopt-highs``/``mathopt-scip``)
    under ``limits.wall_s`` (wall clock; MathOpt has no deterministic budget)."""
    from ortools.math_opt.python import mathopt

    start = time.perf_counter()
    kind = {"mathopt-highs": mathopt.SolverType.HIGHS,
            "mathopt-scip": mathopt.SolverType.GSCIP}[name]
    mo = mathopt.Model(name=model.name)
    xs = [mo.add_variable(lb=v.lb, ub=v.ub, is_integer=v.kind != "num", name=v.name)
          for v in model.vars]
    for con in model.constraints:
        expr = mathopt.fast_sum(coef * xs[v.index] for v, coef in con.terms.items())
        mo.add_linear_constraint(lb=con.lb, ub=con.ub, expr=expr, name=con.name)
    obj = mathopt.fast_sum(coef * xs[v.index] for v, coef in model.objective.terms.items())
    if model.sense == "max":
        mo.maximize(obj)
    else:
        mo.minimize(obj)
    left = max(0.001, limits.wall_s - (time.perf_counter() - start))
    # MathOpt's HiGHS rejects a thread count (a StatusNotOk that fails to even format
    # itself in OR-Tools 9.15); SCIP takes one.
    params = mathopt.SolveParameters(time_limit=timedelta(seconds=left), random_seed=0,
                                     threads=1 if name == "mathopt-scip" else None,
                                     relative_gap_tolerance=0.0, absolute_gap_tolerance=0.0)
    message = ""
    values: list[float] | None = None
    bound = objective = gap = None
    try:
        res = mathopt.solve(mo, kind, params=params)
    except Exception as exc:  # a solver failure is a status, as in the MIP layer
        status = "error"
        message = f"{name} raised {type(exc).__name__}: {exc}"
    else:
        reason = res.termination.reason
        t = mathopt.TerminationReason
        if reason == t.OPTIMAL:
            status = "optimal"
        elif reason == t.FEASIBLE:
            status = "feasible"
        elif reason == t.NO_SOLUTION_FOUND:
            status = "timeout"
        elif reason == t.INFEASIBLE:
            status = "infeasible"
        else:
            status = "error"
        message = f"{reason.name}: {res.termination.detail}".strip(": ")
        if status in ("optimal", "feasible") and res.has_primal_feasible_solution():
            vals = res.variable_values(xs)
            values = [round(x) if v.kind != "num" else x
                      for v, x in zip(model.vars, vals, strict=True)]
            objective = model.objective.const + math.fsum(
                c * values[v.index] for v, c in model.objective.terms.items())
            dual = _finite_or_none(res.termination.objective_bounds.dual_bound)
            bound = objective if status == "optimal" else (
                None if dual is None else dual + model.objective.const)
            if bound is not None:
                gap = abs(objective - bound) / max(1.0, abs(objective))
        elif status == "optimal":
            status = "error"
    stats = SolverStats(stage=stage, backend=name, status=status,  # type: ignore[arg-type]
                        objective=objective, bound=bound, gap=gap,
                        wall_ms=(time.perf_counter() - start) * 1000.0,
                        time_limit_s=limits.wall_s, message=message)
    return Solution(stats=stats, model=model, raw_values=values)
