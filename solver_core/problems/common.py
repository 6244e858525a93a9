"""What every problem's runner returns, and the one way a MIP is timed and solved here.

A comparison must not hide anything: the MIP path calls :func:`~..backends.solve` directly
(no fallback), so a timeout is reported as ``timeout`` (or ``feasible`` with the incumbent),
and ``optimal`` only when the backend proved it. Build time (stating the model in
:class:`~..mip_model.MipModel`) and solve time (translation + backend + read-back) are
reported apart, because a slow translation is a different problem from a slow search.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuplan.models import SolverStats

from ..backends import BACKENDS, MipModel, Solution, solve
from ..limits import SolveLimits
from .mathopt import MATHOPT_ALIASES

__all__ = [
    "MATHOPT_SOLVERS",
    "MIP_SOLVERS",
    "Outcome",
    "heuristic_outcome",
    "mip_defaults",
    "solve_mip",
]

MIP_SOLVERS: tuple[str, ...] = tuple(BACKENDS)
"""Every MIP backend name, in the MIP layer's order (cp-sat, scip, cbc, highs, pulp-cbc)."""

MATHOPT_SOLVERS: tuple[str, ...] = tuple(MATHOPT_ALIASES)
"""Accepted aliases (``mathopt-highs`` = ``highs``, ``mathopt-scip`` = ``scip``; see
:mod:`.mathopt`); mckp and reclaim only."""


@dataclass
class Outcome:
    """One solver's answer: README status/objective/bound/gap, the solution, and timings."""

    status: str
    objective: float | None
    bound: float | None
    gap: float | None
    solution: dict[str, Any]
    build_ms: float | None
    solve_ms: float
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def mip_defaults(mathopt: bool = False) -> tuple[str, ...]:
    """MIP backends usable in this environment. ``mathopt`` is kept for callers; the MathOpt
    names are aliases of ``highs``/``scip`` now and are never run twice by default."""
    from ..mip_backends import available_backends
    from .mathopt import mathopt_available

    return (*available_backends(), *(mathopt_available() if mathopt else ()))


def solve_mip(
    build: Callable[[], MipModel],
    decode: Callable[[Solution], dict[str, Any]],
    backend: str,
    limits: SolveLimits,
    score: Callable[[dict[str, Any]], float],
) -> Outcome:
    """Build, solve with ``backend`` under ``limits`` and decode; status straight from it.

    ``score`` recomputes the objective from the decoded solution (the instance's own units),
    so a model's scaling or constant terms never leak into the table. A solution found before
    the limit is ``feasible``; none is ``timeout``/``infeasible``/``error`` as the backend says.
    """
    t0 = time.perf_counter()
    model = build()
    build_ms = (time.perf_counter() - t0) * 1000.0
    sol = solve(model, MATHOPT_ALIASES.get(backend, backend), limits=limits, stage="solve")
    st: SolverStats = sol.stats
    solution: dict[str, Any] = {}
    objective = bound = gap = None
    status = st.status
    if sol.raw_values is not None and status in ("optimal", "feasible", "timeout"):
        solution = decode(sol)
        objective = score(solution)
        if status == "timeout":
            status = "feasible"
        if status == "optimal":
            bound, gap = objective, 0.0
        elif st.bound is not None and st.objective is not None:
            gap = st.gap
            bound = st.bound
    return Outcome(status, objective, bound, gap, solution, build_ms, st.wall_ms, st.message)


def heuristic_outcome(
    solution: dict[str, Any], objective: float, t0: float, status: str = "heuristic"
) -> Outcome:
    """A heuristic's answer: no bound, no gap, the whole run counted as solve time."""
    return Outcome(
        status, objective, None, None, solution, None, (time.perf_counter() - t0) * 1000.0
    )


class RuleBroken(AssertionError):
    """An answer breaks a rule of its problem's model (raised by the problems' ``check``).

    An ``AssertionError`` so callers that caught the checkers' former ``assert`` keep working,
    but raised explicitly: ``python -O`` strips ``assert`` statements, and a checker that
    passes every answer under it would let a broken answer through ``gpuplan solve``."""


def rule(holds: bool, message: str) -> None:
    """Raise :class:`RuleBroken` with ``message`` unless ``holds``."""
    if not holds:
        raise RuleBroken(message)
