"""``gpuplan slurm-lab-report``: the Slurm lab's measured table from recorded rows, its JSON
rows, and every bad input refused in one line naming the file, the line and the field.

The doc's numbers themselves are checked by tests/docs (test_slurm_bench_doc.py: the tables;
test_doc_commands.py: the statements quoting ``--json`` fields); here: what the command
promises about its output and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.slurm_lab import workload
from gpuplan.slurm_lab_report import load_rows, report

RUNS = Path(__file__).resolve().parents[2] / "docs" / "results" / "data" / "slurm-runs.jsonl"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _lines() -> list[str]:
    return RUNS.read_text(encoding="utf-8").splitlines()


def test_the_table_is_the_reports(capsys) -> None:
    code, out, err = _run(capsys, "slurm-lab-report", str(RUNS), "--run", "C")
    assert (code, err) == (0, "")
    assert out == report(load_rows([RUNS], "C"), workload(200)) + "\n"
    assert sum(x.startswith("|") for x in out.splitlines()) == 2 + 6  # header, rule, 6 modes


def test_json_rows_are_the_tables_numbers(capsys) -> None:
    code, out, _ = _run(capsys, "slurm-lab-report", str(RUNS), "--run", "A", "--json")
    assert code == 0
    rows = json.loads(out)
    recorded = [json.loads(x) for x in _lines() if json.loads(x)["run"] == "A"]
    assert [r["mode"] for r in rows] == [r["mode"] for r in recorded]
    ref = recorded[0]["lab"]  # slurm-nodes1 first
    for got, rec in zip(rows, recorded, strict=True):
        assert got["drain_s"] == rec["lab"]["drain"]
        assert got["drain_x"] == rec["lab"]["drain"] / ref["drain"]
        assert got["mean_jct_x"] == rec["lab"]["mean"] / ref["mean"]
        assert got["bound_s"] == sum(it.work for it in workload(200)) / 16
    by_mode = {r["mode"]: r for r in rows}
    # Slurm alone has no controller, gate or restart: null, not 0
    assert by_mode["slurm-nodes1"]["controller_cpu_s"] is None
    assert by_mode["slurm-multifactor"]["sim_drain_s"] is None  # no simulated counterpart
    afs_l = by_mode["afs-l"]
    kinds = ("grow", "shrink", "preempt", "migrate")
    assert afs_l["gate_proposed"] == sum(afs_l[f"gate_{k}_proposed"] for k in kinds)
    assert afs_l["gate_skipped"] == sum(afs_l[f"gate_{k}_skipped"] for k in kinds)


def test_without_run_it_reads_every_row_of_every_file(capsys, tmp_path: Path) -> None:
    """Several files, no ``run`` key (what the harness's ``--out`` writes): all rows."""
    lines = [json.loads(x) for x in _lines()[:3]]
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(
        "\n".join(json.dumps({k: v for k, v in r.items() if k != "run"}) for r in lines[:2])
        + "\n\n"
    )
    second.write_text(json.dumps(lines[2]) + "\n")
    code, out, _ = _run(capsys, "slurm-lab-report", str(first), str(second), "--json")
    assert code == 0
    assert [r["mode"] for r in json.loads(out)] == [r["mode"] for r in lines]


def _bad(tmp_path: Path, line_no: int, edit) -> Path:
    """The recorded file with line ``line_no`` (1-based) replaced by ``edit(row)``'s JSON (or
    the text ``edit`` returns when it returns a string)."""
    lines = _lines()
    new = edit(json.loads(lines[line_no - 1]))
    lines[line_no - 1] = new if isinstance(new, str) else json.dumps(new)
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _set(path: str, value: object):
    def edit(row: dict) -> dict:
        *parents, last = path.split(".")
        into = row
        for p in parents:
            into = into[p]
        into[last] = value
        return row

    return edit


def _drop(key: str):
    def edit(row: dict) -> dict:
        row.pop(key)
        return row

    return edit


@pytest.mark.parametrize(
    ("line", "edit", "where"),
    [
        (3, lambda r: '{"mode": "srsf", ', "row 3: not a JSON object"),
        (2, lambda r: "[1, 2]", "row 2: expected a JSON object"),
        (4, _drop("mode"), "row 4, field 'mode'"),
        (5, _set("jobs", 0), "row 5, field 'jobs'"),
        (1, _set("lab.drain", float("nan")), "row 1, field 'lab.drain'"),
        (1, _set("lab.mean", "118.9"), "row 1, field 'lab.mean'"),
        (2, _set("sim", [1, 2]), "row 2, field 'sim'"),
        (2, _set("split", -1), "row 2, field 'split'"),
        (2, _set("resizes", True), "row 2, field 'resizes'"),
        (3, _set("gate.grow.skipped", 1.5), "row 3, field 'gate.grow.skipped'"),
        (3, _set("gate.regrow", {}), "row 3, field 'gate.regrow'"),
        (1, _set("busy_while_queued", 1.2), "row 1, field 'busy_while_queued'"),
        (1, _set("load_mean", None), "row 1, field 'load_mean'"),
        (6, _set("jobs", 30), "row 6, field 'jobs'"),  # one table, one workload
    ],
)
def test_a_bad_row_is_one_line_naming_file_line_and_field(
    capsys, tmp_path: Path, line: int, edit, where: str
) -> None:
    path = _bad(tmp_path, line, edit)
    code, out, err = _run(capsys, "slurm-lab-report", str(path), "--run", "A")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert f"{path}, {where}" in err, err


def test_a_missing_file_and_an_unknown_run_are_one_line(capsys, tmp_path: Path) -> None:
    code, out, err = _run(capsys, "slurm-lab-report", str(tmp_path / "nowhere.jsonl"))
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "nowhere.jsonl: cannot read the rows file" in err
    code, out, err = _run(capsys, "slurm-lab-report", str(RUNS), "--run", "a")
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "field 'run': no rows of run 'a'; runs recorded: A, B, C, S" in err


def test_a_fifo_a_device_and_a_folder_are_refused_unread(capsys, tmp_path: Path) -> None:
    """Not a regular file: one line, exit 2, found by stat alone (a FIFO nobody writes would
    block a read, /dev/zero would never end)."""
    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    for path, kind in (
        (fifo, "a FIFO"),
        (Path("/dev/zero"), "a device"),
        (tmp_path, "a directory"),
    ):
        code, out, err = _run(capsys, "slurm-lab-report", str(path))
        assert (code, out) == (2, "") and err.count("\n") == 1, err
        assert f"{path}: the rows file is not a regular file ({kind})" in err, err


def test_the_report_runs_no_simulator() -> None:
    """Reading recorded rows is arithmetic: the command imports neither the simulator nor a
    policy (a fresh interpreter, since this one has loaded both)."""
    probe = (
        "import contextlib, io, sys\nfrom gpuplan.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert main(['slurm-lab-report', {str(RUNS)!r}, '--run', 'S']) == 0\n"
        "print(sorted(sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules = proc.stdout
    assert "gpuplan.slurm_lab_report" in modules
    assert "gpuplan.executors.simulator" not in modules
    assert "gpuplan.solver_core" not in modules
