"""The gpuplan CLI end to end: real runs, real files, errors without tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.models import Cluster, ClusterState, JobSnapshot, JobSpec, Node


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_scenarios_lists_embedded_default(capsys) -> None:
    code, out, _ = _run(capsys, "scenarios")
    assert code == 0 and "philly-default" in out


def test_compare_json_one_object_per_policy(capsys) -> None:
    code, out, _ = _run(
        capsys, "compare", "--scenario", "philly-default", "--policies", "fifo,srtf", "--json"
    )
    assert code == 0
    rows = json.loads(out)
    assert [r["policy"] for r in rows] == ["fifo", "srtf"]
    assert rows[0]["avg_jct_ratio"] == 1.0
    for r in rows:
        assert r["jobs"] == 347 and r["finished"] == 347
        assert r["rejected"] == 0 and r["loaning"] is None
        assert r["solver_calls"] == 0 and r["solver_p50_ms"] is None  # no solver in fifo/srtf
        assert r["decision_p50_ms"] is not None and r["decision_p99_ms"] >= r["decision_p50_ms"]
    # SRTF beats FIFO on this busy window (ratio = FIFO avg JCT / SRTF avg JCT)
    assert rows[1]["avg_jct_ratio"] > 1.3


def test_simulate_writes_csv_summary_and_plots(capsys, tmp_path: Path) -> None:
    code, out, _ = _run(
        capsys,
        "simulate",
        "--scenario",
        "philly-default",
        "--policy",
        "srsf",
        "--out",
        str(tmp_path),
    )
    assert code == 0 and "srsf" in out
    jobs_csv = (tmp_path / "srsf-jobs.csv").read_text().splitlines()
    assert jobs_csv[0].startswith("job_id,") and len(jobs_csv) == 348
    for name in ("srsf-samples.csv", "summary.json", "jct_cdf.png", "timeseries.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_plan_prints_plan_json(capsys, tmp_path: Path) -> None:
    state = ClusterState(
        now=5,
        cluster=Cluster.uniform(2, 2),
        jobs=[
            JobSnapshot(spec=JobSpec(id="a", submit_time=0, requested_gpus=3, duration=10)),
            JobSnapshot(spec=JobSpec(id="b", submit_time=1, requested_gpus=1, duration=1)),
        ],
    )
    path = tmp_path / "state.json"
    path.write_text(state.model_dump_json())
    code, out, _ = _run(capsys, "plan", "--state", str(path), "--policy", "srtf")
    assert code == 0
    plan = json.loads(out)
    assert {
        k: sum(len(g) for g in v["placement"].values()) for k, v in plan["allocations"].items()
    } == {"a": 3, "b": 1}
    assert sorted(a["kind"] for a in plan["actions"]) == ["start", "start"]


def _state(tmp_path: Path, *jobs: JobSpec) -> Path:
    cluster = Cluster(
        nodes=[
            Node(name="v0", gpus=4),
            Node(name="k0", gpus=2, gpu_type="k80"),
            Node(name="i0", gpus=8, gpu_type="t4", pool="inference"),
        ]
    )
    state = ClusterState(now=0, cluster=cluster, jobs=[JobSnapshot(spec=j) for j in jobs])
    path = tmp_path / "state.json"
    path.write_text(state.model_dump_json())
    return path


def test_plan_rejects_a_job_that_can_never_fit(capsys, tmp_path: Path) -> None:
    ok = JobSpec(id="ok", submit_time=0, requested_gpus=6, duration=10)  # 4 v100 + 2 k80
    huge = JobSpec(id="huge", submit_time=0, requested_gpus=7, duration=10)  # i0 not usable
    path = _state(tmp_path, ok, huge)
    code, out, err = _run(capsys, "plan", "--state", str(path), "--policy", "fifo")
    assert code == 2 and out == ""
    assert err.startswith(
        f"error: {path}, field 'jobs[1].spec.requested_gpus': job huge needs "
        "at least 7 GPUs but the cluster has 6"
    )
    pinned = JobSpec(id="pinned", submit_time=0, requested_gpus=3, duration=10, gpu_type="k80")
    code, _, err = _run(
        capsys, "plan", "--state", str(_state(tmp_path, ok, pinned)), "--policy", "srtf"
    )
    assert code == 2 and "'jobs[1].spec.requested_gpus'" in err and "3 k80 GPUs" in err
    code, out, _ = _run(capsys, "plan", "--state", str(_state(tmp_path, ok)), "--policy", "fifo")
    assert code == 0 and "ok" in json.loads(out)["allocations"]


def test_scenarios_lists_the_aryl_testbed_with_its_inference_pool(capsys) -> None:
    code, out, _ = _run(capsys, "scenarios")
    line = next(x for x in out.splitlines() if "aryl-testbed" in x)
    assert code == 0 and "4 x 8 v100 + 4 x 8 t4 lending" in line


RATIOS = (
    "usage_training",
    "usage_overall",
    "usage_loaned",
    "loaned_share",
    "preemption_ratio",
    "collateral_damage",
    "met_by_flexible",
)


def test_compare_aryl_testbed_uses_loaned_servers(capsys) -> None:
    code, out, _ = _run(
        capsys,
        "compare",
        "--scenario",
        "aryl-testbed",
        "--policies",
        "aryl-sjf,aryl-loaning,aryl-scaling,aryl",
        "--json",
    )
    assert code == 0
    rows = {r["policy"]: r for r in json.loads(out)}
    assert list(rows) == ["aryl-sjf", "aryl-loaning", "aryl-scaling", "aryl"]
    for name, r in rows.items():
        m = r["loaning"]
        assert r["finished"] == 180 and r["rejected"] == 0, name
        assert m["loan_offers"] > 0 and m["reclaims"] > 0 and m["servers_reclaimed"] > 0, name
        for key in RATIOS:
            assert 0.0 <= m[key] <= 1.0, (name, key, m[key])
        assert r["solver_p50_ms"] is None or r["solver_p50_ms"] <= r["solver_p99_ms"]
    # SJF alone never touches the inference pool; loaning runs jobs on lent servers
    assert rows["aryl-sjf"]["loaning"]["loaned_gpu_s"] == 0.0
    assert rows["aryl-scaling"]["loaning"]["usage_loaned"] == 0.0
    assert rows["aryl-loaning"]["loaning"]["usage_loaned"] > 0.0
    assert rows["aryl"]["loaning"]["usage_loaned"] > rows["aryl-loaning"]["loaning"]["usage_loaned"]
    assert rows["aryl"]["solver_calls"] > 0 and rows["aryl"]["solver_p95_ms"] > 0
    # the same metrics in the table
    code, out, _ = _run(
        capsys, "compare", "--scenario", "aryl-testbed", "--policies", "aryl-sjf,aryl"
    )
    assert code == 0 and "Capacity loaning" in out and "Usage both pools" in out
    assert "Rejected" not in out  # shown only when some run rejected jobs


def _scenario(tmp_path: Path, csv_text: str, extra: str = "") -> Path:
    (tmp_path / "t.csv").write_text(csv_text)
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: t\ncluster: {nodes: 2, gpus_per_node: 4}\n"
        f"workload: {{source: philly, path: t.csv{extra}}}\n"
    )
    return path


HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"


def test_malformed_row_names_row_and_field(capsys, tmp_path: Path) -> None:
    path = _scenario(
        tmp_path, HEADER + "2017-10-01 00:00:00,10,1,10,vc\n2017-10-01 00:00:05,ten,1,10,vc\n"
    )
    code, _, err = _run(capsys, "simulate", "--scenario", str(path), "--policy", "fifo")
    assert code == 2
    assert "row 2" in err and "duration" in err and "Traceback" not in err


def test_impossible_request_names_row_and_field(capsys, tmp_path: Path) -> None:
    path = _scenario(
        tmp_path, HEADER + "2017-10-01 00:00:00,10,1,10,vc\n2017-10-01 00:00:05,10,16,160,vc\n"
    )
    code, _, err = _run(capsys, "simulate", "--scenario", str(path), "--policy", "fifo")
    assert code == 2
    # one line, in the same "<file>, row <n>, field '<f>'" form as a parse error
    assert err.startswith(f"error: {tmp_path / 't.csv'}, row 2, field 'gpus': ")
    assert "16 GPUs" in err and err.count("\n") == 1 and "Traceback" not in err
    # the documented way out: drop such jobs
    path = _scenario(
        tmp_path,
        HEADER + "2017-10-01 00:00:00,10,1,10,vc\n2017-10-01 00:00:05,10,16,160,vc\n",
        ", max_gpus: 8",
    )
    code, out, _ = _run(capsys, "simulate", "--scenario", str(path), "--policy", "fifo", "--json")
    assert code == 0 and json.loads(out)["jobs"] == 1


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["simulate", "--scenario", "nope", "--policy", "fifo"], "no scenario named 'nope'"),
        (["simulate", "--scenario", "philly-default", "--policy", "magic"], "unknown policy"),
        (["plan", "--state", "/nonexistent.json", "--policy", "fifo"], "cannot read state"),
    ],
)
def test_bad_arguments_give_one_line_errors(capsys, argv: list[str], needle: str) -> None:
    code, _, err = _run(capsys, *argv)
    assert code == 2 and needle in err and "Traceback" not in err


def test_bad_scenario_field_is_named(capsys, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ncluster: {nodes: 2, gpus_per_node: 0}\nworkload: {source: philly}\n")
    code, _, err = _run(capsys, "simulate", "--scenario", str(path), "--policy", "fifo")
    assert code == 2 and "cluster.gpus_per_node" in err


def test_console_script_runs_as_module() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gpuplan", "policies"], capture_output=True, text=True, check=True
    ).stdout
    for name in ("fifo", "fifo-backfill", "srtf", "srsf"):
        assert name in out


def test_error_text_is_not_read_as_markup(capsys, tmp_path: Path) -> None:
    path = tmp_path / "[bold]x[/bold]" / "nope.yaml"
    code, _, err = _run(capsys, "simulate", "--scenario", f"{path} [/x]", "--policy", "fifo")
    assert code == 2 and "[/x]" in err and "[bold]x[/bold]" in err and "Traceback" not in err
