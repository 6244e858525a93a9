"""Secondary files, named from a valid scenario: trace CSVs (philly, tiresias, pollux, itp),
Gavel's tab-separated traces, the Aryl testbed description (JSON) and QPS series
(``loaning.qps``). The scenario stays valid; the file it names is mutated cell by cell, row by
row. A refusal must name the folder holding both files (the trace's row or the scenario)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .bases import ARYL_JSON, SCENARIOS, SECONDARY, dump, policy_for, write_secondary
from .harness import Outcome, classify, explore, run_in_process, summary_oracle
from .mutate import mutated, mutated_table

EXAMPLES = 16

TABLES = {  # base scenario -> (file it names, delimiter)
    "philly": ("philly.csv", ","),
    "tiresias": ("tiresias.csv", ","),
    "pollux": ("pollux.csv", ","),
    "itp": ("itp.csv", ","),
    "gavel": ("gavel.trace", "\t"),
    "loaning": ("qps.csv", ","),
}


def run_with(folder: Path, base: str, name: str, content: str | bytes) -> tuple[str, Outcome]:
    write_secondary(folder, {name: content})
    doc, _ = SCENARIOS[base]
    path = folder / "scenario.yaml"
    path.write_bytes(dump(doc, "yaml"))
    argv = ["simulate", "--scenario", str(path), "--policy", policy_for(base), "--json"]
    outcome = classify(
        *run_in_process(argv, cwd=folder),
        names=[str(folder), "field 'policy'"],  # a --policy naming a configuration the mutant lost
        oracle=summary_oracle,
    )
    text = content if isinstance(content, str) else content.decode("utf-8", "replace")
    return f"{name}: {text[:300]!r}", outcome


def _mutants(base: str, case_dir: Callable[[], Path]) -> None:
    name, delimiter = TABLES[base]
    kind = "qps" if name == "qps.csv" else "trace"
    explore(
        kind,
        mutated_table(SECONDARY[name], delimiter),
        lambda text: run_with(case_dir(), base, name, text),
        EXAMPLES,
    )


@pytest.mark.parametrize("base", sorted(set(TABLES) - {"loaning"}))
def test_trace_mutants(base: str, case_dir: Callable[[], Path]) -> None:
    _mutants(base, case_dir)


def test_qps_mutants(case_dir: Callable[[], Path]) -> None:
    _mutants("loaning", case_dir)


def test_trace_aryl_testbed_json_mutants(case_dir: Callable[[], Path]) -> None:
    def body(doc: Any) -> tuple[str, Outcome]:
        return run_with(case_dir(), "aryl", "aryl.json", dump(doc, "json").decode())

    explore("trace", mutated(ARYL_JSON), body, EXAMPLES)
