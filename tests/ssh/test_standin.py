"""The stand-in training job: rate, checkpoint on signal, resume, completion, segment log.

These run the real module in subprocesses (``python -m gpuplan.executors.standin``), exactly as
the SSH and Slurm executors launch it.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuplan.executors.standin import UsageError, check_job_id, gpu_count


def _start(
    state: Path, job: str, work: float, rate: float, gpus: str | None, *extra: str
) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    argv = [
        sys.executable,
        "-m",
        "gpuplan.executors.standin",
        f"--job-id={job}",
        "--work",
        repr(work),
        "--rate-per-gpu",
        repr(rate),
        "--state-dir",
        str(state),
        "--progress-interval",
        "0.05",
        *extra,
    ]
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_running(state: Path, job: str, proc: subprocess.Popen[str]) -> dict:
    """Wait for the run's first progress file: from then on its stop signals are caught."""
    path = state / f"{job}.progress"
    deadline = time.monotonic() + 120  # "never started", not "slow": a busy machine is slow
    while time.monotonic() < deadline:
        if path.exists():
            data = json.loads(path.read_text())
            if data["pid"] == proc.pid:
                return data
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.02)
    raise AssertionError("stand-in never wrote its progress file")


def _segments(state: Path, job: str) -> list[dict]:
    path = state / f"{job}.log"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _ckpt(state: Path, job: str) -> float:
    return json.loads((state / f"{job}.ckpt").read_text())["done"]


def assert_tiles(segments: list[dict], work: float) -> None:
    """Committed segments start at 0, follow each other exactly and end at ``work``."""
    assert segments, "no segments"
    assert segments[0]["start"] == 0.0
    for prev, seg in itertools.pairwise(segments):
        assert seg["start"] == pytest.approx(prev["end"], abs=1e-9), (prev, seg)
        assert seg["end"] >= seg["start"]
    assert segments[-1]["end"] == pytest.approx(work, rel=1e-12)
    total = sum(s["end"] - s["start"] for s in segments)
    assert total == pytest.approx(work, rel=1e-9)


def test_gpu_count_parsing() -> None:
    assert gpu_count("0") == 1
    assert gpu_count("2,3,5") == 3
    assert gpu_count("GPU-aaaa,GPU-bbbb") == 2
    for bad in (None, "", " ", "0,,1", ","):
        with pytest.raises(UsageError):
            gpu_count(bad)
    for bad in ("", ".", "..", "a/b", "x\0y"):
        with pytest.raises(UsageError):
            check_job_id(bad)
    assert check_job_id("job-1.r2") == "job-1.r2"


def test_no_gpus_is_an_error(tmp_path: Path) -> None:
    for gpus in (None, ""):
        proc = _start(tmp_path, "j", 10, 1, gpus)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 2
        assert "CUDA_VISIBLE_DEVICES" in err
    assert not list(tmp_path.iterdir()), "a refused run writes nothing"


def test_rate_scales_with_gpus_and_sigusr1_checkpoints(tmp_path: Path) -> None:
    procs = {g: _start(tmp_path, f"g{g}", 1e9, 10.0, ",".join(map(str, range(g)))) for g in (1, 3)}
    for g, proc in procs.items():
        _wait_running(tmp_path, f"g{g}", proc)
    time.sleep(1.0)
    for proc in procs.values():
        proc.send_signal(signal.SIGUSR1)
    for g, proc in procs.items():
        assert proc.wait(timeout=10) == 0
        (seg,) = _segments(tmp_path, f"g{g}")
        assert seg["reason"] == "signal:SIGUSR1"
        assert seg["gpus"] == g
        rate = (seg["end"] - seg["start"]) / (seg["t_end"] - seg["t_start"])
        assert rate == pytest.approx(10.0 * g, rel=0.05)
        assert _ckpt(tmp_path, f"g{g}") == seg["end"]
        progress = json.loads((tmp_path / f"g{g}.progress").read_text())
        assert progress["gpus"] == g and progress["done"] == seg["end"]
        assert not (tmp_path / f"g{g}.done").exists()


def test_sigterm_resume_and_completion_log_sums_to_work(tmp_path: Path) -> None:
    work = 30.0
    # run 1: 2 GPUs, stopped by SIGTERM
    proc = _start(tmp_path, "r", work, 10.0, "0,1")
    _wait_running(tmp_path, "r", proc)
    time.sleep(0.4)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    first = _ckpt(tmp_path, "r")
    assert 0 < first < work
    # run 2: resumes on 1 GPU (a shrink), stopped by SIGUSR1
    proc = _start(tmp_path, "r", work, 10.0, "4")
    started = _wait_running(tmp_path, "r", proc)
    assert started["done"] == first, "resumes exactly from the checkpoint"
    time.sleep(0.3)
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=10) == 0
    second = _ckpt(tmp_path, "r")
    assert second > first
    # run 3: 4 GPUs until completion
    proc = _start(tmp_path, "r", work, 10.0, "0,1,2,3")
    assert proc.wait(timeout=30) == 0
    assert _ckpt(tmp_path, "r") == work
    assert (tmp_path / "r.done").exists()
    segs = _segments(tmp_path, "r")
    assert [s["gpus"] for s in segs] == [2, 1, 4]
    assert [s["reason"] for s in segs] == ["signal:SIGTERM", "signal:SIGUSR1", "complete"]
    assert_tiles(segs, work)
    # run 4: already complete -> exits at once, logs nothing new
    proc = _start(tmp_path, "r", work, 10.0, "0")
    assert proc.wait(timeout=30) == 0
    assert len(_segments(tmp_path, "r")) == 3


def test_crash_loses_only_since_last_periodic_checkpoint(tmp_path: Path) -> None:
    work = 12.0
    proc = _start(tmp_path, "c", work, 10.0, "0", "--checkpoint-interval", "0.2")
    _wait_running(tmp_path, "c", proc)
    time.sleep(0.75)
    proc.kill()  # SIGKILL: no chance to checkpoint
    proc.wait(timeout=10)
    ckpt = _ckpt(tmp_path, "c")
    progress = json.loads((tmp_path / "c.progress").read_text())["done"]
    assert 0 < ckpt <= progress, "only the tail after the last checkpoint is lost"
    assert sum(s["end"] - s["start"] for s in _segments(tmp_path, "c")) == pytest.approx(ckpt)
    proc = _start(tmp_path, "c", work, 10.0, "0,1", "--checkpoint-interval", "0.2")
    assert proc.wait(timeout=30) == 0
    assert_tiles(_segments(tmp_path, "c"), work)


def test_raised_target_clears_stale_done_marker(tmp_path: Path) -> None:
    proc = _start(tmp_path, "t", 2.0, 20.0, "0")
    assert proc.wait(timeout=30) == 0
    assert (tmp_path / "t.done").exists()
    proc = _start(tmp_path, "t", 1e9, 20.0, "0")
    _wait_running(tmp_path, "t", proc)
    assert not (tmp_path / "t.done").exists()
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=10) == 0
    segs = _segments(tmp_path, "t")
    assert segs[0]["end"] == 2.0 and segs[1]["start"] == 2.0


def test_a_job_id_starting_with_a_dash_runs(tmp_path: Path) -> None:
    """``--job-id=-x`` (how the executors pass ids) is a value, not an option: such an id once
    crash-looped the stand-in under the controller."""
    proc = _start(tmp_path, "-x", 2.0, 10.0, "0")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert (tmp_path / "-x.done").exists()
    assert_tiles(_segments(tmp_path, "-x"), 2.0)


# ------------------------------------------------------------------ the executors' shared core


def test_progress_core_reads_the_files_a_real_standin_writes(tmp_path: Path) -> None:
    """``standin_paths``/``read_state_file`` name and read exactly what the stand-in writes:
    a checkpoint-stop leaves ``.ckpt`` equal to the ``.progress`` it last reported, and a run to
    the end leaves the ``.done`` marker."""
    from gpuplan.executors.progress_core import read_state_file, standin_paths

    files = standin_paths(tmp_path, "core-job")
    assert files == {
        role: str(tmp_path / f"core-job{suffix}")
        for role, suffix in (
            ("progress", ".progress"),
            ("checkpoint", ".ckpt"),
            ("done", ".done"),
            ("log", ".log"),
        )
    }
    proc = _start(tmp_path, "core-job", 1e9, 100.0, "0")
    _wait_running(tmp_path, "core-job", proc)
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=60) == 0
    ckpt = read_state_file(files["checkpoint"])
    assert ckpt is not None and 0.0 < ckpt["done"] < 1e9
    assert ckpt["done"] == _ckpt(tmp_path, "core-job")
    assert not Path(files["done"]).exists()
    proc = _start(tmp_path, "core-job", ckpt["done"] + 5.0, 100.0, "0")
    assert proc.wait(timeout=60) == 0
    assert Path(files["done"]).exists()
    assert read_state_file(files["checkpoint"])["done"] == pytest.approx(ckpt["done"] + 5.0)
    assert read_state_file(tmp_path / "missing.ckpt") is None
    (tmp_path / "half.ckpt").write_text('{"done": 1')
    assert read_state_file(tmp_path / "half.ckpt") is None
    (tmp_path / "list.ckpt").write_text("[1, 2]")
    assert read_state_file(tmp_path / "list.ckpt") is None


def test_progress_core_rewind_budget_latencies_and_events() -> None:
    """Worked examples of what both real executors delegate to the core."""
    import statistics

    from gpuplan.executors.base import ExecutorCapabilities
    from gpuplan.executors.progress_core import (
        ArrivalQueue,
        ProgressCore,
        WakeTimers,
        extrapolate,
        mean,
        mean_ms,
    )
    from gpuplan.models import ActiveJob, JobCompletion, JobFailure, JobSpec

    spec = JobSpec(id="j", submit_time=0, requested_gpus=1, total_iterations=1000.0)
    job = ActiveJob(spec=spec, status="running", done=100.0, anchor_time=0.0, resume_time=0.0)
    job.rate = 10.0
    # At t=20 the model says 300 done; the checkpoint kept 250, the run had reached 280.
    ProgressCore.rewind(job, 20.0, 250.0, 280.0)
    assert (job.done, job.last_checkpoint_done, job.lost_work) == (250.0, 250.0, 30.0)
    assert job.anchor_time == 20.0
    ProgressCore.rewind(job, 20.0, 250.0, 240.0)  # reached below the checkpoint: no loss
    assert job.lost_work == 30.0
    ProgressCore.rewind(job, 20.0, None, 260.0)  # no checkpoint accounting: progress kept
    assert (job.done, job.lost_work) == (250.0, 40.0)
    assert extrapolate(10.0, 2.0, 3.0) == 16.0 and extrapolate(10.0, 2.0, -3.0) == 10.0

    caps = ExecutorCapabilities(
        resize="restart", pin_gpus=False, preempt_modes=("checkpoint",), restart_latency_s=3.0
    )
    slurm_like = ProgressCore(caps, max_restarts=2, restart_summary=mean_ms, start_summary=mean)
    assert slurm_like.start_estimate(1.0) == 1.0
    for s in (1.0, 2.0, 2.0004):
        slurm_like.record_restart_latency(s)
    assert slurm_like.capabilities.restart_latency_s == round((1.0 + 2.0 + 2.0004) / 3, 3)
    assert caps.restart_latency_s == 3.0  # a new capabilities object, the old one unchanged
    slurm_like.record_start_latency(0.5)
    slurm_like.record_start_latency(1.5)
    assert slurm_like.start_estimate(9.0) == 1.0
    ssh_like = ProgressCore(caps, max_restarts=1)
    for s in (5.0, 1.0, 2.0):
        ssh_like.record_restart_latency(s)
    assert ssh_like.capabilities.restart_latency_s == statistics.median([5.0, 1.0, 2.0]) == 2.0

    assert [slurm_like.spend_restart("a") for _ in range(3)] == [1, 2, 3]
    assert slurm_like.over_budget("a") and not slurm_like.over_budget("b")
    assert slurm_like.restarts_of("a") == 3 and slurm_like.restarts_of("b") == 0

    assert not slurm_like.has_events()
    slurm_like.complete(4.0, "a")
    slurm_like.fail(5.0, "b", "gave up")
    events = slurm_like.drain()
    assert isinstance(events[0], JobCompletion) and events[0].job_id == "a"
    assert isinstance(events[1], JobFailure) and events[1].reason == "gave up"
    assert slurm_like.failures == {"b": "gave up"} and slurm_like.drain() == []

    specs = [
        JobSpec(id=i, submit_time=t, requested_gpus=1, total_iterations=1.0)
        for i, t in (("b", 5.0), ("a", 5.0), ("c", 1.0))
    ]
    by_time = ArrivalQueue(specs)
    assert [s.id for s in by_time.due(0.5)] == [] and by_time.next_time() == 1.0
    assert [s.id for s in by_time.due(10.0)] == ["c", "b", "a"]  # stable: submit order kept
    assert not by_time and by_time.next_time() is None
    by_id = ArrivalQueue(specs, order=lambda s: (s.submit_time, s.id))
    assert [s.id for s in by_id.due(10.0)] == ["c", "a", "b"]
    timers = WakeTimers()
    for t in (3.0, 1.0, 2.0):
        timers.push(t)
    assert not timers.fire(0.5) and timers.next_time() == 1.0
    assert timers.fire(2.0) and timers.next_time() == 3.0
