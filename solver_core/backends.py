"""One way to state a small integer program and solve it with any exact backend.

Every exact decision in gpuplan (knapsacks, reclaim, placement, network-packing regulation) is a
small integer program. Writing each against OR-Tools or PuLP directly would tie the policy to one
solver and duplicate the status/limit/fallback handling five times. Instead a policy states its
model once with :class:`MipModel` (:mod:`~gpuplan.solver_core.mip_model`, a thin solver-free
builder) and calls :func:`solve` (or :func:`solve_with_fallback`), which translates it once to an
OR-Tools MathOpt model (:func:`~gpuplan.solver_core.mip_backends.to_mathopt`), solves it with the
chosen backend and reports a uniform :class:`~gpuplan.models.SolverStats`.

Budgets are :class:`~gpuplan.solver_core.limits.SolveLimits`: policies pass deterministic ones
(CP-SAT deterministic time, node limits) so a run depends on its inputs and seed alone; a plain
``time_limit_s`` is a wall-clock limit for interactive use. Either way the clock starts before
the model is translated, so building counts against the limit.

Backends (see ``docs/solvers.md``):

* ``cp-sat``, ``scip``, ``highs`` -- ``mathopt.solve`` with SolverType CP_SAT, GSCIP, HIGHS.
  CP-SAT takes integer variables only; constraint coefficients must be integral (non-integral
  ones raise :class:`ModelError`); the objective may be fractional (CP-SAT scales it).
* ``cbc`` -- MathOpt has no CBC: the MathOpt model is loaded into ``pywraplp``'s CBC
  (wall-clock limit only).
* ``pulp-cbc`` -- PuLP's CBC executable, read from the same MathOpt model (separate process,
  ~30 ms extra latency; the one CBC route with a node limit).
"""

from __future__ import annotations

import logging
import math
import numbers
import time
from collections.abc import Callable
from typing import TypeVar

from gpuplan.models.errors import InputError
from gpuplan.models.plan import SolverStats

from .limits import DEFAULT_TIME_LIMIT_S, SolveLimits
from .mip_backends import BACKENDS, available_backends, run_backend
from .mip_model import (
    Constraint,
    LinExpr,
    MipModel,
    ModelError,
    NoSolutionError,
    Number,
    Solution,
    Var,
    lin_sum,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_TIME_LIMIT_S",
    "Constraint",
    "LinExpr",
    "MipModel",
    "ModelError",
    "NoSolutionError",
    "Solution",
    "SolveLimits",
    "UnknownBackendError",
    "Var",
    "available_backends",
    "lin_sum",
    "solve",
    "solve_with_fallback",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


class UnknownBackendError(InputError, ValueError):
    """A backend name outside :data:`BACKENDS` (usually a typo in a scenario or CLI flag)."""


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float, numbers.Real))


def _validate_args(
    backend: str, limits: SolveLimits, threads: int, seed: int, rel_gap: float
) -> None:
    if backend not in BACKENDS:
        raise UnknownBackendError(
            f"unknown solver backend {backend!r}; allowed: {', '.join(BACKENDS)}", field="backend"
        )
    if not isinstance(limits, SolveLimits):
        raise InputError(
            f"limits must be a SolveLimits, got {type(limits).__name__}", field="limits"
        )
    if not isinstance(threads, int) or threads < 1:
        raise InputError(f"threads must be an integer >= 1, got {threads!r}", field="threads")
    if not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed must be an integer >= 0, got {seed!r}", field="seed")
    if not (_is_number(rel_gap) and 0 <= rel_gap < 1):
        raise InputError(f"rel_gap must be in [0, 1), got {rel_gap!r}", field="rel_gap")


def _limits_of(time_limit_s: float | None, limits: SolveLimits | None) -> SolveLimits:
    """``limits`` if given, else a wall-clock limit of ``time_limit_s`` (default 10 s)."""
    if limits is not None:
        if time_limit_s is not None:
            raise InputError("give either time_limit_s or limits, not both", field="time_limit_s")
        return limits
    if time_limit_s is None:
        return SolveLimits.wall(DEFAULT_TIME_LIMIT_S)
    if not (_is_number(time_limit_s) and math.isfinite(time_limit_s) and time_limit_s > 0):
        raise InputError(
            f"time_limit_s must be a finite number > 0, got {time_limit_s!r}", field="time_limit_s"
        )
    return SolveLimits.wall(float(time_limit_s))


def _limit_fields(limits: SolveLimits) -> dict[str, object]:
    return {
        "time_limit_s": limits.wall_s,
        "work_limit_s": limits.work_s,
        "node_limit": limits.nodes,
        "deterministic": limits.deterministic,
    }


def solve(
    model: MipModel,
    backend: str = "cp-sat",
    *,
    time_limit_s: float | None = None,
    limits: SolveLimits | None = None,
    stage: str = "mip",
    threads: int = 1,
    seed: int = 0,
    rel_gap: float = 0.0,
) -> Solution:
    """Solve ``model`` with ``backend`` within a budget that is never unlimited.

    The budget is ``limits`` (policies: :meth:`SolveLimits.deterministic_budget`) or a
    wall-clock ``time_limit_s`` (default 10 s); not both. Solver outcomes (infeasible, timeout,
    unbounded, backend failures) are reported in ``Solution.stats.status``, never raised; a
    budget that ran out without a solution is ``timeout``, told apart from ``error`` by the
    backend's own reason for stopping. Raised instead: :class:`UnknownBackendError` /
    :class:`InputError` for bad arguments and :class:`ModelError` when ``backend`` cannot
    represent the model -- both are bugs in the caller, not properties of the instance.

    ``rel_gap`` = 0 makes "optimal" mean proven optimal (the solvers' defaults are around 1e-4).
    ``wall_ms`` covers translation to the backend, the solve and reading the values back.
    """
    budget = _limits_of(time_limit_s, limits)
    _validate_args(backend, budget, threads, seed, rel_gap)
    return _solve_from(model, backend, budget, time.perf_counter(), stage, threads, seed, rel_gap)


def _solve_from(
    model: MipModel,
    backend: str,
    limits: SolveLimits,
    start: float,
    stage: str,
    threads: int,
    seed: int,
    rel_gap: float,
) -> Solution:
    """:func:`solve` with the wall clock started at ``start`` (before the model was built)."""
    if model.infeasible_reason is not None:
        raw_status, raw_values, raw_bound, raw_message = (
            "infeasible",
            None,
            None,
            model.infeasible_reason,
        )
    else:
        raw = run_backend(model, backend, limits, start + limits.wall_s, threads, seed, rel_gap)
        raw_status, raw_values, raw_bound, raw_message = (
            raw.status,
            raw.values,
            raw.bound,
            raw.message,
        )

    values: list[Number] | None = None
    objective = bound = gap = None
    const = model.objective.const
    has_obj = bool(model.objective.terms)
    if raw_values is not None:
        values = [
            round(x) if v.kind != "num" else x for v, x in zip(model.vars, raw_values, strict=True)
        ]
        # Recomputed from the rounded values, so integral data give an exact objective.
        objective = const + math.fsum(c * values[v.index] for v, c in model.objective.terms.items())
    if raw_bound is not None and math.isfinite(raw_bound):
        bound = raw_bound + const
    if objective is not None:
        if raw_status == "optimal" and (
            not has_obj
            or bound is None
            or abs(bound - objective) <= 1e-6 * max(1.0, abs(objective))
        ):
            bound = objective  # proven optimal: clear float noise between bound and objective
        if bound is not None:
            gap = abs(objective - bound) / max(1.0, abs(objective))
    wall_ms = (time.perf_counter() - start) * 1000.0
    stats = SolverStats(
        stage=stage,
        backend=backend,
        status=raw_status,
        objective=objective,
        bound=bound,
        gap=gap,
        wall_ms=wall_ms,
        message=raw_message,
        **_limit_fields(limits),
    )
    return Solution(stats=stats, model=model, raw_values=values)


def solve_with_fallback(
    model: MipModel | Callable[[], MipModel],
    heuristic: Callable[[], T],
    decode: Callable[[Solution], T],
    backend: str = "cp-sat",
    *,
    time_limit_s: float | None = None,
    limits: SolveLimits | None = None,
    stage: str = "mip",
    threads: int = 1,
    seed: int = 0,
    rel_gap: float = 0.0,
) -> tuple[T, SolverStats]:
    """Exact answer when the solver delivers one, otherwise the heuristic's; never stuck.

    ``model`` may be a :class:`MipModel` or a zero-argument builder; a builder that raises
    counts as a failed exact attempt, and the budget's wall clock starts before it runs. The
    heuristic runs when the solve is not ``ok`` (timeout, infeasible, error) or when
    building/solving raises anything; its result is returned with ``status='heuristic'``,
    ``fell_back=True`` and the reason in ``message``, so every caller sees that the answer is
    not proven. Errors raised by ``heuristic`` or ``decode`` propagate: they are gpuplan bugs,
    and hiding them behind another fallback would leave no working path. Argument errors
    (unknown backend, bad limits) also raise, before anything runs.
    """
    budget = _limits_of(time_limit_s, limits)
    _validate_args(backend, budget, threads, seed, rel_gap)
    start = time.perf_counter()
    bound: float | None = None
    try:
        built = model() if callable(model) else model
        solution = _solve_from(built, backend, budget, start, stage, threads, seed, rel_gap)
    except Exception as exc:  # any exact-path failure must fall back
        reason = f"{backend} raised {type(exc).__name__}: {exc}"
    else:
        if solution.ok:
            return decode(solution), solution.stats
        st = solution.stats
        bound = st.bound
        reason = f"{backend} status {st.status} after {st.wall_ms:.0f} ms" + (
            f" ({st.message})" if st.message else ""
        )
    log.info("stage %s: exact solve failed, using heuristic: %s", stage, reason)
    result = heuristic()
    stats = SolverStats(
        stage=stage,
        backend=backend,
        status="heuristic",
        bound=bound,
        wall_ms=(time.perf_counter() - start) * 1000.0,
        fell_back=True,
        message=f"exact solve failed, heuristic used: {reason}",
        **_limit_fields(budget),
    )
    return result, stats
