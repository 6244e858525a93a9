"""docs/results/optimality.md's results come from ``gpuplan reproduce optimality-rigid`` /
``optimality-elastic`` (and their ``-offline`` / ``-open`` rows). A full run is 100 instances
of each kind, minutes of CPU, so the page quotes the recording of that run
(``docs/results/data/optimality-KIND.jsonl``, written by the command's ``--log``) and is
checked link by link:

1. each recording holds seeds 0-99 of its kind, once each;
2. the page's statements (``gpuplan reproduce optimality-... --from-log ... --json`` prints
   ...) are checked by tests/docs/test_doc_commands.py; here, the page's two markdown tables and
   summary lines are the recording's tabulation, line for line;
3. the recording is today's code: a few cheap instances of each kind (a rigid one where the
   search closes, one where it stops at its LP limit and the slotted fallback is kept, an
   elastic one that closes and one that does not) are run again through the command and equal
   their recorded rows in every field that does not time the machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.optimality_reproduction import INSTANCES, KINDS, TIMINGS, read_log
from tests.bench.optimality import summary

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "results" / "optimality.md"
DATA = ROOT / "docs" / "results" / "data"


def _recording(kind: str) -> Path:
    return DATA / f"optimality-{kind}.jsonl"


@pytest.mark.parametrize("kind", KINDS)
def test_the_recording_holds_every_seed_once(kind: str) -> None:
    lines = _recording(kind).read_text(encoding="utf-8").splitlines()
    assert len(lines) == INSTANCES
    assert [r["seed"] for r in read_log(_recording(kind), kind)] == list(range(INSTANCES))


@pytest.mark.parametrize("kind", KINDS)
def test_the_pages_table_is_the_recordings_tabulation(kind: str) -> None:
    """The heading, summary line and every table row the bench writes from the recording
    appear in the page as written (so a number changed in the table, or a recording changed
    without the page, fails)."""
    page = DOC.read_text(encoding="utf-8").splitlines()
    written = summary({kind: read_log(_recording(kind), kind)}).splitlines()
    missing = [line for line in written if line and line not in page]
    assert not missing, missing


COUNTS = ("kind", "seed", "optimal", "slotted", "lps")

CHEAP = {
    "rigid": (5, 33),
    "elastic": (1, 12),
}
"""Seeds recomputed per kind: rigid 5 closes, rigid 33 is the one where the search stops at
its LP limit and the slotted fallback's schedule is kept; elastic 1 closes, elastic 12 stops at
the LP limit."""


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "seed"), [(k, s) for k in KINDS for s in CHEAP[k]])
def test_recomputed_rows_equal_the_recording(
    kind: str, seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded = {r["seed"]: r for r in read_log(_recording(kind), kind)}[seed]
    log = tmp_path / "row.jsonl"
    argv = ["reproduce", f"optimality-{kind}", "--first", str(seed), "--instances", "1"]
    assert main([*argv, "--log", str(log), "--json"]) == 0
    capsys.readouterr()
    (row,) = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    for t in TIMINGS:
        row.pop(t)
        recorded.pop(t)
    assert row.keys() == recorded.keys()
    # the LP and CP-SAT limits are deterministic: the same counts, and the same JCTs up to
    # the last bits a different CPU's floating point may change
    assert {k: v for k, v in row.items() if k in COUNTS} == {k: recorded[k] for k in COUNTS}
    jcts = [k for k in row if k not in COUNTS]
    assert [row[k] for k in jcts] == pytest.approx([recorded[k] for k in jcts], rel=1e-9)


@pytest.mark.parametrize(
    ("scenario", "kind", "seed"),
    [("optimality-rigid-5", "rigid", 5), ("optimality-elastic-1", "elastic", 1)],
)
def test_the_compare_statements_are_the_recorded_rows(scenario: str, kind: str, seed: int) -> None:
    """The page's ``compare`` statements on the two embedded instances (checked against the
    command by test_doc_commands) give the recorded rows' average JCTs and lower bound, at the
    page's precision: the scenarios and the recording are the same instances."""
    from tests.docs.test_doc_commands import CHECKS, _decimals

    recorded = {r["seed"]: r for r in read_log(_recording(kind), kind)}[seed]
    checks = [c for c in CHECKS if c.doc == DOC.name and f"--scenario {scenario} " in c.command]
    assert len(checks) == 2
    for check in checks:
        policies = check.command.split("--policies ")[1].split()[0].split(",")
        names = ["offline" if p == "offline-optimal" else p for p in policies]
        for field, numbers in check.expected:
            if field == "avg_jct_s":
                got = [recorded[p] for p in names]
            elif field == "avg_jct_bound_s":
                got = [recorded["lower"]]
            else:
                continue
            assert [round(g, _decimals(n)) for g, n in zip(got, numbers, strict=True)] == [
                float(n) for n in numbers
            ], (check.line, field)
