"""Exact OJPP on a MIP backend (``scip``, ``highs``, ``cbc``, ``pulp-cbc``).

The same job-level model as CP-SAT (:mod:`.model`) with float coefficients; collision is
handled by **outer approximation with lazy tangent cuts** in log space (plus no-good cuts for
p = 1 jobs), re-solved until every device meets Eq. (4) exactly (:func:`.exact.solve_exact`).
"""

from __future__ import annotations

from gpuplan.models.ojpp import OjppInstance

from ...limits import SolveLimits
from .exact import OjppAnswer, solve_exact

__all__ = ["MIP_BACKENDS", "solve_milp"]

MIP_BACKENDS = ("scip", "highs", "cbc", "pulp-cbc")


def solve_milp(
    inst: OjppInstance, backend: str, limits: SolveLimits | None = None, shortcut: bool = True
) -> OjppAnswer:
    if backend not in MIP_BACKENDS:
        raise ValueError(f"not a MIP backend: {backend!r}")
    return solve_exact(inst, backend, limits, shortcut)
