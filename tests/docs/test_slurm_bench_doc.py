"""docs/results/slurm.md's tables are what the benchmark computes.

The simulator's table is printed by ``python -m tests.bench.slurm_vs_native --predict`` (no lab
needed): this test reruns the prediction and compares it with the doc, so the doc cannot drift
from the model. The lab's measurements are not reproducible bit for bit; their rows are kept in
docs/results/data/slurm-runs.jsonl and each measured table in the doc must be what
``--report docs/results/data/slurm-runs.jsonl --run NAME`` prints from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench import slurm_vs_native as bench

DOC = Path(__file__).resolve().parents[2] / "docs" / "results" / "slurm.md"
RUNS = DOC.parent / "data" / "slurm-runs.jsonl"
BEGIN, END = "<!-- predict:begin -->", "<!-- predict:end -->"


def test_the_docs_prediction_table_is_the_models() -> None:
    text = DOC.read_text()
    assert BEGIN in text and END in text, "docs/results/slurm.md lost its prediction table"
    documented = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert documented == bench.prediction_table(bench.workload(200), list(bench.DEFAULT_MODES))


@pytest.mark.parametrize("run", ["A", "B", "C", "S"])
def test_each_measured_table_is_its_kept_rows(run: str) -> None:
    text = DOC.read_text()
    begin, end = f"<!-- run{run}:begin -->", f"<!-- run{run}:end -->"
    assert begin in text and end in text, f"docs/results/slurm.md lost run {run}'s table"
    rows = bench.load_rows([RUNS], run)
    assert rows, f"no rows of run {run} in {RUNS}"
    assert all(r["jobs"] == 200 for r in rows)
    documented = text.split(begin, 1)[1].split(end, 1)[0].strip()
    assert documented == bench.report(rows, bench.workload(200)).strip()
