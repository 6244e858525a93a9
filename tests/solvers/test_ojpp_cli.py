"""``gpuplan solve ojpp``: the README's JSON shape, the table, and bad files as one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.models.ojpp import load_ojpp
from gpuplan.solver_core.policies.ojpp import check_solution

from .test_ojpp_model import GOOD, _with


def _write(tmp_path: Path, data: object, name: str = "inst.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_json_output_has_the_readme_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, GOOD)
    assert (
        main(
            [
                "solve",
                "ojpp",
                "--instance",
                str(path),
                "--json",
                "--solvers",
                "cp-sat,highs,heuristic,best-fit",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert [r["solver"] for r in rows] == ["cp-sat", "highs", "heuristic", "best-fit"]
    inst = load_ojpp(GOOD, "x")
    for r in rows:
        # a relaxed baseline adds the rules it ignores and its violations (none here)
        extra = {"ignores", "violations"} if r["solver"] == "best-fit" else set()
        assert (
            set(r)
            == {"solver", "status", "objective", "bound", "gap", "wall_ms", "solution"} | extra
        )
        assert r["objective"] == 3 and len(r["solution"]["gpus"]) == 3
        assert check_solution(inst, r["solution"]["gpus"]) == []
        assert r["wall_ms"] >= 0
    assert [r["status"] for r in rows] == ["optimal", "optimal", "heuristic", "heuristic"]
    assert rows[0]["bound"] == 3 and rows[0]["gap"] == 0


def test_table_and_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, GOOD)
    assert (
        main(
            [
                "solve",
                "ojpp",
                "--instance",
                str(path),
                "--solvers",
                "greedy,scip",
                "--time-limit",
                "5",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    for word in (
        "solver",
        "status",
        "objective",
        "bound",
        "gap",
        "wall ms",
        "greedy",
        "scip",
        "optimal",
        "heuristic",
    ):
        assert word in out
    assert main(["solve", "--list"]) == 0
    listed = capsys.readouterr().out
    assert "ojpp" in listed and "c-greedy" in listed


def test_an_infeasible_instance_is_a_status_not_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _with("jobs.0.alpha", 1.0)
    data["jobs"][0]["gamma"], data["jobs"][0]["delta"] = 0.6, 0.45
    path = _write(tmp_path, data)
    assert (
        main(["solve", "ojpp", "--instance", str(path), "--json", "--solvers", "cp-sat,heuristic"])
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in rows] == ["infeasible", "infeasible"]
    assert rows[0]["objective"] is None and rows[0]["solution"] == {"gpus": None}


BAD = [
    ("missing pair", _with("interference.lenet.lenet", KeyError), "field 'interference'"),
    ("p outside [0,1]", _with("jobs.1.p", 1.2), "field 'jobs.1.p'"),
    ("negative size", _with("jobs.0.gamma", -0.1), "field 'jobs.0.gamma'"),
    ("NaN", json.dumps(GOOD).replace('"p": 0.1', '"p": NaN'), "field 'jobs.1.p'"),
    (
        "Infinity",
        json.dumps(GOOD).replace('"alpha": 0.2', '"alpha": Infinity'),
        "field 'jobs.1.alpha'",
    ),
    ("malformed JSON", '{"tau_max": 0.1, "jobs": [', "not valid JSON"),
    ("not an object", "[1, 2]", "JSON object"),
    ("unknown key", {**GOOD, "extra": 1}, "field 'extra'"),
]


@pytest.mark.parametrize(("case", "data", "expect"), BAD, ids=[b[0] for b in BAD])
def test_bad_files_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, data: object, expect: str
) -> None:
    path = _write(tmp_path, data)
    assert main(["solve", "ojpp", "--instance", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and expect in lines[0], lines


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--solvers", "heuristic,nope"], "unknown solver 'nope'"),
        (["--time-limit", "-1"], "time-limit"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], expect: str
) -> None:
    path = _write(tmp_path, GOOD)
    assert main(["solve", "ojpp", "--instance", str(path), *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0]


def test_missing_file_and_unknown_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["solve", "ojpp", "--instance", str(tmp_path / "none.json")]) == 2
    assert "none.json" in capsys.readouterr().err
    path = _write(tmp_path, GOOD)
    assert main(["solve", "knapsack", "--instance", str(path)]) == 2
    assert "unknown problem" in capsys.readouterr().err


def test_the_installed_command_runs(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuplan",
            "solve",
            "ojpp",
            "--instance",
            str(path),
            "--json",
            "--solvers",
            "heuristic",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["objective"] == 3
