"""docs/results/aryl.md's tables come from named ``gpuplan compare`` commands (issue 29).

The page lists one ``gpuplan compare ... --json`` command per row of its two results tables
(``tests/bench/aryl_record.py``); their outputs are recorded in
``docs/results/data/aryl-results.json``. These tests render the tables, the usage-bound lines,
the bullets and the "Paper vs ours" cells from the recording and compare them with the page,
and rerun the Philly commands (tens of seconds each) to check they still print the recording.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex

import pytest

from gpuplan.cli import main
from tests.bench.aryl_record import (
    COMMANDS,
    DOC,
    doc_commands,
    load,
    render_paper_vs_ours,
    render_results,
    rows_of,
)

TEXT = DOC.read_text(encoding="utf-8")
RECORDING = load()


def _section(start: str, end: str) -> str:
    a = TEXT.index(start)
    return TEXT[a : TEXT.index(end, a)]


def test_the_page_names_one_command_per_table_row() -> None:
    """The fenced block of recorded commands is exactly the bench's configurations on the two
    embedded replays, in table order."""
    assert doc_commands(TEXT) == [c for _, _, c in COMMANDS]
    assert len(COMMANDS) == 26


def test_the_recording_holds_every_named_command() -> None:
    """Each named command has one recorded JSON row for its one policy."""
    missing = [c for _, _, c in COMMANDS if c not in RECORDING["commands"]]
    assert not missing, f"not recorded (python -m tests.bench.aryl_record): {missing}"
    for _, cfg, cmd in COMMANDS:
        (row,) = RECORDING["commands"][cmd]
        assert row["policy"] == cfg[2], cmd
        assert row["loaning"] is not None, cmd


def test_the_results_tables_and_bullets_are_the_recordings() -> None:
    """Every table row, usage-bound line and bullet of the Results section, rendered from the
    recording by the bench's own formatter."""
    section = _section("## Results", "## Paper vs ours")
    page = [line for line in section.splitlines() if line.startswith(("| ", "* ", "Highest"))]
    assert page == render_results(RECORDING)


def test_the_paper_vs_ours_table_is_the_recordings() -> None:
    """The Philly and ITP cells of "Paper vs ours" (the paper's column is quoted)."""
    section = _section("## Paper vs ours", "\n\n## ")
    rendered = render_paper_vs_ours(RECORDING)
    seen = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] in rendered:
            seen[cells[0]] = cells[2:]
    assert seen == rendered


def test_the_renderer_sees_a_changed_number() -> None:
    """A recording with one number changed renders a different table (the comparison can
    fail)."""
    cmd = COMMANDS[0][2]
    changed = json.loads(json.dumps(RECORDING))
    changed["commands"][cmd][0]["avg_queueing_s"] += 1.0
    assert render_results(changed) != render_results(RECORDING)


PHILLY = [c for _, _, c in COMMANDS if "aryl-philly" in c]


@pytest.mark.slow
@pytest.mark.traces
@pytest.mark.parametrize("cmd", PHILLY)
def test_a_philly_command_still_prints_its_recording(traces: object, cmd: str) -> None:
    """Rerun one Philly row (30-45 s on a loaded 2-core machine): every number the page uses
    equals the recording's (timings aside)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(shlex.split(cmd)[1:]) == 0
    fresh = rows_of({"commands": {cmd: json.loads(out.getvalue())}})
    recorded = rows_of({"commands": {cmd: RECORDING["commands"][cmd]}})
    assert fresh == recorded
