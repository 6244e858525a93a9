"""An exclusive ``flock`` that records its holder's PID: one writer per journal, one test session
per Slurm lab. Waiting is bounded; what a timeout means is the caller's to say."""

from __future__ import annotations

import fcntl
import os
import time
from typing import IO


def lock_with_pid(fh: IO[str], timeout_s: float, poll_s: float = 0.2) -> bool:
    """Take an exclusive lock on ``fh`` within ``timeout_s`` and write this process's PID into
    it (so the next contender can name the holder). False, with nothing written, on timeout.
    The lock lasts until ``fh`` is closed or the process dies."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return True
