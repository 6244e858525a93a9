"""A stand-in training job: a progress counter that behaves like a resumable DL job, without a GPU.

Real executors (SSH, Slurm) must be tested end to end, and what they must get right is the
*protocol* of an elastic training job, not the maths: it sees its GPUs through
``CUDA_VISIBLE_DEVICES``, runs faster on more GPUs, checkpoints and exits when asked (SIGUSR1 or
SIGTERM, the SideCar / PyTorch-Lightning / submitit convention), resumes from its checkpoint, and
says when it is done. This module is exactly that, so tests can prove that progress survives
restarts and resizes. The command line is a contract other executors depend on::

    python -m gpuplan.executors.standin --job-id ID --work ITERS --rate-per-gpu R \\
        --state-dir DIR [--checkpoint-interval S] [--progress-interval S] \\
        [--startup-s S | --startup-s uniform:LO:HI [--startup-seed N]] \\
        [--dataset-size N [--samples-per-iteration K] [--data-seed S]]

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

**Data mode** (``--dataset-size N``; EDL's dynamic data pipeline, :mod:`.data_pipeline`): the
job's progress is also *data*. One :class:`~.data_pipeline.DataLeader` per process hands out
shards of a seeded (``--data-seed``) random order of ``N`` samples; every GPU of the process is a
worker (named by its ``CUDA_VISIBLE_DEVICES`` entry), and an in-place resize makes the removed
GPUs leave (gracefully) and the added ones join. Progress ``done`` means ``floor(done x K)``
samples consumed (``--samples-per-iteration K``, default 1), spread evenly over the workers and
over as many epochs as that takes. Samples are consumed and committed at every commit of a
segment (checkpoint, resize, stop, completion), so nothing is consumed that the checkpoint does
not hold. Two more files, only in data mode:

* ``ID.samples``  append-only, one JSON line per committed run of sample ids
  ``{"epoch", "worker", "first", "last"}`` (``first`` to ``last`` inclusive, consecutive ids);
  tests assert from it that every epoch covers every sample exactly once;
* ``ID.data.json`` the leader's state plus ``{"done", "consumed", "log_bytes"}``, replaced
  atomically at every commit *before* the checkpoint. A restart restores the leader from it
  (the uncommitted rests of held shards go back to the queue) and truncates ``ID.samples`` to
  ``log_bytes``, so lines appended by a run that died before saving the state are forgotten,
  as their samples are. If the process died between this file and the checkpoint, the leader
  is ahead of the checkpoint: samples are never consumed twice, the job just consumes none
  until its progress catches up.

``--work`` is the target the counter runs to. An executor may raise it between runs (the SSH
executor splits a multi-node job's remaining work over per-rank stand-ins that way); a stale
``ID.done`` marker is removed when a run starts below its target.

**In-place resize** (EDL's stop-free scaling, for executors whose capabilities say
``resize == "in_place"``): SIGUSR2 asks the running process to switch to the GPU set named in
the JSON file ``$GPUPLAN_RESIZE_FILE`` (``{"gpus": [...]}``) without stopping. The segment so far
is committed (reason ``resize``), the rate becomes ``--rate-per-gpu`` x the new count, and a
progress file with the new ``gpus`` is written at once: that write is the acknowledgement the
sidecar waits for. A SIGUSR2 without a readable file, or naming the GPUs the job already has, is
no change (the executor then falls back to a checkpoint-restart). Every look at the file, done or
not, is counted in the progress file's ``requests`` and that file is rewritten, so whoever sent
the signal can tell it was handled; files and command line are otherwise the same as without
resizing.

**Start-up cost** (``--startup-s``): a real training process spends seconds before its first
step (importing the framework, building the model, loading the checkpoint: 11-16 s for the
PyTorch jobs in ``shared/measurements/h200-restart``); the bare stand-in starts in well under
one. With ``--startup-s 12`` every run (first start and every restart) waits 12 s before it
resumes; ``--startup-s uniform:11:16`` draws each run's wait uniformly from [11, 16] s with a
generator seeded by ``--startup-seed``, the job id and the checkpoint it resumes from (so the
same run of the same job always waits the same time, and successive restarts differ). Nothing
is written during the wait (the first progress file, whose ``started`` is the end of the wait,
is what executors measure restart latency to); a stop signal during it ends the run at once
(exit 0, the checkpoint untouched: no work was done).

Exit codes: 0 after completion or a stop signal, 2 for a usage error (no GPUs, bad arguments,
a data state written for another dataset).
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
import math
import os
import random
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


def data_leader_class() -> Any:
    """:class:`~.data_pipeline.DataLeader`, imported only in data mode: without
    ``--dataset-size`` this file must run alone on the system interpreter (the Slurm tests and
    benchmark copy it to a shared directory and run it with ``/usr/bin/python3``, no gpuplan
    installed). A lone copy finds the leader in a ``data_pipeline.py`` copied beside it."""
    try:
        from .data_pipeline import DataLeader
    except ImportError:
        try:
            from data_pipeline import DataLeader  # type: ignore[no-redef]
        except ImportError:
            raise UsageError(
                "--dataset-size needs gpuplan's data_pipeline module (install "
                "gpuplan, or copy data_pipeline.py beside this file)"
            ) from None
    return DataLeader


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


def parse_startup(text: str) -> tuple[float, float]:
    """``--startup-s``: ``S`` (fixed) or ``uniform:LO:HI`` -> the (low, high) seconds."""
    parts = text.split(":")
    try:
        if len(parts) == 1:
            low = high = float(parts[0])
        elif len(parts) == 3 and parts[0] == "uniform":
            low, high = float(parts[1]), float(parts[2])
        else:
            raise ValueError
    except ValueError:
        raise UsageError(
            f"--startup-s {text!r}: give seconds (12) or uniform:LO:HI (uniform:11:16)"
        ) from None
    if not (math.isfinite(low) and math.isfinite(high) and 0 <= low <= high <= 86400):
        raise UsageError(f"--startup-s {text!r}: need 0 <= LO <= HI <= 86400 seconds")
    return low, high


def startup_delay(bounds: tuple[float, float], seed: int, job_id: str, resume: float) -> float:
    """This run's start-up wait: fixed, or drawn from ``bounds`` by a generator seeded with
    ``seed``, the job id and the checkpoint the run resumes from (reproducible per run)."""
    low, high = bounds
    if high <= low:
        return low
    return random.Random(f"{seed}:{job_id}:{resume!r}").uniform(low, high)


def wait_startup(stop: StopSignals, seconds: float) -> bool:
    """Wait ``seconds`` of start-up; False when a stop signal came first. A resize signal
    meanwhile stays pending (the main loop reads its request once the run is up)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if stop.wait(left) is not None:
            return False
        if stop.resizes:  # wait() returns at once while a resize is pending: do not spin
            time.sleep(min(left, 0.05))
    return stop.received is None


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


def read_resize_gpus(path: str | None) -> list[str] | None:
    """The GPUs an in-place resize asks for, as names (None: no usable request file)."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            gpus = json.load(fh)["gpus"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return [str(g) for g in gpus] if isinstance(gpus, list) and gpus else None


def read_resize(path: str | None) -> int | None:
    """The GPU count an in-place resize asks for (None: no usable request file)."""
    gpus = read_resize_gpus(path)
    return None if gpus is None else len(gpus)


def gpu_names(cuda_visible_devices: str) -> list[str]:
    """The entries of a (valid, see :func:`gpu_count`) ``CUDA_VISIBLE_DEVICES`` value."""
    return [e.strip() for e in cuda_visible_devices.split(",")]


class DataFeed:
    """The data side of a stand-in run: a leader, one worker per GPU, and the samples log.

    ``consume_to(done)`` makes the workers consume samples until ``floor(done x K)`` have been
    consumed since the job began (never fewer than already consumed: see the module doc), each
    worker taking an equal share of them (the remainder to the first workers), and commits them
    to the leader. ``save(done)`` appends what was committed since the previous save to
    ``ID.samples`` and replaces ``ID.data.json``; callers save before they checkpoint.
    """

    def __init__(
        self,
        state_dir: Path,
        job_id: str,
        dataset_size: int,
        samples_per_iteration: float,
        seed: int,
        gpus: list[str],
    ) -> None:
        self.samples_path = state_dir / f"{job_id}.samples"
        self.state_path = state_dir / f"{job_id}.data.json"
        self.per_iteration = samples_per_iteration
        self.pending: list[dict[str, int | str]] = []
        if len(set(gpus)) != len(gpus):
            raise UsageError(f"GPUs {gpus} name one GPU twice: each GPU is one data worker")
        DataLeader = data_leader_class()  # a class, imported only in data mode
        saved = self._load()
        if saved is None:
            partition = max(1, math.ceil(dataset_size / 64))  # many more partitions than GPUs
            self.leader = DataLeader(dataset_size, partition, seed)
            self.consumed = 0
            log_bytes = 0
        else:
            self.leader = DataLeader.restore(saved["leader"], keep_workers=False)
            if (self.leader.num_samples, self.leader.seed) != (dataset_size, seed):
                raise UsageError(
                    f"{self.state_path.name} holds a dataset of {self.leader.num_samples} "
                    f"samples with seed {self.leader.seed}, not {dataset_size} with seed {seed}"
                )
            self.consumed = int(saved["consumed"])
            log_bytes = int(saved["log_bytes"])
            for worker in self.leader.workers:  # no worker survives a restart
                self.leader.leave(worker)
        with open(self.samples_path, "a+b") as fh:  # forget lines no saved state accounts for
            fh.truncate(log_bytes)
        self.log_bytes = log_bytes
        for gpu in gpus:
            self.leader.join(gpu)

    def _load(self) -> dict[str, Any] | None:
        try:
            with open(self.state_path, encoding="utf-8") as fh:
                data: dict[str, Any] = json.load(fh)
        except FileNotFoundError:
            return None
        except ValueError as err:
            raise UsageError(f"{self.state_path.name} is not valid JSON: {err}") from None
        return data

    def target(self, done: float) -> int:
        """Samples the job has consumed once ``done`` iterations are done (a tiny tolerance
        keeps ``3 x 0.1`` iterations of 10 samples at 3 samples, not 2)."""
        return math.floor(done * self.per_iteration + 1e-9)

    def consume_to(self, done: float) -> None:
        need = self.target(done) - self.consumed
        while need > 0:
            workers = sorted(self.leader.workers, key=str)
            share, extra = divmod(need, len(workers))
            took = 0
            for i, worker in enumerate(workers):
                took += self._take(worker, share + (1 if i < extra else 0))
            if self.leader.epoch_complete():
                self.leader.next_epoch()
            elif took == 0:
                raise RuntimeError("data leader gave no samples before the epoch's end")
            need -= took
            self.consumed += took

    def _take(self, worker: str, count: int) -> int:
        """Let ``worker`` consume up to ``count`` samples of the current epoch; how many it got
        (fewer when the epoch's unassigned samples run out)."""
        took = 0
        while took < count:
            held = self.leader.held(worker)
            if held is None or held[1] >= held[0].end:
                if self.leader.next_shard(worker) is None:
                    break
                held = self.leader.held(worker)
                assert held is not None
            shard, pos = held
            upto = min(shard.end, pos + count - took)
            ids = self.leader.samples(shard.partition, pos, upto)
            self.leader.commit(worker, upto)
            self.pending.append(
                {
                    "epoch": self.leader.epoch,
                    "worker": worker,
                    "first": ids.start,
                    "last": ids.stop - 1,
                }
            )
            took += upto - pos
        return took

    def resize(self, gpus: list[str]) -> None:
        """An in-place resize: removed GPUs leave gracefully (their shard's rest goes back to
        the queue), added ones join. Callers consume up to the resize point first."""
        gpus = list(dict.fromkeys(gpus))
        for worker in [w for w in self.leader.workers if w not in gpus]:
            self.leader.leave(worker)
        for gpu in gpus:
            if gpu not in self.leader.workers:
                self.leader.join(gpu)

    def save(self, done: float) -> None:
        if self.pending:
            text = "".join(json.dumps(line) + "\n" for line in self.pending)
            with open(self.samples_path, "a", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            self.log_bytes = self.samples_path.stat().st_size
            self.pending = []
        write_json_atomic(
            self.state_path,
            {
                "done": done,
                "consumed": self.consumed,
                "log_bytes": self.log_bytes,
                "leader": self.leader.state(),
            },
        )


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

    def __init__(
        self,
        job_id: str,
        work: float,
        rate_per_gpu: float,
        state_dir: Path,
        gpus: int,
        checkpoint_interval: float | None,
        progress_interval: float,
        data: DataFeed | None = None,
        names: list[str] | None = None,
    ) -> None:
        self.job_id = job_id
        self.work = work
        self.gpus = gpus
        self.names = names
        """The GPUs it runs on (``CUDA_VISIBLE_DEVICES``, then each in-place resize's set):
        a resize request naming exactly these is no change and is not carried out."""
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
        self.data = data
        self.requests = 0
        """Resize requests looked at (signals that pile up before a look count once)."""

    def done_at(self, now: float) -> float:
        return min(self.work, self.base + self.rate * (now - self.t0))

    def _commit(self, done: float, reason: str) -> None:
        """Checkpoint ``done`` and append the segment since the previous commit to the log.

        Checkpoint first, log second: a crash between the two under-reports one segment in the
        log but can never make the log claim work the checkpoint does not hold.
        """
        if self.data is not None:  # data first: see "Data mode" in the module doc
            self.data.consume_to(done)
            self.data.save(done)
        write_json_atomic(self.ckpt_path, {"done": done})
        now = time.time()
        if done > self.committed or reason == "complete":
            line = {
                "start": self.committed,
                "end": done,
                "gpus": self.gpus,
                "pid": self.pid,
                "reason": reason,
                "t_start": self.t_commit,
                "t_end": now,
            }
            with open(self.log_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(line) + "\n")
        self.committed = done
        self.t_commit = now

    def _progress(self, done: float) -> None:
        write_json_atomic(
            self.progress_path,
            {
                "done": done,
                "gpus": self.gpus,
                "time": time.time(),
                "pid": self.pid,
                "started": self.wall0,
                "work": self.work,
                "requests": self.requests,
            },
        )

    def _complete(self) -> int:
        if self.committed < self.work or not self.ckpt_path.exists():
            self._commit(self.work, "complete")
        self._progress(self.work)
        self.done_path.write_text(json.dumps({"done": self.work, "time": time.time()}))
        return 0

    def resize(self, gpus: int, names: list[str] | None = None) -> None:
        """Switch to ``gpus`` GPUs without stopping: commit the segment run on the old count
        (so the log still tiles the work, each segment with its GPU count), then continue from
        there at the new rate and report it at once (the sidecar's acknowledgement). In data
        mode the old workers consume up to here, then the worker set becomes ``names``."""
        now = time.monotonic()
        done = self.done_at(now)
        self._commit(done, "resize")
        if self.data is not None and names is not None:
            self.data.resize(names)
            self.data.save(done)
        self.base, self.t0 = done, now
        self.gpus = gpus
        self.names = names
        self.rate = self.rate_per_gpu * gpus
        self._progress(done)

    def run(self, stop: StopSignals) -> int:
        if self.base >= self.work:
            return self._complete()
        self.done_path.unlink(missing_ok=True)  # a raised target makes an old marker stale
        if self.data is not None:
            self.data.save(self.base)  # this run's workers, before any signal can stop it
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
            if stop.resizes and signum is None:
                # The request file names a state, not a queue of steps: however many signals
                # arrived since the last look, the file is read once, and a request for the
                # GPUs the job already has changes nothing (a signal handled after the file
                # was rewritten for a later one would otherwise resize twice to one set).
                stop.resizes = 0
                self.requests += 1
                new_gpus = read_resize_gpus(os.environ.get(RESIZE_FILE_ENV))
                if new_gpus is not None and new_gpus != self.names:
                    self.resize(len(new_gpus), new_gpus)
                else:  # no change: still acknowledge that the request was looked at
                    self._progress(self.done_at(time.monotonic()))
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
    parser.add_argument(
        "--progress-interval", type=float, default=DEFAULT_PROGRESS_INTERVAL_S, metavar="S"
    )
    parser.add_argument(
        "--startup-s",
        default=None,
        metavar="S|uniform:LO:HI",
        help="seconds each run waits before it resumes (a real job's start-up)",
    )
    parser.add_argument(
        "--startup-seed", type=int, default=0, metavar="N", help="seed of the drawn start-up waits"
    )
    data = parser.add_argument_group("data mode (EDL's dynamic data pipeline)")
    data.add_argument(
        "--dataset-size",
        type=int,
        default=None,
        metavar="N",
        help="consume the work as samples of an N-sample dataset",
    )
    data.add_argument("--samples-per-iteration", type=float, default=1.0, metavar="K")
    data.add_argument(
        "--data-seed", type=int, default=0, metavar="S", help="seed of the per-epoch sample order"
    )
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
        startup = parse_startup(args.startup_s) if args.startup_s is not None else None
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        gpus = gpu_count(visible)
        if not args.state_dir.is_dir():
            raise UsageError(f"--state-dir {str(args.state_dir)!r} is not a directory")
        data = None
        if args.dataset_size is not None:
            if not args.dataset_size > 0:
                raise UsageError("--dataset-size must be > 0")
            if not args.samples_per_iteration > 0:
                raise UsageError("--samples-per-iteration must be > 0")
            assert visible is not None  # gpu_count checked it
            data = DataFeed(
                args.state_dir,
                job_id,
                args.dataset_size,
                args.samples_per_iteration,
                args.data_seed,
                gpu_names(visible),
            )
    except UsageError as exc:
        print(f"standin: error: {exc}", file=sys.stderr)
        return 2
    if startup is not None:
        resume = min(read_checkpoint(args.state_dir / f"{job_id}.ckpt"), args.work)
        if not wait_startup(stop, startup_delay(startup, args.startup_seed, job_id, resume)):
            return 0  # stopped while starting: nothing done, nothing to checkpoint
    job = StandinJob(
        job_id,
        args.work,
        args.rate_per_gpu,
        args.state_dir,
        gpus,
        args.checkpoint_interval,
        args.progress_interval,
        data,
        gpu_names(visible) if visible is not None else None,
    )
    return job.run(stop)


if __name__ == "__main__":
    sys.exit(run())
