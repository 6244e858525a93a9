"""``gpuplan sweep``: the sweep file, a real Dask cluster, resume after a kill, progress, plots.

The Dask tests start a real ``dask scheduler`` and two ``dask worker`` processes on 127.0.0.1
and wait for them by polling the scheduler (never a fixed sleep); they are killed at teardown.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gpuplan import sweep as sweep_module
from gpuplan.cli import main
from gpuplan.models import RunResult, Sample
from gpuplan.plots import line_styles, span_scale, timeseries_figure
from gpuplan.sweep import (
    TIMING_COLUMNS,
    _Progress,
    load_sweep,
    plan_runs,
    run_sweep,
    slurm_cluster,
)
from tests.labs.slurm.lab import SlurmLab

BIN = Path(sys.executable).parent
SMALL = """\
name: test sweep
scenarios:
  - name: small
    scenario: philly-default
    overrides: {workload.max_jobs: 80}
policies: [fifo, srtf, "tiresias-l(thresholds=[3600])"]
seeds: [0, 1]
"""


def _write(tmp: Path, text: str, name: str = "sweep.yaml") -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def _csv_without_timing(path: Path) -> list[dict[str, str]]:
    rows = list(csv.DictReader(path.open()))
    return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in rows]


def _without_timing(result: dict) -> dict:
    """A run's result without its wall-clock fields (as tests.bench.fingerprint hashes it)."""
    return RunResult.model_validate(result).model_dump(
        mode="json", exclude={"decision_ms", "solver_ms", "wall_s"}
    )


def _until(predicate, what: str, timeout: float = 120.0, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


# --------------------------------------------------------------------------- sweep file
def test_plan_is_the_product_with_overrides_and_configurations(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
scenarios:
  - philly-default
  - {name: short, scenario: philly-default, overrides: {workload.max_jobs: 50}}
policies: [fifo, {name: afs-l-fast, base: afs-l}]
seeds: [3, 4]
overrides:
  - set: {engine.sample_interval_s: 900}
  - {scenario: short, policy: fifo, seed: 4, set: {overheads.restart_s: 5}}
""",
    )
    tasks = plan_runs(load_sweep(path), path)
    assert [(t.scenario, t.policy, t.seed) for t in tasks] == [
        (s, p, seed)
        for s in ("philly-default", "short")
        for p in ("fifo", "afs-l-fast")
        for seed in (3, 4)
    ]
    assert all(t.spec.engine.sample_interval_s == 900 for t in tasks)
    assert all(t.spec.seed == t.seed for t in tasks)
    assert [t.spec.workload.max_jobs for t in tasks] == [None] * 4 + [50] * 4
    restart = {(t.scenario, t.policy, t.seed): t.spec.overheads.restart_s for t in tasks}
    assert restart.pop(("short", "fifo", 4)) == 5
    assert set(restart.values()) == {30}
    assert all(t.spec.policies["afs-l-fast"] == {"base": "afs-l"} for t in tasks)
    assert len({t.fingerprint for t in tasks}) == len(tasks)
    assert len({t.key for t in tasks}) == len(tasks)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("scenarios: [philly-default]\npolicies: [fifo]\nseeds: [1, 1]\n", "seeds"),
        ("scenarios: [philly-default]\npolicies: [fifo]\ncolour: red\n", "colour"),
        ("scenarios: []\npolicies: [fifo]\n", "scenarios"),
        ("scenarios: [no-such-scenario]\npolicies: [fifo]\n", "scenarios[0]"),
        ("scenarios: [philly-default]\npolicies: [fifo, no-such-policy]\n", "policies[1]"),
        (
            "scenarios: [philly-default]\npolicies: [fifo]\n"
            "overrides: [{set: {workload.max_jobs: -3}}]\n",
            "overrides[0].set",
        ),
        (
            "scenarios: [philly-default]\npolicies: [fifo]\n"
            "overrides: [{policy: srtf, set: {engine.sample_interval_s: 60}}]\n",
            "overrides[0].policy",
        ),
        ("scenarios: [philly-default]\npolicies: [{base: fifo}]\n", "policies[0].name"),
    ],
)
def test_bad_sweep_file_is_one_line_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str
) -> None:
    path = _write(tmp_path, text)
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert str(path) in err
    assert f"field '{field}'" in err


# --------------------------------------------------------------------------- a real cluster
@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``dask scheduler`` and two single-threaded ``dask worker`` processes on 127.0.0.1."""
    from distributed import Client

    folder = tmp_path_factory.mktemp("dask")
    scheduler_file = folder / "scheduler.json"
    common = {
        "cwd": folder,
        "stdout": subprocess.DEVNULL,
        "stderr": subprocess.DEVNULL,
        "start_new_session": True,
    }
    procs = [
        subprocess.Popen(
            [
                str(BIN / "dask"),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--dashboard-address",
                "127.0.0.1:0",
                "--scheduler-file",
                str(scheduler_file),
            ],
            **common,
        )
    ]
    try:
        _until(
            lambda: scheduler_file.exists() and scheduler_file.stat().st_size > 0,
            "the scheduler file",
        )
        for i in range(2):
            procs.append(
                subprocess.Popen(
                    [
                        str(BIN / "dask"),
                        "worker",
                        "--scheduler-file",
                        str(scheduler_file),
                        "--host",
                        "127.0.0.1",
                        "--nthreads",
                        "1",
                        "--nworkers",
                        "1",
                        "--no-dashboard",
                        "--name",
                        f"w{i}",
                        "--local-directory",
                        str(folder),
                    ],
                    **common,
                )
            )
        address = json.loads(scheduler_file.read_text())["address"]
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=180)
        yield address
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


@pytest.fixture(scope="module")
def in_process(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small sweep run in this process (one worker): the reference numbers."""
    folder = tmp_path_factory.mktemp("inproc")
    path = _write(folder, SMALL)
    assert main(["sweep", str(path), "--out", str(folder / "out"), "--workers", "1"]) == 0
    return folder / "out"


def test_two_dask_workers_give_the_same_results_as_one_process(
    dask_cluster: str, in_process: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, SMALL)
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--scheduler", dask_cluster]) == 0
    assert "6 runs (6 computed, 0 reused)" in capsys.readouterr().out
    reference = _csv_without_timing(in_process / "results.csv")
    assert len(reference) == 6
    assert _csv_without_timing(out / "results.csv") == reference
    workers = {json.loads(p.read_text())["worker"] for p in (out / "runs").glob("*.json")}
    assert len(workers) == 2 and all(w.startswith("tcp://127.0.0.1:") for w in workers)
    assert {json.loads(p.read_text())["worker"] for p in (in_process / "runs").glob("*.json")} == {
        "in-process"
    }


def test_local_cluster_of_two_processes_gives_the_same_results(
    in_process: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweep_module, "IN_PROCESS_MAX_JOBS", 0)  # no sweep is "small"
    path = _write(tmp_path, SMALL)
    stream = io.StringIO()
    outcome = run_sweep(load_sweep(path), path, tmp_path / "out", workers=2, progress=stream)
    assert outcome.computed == 6
    assert _csv_without_timing(tmp_path / "out" / "results.csv") == _csv_without_timing(
        in_process / "results.csv"
    )
    assert {r.worker for r in outcome.records} != {"in-process"}
    assert "in this process" not in stream.getvalue()


def test_a_sweep_too_small_for_a_cluster_runs_in_process_and_says_so(
    in_process: Path, tmp_path: Path
) -> None:
    """6 runs of 80 jobs (480 in all) with --workers 2: starting two Dask workers would cost
    more than it saves, so the runs stay in this process, with a line saying why; the results
    are those of --workers 1."""
    path = _write(tmp_path, SMALL)
    stream = io.StringIO()
    outcome = run_sweep(load_sweep(path), path, tmp_path / "out", workers=2, progress=stream)
    assert outcome.computed == 6
    assert {r.worker for r in outcome.records} == {"in-process"}
    assert (
        "sweep: 6 runs of 480 jobs in all, too few to repay starting 2 Dask workers"
        in stream.getvalue()
    )
    assert _csv_without_timing(tmp_path / "out" / "results.csv") == _csv_without_timing(
        in_process / "results.csv"
    )
    for mine in (tmp_path / "out" / "runs").glob("*.json"):  # every job record, not only means
        theirs = json.loads((in_process / "runs" / mine.name).read_text())["result"]
        assert _without_timing(json.loads(mine.read_text())["result"]) == _without_timing(theirs)


# --------------------------------------------------------------------------- resume
def test_killed_sweep_resumes_without_recomputing_finished_runs(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
scenarios: [philly-default]
policies: [fifo, srtf, afs-l]
seeds: [0, 1, 2, 3, 4, 5]
""",
    )
    out = tmp_path / "out"
    runs = out / "runs"
    cmd = [str(BIN / "gpuplan"), "sweep", str(path), "--out", str(out), "--workers", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _until(lambda: len(list(runs.glob("*.json"))) >= 3, "three finished runs")
        assert proc.poll() is None, "the sweep finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    done = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in runs.glob("*.json")}
    assert 3 <= len(done) < 18
    assert not (out / "results.csv").exists()
    for text in done.values():  # every file there is a whole run (atomic writes)
        assert json.loads(text[1])["summary"]["jobs"] == 347
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
    assert f"18 runs ({18 - len(done)} computed, {len(done)} reused)" in rerun.stdout
    for name, (mtime, content) in done.items():
        assert (runs / name).stat().st_mtime_ns == mtime
        assert (runs / name).read_bytes() == content
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert sorted((r["policy"], int(r["seed"])) for r in rows) == sorted(
        (p, s) for p in ("fifo", "srtf", "afs-l") for s in range(6)
    )
    assert all(r["avg_jct_s"] and r["finished"] == "347" for r in rows)


def test_editing_the_sweep_recomputes_only_the_runs_it_changed(tmp_path: Path) -> None:
    path = _write(tmp_path, SMALL)
    first = run_sweep(
        load_sweep(path), path, tmp_path / "out", report=False, progress=io.StringIO()
    )
    assert (first.computed, first.reused) == (6, 0)
    _write(tmp_path, SMALL + "overrides:\n  - {policy: srtf, set: {overheads.restart_s: 1}}\n")
    second = run_sweep(
        load_sweep(path), path, tmp_path / "out", report=False, progress=io.StringIO()
    )
    assert (second.computed, second.reused) == (2, 4)
    old = {(r.policy, r.seed): r.summary for r in first.records}
    new = {(r.policy, r.seed): r.summary for r in second.records}
    assert new[("fifo", 0)] == old[("fifo", 0)]
    assert new[("srtf", 0)].avg_jct_s != old[("srtf", 0)].avg_jct_s


# --------------------------------------------------------------------------- progress
def test_plain_progress_lines_show_done_total_elapsed_and_eta() -> None:
    stream = io.StringIO()
    bar = _Progress(4, 1, stream, every=0.0)
    for _ in range(3):
        bar.advance()
    bar.close()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "sweep: 1/4 runs, elapsed 0:00:00, ETA ?"
    assert [line.split(",")[0] for line in lines] == [f"sweep: {i}/4 runs" for i in range(1, 5)]
    assert all(" elapsed " in line and " ETA " in line for line in lines)
    assert lines[-1].endswith("ETA 0:00:00")


# --------------------------------------------------------------------------- Slurm
def test_slurm_cluster_runs_one_single_threaded_worker_per_job_on_the_partition() -> None:
    cluster = slurm_cluster("lab-gpu", memory="2GB", walltime="00:30:00")
    try:
        script = cluster.job_script()
        assert "#SBATCH -p lab-gpu" in script
        assert "#SBATCH -t 00:30:00" in script
        assert "#SBATCH --cpus-per-task=1" in script
        assert "#SBATCH -J gpuplan-sweep" in script
        assert f"{sys.executable} -m distributed.cli.dask_worker" in script
        assert "--nthreads 1" in script
        assert not cluster.workers  # nothing submitted until scale()
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def slurm_lab() -> Iterator[SlurmLab]:
    """The project's real Slurm lab (root; locked against other sessions, skipped without):
    the one this session already holds when ``tests/slurm/test_slurm.py`` ran first (taking the
    lock again would wait for ourselves), else its own."""
    from .. import slurm_fixtures as fx

    yield from fx.module_lab()


def _sweep_jobs(lab: SlurmLab) -> list[str]:
    """The lab's completion records of Slurm jobs named ``gpuplan-sweep``."""
    path = lab.jobcomp_path
    lines = path.read_text().splitlines() if path.exists() else []
    return [line for line in lines if "Name=gpuplan-sweep " in line]


def test_sweep_on_real_slurm_jobs_equals_the_in_process_reference(
    slurm_lab: SlurmLab,
    in_process: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``gpuplan sweep --slurm``: dask-jobqueue submits two real Slurm jobs to the lab, each
    runs one Dask worker that connects back to the scheduler on 127.0.0.1, and the sweep's
    results.csv equals the in-process one."""
    for key, value in slurm_lab.env.items():
        monkeypatch.setenv(key, value)
    before = len(_sweep_jobs(slurm_lab))
    path = _write(tmp_path, SMALL)
    out = tmp_path / "out"
    assert (
        main(
            [
                "sweep",
                str(path),
                "--out",
                str(out),
                "--workers",
                "2",
                "--slurm",
                "gpu",
                "--slurm-memory",
                "1GB",
                "--slurm-walltime",
                "00:30:00",
                "--slurm-interface",
                "lo",
            ]
        )
        == 0
    )
    assert "6 runs (6 computed, 0 reused)" in capsys.readouterr().out
    assert _csv_without_timing(out / "results.csv") == _csv_without_timing(
        in_process / "results.csv"
    )
    workers = {json.loads(p.read_text())["worker"] for p in (out / "runs").glob("*.json")}
    assert workers and all(w.startswith("tcp://127.0.0.1:") for w in workers), workers
    # The workers were Slurm jobs of the lab: closing the cluster cancels them, and slurmctld
    # writes one completion record per job (polled: the record follows the cancel).
    _until(
        lambda: len(_sweep_jobs(slurm_lab)) >= before + 2,
        "two gpuplan-sweep job records",
        timeout=180.0,
        every=0.5,
    )
    records = _sweep_jobs(slurm_lab)[before:]
    assert all("Partition=gpu " in r for r in records), records
    assert all("NodeList=node" in r for r in records), records
    # Each job's own output (OUT/slurm-logs): its worker registered with our scheduler.
    logs = [p.read_text() for p in (out / "slurm-logs").iterdir()]
    assert sum("Registered to:" in log and "tcp://127.0.0.1:" in log for log in logs) >= 2, logs


# --------------------------------------------------------------------------- plots
def _result(name: str, bi: list[float]) -> RunResult:
    samples = [
        Sample(
            time=3600.0 * i,
            queue_length=1,
            running=1,
            cluster_efficiency=0.5,
            blocking_index=b,
            gpus_allocated=2,
            capacity=4,
        )
        for i, b in enumerate(bi)
    ]
    return RunResult(scenario="tiny", policy=name, jobs=[], samples=samples)


def test_span_scale_switches_to_log_for_wide_series() -> None:
    assert span_scale([np.array([1.0, 50.0])]) == "linear"
    assert span_scale([np.array([1.0, 5.0]), np.array([200.0])]) == "log"
    assert span_scale([np.array([0.0, 0.01, 300.0])]) == "symlog"
    assert span_scale([np.array([0.0, 0.0])]) == "linear"


def test_timeseries_names_its_scenario_and_logs_the_wide_bi_panel() -> None:
    results = {
        "fifo": _result("fifo", [0.0, 150.0, 400.0]),
        "srtf": _result("srtf", [0.0, 0.02, 0.5]),
        "same": _result("same", [0.0, 0.02, 0.5]),
    }
    fig = timeseries_figure(results)
    axes = fig.axes
    assert "tiny" in fig.get_suptitle()
    assert [ax.get_yscale() for ax in axes] == ["linear", "linear", "symlog", "linear"]
    bi_lines = axes[2].get_lines()
    assert [line.get_label() for line in bi_lines] == ["fifo", "srtf", "same"]
    styles = {(line.get_color(), line.get_linestyle()) for line in bi_lines}
    assert len(styles) == 3  # overlapping srtf / same still tell apart
    assert bi_lines[2].get_linewidth() < bi_lines[1].get_linewidth()


def test_line_styles_differ_for_every_policy_of_a_large_comparison() -> None:
    styles = line_styles(12)
    assert len({(s["color"], s["linestyle"]) for s in styles}) == 12
