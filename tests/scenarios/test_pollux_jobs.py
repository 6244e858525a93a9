"""Pollux workload rows become jobs whose work reaches the model's target epoch."""

from __future__ import annotations

import csv

import pytest

from gpuplan.models import InputError
from gpuplan.scenarios.pollux import load_pollux_workload
from gpuplan.scenarios.pollux_jobs import map_pollux, pollux_steps
from gpuplan.scenarios.trace_job import TraceJob

pytestmark = pytest.mark.traces


# ``traces``: tests/conftest.py's fixture (the one way tests find the shared traces).


def _column(path, name: str) -> list[float]:
    with path.open() as fh:
        return [float(r[name]) for r in csv.DictReader(fh)]


def test_workload_jobs_take_pollux_steps_at_their_own_batch(traces) -> None:
    """Work = optimizer steps at the row's global batch, counted as Pollux's simulator counts
    them: epoch e needs (P(e+1) - P(e)) / gain_e steps, P = smallest progress over the
    validation files, gain from that batch's gradient statistics (exact batch: no interpolation)."""
    rows = load_pollux_workload(traces / "pollux/workloads/workload-1.csv")
    jobs = map_pollux(rows, traces / "pollux/profiles")
    assert len(jobs) == 160
    job = next(j for j in jobs if j.model == "cifar10" and rows[jobs.index(j)].batch_size == 2048)
    folder = traces / "pollux/profiles/cifar10"
    files = sorted(folder.glob("validation-*.csv"))
    progress = [min(vals) for vals in zip(*(_column(f, "progress") for f in files), strict=False)]
    sqr = _column(folder / "validation-2048.csv", "grad_sqr")
    var = _column(folder / "validation-2048.csv", "grad_var")
    scale = 2048 / 128  # init batch = smallest validated batch
    steps, before = 0.0, 0.0
    for e in range(100):
        gain = (var[e] + sqr[e]) / (var[e] / scale + sqr[e])
        steps += (progress[e] - before) / gain
        before = progress[e]
    assert job.work == pytest.approx(steps, rel=1e-12)
    # the measured run at batch 2048 took 3,178 steps; the simulator's rule lands within 6 %
    measured = _column(folder / "validation-2048.csv", "iteration")[-1]
    assert measured == 3178 and abs(job.work / measured - 1) < 0.06
    # a larger batch needs more samples for the same epochs (statistical efficiency < 1)
    small = pollux_steps(folder, 128)
    assert job.work * 2048 > small * 128
    # rigid at the row's own GPU count
    assert all(
        j.requested_gpus == r.gpus and j.elasticity is None for j, r in zip(jobs, rows, strict=True)
    )


def test_unknown_model_is_named(traces) -> None:
    row = TraceJob(id="x", submit_time=0, gpus=1, model="gpt9", batch_size=8, source="w.csv:3")
    with pytest.raises(InputError, match=r"w.csv:3.*application.*gpt9|gpt9"):
        map_pollux([row], traces / "pollux/profiles")
