"""One translation, :class:`~gpuplan.solver_core.mip_model.MipModel` -> OR-Tools MathOpt, and
the solvers behind it.

Every exact decision is translated exactly once, by :func:`to_model_proto` (wrapped as a
``mathopt.Model`` by :func:`to_mathopt`), into an ``ortools.math_opt`` model; then:

* ``cp-sat``, ``scip``, ``highs`` are solved by ``mathopt.solve`` (SolverType CP_SAT, GSCIP,
  HIGHS). The :class:`~gpuplan.solver_core.limits.SolveLimits` map onto MathOpt's
  ``SolveParameters``: CP-SAT gets ``max_deterministic_time`` with a fixed ``num_workers`` and
  seed, SCIP and HiGHS get MathOpt's ``node_limit`` (SCIP ``limits/nodes``, HiGHS
  ``mip_max_nodes``) with one thread and a fixed seed; the wall clock is only the outer guard.
* ``cbc``: MathOpt has no CBC (this OR-Tools build offers GSCIP, CP_SAT, HIGHS and, for LPs,
  GLOP/PDLP). The MathOpt model is loaded as it is into ``pywraplp``'s in-process CBC
  (:func:`_solve_cbc`), which takes no solver-specific parameters: wall-clock guard only.
* ``pulp-cbc``: PuLP's CBC executable, fed from the same MathOpt model
  (:mod:`~gpuplan.solver_core.mip_pulp`). It is where PuLP earns its place: the one CBC route
  with a node limit (deterministic), in a separate process that a watchdog can kill.

``timeout`` versus ``error`` is decided from the solver's own reason for stopping (MathOpt's
NO_SOLUTION_FOUND, pywraplp's NOT_SOLVED, CBC's "Stopped on" log line), never from how much
wall-clock time went by, so a busy machine cannot turn one into the other.

``highspy`` is deliberately never imported: its HiGHS shared library clashes with the one bundled
inside OR-Tools; HiGHS is reached only through MathOpt.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from gpuplan.models.plan import SolverStatus

from .limits import SolveLimits
from .mip_model import INTEGRALITY_TOL, MipModel, ModelError

if TYPE_CHECKING:  # the solver stays unimported until a model is solved
    from ortools.math_opt.python import mathopt

__all__ = [
    "BACKENDS",
    "MATHOPT_BACKENDS",
    "Raw",
    "available_backends",
    "limit_reached",
    "out_of_time",
    "remaining",
    "run_backend",
    "to_mathopt",
    "to_model_proto",
]

BACKENDS: tuple[str, ...] = ("cp-sat", "scip", "cbc", "highs", "pulp-cbc")
"""Every backend name :func:`~gpuplan.solver_core.backends.solve` accepts, in preference order."""

MATHOPT_BACKENDS: dict[str, str] = {"cp-sat": "CP_SAT", "scip": "GSCIP", "highs": "HIGHS"}
"""Backend name -> ``mathopt.SolverType`` member, for the backends MathOpt solves itself."""


@dataclass
class Raw:
    """Backend-specific result before common post-processing."""

    status: SolverStatus
    values: list[float] | None = None
    bound: float | None = None  # without the objective constant
    message: str = ""
    solve_s: float = 0.0  # time inside the solver call proper


def _int_or_none(x: float) -> int | None:
    r = round(x)
    return int(r) if abs(x - r) <= INTEGRALITY_TOL else None


def limit_reached(limits: SolveLimits, raw_name: str) -> tuple[SolverStatus, str]:
    """The backend said it stopped on a limit, without a solution: a timeout."""
    return "timeout", f"limit reached without a solution ({limits.describe()}; {raw_name})"


def remaining(deadline: float) -> float:
    """Wall-clock seconds left before ``deadline`` (a ``time.perf_counter`` instant)."""
    return deadline - time.perf_counter()


def out_of_time(limits: SolveLimits, what: str) -> Raw:
    return Raw("timeout", message=f"wall-clock limit {limits.wall_s:g}s used up {what}")


# --------------------------------------------------------------------------------------------
# The one translation
# --------------------------------------------------------------------------------------------


def _check_cpsat(model: MipModel) -> None:
    """CP-SAT's restrictions, checked on the model so that MathOpt never silently scales a
    fractional row (its CP-SAT adapter would accept it and approximate)."""
    for v in model.vars:
        if v.kind == "num":
            raise ModelError(
                f"cp-sat: continuous variable {v.name!r} is not supported; "
                "use a MIP backend (scip, cbc, highs, pulp-cbc) or make it integer"
            )
        if not (math.isfinite(v.lb) and math.isfinite(v.ub)):
            raise ModelError(
                f"cp-sat: integer variable {v.name!r} needs finite bounds, got [{v.lb}, {v.ub}]"
            )
    for con in model.constraints:
        for var, coef in con.terms.items():
            if _int_or_none(coef) is None:
                raise ModelError(
                    f"cp-sat: constraint {con.name!r} has non-integer coefficient {coef!r} on "
                    f"{var.name!r}; CP-SAT constraints must be integral. Scale the row (e.g. "
                    "express memory in MiB) or use a MIP backend"
                )


def to_model_proto(model: MipModel, *, integral: bool = False) -> Any:
    """The MathOpt ``ModelProto`` of ``model``: variables in ``model.vars`` order (id = index),
    rows in ``model.constraints`` order.

    Written directly as MathOpt's own model format, in bulk, because building it element by
    element through ``mathopt.Model`` cost about as much as a small CP-SAT solve (profiled:
    14 ms of 41 ms per 12-variable model on this machine) and policies solve such models at
    every scheduling event.

    ``integral`` (CP-SAT): check CP-SAT's restrictions and round each row's sides inward, which
    is exact because with integral coefficients and variables the row activity is integral; a
    row whose rounded range is empty raises :class:`_EmptyRow` (the caller reports infeasible).
    Constraint names are not passed: MathOpt rejects duplicates, which :class:`MipModel` allows
    for row labels. The objective constant stays out (added back from the values).
    """
    from ortools.math_opt import model_pb2

    if integral:
        _check_cpsat(model)
    proto = model_pb2.ModelProto(name=model.name)
    var = proto.variables
    mvars = model.vars
    var.ids.extend(range(len(mvars)))
    var.lower_bounds.extend([v.lb for v in mvars])
    var.upper_bounds.extend([v.ub for v in mvars])
    var.integers.extend([v.kind != "num" for v in mvars])
    var.names.extend([v.name for v in mvars])
    lbs: list[float] = []
    ubs: list[float] = []
    rows: list[int] = []
    cols: list[int] = []
    coefs: list[float] = []
    for r, con in enumerate(model.constraints):
        lb, ub = con.lb, con.ub
        if integral:
            lb = lb if lb == -math.inf else math.ceil(lb - INTEGRALITY_TOL)
            ub = ub if ub == math.inf else math.floor(ub + INTEGRALITY_TOL)
            # MathOpt's CP-SAT adapter answers MODEL_INVALID (not INFEASIBLE) for a row with
            # no multiple of its coefficients' gcd in range (3x + 3y == 1): detect it here.
            if lb > ub or _no_multiple(con.terms.values(), lb, ub):
                raise _EmptyRow(
                    f"constraint {con.name!r} has no integer solution in [{con.lb}, {con.ub}]"
                )
        lbs.append(lb)
        ubs.append(ub)
        terms = sorted((v.index, c) for v, c in con.terms.items())  # the proto wants order
        rows.extend([r] * len(terms))
        cols.extend([i for i, _ in terms])
        coefs.extend([c for _, c in terms])
    cons = proto.linear_constraints
    cons.ids.extend(range(len(lbs)))
    cons.lower_bounds.extend(lbs)
    cons.upper_bounds.extend(ubs)
    mat = proto.linear_constraint_matrix
    mat.row_ids.extend(rows)
    mat.column_ids.extend(cols)
    mat.coefficients.extend(coefs)
    obj = sorted((v.index, c) for v, c in model.objective.terms.items())
    proto.objective.maximize = model.sense == "max"
    proto.objective.linear_coefficients.ids.extend([i for i, _ in obj])
    proto.objective.linear_coefficients.values.extend([c for _, c in obj])
    return proto


def to_mathopt(
    model: MipModel, *, integral: bool = False
) -> tuple[mathopt.Model, list[mathopt.Variable]]:
    """The ``mathopt.Model`` of ``model`` (from :func:`to_model_proto`) and its variables in
    ``model.vars`` order."""
    from ortools.math_opt.python import mathopt

    mo = mathopt.Model.from_model_proto(to_model_proto(model, integral=integral))
    return mo, [mo.get_variable(i, validate=False) for i in range(len(model.vars))]


def _no_multiple(coefs: Iterable[float], lb: float, ub: float) -> bool:
    """True when the finite integer range [lb, ub] holds no multiple of the (integral)
    coefficients' gcd, so the row has no integer solution at all."""
    if not (math.isfinite(lb) and math.isfinite(ub)):
        return False
    g = math.gcd(*(round(c) for c in coefs))
    return g > 1 and math.ceil(lb / g) > math.floor(ub / g)


class _EmptyRow(Exception):
    """An integer row with no integer in its range: the model is infeasible as stated."""


# --------------------------------------------------------------------------------------------
# MathOpt solvers: cp-sat, scip, highs
# --------------------------------------------------------------------------------------------


def _params(
    backend: str, limits: SolveLimits, left: float, threads: int, seed: int, rel_gap: float
) -> mathopt.SolveParameters:
    """The budget as MathOpt parameters; deterministic whenever ``limits`` is."""
    from ortools.math_opt.python import mathopt

    params = mathopt.SolveParameters(time_limit=timedelta(seconds=left))
    if backend == "cp-sat":
        # A fixed worker count with a fixed seed makes CP-SAT deterministic; one by default.
        # CP-SAT rejects MathOpt's node_limit: its deterministic time is the budget.
        sat = params.cp_sat
        sat.num_workers = threads
        sat.random_seed = seed
        sat.relative_gap_limit = rel_gap
        sat.log_search_progress = False
        if limits.work_s is not None:
            sat.max_deterministic_time = limits.work_s
        return params
    params.random_seed = seed  # SCIP: randomization/randomseedshift; HiGHS: random_seed
    params.relative_gap_tolerance = rel_gap
    params.node_limit = limits.nodes  # SCIP limits/nodes, HiGHS mip_max_nodes
    if backend == "scip":
        params.threads = threads
    else:
        # MathOpt's HiGHS rejects the common thread count; HiGHS fixes its global scheduler on
        # first use and fails later runs that ask for a different count, so always one.
        params.highs.int_options["threads"] = 1
        params.highs.bool_options["output_flag"] = False
        params.highs.bool_options["log_to_console"] = False
    return params


def _error_text(exc: BaseException) -> str:
    """MathOpt 9.15 loses a solver's StatusNotOk while formatting it (an AttributeError whose
    context is the real error): report the real one."""
    real = exc.__context__ if isinstance(exc, AttributeError) and exc.__context__ else exc
    try:
        return f"{type(real).__name__}: {real}"
    except Exception:  # a message must never mask the status
        return type(real).__name__


def _solve_mathopt(
    model: MipModel,
    backend: str,
    limits: SolveLimits,
    deadline: float,
    threads: int,
    seed: int,
    rel_gap: float,
) -> Raw:
    from ortools.math_opt.python import mathopt

    try:
        mo, xs = to_mathopt(model, integral=backend == "cp-sat")
    except _EmptyRow as exc:
        return Raw("infeasible", message=str(exc))
    left = remaining(deadline)
    if left <= 0:
        return out_of_time(limits, f"translating the model for {backend}")
    model_params = None
    if backend == "cp-sat" and model.hints:
        # Hints go to CP-SAT only, as before MathOpt: SCIP/HiGHS would break ties differently.
        model_params = mathopt.ModelSolveParameters(
            solution_hints=[
                mathopt.SolutionHint(
                    variable_values={
                        xs[v.index]: float(round(val)) for v, val in model.hints.items()
                    }
                )
            ]
        )
    params = _params(backend, limits, left, threads, seed, rel_gap)
    t0 = time.perf_counter()
    try:
        res = mathopt.solve(
            mo,
            getattr(mathopt.SolverType, MATHOPT_BACKENDS[backend]),
            params=params,
            model_params=model_params,
        )
    except Exception as exc:  # a solver failure is a status, never a crash
        return Raw(
            "error",
            message=f"{backend} (MathOpt) failed: {_error_text(exc)}",
            solve_s=time.perf_counter() - t0,
        )
    solve_s = time.perf_counter() - t0
    return _read_result(res, model, backend, limits, xs, solve_s)


def _read_result(
    res: Any, model: MipModel, backend: str, limits: SolveLimits, xs: list[Any], solve_s: float
) -> Raw:
    """MathOpt's termination -> the MIP layer's status contract."""
    from ortools.math_opt.python import mathopt

    term = res.termination
    reason = term.reason
    why = mathopt.TerminationReason
    dual = term.objective_bounds.dual_bound
    bound = dual if model.objective.terms and math.isfinite(dual) else None
    raw_name = f"{reason.name}" + (f"/{term.limit.name}" if term.limit is not None else "")
    if reason in (why.OPTIMAL, why.FEASIBLE) and res.has_primal_feasible_solution():
        values = res.variable_values(xs)
        status: SolverStatus = "optimal" if reason == why.OPTIMAL else "feasible"
        return Raw(status, list(values), bound, solve_s=solve_s)
    if reason == why.INFEASIBLE:
        return Raw("infeasible", message=f"{backend} proved infeasibility", solve_s=solve_s)
    if reason == why.INFEASIBLE_OR_UNBOUNDED:
        # HiGHS's presolve cannot tell the two apart; with every domain finite the model cannot
        # be unbounded, so the answer is a proof of infeasibility.
        if all(math.isfinite(v.lb) and math.isfinite(v.ub) for v in model.vars):
            return Raw(
                "infeasible",
                message=f"{backend} proved infeasibility ({raw_name})",
                solve_s=solve_s,
            )
        return Raw("error", message=f"{backend}: model is infeasible or unbounded", solve_s=solve_s)
    if reason == why.UNBOUNDED:
        return Raw("error", message=f"{backend}: model is unbounded", solve_s=solve_s)
    if reason in (why.NO_SOLUTION_FOUND, why.FEASIBLE):
        # Stopped on a limit (time, nodes, deterministic time) before any solution. SCIP and
        # HiGHS keep their dual bound; MathOpt reports none for CP-SAT here (pywraplp-era
        # cp_model did).
        status, msg = limit_reached(limits, raw_name)
        return Raw(status, None, bound, msg, solve_s)
    return Raw(
        "error",
        message=f"{backend} stopped with {raw_name}: {term.detail}".strip(),
        solve_s=solve_s,
    )


# --------------------------------------------------------------------------------------------
# cbc: the MathOpt model loaded into pywraplp's CBC
# --------------------------------------------------------------------------------------------


def _solve_cbc(model: MipModel, limits: SolveLimits, deadline: float, rel_gap: float) -> Raw:
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("CBC")
    if solver is None:
        return Raw(
            "error",
            message=f"cbc cannot be created in this OR-Tools build; "
            f"available: {', '.join(available_backends())}",
        )
    solver.SuppressOutput()
    proto = to_model_proto(model)
    inf = solver.infinity()

    def clip(x: float) -> float:
        return inf if x == math.inf else -inf if x == -math.inf else x

    var = proto.variables
    pvars = [
        solver.Var(clip(lb), clip(ub), integer, name)
        for lb, ub, integer, name in zip(
            var.lower_bounds, var.upper_bounds, var.integers, var.names, strict=True
        )
    ]
    cons = proto.linear_constraints
    rows = [
        solver.RowConstraint(clip(lb), clip(ub), "")
        for lb, ub in zip(cons.lower_bounds, cons.upper_bounds, strict=True)
    ]
    mat = proto.linear_constraint_matrix
    for r, c, coef in zip(mat.row_ids, mat.column_ids, mat.coefficients, strict=True):
        rows[r].SetCoefficient(pvars[c], coef)
    objective = solver.Objective()
    lin = proto.objective.linear_coefficients
    for c, coef in zip(lin.ids, lin.values, strict=True):
        objective.SetCoefficient(pvars[c], coef)
    if proto.objective.maximize:
        objective.SetMaximization()
    else:
        objective.SetMinimization()

    left = remaining(deadline)
    if left <= 0:
        return out_of_time(limits, "translating the model for cbc")
    solver.SetTimeLimit(max(1, round(left * 1000)))
    params = pywraplp.MPSolverParameters()
    # pywraplp's default relative MIP gap is 1e-4: "optimal" would not mean optimal.
    params.SetDoubleParam(pywraplp.MPSolverParameters.RELATIVE_MIP_GAP, rel_gap)
    # OR-Tools' CBC is built without threads and uses a fixed seed; pywraplp passes it no
    # solver-specific parameters, so it has no node limit: only the wall-clock guard applies.
    t0 = time.perf_counter()
    code = solver.Solve(params)
    solve_s = time.perf_counter() - t0
    if code in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        values = [pv.solution_value() for pv in pvars]
        bound = objective.BestBound() if model.objective.terms else None
        status: SolverStatus = "optimal" if code == pywraplp.Solver.OPTIMAL else "feasible"
        return Raw(status, values, bound, solve_s=solve_s)
    if code == pywraplp.Solver.INFEASIBLE:
        return Raw("infeasible", message="cbc proved infeasibility", solve_s=solve_s)
    if code == pywraplp.Solver.UNBOUNDED:
        return Raw("error", message="cbc: model is unbounded", solve_s=solve_s)
    if code == pywraplp.Solver.NOT_SOLVED:
        status, msg = limit_reached(limits, "NOT_SOLVED")
        return Raw(status, message=msg, solve_s=solve_s)
    return Raw(
        "error", message=f"cbc stopped with status code {code} without a solution", solve_s=solve_s
    )


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


@functools.cache
def available_backends() -> list[str]:
    """Backends that can actually be created in this environment, in :data:`BACKENDS` order.

    OR-Tools wheels may be built without some solvers, so this asks rather than assumes: the
    MathOpt backends by solving a one-variable model, CBC through ``pywraplp``, PuLP by its
    own check. Cached: the answer cannot change within a process.
    """
    found = []
    try:
        from ortools.math_opt.python import mathopt

        probe = mathopt.Model(name="probe")
        x = probe.add_integer_variable(lb=0, ub=1)
        probe.maximize(x)
        for backend, kind in MATHOPT_BACKENDS.items():
            try:
                mathopt.solve(probe, getattr(mathopt.SolverType, kind))
            except Exception:  # a solver missing from this build
                continue
            found.append(backend)
    except ImportError:  # pragma: no cover - ortools is a hard dependency
        pass
    try:
        from ortools.linear_solver import pywraplp

        if pywraplp.Solver.CreateSolver("CBC") is not None:
            found.append("cbc")
    except ImportError:  # pragma: no cover
        pass
    from .mip_pulp import pulp_available

    if pulp_available():
        found.append("pulp-cbc")
    return [b for b in BACKENDS if b in found]


def run_backend(
    model: MipModel,
    backend: str,
    limits: SolveLimits,
    deadline: float,
    threads: int,
    seed: int,
    rel_gap: float,
) -> Raw:
    """Translate and solve ``model`` on ``backend`` within ``limits`` (clock: ``deadline``)."""
    if backend in MATHOPT_BACKENDS:
        return _solve_mathopt(model, backend, limits, deadline, threads, seed, rel_gap)
    if backend == "cbc":
        return _solve_cbc(model, limits, deadline, rel_gap)
    from .mip_pulp import solve_pulp_cbc

    return solve_pulp_cbc(model, limits, deadline, threads, seed, rel_gap)
