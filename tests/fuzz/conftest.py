"""Fixtures of the fuzz suite and its end-of-session tally (clean / refused / failures per
input kind), so a run shows what the generated inputs exercised, not only that none failed."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from . import harness


@pytest.fixture
def case_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[], Path]:
    """A fresh folder per call (hypothesis calls a test many times with one fixture value)."""
    root = tmp_path_factory.mktemp("fuzz")

    def make() -> Path:
        return Path(tempfile.mkdtemp(prefix="case-", dir=root))

    return make


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not harness.TALLY:
        return
    tr = terminalreporter
    tr.section("fuzz cases by input kind")
    total = 0
    for kind in sorted(harness.TALLY):
        counts = harness.TALLY[kind]
        total += sum(counts.values())
        tr.write_line(
            f"{kind:>10}: {sum(counts.values()):4d}  "
            + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
        )
    tr.write_line(f"{'total':>10}: {total:4d}")
    for line in harness.FAILED[:80]:
        tr.write_line(f"  FAIL {line}")
