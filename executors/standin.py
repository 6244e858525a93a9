"""A stand-in training job: a progress counter that behaves like a resumable DL job, without a GPU.

Real executors (SSH, Slurm) must be tested end to end, and what they must get right is the
*protocol* of an elastic training job, not the maths: it sees its GPUs through
``CUDA_VISIBLE_DEVICES``, runs faster on more GPUs, checkpoints and exits when asked (SIGUSR1 or
SIGTERM, the SideCar / PyTorch-Lightning / submitit convention), resumes from its checkpoint, and
says when it is done. This module is exactly that, so tests can prove that progress survives
restarts and resizes. The command line is a contract other executors depend on::

    python -m gpuplan.executors.standin --job-id ID --work ITERS --rate-per-gpu R \\
        --state-dir DIR [--checkpoint-interval S] [--progress-interval S]

Files in ``DIR`` (all JSON files are replaced atomically, so a reader never sees half a file):

* ``ID.ckpt``     ``{"done": float}`` — the resume point; written on a stop signal, every
  ``--checkpoint-interval`` seconds, and at completion (then ``done == work``);
* ``ID.progress`` ``{"done", "gpus", "time", "pid", "started", "work"}`` — written at start and
  every ``--progress-interval`` seconds; ``time``/``started`` are wall-clock (``time.time()``);
* ``ID.done``     marker written at completion;
* ``ID.log``      one JSON line per *committed* run segment
  ``{"start", "end", "gpus", "pid", "reason", "t_start", "t_end"}``. A segment is committed when
  its end is checkpointed (stop signal, periodic checkpoint, completion), so the segments of all
  runs of one job tile ``[0, work]`` exactly: work lost in a crash (after the last checkpoint)
  never appears, and nothing appears twice. Tests sum them.

``--work`` is the target the counter runs to. An executor may raise it between runs (the SSH
executor splits a multi-node job's remaining work over per-rank stand-ins that way); a stale
``ID.done`` marker is removed when a run starts below its target.

**In-place resize** (EDL's stop-free scaling, for executors whose capabilities say
``resize == "in_place"``): SIGUSR2 asks the running process to switch to the GPU set named in
the JSON file ``$GPUPLAN_RESIZE_FILE`` (``{"gpus": [...]}``) without stopping. The segment so far
is committed (reason ``resize``), the rate becomes ``--rate-per-gpu`` x the new count, and a
progress file with the new ``gpus`` is written at once: that write is the acknowledgement the
sidecar waits for. A SIGUSR2 without a readable file is ignored (the executor then falls back to
a checkpoint-restart); files and command line are the same as without resizing.

Exit codes: 0 after completion or a stop signal, 2 for a usage error (no GPUs, bad arguments).
Stop signals get a process-wide handler from the first line of :func:`run` that only records
the signal and wakes the main loop (``signal.set_wakeup_fd``); the loop acts on it between two
consistent states, so a signal never interrupts a checkpoint half-written. (Not a per-thread
signal mask: importing ``gpuplan`` starts numpy's BLAS threads, and a signal delivered to a
thread that does not block it would take the default action and kill the process.) A signal
that arrives while the interpreter is still importing (before :func:`run`) kills the process
with the default action; nothing was done in that run, so nothing is lost.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
RESIZE_SIGNAL = signal.SIGUSR2
RESIZE_FILE_ENV = "GPUPLAN_RESIZE_FILE"
DEFAULT_PROGRESS_INTERVAL_S = 0.25


class UsageError(Exception):
    """Bad arguments or environment: exit 2 with a message, like argparse does."""


def gpu_count(cuda_visible_devices: str | None) -> int:
    """Number of GPUs in a ``CUDA_VISIBLE_DEVICES`` value (indices or UUIDs, comma separated).

    Unset or empty is an error rather than "zero GPUs": a training job started without GPUs is
    an executor bug that must be loud, not a job that silently never progresses.
    """
    if cuda_visible_devices is None:
        raise UsageError("CUDA_VISIBLE_DEVICES is not set")
    entries = [e.strip() for e in cuda_visible_devices.split(",")]
    if not cuda_visible_devices.strip() or any(not e for e in entries):
        raise UsageError(f"CUDA_VISIBLE_DEVICES={cuda_visible_devices!r} names no GPUs")
    return len(entries)


def check_job_id(job_id: str) -> str:
    """The job id becomes a file name in the state dir, so it must not escape that dir."""
    if not job_id or job_id in (".", "..") or "/" in job_id or "\0" in job_id:
        raise UsageError(f"--job-id {job_id!r} is not usable as a file name")
    return job_id


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` via a temporary file and ``os.replace`` (atomic on POSIX)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_checkpoint(path: Path) -> float:
    """Iterations done at the last checkpoint (0 when there is none)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return float(json.load(fh)["done"])
    except FileNotFoundError:
        return 0.0


def read_resize(path: str | None) -> int | None:
    """The GPU count an in-place resize asks for (None: no usable request file)."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            gpus = json.load(fh)["gpus"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return len(gpus) if isinstance(gpus, list) and gpus else None


class StopSignals:
    """Records the first stop signal; :meth:`wait` sleeps until one arrives or a timeout.
    Also counts resize requests (SIGUSR2), which wake the loop without stopping it."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.resizes = 0
        self._rfd, wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(wfd, False)
        signal.set_wakeup_fd(wfd)
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._record)
        signal.signal(RESIZE_SIGNAL, self._record)

    def _record(self, signum: int, _frame: object) -> None:
        if signum == RESIZE_SIGNAL:
            self.resizes += 1
        elif self.received is None:
            self.received = signum

    def wait(self, timeout: float) -> int | None:
        if self.received is None and not self.resizes:
            select.select([self._rfd], [], [], timeout)
            try:
                while os.read(self._rfd, 64):
                    pass
            except BlockingIOError:
                pass
        return self.received


class StandinJob:
    """One run segment of the stand-in: from the checkpoint to a stop signal or completion."""

    def __init__(self, job_id: str, work: float, rate_per_gpu: float, state_dir: Path,
                 gpus: int, checkpoint_interval: float | None,
                 progress_interval: float) -> None:
        self.job_id = job_id
        self.work = work
        self.gpus = gpus
        self.rate_per_gpu = rate_per_gpu
        self.rate = rate_per_gpu * gpus
        self.dir = state_dir
        self.ckpt_every = checkpoint_interval
        self.progress_every = progress_interval
        self.pid = os.getpid()
        self.ckpt_path = state_dir / f"{job_id}.ckpt"
        self.progress_path = state_dir / f"{job_id}.progress"
        self.done_path = state_dir / f"{job_id}.done"
        self.log_path = state_dir / f"{job_id}.log"
        self.base = min(read_checkpoint(self.ckpt_path), max(work, 0.0))
        self.committed = self.base
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self.t_commit = self.wall0

    def done_at(self, now: float) -> float:
        return min(self.work, self.base + self.rate * (now - self.t0))

    def _commit(self, done: float, reason: str) -> None:
        """Checkpoint ``done`` and append the segment since the previous commit to the log.

        Checkpoint first, log second: a crash between the two under-reports one segment in the
        log but can never make the log claim work the checkpoint does not hold.
        """
        write_json_atomic(self.ckpt_path, {"done": done})
        now = time.time()
        if done > self.committed or reason == "complete":
            line = {"start": self.committed, "end": done, "gpus": self.gpus, "pid": self.pid,
                    "reason": reason, "t_start": self.t_commit, "t_end": now}
            with open(self.log_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(line) + "\n")
        self.committed = done
        self.t_commit = now

    def _progress(self, done: float) -> None:
        write_json_atomic(self.progress_path, {
            "done": done, "gpus": self.gpus, "time": time.time(), "pid": self.pid,
            "started": self.wall0, "work": self.work,
        })

    def _complete(self) -> int:
        if self.committed < self.work or not self.ckpt_path.exists():
            self._commit(self.work, "complete")
        self._progress(self.work)
        self.done_path.write_text(json.dumps({"done": self.work, "time": time.time()}))
        return 0

    def resize(self, gpus: int) -> None:
        """Switch to ``gpus`` GPUs without stopping: commit the segment run on the old count
        (so the log still tiles the work, each segment with its GPU count), then continue from
        there at the new rate and report it at once (the sidecar's acknowledgement)."""
        now = time.monotonic()
        done = self.done_at(now)
        self._commit(done, "resize")
        self.base, self.t0 = done, now
        self.gpus = gpus
        self.rate = self.rate_per_gpu * gpus
        self._progress(done)

    def run(self, stop: StopSignals) -> int:
        if self.base >= self.work:
            return self._complete()
        self.done_path.unlink(missing_ok=True)  # a raised target makes an old marker stale
        self._progress(self.base)
        next_progress = self.t0 + self.progress_every
        next_ckpt = self.t0 + self.ckpt_every if self.ckpt_every else float("inf")
        while True:
            now = time.monotonic()
            done = self.done_at(now)
            if done >= self.work:
                return self._complete()
            if now >= next_ckpt:
                self._commit(done, "checkpoint")
                next_ckpt = now + self.ckpt_every  # type: ignore[operator]
            if now >= next_progress:
                self._progress(done)
                next_progress = now + self.progress_every
            finish = self.t0 + (self.work - self.base) / self.rate
            wait = max(0.001, min(next_progress, next_ckpt, finish) - time.monotonic())
            signum = stop.wait(wait)
            while stop.resizes and signum is None:
                stop.resizes -= 1
                new_gpus = read_resize(os.environ.get(RESIZE_FILE_ENV))
                if new_gpus is not None:
                    self.resize(new_gpus)
                    next_progress = time.monotonic() + self.progress_every
            if signum is not None:
                done = self.done_at(time.monotonic())
                self._commit(done, f"signal:{signal.Signals(signum).name}")
                self._progress(done)
                return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gpuplan.executors.standin",
        description="Stand-in DL training job: resumable progress counter (no GPU needed).",
    )
    parser.add_argument("--job-id", required=True)
    parser.add_argument("--work", required=True, type=float, help="iterations to reach")
    parser.add_argument("--rate-per-gpu", required=True, type=float, help="iterations/s per GPU")
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--checkpoint-interval", type=float, default=None, metavar="S")
    parser.add_argument("--progress-interval", type=float, default=DEFAULT_PROGRESS_INTERVAL_S,
                        metavar="S")
    return parser.parse_args(argv)


def run(argv: list[str] | None = None) -> int:
    # Catch the stop signals before anything else: from here on a signal is only recorded and
    # acted on by the main loop, between two consistent states.
    stop = StopSignals()
    args = parse_args(argv)
    try:
        job_id = check_job_id(args.job_id)
        if not args.work > 0:
            raise UsageError("--work must be > 0")
        if not args.rate_per_gpu > 0:
            raise UsageError("--rate-per-gpu must be > 0")
        for name in ("checkpoint_interval", "progress_interval"):
            value = getattr(args, name)
            if value is not None and not value > 0:
                raise UsageError(f"--{name.replace('_', '-')} must be > 0")
        gpus = gpu_count(os.environ.get("CUDA_VISIBLE_DEVICES"))
        if not args.state_dir.is_dir():
            raise UsageError(f"--state-dir {str(args.state_dir)!r} is not a directory")
    except UsageError as exc:
        print(f"standin: error: {exc}", file=sys.stderr)
        return 2
    job = StandinJob(job_id, args.work, args.rate_per_gpu, args.state_dir, gpus,
                     args.checkpoint_interval, args.progress_interval)
    return job.run(stop)


if __name__ == "__main__":
    sys.exit(run())
