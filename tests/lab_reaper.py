"""Controllers left attached to a Slurm lab by an earlier test session, found and stopped.

Why: a ``gpuplan slurm-controller`` started by a test runs in its own session (like systemd
would run it), so a test run that is killed (SIGKILL, a CI timeout, a developer's Ctrl-C at the
wrong moment) can leave it running. It then serves the lab's partition beside the next session's
own controller: the two race for the same held jobs and the next session's tests fail for
reasons that are not theirs (measured once: eight lab tests failed that way in a full run).

A controller is recognised by its command line (``gpuplan ... slurm-controller``) and by the
lab it talks to: ``SLURM_CONF`` in its environment is this lab's ``slurm.conf``. Only the
session holding the lab's lock calls :func:`stop_stray_controllers`, so any such process is not
this session's own test (those are stopped by their tests) but a leftover, or a controller a
developer attached by hand, which a test session must not share the partition with either.
Reading other processes' environments needs root, as the lab itself does.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path


def _fields(path: Path) -> list[str]:
    try:
        raw = path.read_bytes()
    except OSError:  # gone, or not ours to read
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def controllers_attached(conf_path: Path, proc: Path = Path("/proc")) -> Iterator[int]:
    """Pids of ``gpuplan slurm-controller`` processes whose ``SLURM_CONF`` is ``conf_path``."""
    wanted = f"SLURM_CONF={conf_path}"
    me = os.getpid()
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        argv = _fields(entry / "cmdline")
        if "slurm-controller" not in argv or not any("gpuplan" in arg for arg in argv):
            continue
        if wanted in _fields(entry / "environ"):
            yield int(entry.name)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def stop_stray_controllers(conf_path: Path, timeout_s: float = 60.0) -> list[int]:
    """SIGKILL every controller attached to the lab of ``conf_path``; wait (polling, bounded)
    until each is gone. Returns the pids stopped, so the caller can say so."""
    pids = sorted(controllers_attached(conf_path))
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + timeout_s
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            left = [pid for pid in pids if _alive(pid)]
            raise RuntimeError(f"stray controllers {left} still alive after SIGKILL")
        time.sleep(0.05)
    return pids
