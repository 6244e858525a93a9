"""Sweep files (YAML and JSON) for ``gpuplan sweep --workers 1`` (in this process), mutated
anywhere, including the dotted overrides that reach the scenario. The base sweep is small
(two scenario labels x two policies x two seeds). ``report.html`` is replaced by a stub:
its matplotlib figures take ~20 s on a busy machine and read no input, only the runs' results
(a full sweep with the real report is in the corpus, tests/fuzz_corpus/cases.yaml)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from .bases import SMALL, SWEEP, dump
from .harness import Outcome, classify, explore, run_in_process
from .mutate import mutated

EXAMPLES = 30


def sweep_file(folder: Path, doc: Any, fmt: str) -> tuple[str, Outcome]:
    (folder / "scenario.yaml").write_bytes(dump(SMALL, "yaml"))
    path = folder / f"sweep.{fmt}"
    path.write_bytes(dump(doc, fmt))
    argv = ["sweep", str(path), "--out", str(folder / "out"), "--workers", "1"]
    outcome = classify(*run_in_process(argv, cwd=folder), names=[str(folder)])
    if outcome.kind == "clean" and not (folder / "out" / "results.csv").is_file():
        outcome = Outcome("accepted-nonsense", 0, outcome.out, outcome.err, "no results.csv")
    return f"{path.read_text('utf-8', 'replace')[:300]!r}", outcome


@pytest.fixture(autouse=True)
def _stub_report(monkeypatch: pytest.MonkeyPatch) -> None:
    def stub(path: Path, title: str, *_: Any) -> None:
        Path(path).write_text(f"<html><title>{title}</title></html>", encoding="utf-8")

    monkeypatch.setattr("gpuplan.report.write_report", stub)


def test_sweep_mutants(case_dir: Callable[[], Path]) -> None:
    explore(
        "sweep",
        st.tuples(mutated(SWEEP), st.sampled_from(["yaml", "json"])),
        lambda value: sweep_file(case_dir(), *value),
        EXAMPLES,
    )


def test_sweep_base_runs_clean(case_dir: Callable[[], Path]) -> None:
    _, outcome = sweep_file(case_dir(), SWEEP, "yaml")
    assert outcome.kind == "clean", outcome.describe()
