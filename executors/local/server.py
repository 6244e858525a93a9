"""The single-server daemon (``gpuplan server``): the engine loop, the journal and the socket.

One process, two threads: the engine thread runs the policy over :class:`.LocalExecutor`
(online arrivals, plans, polls) and journals each job's state after every batch of events;
the socket thread answers ``submit`` (journaled first, then handed to the executor),
``cancel`` and ``status``. A restart (after SIGKILL, a reboot of the daemon, an upgrade) reads
the journal's unfinished jobs and the sidecars' files: a job found running where it ran is
adopted by the engine and executor before the first plan (no restart), one found completed is
journaled completed, every other one is resubmitted and resumes from its checkpoint.
SIGTERM/SIGINT end the daemon and leave the jobs running for the next start to adopt (the
sidecars fence them after ``lease_s`` without a server; docs/single-server.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.models import (
    ActiveJob,
    Cluster,
    Elasticity,
    InputError,
    JobArrival,
    JobCompletion,
    JobFailure,
    JobSpec,
    MemoryProfile,
)
from gpuplan.models.cluster import Node
from gpuplan.solver_core.registry import make_policy

from ..engine import Engine
from ..pidlock import lock_with_pid
from ..ssh.executor import SshSettings
from ..ssh.launchers import safe_name
from .executor import NODE, JobCommand, LocalExecutor, ServerLauncher, allocation_of
from .gpus import ServerGpus
from .journal import JobRow, ServerJournal
from .statedir import JOURNAL_NAME, prepare_state_dir
from .wire import SocketServer

log = logging.getLogger(__name__)

PRUNE_EVERY_S = 3600.0
"""How often the engine thread looks for ended jobs to forget (:meth:`Server.prune`)."""

DEFAULT_DURATION_S = 3600.0
"""The engine's duration estimate for a job submitted without ``--work`` or ``--duration``."""


@dataclass(frozen=True)
class ServerOptions:
    state_dir: Path
    gpus: ServerGpus
    policy: str
    seed: int = 0
    poll_s: float = 0.5
    lease_s: float = 30.0
    ckpt_grace_s: float = 30.0
    restart_gate: bool = True
    """Drop planned changes that cost more than they gain (:mod:`..restart_gate`)."""
    keep_finished_s: float = 7 * 86400.0
    """How long an ended job stays in the journal and its files (checkpoints included) in the
    state dir; then :meth:`Server.prune` removes both."""


def spec_of(row: JobRow) -> JobSpec:
    """The engine's job spec for a journaled job. A job submitted with ``--memory`` or
    ``--compute`` carries an OJPP memory profile (a steady footprint: no variable peak), which
    makes it co-locatable under an OJPP policy (``fifo-ojpp``, ``ojpp-paper``); the others
    hold whole GPUs."""
    elastic = row.min_gpus < row.max_gpus
    profile = None
    if row.memory is not None or row.compute is not None:
        profile = MemoryProfile(
            gamma=row.memory if row.memory is not None else 0.0,
            delta=0.0,
            p=0.0,
            compute=row.compute if row.compute is not None else 1.0,
        )
    return JobSpec(
        id=row.id,
        submit_time=max(0.0, row.submit_time),
        requested_gpus=row.gpus,
        elasticity=Elasticity(min_gpus=row.min_gpus, max_gpus=row.max_gpus) if elastic else None,
        total_iterations=row.work,
        duration=None if row.work is not None else (row.duration or DEFAULT_DURATION_S),
        model=row.name or None,
        memory=profile,
    )


def _fraction(value: Any, flag: str) -> float | None:
    """A fraction of one GPU, ``(0, 1]``, or None when not given (checked here too: the
    socket is the boundary, whatever client sent it)."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{value!r}: not a number", field=flag) from None
    if not 0.0 < number <= 1.0:  # NaN fails too
        raise InputError(f"{value!r}: a fraction of one GPU, in (0, 1]", field=flag)
    return number


def command_of(row: JobRow) -> JobCommand:
    return JobCommand(tuple(row.argv), row.cwd, dict(row.env), protocol=row.work is not None)


class Server:
    """The daemon's state (see the module docstring). :meth:`run` blocks until stopped."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.state_dir = prepare_state_dir(options.state_dir)
        self._lock_fh = open(self.state_dir / "server.lock", "a+", encoding="utf-8")  # noqa: SIM115
        if not lock_with_pid(self._lock_fh, timeout_s=0.0):
            self._lock_fh.seek(0)
            holder = self._lock_fh.read().strip() or "?"
            raise InputError(
                f"a gpuplan server (pid {holder}) already runs here",
                source=str(self.state_dir),
                field="state_dir",
            )
        self.policy = make_policy(options.policy, options.seed)
        self.journal = ServerJournal(self.state_dir / JOURNAL_NAME)
        gpus = options.gpus
        self.cluster = Cluster(nodes=[Node(name=NODE, gpus=gpus.count, gpu_type=gpus.gpu_type)])
        self.launcher = ServerLauncher(self.state_dir / "jobs")
        settings = SshSettings(
            known_hosts="",
            client_keys=(),
            run_root=str(self.state_dir / "runs"),
            remote_python=sys.executable,
            poll_interval_s=options.poll_s,
            lease_s=options.lease_s,
            ckpt_grace_s=options.ckpt_grace_s,
            inventory_interval_s=gpus.inventory_interval_s,
        )
        self.executor = LocalExecutor(
            self.cluster,
            self.launcher,
            settings,
            state_dir=self.state_dir,
            bind=gpus.bind,
        )
        self.engine = Engine(
            self.cluster,
            self.policy,
            self.executor,
            restart_gate="auto" if options.restart_gate else None,
        )
        self._submit_lock = threading.Lock()
        self.socket: SocketServer | None = None

    # ------------------------------------------------------------------ socket thread
    def handle(self, cmd: str, args: dict[str, Any]) -> Any:
        if cmd == "submit":
            return self._submit(args)
        if cmd == "cancel":
            return self._cancel(str(args.get("id")))
        if cmd == "status":
            return self.status()
        raise ValueError(f"unknown request {cmd!r}")

    def _submit(self, args: dict[str, Any]) -> dict[str, Any]:
        have = self.cluster.nodes[0].gpus
        argv = args.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise InputError("no command to run (gpuplan submit ... -- CMD ...)", field="command")
        if any("\0" in a for a in argv):
            raise InputError("NUL characters cannot be passed to a process", field="command")
        env = args.get("env") or {}
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and "\0" not in k + v for k, v in env.items()
        ):
            raise InputError("malformed environment", field="env")
        gpus = int(args.get("gpus", 0))
        lo = int(args.get("min_gpus") or gpus)
        hi = int(args.get("max_gpus") or gpus)
        if gpus < 1:
            raise InputError(f"{gpus}: at least 1 GPU", field="--gpus")
        if lo > hi:
            raise InputError(f"--min {lo} is more than --max {hi}", field="--min")
        if not lo <= gpus <= hi:
            raise InputError(f"--gpus {gpus} is outside [--min {lo}, --max {hi}]", field="--gpus")
        if lo > have:
            raise InputError(
                f"{lo} GPU(s) asked for, this server has {have}",
                field="--min" if lo != gpus else "--gpus",
            )
        hi, gpus = min(hi, have), min(gpus, have)
        work = args.get("work")
        duration = args.get("duration")
        share = {k: _fraction(args.get(k), f"--{k}") for k in ("memory", "compute")}
        with self._submit_lock:
            row = self.journal.add(
                name=str(args.get("name") or ""),
                argv=argv,
                cwd=str(args.get("cwd") or "/"),
                env=env,
                gpus=gpus,
                min_gpus=lo,
                max_gpus=hi,
                work=None if work is None else float(work),
                duration=None if duration is None else float(duration),
                submit_time=self.executor.now(),
                **share,
            )
            try:
                spec = spec_of(row)
            except ValueError as err:
                self.journal.update(row.id, state="rejected", reason=str(err)[:300])
                raise InputError(" ".join(str(err).split())[:300], field="job") from None
            self.executor.submit(spec, command_of(row))
        return {"id": row.id}

    def _cancel(self, job_id: str) -> dict[str, Any]:
        row = self.journal.get(job_id)
        if row is None:
            raise InputError(f"no job {job_id!r} on this server", field="job")
        if row.state in ("completed", "failed", "cancelled", "rejected"):
            raise InputError(f"job {job_id} has already ended ({row.state})", field="job")
        self.journal.update(job_id, cancel_requested=1)
        self.executor.cancel(job_id)
        return {"id": job_id, "state": "cancelling"}

    def status(self) -> dict[str, Any]:
        return {
            "server": {
                "pid": os.getpid(),
                "policy": self.options.policy,
                "gpus": self.cluster.nodes[0].gpus,
                "devices": self.options.gpus.describe(),
                "state_dir": str(self.state_dir),
                "adopted": sorted(self.executor.adopted),
            },
            "jobs": [self._live(r.public()) for r in self.journal.all()],
        }

    def _live(self, row: dict[str, Any]) -> dict[str, Any]:
        """A running job's progress as last measured (the journal has it as of the last
        event batch; the executor re-anchors it at every poll)."""
        job = self.engine.running.get(row["id"])
        if job is not None and row["state"] == "running":
            row["done"] = float(job.done)
        return row

    # ------------------------------------------------------------------ engine thread
    def prune(self, now: float) -> list[str]:
        """Forget jobs that ended more than ``keep_finished_s`` ago: their journal rows and
        their files (``jobs/ID.*``: progress, checkpoint, segment log, a protocol job's own
        model checkpoint beside them; ``runs/ID@local``: the sidecar's folder). Without this a
        long-lived server keeps every job's environment and checkpoints forever."""
        ids = self.journal.prune(now - self.options.keep_finished_s)
        jobs, runs = self.state_dir / "jobs", self.state_dir / "runs"
        for job_id in ids:
            stem = safe_name(job_id)
            for path in [*jobs.glob(f"{stem}.*"), *jobs.glob(f".{stem}.*")]:
                with contextlib.suppress(OSError):
                    if path.is_file() and not path.is_symlink():
                        path.unlink()
            sidecar = runs / f"{stem}@{NODE}"
            if sidecar.is_dir() and not sidecar.is_symlink():
                shutil.rmtree(sidecar, ignore_errors=True)
        if ids:
            keep = self.options.keep_finished_s
            log.info("pruned %d job(s) that ended over %.0f s ago", len(ids), keep)
        return ids

    def _recover(self) -> None:
        """Adopt or resubmit the journal's unfinished jobs (module docstring)."""
        rows = self.journal.unfinished()
        if not rows:
            return
        found = self.executor.found_at_start()
        now = self.executor.now()
        adopted: list[str] = []
        for row in rows:
            self.launcher.commands[row.id] = command_of(row)
            kind, placement = found.get(row.id, (None, {}))
            if kind == "completed":
                self.executor.forget_found(row.id)
                self.journal.update(row.id, state="completed", end_time=now, done=row.work or 0)
                continue
            spec = spec_of(row)
            if kind == "running":
                job = ActiveJob(spec=spec, anchor_time=now, resume_time=now, pending_since=now)
                try:
                    self.engine.adopt(job, allocation_of(row.id, placement))
                except RuntimeError as err:
                    log.warning("job %s found running but not adoptable: %s", row.id, err)
                else:
                    self.executor.adopt(job)
                    adopted.append(row.id)
                    log.info("adopted job %s running on GPUs %s", row.id, placement)
                    if row.cancel_requested:
                        self.executor.cancel(row.id)
                    continue
            self.executor.submit(spec, command_of(row))
            if row.cancel_requested:
                self.executor.cancel(row.id)
        if adopted and self.engine.restart_gate is not None:
            # As the Slurm controller does: the dwell clocks of the run before are gone, and a
            # policy that re-divides GPUs at every event would otherwise resize an adopted job
            # in the first plan, so a server restart would stop a running job.
            self.engine.restart_gate.hold(adopted, now)

    def _journal_batch(self, now: float, events: list[Any]) -> None:
        for event in events:
            if isinstance(event, JobCompletion):
                row = self.journal.get(event.job_id)
                done = (row.work or 0.0) if row is not None else 0.0
                self.journal.update(
                    event.job_id, state="completed", end_time=now, placement="", done=done
                )
            elif isinstance(event, JobFailure):
                state = "cancelled" if event.reason == "cancelled" else "failed"
                self.journal.update(
                    event.job_id, state=state, end_time=now, reason=event.reason[:300], placement=""
                )
        rejected = dict(self.engine.recorder.rejected)
        for event in events:
            if isinstance(event, JobArrival) and event.job.id in rejected:
                self.journal.update(
                    event.job.id, state="rejected", reason=str(rejected[event.job.id])[:300]
                )
        for job in self.engine.running.values():
            placement = (
                ";".join(
                    f"{n}:{','.join(map(str, g))}" for n, g in job.allocation.placement.items()
                )
                if job.allocation
                else ""
            )
            row = self.journal.get(job.id)
            if row is None:
                continue
            fields: dict[str, Any] = {"state": "running", "placement": placement, "gpus": job.gpus}
            fields["done"] = float(job.done)
            if row.start_time is None:
                fields["start_time"] = now
            self.journal.update(job.id, **fields)
        for job in self.engine.pending.values():
            self.journal.update(job.id, state="pending", placement="", done=float(job.done))

    def run(self) -> None:
        """Serve until SIGTERM/SIGINT (or :meth:`stop`); jobs keep running afterwards."""
        self._recover()
        self.socket = SocketServer(self.state_dir, self.handle)
        self.socket.start()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
        log.info(
            "gpuplan server: %d GPU(s) (%s), policy %s, state %s",
            self.cluster.nodes[0].gpus,
            self.options.gpus.describe(),
            self.options.policy,
            self.state_dir,
        )
        print(f"gpuplan server ready: {self.socket.path}", flush=True)
        next_prune = self.executor.now()
        try:
            while True:
                batch = self.executor.next_events()
                if batch is None:
                    break
                now, events = batch
                self.engine.handle(now, events)
                self._journal_batch(now, events)
                if now >= next_prune:
                    self.prune(now)
                    next_prune = now + PRUNE_EVERY_S
        finally:
            self.socket.close()
            self.executor.detach()
            self._lock_fh.close()

    def stop(self) -> None:
        """End the loop at its next step (any thread)."""
        self.executor.end_run()
