"""What each rank of a job runs over SSH: launchers, and file-safe names for job ids.

A :class:`Launcher` turns a job spec into one :class:`WorkerCommand` per rank. The
:class:`StandinLauncher` runs the stand-in training job and names its state files by the shared
stand-in protocol (:func:`gpuplan.executors.progress_core.standin_paths`), which lets the executor
account progress per rank; :class:`CommandLauncher` runs any command (progress is then the
engine's model).
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuplan.models import JobSpec

from ..progress_core import standin_paths

_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def safe_name(text: str) -> str:
    """A file-name-safe, collision-free stand-in for an arbitrary id.

    Ids made of ``[A-Za-z0-9_.-]`` (not starting with '.') are kept as they are; anything else
    becomes a sanitised prefix plus '+' and a hash. '+' never occurs in a kept id, so a hostile
    id cannot collide with (or impersonate) a plain one, and no id can escape its directory.
    """
    if _SAFE.fullmatch(text):
        return text
    clean = re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:40].lstrip(".")
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{clean}+{digest}"


def no_nul(values: Iterable[str], what: str) -> None:
    """Refuse NUL characters (no argv or environment entry can carry one)."""
    for value in values:
        if "\0" in value:
            raise ValueError(f"{what}: NUL characters cannot be passed to a process")


# --------------------------------------------------------------------------- launchers


@dataclass(frozen=True)
class WorkerCommand:
    """What one rank of a job runs: argv (never parsed by a shell), extra env, and the files
    the sidecar reports back (``progress``, ``checkpoint``: JSON; ``done``: a marker), and the
    working directory (None: the sidecar's job directory)."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None


class Launcher(ABC):
    """Turns a job spec into the command each rank runs.

    ``accounts_progress``: the command writes per-rank checkpoints ``{"done": iterations}``
    (and progress files), takes a per-run work target, and the executor measures progress and
    splits work over ranks (see the module docstring). Otherwise progress is the engine's
    model and a job is complete when every rank exits 0.
    """

    accounts_progress: bool = False
    resizes_in_place: bool = False
    """The command switches GPU sets on SIGUSR2 + ``$GPUPLAN_RESIZE_FILE`` (the stand-in does)."""

    @abstractmethod
    def worker(self, spec: JobSpec, rank: int, nranks: int, target: float) -> WorkerCommand:
        """The command for ``rank`` of ``nranks``, to run until ``target`` iterations."""

    def checkpoint_patterns(self, spec: JobSpec) -> list[str]:
        """Glob patterns matching every per-rank checkpoint file the job may have."""
        return []

    def checkpoint_file(self, spec: JobSpec, rank: int) -> str | None:
        """The checkpoint file of ``rank`` (None when the command keeps none)."""
        return None


class StandinLauncher(Launcher):
    """Runs :mod:`gpuplan.executors.standin` (``python -m gpuplan.executors.standin``).

    Rank 0 uses the job's own (file-safe) id, so a single-node job's files are ``ID.ckpt`` etc.;
    rank k uses ``ID@rk``. ``state_dir`` must be the same shared directory on every node.
    """

    accounts_progress = True
    resizes_in_place = True

    def __init__(
        self,
        state_dir: str | Path,
        rate_per_gpu: float,
        *,
        python: str = "python3",
        checkpoint_interval_s: float | None = None,
        progress_interval_s: float = 0.25,
    ) -> None:
        if not rate_per_gpu > 0:
            raise ValueError("rate_per_gpu must be > 0")
        self.state_dir = str(state_dir)
        self.rate_per_gpu = rate_per_gpu
        self.python = python
        self.checkpoint_interval_s = checkpoint_interval_s
        self.progress_interval_s = progress_interval_s

    def worker_id(self, job_id: str, rank: int) -> str:
        """The stand-in's ``--job-id`` for a rank (its state files' stem)."""
        base = safe_name(job_id)
        return base if rank == 0 else f"{base}@r{rank}"

    def paths(self, job_id: str, rank: int) -> dict[str, str]:
        """The rank's progress / checkpoint / done / log files."""
        return standin_paths(self.state_dir, self.worker_id(job_id, rank))

    def worker(self, spec: JobSpec, rank: int, nranks: int, target: float) -> WorkerCommand:
        argv = [
            self.python,
            "-m",
            "gpuplan.executors.standin",
            # "--job-id=X", not "--job-id X": an id starting with "-" is not an option
            f"--job-id={self.worker_id(spec.id, rank)}",
            "--work",
            repr(float(target)),
            "--rate-per-gpu",
            repr(float(self.rate_per_gpu)),
            "--state-dir",
            self.state_dir,
            "--progress-interval",
            repr(float(self.progress_interval_s)),
        ]
        if self.checkpoint_interval_s:
            argv += ["--checkpoint-interval", repr(float(self.checkpoint_interval_s))]
        paths = self.paths(spec.id, rank)
        files = {k: paths[k] for k in ("progress", "checkpoint", "done")}
        return WorkerCommand(tuple(argv), {}, files)

    def checkpoint_patterns(self, spec: JobSpec) -> list[str]:
        base = f"{self.state_dir}/{safe_name(spec.id)}"
        return [f"{base}.ckpt", f"{base}@r*.ckpt"]

    def checkpoint_file(self, spec: JobSpec, rank: int) -> str:
        return self.paths(spec.id, rank)["checkpoint"]

    def log_files(self, job_id: str, ranks: int) -> list[str]:
        """The segment logs of ranks ``0..ranks-1`` (tests sum them)."""
        return [self.paths(job_id, r)["log"] for r in range(ranks)]


class CommandLauncher(Launcher):
    """Runs an arbitrary command per rank: ``argv(spec, rank, nranks)`` or a fixed argv."""

    def __init__(
        self,
        argv: Callable[[JobSpec, int, int], Sequence[str]] | Sequence[str],
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._argv = argv
        self._env = dict(env or {})

    def worker(self, spec: JobSpec, rank: int, nranks: int, target: float) -> WorkerCommand:
        argv = self._argv(spec, rank, nranks) if callable(self._argv) else self._argv
        return WorkerCommand(tuple(str(a) for a in argv), dict(self._env), {})
