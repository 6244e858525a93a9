"""SideCar: the per-job, per-node wrapper that stops and restarts a training process on request.

Why a wrapper (SideCar paper, 004 digest §4.4): changing a job's GPUs means checkpoint, stop,
change ``CUDA_VISIBLE_DEVICES``, restart. Doing that from the engine over SSH for every step
would make the engine the parent of nothing and the owner of every race. The sidecar is the
training process's parent on the node: it starts the command in its own process group with the
planned GPUs, reaps it (so its exit code is known and it never lingers as a zombie), turns a stop
request into "checkpoint signal -> wait -> SIGTERM the group -> SIGKILL the group", and restarts
it on a new GPU set while the wrapper itself stays. Everything it knows is in files, so an engine
that restarts can reconcile by reading them.

This file is **stdlib-only and self-contained**: the SSH executor uploads it to each node and runs
it with the node's ``python3``; nothing of gpuplan needs to be installed there.

Per job and node there is one directory ``DIR`` (under the executor's run root):

``spec.json``     static: job id, node, lease file and its timeout, grace periods.
``control.json``  desired state, written by the engine: ``{"seq", "action": run|stop|exit,
                  "in_place", "gen", "rank", "nranks", "gpus", "devices", "argv", "env", "cwd",
                  "files"}``; ``devices`` (GPU UUIDs, when the engine knows them) is what
                  ``CUDA_VISIBLE_DEVICES`` gets, else the ``gpus`` indices.
``state.json``    actual state, written by the sidecar (atomic): ``phase`` (idle, running,
                  stopping, stopped, completed, failed, fenced, exited), ``seq`` = the last
                  control it finished applying (the ack), sidecar and child PIDs with their
                  ``/proc`` start times, GPUs, exit code, restart count, last stop timings.
``events.jsonl``  append-only history: child start/exit (with GPUs and times), stop requests,
                  fencing. Tests use it to prove no GPU ever ran two jobs at once.
``train.log``     the training command's stdout+stderr.
``resize.json``   ``{"gpus"}``: the GPU set of an in-place resize (a ``run`` control with
                  ``in_place: true`` and only ``gpus``, ``gen``, ``rank``, ``files``), read by
                  the training process on SIGUSR2 (``$GPUPLAN_RESIZE_FILE``). Not acknowledged
                  within the checkpoint grace: the sidecar checkpoint-restarts the run on the
                  new GPUs instead. The state's ``resizes`` history has each request's times.

A stop is requested by writing ``control.json`` (the ``control`` subcommand also sends SIGHUP to
wake the sidecar) or by a signal to the sidecar: SIGUSR1 = checkpoint-stop the job and stay,
SIGTERM/SIGINT = checkpoint-stop and exit. A child that exits after a stop request has stopped
(whatever its code); one that exits on its own with 0 has completed (the sidecar then exits);
any other exit is a failure (the sidecar stays and waits for a restart or exit order).

**Lease (fencing).** Every engine command touches ``<root>/.lease``. If it is older than
``lease_s``, the engine has lost this node (network, sshd, engine crash): the sidecar
checkpoint-stops its job and exits with phase ``fenced``. The engine reports the node failed only
after ``lease_s`` plus the stop grace times, so when it restarts the job elsewhere the old copy has
checkpointed and stopped — a job never runs twice and nothing is lost beyond the checkpoint.

Subcommands (all print one JSON document)::

    sidecar.py agent   [--lease F]                  # JSON-lines RPC on stdin/stdout (below)
                                                    # (+ "inventory": raw NVML answers)
    sidecar.py launch  DIR [--lease F] [--wait S]   # stdin {"spec", "control"}; start the daemon
    sidecar.py control DIR [--lease F] [--wait S]   # stdin: control; wake the daemon; wait for ack
    sidecar.py status  ROOT [--lease F]             # every job dir under ROOT, liveness, files
    sidecar.py read    PATH... [--glob]             # JSON files (checkpoints) by path/pattern
    sidecar.py kill    DIR [--wait S]               # clean up a dead/stuck sidecar and its job
    sidecar.py serve   DIR                          # the daemon itself (started by launch)

The engine normally keeps one ``agent`` per node on one SSH channel and sends it requests
``{"id", "cmd", "args"}`` (the same commands as above, arguments as JSON); it answers
``{"id", "ok", "result" | "error"}``. That avoids one SSH exec — and the remote login shell's
start-up — per operation.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import glob
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

PROTOCOL = 1
LOOP_S = 0.2
ACK_POLL_S = 0.02
HISTORY = 20

# --------------------------------------------------------------------------- small helpers


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


# --------------------------------------------------------------------------- the daemon


class Sidecar:
    """The wrapper process for one job on one node (``serve``)."""

    def __init__(self, jobdir: Path) -> None:
        self.dir = jobdir
        self.spec = read_json(jobdir / "spec.json") or {}
        self.events = jobdir / "events.jsonl"
        self.proc: subprocess.Popen[bytes] | None = None
        self.child_start: int | None = None
        self.applied: dict[str, Any] = {}
        self.pending_signals: list[int] = []
        me = proc_info(os.getpid())
        self.state: dict[str, Any] = {
            "protocol": PROTOCOL,
            "job_id": self.spec.get("job_id"),
            "node": self.spec.get("node"),
            "sidecar_pid": os.getpid(),
            "sidecar_start": me[1] if me else None,
            "phase": "idle",
            "seq": -1,
            "gen": None,
            "rank": None,
            "gpus": [],
            "child_pid": None,
            "child_start": None,
            "child_started_at": None,
            "exit_code": None,
            "launches": 0,
            "stops": [],
            "error": None,
            "reason": None,
        }

    # ---------------------------------------------------------------- state
    def save(self, **changes: Any) -> None:
        self.state.update(changes)
        self.state["updated"] = time.time()
        write_json_atomic(self.dir / "state.json", self.state)

    def child_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # ---------------------------------------------------------------- child control
    def start_child(self, control: dict[str, Any]) -> None:
        gpus = [str(g) for g in control.get("gpus", [])]
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (control.get("env") or {}).items()})
        # GPU UUIDs when the engine knows them (``devices``), the planned indices otherwise.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in control.get("devices") or gpus)
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env["GPUPLAN_RESIZE_FILE"] = str(self.dir / "resize.json")
        argv = [str(a) for a in control["argv"]]
        # Record which run this is before trying, so a failed start is attributed to it.
        self.state.update(
            gen=control.get("gen"), rank=control.get("rank"), gpus=control.get("gpus", [])
        )
        try:
            with open(self.dir / "train.log", "ab") as log:
                # start_new_session: the job leads its own session and process group
                # (PID == PGID), so the whole group can be signalled and nothing the job
                # starts outlives a stop.
                self.proc = subprocess.Popen(
                    argv,
                    env=env,
                    cwd=control.get("cwd") or str(self.dir),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                )
        except (OSError, ValueError) as exc:
            self.proc = None
            append_event(self.events, event="start_failed", error=str(exc))
            self.save(
                phase="failed",
                exit_code=127,
                error=f"cannot start {argv[:1]}: {exc}",
                child_pid=None,
                child_start=None,
            )
            return
        info = proc_info(self.proc.pid)
        self.child_start = info[1] if info else None
        started = time.time()
        append_event(
            self.events,
            t=started,
            event="start",
            pid=self.proc.pid,
            gpus=control.get("gpus", []),
            gen=control.get("gen"),
            rank=control.get("rank"),
            node=self.spec.get("node"),
        )
        self.save(
            phase="running",
            gpus=control.get("gpus", []),
            gen=control.get("gen"),
            rank=control.get("rank"),
            child_pid=self.proc.pid,
            child_start=self.child_start,
            child_started_at=started,
            exit_code=None,
            error=None,
            launches=self.state["launches"] + 1,
            reason=None,
        )

    def _wait_exit(self, timeout: float) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return True
            time.sleep(ACK_POLL_S)
        return self.proc.poll() is not None

    def _killpg(self, pgid: int, sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except OSError as exc:
            if exc.errno not in (errno.ESRCH, errno.EPERM):
                raise

    def stop_child(self, reason: str) -> None:
        """Checkpoint signal to the job, wait; then SIGTERM, then SIGKILL to its group."""
        if self.proc is None:
            return
        proc = self.proc
        pgid = proc.pid
        t_req = time.time()
        how = "exited"
        if proc.poll() is None:
            self.save(phase="stopping", reason=reason)
            sig_name = self.spec.get("checkpoint_signal", "SIGUSR1")
            append_event(
                self.events,
                t=t_req,
                event="stop_request",
                pid=proc.pid,
                reason=reason,
                signal=sig_name,
            )
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(getattr(signal, sig_name))
            how = "checkpoint"
            if not self._wait_exit(float(self.spec.get("ckpt_grace_s", 30.0))):
                how = "term"
                self._killpg(pgid, signal.SIGTERM)
                if not self._wait_exit(float(self.spec.get("term_grace_s", 5.0))):
                    how = "kill"
                    self._killpg(pgid, signal.SIGKILL)
                    proc.wait()
        rc = proc.wait()
        self._killpg(pgid, signal.SIGKILL)  # leftovers of the group (the job's own children)
        t_exit = time.time()
        append_event(
            self.events,
            t=t_exit,
            event="exit",
            pid=pgid,
            rc=rc,
            requested=True,
            how=how,
            gpus=self.state.get("gpus"),
            node=self.spec.get("node"),
        )
        stops = (
            [
                *self.state["stops"],
                {"t_request": t_req, "t_exit": t_exit, "how": how, "rc": rc, "reason": reason},
            ]
        )[-HISTORY:]
        self.proc = None
        self.save(
            phase="stopped",
            exit_code=rc,
            stops=stops,
            child_pid=None,
            child_start=None,
            reason=reason,
        )

    def resize_child(self, control: dict[str, Any]) -> bool:
        """In-place resize (EDL stop-free scaling): name the new GPU set in ``resize.json``,
        send the training process SIGUSR2, and wait (up to the checkpoint grace) until its
        progress file reports the new GPU count from the same PID. True when acknowledged;
        otherwise the GPUs recorded here are unchanged and :meth:`apply` falls back to a
        checkpoint-restart on the new GPUs."""
        gpus = list(control.get("gpus", []))
        before = list(self.state.get("gpus") or [])
        progress = (self.applied.get("files") or {}).get("progress")
        t_req = time.time()
        ok = False
        deadline = time.monotonic() + float(self.spec.get("ckpt_grace_s", 30.0))
        if self.proc is not None and progress:
            # A process still starting has no SIGUSR2 handler yet (the default action would
            # kill it): signal only once it has reported progress, i.e. runs its main loop.
            while (
                time.monotonic() < deadline
                and self.proc.poll() is None
                and (read_json(progress) or {}).get("pid") != self.proc.pid
            ):
                time.sleep(ACK_POLL_S)
        if self.proc is not None and self.proc.poll() is None and progress:
            names = [str(d) for d in control.get("devices") or gpus]
            write_json_atomic(self.dir / "resize.json", {"gpus": names, "seq": control.get("seq")})
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGUSR2)
            while time.monotonic() < deadline and self.proc.poll() is None:
                report = read_json(progress)
                if (
                    isinstance(report, dict)
                    and report.get("pid") == self.proc.pid
                    and report.get("gpus") == len(gpus)
                    and float(report.get("time", 0.0)) >= t_req
                ):
                    ok = True
                    break
                time.sleep(ACK_POLL_S)
        t_ack = time.time()
        record = {
            "t_request": t_req,
            "t_ack": t_ack,
            "before": before,
            "after": gpus,
            "ok": ok,
            "seq": control.get("seq"),
        }
        append_event(
            self.events,
            t=t_ack,
            event="resize",
            pid=self.state.get("child_pid"),
            node=self.spec.get("node"),
            **{k: v for k, v in record.items() if k != "seq"},
        )
        resizes = [*(self.state.get("resizes") or []), record][-HISTORY:]
        if ok:
            self.applied = {**self.applied, "gpus": gpus}
            self.save(gpus=gpus, resizes=resizes)
        else:
            self.save(resizes=resizes)
        return ok

    def reap(self) -> bool:
        """Handle an exit nobody asked for. True when the sidecar should end (completion)."""
        if self.proc is None or self.proc.poll() is None:
            return False
        rc = self.proc.returncode
        pgid = self.proc.pid
        self._killpg(pgid, signal.SIGKILL)
        self.proc = None
        append_event(
            self.events,
            event="exit",
            pid=pgid,
            rc=rc,
            requested=False,
            gpus=self.state.get("gpus"),
            node=self.spec.get("node"),
        )
        if rc == 0:
            self.save(phase="completed", exit_code=0, child_pid=None, child_start=None)
            return True
        self.save(
            phase="failed",
            exit_code=rc,
            child_pid=None,
            child_start=None,
            error=f"training process exited with {rc}",
        )
        return False

    # ---------------------------------------------------------------- control
    @staticmethod
    def _same_run(a: dict[str, Any], b: dict[str, Any]) -> bool:
        keys = ("gpus", "devices", "argv", "env", "cwd", "gen")
        return all(a.get(k) == b.get(k) for k in keys)

    def apply(self, control: dict[str, Any]) -> bool:
        """Carry out one control document. True when the sidecar should end."""
        action = control.get("action")
        end = False
        if action == "run" and control.get("in_place"):
            # Same run, new GPUs: only gpus/gen/rank/files come; the rest is the current run's.
            control = {**self.applied, **control}
            same_gen = self.applied.get("gen") == control.get("gen")
            if not (self.child_running() and same_gen and self.resize_child(control)):
                if self.child_running():
                    self.stop_child("restart")  # the fallback: checkpoint-restart
                if control.get("argv"):
                    self.start_child(control)
                else:
                    self.save(phase="failed", error="in-place resize of no known run")
        elif action == "run":
            if self.child_running() and self._same_run(self.applied, control):
                pass
            else:
                if self.child_running():
                    self.stop_child("restart")
                self.start_child(control)
        elif action == "stop":
            self.stop_child("stop")
            if self.state["phase"] not in ("failed", "completed"):
                self.save(phase="stopped")
        elif action == "exit":
            self.stop_child("exit")
            self.save(phase="exited" if self.state["phase"] != "completed" else "completed")
            end = True
        else:
            self.save(error=f"unknown action {action!r}")
        self.applied = control
        self.save(seq=control.get("seq", -1))
        return end

    def lease_expired(self) -> bool:
        lease, limit = self.spec.get("lease_file"), float(self.spec.get("lease_s") or 0)
        if not lease or limit <= 0:
            return False
        try:
            age = time.time() - os.stat(lease).st_mtime
        except OSError:
            return True
        return age > limit

    # ---------------------------------------------------------------- loop
    def _on_signal(self, signum: int, _frame: object) -> None:
        self.pending_signals.append(signum)

    def serve(self) -> int:
        rfd, wfd = os.pipe()
        os.set_blocking(rfd, False)
        os.set_blocking(wfd, False)
        signal.set_wakeup_fd(wfd)
        for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        self.save()
        while True:
            while self.pending_signals:
                sig = self.pending_signals.pop(0)
                if sig == signal.SIGUSR1:
                    self.stop_child("signal")
                elif sig in (signal.SIGTERM, signal.SIGINT):
                    self.stop_child("signal")
                    self.save(phase="exited", reason="signal")
                    return 0
            if self.reap():
                return 0
            if self.lease_expired():
                append_event(self.events, event="fenced", pid=self.state.get("child_pid"))
                self.stop_child("fenced")
                self.save(phase="fenced", reason="lease expired")
                return 0
            control = read_json(self.dir / "control.json")
            if isinstance(control, dict) and int(control.get("seq", -1)) > self.state["seq"]:
                if self.apply(control):
                    return 0
                continue
            try:
                select.select([rfd], [], [], LOOP_S)
                while os.read(rfd, 512):
                    pass
            except (BlockingIOError, InterruptedError):
                pass


# --------------------------------------------------------------------------- client commands


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
            [sys.executable, os.path.abspath(__file__), "serve", str(jobdir)],
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


# --------------------------------------------------------------------------- NVML inventory
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
XID_KEEP_S = 600.0
"""How long an Xid critical event stays in the answers: the engine keeps the GPU out that long
after its last one (an Xid is an event, not a state NVML can be asked for)."""


class NvmlReader:
    """Raw NVML answers for every GPU of this node (the ``inventory`` request).

    Only gathers what NVML says, as plain JSON values (the engine turns them into records and a
    health verdict: ``gpuplan.executors.nvml.records``); this file stays stdlib-only, so
    nvidia-ml-py's ``pynvml`` is imported here only if the node has it, and a node without it,
    without the NVML library or without GPUs answers ``{"nvml": false, "reason"}``. One reader
    per agent process: it keeps an NVML event set open, so Xid critical errors that happen
    between two requests are drained at the next one and kept ``XID_KEEP_S`` seconds.
    """

    def __init__(self, nvml: Any = None) -> None:
        self._nvml = nvml
        self._ready = False
        self._events: Any = None
        self._xids: dict[str, list[dict[str, float]]] = {}
        self._lock = threading.Lock()

    def _start(self) -> str | None:
        """Import and initialise NVML once; the reason it is not usable, or None."""
        if self._ready:
            return None
        if self._nvml is None:
            try:
                import pynvml  # type: ignore[import-not-found]
            except ImportError:
                return "pynvml (nvidia-ml-py) is not installed on the node"
            self._nvml = pynvml
        try:
            self._nvml.nvmlInit()
        except Exception as exc:  # NVMLError: no library, no driver, no GPU
            return f"NVML not usable: {exc}"
        self._ready = True
        return None

    def _call(self, name: str, *args: Any) -> Any:
        """One NVML call; None when this GPU does not support it. A lost GPU raises."""
        fn = getattr(self._nvml, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            code = getattr(exc, "value", None)
            if code == NVML_ERROR_GPU_IS_LOST:
                raise
            return None

    def _drain_xids(self, handles: list[Any], now: float) -> None:
        nv = self._nvml
        if self._events is None:
            try:
                self._events = nv.nvmlEventSetCreate()
                for handle in handles:
                    with contextlib.suppress(Exception):  # not every GPU supports events
                        nv.nvmlDeviceRegisterEvents(
                            handle, nv.nvmlEventTypeXidCriticalError, self._events
                        )
            except Exception:
                self._events = False  # no events on this node: the other signals still count
        if self._events:
            wait = getattr(nv, "nvmlEventSetWait_v2", None) or nv.nvmlEventSetWait
            for _ in range(1000):
                try:
                    data = wait(self._events, 0)
                except Exception:
                    break  # NVML_ERROR_TIMEOUT: nothing (more) pending
                try:
                    uuid = _text(nv.nvmlDeviceGetUUID(data.device))
                except Exception:
                    uuid = "?"
                self._xids.setdefault(uuid, []).append({"xid": int(data.eventData), "time": now})
        for uuid in list(self._xids):
            kept = [x for x in self._xids[uuid] if now - x["time"] <= XID_KEEP_S]
            self._xids[uuid] = kept
            if not kept:
                del self._xids[uuid]

    def answers(self) -> dict[str, Any]:
        with self._lock:
            reason = self._start()
            if reason is not None:
                return {"nvml": False, "reason": reason}
            nv = self._nvml
            now = time.time()
            try:
                count = int(nv.nvmlDeviceGetCount())
                handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            except Exception as exc:
                return {"nvml": False, "reason": f"NVML device list failed: {exc}"}
            self._drain_xids(handles, now)
            gpus = [self._gpu(i, h) for i, h in enumerate(handles)]
            driver = self._call("nvmlSystemGetDriverVersion")
            return {
                "nvml": True,
                "time": now,
                "driver": _text(driver) if driver else None,
                "gpus": gpus,
            }

    def _gpu(self, index: int, handle: Any) -> dict[str, Any]:
        gpu: dict[str, Any] = {"index": index}
        try:
            gpu["uuid"] = _text(self._call("nvmlDeviceGetUUID", handle))
            gpu["name"] = _text(self._call("nvmlDeviceGetName", handle))
            memory = self._call("nvmlDeviceGetMemoryInfo", handle)
            gpu["memory_total"] = int(memory.total) if memory is not None else None
            mig = self._call("nvmlDeviceGetMigMode", handle)
            gpu["mig"] = [int(m) for m in mig] if mig is not None else None
            gpu["ecc_uncorrected_volatile"] = self._call(
                "nvmlDeviceGetTotalEccErrors", handle, 1, 0
            )  # UNCORRECTED, VOLATILE_ECC
            pages = self._call("nvmlDeviceGetRetiredPages", handle, 1)  # double-bit ECC
            gpu["retired_pages_dbe"] = len(pages) if pages is not None else None
            pending = self._call("nvmlDeviceGetRetiredPagesPendingStatus", handle)
            gpu["retired_pending"] = bool(pending) if pending is not None else None
            rows = self._call("nvmlDeviceGetRemappedRows", handle)
            gpu["remapped_rows"] = [int(r) for r in rows] if rows is not None else None
            gpu["throttle_reasons"] = self._call(
                "nvmlDeviceGetCurrentClocksThrottleReasons", handle
            )
        except Exception as exc:
            if getattr(exc, "value", None) != NVML_ERROR_GPU_IS_LOST:
                raise
            gpu["error"] = "GPU_IS_LOST"
        gpu["xids"] = list(self._xids.get(str(gpu.get("uuid")), []))
        return gpu


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


NVML = NvmlReader()


def dispatch(request: dict[str, Any], lease: str | None) -> dict[str, Any]:
    """Run one agent request ``{"cmd", "args"}``. Every request renews the node's lease."""
    touch(lease)
    cmd, args = request.get("cmd"), request.get("args") or {}
    wait = float(args.get("wait", 60.0))
    if cmd == "status":
        return cmd_status(Path(args["root"]))
    if cmd == "launch":
        return cmd_launch(Path(args["dir"]), args["bundle"], wait)
    if cmd == "control":
        return cmd_control(Path(args["dir"]), args["control"], wait)
    if cmd == "read":
        return cmd_read([str(p) for p in args["paths"]], bool(args.get("glob")))
    if cmd == "kill":
        return cmd_kill(Path(args["dir"]), wait)
    if cmd == "ping":
        return {"pid": os.getpid(), "time": time.time()}
    if cmd == "inventory":
        return NVML.answers()
    raise ValueError(f"unknown command {cmd!r}")


def serve_agent(lease: str | None) -> int:
    """JSON-lines request/response on stdin/stdout, one thread per request.

    One agent per node and engine connection replaces one SSH exec (fork, login shell, Python
    start-up) per operation. It holds no job state: it ends when its channel closes, and the
    sidecars it started live on in their own sessions.
    """
    lock = threading.Lock()

    def handle(request: dict[str, Any]) -> None:
        try:
            reply = {"id": request.get("id"), "ok": True, "result": dispatch(request, lease)}
        except Exception as exc:  # the agent must answer every request
            reply = {"id": request.get("id"), "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        with lock:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()

    while True:
        line = sys.stdin.readline()
        if not line:
            return 0
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:
            request = {"id": None, "cmd": "invalid", "args": {}, "error": str(exc)}
        threading.Thread(target=handle, args=(request,), daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sidecar.py")
    parser.add_argument(
        "command", choices=["agent", "launch", "control", "status", "read", "kill", "serve"]
    )
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--lease", default=None, help="touch this lease file first")
    parser.add_argument("--wait", type=float, default=60.0, help="seconds to wait for an ack")
    parser.add_argument("--glob", action="store_true", help="read: paths are glob patterns")
    args = parser.parse_args(argv)
    if args.command == "agent":
        return serve_agent(args.lease)
    if not args.paths:
        parser.error(f"{args.command} needs a path")
    first = Path(args.paths[0])
    if args.command == "serve":
        return Sidecar(first).serve()
    touch(args.lease)
    if args.command == "launch":
        out = cmd_launch(first, json.load(sys.stdin), args.wait)
    elif args.command == "control":
        out = cmd_control(first, json.load(sys.stdin), args.wait)
    elif args.command == "status":
        out = cmd_status(first)
    elif args.command == "read":
        out = cmd_read(args.paths, args.glob)
    else:
        out = cmd_kill(first, args.wait)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
