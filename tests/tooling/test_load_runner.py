"""``make test-load``'s runner stops its busy processes however it ends (even on SIGTERM)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def _poll(what: str, predicate, bound_s: float = 60.0) -> None:
    deadline = time.monotonic() + bound_s
    while not predicate():
        assert time.monotonic() < deadline, f"not reached within {bound_s} s: {what}"
        time.sleep(0.05)


def test_sigterm_stops_the_spinners_and_the_command() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.load",
            "--workers",
            "2",
            "--",
            sys.executable,
            "-c",
            "import time; time.sleep(600)",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        pids = [int(p) for p in re.search(r"pids ([\d ]+)\)", line).group(1).split()]  # type: ignore[union-attr]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
        _poll("spinners gone", lambda: not any(_alive(p) for p in pids))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_exit_status_is_the_commands() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.load",
            "--workers",
            "1",
            "--",
            sys.executable,
            "-c",
            "raise SystemExit(3)",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert "stopping the busy processes" in done.stdout
