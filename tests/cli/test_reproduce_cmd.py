"""``gpuplan reproduce``: the list, a table, JSON rows, and an unknown name refused in one line.

The numbers themselves are the results pages' (tests/docs/test_doc_commands.py runs every
documented ``gpuplan reproduce ... --json`` and compares); here: what the command promises
about its output and its errors."""

from __future__ import annotations

import json

import pytest

from gpuplan.cli import main
from gpuplan.reproductions import REPRODUCTIONS
from gpuplan.scenarios.ojpp_reproduction import PAPER_T5, SETTINGS, table5


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_without_a_name_it_lists_every_reproduction(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = _run(capsys, "reproduce")
    assert code == 0
    for name in REPRODUCTIONS:
        assert name in out
    assert "shared traces, ml" in out  # ojpp-aip's needs


def test_json_rows_are_the_experiment_flattened(capsys) -> None:
    code, out, _ = _run(capsys, "reproduce", "ojpp-table5", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [(r["tau_max"], r["theta_balance"], r["theta_max"]) for r in rows] == SETTINGS
    assert [(r["paper_performance_pct"], r["paper_reduction_pct"]) for r in rows] == PAPER_T5
    direct = table5()
    assert [r["performance_pct"] for r in rows] == [100 * d["performance"] for d in direct]
    # Alg. 3 respects theta-bar: performance never below the floor 1 / (1 + theta-bar) less the
    # collision term, which is small here (docs/results/ojpp.md); and it saves GPUs.
    for r in rows:
        assert 100 / (1 + r["theta_max"]) - 1 < r["performance_pct"] <= 100
        assert 0 < r["reduction_pct"] < 100


def test_table_output_has_one_line_per_row(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = _run(capsys, "reproduce", "ojpp-queues")
    assert code == 0
    for queue in ("mixed", "c-high", "i-high", "average"):
        assert sum(queue in line for line in out.splitlines()) == 1, queue


def test_unknown_name_is_one_line_and_exit_2(capsys) -> None:
    code, out, err = _run(capsys, "reproduce", "ojpp-tabel5")
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert "no reproduction named 'ojpp-tabel5'" in err and "ojpp-table5" in err


def test_every_entry_names_a_function_its_module_has() -> None:
    """A registry typo would only show when that reproduction is run: import each module
    and find its function (nothing is run)."""
    import importlib

    for r in REPRODUCTIONS.values():
        assert callable(getattr(importlib.import_module(r.module), r.function)), r.name


def test_a_reproduction_needing_traces_without_them_is_one_line(
    capsys, monkeypatch, tmp_path
) -> None:
    monkeypatch.setenv("GPUPLAN_TRACES", str(tmp_path / "nowhere"))
    code, out, err = _run(capsys, "reproduce", "ojpp-aip", "--json")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "gavel/simulation_throughputs.json" in err
