"""``mathopt-highs`` and ``mathopt-scip``: the names ``gpuplan solve`` used to give the MathOpt
route while the MIP layer still went through ``pywraplp``.

MathOpt is now the MIP layer's only translation (:func:`~..mip_backends.to_mathopt`), so the two
names are aliases of ``highs`` and ``scip``: the same model, solver, limits and answer. They stay
accepted so that scripts and saved command lines keep working, and are no longer run by default
(the table would show the same solver twice).
"""

from __future__ import annotations

from ..backends import MipModel, Solution, solve
from ..limits import SolveLimits

__all__ = ["MATHOPT_ALIASES", "MATHOPT_SOLVERS", "mathopt_available", "solve_mathopt"]

MATHOPT_ALIASES: dict[str, str] = {"mathopt-highs": "highs", "mathopt-scip": "scip"}
"""Alias -> MIP backend name."""

MATHOPT_SOLVERS: tuple[str, ...] = tuple(MATHOPT_ALIASES)


def mathopt_available() -> tuple[str, ...]:
    """No alias is a default solver any more (each would duplicate its backend's row)."""
    return ()


def solve_mathopt(
    model: MipModel, name: str, limits: SolveLimits, stage: str = "solve"
) -> Solution:
    """Solve ``model`` with the backend that the alias ``name`` stands for; the stats name the
    backend that actually ran (``highs``/``scip``)."""
    return solve(model, MATHOPT_ALIASES[name], limits=limits, stage=stage)
