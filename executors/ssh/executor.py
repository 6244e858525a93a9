"""The SSH executor: runs the engine's plans on real nodes through per-job sidecars.

Design (why it looks like this):

* **One sidecar per job and node** (:mod:`.agent`, uploaded to every node) is the training
  process's parent. The engine never signals a training process directly; it writes the desired
  state (``control.json``) and the sidecar acts and acknowledges. Resize, migrate and preempt
  are all "checkpoint-stop, then start on the new GPUs" (``capabilities.resize == "restart"``);
  on nodes a job keeps, the wrapper stays and only the training process restarts (SideCar).
  With ``SshSettings.in_place_resize`` (and a launcher that supports it) the executor declares
  ``resize == "in_place"`` and resizes a single-node job on its node without a restart, EDL
  style (:mod:`.inplace`); any other resize still restarts, logged and counted in
  ``resize_log`` (a degradation is never silent).
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
* **GPU inventory and health** (:mod:`.gpus`): NVML through each node's agent, alongside the
  status poll; jobs are bound by GPU UUID where known, and a node whose GPUs turn unusable is
  reported as ``NodeFailure`` at once and as ``NodeRecovery`` when whole again (``gpu_log``).
* **Engine restarts**: everything lives in files on the nodes. A new executor with the same
  ``run_root`` lists the sidecars, and when the new engine starts a job on exactly the placement
  it already runs on, the job is adopted without a restart; otherwise it is checkpoint-stopped
  and started where the engine wants it. Sidecars nobody claims in the first plan are stopped.

The engine API is synchronous; the executor runs its own asyncio loop (asyncssh, or the local
transport's subprocesses) inside its calls.

Modules: this one is the :class:`~gpuplan.executors.base.Executor` (events, plans, failures);
:mod:`.plans` applies plans (stops, adoptions, in-place resizes, launches);
:mod:`.remote` installs and talks to the sidecars; :mod:`.gpus` binds and checks GPUs;
:mod:`.accounting` turns their status into progress; :mod:`.launchers` builds what each rank
runs; :mod:`.state` holds settings and records.
Latencies, the restart budget and outcome events live in the shared
:class:`~gpuplan.executors.progress_core.ProgressCore`, which this executor holds.
methods, so it must not be called from a thread that already runs an event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import json
import logging
import statistics
import threading
import time
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from gpuplan.models import (
    ActiveJob,
    AllocationPlan,
    Cluster,
    Event,
    JobAllocation,
    JobArrival,
    JobSpec,
    NodeFailure,
    NodeRecovery,
    Timer,
    placement_rate,
)

from ..base import Executor, ExecutorCapabilities
from ..progress_core import ArrivalQueue, ProgressCore, WakeTimers
from .accounting import measure_progress, rank_state, reported_progress
from .gpus import NodeGpus
from .launchers import CommandLauncher, Launcher, StandinLauncher, WorkerCommand, safe_name
from .plans import PlanApplier
from .remote import (
    REMOTE_ERRORS,
    SIDECAR_DIGEST,
    SIDECAR_SOURCE,
    UPLOAD_SCRIPT,
    SidecarNodes,
    UnsafeRunRoot,
)
from .rpc import NodeAddress
from .state import FoundJob, JobRun, RankRun, SshSettings, classify_found, run_from_found

__all__ = [
    "SIDECAR_DIGEST",
    "SIDECAR_SOURCE",
    "UPLOAD_SCRIPT",
    "CommandLauncher",
    "FoundJob",
    "JobRun",
    "Launcher",
    "RankRun",
    "SshExecutor",
    "SshSettings",
    "StandinLauncher",
    "UnsafeRunRoot",
    "WorkerCommand",
    "safe_name",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


class SshExecutor(Executor, PlanApplier):
    """Runs plans on SSH-reachable nodes (see the module docstring).

    ``nodes`` maps every node name of ``cluster`` to its address. ``jobs`` are submitted at
    their ``submit_time`` (seconds after the executor's time origin); ``events`` (capacity
    changes, ...) are delivered at their time. ``state_dir`` (engine side) keeps the time origin
    so a restarted engine continues the same clock. ``transport``: how the nodes' agents are
    reached, an :class:`~.pool.SshPool` (the default, built from ``settings``; needs the
    ``ssh`` extra) or the single server's local transport
    (:class:`gpuplan.executors.local.transport.LocalTransport`), which has its interface.
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
        transport: Any = None,
    ) -> None:
        missing = [n.name for n in cluster.nodes if n.name not in nodes]
        if missing:
            raise ValueError(f"no SSH address for nodes {missing}")
        self.cluster = cluster
        self.addresses = dict(nodes)
        self.launcher = launcher
        self.settings = settings
        if transport is None:
            from .pool import SshPool  # asyncssh: the 'ssh' extra (MissingExtra without it)

            transport = SshPool(
                self.addresses,
                known_hosts=settings.known_hosts,
                client_keys=settings.client_keys,
                connect_timeout_s=settings.connect_timeout_s,
                ssh_config=settings.ssh_config,
            )
        self.pool = transport
        in_place = settings.in_place_resize and launcher.resizes_in_place
        self.core = ProgressCore(
            ExecutorCapabilities(
                resize="in_place" if in_place else "restart",
                pin_gpus=True,
                preempt_modes=("checkpoint",),
                restart_latency_s=settings.restart_estimate_s,
            ),
            max_restarts=settings.max_restarts,
        )
        root = settings.run_root.rstrip("/") or "/"
        self.nodes = SidecarNodes(self.pool, settings, root, self.now, self.addresses)
        self.gpus = NodeGpus(cluster)
        """UUID binding and GPU health per node (NVML through the agents; docs/ssh.md)."""
        self.gpu_log = self.gpus.log
        self.nodes.bind = self.gpus.devices
        self._next_inventory = 0.0
        self._loop = asyncio.new_event_loop()
        self._origin_mono = time.monotonic() - (time.time() - self._load_origin(state_dir))
        self._arrivals = ArrivalQueue(jobs, order=lambda s: (s.submit_time, s.id))
        self._external: list[tuple[float, int, Event]] = []
        for i, event in enumerate(events):
            heapq.heappush(self._external, (event.time, i, event))
        self._timers = WakeTimers()
        self._runs: dict[str, JobRun] = {}
        self._jobs: dict[str, ActiveJob] = {}
        self._gen: dict[str, int] = {}
        self._found: dict[str, FoundJob] = {}
        self._claims_open = False
        self._delivered = False
        self._started = False
        self._end_requested = threading.Event()
        self._unreachable = self.nodes.unreachable
        self._down: set[str] = set()
        self._status: dict[str, dict[str, dict[str, Any]]] = {}
        self._next_poll = 0.0
        self._pending_events: list[Event] = []
        self._outstanding: set[str] = set()
        self.adopted: set[str] = set()
        self.fenced_at_start: set[str] = set()
        """Jobs found fenced at start-up (their lease ran out during the hand-over): not
        adoptable, they restart from their checkpoints."""
        self.action_log: list[dict[str, Any]] = []
        self.event_log: list[tuple[float, Event]] = []
        self.in_place_pauses: list[float] = []
        """Measured pause (request -> acknowledgement, s) of every in-place resize."""
        self.resize_log: list[dict[str, Any]] = []
        """Every resize with ``mode`` (in_place / restart), ``pause_s`` when measured here,
        and why a restart was used on an in-place executor."""

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
        self._timers.push(time)

    def shutdown(self, stop_jobs: bool = True) -> None:
        """Checkpoint-stop every job this executor runs (``stop_jobs``), then disconnect."""
        if stop_jobs and not self._loop.is_closed():
            self._run(self._stop_all())
        self.detach()

    async def _stop_all(self) -> None:
        runs = [r for r in self._runs.values() if r.ranks]
        await asyncio.gather(*(self.nodes.stop_run(r) for r in runs))

    def end_run(self) -> None:
        """Make the engine's run return at its next step, leaving every job running (an
        operator's hand-over to another engine). Safe to call from any thread."""
        self._end_requested.set()

    def detach(self) -> None:
        """Disconnect and leave everything running (engine hand-over or crash simulation)."""
        if self._loop.is_closed():
            return
        self.nodes.close_agents()
        self._run(self.pool.close())
        self._loop.close()

    def __enter__(self) -> SshExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    # ------------------------------------------------------------------ remote helpers
    # ------------------------------------------------------------------ what the core measures
    @property
    def capabilities(self) -> ExecutorCapabilities:  # type: ignore[override]
        """Capabilities; ``restart_latency_s`` is the median measured restart latency and
        ``in_place_latency_s`` the median measured in-place pause."""
        caps = self.core.capabilities
        if self.in_place_pauses:
            caps = dataclasses.replace(
                caps, in_place_latency_s=statistics.median(self.in_place_pauses)
            )
        return caps

    @property
    def failed(self) -> dict[str, str]:
        """Jobs that failed past their restart budget: job id -> reason."""
        return self.core.failures

    @property
    def restart_latencies(self) -> list[float]:
        return self.core.restart_latencies

    @property
    def startup_latencies(self) -> list[float]:
        return self.core.start_latencies

    def restarts_of(self, job_id: str) -> int:
        """Unplanned restarts of ``job_id`` so far (crashes restarted from the checkpoint)."""
        return self.core.restarts_of(job_id)

    # ------------------------------------------------------------------ remote helpers
    def lease_file(self, node: str) -> str:
        """Per-node lease file (see :meth:`SidecarNodes.lease_file`)."""
        return self.nodes.lease_file(node)

    def job_dir(self, job_id: str, node: str) -> str:
        """The sidecar directory of ``job_id``'s rank on ``node``."""
        return self.nodes.job_dir(job_id, node)

    # ------------------------------------------------------------------ start-up / reconcile
    async def _ensure_started(self) -> None:
        if self._started:
            return
        self._started = True
        names = [n.name for n in self.cluster.nodes]
        results = await asyncio.gather(
            *(self.nodes.poll_node(n) for n in names), return_exceptions=True
        )
        statuses: dict[str, dict[str, dict[str, Any]]] = {}
        for name, res in zip(names, results, strict=True):
            if isinstance(res, BaseException):
                if not isinstance(res, REMOTE_ERRORS):
                    raise res
                log.warning("node %s unreachable at start: %s", name, res)
                self._unreachable.setdefault(name, self.now())
            else:
                statuses[name] = res
        self._status = statuses
        await self._reconcile(statuses)

    async def _reconcile(self, statuses: Mapping[str, Mapping[str, dict[str, Any]]]) -> None:
        found = classify_found(statuses)
        for jobdir, seq in found.seqs.items():
            self.nodes.seq[jobdir] = max(self.nodes.seq.get(jobdir, 0), seq)
        self._gen.update(found.gens)
        self._found.update(found.found)
        if found.fenced:
            self.fenced_at_start |= found.fenced
            log.warning(
                "jobs %s fenced themselves before this executor renewed their nodes' "
                "leases (lease ages %s, lease_s %.1f s): they restart from their "
                "checkpoints instead of being adopted",
                sorted(found.fenced),
                {
                    n: None if a is None else round(a, 2)
                    for n, a in sorted(self.nodes.lease_ages.items())
                },
                self.settings.lease_s,
            )
        await asyncio.gather(*(self.nodes.kill(n, d) for n, d in found.stale))
        self._claims_open = any(f.kind == "running" for f in self._found.values())

    async def _close_claims(self, stops: dict[str, tuple[JobRun, set[str]]] | None = None) -> None:
        """Stop found jobs the new engine did not start where they run."""
        orphans = {
            job_id: (run_from_found(f, None), set[str]())
            for job_id, f in self._found.items()
            if f.kind == "running"
        }
        self._found.clear()
        self._claims_open = False
        if stops is not None:
            stops.update(orphans)
        elif orphans:
            await asyncio.gather(*(self.nodes.stop_run(run) for run, _ in orphans.values()))

    # ------------------------------------------------------------------ events
    async def _next_events(self) -> tuple[float, list[Event]] | None:
        await self._ensure_started()
        while True:
            if self._claims_open and self._delivered:
                await self._close_claims()
            if self._end_requested.is_set():
                log.info("run ended on request with jobs %s outstanding", sorted(self._outstanding))
                return None
            t = self.now()
            limit = self.settings.deadline_s
            if limit is not None and t > limit:
                log.error(
                    "deadline %.1f s reached with jobs %s outstanding",
                    limit,
                    sorted(self._outstanding),
                )
                return None
            events: list[Event] = list(self._pending_events)
            self._pending_events.clear()
            if t >= self._next_poll:
                events += await self._poll(t)
                self._next_poll = self.now() + self.settings.poll_interval_s
            for spec in self._arrivals.due(t):
                self._outstanding.add(spec.id)
                events.append(JobArrival(time=t, job=spec))
            while self._external and self._external[0][0] <= t:
                events.append(heapq.heappop(self._external)[2])
            timers = self._timers.fire(t)
            if timers and not any(isinstance(e, Timer) for e in events):
                events.append(Timer(time=t, name="round"))
            if events:
                self._delivered = True
                self.event_log += [(t, e) for e in events]
                return t, events
            if self._finished():
                return None
            wake = [self._next_poll]
            arrival, timer = self._arrivals.next_time(), self._timers.next_time()
            if arrival is not None:
                wake.append(arrival)
            if self._external:
                wake.append(self._external[0][0])
            if timer is not None:
                wake.append(timer)
            await asyncio.sleep(max(0.005, min(wake) - self.now()))

    def _finished(self) -> bool:
        """Nothing can happen any more: like the simulator's empty heap.

        Policy timers only count while jobs are outstanding: AFS-P asks to be woken at its next
        2-hour unit boundary, which must not keep a finished run alive for hours.
        """
        if self._arrivals or self._external or self._pending_events:
            return False
        if any(r.state in ("running", "completed_unreported") for r in self._runs.values()):
            return False
        if not self._outstanding:
            return True
        # Pending jobs: a failed node may come back, a timer may start them.
        return not (self._down or self.gpus.out or self._timers)

    async def _poll(self, t: float) -> list[Event]:
        """Poll every node; turn what changed into events (and restart crashed jobs)."""
        names = [n.name for n in self.cluster.nodes]
        inventory = None  # asked alongside the status poll: it must not delay events
        if self.settings.inventory_interval_s > 0 and t >= self._next_inventory:
            inventory = asyncio.ensure_future(self._ask_inventory())
            self._next_inventory = t + self.settings.inventory_interval_s
        results = await asyncio.gather(
            *(self.nodes.poll_node(n) for n in names), return_exceptions=True
        )
        events: list[Event] = []
        for name, res in zip(names, results, strict=True):
            if isinstance(res, BaseException):
                if not isinstance(res, REMOTE_ERRORS):
                    raise res
                since = self._unreachable.setdefault(name, t)
                if name not in self._down and t - since >= self.settings.fail_after:
                    log.error(
                        "node %s unreachable for %.1f s: reporting it failed (%s)",
                        name,
                        t - since,
                        res,
                    )
                    self._down.add(name)
                    if name not in self.gpus.out:  # already reported failed for its GPUs
                        events.append(NodeFailure(time=t, node=name))
                continue
            self._unreachable.pop(name, None)
            self._status[name] = res
            if name in self._down:
                await self._clean_node(name, res)
                self._down.discard(name)
                if name not in self.gpus.out:  # else it recovers when its GPUs do
                    log.warning("node %s reachable again: reporting it recovered", name)
                    events.append(NodeRecovery(time=t, node=name))
        if inventory is not None:
            events += self.gpu_events(t, await inventory)
        for job_id, run in list(self._runs.items()):
            if run.state == "completed_unreported":
                run.state = "completed"
                self._outstanding.discard(job_id)
                self.core.complete(t, job_id)
                events += self.core.drain()
            elif run.state == "running":
                events += await self._evaluate(run, t)
        return events

    async def _ask_inventory(self) -> dict[str, Any]:
        """Every reachable node's NVML inventory answer (``gpus.py``); unreachable nodes are
        the status poll's business."""
        names = [
            n.name
            for n in self.cluster.nodes
            if n.name not in self._down and n.name not in self._unreachable
        ]
        answers = await asyncio.gather(
            *(self.nodes.call(n, "inventory") for n in names), return_exceptions=True
        )
        for answer in answers:
            if isinstance(answer, BaseException) and not isinstance(answer, REMOTE_ERRORS):
                raise answer
        return {
            n: a for n, a in zip(names, answers, strict=True) if not isinstance(a, BaseException)
        }

    def gpu_events(self, t: float, answers: Mapping[str, Any]) -> list[Event]:
        """Events for the nodes whose usability changed with these ``inventory`` answers."""
        events: list[Event] = []
        for name, answer in answers.items():
            change = self.gpus.update(name, answer, t)
            if change == "out":
                events.append(NodeFailure(time=t, node=name))
            elif change == "back":
                events.append(NodeRecovery(time=t, node=name))
        return events

    async def _clean_node(self, node: str, entries: Mapping[str, dict[str, Any]]) -> None:
        """A node came back: stop whatever still runs there that no running job owns."""
        owned = {
            r.dir
            for run in self._runs.values()
            if run.state == "running"
            for r in run.ranks.values()
            if r.node == node
        }
        stale = [
            d
            for d, e in entries.items()
            if d not in owned and (e["sidecar_alive"] or e["child_alive"])
        ]
        await asyncio.gather(*(self.nodes.kill(node, d) for d in stale))

    async def _evaluate(self, run: JobRun, t: float) -> list[Event]:
        job_id = run.spec.id
        if any(node in self._unreachable for node in run.ranks):
            return []  # judged when the node answers or is reported failed
        entries = {
            node: self._status.get(node, {}).get(rank.dir) for node, rank in run.ranks.items()
        }
        states = {node: rank_state(run, rank, entries[node]) for node, rank in run.ranks.items()}
        if states and all(s == "completed" for s in states.values()):
            run.state = "completed"
            run.ranks = {}
            self._outstanding.discard(job_id)
            self.core.complete(t, job_id)
            return self.core.drain()
        bad = {n: s for n, s in states.items() if s in ("failed", "lost")}
        if bad:
            detail = {n: (entries[n] or {}).get("state", {}).get("exit_code") for n in bad}
            return await self._recover(run, t, f"ranks {bad} (exit codes {detail})")
        self._measure(run, entries, t)
        return []

    def _measure(self, run: JobRun, entries: Mapping[str, dict[str, Any] | None], t: float) -> None:
        """Re-anchor the job's progress on what its ranks report."""
        job = self._jobs.get(run.spec.id)
        if job is None or not self.launcher.accounts_progress or not run.ranks:
            return
        measure_progress(run, job, entries, t, self.core, time.time())

    def _startup_estimate(self) -> float:
        return self.core.start_estimate(self.settings.startup_estimate_s)

    # ------------------------------------------------------------------ failures
    async def _recover(self, run: JobRun, t: float, reason: str) -> list[Event]:
        """A rank crashed or lost its sidecar: restart the job from its checkpoints."""
        job = self._jobs.get(run.spec.id)
        used = self.core.spend_restart(run.spec.id)
        log.warning(
            "job %r failed (%s), restart %d/%d",
            run.spec.id,
            reason,
            used,
            self.settings.max_restarts,
        )
        if job is None or job.allocation is None or self.core.over_budget(run.spec.id):
            await self.nodes.stop_run(run)
            run.state = "failed"
            self._outstanding.discard(run.spec.id)
            if job is not None:
                job.settle(max(t, job.anchor_time))
                job.rate = 0.0
            # The engine frees the job's GPUs and records it as failed.
            self.core.fail(t, run.spec.id, reason)
            return self.core.drain()
        before = reported_progress(run, self._status)
        keep = {n for n, r in run.ranks.items() if r.sidecar_alive}
        run.restart_t0 = time.time()
        await self.nodes.stop_run(run, keep)
        ckpts = await self._read_ckpts(job.spec, list(job.allocation.placement))
        run.ckpt = dict(ckpts)
        self.core.rewind(job, max(t, job.anchor_time), self._kept(job, ckpts), before)
        await self._launch(job, job.allocation, ckpts)
        return [Timer(time=t, name=f"restart:{run.spec.id}")]

    # ------------------------------------------------------------------ stop / start
    async def _read_ckpts(self, spec: JobSpec, prefer: Sequence[str]) -> dict[str, float]:
        """Every rank checkpoint of ``spec`` (path -> done), read through a reachable node."""
        if not self.launcher.accounts_progress:
            return {}
        patterns = self.launcher.checkpoint_patterns(spec)
        candidates = [*prefer, *(n.name for n in self.cluster.nodes)]
        found = await self.nodes.read_checkpoints(
            spec.id, patterns, [n for n in candidates if n not in self._down]
        )
        if found is not None:
            return found
        run = self._runs.get(spec.id)
        log.error("no node could read the checkpoints of %r; using the last known", spec.id)
        return dict(run.ckpt) if run else {}

    def _kept(self, job: ActiveJob, ckpts: dict[str, float]) -> float | None:
        """Progress the checkpoints keep (None when the launcher accounts none)."""
        if not self.launcher.accounts_progress:
            return None
        return min(job.spec.work, sum(ckpts.values()))

    def _set_done(self, run: JobRun, job: ActiveJob | None, ckpts: dict[str, float]) -> None:
        """Progress = the checkpoints (the job is not running)."""
        run.ckpt = dict(ckpts)
        kept = None if job is None else self._kept(job, ckpts)
        if job is None or kept is None:
            return
        job.done = kept
        job.last_checkpoint_done = job.done

    async def _launch(self, job: ActiveJob, alloc: JobAllocation, ckpts: dict[str, float]) -> None:
        """Start every rank of ``job`` on ``alloc`` (reusing sidecars kept by a stop)."""
        spec = job.spec
        run = self._runs.setdefault(spec.id, JobRun(spec=spec))
        run.spec = spec
        gen = self._gen[spec.id] = self._gen.get(spec.id, 0) + 1
        run.gen = gen
        run.ranks = await self.nodes.start_ranks(spec, run.ranks, gen, alloc, ckpts, self.launcher)
        run.state = "running"
        self._set_done(run, job, ckpts)
        job.rate = placement_rate(spec, self.cluster, alloc)
        job.resume_time = self.now() + self._startup_estimate()
