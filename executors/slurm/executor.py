"""SlurmExecutor: carries out gpuplan's plans on a real Slurm cluster.

The engine decides *how many GPUs on which nodes*; Slurm enforces it. Every engine job is one
Slurm batch job for its whole life (same job id across preemptions and resizes), which keeps
accounting, ``squeue`` and the site's tooling coherent.

Mapping of plan actions (all verified on Slurm 22.05, see ``docs/slurm.md``):

* ``start`` of a new job: ``sbatch --hold --requeue --nodes=k --nodelist=... --gres=gpu:T:g``
  (or ``--gpus=T:n`` when the per-node counts differ) ``--comment=gpuplan:...`` then
  ``scontrol release``. Submitting held keeps one protocol whether or not the site's
  job_submit hook also holds engine jobs.
* ``preempt``: checkpoint signal (``scancel --signal=USR1 --full``), wait until the job has
  exited, ``scontrol requeuehold`` (back to PENDING, held, same id), wait for PENDING.
* ``resize`` / ``migrate``: the same stop, then ``scontrol update NumNodes=k-k NodeList=...
  TresPerNode=...`` on the pending job, then ``StartTime=now`` and ``release``. Slurm cannot grow
  a running GPU job and cannot change GPUs per node of a running job, so every resize is a
  checkpoint-restart (``capabilities.resize == "restart"``).
* ``start`` of a preempted job: update the shape and release it.

Timing pitfalls handled here (observed in the lab, integration notes §2.6/§3):

* a job must have *left* RUNNING before it is updated (updates of a COMPLETING job fail), so we
  wait for the checkpoint exit and then for PENDING;
* a requeued job released within the same second as its old credential was revoked is killed
  ("Job credential revoked"): we wait ``requeue_guard_s`` (1.1 s) after the stop before release;
* a requeued job is not eligible before ``cred_expire`` (120 s by default) unless its
  ``StartTime`` is set to now, which we do right before the release.

Observation: ``squeue --json`` and ``sinfo --json`` every ``poll_interval_s``, plus the job's
state files. With the stand-in protocol (``protocol="standin"``) a job is complete when its
``DIR/KEY.done`` marker appears, its progress comes from ``DIR/KEY.progress`` and what survives a
stop from ``DIR/KEY.ckpt``; with ``protocol="exit"`` (any command) a job is complete when Slurm
reports it COMPLETED without the engine having stopped it, and progress is the engine's estimate.

Nothing is ever run through a shell: ``sbatch`` gets an argument list and the batch script is a
fixed two-line launcher (``exec "$@"``) that passes the job's argv through unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import heapq
import importlib.util
import json
import logging
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote, unquote

from gpuplan.models import (
    ActiveJob,
    AllocationPlan,
    Cluster,
    Event,
    GpuType,
    JobAllocation,
    JobArrival,
    JobCompletion,
    JobFailure,
    JobSpec,
    Node,
    NodeFailure,
    NodeRecovery,
    Timer,
    placement_rate,
)
from gpuplan.models.gpu import KNOWN_GPU_TYPES

from ..base import Executor, ExecutorCapabilities
from .cli import (
    ControllerUnavailable,
    InvalidJobId,
    JobBusy,
    JobFinished,
    JobNotPending,
    JobPending,
    SlurmCli,
    SlurmError,
    SlurmJob,
    compress_hostlist,
)

log = logging.getLogger(__name__)

STANDIN_MODULE = "gpuplan.executors.standin"
COMMENT_TAG = "gpuplan"

LAUNCHER = """#!/bin/sh
# gpuplan launcher: run the job's argument vector exactly as given. "$@" is expanded without
# word splitting or globbing and nothing is eval'ed, so quotes, $(...), backticks, ';' and
# newlines inside arguments stay plain data.
exec "$@"
"""


# ---------------------------------------------------------------------------------------- commands


@dataclass(frozen=True, slots=True)
class LaunchContext:
    """What a command builder may use to build a job's argv."""

    spec: JobSpec
    key: str
    """File-safe name for the job's state files (engine ids may contain anything)."""
    state_dir: Path
    rate_per_gpu: float
    """Iterations/s per GPU the job should run at (from the job's throughput profile)."""


CommandBuilder = Callable[[LaunchContext], Sequence[str]]


def standin_command(python: str = sys.executable, module: str | None = STANDIN_MODULE,
                    script: str | Path | None = None, checkpoint_interval_s: float | None = None
                    ) -> CommandBuilder:
    """Command builder for the stand-in training job (``python script`` or ``python -m module``).

    The argv is fixed at submit time and Slurm replays it on every requeue, so it carries the
    per-GPU rate; the stand-in multiplies by the GPUs it finds in ``CUDA_VISIBLE_DEVICES``.

    By default the stand-in module is run *by its file path*: it only needs the standard
    library, while ``-m gpuplan.executors.standin`` first imports the whole ``gpuplan`` package
    (~0.4 s of CPU, seconds when several jobs start at once on a small node), which would show
    up as restart latency. The file must be readable on the nodes (a shared install at a site).
    """
    if script is None and module == STANDIN_MODULE:
        spec = importlib.util.find_spec(STANDIN_MODULE)
        if spec is not None and spec.origin:
            script = spec.origin

    def build(ctx: LaunchContext) -> list[str]:
        head = [python, str(script)] if script is not None else [python, "-m", str(module)]
        # "--job-id=X", not "--job-id X": an id starting with "-" is not an option
        argv = [*head, f"--job-id={ctx.key}", "--work", repr(float(ctx.spec.work)),
                "--rate-per-gpu", repr(float(ctx.rate_per_gpu)), "--state-dir",
                str(ctx.state_dir)]
        if checkpoint_interval_s is not None:
            argv += ["--checkpoint-interval", repr(float(checkpoint_interval_s))]
        return argv

    return build


def file_key(job_id: str) -> str:
    """A file-name-safe, collision-free key for an engine job id."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", job_id)[:48].lstrip(".") or "job"
    return f"{safe}-{hashlib.sha256(job_id.encode()).hexdigest()[:10]}"


def job_name(job_id: str) -> str:
    """Slurm job name: the engine id with control characters replaced (Slurm's text outputs are
    line-based); quotes, ``$``, backticks and ``;`` are kept verbatim — they are only data."""
    return re.sub(r"[\x00-\x1f\x7f]", "?", job_id)[:200] or "job"


def parse_comment(comment: str) -> dict[str, str]:
    """``gpuplan:run=R;id=ENC;min=1;max=4`` -> fields (``id`` percent-decoded)."""
    if not comment.startswith(COMMENT_TAG + ":"):
        return {}
    fields = dict(re.findall(r"([A-Za-z_]+)=([^,;]*)", comment[len(COMMENT_TAG) + 1:]))
    if "id" in fields:
        fields["id"] = unquote(fields["id"])
    return fields


def cluster_from_slurm(cli: SlurmCli, nodes: Iterable[str] | None = None) -> Cluster:
    """The engine's :class:`Cluster` as Slurm describes it (``sinfo --json``): one node per Slurm
    node with GPUs, GPU type from its gres (unknown types are declared with speed 1.0)."""
    wanted = set(nodes) if nodes is not None else None
    found: list[Node] = []
    types: dict[str, GpuType] = {}
    for n in cli.nodes():
        if (wanted is not None and n.name not in wanted) or n.gpus < 1:
            continue
        gtype = n.gpu_type or "gpu"
        if gtype not in KNOWN_GPU_TYPES:
            types[gtype] = GpuType(name=gtype)
        found.append(Node(name=n.name, gpus=n.gpus, gpu_type=gtype))
    if not found:
        raise SlurmError("no Slurm node with GPUs found (sinfo --json)")
    return Cluster(nodes=found, gpu_types=types)


# ---------------------------------------------------------------------------------------- records


@dataclass(slots=True)
class Segment:
    """One incarnation of a job on Slurm (from a release to the exit of that run).

    ``start_done`` is the checkpoint the run resumed from, ``end_done`` the checkpoint it left.
    Consecutive segments of a job must chain (``start_done == previous end_done``) and the last
    must end at the job's work: that is "nothing lost, nothing done twice".
    """

    job_id: str
    slurm_id: int
    gpus: int
    nodes: tuple[str, ...]
    start_done: float
    released: float
    end_done: float | None = None
    ended: float | None = None
    how: str = ""
    kind: str = "start"
    """Why this run began: ``start`` (first or after a preemption), ``resize``, ``migrate`` or
    ``restart`` (in place, after an unplanned stop)."""
    observed_gpus: int | None = None
    first_progress: float | None = None


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """One action as carried out (engine time, kind, GPU counts, wall seconds spent)."""

    time: float
    kind: str
    job_id: str
    slurm_id: int | None
    gpus_before: int
    gpus_after: int
    seconds: float


@dataclass(frozen=True, slots=True)
class _Shape:
    nodes: tuple[str, ...]
    per_node: int | None
    total: int
    gpu_type: str | None

    def tres(self) -> tuple[str, str]:
        """(TresPerNode, TresPerJob) for ``scontrol update``; exactly one is non-empty."""
        t = f"{self.gpu_type}:" if self.gpu_type else ""
        if self.per_node is not None:
            return f"gres:gpu:{t}{self.per_node}", ""
        return "", f"gres:gpu:{t}{self.total}"

    def sbatch_options(self) -> list[str]:
        t = f"{self.gpu_type}:" if self.gpu_type else ""
        gpus = (f"--gres=gpu:{t}{self.per_node}" if self.per_node is not None
                else f"--gpus={t}{self.total}")
        return [f"--nodes={len(self.nodes)}", f"--nodelist={compress_hostlist(self.nodes)}",
                gpus]


@dataclass(slots=True)
class _Tracked:
    spec: JobSpec
    key: str
    job: ActiveJob | None = None
    slurm_id: int | None = None
    shape: _Shape | None = None
    running: bool = False
    """Released to Slurm and believed running by the engine."""
    stopped_at: float = 0.0
    """Wall time the last incarnation was seen gone (for the credential guard)."""
    requeued: bool = False
    completed: bool = False
    segment: Segment | None = None
    progress_seen: float = 0.0
    last_progress: tuple[float, float] | None = None
    """(done, wall time) of the newest progress record of the current incarnation."""
    rate_probe: tuple[float, float] | None = None
    restart_count: int = 0
    unplanned: int = 0
    stop_wall: float | None = None


# ---------------------------------------------------------------------------------------- executor


class SlurmExecutor(Executor):
    """Executor over a Slurm cluster reached through :class:`SlurmCli`.

    ``jobs`` arrive at ``submit_time`` seconds after the first :meth:`next_events` call (wall
    clock). ``state_dir`` must be visible to the submit host and the nodes (shared file system at
    a site; any directory in the single-machine lab).
    """

    def __init__(
        self,
        cluster: Cluster,
        jobs: Iterable[JobSpec] = (),
        *,
        cli: SlurmCli,
        state_dir: str | Path,
        command: CommandBuilder | None = None,
        protocol: Literal["standin", "exit"] = "standin",
        partition: str | None = None,
        poll_interval_s: float = 0.5,
        stop_timeout_s: float = 20.0,
        requeue_guard_s: float = 1.1,
        checkpoint_signal: str = "USR1",
        max_wall_s: float = 900.0,
        run_tag: str | None = None,
        extra_sbatch: Sequence[str] = (),
        max_unplanned_restarts: int = 3,
    ) -> None:
        self.cluster = cluster
        self.cli = cli
        self.state_dir = Path(state_dir).resolve()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.command = command or standin_command()
        self.protocol = protocol
        self.partition = partition
        self.poll_interval_s = poll_interval_s
        self.stop_timeout_s = stop_timeout_s
        self.requeue_guard_s = requeue_guard_s
        self.checkpoint_signal = checkpoint_signal
        self.max_wall_s = max_wall_s
        self.run_tag = run_tag or hashlib.sha256(str(time.time()).encode()).hexdigest()[:8]
        self.extra_sbatch = list(extra_sbatch)
        self.max_unplanned_restarts = max_unplanned_restarts
        self.capabilities = ExecutorCapabilities(
            resize="restart", pin_gpus=False, preempt_modes=("checkpoint", "requeue"),
            restart_latency_s=3.0,
        )
        self.launcher = self.state_dir / "gpuplan-launch.sh"
        self.launcher.write_text(LAUNCHER)
        self.launcher.chmod(0o755)

        self._arrivals: list[tuple[float, int, JobSpec]] = []
        for i, spec in enumerate(sorted(jobs, key=lambda s: s.submit_time)):
            heapq.heappush(self._arrivals, (spec.submit_time, i, spec))
        self._timers: list[float] = []
        self._queued: list[Event] = []
        self._tracked: dict[str, _Tracked] = {}
        self._epoch: float | None = None
        self._next_poll = 0.0
        self._node_up: dict[str, bool] = {n.name: True for n in cluster.nodes}
        self._arrived = 0
        self._completed = 0

        self.segments: list[Segment] = []
        self.actions: list[ActionRecord] = []
        self.failures: dict[str, str] = {}
        self.restart_latencies: list[float] = []
        self.start_latencies: list[float] = []
        self.unavailable_polls = 0

    # ------------------------------------------------------------------ clock
    def now(self) -> float:
        """Engine time: wall seconds since the first :meth:`next_events` call."""
        if self._epoch is None:
            return 0.0
        return time.time() - self._epoch

    def _to_engine(self, wall: float) -> float:
        return wall - (self._epoch or wall)

    # ------------------------------------------------------------------ Executor interface
    def wake_at(self, time_: float) -> None:
        heapq.heappush(self._timers, time_)

    def next_events(self) -> tuple[float, list[Event]] | None:
        if self._epoch is None:
            self._epoch = time.time()
        deadline = self._epoch + self.max_wall_s
        while True:
            now = self.now()
            events: list[Event] = list(self._queued)
            self._queued.clear()
            while self._arrivals and self._arrivals[0][0] <= now:
                _, _, spec = heapq.heappop(self._arrivals)
                self._arrived += 1
                self._tracked.setdefault(spec.id, _Tracked(spec=spec, key=file_key(spec.id)))
                events.append(JobArrival.model_construct(time=now, kind="arrival", job=spec))
            if time.time() >= self._next_poll:
                events.extend(self._poll(now))
                self._next_poll = time.time() + self.poll_interval_s
            while self._timers and self._timers[0] <= now:
                heapq.heappop(self._timers)
                if not any(isinstance(e, Timer) for e in events):
                    events.append(Timer.model_construct(time=now, kind="timer", name="round"))
            if events:
                self._sync_all(now)
                return now, events
            if self._all_done():
                return None
            if time.time() > deadline:
                unfinished = sorted(j for j, t in self._tracked.items() if not t.completed)
                raise SlurmError(f"run exceeded max_wall_s={self.max_wall_s:g}; unfinished jobs: "
                                 f"{unfinished}")
            wake = self._next_poll
            if self._arrivals:
                wake = min(wake, self._epoch + self._arrivals[0][0])
            if self._timers:
                wake = min(wake, self._epoch + self._timers[0])
            time.sleep(max(0.01, min(self.poll_interval_s, wake - time.time())))

    def _all_done(self) -> bool:
        """No arrivals left and every job finished *in the engine* (a completion the engine
        ignored, e.g. for a job it had just preempted, is delivered again on its next start).

        A job the engine never planned although nothing runs and every node is up was rejected
        by it (e.g. larger than the cluster): waiting for it would only end at ``max_wall_s``.
        """
        if self._arrivals or self._queued:
            return False
        idle = not any(t.running for t in self._tracked.values()) and all(
            self._node_up.values())
        for t in self._tracked.values():
            if t.job is None:
                if not idle:
                    return False
            elif not (t.completed and t.job.status == "finished"):
                return False
        return True

    def apply(self, plan: AllocationPlan, jobs: Mapping[str, ActiveJob]) -> None:
        t0 = time.time()
        stops: list[tuple[_Tracked, str]] = []
        relaunch: list[tuple[_Tracked, str, int]] = []
        for action in plan.actions:
            if action.kind == "keep":
                continue
            job = jobs[action.job_id]
            tracked = self._track(job)
            before = action.gpus_before
            if action.kind == "start":
                relaunch.append((tracked, "start", before))
            else:
                stops.append((tracked, action.kind))
                if action.kind != "preempt":
                    relaunch.append((tracked, action.kind, before))
        if stops:
            self._stop([t for t, _ in stops], plan.time, graceful=True,
                       reasons={t.spec.id: k for t, k in stops})
        for tracked, kind, _ in relaunch:
            if tracked.job is None:
                continue
            if tracked.completed:
                # It finished while stopped (its last checkpoint was the end): report again now
                # that the engine holds it as running, instead of launching it.
                self._queued.append(JobCompletion.model_construct(
                    time=self.now(), kind="completion", job_id=tracked.spec.id))
                continue
            if tracked.job.status != "running" or tracked.job.allocation is None:
                continue
            self._prepare(tracked, tracked.job.allocation, kind)
        self._release({t.spec.id: (t, k) for t, k, _ in relaunch if t.job is not None
                       and not t.completed and t.job.status == "running"
                       and t.job.allocation is not None})
        took = time.time() - t0
        for action in plan.actions:
            if action.kind == "keep":
                continue
            tracked = self._tracked[action.job_id]
            self.actions.append(ActionRecord(
                time=plan.time, kind=action.kind, job_id=action.job_id,
                slurm_id=tracked.slurm_id, gpus_before=action.gpus_before,
                gpus_after=action.gpus_after, seconds=took))

    def evict(self, job: ActiveJob, now: float, graceful: bool) -> None:
        tracked = self._track(job)
        self._stop([tracked], now, graceful=graceful, reasons={job.id: "evict"})
        self.actions.append(ActionRecord(time=now, kind="evict", job_id=job.id,
                                         slurm_id=tracked.slurm_id, gpus_before=job.gpus,
                                         gpus_after=0, seconds=0.0))

    # ------------------------------------------------------------------ bookkeeping
    def _track(self, job: ActiveJob) -> _Tracked:
        tracked = self._tracked.get(job.id)
        if tracked is None:
            tracked = self._tracked[job.id] = _Tracked(spec=job.spec, key=file_key(job.id))
        tracked.job = job
        return tracked

    def _paths(self, tracked: _Tracked) -> tuple[Path, Path, Path]:
        base = self.state_dir / tracked.key
        return (base.with_name(base.name + ".progress"), base.with_name(base.name + ".ckpt"),
                base.with_name(base.name + ".done"))

    def _read(self, path: Path) -> dict[str, float] | None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _checkpoint(self, tracked: _Tracked) -> float:
        data = self._read(self._paths(tracked)[1])
        return float(data.get("done", 0.0)) if data else 0.0

    def _marker(self, tracked: _Tracked) -> bool:
        return self.protocol == "standin" and self._paths(tracked)[2].exists()

    def _shape(self, alloc: JobAllocation) -> _Shape:
        per = {n: len(g) for n, g in alloc.placement.items()}
        nodes = tuple(sorted(per))
        counts = set(per.values())
        types = {self.cluster.node_by_name[n].gpu_type for n in nodes
                 if n in self.cluster.node_by_name}
        gtype = types.pop() if len(types) == 1 else None
        if gtype == "gpu":
            gtype = None
        return _Shape(nodes=nodes, per_node=counts.pop() if len(counts) == 1 else None,
                      total=sum(per.values()), gpu_type=gtype)

    def _rate_per_gpu(self, spec: JobSpec, alloc: JobAllocation) -> float:
        one = JobAllocation.fast(spec.id, {next(iter(alloc.placement)): (0,)})
        return placement_rate(spec, self.cluster, one)

    def _comment(self, spec: JobSpec) -> str:
        return (f"{COMMENT_TAG}:run={self.run_tag};id={quote(spec.id, safe='')};"
                f"min={spec.min_gpus};max={spec.max_gpus}")

    # ------------------------------------------------------------------ launching
    def _prepare(self, tracked: _Tracked, alloc: JobAllocation, kind: str) -> None:
        """Make the Slurm job exist, held, with the allocation's shape."""
        shape = self._shape(alloc)
        tracked.shape = shape
        if tracked.slurm_id is None:
            tracked.slurm_id = self._submit(tracked, alloc, shape)
            return
        tpn, tpj = shape.tres()
        fields: dict[str, str | int] = {"NumNodes": f"{len(shape.nodes)}-{len(shape.nodes)}",
                                        "NodeList": compress_hostlist(shape.nodes)}
        # Set the non-empty one last so clearing the other cannot wipe it.
        if tpn:
            fields.update(TresPerJob="", TresPerNode=tpn)
        else:
            fields.update(TresPerNode="", TresPerJob=tpj)
        job_id = tracked.slurm_id

        def update() -> None:
            self.cli.update_job(job_id, **fields)

        try:
            self._retry(update)
        except JobNotPending:
            # Someone (a user without the hook, an admin) started it behind our back: stop it
            # properly first, then reshape the pending job.
            log.warning("job %s (Slurm %s) was running unexpectedly; stopping it to reshape",
                        tracked.spec.id, job_id)
            self._stop([tracked], self.now(), graceful=True, reasons={tracked.spec.id: kind})
            self._retry(update)

    def _submit(self, tracked: _Tracked, alloc: JobAllocation, shape: _Shape) -> int:
        spec = tracked.spec
        ctx = LaunchContext(spec=spec, key=tracked.key, state_dir=self.state_dir,
                            rate_per_gpu=self._rate_per_gpu(spec, alloc))
        argv = [str(a) for a in self.command(ctx)]
        options = [
            "--hold", "--requeue", f"--job-name={job_name(spec.id)}",
            f"--comment={self._comment(spec)}",
            f"--output={self.state_dir / tracked.key}.out", "--open-mode=append",
            f"--chdir={self.state_dir}", f"--signal=B:{self.checkpoint_signal}@60",
            *shape.sbatch_options(),
        ]
        if self.partition:
            options.append(f"--partition={self.partition}")
        options += self.extra_sbatch
        try:
            return self.cli.sbatch(self.launcher, argv, options)
        except ControllerUnavailable:
            # The reply may have been lost after slurmctld accepted the job: look before
            # submitting again, so one engine job never becomes two Slurm jobs.
            existing = self._find_submitted(spec)
            if existing is not None:
                return existing
            return self._retry(lambda: self.cli.sbatch(self.launcher, argv, options))

    def _find_submitted(self, spec: JobSpec) -> int | None:
        want = self._comment(spec)
        jobs = self._retry(lambda: self.cli.jobs())
        for job in jobs:
            if job.comment == want and not job.finished:
                return job.job_id
        return None

    def _release(self, items: Mapping[str, tuple[_Tracked, str]]) -> None:
        """``StartTime=now`` + ``release`` for each (job, why) after the credential guard."""
        if not items:
            return
        guard_until = max((t.stopped_at + self.requeue_guard_s for t, _ in items.values()
                           if t.requeued), default=0.0)
        wait = guard_until - time.time()
        if wait > 0:
            log.debug("release: credential guard %.2f s", wait)
            time.sleep(wait)
        now = self.now()
        for tracked, kind in items.values():
            assert tracked.slurm_id is not None and tracked.job is not None
            job_id = tracked.slurm_id
            if tracked.requeued:
                self._retry(lambda j=job_id: self.cli.update_job(j, StartTime="now"))
            self._retry(lambda j=job_id: self.cli.release(j))
            tracked.running = True
            tracked.requeued = False
            shape = tracked.shape
            assert shape is not None
            start_done = self._checkpoint(tracked) if self.protocol == "standin" else \
                tracked.job.done
            tracked.segment = Segment(job_id=tracked.spec.id, slurm_id=job_id,
                                      gpus=shape.total, nodes=shape.nodes,
                                      start_done=start_done, released=time.time(), kind=kind)
            tracked.last_progress = None
            tracked.rate_probe = None
            job = tracked.job
            job.settle(now)
            if self.protocol == "standin":
                job.done = start_done
                job.last_checkpoint_done = start_done
            job.rate = placement_rate(job.spec, self.cluster, job.allocation)
            latency = self.capabilities.restart_latency_s if kind != "start" else (
                sum(self.start_latencies) / len(self.start_latencies)
                if self.start_latencies else 1.0)
            job.resume_time = now + latency
            job.segment_start = now

    # ------------------------------------------------------------------ stopping
    def _stop(self, items: list[_Tracked], now: float, *, graceful: bool,
              reasons: Mapping[str, str]) -> None:
        """Checkpoint-stop the Slurm jobs of ``items`` and leave them PENDING + held."""
        items = [t for t in items if t.slurm_id is not None and not t.completed]
        if not items:
            return
        by_id = {t.slurm_id: t for t in items}
        state = {j.job_id: j for j in self._retry(lambda: self.cli.jobs(by_id))}
        wall = time.time()
        # A released job may still be PENDING (Slurm starts it at its next scheduling pass):
        # hold it first, then look again — if it started in between, it gets the signal below
        # like any running job instead of running on unnoticed.
        raced = False
        for tracked in items:
            sj = state.get(tracked.slurm_id)  # type: ignore[arg-type]
            if sj is not None and sj.state == "PENDING" and not sj.held:
                raced = True
                with contextlib.suppress(JobNotPending, InvalidJobId):
                    self._retry(lambda j=tracked.slurm_id: self.cli.hold(j))  # type: ignore[arg-type]
        if raced:
            state = {j.job_id: j for j in self._retry(lambda: self.cli.jobs(by_id))}
        for tracked in items:
            tracked.stop_wall = wall
            sj = state.get(tracked.slurm_id)  # type: ignore[arg-type]
            if graceful and sj is not None and sj.state in ("RUNNING", "CONFIGURING"):
                with contextlib.suppress(JobPending, JobFinished, InvalidJobId):
                    self._retry(lambda j=tracked.slurm_id: self.cli.signal(
                        j, self.checkpoint_signal))  # type: ignore[arg-type]
        # Wait for the checkpoint exits (the stand-in exits within ~0.2 s).
        exited = self._wait(by_id, lambda j: not j.active and j.state != "RUNNING",
                            self.stop_timeout_s if graceful else 0.0)
        log.debug("stop %s: exited after %.2f s", sorted(by_id), time.time() - wall)
        requeued: dict[int | None, _Tracked] = {}
        for tracked in items:
            sj = exited.get(tracked.slurm_id)  # type: ignore[arg-type]
            if self._marker(tracked):  # it reached its end before the signal: a completion
                self._finish(tracked, "completed")
                continue
            requeued[tracked.slurm_id] = tracked
            try:
                if sj is not None and sj.state == "PENDING":
                    if not sj.held:
                        self._retry(lambda j=tracked.slurm_id: self.cli.hold(j))  # type: ignore[arg-type]
                else:
                    self._retry(lambda j=tracked.slurm_id: self.cli.requeue(j, hold=True))  # type: ignore[arg-type]
            except (InvalidJobId, JobPending):
                pass
            tracked.requeued = True
        pending = self._wait(requeued, lambda j: j.state == "PENDING", self.stop_timeout_s)
        stopped_at = time.time()
        log.debug("stop %s: pending after %.2f s", sorted(requeued), stopped_at - wall)
        for tracked in requeued.values():
            sj = pending.get(tracked.slurm_id)  # type: ignore[arg-type]
            if sj is not None:
                # Our own requeue counts as a restart in Slurm; only later ones are unplanned.
                tracked.restart_count = sj.restart_count
                if sj.state != "PENDING":
                    log.warning("job %s (Slurm %s) still %s after requeuehold", tracked.spec.id,
                                tracked.slurm_id, sj.state)
            if self._marker(tracked):
                # It completed while being killed by the requeue: nothing is left to run, so
                # drop the requeued (held) Slurm job instead of leaving it in the queue.
                with contextlib.suppress(SlurmError):
                    self.cli.cancel(tracked.slurm_id)  # type: ignore[arg-type]
                self._finish(tracked, "completed")
                continue
            tracked.stopped_at = stopped_at
            tracked.running = False
            self._settle_stop(tracked, now, reasons.get(tracked.spec.id, "stop"))

    def _settle_stop(self, tracked: _Tracked, now: float, how: str) -> None:
        """Progress after a stop: what the checkpoint kept; the rest (if any) is lost work."""
        job = tracked.job
        if job is None:
            return
        job.settle(now)
        if self.protocol == "standin":
            kept = self._checkpoint(tracked)
            seg = tracked.segment
            if seg is not None:  # closing this incarnation now: count its loss once
                reached = tracked.last_progress[0] if tracked.last_progress else kept
                progress = self._read(self._paths(tracked)[0])
                if progress and float(progress.get("time", 0.0)) >= seg.released:
                    reached = max(reached, float(progress.get("done", 0.0)))
                job.lost_work += max(0.0, reached - kept)
            tracked.last_progress = None
            job.done = kept
            job.last_checkpoint_done = kept
        job.rate = 0.0
        self._end_segment(tracked, how)

    def _end_segment(self, tracked: _Tracked, how: str) -> None:
        seg = tracked.segment
        if seg is None:
            return
        seg.end_done = self._checkpoint(tracked) if self.protocol == "standin" else (
            tracked.job.done if tracked.job else None)
        seg.ended = time.time()
        seg.how = how
        self.segments.append(seg)
        tracked.segment = None

    def _finish(self, tracked: _Tracked, how: str) -> None:
        if tracked.completed:
            return
        tracked.completed = True
        tracked.running = False
        self._completed += 1
        job = tracked.job
        if job is not None and how == "completed":
            job.settle(self.now())
            job.done = job.spec.work
            job.rate = 0.0
        self._end_segment(tracked, how)
        job_id = tracked.spec.id
        if how == "completed":
            self._queued.append(JobCompletion.model_construct(time=self.now(), kind="completion",
                                                              job_id=job_id))
        else:  # cancelled by its owner, vanished, or crashed past the restart budget
            self._queued.append(JobFailure(time=self.now(), job_id=job_id,
                                           reason=self.failures.get(job_id, how)))

    def _wait(self, by_id: Mapping[int | None, _Tracked], done: Callable[[SlurmJob], bool],
              timeout_s: float) -> dict[int, SlurmJob]:
        """Poll squeue until ``done`` holds for every job (or the timeout); return last states."""
        ids = [i for i in by_id if i is not None]
        deadline = time.time() + timeout_s
        while True:
            state = {j.job_id: j for j in self._retry(lambda: self.cli.jobs(ids))}
            if all(i not in state or done(state[i]) for i in ids) or time.time() >= deadline:
                return state
            time.sleep(0.1)

    def _retry(self, fn: Callable[[], object], timeout_s: float = 120.0):  # type: ignore[no-untyped-def]
        """Call ``fn`` until slurmctld answers (restarts take seconds) or a job transition ends.

        "Job is no longer pending" is *not* retried: it means the job runs, and updating a
        running job's size would be a native resize (which later breaks every update of that
        job without slurmdbd: "the DB index is being set")."""
        deadline = time.time() + timeout_s
        delay = 0.2
        while True:
            try:
                return fn()
            except (ControllerUnavailable, JobBusy) as err:
                if time.time() + delay > deadline:
                    raise
                if isinstance(err, ControllerUnavailable):
                    self.unavailable_polls += 1
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    # ------------------------------------------------------------------ observing
    def _poll(self, now: float) -> list[Event]:
        events: list[Event] = []
        try:
            nodes = self.cli.nodes()
        except ControllerUnavailable:
            self.unavailable_polls += 1
            nodes = []
        for node in nodes:
            if node.name not in self._node_up:
                continue
            up = node.usable
            if up != self._node_up[node.name]:
                self._node_up[node.name] = up
                if up:
                    events.append(NodeRecovery.model_construct(time=now, kind="recovery",
                                                               node=node.name))
                else:
                    events.append(NodeFailure.model_construct(time=now, kind="failure",
                                                              node=node.name,
                                                              recover_after=None))
        running = [t for t in self._tracked.values() if t.running and t.slurm_id is not None]
        if not running:
            return events
        for tracked in running:
            if self._marker(tracked):
                self._finish(tracked, "completed")
        running = [t for t in running if not t.completed]
        try:
            state = {j.job_id: j for j in self.cli.jobs([t.slurm_id for t in running])}  # type: ignore[misc]
        except ControllerUnavailable:
            self.unavailable_polls += 1
            state = {}
        for tracked in running:
            sj = state.get(tracked.slurm_id)  # type: ignore[arg-type]
            if sj is None:
                continue
            if sj.state == "RUNNING" and sj.restart_count > tracked.restart_count:
                tracked.restart_count = sj.restart_count
            if sj.finished:
                exited_ok = self.protocol == "exit" and sj.state == "COMPLETED" and \
                    (sj.exit_code or 0) == 0
                if self._marker(tracked) or exited_ok:
                    self._finish(tracked, "completed")
                elif sj.state == "CANCELLED":
                    self.failures[tracked.spec.id] = "cancelled outside the engine"
                    self._finish(tracked, "cancelled")
                else:
                    self._unplanned_stop(tracked, sj, now)
            elif sj.state == "PENDING" and sj.restart_count > tracked.restart_count:
                # Slurm requeued it by itself (node failure with --requeue): keep control.
                self._unplanned_stop(tracked, sj, now)
        events.extend(self._queued)
        self._queued.clear()
        self._sync_all(now)  # every poll, so rates and latencies are measured when they happen
        return events

    def _unplanned_stop(self, tracked: _Tracked, sj: SlurmJob, now: float) -> None:
        """The job stopped without the engine asking. If its nodes are fine, restart it in place
        from its checkpoint; if a node is down, hold it and let the NodeFailure replan it."""
        tracked.restart_count = sj.restart_count
        log.warning("job %s (Slurm %s) stopped unplanned: %s %s", tracked.spec.id,
                    tracked.slurm_id, sj.state, sj.reason)
        try:
            if sj.state == "PENDING":
                if not sj.held:
                    self._retry(lambda: self.cli.hold(tracked.slurm_id))  # type: ignore[arg-type]
            else:
                self._retry(lambda: self.cli.requeue(tracked.slurm_id, hold=True))  # type: ignore[arg-type]
        except InvalidJobId:
            self.failures[tracked.spec.id] = f"Slurm job vanished ({sj.state})"
            self._finish(tracked, "vanished")
            return
        tracked.requeued = True
        tracked.stopped_at = time.time()
        tracked.running = False
        tracked.stop_wall = time.time()
        self._settle_stop(tracked, now, f"unplanned {sj.state}")
        shape = tracked.shape
        if shape is None or not all(self._node_up.get(n, False) for n in shape.nodes):
            return  # the NodeFailure event evicts it and the engine replans
        tracked.unplanned += 1
        if tracked.unplanned > self.max_unplanned_restarts:
            self.failures[tracked.spec.id] = f"gave up after {tracked.unplanned - 1} restarts"
            self._finish(tracked, "failed")
            return
        self._prepare(tracked, tracked.job.allocation, "restart")  # type: ignore[union-attr,arg-type]
        self._release({tracked.spec.id: (tracked, "restart")})

    def _sync_all(self, now: float) -> None:
        if self.protocol != "standin":
            return
        for tracked in self._tracked.values():
            if tracked.running and tracked.job is not None:
                self._sync(tracked, now)

    def _sync(self, tracked: _Tracked, now: float) -> None:
        """Set the job's progress from its newest progress record of this incarnation."""
        seg = tracked.segment
        path = self._paths(tracked)[0]
        try:
            mtime = path.stat().st_mtime
        except OSError:
            return
        if seg is None or mtime <= tracked.progress_seen:
            return
        data = self._read(path)
        if not data:
            return
        wall = float(data.get("time", mtime))
        if wall < seg.released:
            return  # written by the previous incarnation
        tracked.progress_seen = mtime
        done = float(data.get("done", 0.0))
        if seg.first_progress is None:
            # The stand-in says when this run began; else the first record we saw is the bound.
            seg.first_progress = float(data.get("started") or wall)
            seg.observed_gpus = int(data.get("gpus", 0)) or None
            if seg.kind != "start" and tracked.stop_wall is not None:
                # stop signal -> first progress of the relaunched run: what a resize costs
                self.restart_latencies.append(seg.first_progress - tracked.stop_wall)
                mean = sum(self.restart_latencies) / len(self.restart_latencies)
                self.capabilities = dataclasses.replace(self.capabilities,
                                                        restart_latency_s=round(mean, 3))
            else:
                self.start_latencies.append(seg.first_progress - seg.released)
        job = tracked.job
        assert job is not None
        rate = job.rate
        probe = tracked.rate_probe
        if probe is None:
            tracked.rate_probe = (done, wall)
        elif wall - probe[1] >= 1.0:
            rate = max(0.0, (done - probe[0]) / (wall - probe[1]))
        tracked.last_progress = (done, wall)
        job.settle(now)
        job.rate = rate
        job.done = min(job.spec.work, done + rate * max(0.0, now - self._to_engine(wall)))
        job.resume_time = min(job.resume_time, now)

    # ------------------------------------------------------------------ reporting
    def segments_of(self, job_id: str) -> list[Segment]:
        return [s for s in self.segments if s.job_id == job_id]

    def slurm_id(self, job_id: str) -> int | None:
        tracked = self._tracked.get(job_id)
        return tracked.slurm_id if tracked else None

    def cancel_all(self) -> None:
        """Cancel every Slurm job this executor submitted (cleanup after an aborted run)."""
        for tracked in self._tracked.values():
            if tracked.slurm_id is not None and not tracked.completed:
                try:
                    self.cli.cancel(tracked.slurm_id)
                except SlurmError as err:
                    log.info("cancel %s: %s", tracked.slurm_id, err)
