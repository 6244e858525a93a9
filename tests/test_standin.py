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


def _start(state: Path, job: str, work: float, rate: float, gpus: str | None,
           *extra: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    argv = [sys.executable, "-m", "gpuplan.executors.standin", f"--job-id={job}",
            "--work", repr(work), "--rate-per-gpu", repr(rate), "--state-dir", str(state),
            "--progress-interval", "0.05", *extra]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


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
    procs = {g: _start(tmp_path, f"g{g}", 1e9, 10.0, ",".join(map(str, range(g))))
             for g in (1, 3)}
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
