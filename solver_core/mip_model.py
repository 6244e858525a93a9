"""The modelling layer: variables, linear expressions, constraints and :class:`MipModel`.

Every exact decision in gpuplan (knapsacks, reclaim, placement, network-packing regulation) is a
small integer program. It is stated once against this layer, a thin builder, and translated
once at solve time to an OR-Tools MathOpt model by :func:`~gpuplan.solver_core.mip_backends.
to_mathopt`, from which every backend works; :mod:`gpuplan.solver_core.backends` is the entry
point (``solve``, ``solve_with_fallback``). Kept free of any solver import (policies and
``models`` must not import one) so that building a model costs nothing until it is solved.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from gpuplan.models.errors import GpuplanError
from gpuplan.models.plan import SolverStats

__all__ = [
    "INTEGRALITY_TOL",
    "Constraint",
    "LinExpr",
    "MipModel",
    "ModelError",
    "NoSolutionError",
    "Number",
    "Solution",
    "Var",
    "VarKind",
    "lin_sum",
]

INTEGRALITY_TOL = 1e-9
"""A coefficient within this of an integer counts as that integer (CP-SAT, integer bounds)."""

VarKind = Literal["int", "bool", "num"]
Number = int | float


class ModelError(GpuplanError, ValueError):
    """The model is malformed, or the chosen backend cannot represent it (e.g. a continuous
    variable or a fractional constraint coefficient on CP-SAT). A programming error in the code
    that built the model, not a property of the instance."""


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

    def __init__(
        self, model: MipModel, index: int, name: str, lb: float, ub: float, kind: VarKind
    ) -> None:
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
                raise ModelError(
                    f"{where}: variable {var.name!r} belongs to model "
                    f"{var.model.name!r}, not {self.name!r}"
                )
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
            raise ModelError(
                f"add(): expected a comparison of linear expressions, got "
                f"{type(constraint).__name__}"
            )
        if math.isnan(constraint.lb) or math.isnan(constraint.ub):
            raise ModelError(f"constraint {label!r}: NaN right-hand side")
        if constraint.lb == math.inf or constraint.ub == -math.inf:
            if self.infeasible_reason is None:
                self.infeasible_reason = (
                    f"constraint {label!r} has an infinite bound on the wrong side"
                )
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
        return (
            f"MipModel({self.name!r}, vars={len(self.vars)}, "
            f"constraints={len(self.constraints)}, sense={self.sense})"
        )


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
