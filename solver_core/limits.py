"""How long a solver may work: deterministic budgets for policies, wall-clock for people.

A scheduling policy that asks a solver for "at most 1 s" takes a different decision when the
machine is busy, so the same scenario and seed would give different results on a loaded machine.
Policies therefore give solvers a *deterministic* budget:

All of it reaches the solvers as OR-Tools MathOpt ``SolveParameters``
(:mod:`gpuplan.solver_core.mip_backends`):

* CP-SAT: ``max_deterministic_time`` (CP-SAT's own work counter, in "deterministic seconds",
  roughly a second of a quiet modern core) with a fixed worker count (one by default) and a fixed
  seed (``params.cp_sat``): the same model gives the same answer on any machine, at any load.
* SCIP, HiGHS: MathOpt's ``node_limit`` (SCIP ``limits/nodes``, HiGHS ``mip_max_nodes``), one
  thread, fixed seed. PuLP-CBC: CBC's ``maxNodes``.
* ``cbc`` (MathOpt has none; its model is loaded into ``pywraplp``'s CBC, which accepts no
  solver-specific parameters) has no deterministic limit; it keeps the wall-clock guard alone
  (documented in ``docs/solvers.md``).

Every budget also carries a wall-clock guard (``wall_s``) that covers model translation and the
solve, so nothing blocks indefinitely. In policies the guard is generous (many times the work
budget): it fires only on a pathological instance, and when it does the call reports
``timeout`` and the caller falls back to its heuristic, visibly, in the plan's stats.

Interactive callers (``gpuplan solve``, benchmarks, the library) who want "at most S seconds"
use :meth:`SolveLimits.wall` instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.models.bounds import MAX_TIME_S
from gpuplan.models.errors import InputError

__all__ = ["DEFAULT_TIME_LIMIT_S", "POLICY_WALL_GUARD_S", "SolveLimits", "resolve_limits"]

DEFAULT_TIME_LIMIT_S = 10.0
"""Wall-clock limit when a caller gives none: a decision must never block indefinitely."""

POLICY_WALL_GUARD_S = 120.0
"""Least wall-clock guard behind a deterministic budget (see the module docstring)."""

NODES_PER_WORK_SECOND = 20_000
"""Node limit that stands for one deterministic second on the MIP backends. The models gpuplan
builds are small (hundreds to a few thousand rows), where SCIP and HiGHS explore on the order of
ten thousand nodes a second; the exact number matters less than that it is fixed."""


@dataclass(frozen=True, slots=True)
class SolveLimits:
    """A solve's budget. ``work_s``/``nodes`` set: deterministic; else wall-clock only."""

    wall_s: float = DEFAULT_TIME_LIMIT_S
    """Wall-clock limit covering translation and solve (always set)."""
    work_s: float | None = None
    """CP-SAT deterministic-time budget; None: none."""
    nodes: int | None = None
    """Branch-and-bound node limit for SCIP, HiGHS and PuLP-CBC; None: none."""

    def __post_init__(self) -> None:
        # at most MAX_TIME_S (20 years): MathOpt's timedelta conversion overflows a C int
        # (an internal error) a little above 2**31 days
        if not (
            isinstance(self.wall_s, (int, float))
            and math.isfinite(self.wall_s)
            and 0 < self.wall_s <= MAX_TIME_S
        ):
            raise InputError(
                f"time limit must be a number of seconds in (0, {MAX_TIME_S:.0f}],"
                f" got {self.wall_s!r}",
                field="time_limit_s",
            )
        if self.work_s is not None and not (
            isinstance(self.work_s, (int, float)) and math.isfinite(self.work_s) and self.work_s > 0
        ):
            raise InputError(
                f"work limit must be a finite number > 0, got {self.work_s!r}", field="work_limit_s"
            )
        if self.nodes is not None and not (isinstance(self.nodes, int) and self.nodes >= 1):
            raise InputError(
                f"node limit must be an integer >= 1, got {self.nodes!r}", field="node_limit"
            )

    @property
    def deterministic(self) -> bool:
        """True when the answer depends on the model and seed alone (see the module doc)."""
        return self.work_s is not None or self.nodes is not None

    @classmethod
    def wall(cls, seconds: float) -> SolveLimits:
        """At most ``seconds`` of wall-clock time: for interactive use, not inside policies."""
        return cls(wall_s=seconds)

    @classmethod
    def deterministic_budget(
        cls, work_s: float, *, nodes: int | None = None, wall_guard_s: float | None = None
    ) -> SolveLimits:
        """A policy's budget: ``work_s`` deterministic seconds (CP-SAT) and the matching node
        limit on MIP backends, behind a generous wall-clock guard."""
        if nodes is None and isinstance(work_s, (int, float)) and math.isfinite(work_s):
            nodes = max(1, round(work_s * NODES_PER_WORK_SECOND))
        guard = (
            wall_guard_s if wall_guard_s is not None else max(POLICY_WALL_GUARD_S, 100.0 * work_s)
        )
        return cls(wall_s=guard, work_s=work_s, nodes=nodes)

    def describe(self) -> str:
        """Short text for messages: which limit applies."""
        parts = []
        if self.work_s is not None:
            parts.append(f"work {self.work_s:g} det-s")
        if self.nodes is not None:
            parts.append(f"{self.nodes} nodes")
        parts.append(f"wall {self.wall_s:g}s")
        return ", ".join(parts)


def resolve_limits(
    time_limit_s: float | None, limits: SolveLimits | None, default_work_s: float
) -> SolveLimits:
    """The budget of a solver call made on a policy's behalf.

    ``limits`` as given; else an explicit ``time_limit_s`` is a wall-clock limit (interactive
    callers and benchmarks that ask for seconds); else the deterministic default of
    ``default_work_s`` (what every policy gets when it says nothing).
    """
    if limits is not None:
        if time_limit_s is not None:
            raise InputError("give either time_limit_s or limits, not both", field="time_limit_s")
        return limits
    if time_limit_s is not None:
        return SolveLimits.wall(time_limit_s)
    return SolveLimits.deterministic_budget(default_work_s)
