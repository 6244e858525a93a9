"""``gpuplan solve`` for mckp, reclaim, placement and packing: JSON shape, --out, --list, and
every bad file as one line naming file and field, exit 2."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.solver_core.policies.aryl.mckp import MckpGroup, solve_dp, solve_greedy
from gpuplan.solver_core.policies.aryl.reclaim_model import ReclaimJob

MCKP = {
    "capacity": 18,
    "groups": [
        {"id": "g0", "items": [{"weight": 2, "value": 45.6}, {"weight": 4, "value": 68.5}]},
        {"id": "g1", "items": [{"weight": 4, "value": 36.0}]},
    ],
}
RECLAIM = {
    "servers": ["s0", "s1", "s2"],
    "jobs": [
        {"id": "j0", "gpus": {"s0": 1, "s2": 2}},
        {"id": "j1", "gpus": {"s1": 4}, "allowed": [2, 3, 4]},
        {"id": "j2", "gpus": {"s1": 2, "s2": 2}},
    ],
    "demand": 1,
}
PACKING = {
    "unit": 4,
    "capacity": 16,
    "jobs": [
        {"id": "a", "share": 5},
        {"id": "b", "share": 3},
        {"id": "c", "share": 6, "allowed": [3, 6]},
        {"id": "d", "share": 2},
    ],
}
PLACEMENT = {
    "unit": 4,
    "nodes": {"n0": 4, "n1": 4, "n2": 4},
    "jobs": [
        {"id": "a", "count": 4, "held": {"n0": 2, "n1": 2}},
        {"id": "b", "count": 2, "held": {"n1": 2}},
        {"id": "c", "count": 3},
    ],
}
GOOD = {"mckp": MCKP, "reclaim": RECLAIM, "packing": PACKING, "placement": PLACEMENT}
KEYS = {"solver", "status", "objective", "bound", "gap", "wall_ms", "solution"}


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "inst.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], problem: str, data: object, solvers: str
) -> list[dict[str, object]]:
    path = _write(tmp_path, data)
    assert (
        main(
            [
                "solve",
                problem,
                "--instance",
                str(path),
                "--json",
                "--solvers",
                solvers,
                "--time-limit",
                "20",
            ]
        )
        == 0
    )
    return json.loads(capsys.readouterr().out)


def test_mckp_json_worked_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _run(tmp_path, capsys, "mckp", MCKP, "dp,cp-sat,highs,greedy")
    for r in rows:
        assert set(r) == KEYS
        # both groups fit: g0's 4-GPU item (68.5) + g1 (36.0)
        assert r["objective"] == pytest.approx(104.5)
        assert r["solution"] == {"choice": {"g0": 1, "g1": 0}}
    assert [r["status"] for r in rows] == ["optimal", "optimal", "optimal", "heuristic"]
    assert rows[0]["gap"] == 0 and rows[-1]["bound"] is None


def test_reclaim_json_worked_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # s0 preempts rigid j0 only; s1 preempts j1 (0 left) and rigid j2; s2 preempts j0 and j2.
    rows = _run(tmp_path, capsys, "reclaim", RECLAIM, "cp-sat,scip,exact,aryl,scf,random")
    for r in rows:
        assert set(r) == KEYS and set(r["solution"]) == {"servers", "preempted"}
        assert len(r["solution"]["servers"]) == 1
    exact = [r for r in rows if r["solver"] in ("cp-sat", "scip", "exact")]
    assert all(r["status"] == "optimal" and r["objective"] == 1 for r in exact)
    assert all(r["solution"] == {"servers": ["s0"], "preempted": ["j0"]} for r in exact)


def test_packing_and_placement_run_every_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for problem in ("packing", "placement"):
        path = _write(tmp_path, GOOD[problem])
        assert main(["solve", problem, "--instance", str(path), "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        best = {r["objective"] for r in rows if r["status"] == "optimal"}
        assert len(best) == 1, rows
        assert any(r["status"] == "heuristic" for r in rows)


def test_out_writes_csv_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, MCKP)
    out = tmp_path / "out"
    assert (
        main(
            ["solve", "mckp", "--instance", str(path), "--solvers", "dp,greedy", "--out", str(out)]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "build ms" in text and "solve ms" in text
    with (out / "solve.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["solver"] for r in rows] == ["dp", "greedy"]
    assert float(rows[0]["objective"]) == pytest.approx(104.5)
    assert (out / "solve.png").stat().st_size > 1000


def test_list_names_every_problem(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", "--list"]) == 0
    out = capsys.readouterr().out
    for word in (
        "mckp",
        "reclaim",
        "placement",
        "packing",
        "ojpp",
        "pulp-cbc",
        "dp",
        "aryl",
        "scf",
        "greedy-deficit",
    ):
        assert word in out


def _mckp(**groups: object) -> dict[str, object]:
    return {"capacity": 4, "groups": list(groups.values())}


BAD = [
    (
        "mckp",
        "dup-group",
        {"capacity": 4, "groups": [{"id": "g", "items": []}, {"id": "g", "items": []}]},
        "duplicate id 'g'",
        "groups[].id",
    ),
    (
        "mckp",
        "float-weight",
        {"capacity": 4, "groups": [{"id": "g", "items": [{"weight": 2.0, "value": 1}]}]},
        "must be an integer, got 2.0",
        "groups[0].items[0].weight",
    ),
    (
        "mckp",
        "zero-weight",
        {"capacity": 4, "groups": [{"id": "g", "items": [{"weight": 0, "value": 1}]}]},
        ">= 1",
        "weight",
    ),
    (
        "mckp",
        "negative-value",
        {"capacity": 4, "groups": [{"id": "g", "items": [{"weight": 1, "value": -1}]}]},
        ">= 0",
        "value",
    ),
    ("mckp", "negative-capacity", {"capacity": -1, "groups": []}, ">= 0", "capacity"),
    ("mckp", "not-json", "{", "", ""),
    ("reclaim", "demand-above-supply", {**RECLAIM, "demand": 4}, "above the 3 servers", "demand"),
    (
        "reclaim",
        "negative-gpus",
        {**RECLAIM, "jobs": [{"id": "j", "gpus": {"s0": -1}}]},
        ">= 1",
        "jobs[0].gpus.s0",
    ),
    (
        "reclaim",
        "float-gpus",
        {**RECLAIM, "jobs": [{"id": "j", "gpus": {"s0": 1.5}}]},
        "integer",
        "jobs[0].gpus.s0",
    ),
    (
        "reclaim",
        "dup-job",
        {**RECLAIM, "jobs": [{"id": "j", "gpus": {"s0": 1}}, {"id": "j", "gpus": {"s1": 1}}]},
        "duplicate id 'j'",
        "jobs[].id",
    ),
    ("reclaim", "dup-server", {**RECLAIM, "servers": ["s0", "s0"]}, "duplicate id", "servers"),
    ("reclaim", "negative-demand", {**RECLAIM, "demand": -1}, ">= 0", "demand"),
    (
        "reclaim",
        "bad-allowed",
        {**RECLAIM, "jobs": [{"id": "j", "gpus": {"s0": 2}, "allowed": [0]}]},
        ">= 1",
        "allowed[0]",
    ),
    (
        "packing",
        "negative-share",
        {**PACKING, "jobs": [{"id": "a", "share": -2}]},
        ">= 0",
        "jobs[0].share",
    ),
    ("packing", "zero-unit", {**PACKING, "unit": 0}, ">= 1", "unit"),
    (
        "packing",
        "dup-job",
        {**PACKING, "jobs": [{"id": "a", "share": 1}, {"id": "a", "share": 2}]},
        "duplicate",
        "id",
    ),
    ("placement", "negative-node", {**PLACEMENT, "nodes": {"n0": -4}}, ">= 0", "nodes.n0"),
    (
        "placement",
        "over-held",
        {**PLACEMENT, "jobs": [{"id": "a", "count": 2, "held": {"n0": 5}}]},
        "which has 4",
        "held.n0",
    ),
    (
        "placement",
        "unknown-node",
        {**PLACEMENT, "jobs": [{"id": "a", "count": 2, "nodes": ["zz"]}]},
        "unknown node",
        "jobs[0].nodes",
    ),
    ("placement", "zero-count", {**PLACEMENT, "jobs": [{"id": "a", "count": 0}]}, ">= 1", "count"),
]


@pytest.mark.parametrize(
    ("problem", "case", "data", "expect", "field"), BAD, ids=[f"{b[0]}-{b[1]}" for b in BAD]
)
def test_bad_files_are_one_line_and_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    problem: str,
    case: str,
    data: object,
    expect: str,
    field: str,
) -> None:
    path = _write(tmp_path, data)
    assert main(["solve", problem, "--instance", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], lines
    assert expect in lines[0] and field in lines[0], lines


def test_library_validation() -> None:
    """The library paths the file loader does not cover: an integral float weight no longer
    crashes the DP, duplicate keys are refused, negative GPU counts are refused."""
    groups = [MckpGroup("a", ((2.0, 5.0), (3, 6.0))), MckpGroup("b", ((2, 4.0),))]  # type: ignore[arg-type]
    assert solve_dp(groups, 4).value == pytest.approx(9.0)
    with pytest.raises(ValueError, match="duplicate"):
        solve_dp([MckpGroup("a", ((1, 1.0),)), MckpGroup("a", ((1, 1.0),))], 1)
    with pytest.raises(ValueError, match="duplicate"):
        solve_greedy([MckpGroup("a", ((1, 1.0),)), MckpGroup("a", ((1, 1.0),))], 1)
    with pytest.raises(ValueError, match="int >= 0"):
        ReclaimJob("j", {"s": -1})
