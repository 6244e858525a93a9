"""The sidecar daemon (``serve``): one per job and node, the training process's parent.

Why a wrapper (SideCar paper, 004 digest §4.4): changing a job's GPUs means checkpoint, stop,
change ``CUDA_VISIBLE_DEVICES``, restart. Doing that from the engine over SSH for every step
would make the engine the parent of nothing and the owner of every race. The sidecar is the
training process's parent on the node: it starts the command in its own process group with the
planned GPUs, reaps it (so its exit code is known and it never lingers as a zombie), turns a stop
request into "checkpoint signal -> wait -> SIGTERM the group -> SIGKILL the group", and restarts
it on a new GPU set while the wrapper itself stays. It acts on ``control.json`` and reports in
``state.json`` and ``events.jsonl`` (the package docstring describes the files, the signals and
the lease). Stdlib-only, like the whole package.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from .files import ACK_POLL_S, PROTOCOL, append_event, proc_info, read_json, write_json_atomic

LOOP_S = 0.2
"""Longest sleep of the daemon's loop between two looks at its child, control and lease (a
signal, such as the ``control`` command's SIGHUP, wakes it at once)."""
HISTORY = 20
"""How many stops and resizes ``state.json`` keeps."""


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
