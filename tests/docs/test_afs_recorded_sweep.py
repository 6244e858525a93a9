"""docs/results/afs.md's tables come from one ``gpuplan`` command the page names (issue 29):

    gpuplan sweep docs/results/data/afs-reproduction.sweep.yaml --out afs-sweep/ --workers 2

Its 264 runs take about half an hour on two cores, too long for a test, so the page's chain is
checked link by link against the recording of that command
(``docs/results/data/afs-reproduction.results.csv``, its ``results.csv`` as written):

1. the recording holds the sweep file's 264 runs, every job finished;
2. ``afs.json`` (which ``tests.bench.afs_report`` renders into the page) is the recording
   summarised: each seed's average and p99 JCT equal bit for bit, the means over seeds,
   preemptions and resizes computed as :func:`gpuplan.executors.metrics.mean_summary` does;
3. the page's tables are ``afs_report.render(afs.json)`` line for line;
4. the recording is today's code: the runs of one VC (every policy, one seed) are computed
   again with ``gpuplan sweep`` and equal the recorded rows in every column that does not
   measure the machine (``TIMING_COLUMNS``).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gpuplan.cli import main

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
RECORDING = RESULTS / "data" / "afs-reproduction.results.csv"
NEWER_COLUMNS = frozenset({"gpu_seconds"})
"""Summary columns added after the recording was made: a fresh run has them, the recording
does not (the test asserts that, so this cannot hide a column the recording has)."""
SWEEP = RESULTS / "data" / "afs-reproduction.sweep.yaml"


def _rows(path: Path) -> dict[tuple[str, str, str], dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    keyed = {(r["scenario"], r["policy"], r["seed"]): r for r in rows}
    assert len(keyed) == len(rows), f"{path}: a (scenario, policy, seed) appears twice"
    return keyed


def _afs_json() -> dict:
    return json.loads((RESULTS / "afs.json").read_text(encoding="utf-8"))


def test_the_recording_holds_the_sweep_files_264_finished_runs() -> None:
    from gpuplan.sweep_plan import expand_runs, load_sweep

    runs = expand_runs(load_sweep(SWEEP), SWEEP)
    recorded = _rows(RECORDING)
    assert set(recorded) == {(r.scenario, r.policy, str(r.seed)) for r in runs}
    assert all(r["unfinished"] == "0" for r in recorded.values())
    assert "afs-reproduction.results.csv" in (RESULTS / "afs.md").read_text(encoding="utf-8")


def test_afs_json_is_the_recorded_sweep_summarised() -> None:
    data = _afs_json()
    recorded = _rows(RECORDING)
    seeds = data["seeds"]
    compared = 0
    for vc, row in data["vcs"].items():
        for policy, summary in row["policies"].items():
            runs = [recorded[(f"philly-{vc}", policy, str(seed))] for seed in seeds]
            assert {int(r["jobs"]) for r in runs} == {row["jobs"]}, (vc, policy)
            per_seed = [
                {
                    "seed": seed,
                    "avg_jct_s": float(r["avg_jct_s"]),
                    "p99_jct_s": float(r["p99_jct_s"]),
                }
                for seed, r in zip(seeds, runs, strict=True)
            ]
            assert summary["per_seed"] == per_seed, (vc, policy)
            for field in ("avg_jct_s", "p99_jct_s"):
                values = [float(r[field]) for r in runs]
                assert summary[field] == sum(values) / len(values), (vc, policy, field)
            for field in ("preemptions", "resizes", "unfinished"):
                values = [int(r[field]) for r in runs]
                assert summary[field] == round(sum(values) / len(values)), (vc, policy, field)
            compared += 1
    assert compared == 88


def test_the_pages_tables_are_afs_json_rendered() -> None:
    from tests.bench.afs_report import render

    page = (RESULTS / "afs.md").read_text(encoding="utf-8")
    lines = [line for line in render(_afs_json()).splitlines() if line.startswith("|")]
    assert len(lines) > 60
    missing = [line for line in lines if line not in page]
    assert not missing, missing[:3]


def test_the_recording_is_what_gpuplan_sweep_computes_today(
    traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every policy of the reproduction on VC e13805 (trace #4, 374 jobs), seed 2, computed
    again: equal to the recorded rows in every column but the timing ones."""
    from gpuplan.sweep import TIMING_COLUMNS

    sweep = tmp_path / "one-vc.yaml"
    sweep.write_text(
        "name: AFS reproduction, one VC\n"
        "scenarios: [philly-e13805]\n"
        "policies: [srtf, srsf, afs-l, tiresias-l, max-min, optimus, themis, afs-p]\n"
        "seeds: [2]\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1"]) == 0
    assert "8 runs (8 computed, 0 reused)" in capsys.readouterr().out
    recorded = _rows(RECORDING)
    fresh = _rows(out / "results.csv")
    assert len(fresh) == 8
    for key, row in fresh.items():
        want = recorded[key]
        for column, value in row.items():
            if column in NEWER_COLUMNS:
                assert column not in want, column
            elif column not in TIMING_COLUMNS:
                assert value == want[column], (key, column, value, want[column])
