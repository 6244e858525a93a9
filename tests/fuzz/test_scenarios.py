"""Scenario files (YAML and JSON), mutated block by block: cluster, every workload source
(inline, synthetic, philly, aryl, gavel, pollux, tiresias, itp), elasticity, throughput points,
overheads, engine, loaning, simulator.interference and policies. Each mutant is simulated with
``--json`` so a clean run's numbers go through the summary oracle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from .bases import SCENARIOS, dump, policy_for, write_secondary
from .harness import Outcome, classify, explore, run_in_process, summary_oracle
from .mutate import mutated

EXAMPLES = 12
"""Mutants per base (x 17 bases, YAML or JSON drawn)."""


def simulate_file(folder: Path, doc: Any, fmt: str, policy: str) -> tuple[str, Outcome]:
    path = folder / f"scenario.{fmt}"
    path.write_bytes(dump(doc, fmt))
    argv = ["simulate", "--scenario", str(path), "--policy", policy, "--json"]
    outcome = classify(
        *run_in_process(argv, cwd=folder),
        names=[str(folder), "field 'policy'"],  # a --policy naming a configuration the mutant lost
        oracle=summary_oracle,
    )
    return f"{path.read_text('utf-8', 'replace')[:300]!r}", outcome


@pytest.mark.parametrize("base", sorted(SCENARIOS))
def test_scenario_mutants(base: str, case_dir: Callable[[], Path]) -> None:
    doc, focus = SCENARIOS[base]

    def body(value: tuple[Any, str]) -> tuple[str, Outcome]:
        folder = case_dir()
        write_secondary(folder)
        mutant, fmt = value
        return simulate_file(folder, mutant, fmt, policy_for(base))

    explore(
        "scenario",
        st.tuples(mutated(doc, focus), st.sampled_from(["yaml", "json"])),
        body,
        EXAMPLES,
    )


@pytest.mark.parametrize("base", sorted(SCENARIOS))
def test_scenario_bases_run_clean(base: str, case_dir: Callable[[], Path]) -> None:
    """The unmutated bases run: a mutant's refusal is then the mutation's doing."""
    folder = case_dir()
    write_secondary(folder)
    doc, _ = SCENARIOS[base]
    _, outcome = simulate_file(folder, doc, "yaml", policy_for(base))
    assert outcome.kind == "clean", f"{base}: {outcome.describe()}"
