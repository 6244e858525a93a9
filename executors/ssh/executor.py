"""The SSH executor: runs the engine's plans on real nodes through per-job sidecars.

Design (why it looks like this):

* **One sidecar per job and node** (:mod:`.sidecar`, uploaded to every node) is the training
  process's parent. The engine never signals a training process directly; it writes the desired
  state (``control.json``) and the sidecar acts and acknowledges. Resize, migrate and preempt
  are all "checkpoint-stop, then start on the new GPUs" (``capabilities.resize == "restart"``);
  on nodes a job keeps, the wrapper stays and only the training process restarts (SideCar).
* **Two phases per plan**: every stop of the plan is carried out and acknowledged *before*
  anything starts, so a GPU changes hands only after its previous user has exited (the
  SideCar "GPU coordinator" ordering guarantee) and checkpoints are final when the next run's
  starting point is computed.
* **Progress is measured**, not assumed: the job's checkpoint and progress files are read
  through the sidecar's status; the engine's ``ActiveJob`` progress fields are re-anchored on
  every poll (the executor owns them, see :mod:`gpuplan.executors.base`).
* **Multi-node jobs**: one sidecar per node; the worker on each node sees only that node's GPUs.
  Progress accounting is the **sum over ranks**: each rank checkpoints its own counter, a job's
  progress is the sum of all its rank checkpoints (ranks of earlier, wider placements keep their
  share), and on every (re)launch the remaining work is split over the new ranks in proportion
  to their GPUs (rank k's target = its checkpoint + remaining x g_k / G). All ranks run at the
  same per-GPU rate, so they finish together, and the sum reaches exactly the job's work. The
  checkpoint directory must be shared by the nodes (as for any job that migrates).
* **Failures**: a training process that crashes is restarted from its checkpoint by its sidecar
  on the same GPUs (up to ``max_restarts``) and the engine is woken (a ``Timer``) to replan with
  the corrected progress. A node that cannot be reached is reported as ``NodeFailure`` only after
  its sidecars' lease has expired and their checkpoint-stop grace has passed: by then they have
  fenced themselves, so the engine can restart the jobs elsewhere without ever running a job twice.
  When the node answers again it is cleaned and reported as ``NodeRecovery``.
* **Engine restarts**: everything lives in files on the nodes. A new executor with the same
  ``run_root`` lists the sidecars, and when the new engine starts a job on exactly the placement
  it already runs on, the job is adopted without a restart; otherwise it is checkpoint-stopped
  and started where the engine wants it. Sidecars nobody claims in the first plan are stopped.

The engine API is synchronous; the executor runs its own asyncio loop (asyncssh) inside its
methods, so it must not be called from a thread that already runs an event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import heapq
import json
import logging
import re
import statistics
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gpuplan.models import (
    Action,
    ActiveJob,
    AllocationPlan,
    Cluster,
    Event,
    GpuplanError,
    JobAllocation,
    JobArrival,
    JobCompletion,
    JobFailure,
    JobSpec,
    NodeFailure,
    NodeRecovery,
    Timer,
    placement_rate,
)

from ..base import Executor, ExecutorCapabilities
from . import sidecar as sidecar_module
from .pool import NodeAddress, NodeUnreachable, RemoteCommandError, RpcChannel, SshPool

log = logging.getLogger(__name__)
T = TypeVar("T")

SIDECAR_SOURCE = Path(sidecar_module.__file__).read_text(encoding="utf-8")
SIDECAR_DIGEST = hashlib.sha256(SIDECAR_SOURCE.encode()).hexdigest()[:12]
# Installs the sidecar from stdin, atomically, only if its content changed.
_UPLOAD = (
    # Runs on the node before anything is executed from the run root: create it 0700 if
    # missing, and refuse (exit 3, one line naming path, owner and mode) a root that is a
    # symlink, not ours, or open to others, or whose ancestors others may write (unless
    # sticky, like /tmp): otherwise whoever made it first would get code run as the login
    # user (the sidecar script) or plant state files that make the sidecar signal any PID.
    "import os,stat,sys\n"
    "p=sys.argv[1];d=sys.stdin.read();r=os.path.dirname(p) or '.';u=os.getuid()\n"
    "def no(m):\n"
    "    sys.stderr.write('run root %s refused: %s\\n'%(os.path.abspath(r),m));sys.exit(3)\n"
    "a=os.path.abspath(r);c=os.path.dirname(a)\n"
    "while True:\n"
    "    s=os.stat(c) if os.path.exists(c) else None\n"
    "    if s is not None and (s.st_uid not in (0,u) or (s.st_mode&0o022 and not "
    "s.st_mode&stat.S_ISVTX)):\n"
    "        no('ancestor %s is owned by uid %d with mode %o'%(c,s.st_uid,s.st_mode&0o7777))\n"
    "    if c==os.path.dirname(c):\n"
    "        break\n"
    "    c=os.path.dirname(c)\n"
    "os.makedirs(r,mode=0o700,exist_ok=True)\n"
    "s=os.lstat(r)\n"
    "if stat.S_ISLNK(s.st_mode) or not stat.S_ISDIR(s.st_mode):\n"
    "    no('not a directory (a symlink?)')\n"
    "if s.st_uid!=u:\n"
    "    no('owned by uid %d, not by the login user (uid %d)'%(s.st_uid,u))\n"
    "if s.st_mode&0o077:\n"
    "    no('mode %o lets others in; it must be 0700'%(s.st_mode&0o777))\n"
    "old=open(p).read() if os.path.exists(p) else None\n"
    "if old!=d:\n"
    "    t='%s.%d.tmp'%(p,os.getpid())\n"
    "    f=os.fdopen(os.open(t,os.O_WRONLY|os.O_CREAT|os.O_EXCL|os.O_NOFOLLOW,0o600),'w')\n"
    "    f.write(d);f.close();os.replace(t,p)\n"
)
_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_REMOTE_ERRORS = (NodeUnreachable, RemoteCommandError)


class UnsafeRunRoot(GpuplanError):
    """The run root on a node is not safe to execute from (another user's, a symlink, open to
    others). A configuration or security problem, not a transient failure: the run stops with
    this error instead of retrying the node."""


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


def _no_nul(values: Iterable[str], what: str) -> None:
    for value in values:
        if "\0" in value:
            raise ValueError(f"{what}: NUL characters cannot be passed to a process")


# --------------------------------------------------------------------------- launchers


@dataclass(frozen=True)
class WorkerCommand:
    """What one rank of a job runs: argv (never parsed by a shell), extra env, and the files
    the sidecar reports back (``progress``, ``checkpoint``: JSON; ``done``: a marker)."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)


class Launcher(ABC):
    """Turns a job spec into the command each rank runs.

    ``accounts_progress``: the command writes per-rank checkpoints ``{"done": iterations}``
    (and progress files), takes a per-run work target, and the executor measures progress and
    splits work over ranks (see the module docstring). Otherwise progress is the engine's
    model and a job is complete when every rank exits 0.
    """

    accounts_progress: bool = False

    @abstractmethod
    def worker(self, spec: JobSpec, rank: int, nranks: int, target: float) -> WorkerCommand:
        """The command for ``rank`` of ``nranks``, to run until ``target`` iterations."""

    def checkpoint_patterns(self, spec: JobSpec) -> list[str]:
        """Glob patterns matching every per-rank checkpoint file the job may have."""
        return []

    def checkpoint_file(self, spec: JobSpec, rank: int) -> str | None:
        return None


class StandinLauncher(Launcher):
    """Runs :mod:`gpuplan.executors.standin` (``python -m gpuplan.executors.standin``).

    Rank 0 uses the job's own (file-safe) id, so a single-node job's files are ``ID.ckpt`` etc.;
    rank k uses ``ID@rk``. ``state_dir`` must be the same shared directory on every node.
    """

    accounts_progress = True

    def __init__(self, state_dir: str | Path, rate_per_gpu: float, *, python: str = "python3",
                 checkpoint_interval_s: float | None = None,
                 progress_interval_s: float = 0.25) -> None:
        if not rate_per_gpu > 0:
            raise ValueError("rate_per_gpu must be > 0")
        self.state_dir = str(state_dir)
        self.rate_per_gpu = rate_per_gpu
        self.python = python
        self.checkpoint_interval_s = checkpoint_interval_s
        self.progress_interval_s = progress_interval_s

    def worker_id(self, job_id: str, rank: int) -> str:
        base = safe_name(job_id)
        return base if rank == 0 else f"{base}@r{rank}"

    def paths(self, job_id: str, rank: int) -> dict[str, str]:
        stem = f"{self.state_dir}/{self.worker_id(job_id, rank)}"
        return {"progress": f"{stem}.progress", "checkpoint": f"{stem}.ckpt",
                "done": f"{stem}.done", "log": f"{stem}.log"}

    def worker(self, spec: JobSpec, rank: int, nranks: int, target: float) -> WorkerCommand:
        argv = [self.python, "-m", "gpuplan.executors.standin",
                # "--job-id=X", not "--job-id X": an id starting with "-" is not an option
                f"--job-id={self.worker_id(spec.id, rank)}", "--work", repr(float(target)),
                "--rate-per-gpu", repr(float(self.rate_per_gpu)), "--state-dir", self.state_dir,
                "--progress-interval", repr(float(self.progress_interval_s))]
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

    def __init__(self, argv: Callable[[JobSpec, int, int], Sequence[str]] | Sequence[str],
                 env: Mapping[str, str] | None = None) -> None:
        self._argv = argv
        self._env = dict(env or {})

    def worker(self, spec: JobSpec, rank: int, nranks: int, target: float) -> WorkerCommand:
        argv = self._argv(spec, rank, nranks) if callable(self._argv) else self._argv
        return WorkerCommand(tuple(str(a) for a in argv), dict(self._env), {})


# --------------------------------------------------------------------------- settings and state


@dataclass(frozen=True)
class SshSettings:
    """Knobs of the SSH executor. Times in seconds."""

    known_hosts: str
    client_keys: tuple[str, ...]
    run_root: str = ".gpuplan/runs"
    """Directory on every node holding the sidecar script, the lease and one dir per job.
    Relative paths are under the login user's home. gpuplan creates it 0700 and refuses one
    that is a symlink, not owned by the login user, open to others, or below a directory
    others may write (unless sticky): see docs/ssh.md, threat model."""
    remote_python: str = "python3"
    """Interpreter on the nodes for the (stdlib-only) sidecar."""
    poll_interval_s: float = 1.0
    connect_timeout_s: float = 5.0
    command_timeout_s: float = 30.0
    lease_s: float = 30.0
    """Sidecars fence themselves (checkpoint-stop) when the engine has not touched their node
    for this long. 0 disables fencing (then a node failure can leave a job running twice)."""
    ckpt_grace_s: float = 30.0
    """How long a job may take to checkpoint and exit after the checkpoint signal."""
    term_grace_s: float = 5.0
    """After that, SIGTERM to the process group; SIGKILL after this much longer."""
    failure_after_s: float | None = None
    """Unreachable this long -> NodeFailure. Default: lease + both graces + 2 polls, the time
    after which every sidecar on the node has fenced itself."""
    max_restarts: int = 3
    restart_estimate_s: float = 2.0
    """Reported restart latency until one has been measured."""
    startup_estimate_s: float = 0.5
    """Assumed time from launch to training progress until measured."""
    checkpoint_signal: str = "SIGUSR1"
    deadline_s: float | None = None
    """Safety net: ``next_events`` ends the run at this engine time."""
    ssh_config: tuple[str, ...] = ()

    @property
    def fail_after(self) -> float:
        if self.failure_after_s is not None:
            return self.failure_after_s
        return self.lease_s + self.ckpt_grace_s + self.term_grace_s + 2 * self.poll_interval_s

    @property
    def stop_wait(self) -> float:
        return self.ckpt_grace_s + self.term_grace_s + 5.0


@dataclass
class RankRun:
    """One rank of a running job: its node, GPUs, sidecar directory and work target."""

    node: str
    rank: int
    gpus: tuple[int, ...]
    dir: str
    target: float | None = None
    start_done: float = 0.0
    files: dict[str, str] = field(default_factory=dict)
    sidecar_alive: bool = False
    startup_measured: bool = False


@dataclass
class JobRun:
    """What the executor knows about one job's execution on the nodes."""

    spec: JobSpec
    gen: int = 0
    ranks: dict[str, RankRun] = field(default_factory=dict)
    state: str = "idle"  # running | stopped | completed | completed_unreported | failed
    restarts: int = 0
    ckpt: dict[str, float] = field(default_factory=dict)
    restart_t0: float | None = None
    adopted: bool = False


@dataclass
class FoundJob:
    """A job found on the nodes at start-up (engine restart)."""

    job_id: str
    gen: int
    kind: str  # running | completed | partial
    ranks: dict[str, dict[str, Any]]  # node -> status entry, latest generation

    @property
    def placement(self) -> dict[str, tuple[int, ...]]:
        return {n: tuple(e["control"]["gpus"]) for n, e in self.ranks.items()}


class SshExecutor(Executor):
    """Runs plans on SSH-reachable nodes (see the module docstring).

    ``nodes`` maps every node name of ``cluster`` to its address. ``jobs`` are submitted at
    their ``submit_time`` (seconds after the executor's time origin); ``events`` (capacity
    changes, ...) are delivered at their time. ``state_dir`` (engine side) keeps the time origin
    so a restarted engine continues the same clock.
    """

    def __init__(
        self,
        cluster: Cluster,
        nodes: Mapping[str, NodeAddress],
        launcher: Launcher,
        settings: SshSettings,
        *,
        jobs: Iterable[JobSpec] = (),
        events: Iterable[Event] = (),
        state_dir: str | Path | None = None,
    ) -> None:
        missing = [n.name for n in cluster.nodes if n.name not in nodes]
        if missing:
            raise ValueError(f"no SSH address for nodes {missing}")
        self.cluster = cluster
        self.addresses = dict(nodes)
        self.launcher = launcher
        self.settings = settings
        self.pool = SshPool(self.addresses, known_hosts=settings.known_hosts,
                            client_keys=settings.client_keys,
                            connect_timeout_s=settings.connect_timeout_s,
                            ssh_config=settings.ssh_config)
        self.capabilities = ExecutorCapabilities(
            resize="restart", pin_gpus=True, preempt_modes=("checkpoint",),
            restart_latency_s=settings.restart_estimate_s)
        root = settings.run_root.rstrip("/") or "/"
        self._root = root
        self._sidecar_path = f"{root}/.sidecar-{SIDECAR_DIGEST}.py"
        self._loop = asyncio.new_event_loop()
        self._origin_mono = time.monotonic() - (time.time() - self._load_origin(state_dir))
        self._arrivals = sorted(jobs, key=lambda s: (s.submit_time, s.id))
        self._arrival_idx = 0
        self._external: list[tuple[float, int, Event]] = []
        for i, event in enumerate(events):
            heapq.heappush(self._external, (event.time, i, event))
        self._timers: list[float] = []
        self._runs: dict[str, JobRun] = {}
        self._jobs: dict[str, ActiveJob] = {}
        self._gen: dict[str, int] = {}
        self._seq: dict[str, int] = {}
        self._found: dict[str, FoundJob] = {}
        self._claims_open = False
        self._delivered = False
        self._started = False
        self._end_requested = threading.Event()
        self._uploaded: dict[str, int] = {}
        self._agents: dict[str, RpcChannel] = {}
        self._unreachable: dict[str, float] = {}
        self._down: set[str] = set()
        self._status: dict[str, dict[str, dict[str, Any]]] = {}
        self._next_poll = 0.0
        self._pending_events: list[Event] = []
        self._outstanding: set[str] = set()
        self.failed: dict[str, str] = {}
        self.adopted: set[str] = set()
        self.action_log: list[dict[str, Any]] = []
        self.event_log: list[tuple[float, Event]] = []
        self.restart_latencies: list[float] = []
        self.startup_latencies: list[float] = []

    # ------------------------------------------------------------------ clock and loop
    @staticmethod
    def _load_origin(state_dir: str | Path | None) -> float:
        if state_dir is None:
            return time.time()
        path = Path(state_dir) / "origin.json"
        try:
            return float(json.loads(path.read_text())["origin"])
        except (FileNotFoundError, ValueError, KeyError):
            origin = time.time()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"origin": origin}))
            return origin

    def now(self) -> float:
        """Engine time: seconds since the time origin (monotonic within a process)."""
        return time.monotonic() - self._origin_mono

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    # ------------------------------------------------------------------ Executor API
    def next_events(self) -> tuple[float, list[Event]] | None:
        return self._run(self._next_events())

    def apply(self, plan: AllocationPlan, jobs: Mapping[str, ActiveJob]) -> None:
        self._run(self._apply(plan, jobs))

    def evict(self, job: ActiveJob, now: float, graceful: bool) -> None:
        self._run(self._evict(job))

    def wake_at(self, time: float) -> None:
        heapq.heappush(self._timers, time)

    def shutdown(self, stop_jobs: bool = True) -> None:
        """Checkpoint-stop every job this executor runs (``stop_jobs``), then disconnect."""
        if stop_jobs and not self._loop.is_closed():
            self._run(self._stop_all())
        self.detach()

    async def _stop_all(self) -> None:
        runs = [r for r in self._runs.values() if r.ranks]
        await asyncio.gather(*(self._stop_run(r) for r in runs))

    def end_run(self) -> None:
        """Make the engine's run return at its next step, leaving every job running (an
        operator's hand-over to another engine). Safe to call from any thread."""
        self._end_requested.set()

    def detach(self) -> None:
        """Disconnect and leave everything running (engine hand-over or crash simulation)."""
        if self._loop.is_closed():
            return
        for agent in self._agents.values():
            agent.close()
        self._agents.clear()
        self._run(self.pool.close())
        self._loop.close()

    def __enter__(self) -> SshExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    # ------------------------------------------------------------------ remote helpers
    def lease_file(self, node: str) -> str:
        """Per-node lease: on a shared run root (the lab, NFS) one node's renewals must not
        keep another node's sidecars from fencing."""
        return f"{self._root}/.lease-{safe_name(node)}"

    def job_dir(self, job_id: str, node: str) -> str:
        return f"{self._root}/{safe_name(job_id)}@{safe_name(node)}"

    def _next_seq(self, jobdir: str) -> int:
        seq = self._seq.get(jobdir, 0) + 1
        self._seq[jobdir] = seq
        return seq

    async def _ensure_uploaded(self, node: str) -> None:
        await self.pool.connection(node)
        if self._uploaded.get(node) == self.pool.connects.get(node):
            return
        result = await self.pool.run(
            node, [self.settings.remote_python, "-c", _UPLOAD, self._sidecar_path],
            input=SIDECAR_SOURCE, timeout=self.settings.command_timeout_s)
        if result.exit_status != 0:
            detail = " ".join(str(result.stderr or "").split())[:500]
            if result.exit_status == 3:
                raise UnsafeRunRoot(f"{node}: {detail}")
            raise RemoteCommandError(f"{node}: cannot install the sidecar: {detail}")
        self._uploaded[node] = self.pool.connects[node]

    async def _agent(self, node: str) -> RpcChannel:
        agent = self._agents.get(node)
        if agent is not None and not agent.closed:
            return agent
        await self._ensure_uploaded(node)
        agent = await self.pool.open_rpc(node, [self.settings.remote_python, self._sidecar_path,
                                                "agent", "--lease", self.lease_file(node)])
        self._agents[node] = agent
        return agent

    async def _call(self, node: str, cmd: str, *, wait: float = 0.0, **args: Any) -> Any:
        """One sidecar-agent request on ``node`` (a broken agent or connection is replaced on
        the next call; a failure surfaces as NodeUnreachable / RemoteCommandError)."""
        agent = await self._agent(node)
        try:
            return await agent.call(cmd, {**args, "wait": wait},
                                    timeout=self.settings.command_timeout_s + wait)
        except NodeUnreachable:
            agent.close()
            self._agents.pop(node, None)
            raise

    async def _poll_node(self, node: str) -> dict[str, dict[str, Any]]:
        out = await self._call(node, "status", root=self._root)
        # Only this node's sidecars (a shared run root lists every node's dirs).
        return {entry["dir"]: entry for entry in out["jobs"]
                if entry["spec"].get("node") == node}

    async def _control(self, node: str, rank: RankRun, control: dict[str, Any],
                       wait: float) -> dict[str, Any]:
        control = {**control, "seq": self._next_seq(rank.dir)}
        return await self._call(node, "control", dir=rank.dir, control=control, wait=wait)

    async def _kill(self, node: str, jobdir: str) -> None:
        """Checkpoint-signal then SIGKILL whatever a sidecar dir still runs (best effort)."""
        try:
            await self._call(node, "kill", dir=jobdir, wait=self.settings.ckpt_grace_s)
        except _REMOTE_ERRORS as exc:
            log.warning("kill %s on %s failed: %s", jobdir, node, exc)

    async def _await_fence(self, node: str) -> None:
        """Wait until sidecars on an unreachable ``node`` must have fenced themselves."""
        since = self._unreachable.setdefault(node, self.now())
        if self.settings.lease_s <= 0:
            log.error("node %s unreachable and fencing is disabled: its jobs may still run",
                      node)
            return
        remaining = since + self.settings.fail_after - self.now()
        if remaining > 0:
            log.warning("node %s unreachable: waiting %.1f s for its sidecars to fence",
                        node, remaining)
            await asyncio.sleep(remaining)

    # ------------------------------------------------------------------ start-up / reconcile
    async def _ensure_started(self) -> None:
        if self._started:
            return
        self._started = True
        names = [n.name for n in self.cluster.nodes]
        results = await asyncio.gather(*(self._poll_node(n) for n in names),
                                       return_exceptions=True)
        statuses: dict[str, dict[str, dict[str, Any]]] = {}
        for name, res in zip(names, results, strict=True):
            if isinstance(res, BaseException):
                if not isinstance(res, _REMOTE_ERRORS):
                    raise res
                log.warning("node %s unreachable at start: %s", name, res)
                self._unreachable.setdefault(name, self.now())
            else:
                statuses[name] = res
        self._status = statuses
        await self._reconcile(statuses)

    async def _reconcile(self, statuses: Mapping[str, Mapping[str, dict[str, Any]]]) -> None:
        by_job: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for node, entries in statuses.items():
            for entry in entries.values():
                job_id = entry["spec"].get("job_id")
                if not isinstance(job_id, str):
                    continue
                by_job.setdefault(job_id, []).append((node, entry))
                seq = entry["control"].get("seq") or 0
                self._seq[entry["dir"]] = max(self._seq.get(entry["dir"], 0), int(seq))
        stale: list[tuple[str, str]] = []
        for job_id, items in by_job.items():
            gen = max(int(e["control"].get("gen") or 0) for _, e in items)
            self._gen[job_id] = gen
            latest = {n: e for n, e in items if int(e["control"].get("gen") or 0) == gen}
            stale += [(n, e["dir"]) for n, e in items
                      if int(e["control"].get("gen") or 0) != gen and e["sidecar_alive"]]
            nranks = int(next(iter(latest.values()))["control"].get("nranks") or 1)
            complete = len(latest) == nranks and all(
                e["state"].get("phase") == "completed" and e["files"].get("done", True)
                for e in latest.values())
            running = len(latest) == nranks and all(
                e["sidecar_alive"] and e["child_alive"] and e["state"].get("phase") == "running"
                and e["control"].get("action") == "run" for e in latest.values())
            kind = "completed" if complete else "running" if running else "partial"
            if kind == "partial":
                stale += [(n, e["dir"]) for n, e in latest.items() if e["sidecar_alive"]
                          or e["child_alive"]]
            if kind != "partial":
                self._found[job_id] = FoundJob(job_id, gen, kind, latest)
            log.info("reconcile: job %r gen %d on %s: %s", job_id, gen, sorted(latest), kind)
        await asyncio.gather(*(self._kill(n, d) for n, d in stale))
        self._claims_open = any(f.kind == "running" for f in self._found.values())

    def _run_from_found(self, found: FoundJob, spec: JobSpec | None) -> JobRun:
        run = JobRun(spec=spec or JobSpec(id=found.job_id, submit_time=0, requested_gpus=1,
                                          total_iterations=1.0),
                     gen=found.gen, state="running", adopted=True)
        for node, entry in found.ranks.items():
            ctl = entry["control"]
            ckpt = entry["files"].get("checkpoint")
            run.ranks[node] = RankRun(
                node=node, rank=int(ctl.get("rank") or 0), gpus=tuple(ctl.get("gpus") or ()),
                dir=entry["dir"], target=None,
                start_done=float(ckpt["done"]) if isinstance(ckpt, dict) else 0.0,
                files=dict(ctl.get("files") or {}), sidecar_alive=bool(entry["sidecar_alive"]))
        return run

    async def _close_claims(self, stops: dict[str, tuple[JobRun, set[str]]] | None = None
                            ) -> None:
        """Stop found jobs the new engine did not start where they run."""
        orphans = {job_id: (self._run_from_found(f, None), set[str]())
                   for job_id, f in self._found.items() if f.kind == "running"}
        self._found.clear()
        self._claims_open = False
        if stops is not None:
            stops.update(orphans)
        elif orphans:
            await asyncio.gather(*(self._stop_run(run) for run, _ in orphans.values()))

    # ------------------------------------------------------------------ events
    async def _next_events(self) -> tuple[float, list[Event]] | None:
        await self._ensure_started()
        while True:
            if self._claims_open and self._delivered:
                await self._close_claims()
            if self._end_requested.is_set():
                log.info("run ended on request with jobs %s outstanding",
                         sorted(self._outstanding))
                return None
            t = self.now()
            limit = self.settings.deadline_s
            if limit is not None and t > limit:
                log.error("deadline %.1f s reached with jobs %s outstanding", limit,
                          sorted(self._outstanding))
                return None
            events: list[Event] = list(self._pending_events)
            self._pending_events.clear()
            if t >= self._next_poll:
                events += await self._poll(t)
                self._next_poll = self.now() + self.settings.poll_interval_s
            while (self._arrival_idx < len(self._arrivals)
                   and self._arrivals[self._arrival_idx].submit_time <= t):
                spec = self._arrivals[self._arrival_idx]
                self._arrival_idx += 1
                self._outstanding.add(spec.id)
                events.append(JobArrival(time=t, job=spec))
            while self._external and self._external[0][0] <= t:
                events.append(heapq.heappop(self._external)[2])
            timers = False
            while self._timers and self._timers[0] <= t:
                heapq.heappop(self._timers)
                timers = True
            if timers and not any(isinstance(e, Timer) for e in events):
                events.append(Timer(time=t, name="round"))
            if events:
                self._delivered = True
                self.event_log += [(t, e) for e in events]
                return t, events
            if self._finished():
                return None
            wake = [self._next_poll]
            if self._arrival_idx < len(self._arrivals):
                wake.append(self._arrivals[self._arrival_idx].submit_time)
            if self._external:
                wake.append(self._external[0][0])
            if self._timers:
                wake.append(self._timers[0])
            await asyncio.sleep(max(0.005, min(wake) - self.now()))

    def _finished(self) -> bool:
        """Nothing can happen any more: like the simulator's empty heap.

        Policy timers only count while jobs are outstanding: AFS-P asks to be woken at its next
        2-hour unit boundary, which must not keep a finished run alive for hours.
        """
        if self._arrival_idx < len(self._arrivals) or self._external or self._pending_events:
            return False
        if any(r.state in ("running", "completed_unreported") for r in self._runs.values()):
            return False
        if not self._outstanding:
            return True
        # Pending jobs: a failed node may come back, a timer may start them.
        return not (self._down or self._timers)

    async def _poll(self, t: float) -> list[Event]:
        """Poll every node; turn what changed into events (and restart crashed jobs)."""
        names = [n.name for n in self.cluster.nodes]
        results = await asyncio.gather(*(self._poll_node(n) for n in names),
                                       return_exceptions=True)
        events: list[Event] = []
        for name, res in zip(names, results, strict=True):
            if isinstance(res, BaseException):
                if not isinstance(res, _REMOTE_ERRORS):
                    raise res
                since = self._unreachable.setdefault(name, t)
                if name not in self._down and t - since >= self.settings.fail_after:
                    log.error("node %s unreachable for %.1f s: reporting it failed (%s)",
                              name, t - since, res)
                    self._down.add(name)
                    events.append(NodeFailure(time=t, node=name))
                continue
            self._unreachable.pop(name, None)
            self._status[name] = res
            if name in self._down:
                await self._clean_node(name, res)
                self._down.discard(name)
                log.warning("node %s reachable again: reporting it recovered", name)
                events.append(NodeRecovery(time=t, node=name))
        for job_id, run in list(self._runs.items()):
            if run.state == "completed_unreported":
                run.state = "completed"
                self._outstanding.discard(job_id)
                events.append(JobCompletion(time=t, job_id=job_id))
            elif run.state == "running":
                events += await self._evaluate(run, t)
        return events

    async def _clean_node(self, node: str, entries: Mapping[str, dict[str, Any]]) -> None:
        """A node came back: stop whatever still runs there that no running job owns."""
        owned = {r.dir for run in self._runs.values() if run.state == "running"
                 for r in run.ranks.values() if r.node == node}
        stale = [d for d, e in entries.items()
                 if d not in owned and (e["sidecar_alive"] or e["child_alive"])]
        await asyncio.gather(*(self._kill(node, d) for d in stale))

    def _rank_state(self, run: JobRun, rank: RankRun, entry: dict[str, Any] | None) -> str:
        if entry is None:
            return "lost"
        state = entry["state"]
        phase = state.get("phase")
        if state.get("gen") != run.gen:
            return "running" if entry["sidecar_alive"] else "lost"
        if phase == "completed":
            return "completed" if entry["files"].get("done", True) else "failed"
        if phase in ("failed", "fenced", "exited", "stopped"):
            return "failed"
        if not entry["sidecar_alive"]:
            return "lost"
        return "running"  # includes a child that just died and is not reaped yet

    async def _evaluate(self, run: JobRun, t: float) -> list[Event]:
        job_id = run.spec.id
        if any(node in self._unreachable for node in run.ranks):
            return []  # judged when the node answers or is reported failed
        entries = {node: self._status.get(node, {}).get(rank.dir)
                   for node, rank in run.ranks.items()}
        states = {node: self._rank_state(run, rank, entries[node])
                  for node, rank in run.ranks.items()}
        if states and all(s == "completed" for s in states.values()):
            run.state = "completed"
            run.ranks = {}
            self._outstanding.discard(job_id)
            return [JobCompletion(time=t, job_id=job_id)]
        bad = {n: s for n, s in states.items() if s in ("failed", "lost")}
        if bad:
            detail = {n: (entries[n] or {}).get("state", {}).get("exit_code") for n in bad}
            return await self._recover(run, t, f"ranks {bad} (exit codes {detail})")
        self._measure(run, entries, t)
        return []

    def _measure(self, run: JobRun, entries: Mapping[str, dict[str, Any] | None],
                 t: float) -> None:
        """Re-anchor the job's progress on what its ranks report."""
        job = self._jobs.get(run.spec.id)
        if job is None or not self.launcher.accounts_progress or not run.ranks:
            return
        wall = time.time()
        total_gpus = sum(len(r.gpus) for r in run.ranks.values())
        current = {r.files.get("checkpoint") for r in run.ranks.values()}
        total = sum(v for p, v in run.ckpt.items() if p not in current)
        fresh = True
        started = 0.0
        for node, rank in run.ranks.items():
            entry = entries.get(node) or {}
            progress = (entry.get("files") or {}).get("progress")
            state = entry.get("state") or {}
            cap = rank.target if rank.target is not None else run.spec.work
            if (isinstance(progress, dict) and state.get("phase") == "completed"
                    and state.get("gen") == run.gen):
                total += min(float(progress["done"]), cap)  # this rank is done, others not yet
            elif isinstance(progress, dict) and progress.get("pid") == state.get("child_pid"):
                share = job.rate * len(rank.gpus) / total_gpus if total_gpus else 0.0
                done = float(progress["done"]) + share * max(0.0, wall - float(progress["time"]))
                total += min(done, cap)
                started = max(started, float(progress.get("started", 0.0)))
                if not rank.startup_measured and state.get("child_started_at"):
                    rank.startup_measured = True
                    self.startup_latencies.append(
                        max(0.0, float(progress["started"]) - float(state["child_started_at"])))
            else:
                fresh = False
                total += rank.start_done
        job.settle(max(t, job.anchor_time))
        job.done = min(run.spec.work, total)
        if fresh and run.restart_t0 is not None:
            latency = max(0.0, started - run.restart_t0)
            run.restart_t0 = None
            self.restart_latencies.append(latency)
            self.capabilities = dataclasses.replace(
                self.capabilities, restart_latency_s=statistics.median(self.restart_latencies))

    def _startup_estimate(self) -> float:
        if self.startup_latencies:
            return statistics.median(self.startup_latencies)
        return self.settings.startup_estimate_s

    # ------------------------------------------------------------------ failures
    async def _recover(self, run: JobRun, t: float, reason: str) -> list[Event]:
        """A rank crashed or lost its sidecar: restart the job from its checkpoints."""
        job = self._jobs.get(run.spec.id)
        run.restarts += 1
        log.warning("job %r failed (%s), restart %d/%d", run.spec.id, reason, run.restarts,
                    self.settings.max_restarts)
        if job is None or job.allocation is None or run.restarts > self.settings.max_restarts:
            await self._stop_run(run)
            run.state = "failed"
            self.failed[run.spec.id] = reason
            self._outstanding.discard(run.spec.id)
            if job is not None:
                job.settle(max(t, job.anchor_time))
                job.rate = 0.0
            # The engine frees the job's GPUs and records it as failed.
            return [JobFailure(time=t, job_id=run.spec.id, reason=reason)]
        before = self._reported_progress(run)
        keep = {n for n, r in run.ranks.items() if r.sidecar_alive}
        run.restart_t0 = time.time()
        await self._stop_run(run, keep)
        ckpts = await self._read_ckpts(job.spec, list(job.allocation.placement))
        job.settle(max(t, job.anchor_time))
        self._set_done(run, job, ckpts)
        job.lost_work += max(0.0, before - job.done)
        await self._launch(job, job.allocation, ckpts)
        return [Timer(time=t, name=f"restart:{run.spec.id}")]

    def _reported_progress(self, run: JobRun) -> float:
        """Iterations the job's ranks last reported (a lower bound of what they had done):
        the base for lost-work accounting after a crash, free of the model's extrapolation."""
        current = {r.files.get("checkpoint") for r in run.ranks.values()}
        total = sum(v for p, v in run.ckpt.items() if p not in current)
        for node, rank in run.ranks.items():
            entry = self._status.get(node, {}).get(rank.dir) or {}
            progress = (entry.get("files") or {}).get("progress")
            done = float(progress["done"]) if isinstance(progress, dict) else 0.0
            total += max(done, rank.start_done)
        return total

    # ------------------------------------------------------------------ stop / start
    async def _stop_run(self, run: JobRun, keep: set[str] | frozenset[str] = frozenset()
                        ) -> None:
        """Checkpoint-stop every rank; sidecars on ``keep`` nodes stay for a restart."""
        async def one(node: str, rank: RankRun) -> None:
            action = "stop" if node in keep else "exit"
            try:
                res = await self._control(node, rank, {"action": action},
                                          self.settings.stop_wait)
            except _REMOTE_ERRORS as exc:
                log.warning("stop %s on %s: %s", rank.dir, node, exc)
                rank.sidecar_alive = False
                await self._await_fence(node)
                return
            rank.sidecar_alive = bool(res["alive"]) and action == "stop"
            if not res["ok"]:
                # Not acknowledged: the sidecar is gone (its child may be an orphan) or stuck.
                await self._kill(node, rank.dir)
                rank.sidecar_alive = False

        await asyncio.gather(*(one(n, r) for n, r in run.ranks.items()))
        run.ranks = {n: r for n, r in run.ranks.items() if n in keep and r.sidecar_alive}
        if run.state == "running":
            run.state = "stopped"

    async def _read_ckpts(self, spec: JobSpec, prefer: Sequence[str]) -> dict[str, float]:
        """Every rank checkpoint of ``spec`` (path -> done), read through a reachable node."""
        if not self.launcher.accounts_progress:
            return {}
        patterns = self.launcher.checkpoint_patterns(spec)
        candidates = [*prefer, *(n.name for n in self.cluster.nodes)]
        seen: set[str] = set()
        for node in candidates:
            if node in seen or node in self._down or node in self._unreachable:
                continue
            seen.add(node)
            try:
                out = await self._call(node, "read", paths=patterns, glob=True)
            except _REMOTE_ERRORS as exc:
                log.warning("reading checkpoints of %r on %s: %s", spec.id, node, exc)
                continue
            return {p: float(v["done"]) for p, v in out["files"].items()
                    if isinstance(v, dict) and "done" in v}
        run = self._runs.get(spec.id)
        log.error("no node could read the checkpoints of %r; using the last known", spec.id)
        return dict(run.ckpt) if run else {}

    def _set_done(self, run: JobRun, job: ActiveJob | None, ckpts: dict[str, float]) -> None:
        run.ckpt = dict(ckpts)
        if job is None or not self.launcher.accounts_progress:
            return
        job.done = min(job.spec.work, sum(ckpts.values()))
        job.last_checkpoint_done = job.done

    async def _launch(self, job: ActiveJob, alloc: JobAllocation,
                      ckpts: dict[str, float]) -> None:
        """Start every rank of ``job`` on ``alloc`` (reusing sidecars kept by a stop)."""
        spec = job.spec
        run = self._runs.setdefault(spec.id, JobRun(spec=spec))
        run.spec = spec
        gen = self._gen[spec.id] = self._gen.get(spec.id, 0) + 1
        run.gen = gen
        order = sorted(alloc.placement.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        nranks = len(order)
        total_gpus = alloc.gpus
        remaining = max(0.0, spec.work - sum(ckpts.values()))
        master = self.addresses[order[0][0]].host
        port = 20000 + int(hashlib.sha256(spec.id.encode("utf-8", "surrogatepass"))
                           .hexdigest()[:8], 16) % 20000
        sidecar_spec = {
            "protocol": sidecar_module.PROTOCOL, "job_id": spec.id,
            "lease_s": self.settings.lease_s,
            "ckpt_grace_s": self.settings.ckpt_grace_s,
            "term_grace_s": self.settings.term_grace_s,
            "checkpoint_signal": self.settings.checkpoint_signal,
        }
        kept = run.ranks
        new_ranks: dict[str, RankRun] = {}

        async def one(rank_idx: int, node: str, gpus: tuple[int, ...]) -> None:
            path = self.launcher.checkpoint_file(spec, rank_idx)
            start_done = ckpts.get(path, 0.0) if path else 0.0
            target = start_done + remaining * len(gpus) / total_gpus
            cmd = self.launcher.worker(spec, rank_idx, nranks, target)
            env = {**cmd.env, "GPUPLAN_JOB_ID": spec.id, "GPUPLAN_RANK": str(rank_idx),
                   "GPUPLAN_NRANKS": str(nranks), "GPUPLAN_GEN": str(gen),
                   "NODE_RANK": str(rank_idx), "NNODES": str(nranks),
                   "MASTER_ADDR": master, "MASTER_PORT": str(port)}
            _no_nul([*cmd.argv, *env.keys(), *env.values()], f"job {spec.id!r}")
            control = {"action": "run", "gen": gen, "rank": rank_idx, "nranks": nranks,
                       "gpus": list(gpus), "argv": list(cmd.argv), "env": env, "cwd": None,
                       "files": dict(cmd.files)}
            rank = kept.get(node)
            res: dict[str, Any] | None = None
            if rank is None:
                rank = RankRun(node=node, rank=rank_idx, gpus=gpus,
                               dir=self.job_dir(spec.id, node))
            try:
                if rank.sidecar_alive:
                    res = await self._control(node, rank, control, self.settings.command_timeout_s)
                    if not res["alive"]:
                        res = None
                if res is None:
                    bundle = {"spec": {**sidecar_spec, "node": node,
                                       "lease_file": self.lease_file(node)},
                              "control": {**control, "seq": self._next_seq(rank.dir)}}
                    res = await self._call(node, "launch", dir=rank.dir, bundle=bundle,
                                           wait=self.settings.command_timeout_s)
            except _REMOTE_ERRORS as exc:
                log.warning("launch of %r rank %d on %s failed: %s", spec.id, rank_idx, node,
                            exc)
                res = {"ok": False, "alive": False}
            rank.rank, rank.gpus, rank.target = rank_idx, gpus, target
            rank.start_done, rank.files = start_done, dict(cmd.files)
            rank.sidecar_alive = bool(res.get("alive"))
            rank.startup_measured = False
            new_ranks[node] = rank

        await asyncio.gather(*(one(i, n, tuple(g)) for i, (n, g) in enumerate(order)))
        run.ranks = new_ranks
        run.state = "running"
        self._set_done(run, job, ckpts)
        job.rate = placement_rate(spec, self.cluster, alloc)
        job.resume_time = self.now() + self._startup_estimate()

    # ------------------------------------------------------------------ plans
    def _log_action(self, now: float, action: Action) -> None:
        self.action_log.append({
            "t": now, "kind": action.kind, "job": action.job_id,
            "before": action.gpus_before, "after": action.gpus_after,
            "before_placement": dict(action.before.placement) if action.before else {},
            "after_placement": dict(action.after.placement) if action.after else {},
        })

    async def _apply(self, plan: AllocationPlan, jobs: Mapping[str, ActiveJob]) -> None:
        await self._ensure_started()
        now = plan.time
        stops: dict[str, tuple[JobRun, set[str]]] = {}
        launches: list[tuple[ActiveJob, JobAllocation]] = []
        adopt: list[tuple[ActiveJob, FoundJob]] = []
        for action in plan.actions:
            if action.kind == "keep":
                continue
            job = jobs[action.job_id]
            self._jobs[job.id] = job
            self._outstanding.add(job.id)
            self._log_action(now, action)
            run = self._runs.get(job.id)
            if action.kind == "start":
                assert action.after is not None
                found = self._found.pop(job.id, None)
                if found is not None and found.kind == "completed":
                    self._runs[job.id] = JobRun(spec=job.spec, gen=found.gen,
                                                state="completed_unreported", adopted=True)
                    self.adopted.add(job.id)
                    continue
                if found is not None and found.placement == dict(action.after.placement):
                    adopt.append((job, found))
                    continue
                if found is not None:
                    stops[job.id] = (self._run_from_found(found, job.spec), set())
                if run is not None and run.ranks:
                    stops[job.id] = (run, set())
                launches.append((job, action.after))
            elif action.kind == "preempt":
                if run is not None:
                    stops[job.id] = (run, set())
            else:  # resize / migrate
                assert action.after is not None
                before = set(action.before.placement) if action.before else set()
                keep = before & set(action.after.placement)
                if run is not None:
                    stops[job.id] = (run, keep)
                launches.append((job, action.after))
        if self._claims_open:
            await self._close_claims(stops)
        wall = time.time()
        for run, _ in stops.values():
            run.restart_t0 = wall
        await asyncio.gather(*(self._stop_run(run, keep) for run, keep in stops.values()))
        t_stopped = time.time()
        starting = {job.id: list(alloc.placement) for job, alloc in launches}
        read_for = {job_id for job_id in stops if job_id in self._jobs} | set(starting)
        specs = {j: (self._jobs[j].spec) for j in read_for}
        found_ckpts = await asyncio.gather(*(
            self._read_ckpts(specs[j], starting.get(j, [])) for j in sorted(read_for)))
        ckpts = dict(zip(sorted(read_for), found_ckpts, strict=True))
        for job_id, (run, _) in stops.items():
            job = self._jobs.get(job_id)
            if job_id not in starting and job is not None:  # preempted: progress = checkpoints
                run.state = "stopped"
                self._set_done(run, job, ckpts.get(job_id, {}))
                job.rate = 0.0
        for job, found in adopt:
            run = self._run_from_found(found, job.spec)
            run.ckpt = await self._read_ckpts(job.spec, list(found.ranks))
            self._runs[job.id] = run
            self.adopted.add(job.id)
            job.rate = placement_rate(job.spec, self.cluster, job.allocation)
            job.resume_time = now
            self._measure(run, found.ranks, now)
        for job, _ in launches:
            self._runs.setdefault(job.id, JobRun(spec=job.spec)).restart_t0 = (
                wall if job.id in stops else None)
        t_read = time.time()
        await asyncio.gather(*(self._launch(job, alloc, ckpts.get(job.id, {}))
                               for job, alloc in launches))
        log.debug("plan at %.2f: %d stops %.3f s, checkpoints %.3f s, %d launches %.3f s",
                  now, len(stops), t_stopped - wall, t_read - t_stopped, len(launches),
                  time.time() - t_read)

    async def _evict(self, job: ActiveJob) -> None:
        await self._ensure_started()
        self._jobs[job.id] = job
        run = self._runs.get(job.id)
        self.action_log.append({"t": self.now(), "kind": "evict", "job": job.id,
                                "before": job.gpus, "after": 0, "before_placement": {},
                                "after_placement": {}})
        if run is None:
            return
        await self._stop_run(run)
        run.state = "stopped"
        self._set_done(run, job, await self._read_ckpts(job.spec, []))
        job.rate = 0.0
