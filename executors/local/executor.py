"""The single server's executor: the SSH executor on one node, this host, over the local
transport, with jobs arriving and leaving while it runs.

Everything that touches processes is :class:`~gpuplan.executors.ssh.executor.SshExecutor`'s
own code (sidecars, two-phase plans, checkpoint/resume, crash restarts, NVML binding, start-up
reconciliation): this module adds only what a daemon needs on top — online submissions and
cancellations handed over from the socket thread, a run that never ends on its own, adoption of
the jobs a restarted server finds running — and the launcher that runs each job's own command.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan.models import (
    ActiveJob,
    Cluster,
    Event,
    JobAllocation,
    JobArrival,
    JobFailure,
    JobSpec,
    placement_rate,
)

from ..progress_core import standin_paths
from ..ssh.executor import SshExecutor, SshSettings
from ..ssh.launchers import Launcher, WorkerCommand, safe_name
from ..ssh.rpc import NodeAddress
from ..ssh.state import run_from_found
from .transport import LocalTransport

log = logging.getLogger(__name__)

NODE = "local"
"""The one node of the single server's cluster model."""


@dataclass(frozen=True)
class JobCommand:
    """What a submitted job runs: argv (never through a shell), working directory, environment
    (the submitter's), and whether it follows the job protocol (``--work`` given: it checkpoints
    to ``$GPUPLAN_STATE_DIR/$GPUPLAN_JOB_ID.ckpt`` and the server accounts its progress)."""

    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str] = field(default_factory=dict)
    protocol: bool = False


class ServerLauncher(Launcher):
    """Runs each job's own command with the job protocol's environment.

    ``GPUPLAN_STATE_DIR`` (the server's private job-files directory), ``GPUPLAN_WORK`` (this
    run's work target) and, from the executor, ``CUDA_VISIBLE_DEVICES``, ``GPUPLAN_JOB_ID`` and
    the rank variables. Protocol jobs report the stand-in's files there; other jobs are
    complete when they exit 0 and their progress is the engine's model."""

    accounts_progress = True

    def __init__(self, jobs_dir: str | Path) -> None:
        self.jobs_dir = str(jobs_dir)
        self.commands: dict[str, JobCommand] = {}

    def _paths(self, job_id: str) -> dict[str, str]:
        return standin_paths(self.jobs_dir, safe_name(job_id))

    def worker(self, spec: JobSpec, rank: int, nranks: int, target: float) -> WorkerCommand:
        cmd = self.commands[spec.id]
        env = {
            **cmd.env,
            "GPUPLAN_STATE_DIR": self.jobs_dir,
            "GPUPLAN_WORK": repr(float(target)),
        }
        files: dict[str, str] = {}
        if cmd.protocol:
            paths = self._paths(spec.id)
            files = {k: paths[k] for k in ("progress", "checkpoint", "done")}
        return WorkerCommand(cmd.argv, env, files, cmd.cwd)

    def checkpoint_patterns(self, spec: JobSpec) -> list[str]:
        cmd = self.commands.get(spec.id)
        return [self._paths(spec.id)["checkpoint"]] if cmd and cmd.protocol else []

    def checkpoint_file(self, spec: JobSpec, rank: int) -> str | None:
        cmd = self.commands.get(spec.id)
        return self._paths(spec.id)["checkpoint"] if cmd and cmd.protocol else None


class LocalExecutor(SshExecutor):
    """:class:`SshExecutor` on the node :data:`NODE` (this host) through :class:`LocalTransport`.

    ``submit``/``cancel`` may be called from any thread; they take effect at the next poll
    (``settings.poll_interval_s``). The run ends only on :meth:`end_run`. ``bind`` maps the
    planned GPU indices to ``CUDA_VISIBLE_DEVICES`` entries when the operator chose a subset of
    the host's GPUs (default: the SSH executor's NVML binding, or the indices themselves)."""

    def __init__(
        self,
        cluster: Cluster,
        launcher: ServerLauncher,
        settings: SshSettings,
        *,
        state_dir: str | Path,
        bind: Callable[[str, tuple[int, ...]], list[str] | None] | None = None,
    ) -> None:
        super().__init__(
            cluster,
            {NODE: NodeAddress("127.0.0.1")},
            launcher,
            settings,
            state_dir=state_dir,
            transport=LocalTransport(),
        )
        self.server_launcher = launcher
        # Two processes on one GPU time-slice it (CUDA's default compute mode), so a plan that
        # co-locates jobs (an OJPP policy packing profiled jobs) is carried out as planned:
        # each job's progress is measured from its own files, so the sharing's real slowdown
        # is what the engine sees. Only the single server says so: on SSH nodes sharing is
        # not yet tested, and Slurm's GRES gives whole GPUs.
        self.core.capabilities = dataclasses.replace(self.core.capabilities, fractional_gpus=True)
        if bind is not None:
            self.nodes.bind = bind
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.cancelled: set[str] = set()

    # ------------------------------------------------------------------ from other threads
    def submit(self, spec: JobSpec, command: JobCommand) -> None:
        """Hand a new job to the engine (at the next poll)."""
        self.server_launcher.commands[spec.id] = command
        self._inbox.put(("submit", spec))

    def cancel(self, job_id: str) -> None:
        """Stop a job for good (checkpoint-stop if it runs) and report it failed ``cancelled``."""
        self._inbox.put(("cancel", job_id))

    # ------------------------------------------------------------------ the loop's hooks
    def _finished(self) -> bool:
        return False  # a daemon: only end_run() ends it

    async def _poll(self, t: float) -> list[Event]:
        events = await super()._poll(t)
        return events + await self._drain_inbox(t)

    async def _drain_inbox(self, t: float) -> list[Event]:
        events: list[Event] = []
        while True:
            try:
                kind, value = self._inbox.get_nowait()
            except queue.Empty:
                return events
            if kind == "submit":
                self._outstanding.add(value.id)
                events.append(JobArrival(time=t, job=value))
            else:
                events += await self._cancel(value, t)

    async def _cancel(self, job_id: str, t: float) -> list[Event]:
        self.cancelled.add(job_id)
        self._outstanding.discard(job_id)
        run = self._runs.get(job_id)
        if run is not None and run.ranks:
            await self.nodes.stop_run(run)
        if run is not None:
            run.state = "cancelled"
        found = self._found.pop(job_id, None)
        if found is not None and found.kind == "running":
            await self.nodes.stop_run(run_from_found(found, None))
        return [JobFailure(time=t, job_id=job_id, reason="cancelled")]

    # ------------------------------------------------------------------ restart adoption
    def found_at_start(self) -> dict[str, tuple[str, dict[str, tuple[int, ...]]]]:
        """What the sidecars say after a server restart: job id -> (running | completed,
        placement). Reads the run root once (the executor's own reconciliation)."""
        self._run(self._ensure_started())
        return {j: (f.kind, f.placement) for j, f in self._found.items()}

    def adopt(self, job: ActiveJob) -> None:
        """Take over ``job``, found running where the engine now holds it (``job.allocation``),
        without a restart: the SSH executor's adoption, done before the first plan."""
        self._run(self._adopt(job))

    async def _adopt(self, job: ActiveJob) -> None:
        found = self._found.pop(job.id)
        run = run_from_found(found, job.spec)
        run.ckpt = await self._read_ckpts(job.spec, list(found.ranks))
        self._runs[job.id] = run
        self._jobs[job.id] = job
        self._outstanding.add(job.id)
        self.adopted.add(job.id)
        self._gen[job.id] = max(self._gen.get(job.id, 0), found.gen)
        assert job.allocation is not None
        job.rate = placement_rate(job.spec, self.cluster, job.allocation)
        job.resume_time = self.now()
        self._measure(run, found.ranks, self.now())

    def forget_found(self, job_id: str) -> None:
        """A job found completed at start-up and journaled so: nothing more to do for it."""
        self._found.pop(job_id, None)


def allocation_of(job_id: str, placement: Mapping[str, tuple[int, ...]]) -> JobAllocation:
    """The whole-GPU allocation of a job found running on ``placement``."""
    return JobAllocation(job_id=job_id, placement={n: tuple(g) for n, g in placement.items()})
