"""The lab's guard against controllers leaked by an earlier test session (real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.lab_reaper import controllers_attached, stop_stray_controllers

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")

# A stand-in with a controller's command line: `python -c <sleep> gpuplan slurm-controller`.
SLEEPER = "import time\nwhile True: time.sleep(1)"


def _spawn(conf: Path, *argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", SLEEPER, *argv],
        env={**os.environ, "SLURM_CONF": str(conf)},
        start_new_session=True,
    )


def _wait_listed(conf: Path, pid: int) -> None:
    deadline = time.monotonic() + 60
    while pid not in set(controllers_attached(conf)):
        assert time.monotonic() < deadline, f"{pid} never listed for {conf}"
        time.sleep(0.02)


def test_stops_only_controllers_of_this_lab(tmp_path: Path) -> None:
    ours, other = tmp_path / "a" / "slurm.conf", tmp_path / "b" / "slurm.conf"
    leaked = _spawn(ours, "gpuplan", "slurm-controller", "--policy", "fifo")
    elsewhere = _spawn(other, "gpuplan", "slurm-controller")
    not_controller = _spawn(ours, "gpuplan", "simulate")
    try:
        _wait_listed(ours, leaked.pid)
        _wait_listed(other, elsewhere.pid)
        assert not_controller.pid not in set(controllers_attached(ours))
        assert stop_stray_controllers(ours) == [leaked.pid]
        assert leaked.wait(timeout=60) == -9
        assert elsewhere.poll() is None and not_controller.poll() is None
        assert stop_stray_controllers(ours) == []
    finally:
        for proc in (leaked, elsewhere, not_controller):
            proc.kill()
            proc.wait(timeout=60)
