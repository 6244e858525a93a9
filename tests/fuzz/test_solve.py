"""``gpuplan solve``: instances of every problem (``gpuplan solve --list``), generated small
and then mutated; each runs a fast subset of that problem's solvers (one exact, the
heuristics) with a short time limit, and a clean run's objectives go through the oracle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuplan.solver_core.problems.generate import generate

from .bases import dump
from .harness import Outcome, classify, explore, run_in_process, solve_oracle
from .mutate import mutated

EXAMPLES = 20
"""Mutants per problem (x 5 problems)."""

SIZES = {"mckp": 6, "reclaim": 4, "placement": 3, "packing": 6, "ojpp": 3}
SOLVERS = {
    "mckp": "dp,cp-sat,greedy",
    "reclaim": "cp-sat,exact,aryl,scf,random",
    "placement": "cp-sat,greedy",
    "packing": "cp-sat,greedy-deficit,greedy-marginal",
    "ojpp": "cp-sat,heuristic,heuristic-ls,heuristic-pg,greedy,best-fit,i-greedy",
}


def solve_file(folder: Path, problem: str, doc: Any) -> tuple[str, Outcome]:
    path = folder / f"{problem}.json"
    path.write_bytes(dump(doc, "json"))
    argv = [
        "solve",
        problem,
        "--instance",
        str(path),
        "--solvers",
        SOLVERS[problem],
        "--time-limit",
        "5",
        "--json",
    ]
    outcome = classify(*run_in_process(argv, cwd=folder), names=[str(path)], oracle=solve_oracle)
    return f"{problem}: {path.read_text('utf-8', 'replace')[:300]!r}", outcome


@pytest.mark.parametrize("problem", sorted(SIZES))
def test_solve_mutants(problem: str, case_dir: Callable[[], Path]) -> None:
    base = generate(problem, SIZES[problem], 7)
    explore("solve", mutated(base), lambda doc: solve_file(case_dir(), problem, doc), EXAMPLES)


@pytest.mark.parametrize("problem", sorted(SIZES))
def test_solve_bases_run_clean(problem: str, case_dir: Callable[[], Path]) -> None:
    _, outcome = solve_file(case_dir(), problem, generate(problem, SIZES[problem], 7))
    assert outcome.kind == "clean", outcome.describe()
