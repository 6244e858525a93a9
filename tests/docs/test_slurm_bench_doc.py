"""docs/results/slurm.md's tables are what the named gpuplan commands print.

The simulator's table is ``gpuplan reproduce slurm-prediction`` (no lab needed; the product
code in ``gpuplan.slurm_lab_predict``): this test reruns the prediction and compares it with the
doc, so the doc cannot drift from the model. The lab's measurements are not reproducible bit for
bit; their rows are kept in docs/results/data/slurm-runs.jsonl and each measured table in the
doc must be what ``gpuplan slurm-lab-report docs/results/data/slurm-runs.jsonl --run NAME``
prints from them (``gpuplan.slurm_lab_report``). The prose's numbers quoting these tables are
statements checked by tests/docs/test_doc_commands.py. The lab harness
(``tests.bench.slurm_vs_native``) runs the same workload on the same lab shape (checked here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.slurm_lab import (
    BASELINES,
    DEFAULT_JOBS,
    DEFAULT_MODES,
    LAB_GPUS_PER_NODE,
    LAB_NODES,
    workload,
)
from gpuplan.slurm_lab_predict import prediction_table
from gpuplan.slurm_lab_report import load_rows, report

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "results" / "slurm.md"
RUNS = DOC.parent / "data" / "slurm-runs.jsonl"
BEGIN, END = "<!-- predict:begin -->", "<!-- predict:end -->"


def test_the_docs_prediction_table_is_the_models() -> None:
    """Twenty simulated runs of 200 jobs (about 7 CPU-s)."""
    text = DOC.read_text()
    assert BEGIN in text and END in text, "docs/results/slurm.md lost its prediction table"
    documented = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert documented == prediction_table(workload(DEFAULT_JOBS), DEFAULT_MODES)


@pytest.mark.parametrize("run", ["A", "B", "C", "S"])
def test_each_measured_table_is_its_kept_rows(
    run: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table is what the command the doc names prints, run as the doc writes it."""
    text = DOC.read_text()
    begin, end = f"<!-- run{run}:begin -->", f"<!-- run{run}:end -->"
    assert begin in text and end in text, f"docs/results/slurm.md lost run {run}'s table"
    rows = load_rows([RUNS], run)
    assert rows, f"no rows of run {run} in {RUNS}"
    assert all(r["jobs"] == DEFAULT_JOBS for r in rows)
    documented = text.split(begin, 1)[1].split(end, 1)[0].strip()
    monkeypatch.chdir(ROOT)
    assert main(["slurm-lab-report", str(RUNS.relative_to(ROOT)), "--run", run]) == 0
    assert documented == capsys.readouterr().out.strip()
    assert documented == report(rows, workload(DEFAULT_JOBS)).strip()


def test_the_doc_names_the_gpuplan_commands() -> None:
    """The tables' commands are the product's; the harness is named only as what records."""
    text = DOC.read_text()
    assert "gpuplan reproduce slurm-prediction" in text
    assert "gpuplan slurm-lab-report docs/results/data/slurm-runs.jsonl --run" in text
    assert "slurm_vs_native --predict" not in text
    assert "slurm_vs_native --report" not in text


def test_the_harness_runs_the_product_workload_on_the_lab_shape() -> None:
    """The numbers the product computes are about the jobs the harness submits, on the lab the
    fixtures start, with a submission line for every baseline the report knows."""
    from tests import slurm_fixtures as fx
    from tests.bench import slurm_vs_native as bench

    assert (fx.NODES, fx.GPUS_PER_NODE) == (LAB_NODES, LAB_GPUS_PER_NODE)
    assert tuple(bench.BASELINES) == BASELINES
    assert bench.workload is workload and bench.DEFAULT_MODES is DEFAULT_MODES
