"""``gpuplan solve`` checks every answer against the problem's full constraints (issue 29
item 6): a relaxed OJPP baseline says which rules it ignores and its violations make it
``infeasible``; an answer breaking a rule or misreporting its objective is caught for every
problem; answers that keep the rules are left as they were."""

from __future__ import annotations

import json

import pytest

from gpuplan.cli import main
from gpuplan.models import load_ojpp
from gpuplan.solve import solve_data
from gpuplan.solve_check import ignored_rules, verify
from gpuplan.solver_core.limits import SolveLimits
from gpuplan.solver_core.policies.ojpp import check_solution
from gpuplan.solver_core.problems.common import Outcome
from gpuplan.solver_core.problems.generate import generate
from gpuplan.solver_core.problems.mckp import load as load_mckp

RELAXED = {"best-fit": 3, "i-greedy": 2, "b-greedy": 2, "c-greedy": 2}
"""Rules each Table 4 baseline leaves out (of collision, slowdown, balance)."""


def test_relaxed_baselines_are_checked_and_labelled() -> None:
    """Generated OJPP instances: every baseline names the rules it ignores; each answer's
    violations are exactly what the independent checker finds, and an answer with any is
    ``infeasible`` (no gap); the full-model solvers break nothing and keep their status."""
    solvers = ["heuristic", "greedy", *RELAXED]
    seen_infeasible = set()
    for seed in range(4):
        data = generate("ojpp", 10, seed)
        inst = load_ojpp(data, "gen")
        rows = solve_data("ojpp", data, "gen", solvers, SolveLimits.deterministic_budget(1.0))
        for row in rows:
            found = check_solution(inst, row["solution"]["gpus"])
            assert row.get("violations", []) == found
            if row["solver"] in RELAXED:
                assert len(row["ignores"]) == RELAXED[row["solver"]]
            else:
                assert "ignores" not in row and not found
                assert row["status"] == "heuristic"
            if found:
                assert row["status"] == "infeasible" and row["gap"] is None
                seen_infeasible.add(row["solver"])
            elif row["solver"] in RELAXED:
                assert row["status"] == "heuristic"
    assert "best-fit" in seen_infeasible  # the case is exercised


def test_ignored_rules_names_ojpp_limits() -> None:
    assert ignored_rules("ojpp", "c-greedy") == [
        "slowdown (theta_max)",
        "spread of a job's slowdowns (theta_balance)",
    ]
    assert ignored_rules("ojpp", "cp-sat") == []
    assert ignored_rules("mckp", "greedy") == []


def mckp() -> object:
    return load_mckp(
        {
            "capacity": 3,
            "groups": [
                {"id": "a", "items": [{"weight": 2, "value": 5.0}, {"weight": 3, "value": 7.0}]},
                {"id": "b", "items": [{"weight": 1, "value": 2.0}]},
            ],
        },
        "m",
    )


@pytest.mark.parametrize(
    ("choice", "objective", "expect"),
    [
        ({"a": 0, "b": 0}, 7.0, None),  # keeps every rule
        ({"a": 1, "b": 0}, 9.0, "above capacity"),  # weight 4 > 3
        ({"a": 0, "b": 0}, 8.0, "reported objective 8"),  # wrong objective
    ],
)
def test_verify_catches_broken_answers(
    choice: dict[str, int], objective: float, expect: str | None
) -> None:
    out = Outcome("optimal", objective, objective, 0.0, {"choice": choice}, None, 1.0)
    checked, violations = verify("mckp", mckp(), out)
    if expect is None:
        assert violations == [] and checked is out
    else:
        assert checked.status == "infeasible" and checked.gap is None
        assert len(violations) == 1 and expect in violations[0]
        assert expect in checked.message


def test_cli_json_and_table(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "solve",
        "ojpp",
        "--generate",
        "--size",
        "8",
        "--seed",
        "3",
        "--solvers",
        "heuristic,best-fit",
    ]
    assert main([*args, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert "ignores" not in rows[0] and rows[1]["status"] == "infeasible"
    assert rows[1]["violations"] and len(rows[1]["ignores"]) == 3
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "best-fit: ignores collision probability" in out
    assert f"{len(rows[1]['violations'])} violation(s) of the full model" in out


def test_the_checkers_hold_under_python_O() -> None:
    """``python -O`` strips ``assert``: the checkers raise their own error, so an answer that
    breaks a rule is still caught (before, each rule was an ``assert``)."""
    import subprocess
    import sys

    code = (
        "from gpuplan.solver_core.problems.generate import generate\n"
        "from gpuplan.solver_core.problems.mckp import check, load\n"
        "inst = load(generate('mckp', 6, 0), 'gen')\n"
        "try:\n"
        "    check(inst, {'choice': {}})\n"
        "except AssertionError as err:\n"
        "    print('caught', type(err).__name__)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-O", "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert proc.stdout.strip() == "caught RuleBroken", proc.stdout + proc.stderr
