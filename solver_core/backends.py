"""One way to state a small integer program and solve it with any exact backend.

Every exact decision in gpuplan (knapsacks, reclaim, placement, network-packing regulation) is a
small integer program. Writing each against OR-Tools or PuLP directly would tie the policy to one
solver and duplicate the status/time-limit/fallback handling five times. Instead a policy states
its model once with :class:`MipModel` and calls :func:`solve` (or :func:`solve_with_fallback`),
which translates it to the chosen backend and reports a uniform
:class:`~gpuplan.models.SolverStats`.

Backends (see ``docs/solvers.md``):

* ``cp-sat``   -- OR-Tools CP-SAT. Integer variables only; constraint coefficients must be
  integral (non-integral ones raise :class:`ModelError`); the objective may be fractional (CP-SAT
  scales it internally).
* ``scip``, ``cbc``, ``highs`` -- OR-Tools ``pywraplp`` MIP interfaces.
* ``pulp-cbc`` -- PuLP's bundled CBC executable (separate process, hence ~30 ms extra latency).

``highspy`` is deliberately never imported: its HiGHS shared library clashes with the one bundled
inside OR-Tools; HiGHS is reached only through ``pywraplp``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import numbers
import os
import re
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from gpuplan.models.errors import GpuplanError, InputError
from gpuplan.models.plan import SolverStats, SolverStatus

__all__ = [
    "BACKENDS",
    "DEFAULT_TIME_LIMIT_S",
    "Constraint",
    "LinExpr",
    "MipModel",
    "ModelError",
    "NoSolutionError",
    "Solution",
    "UnknownBackendError",
    "Var",
    "available_backends",
    "lin_sum",
    "solve",
    "solve_with_fallback",
]

log = logging.getLogger(__name__)

BACKENDS: tuple[str, ...] = ("cp-sat", "scip", "cbc", "highs", "pulp-cbc")
"""Every backend name :func:`solve` accepts, in preference order."""

DEFAULT_TIME_LIMIT_S = 10.0
"""Used when a caller gives no limit: an allocation decision must never block indefinitely."""

INTEGRALITY_TOL = 1e-9
"""A coefficient within this of an integer counts as that integer (CP-SAT, integer bounds)."""

_PYWRAPLP_IDS = {"scip": "SCIP", "cbc": "CBC", "highs": "HIGHS"}
_TIMEOUT_FRACTION = 0.9
"""A "stopped without a solution" status counts as a timeout only if at least this fraction of
the time limit elapsed; earlier stops are solver errors (e.g. HiGHS refusing its parameters)."""

VarKind = Literal["int", "bool", "num"]
Number = int | float
T = TypeVar("T")


class ModelError(GpuplanError, ValueError):
    """The model is malformed, or the chosen backend cannot represent it (e.g. a continuous
    variable or a fractional constraint coefficient on CP-SAT). A programming error in the code
    that built the model, not a property of the instance."""


class UnknownBackendError(InputError, ValueError):
    """A backend name outside :data:`BACKENDS` (usually a typo in a scenario or CLI flag)."""


class NoSolutionError(GpuplanError):
    """:meth:`Solution.value` was asked for a value although the solve produced no solution."""


# --------------------------------------------------------------------------------------------
# Expressions
# --------------------------------------------------------------------------------------------


def _is_number(x: object) -> bool:
    # Fast path for the common Python types; numbers.Real also admits numpy scalars.
    return isinstance(x, (int, float, numbers.Real))


def _terms_of(x: object) -> tuple[Mapping[Var, float], float] | None:
    """Split an operand into (terms, constant); None when it is not a linear operand."""
    if isinstance(x, LinExpr):
        return x.terms, x.const
    if isinstance(x, Var):
        return {x: 1.0}, 0.0
    if _is_number(x):
        return {}, float(x)  # type: ignore[arg-type]
    return None


class _Linear:
    """Operators shared by :class:`Var` and :class:`LinExpr`.

    Every operation returns a fresh :class:`LinExpr`; nothing is mutated in place, so a
    sub-expression can be reused safely in several constraints.
    """

    __slots__ = ()
    # Makes numpy scalars on the left defer to our reflected operators instead of broadcasting.
    __array_ufunc__ = None

    def _as_expr(self) -> LinExpr:
        raise NotImplementedError

    def __add__(self, other: object) -> LinExpr:
        split = _terms_of(other)
        if split is None:
            return NotImplemented
        mine = self._as_expr()
        terms = dict(mine.terms)
        for var, coef in split[0].items():
            terms[var] = terms.get(var, 0.0) + coef
        return LinExpr(terms, mine.const + split[1])

    __radd__ = __add__

    def __sub__(self, other: object) -> LinExpr:
        split = _terms_of(other)
        if split is None:
            return NotImplemented
        mine = self._as_expr()
        terms = dict(mine.terms)
        for var, coef in split[0].items():
            terms[var] = terms.get(var, 0.0) - coef
        return LinExpr(terms, mine.const - split[1])

    def __rsub__(self, other: object) -> LinExpr:
        split = _terms_of(other)
        if split is None:
            return NotImplemented
        mine = self._as_expr()
        terms = dict(split[0])
        for var, coef in mine.terms.items():
            terms[var] = terms.get(var, 0.0) - coef
        return LinExpr(terms, split[1] - mine.const)

    def __mul__(self, other: object) -> LinExpr:
        if not _is_number(other):
            return NotImplemented  # products of variables are not linear
        k = float(other)  # type: ignore[arg-type]
        mine = self._as_expr()
        return LinExpr({v: c * k for v, c in mine.terms.items()}, mine.const * k)

    __rmul__ = __mul__

    def __truediv__(self, other: object) -> LinExpr:
        if not _is_number(other):
            return NotImplemented
        return self * (1.0 / float(other))  # type: ignore[arg-type]

    def __neg__(self) -> LinExpr:
        return self * -1.0

    def __pos__(self) -> LinExpr:
        return self._as_expr()

    def _compare(self, other: object, sense: str) -> Constraint:
        diff = self - other
        if diff is NotImplemented:
            return NotImplemented
        rhs = -diff.const
        if sense == "<=":
            return Constraint(diff.terms, -math.inf, rhs)
        if sense == ">=":
            return Constraint(diff.terms, rhs, math.inf)
        return Constraint(diff.terms, rhs, rhs)

    def __le__(self, other: object) -> Constraint:
        return self._compare(other, "<=")

    def __ge__(self, other: object) -> Constraint:
        return self._compare(other, ">=")

    def __eq__(self, other: object) -> Constraint:  # type: ignore[override]
        return self._compare(other, "==")

    # Identity hashing keeps Vars usable as dict keys even though == builds constraints:
    # distinct live objects never share an identity hash, so dicts never call __eq__ on them.
    __hash__ = object.__hash__


class Var(_Linear):
    """A decision variable of one :class:`MipModel`. Create it through the model."""

    __slots__ = ("index", "kind", "lb", "model", "name", "ub")

    def __init__(self, model: MipModel, index: int, name: str, lb: float, ub: float,
                 kind: VarKind) -> None:
        self.model = model
        self.index = index
        self.name = name
        self.lb = lb
        self.ub = ub
        self.kind: VarKind = kind

    def _as_expr(self) -> LinExpr:
        return LinExpr({self: 1.0}, 0.0)

    @property
    def is_integer(self) -> bool:
        return self.kind != "num"

    def __repr__(self) -> str:
        return f"Var({self.name!r}, {self.kind}, [{self.lb}, {self.ub}])"


class LinExpr(_Linear):
    """``sum(coef * var) + const``; ``terms`` maps :class:`Var` -> coefficient."""

    __slots__ = ("const", "terms")

    def __init__(self, terms: Mapping[Var, float] | None = None, const: float = 0.0) -> None:
        self.terms: dict[Var, float] = dict(terms) if terms else {}
        self.const = float(const)

    def _as_expr(self) -> LinExpr:
        return self

    def __repr__(self) -> str:
        parts = [f"{c:+g}*{v.name}" for v, c in self.terms.items()]
        if self.const or not parts:
            parts.append(f"{self.const:+g}")
        return "LinExpr(" + " ".join(parts) + ")"


def lin_sum(items: Iterable[Var | LinExpr | Number]) -> LinExpr:
    """Sum many terms in linear time.

    Builtin ``sum()`` works too, but copies the growing expression at every step (quadratic);
    use this for sums over hundreds of variables.
    """
    terms: dict[Var, float] = {}
    const = 0.0
    for item in items:
        if isinstance(item, Var):
            terms[item] = terms.get(item, 0.0) + 1.0
        elif isinstance(item, LinExpr):
            for var, coef in item.terms.items():
                terms[var] = terms.get(var, 0.0) + coef
            const += item.const
        elif _is_number(item):
            const += float(item)
        else:
            raise TypeError(f"lin_sum: cannot add {type(item).__name__}")
    return LinExpr(terms, const)


class Constraint:
    """``lb <= sum(terms) <= ub``; built by comparing expressions, added with ``MipModel.add``."""

    __slots__ = ("lb", "name", "terms", "ub")

    def __init__(self, terms: Mapping[Var, float], lb: float, ub: float, name: str = "") -> None:
        self.terms = terms
        self.lb = lb
        self.ub = ub
        self.name = name

    def __bool__(self) -> bool:
        # `if x == y:` or a chained `0 <= x <= 5` would otherwise silently drop a constraint.
        raise TypeError(
            "a gpuplan Constraint has no truth value; pass it to MipModel.add() "
            "(chained comparisons like 0 <= x <= 5 are not supported: add two constraints)"
        )

    def __repr__(self) -> str:
        body = " ".join(f"{c:+g}*{v.name}" for v, c in self.terms.items())
        return f"Constraint({self.name!r}: {self.lb} <= {body} <= {self.ub})"


# --------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------


def _check_bound(value: float, what: str) -> float:
    if not _is_number(value) or math.isnan(value):
        raise ModelError(f"{what} must be a number, got {value!r}")
    return float(value)


class MipModel:
    """A backend-neutral integer program: variables, linear constraints, one linear objective.

    Deliberately minimal (no indicator or non-linear constraints) so that every backend can
    express every model, and cheap to build (plain dicts) because policies rebuild models at
    every scheduling event.
    """

    def __init__(self, name: str = "model") -> None:
        self.name = name
        self.vars: list[Var] = []
        self.constraints: list[Constraint] = []
        self.objective = LinExpr()
        self.sense: Literal["min", "max"] = "min"
        self.hints: dict[Var, float] = {}
        self.infeasible_reason: str | None = None
        """Set when a constant constraint is violated; solve() then answers infeasible."""
        self._names: set[str] = set()

    # ---- variables ----
    def _new_var(self, lb: float, ub: float, name: str | None, kind: VarKind) -> Var:
        lb = _check_bound(lb, "lower bound")
        ub = _check_bound(ub, "upper bound")
        if kind != "num":
            # An integer variable's bounds can be rounded inward without changing the model.
            lb = math.ceil(lb - INTEGRALITY_TOL) if math.isfinite(lb) else lb
            ub = math.floor(ub + INTEGRALITY_TOL) if math.isfinite(ub) else ub
        if lb > ub:
            raise ModelError(f"variable {name or '?'!r}: empty domain [{lb}, {ub}]")
        index = len(self.vars)
        if name is None:
            name = f"_x{index}"
            while name in self._names:
                name = "_" + name
        elif name in self._names:
            raise ModelError(f"model {self.name!r}: duplicate variable name {name!r}")
        self._names.add(name)
        var = Var(self, index, name, lb, ub, kind)
        self.vars.append(var)
        return var

    def int_var(self, lb: float, ub: float, name: str | None = None) -> Var:
        """Integer variable in [lb, ub] (bounds may be +-inf except on CP-SAT)."""
        return self._new_var(lb, ub, name, "int")

    def bool_var(self, name: str | None = None) -> Var:
        """0/1 variable."""
        return self._new_var(0, 1, name, "bool")

    def num_var(self, lb: float, ub: float, name: str | None = None) -> Var:
        """Continuous variable; CP-SAT cannot represent it (solve raises ModelError)."""
        return self._new_var(lb, ub, name, "num")

    # ---- constraints and objective ----
    def _checked_terms(self, terms: Mapping[Var, float], where: str) -> dict[Var, float]:
        out: dict[Var, float] = {}
        for var, coef in terms.items():
            if var.model is not self:
                raise ModelError(f"{where}: variable {var.name!r} belongs to model "
                                 f"{var.model.name!r}, not {self.name!r}")
            if not math.isfinite(coef):
                raise ModelError(f"{where}: non-finite coefficient {coef} on {var.name!r}")
            if coef != 0.0:
                out[var] = coef
        return out

    def add(self, constraint: Constraint | bool, name: str | None = None) -> Constraint | None:
        """Add ``expr <= rhs``, ``expr >= rhs`` or ``expr == rhs``.

        A plain ``bool`` is accepted because comparing two constants (e.g. an empty ``sum``
        against a number) yields one: True is a no-op, False makes the model infeasible.
        """
        label = name or f"c{len(self.constraints)}"
        if isinstance(constraint, bool):
            if not constraint and self.infeasible_reason is None:
                self.infeasible_reason = f"constraint {label!r} is the constant False"
            return None
        if not isinstance(constraint, Constraint):
            raise ModelError(f"add(): expected a comparison of linear expressions, got "
                             f"{type(constraint).__name__}")
        if math.isnan(constraint.lb) or math.isnan(constraint.ub):
            raise ModelError(f"constraint {label!r}: NaN right-hand side")
        if constraint.lb == math.inf or constraint.ub == -math.inf:
            if self.infeasible_reason is None:
                self.infeasible_reason = f"constraint {label!r} has an infinite bound on the "\
                    "wrong side"
            return None
        terms = self._checked_terms(constraint.terms, f"constraint {label!r}")
        if not terms:
            tol = 1e-9
            if (constraint.lb > tol or constraint.ub < -tol) and self.infeasible_reason is None:
                self.infeasible_reason = (
                    f"constraint {label!r} has no variables and is violated: "
                    f"{constraint.lb} <= 0 <= {constraint.ub}"
                )
            return None
        con = Constraint(terms, constraint.lb, constraint.ub, label)
        self.constraints.append(con)
        return con

    def _set_objective(self, expr: Var | LinExpr | Number, sense: Literal["min", "max"]) -> None:
        split = _terms_of(expr)
        if split is None:
            raise ModelError(f"objective must be linear, got {type(expr).__name__}")
        if not math.isfinite(split[1]):
            raise ModelError("objective: non-finite constant")
        self.objective = LinExpr(self._checked_terms(split[0], "objective"), split[1])
        self.sense = sense

    def minimize(self, expr: Var | LinExpr | Number) -> None:
        self._set_objective(expr, "min")

    def maximize(self, expr: Var | LinExpr | Number) -> None:
        self._set_objective(expr, "max")

    def hint(self, var: Var, value: float) -> None:
        """Suggest a value (e.g. the previous allocation). Used by CP-SAT, ignored by others."""
        if var.model is not self:
            raise ModelError(f"hint(): variable {var.name!r} is not in model {self.name!r}")
        self.hints[var] = value

    def __repr__(self) -> str:
        return (f"MipModel({self.name!r}, vars={len(self.vars)}, "
                f"constraints={len(self.constraints)}, sense={self.sense})")


# --------------------------------------------------------------------------------------------
# Solutions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Solution:
    """What :func:`solve` returns: stats always, values only when ``ok``."""

    stats: SolverStats
    model: MipModel
    raw_values: list[Number] | None = field(default=None, repr=False)
    """Values by variable index (integers already rounded); None without a solution."""

    @property
    def ok(self) -> bool:
        """True when a usable solution exists (status optimal or feasible)."""
        return self.stats.status in ("optimal", "feasible")

    @property
    def objective(self) -> float | None:
        return self.stats.objective

    def value(self, item: Var | LinExpr | Number) -> Number:
        """Value of a variable (int for integer variables) or of a linear expression."""
        if self.raw_values is None:
            st = self.stats
            detail = f": {st.message}" if st.message else ""
            raise NoSolutionError(
                f"{st.stage}/{st.backend}: no solution (status {st.status}{detail})"
            )
        if isinstance(item, Var):
            if item.model is not self.model:
                raise ModelError(f"variable {item.name!r} is not in model {self.model.name!r}")
            return self.raw_values[item.index]
        split = _terms_of(item)
        if split is None:
            raise TypeError(f"cannot evaluate {type(item).__name__}")
        vals = self.raw_values
        return split[1] + sum(c * vals[v.index] for v, c in split[0].items())

    @functools.cached_property
    def values(self) -> dict[str, Number]:
        """Variable name -> value; empty when there is no solution."""
        if self.raw_values is None:
            return {}
        return {v.name: self.raw_values[v.index] for v in self.model.vars}


@dataclass
class _Raw:
    """Backend-specific result before common post-processing."""

    status: SolverStatus
    values: list[float] | None = None
    bound: float | None = None  # without the objective constant
    message: str = ""
    solve_s: float = 0.0  # time inside the solver call proper


# --------------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------------


def _int_or_none(x: float) -> int | None:
    r = round(x)
    return int(r) if abs(x - r) <= INTEGRALITY_TOL else None


def _no_solution_status(solve_s: float, time_limit_s: float, raw_name: str) -> tuple[
        SolverStatus, str]:
    """Classify "stopped without a solution or proof": timeout if the limit was reached."""
    if solve_s >= _TIMEOUT_FRACTION * time_limit_s:
        return "timeout", f"time limit {time_limit_s:g}s reached without a solution ({raw_name})"
    return "error", (f"solver stopped after {solve_s * 1000:.0f} ms, before the "
                     f"{time_limit_s:g}s limit, without a solution ({raw_name})")


def _solve_cpsat(model: MipModel, time_limit_s: float, threads: int, seed: int,
                 rel_gap: float) -> _Raw:
    from ortools.sat.python import cp_model

    cp = cp_model.CpModel()
    cp.name = model.name
    cvars = []
    for v in model.vars:
        if v.kind == "num":
            raise ModelError(f"cp-sat: continuous variable {v.name!r} is not supported; "
                             "use a MIP backend (scip, cbc, highs, pulp-cbc) or make it integer")
        if not (math.isfinite(v.lb) and math.isfinite(v.ub)):
            raise ModelError(f"cp-sat: integer variable {v.name!r} needs finite bounds, "
                             f"got [{v.lb}, {v.ub}]")
        cvars.append(cp.new_int_var(int(v.lb), int(v.ub), v.name))

    for con in model.constraints:
        idx, coefs = [], []
        for var, coef in con.terms.items():
            ic = _int_or_none(coef)
            if ic is None:
                raise ModelError(
                    f"cp-sat: constraint {con.name!r} has non-integer coefficient {coef!r} on "
                    f"{var.name!r}; CP-SAT constraints must be integral. Scale the row (e.g. "
                    "express memory in MiB) or use a MIP backend"
                )
            idx.append(cvars[var.index])
            coefs.append(ic)
        # With integral coefficients and variables the row activity is integral, so rounding
        # the sides inward is exact.
        lb = cp_model.INT_MIN if con.lb == -math.inf else math.ceil(con.lb - INTEGRALITY_TOL)
        ub = cp_model.INT_MAX if con.ub == math.inf else math.floor(con.ub + INTEGRALITY_TOL)
        if lb > ub:
            return _Raw("infeasible", message=f"constraint {con.name!r} has an empty integer "
                        f"range [{con.lb}, {con.ub}]")
        cp.add_linear_constraint(cp_model.LinearExpr.weighted_sum(idx, coefs), lb, ub)

    obj = model.objective.terms
    if obj:
        ovars = [cvars[v.index] for v in obj]
        int_coefs = [_int_or_none(c) for c in obj.values()]
        # Integral objective: exact. Fractional: CP-SAT's native floating-point objective.
        ocoefs: list[int] | list[float] = (
            [c for c in int_coefs if c is not None]
            if None not in int_coefs else list(obj.values())
        )
        expr = cp_model.LinearExpr.weighted_sum(ovars, ocoefs)
        if model.sense == "min":
            cp.minimize(expr)
        else:
            cp.maximize(expr)
    for var, value in model.hints.items():
        cp.add_hint(cvars[var.index], round(value))

    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_time_in_seconds = time_limit_s
    params.num_workers = threads
    params.random_seed = seed
    params.relative_gap_limit = rel_gap
    params.log_search_progress = False
    t0 = time.perf_counter()
    code = solver.solve(cp)
    solve_s = time.perf_counter() - t0
    name = solver.status_name(code)

    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        values = [float(solver.value(cv)) for cv in cvars]
        bound = solver.best_objective_bound if obj else None
        return _Raw("optimal" if code == cp_model.OPTIMAL else "feasible", values, bound,
                    solve_s=solve_s)
    if code == cp_model.INFEASIBLE:
        return _Raw("infeasible", message="cp-sat proved infeasibility", solve_s=solve_s)
    if code == cp_model.MODEL_INVALID:
        return _Raw("error", message=f"cp-sat MODEL_INVALID: {cp.validate()}", solve_s=solve_s)
    status, msg = _no_solution_status(solve_s, time_limit_s, name)
    # CP-SAT keeps a valid bound even when it found no solution.
    bound = solver.best_objective_bound if obj and status == "timeout" else None
    if bound is not None and not math.isfinite(bound):
        bound = None
    return _Raw(status, None, bound, msg, solve_s)


def _solve_pywraplp(model: MipModel, backend: str, time_limit_s: float, threads: int,
                    seed: int, rel_gap: float) -> _Raw:
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver(_PYWRAPLP_IDS[backend])
    if solver is None:
        return _Raw("error", message=f"{backend} cannot be created in this OR-Tools build; "
                    f"available: {', '.join(available_backends())}")
    solver.SuppressOutput()
    inf = solver.infinity()

    def clip(x: float) -> float:
        return inf if x == math.inf else -inf if x == -math.inf else x

    pvars = []
    for v in model.vars:
        if v.kind == "num":
            pvars.append(solver.NumVar(clip(v.lb), clip(v.ub), v.name))
        else:
            pvars.append(solver.IntVar(clip(v.lb), clip(v.ub), v.name))
    for con in model.constraints:
        row = solver.RowConstraint(clip(con.lb), clip(con.ub), con.name)
        for var, coef in con.terms.items():
            row.SetCoefficient(pvars[var.index], coef)
    objective = solver.Objective()
    for var, coef in model.objective.terms.items():
        objective.SetCoefficient(pvars[var.index], coef)
    if model.sense == "max":
        objective.SetMaximization()
    else:
        objective.SetMinimization()

    solver.SetTimeLimit(max(1, round(time_limit_s * 1000)))
    params = pywraplp.MPSolverParameters()
    # pywraplp's default relative MIP gap is 1e-4: "optimal" would not mean optimal.
    params.SetDoubleParam(pywraplp.MPSolverParameters.RELATIVE_MIP_GAP, rel_gap)
    if backend == "scip":
        solver.SetNumThreads(threads)
        solver.SetSolverSpecificParametersAsString(f"randomization/randomseedshift = {seed}\n")
    elif backend == "highs":
        # The OR-Tools HiGHS interface ignores the generic gap parameter and applies this
        # string even though the setter returns False. output_flag must come first, otherwise
        # HiGHS prints its banner on stdout. Threads are pinned to 1: HiGHS fixes its global
        # scheduler on first use and fails later runs that ask for a different count.
        solver.SetSolverSpecificParametersAsString(
            "output_flag=false\nlog_to_console=false\nthreads=1\n"
            f"random_seed={seed}\nmip_rel_gap={rel_gap!r}\n"
        )
    # cbc: nothing to set. OR-Tools' CBC is built without threads (asking for more prints
    # "No match for threads" on stdout) and uses a fixed seed, so it is deterministic as is.

    t0 = time.perf_counter()
    code = solver.Solve(params)
    solve_s = time.perf_counter() - t0

    if code in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        values = [pv.solution_value() for pv in pvars]
        bound: float | None = objective.BestBound() if model.objective.terms else None
        if backend == "highs" and code == pywraplp.Solver.FEASIBLE:
            bound = None  # OR-Tools reports HiGHS's incumbent as its bound: not a real bound
        status: SolverStatus = "optimal" if code == pywraplp.Solver.OPTIMAL else "feasible"
        return _Raw(status, values, bound, solve_s=solve_s)
    if code == pywraplp.Solver.INFEASIBLE:
        return _Raw("infeasible", message=f"{backend} proved infeasibility", solve_s=solve_s)
    if code == pywraplp.Solver.UNBOUNDED:
        return _Raw("error", message=f"{backend}: model is unbounded", solve_s=solve_s)
    if code == pywraplp.Solver.MODEL_INVALID:
        return _Raw("error", message=f"{backend}: MODEL_INVALID", solve_s=solve_s)
    if code == pywraplp.Solver.ABNORMAL:
        return _Raw("error", message=f"{backend}: ABNORMAL termination", solve_s=solve_s)
    # NOT_SOLVED, or codes pywraplp has no constant for (99 = unknown, 8x = bad parameters).
    raw_name = "NOT_SOLVED" if code == pywraplp.Solver.NOT_SOLVED else f"status code {code}"
    status, msg = _no_solution_status(solve_s, time_limit_s, raw_name)
    return _Raw(status, message=msg, solve_s=solve_s)


_CBC_BOUND_RE = re.compile(r"^(?:Lower|Upper) bound:\s*(\S+)", re.MULTILINE)


def _solve_pulp_cbc(model: MipModel, time_limit_s: float, threads: int, seed: int,
                    rel_gap: float) -> _Raw:
    # PuLP 3.x deprecates direct LpVariable construction and PULP_CBC_CMD ahead of 4.0; both
    # still work and the alternatives do not exist in the PuLP 2.8 we also support.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return _solve_pulp_cbc_quiet(model, time_limit_s, threads, seed, rel_gap)


def _solve_pulp_cbc_quiet(model: MipModel, time_limit_s: float, threads: int, seed: int,
                          rel_gap: float) -> _Raw:
    import pulp

    prob = pulp.LpProblem("gpuplan", pulp.LpMaximize if model.sense == "max" else
                          pulp.LpMinimize)
    cats = {"int": pulp.LpInteger, "bool": pulp.LpBinary, "num": pulp.LpContinuous}
    # Internal names: PuLP mangles or rejects names containing spaces and operators.
    pvars = [
        pulp.LpVariable(f"v{v.index}", None if v.lb == -math.inf else v.lb,
                        None if v.ub == math.inf else v.ub, cats[v.kind])
        for v in model.vars
    ]
    if model.objective.terms:
        prob.setObjective(pulp.LpAffineExpression(
            [(pvars[v.index], c) for v, c in model.objective.terms.items()]))
    for k, con in enumerate(model.constraints):
        expr = [(pvars[v.index], c) for v, c in con.terms.items()]
        if con.lb == con.ub:
            prob.addConstraint(pulp.LpConstraint(pulp.LpAffineExpression(expr),
                                                 pulp.LpConstraintEQ, f"c{k}", con.lb))
            continue
        if con.ub != math.inf:
            prob.addConstraint(pulp.LpConstraint(pulp.LpAffineExpression(expr),
                                                 pulp.LpConstraintLE, f"c{k}u", con.ub))
        if con.lb != -math.inf:
            prob.addConstraint(pulp.LpConstraint(pulp.LpAffineExpression(expr),
                                                 pulp.LpConstraintGE, f"c{k}l", con.lb))

    # CBC's seed value 0 means "time of day"; its defaults are fixed, so keep them for seed 0.
    options = [f"randomCbcSeed {seed}", f"randomSeed {seed}"] if seed else []
    fd, log_path = tempfile.mkstemp(prefix="gpuplan-cbc-", suffix=".log")
    os.close(fd)
    try:
        cmd = pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, threads=threads,
                                gapRel=rel_gap if rel_gap > 0 else None, options=options,
                                logPath=log_path)
        t0 = time.perf_counter()
        try:
            prob.solve(cmd)
        except pulp.PulpSolverError as exc:
            return _Raw("error", message=f"pulp-cbc failed: {exc}",
                        solve_s=time.perf_counter() - t0)
        solve_s = time.perf_counter() - t0
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            cbc_log = fh.read()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(log_path)
    match = _CBC_BOUND_RE.search(cbc_log)
    log_bound = float(match.group(1)) if match else None
    if log_bound is not None and not math.isfinite(log_bound):
        log_bound = None

    sol = prob.sol_status
    if sol in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        values = [float(pv.varValue) if pv.varValue is not None else 0.0 for pv in pvars]
        status: SolverStatus = "optimal" if sol == pulp.LpSolutionOptimal else "feasible"
        if status == "optimal":
            log_bound = None  # filled with the objective in post-processing
        return _Raw(status, values, log_bound if model.objective.terms else None,
                    solve_s=solve_s)
    if sol == pulp.LpSolutionInfeasible or prob.status == pulp.LpStatusInfeasible:
        return _Raw("infeasible", message="pulp-cbc proved infeasibility", solve_s=solve_s)
    if sol == pulp.LpSolutionUnbounded or prob.status == pulp.LpStatusUnbounded:
        return _Raw("error", message="pulp-cbc: model is unbounded", solve_s=solve_s)
    status, msg = _no_solution_status(solve_s, time_limit_s,
                                      f"PuLP status {pulp.LpStatus[prob.status]}")
    return _Raw(status, None, log_bound if status == "timeout" else None, msg, solve_s)


@functools.cache
def available_backends() -> list[str]:
    """Backends that can actually be created in this environment, in :data:`BACKENDS` order.

    OR-Tools wheels may be built without some MIP solvers, so this asks ``pywraplp`` rather
    than assuming. Cached: the answer cannot change within a process.
    """
    found = []
    try:
        from ortools.sat.python import cp_model  # noqa: F401

        found.append("cp-sat")
    except ImportError:  # pragma: no cover - ortools is a hard dependency
        pass
    try:
        from ortools.linear_solver import pywraplp

        for backend, solver_id in _PYWRAPLP_IDS.items():
            if pywraplp.Solver.CreateSolver(solver_id) is not None:
                found.append(backend)
    except ImportError:  # pragma: no cover
        pass
    try:
        import pulp

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            if pulp.PULP_CBC_CMD(msg=False).available():
                found.append("pulp-cbc")
    except ImportError:  # pragma: no cover
        pass
    return [b for b in BACKENDS if b in found]


# --------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------


def _validate_args(backend: str, time_limit_s: float, threads: int, seed: int,
                   rel_gap: float) -> None:
    if backend not in BACKENDS:
        raise UnknownBackendError(f"unknown solver backend {backend!r}; allowed: "
                                  f"{', '.join(BACKENDS)}", field="backend")
    if not (_is_number(time_limit_s) and math.isfinite(time_limit_s) and time_limit_s > 0):
        raise InputError(f"time_limit_s must be a finite number > 0, got {time_limit_s!r}",
                         field="time_limit_s")
    if not isinstance(threads, int) or threads < 1:
        raise InputError(f"threads must be an integer >= 1, got {threads!r}", field="threads")
    if not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed must be an integer >= 0, got {seed!r}", field="seed")
    if not (_is_number(rel_gap) and 0 <= rel_gap < 1):
        raise InputError(f"rel_gap must be in [0, 1), got {rel_gap!r}", field="rel_gap")


def solve(
    model: MipModel,
    backend: str = "cp-sat",
    *,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    stage: str = "mip",
    threads: int = 1,
    seed: int = 0,
    rel_gap: float = 0.0,
) -> Solution:
    """Solve ``model`` with ``backend`` under a mandatory time limit.

    Solver outcomes (infeasible, timeout, unbounded, backend failures) are reported in
    ``Solution.stats.status``, never raised. Raised instead: :class:`UnknownBackendError` /
    :class:`InputError` for bad arguments and :class:`ModelError` when ``backend`` cannot
    represent the model -- both are bugs in the caller, not properties of the instance.

    ``rel_gap`` = 0 makes "optimal" mean proven optimal (pywraplp's own default is 1e-4).
    ``wall_ms`` covers translation to the backend, the solve and reading the values back.
    """
    _validate_args(backend, time_limit_s, threads, seed, rel_gap)
    start = time.perf_counter()
    if model.infeasible_reason is not None:
        raw = _Raw("infeasible", message=model.infeasible_reason)
    elif backend == "cp-sat":
        raw = _solve_cpsat(model, time_limit_s, threads, seed, rel_gap)
    elif backend == "pulp-cbc":
        raw = _solve_pulp_cbc(model, time_limit_s, threads, seed, rel_gap)
    else:
        raw = _solve_pywraplp(model, backend, time_limit_s, threads, seed, rel_gap)

    values: list[Number] | None = None
    objective = bound = gap = None
    const = model.objective.const
    has_obj = bool(model.objective.terms)
    if raw.values is not None:
        values = [round(x) if v.kind != "num" else x for v, x in zip(model.vars, raw.values,
                                                                     strict=True)]
        # Recomputed from the rounded values, so integral data give an exact objective.
        objective = const + math.fsum(c * values[v.index]
                                      for v, c in model.objective.terms.items())
    if raw.bound is not None:
        bound = raw.bound + const
    if objective is not None:
        if raw.status == "optimal" and (
            not has_obj or bound is None
            or abs(bound - objective) <= 1e-6 * max(1.0, abs(objective))
        ):
            bound = objective  # proven optimal: clear float noise between bound and objective
        if bound is not None:
            gap = abs(objective - bound) / max(1.0, abs(objective))
    wall_ms = (time.perf_counter() - start) * 1000.0
    stats = SolverStats(
        stage=stage, backend=backend, status=raw.status, objective=objective, bound=bound,
        gap=gap, wall_ms=wall_ms, time_limit_s=time_limit_s, message=raw.message,
    )
    return Solution(stats=stats, model=model, raw_values=values)


def solve_with_fallback(
    model: MipModel | Callable[[], MipModel],
    heuristic: Callable[[], T],
    decode: Callable[[Solution], T],
    backend: str = "cp-sat",
    *,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    stage: str = "mip",
    threads: int = 1,
    seed: int = 0,
    rel_gap: float = 0.0,
) -> tuple[T, SolverStats]:
    """Exact answer when the solver delivers one, otherwise the heuristic's; never stuck.

    ``model`` may be a :class:`MipModel` or a zero-argument builder; a builder that raises
    counts as a failed exact attempt. The heuristic runs when the solve is not ``ok``
    (timeout, infeasible, error) or when building/solving raises anything; its result is
    returned with ``status='heuristic'``, ``fell_back=True`` and the reason in ``message``.
    Errors raised by ``heuristic`` or ``decode`` propagate: they are gpuplan bugs, and hiding
    them behind another fallback would leave no working path. Argument errors (unknown
    backend, bad time limit) also raise, before anything runs.
    """
    _validate_args(backend, time_limit_s, threads, seed, rel_gap)
    start = time.perf_counter()
    bound: float | None = None
    try:
        built = model() if callable(model) else model
        solution = solve(built, backend, time_limit_s=time_limit_s, stage=stage,
                         threads=threads, seed=seed, rel_gap=rel_gap)
    except Exception as exc:  # any exact-path failure must fall back
        reason = f"{backend} raised {type(exc).__name__}: {exc}"
    else:
        if solution.ok:
            return decode(solution), solution.stats
        st = solution.stats
        bound = st.bound
        reason = (f"{backend} status {st.status} after {st.wall_ms:.0f} ms"
                  + (f" ({st.message})" if st.message else ""))
    log.info("stage %s: exact solve failed, using heuristic: %s", stage, reason)
    result = heuristic()
    stats = SolverStats(
        stage=stage, backend=backend, status="heuristic", bound=bound,
        wall_ms=(time.perf_counter() - start) * 1000.0, time_limit_s=time_limit_s,
        fell_back=True, message=f"exact solve failed, heuristic used: {reason}",
    )
    return result, stats
