"""The sidecar's files and processes: atomic JSON state, the event log, ``/proc`` liveness.

Why apart: everything the sidecar knows lives in files (``spec``, ``control``, ``state``,
``events.jsonl``) so that an engine that restarts can reconcile by reading them, and every part
of the program (the daemon, the client commands, the agent) reads and writes them the same way:
atomically, tolerating a missing or half-written file, and telling a live process from a zombie
or a reused PID. Stdlib-only, like the whole package (it is shipped to nodes as one script).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

PROTOCOL = 1
"""Version of the files and requests the engine and the sidecars exchange."""
ACK_POLL_S = 0.02
"""How often a waiting side (a client for an ack, the daemon for an exit) looks again."""


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_json(path: Path | str) -> Any:
    """Parsed JSON, or None when the file is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def append_event(path: Path, **event: Any) -> None:
    event.setdefault("t", time.time())
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(event) + "\n")


def parse_proc_stat(text: str) -> tuple[str, int]:
    """(state letter, start time in clock ticks) from a ``/proc/PID/stat`` line.

    The command name (field 2) is in parentheses and may itself contain spaces and ')', so
    split after the *last* ')'. Then field 3 is the state and field 22 the start time.
    """
    rest = text[text.rfind(")") + 2 :].split()
    return rest[0], int(rest[19])


def proc_info(pid: int) -> tuple[str, int] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            return parse_proc_stat(fh.read())
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int | None, start: int | None = None) -> bool:
    """Zombie-aware liveness: the PID exists, is not a zombie, and (if known) is the same
    process as before (same start time, so a reused PID is not mistaken for ours).

    ``kill -0`` is not enough: an orphan that died stays a zombie until PID 1 reaps it, and on
    some machines (containers, VMs with a minimal init) that takes a long time.
    """
    if not pid or pid <= 0:
        return False
    info = proc_info(pid)
    if info is None or info[0] in ("Z", "X", "x"):
        return False
    return start is None or info[1] == start


def touch(path: str | None) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8"):
            os.utime(path, None)
