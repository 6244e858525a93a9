"""``gpuplan reproduce``: the list, a table, JSON rows, and an unknown name refused in one line.

The numbers themselves are the results pages' (tests/docs/test_doc_commands.py runs every
documented ``gpuplan reproduce ... --json`` and compares); here: what the command promises
about its output and its errors."""

from __future__ import annotations

import json
import math

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


def test_a_reproduction_refuses_an_option_it_does_not_take(capsys) -> None:
    """The run options are declared per reproduction: OJPP's Table 5 takes none."""
    code, out, err = _run(capsys, "reproduce", "ojpp-table5", "--from-log", "x.jsonl", "--json")
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert "does not take --from-log" in err and "takes no options" in err


def _rigid_row(seed: int, offline: float, lower: float, **jcts: float) -> dict[str, object]:
    """A logged rigid instance row: every policy at ``offline`` unless given."""
    from gpuplan.scenarios.optimality_instances import RIGID_POLICIES

    row: dict[str, object] = {"kind": "rigid", "seed": seed, "offline": offline}
    row.update(lower=lower, optimal=float(lower == offline), slotted=0.0, lps=10.0 * (seed + 1))
    row.update({p: jcts.get(p.replace("-", "_"), offline) for p in RIGID_POLICIES})
    return row


def test_from_log_tabulates_a_recording(capsys, tmp_path) -> None:
    """Two instances written by hand: the gaps, counts and the summary row are computed from
    them (rows of the other kind are skipped, a repeated seed keeps its first row)."""
    log = tmp_path / "r.jsonl"
    rows = [
        _rigid_row(0, 100.0, 100.0, fifo=150.0, srtf=100.0000001),
        _rigid_row(1, 200.0, 160.0, fifo=200.0, srtf=190.0),
        {"kind": "elastic", "seed": 0},
        _rigid_row(1, 999.0, 1.0),
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, _ = _run(capsys, "reproduce", "optimality-rigid", "--from-log", str(log), "--json")
    assert code == 0
    table = {r["policy"]: r for r in json.loads(out)}
    assert list(table)[:3] == ["offline-optimal", "fifo", "fifo-backfill"]
    assert table["fifo"]["gap_mean_pct"] == pytest.approx(25.0)
    assert table["fifo"]["gap_max_pct"] == pytest.approx(50.0)
    assert table["fifo"]["gap_lower_pct"] == pytest.approx((50 + 25) / 2)
    assert table["srtf"]["gap_best_known_pct"] == pytest.approx(0, abs=1e-6)  # the best on both
    assert table["fifo"]["gap_best_known_pct"] == pytest.approx((50 + 100 * 10 / 190) / 2)
    assert (table["srtf"]["better"], table["srtf"]["equal"]) == (1, 1)
    assert table["offline-optimal"]["gap_best_known_pct"] == pytest.approx(100 * 10 / 190 / 2)
    code, out, _ = _run(
        capsys, "reproduce", "optimality-rigid-offline", "--from-log", str(log), "--json"
    )
    (summary,) = json.loads(out)
    assert (summary["instances"], summary["closed"], summary["slotted"]) == (2, 1, 0)
    assert (summary["lps_median"], summary["lps_max"]) == (20.0, 20.0)
    assert summary["proven_gap_max_pct"] == pytest.approx(25.0)
    assert summary["proven_gap_closed_max_pct"] == 0.0
    code, out, _ = _run(
        capsys, "reproduce", "optimality-rigid-open", "--from-log", str(log), "--json"
    )
    assert [(r["seed"], r["lower_s"]) for r in json.loads(out)] == [(1, 160.0)]


@pytest.mark.parametrize(
    ("lines", "where"),
    [
        (None, "cannot read the log"),
        (["{}", "not json"], "row 1, field 'kind'"),
        ([json.dumps(_rigid_row(0, 1.0, 1.0)), "not json"], "row 2: not a JSON object"),
        (["[1]"], "row 1: not a JSON object"),
        ([json.dumps({**_rigid_row(0, 1.0, 1.0), "seed": -1})], "row 1, field 'seed'"),
        ([json.dumps({**_rigid_row(0, 1.0, 1.0), "srtf": "x"})], "row 1, field 'srtf'"),
        ([json.dumps({**_rigid_row(0, 1.0, 1.0), "lower": 0})], "row 1, field 'lower'"),
        ([json.dumps({**_rigid_row(0, 1.0, 1.0), "srtf": -math.inf})], "row 1, field 'srtf'"),
        ([json.dumps({**_rigid_row(0, 1.0, 1.0), "lps": math.inf})], "row 1, field 'lps'"),
        ([json.dumps({"kind": "elastic", "seed": 0})], "no rigid rows"),
    ],
)
def test_a_bad_log_is_one_line_naming_the_row(capsys, tmp_path, lines, where) -> None:
    log = tmp_path / "bad.jsonl"
    if lines is not None:
        log.write_text("\n".join(lines) + "\n")
    code, out, err = _run(capsys, "reproduce", "optimality-rigid", "--from-log", str(log), "--json")
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert str(log) in err and where in err


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--from-log", "x.jsonl", "--first", "3"], "from-log"),
        (["--instances", "0"], "instances"),
        (["--first", "-1", "--instances", "1"], "first"),
        (["--first", str(2**31), "--instances", "1"], "first"),
        (["--instances", "10001"], "instances"),
    ],
)
def test_bad_run_options_are_one_line(capsys, argv, field) -> None:
    code, out, err = _run(capsys, "reproduce", "optimality-elastic", *argv, "--json")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"field '{field}'" in err


@pytest.mark.parametrize(("path", "kind"), [("/dev/zero", "a device"), (".", "a directory")])
def test_a_log_that_is_not_a_regular_file_is_refused_unread(capsys, path, kind) -> None:
    """Found by stat alone: /dev/zero would never end, a FIFO nobody writes would block."""
    code, out, err = _run(capsys, "reproduce", "optimality-rigid", "--from-log", path, "--json")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{path}: the log is not a regular file ({kind})" in err, err


def test_a_policy_that_left_a_job_unfinished_is_tabulated_not_refused(capsys, tmp_path) -> None:
    """``avg_jct`` records +inf for a policy that never finished a job: the log stays
    readable and the policy's gap is infinite (a stuck policy shows in the table)."""
    log = tmp_path / "stuck.jsonl"
    log.write_text(json.dumps(_rigid_row(0, 100.0, 100.0, fifo=math.inf, srtf=100.0)) + "\n")
    code, out, _ = _run(capsys, "reproduce", "optimality-rigid", "--from-log", str(log), "--json")
    assert code == 0
    table = {r["policy"]: r for r in json.loads(out)}
    assert table["fifo"]["gap_mean_pct"] == math.inf
    assert table["srtf"]["gap_mean_pct"] == 0.0


def test_a_log_target_that_is_a_link_or_a_folder_is_refused_before_any_run(
    capsys, tmp_path
) -> None:
    """``--log`` is checked before the first instance runs: a symlink (which could point a
    long run's rows into another user's file) or a folder is one line, exit 2, and nothing
    is written through it."""
    victim = tmp_path / "victim.txt"
    victim.write_text("kept\n")
    link = tmp_path / "rows.jsonl"
    link.symlink_to(victim)
    for target, why in ((link, "is a symlink"), (tmp_path, "exists and is not a regular file")):
        code, out, err = _run(
            capsys, "reproduce", "optimality-rigid", "--log", str(target), "--json"
        )
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert f"field 'log': {why}" in err, err
    assert victim.read_text() == "kept\n"
