"""The client commands: ``launch``, ``control``, ``status``, ``read``, ``kill``.

Why apart from the daemon: these run in short-lived processes (the agent's request threads, or
one SSH exec each) and only read and write a job directory's files and signal its sidecar; the
daemon they start or talk to is :class:`~.sidecar.Sidecar`. Every command is idempotent and
answers one JSON document, so an engine that retries after a lost connection is safe.
Stdlib-only, like the whole package.
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .files import ACK_POLL_S, PROTOCOL, pid_alive, read_json, write_json_atomic


def _serve_argv(jobdir: Path) -> list[str]:
    """How to start the daemon for ``jobdir`` as its own program.

    Shipped (one script, run by path: no ``__package__``), the script itself runs it, as it
    always did. Imported as the package (the engine host: a test, a local tool), ``__file__`` is
    one module of it, so the package runs with ``-m``; ``-P`` keeps the current directory off
    ``sys.path``, so a directory others can write never supplies the daemon's code.
    """
    if __package__:
        return [sys.executable, "-P", "-m", __package__, "serve", str(jobdir)]
    return [sys.executable, os.path.abspath(__file__), "serve", str(jobdir)]


def _wait_ack(
    jobdir: Path, seq: int, wait: float, spawned: subprocess.Popen[bytes] | None = None
) -> dict[str, Any]:
    """Wait until the sidecar acknowledges control ``seq``, dies, or ``wait`` runs out.

    ``spawned``: a sidecar this process just started; until it writes its own state its
    liveness comes from ``poll()`` (it is our child, so no zombie confusion).
    """
    deadline = time.monotonic() + wait
    while True:
        state = read_json(jobdir / "state.json") or {}
        if spawned is not None and not state.get("sidecar_pid"):
            alive = spawned.poll() is None
        else:
            alive = pid_alive(state.get("sidecar_pid"), state.get("sidecar_start"))
        acked = int(state.get("seq", -1)) >= seq
        if acked or not alive or time.monotonic() >= deadline:
            if not acked and not alive:  # it may have written its last state and exited
                state = read_json(jobdir / "state.json") or state
                acked = int(state.get("seq", -1)) >= seq
            return {"ok": acked, "alive": alive, "state": state}
        time.sleep(ACK_POLL_S)


def cmd_launch(jobdir: Path, bundle: dict[str, Any], wait: float) -> dict[str, Any]:
    """Start a sidecar for ``jobdir`` with ``bundle = {"spec", "control"}`` (idempotent)."""
    jobdir.mkdir(parents=True, exist_ok=True)
    state = read_json(jobdir / "state.json") or {}
    control = bundle["control"]
    if pid_alive(state.get("sidecar_pid"), state.get("sidecar_start")):
        # A sidecar already serves this dir: just hand it the new control.
        return cmd_control(jobdir, control, wait)
    write_json_atomic(jobdir / "spec.json", bundle["spec"])
    write_json_atomic(jobdir / "control.json", control)
    write_json_atomic(
        jobdir / "state.json",
        {"phase": "launching", "seq": -1, "job_id": bundle["spec"].get("job_id")},
    )
    with open(jobdir / "sidecar.log", "ab") as log:
        # Own session: the sidecar outlives this command, the agent and the SSH connection.
        spawned = subprocess.Popen(
            _serve_argv(jobdir),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    return _wait_ack(jobdir, int(control["seq"]), wait, spawned)


def cmd_control(jobdir: Path, control: dict[str, Any], wait: float) -> dict[str, Any]:
    """Hand ``control`` to the sidecar of ``jobdir``, wake it and wait for its ack."""
    state = read_json(jobdir / "state.json") or {}
    if not pid_alive(state.get("sidecar_pid"), state.get("sidecar_start")):
        return {"ok": False, "alive": False, "state": state}
    write_json_atomic(jobdir / "control.json", control)
    with contextlib.suppress(ProcessLookupError):
        os.kill(int(state["sidecar_pid"]), signal.SIGHUP)
    return _wait_ack(jobdir, int(control["seq"]), wait)


def _file_view(files: dict[str, str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for role, path in (files or {}).items():
        out[role] = os.path.exists(path) if role == "done" else read_json(path)
    return out


def cmd_status(root: Path) -> dict[str, Any]:
    """Every job dir under ``root``: spec, control, state, zombie-aware liveness, job files."""
    jobs = []
    if root.is_dir():
        for entry in sorted(root.iterdir()):
            spec = read_json(entry / "spec.json") if entry.is_dir() else None
            if not isinstance(spec, dict):
                continue
            state = read_json(entry / "state.json") or {}
            control = read_json(entry / "control.json") or {}
            jobs.append(
                {
                    "dir": str(entry),
                    "spec": spec,
                    "control": {
                        k: control.get(k)
                        for k in ("seq", "action", "gen", "rank", "nranks", "gpus", "files")
                    },
                    "state": state,
                    "sidecar_alive": pid_alive(
                        state.get("sidecar_pid"), state.get("sidecar_start")
                    ),
                    "child_alive": pid_alive(state.get("child_pid"), state.get("child_start")),
                    "files": _file_view(control.get("files")),
                }
            )
    return {"protocol": PROTOCOL, "time": time.time(), "jobs": jobs}


def cmd_read(paths: list[str], patterns: bool) -> dict[str, Any]:
    if patterns:
        paths = [m for p in paths for m in sorted(glob.glob(p))]
    return {"files": {p: read_json(p) for p in paths}}


def cmd_kill(jobdir: Path, wait: float) -> dict[str, Any]:
    """Clean up a dir whose sidecar is gone or stuck: SIGKILL the sidecar, then give its job
    the checkpoint signal and ``wait`` seconds (zombie-aware: an orphan that exited counts as
    gone even before PID 1 reaps it), then SIGKILL the job's process group."""
    state = read_json(jobdir / "state.json") or {}
    spec = read_json(jobdir / "spec.json") or {}
    killed: list[int] = []
    sidecar = state.get("sidecar_pid")
    if pid_alive(sidecar, state.get("sidecar_start")):
        with contextlib.suppress(OSError):
            os.kill(int(sidecar), signal.SIGKILL)
            killed.append(int(sidecar))
    child, child_start = state.get("child_pid"), state.get("child_start")
    if pid_alive(child, child_start):
        with contextlib.suppress(OSError):
            os.kill(int(child), getattr(signal, spec.get("checkpoint_signal", "SIGUSR1")))
        deadline = time.monotonic() + wait
        while pid_alive(child, child_start) and time.monotonic() < deadline:
            time.sleep(ACK_POLL_S)
        with contextlib.suppress(OSError):
            os.killpg(int(child), signal.SIGKILL)
        killed.append(int(child))
    return {"ok": True, "killed": killed}
