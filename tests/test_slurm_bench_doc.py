"""docs/results/slurm.md's simulator table is what the benchmark's model computes.

The table is printed by ``python -m tests.bench.slurm_vs_native --predict`` (no lab needed); the
lab's measurements beside it are not reproducible bit for bit, its predictions are. This test
reruns the prediction and compares it with the doc, so the doc cannot drift from the model."""

from __future__ import annotations

from pathlib import Path

from tests.bench import slurm_vs_native as bench

DOC = Path(__file__).resolve().parents[1] / "docs" / "results" / "slurm.md"
BEGIN, END = "<!-- predict:begin -->", "<!-- predict:end -->"


def test_the_docs_prediction_table_is_the_models() -> None:
    text = DOC.read_text()
    assert BEGIN in text and END in text, "docs/results/slurm.md lost its prediction table"
    documented = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert documented == bench.prediction_table(bench.workload(200), list(bench.DEFAULT_MODES))

