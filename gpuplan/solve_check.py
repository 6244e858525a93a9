"""``gpuplan solve``: every answer checked against its problem's full constraints.

A comparison table must not let an answer that breaks the problem's rules pass for a better
one. OJPP's Table 4 baselines (``best-fit``, ``i-greedy``, ``b-greedy``, ``c-greedy``) enforce
only some of the rules by design, so they "use" fewer GPUs than the proven optimum; this module
says which rules each such *relaxed* solver ignores and, for every solver, lists what its answer
breaks under the full model, read by the problem's independent checker
(:func:`gpuplan.solver_core.policies.ojpp.check_solution`, the ``check`` of each module in
:mod:`gpuplan.solver_core.problems`). An answer that breaks a rule gets status ``infeasible``
(its objective is kept, so the table shows what the relaxation bought; its gap is dropped, as a
gap to the bound means nothing for an answer outside the model).
"""

from __future__ import annotations

import importlib
import math
from typing import Any

from gpuplan.solver_core.problems.common import Outcome

__all__ = ["OBJECTIVE_TOL", "ignored_rules", "verify"]

OBJECTIVE_TOL = 1e-6
"""Relative difference between the reported and the recomputed objective that is a defect."""

OJPP_RULES = {
    "collision": "collision probability (tau_max)",
    "interference": "slowdown (theta_max)",
    "balance": "spread of a job's slowdowns (theta_balance)",
}
"""OJPP's limits a relaxed baseline may switch off (``packer.Rules`` field -> the rule)."""


def ignored_rules(problem: str, solver: str) -> list[str]:
    """The rules of ``problem``'s full model that ``solver`` does not enforce, by design."""
    if problem != "ojpp":
        return []
    from gpuplan.solver_core.policies.ojpp.baselines import BASELINE_RULES

    rules = BASELINE_RULES.get(solver)
    if rules is None:
        return []
    return [text for field, text in OJPP_RULES.items() if not getattr(rules, field)]


def _violations(problem: str, inst: Any, out: Outcome) -> list[str]:
    if problem == "ojpp":
        from gpuplan.solver_core.policies.ojpp import check_solution

        return check_solution(inst, out.solution["gpus"])
    mod = importlib.import_module(f"gpuplan.solver_core.problems.{problem}")
    try:
        value = float(mod.check(inst, out.solution))
    except AssertionError as err:  # the modules' checkers state each rule as an assert
        return [str(err) or "the answer breaks a rule of the model"]
    if (
        out.objective is not None
        and math.isfinite(out.objective)
        and abs(value - out.objective) > OBJECTIVE_TOL * max(1.0, abs(value))
    ):
        return [f"reported objective {out.objective:g}, the answer's own is {value:g}"]
    return []


def verify(problem: str, inst: Any, out: Outcome) -> tuple[Outcome, list[str]]:
    """``out`` checked against the full model: its violations (empty: it keeps every rule,
    or it has no answer to check) and the outcome, status ``infeasible`` when it broke one."""
    if not out.solution or out.status in ("infeasible", "error", "timeout"):
        return out, []
    if problem == "ojpp" and out.solution.get("gpus") is None:
        return out, []
    found = _violations(problem, inst, out)
    if not found:
        return out, []
    note = f"{len(found)} violation(s) of the full model: {found[0]}"
    message = f"{out.message}; {note}" if out.message else note
    return Outcome(
        "infeasible",
        out.objective,
        out.bound,
        None,
        out.solution,
        out.build_ms,
        out.solve_ms,
        message,
        out.extra,
    ), found
