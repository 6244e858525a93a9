"""State snapshots for ``gpuplan plan`` (strict JSON), mutated anywhere; a clean plan must
only allocate jobs of the state and give every allocation a placement."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .bases import STATE, dump
from .harness import Outcome, classify, explore, plan_oracle, run_in_process
from .mutate import mutated

EXAMPLES = 24


def _plan(folder: Path, doc: Any, policy: str) -> tuple[str, Outcome]:
    path = folder / "state.json"
    path.write_bytes(dump(doc, "json"))
    code, out, err, why = run_in_process(
        ["plan", "--state", str(path), "--policy", policy], cwd=folder
    )
    outcome = classify(code, out, err, why, names=[str(path)], oracle=plan_oracle)
    if outcome.kind == "clean" and isinstance(doc, dict):
        ids = {
            str(j.get("spec", {}).get("id"))
            for j in doc.get("jobs", [])
            if isinstance(j, dict) and isinstance(j.get("spec"), dict)
        }
        extra = set(json.loads(out).get("allocations") or {}) - ids
        if extra:
            outcome = Outcome("accepted-nonsense", 0, out, err, f"allocates unknown {extra}")
    return f"{path.read_text('utf-8', 'replace')[:300]!r}", outcome


@pytest.mark.parametrize("focus", ["cluster", "jobs", "now"])
@pytest.mark.parametrize("policy", ["srsf", "afs-l"])
def test_state_mutants(focus: str, policy: str, case_dir: Callable[[], Path]) -> None:
    explore(
        "state", mutated(STATE, (focus,)), lambda doc: _plan(case_dir(), doc, policy), EXAMPLES // 3
    )


def test_state_base_plans_clean(case_dir: Callable[[], Path]) -> None:
    _, outcome = _plan(case_dir(), STATE, "srsf")
    assert outcome.kind == "clean", outcome.describe()


def test_state_on_stdin(case_dir: Callable[[], Path]) -> None:
    """``--state -``: the same rules for a snapshot on standard input."""

    def body(doc: Any) -> tuple[str, Outcome]:
        text = dump(doc, "json").decode()
        code, out, err, why = run_in_process(
            ["plan", "--state", "-", "--policy", "fifo"], stdin=text
        )
        return repr(text[:300]), classify(code, out, err, why, names=["-"], oracle=plan_oracle)

    explore("state", mutated(STATE, ("jobs",)), body, 10)
