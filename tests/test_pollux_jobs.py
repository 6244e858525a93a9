"""Pollux workload rows become jobs whose work reaches the model's target epoch."""

from __future__ import annotations

import csv

import pytest

from gpuplan.models import InputError
from gpuplan.scenarios.pollux import load_pollux_workload
from gpuplan.scenarios.pollux_jobs import map_pollux
from gpuplan.scenarios.profiles import pollux_default_local_bsz
from gpuplan.scenarios.trace_job import TraceJob
from gpuplan.scenarios.traces import shared_traces_dir

pytestmark = pytest.mark.traces


@pytest.fixture(scope="module")
def traces():
    try:
        return shared_traces_dir()
    except InputError:
        pytest.skip("shared traces not available")


def test_workload_jobs_take_target_epoch_samples(traces) -> None:
    rows = load_pollux_workload(traces / "pollux/workloads/workload-1.csv")
    jobs = map_pollux(rows, traces / "pollux/profiles")
    assert len(jobs) == 160
    job = next(j for j in jobs if j.model == "cifar10" and rows[jobs.index(j)].batch_size == 2048)
    with (traces / "pollux/profiles/cifar10/validation-2048.csv").open() as fh:
        last = list(csv.DictReader(fh))[-1]
    local = pollux_default_local_bsz(traces / "pollux/profiles/cifar10")
    assert job.work == pytest.approx(float(last["iteration"]) * 2048 / local)
    # At batch 128, 100 epochs of CIFAR-10 = 39,063 steps x 128 = 5.0 M samples. Pollux's
    # validation rows advance by scale-invariant progress, so a larger batch (lower statistical
    # efficiency) needs more samples for the same target: 3,178 x 2,048 = 6.5 M.
    with (traces / "pollux/profiles/cifar10/validation-128.csv").open() as fh:
        small = float(list(csv.DictReader(fh))[-1]["iteration"]) * 128
    assert 4.99e6 < small < 5.01e6
    assert job.work * local == pytest.approx(3178 * 2048)
    assert job.work * local > 1.2 * small


def test_unknown_model_is_named(traces) -> None:
    row = TraceJob(id="x", submit_time=0, gpus=1, model="gpt9", batch_size=8, source="w.csv:3")
    with pytest.raises(InputError, match=r"w.csv:3.*application.*gpt9|gpt9"):
        map_pollux([row], traces / "pollux/profiles")
