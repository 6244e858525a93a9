"""``gpuplan slurm-controller``: schedules hook-held Slurm jobs with a gpuplan policy.

How the pieces fit (and why):

* **Users submit with plain ``sbatch``.** The site's ``job_submit.lua`` (shipped in
  :mod:`gpuplan.executors.slurm`) marks engine-managed jobs (``AdminComment=gpuplan:held;gpus=N;
  min=A;max=B``), normalises their GPU request and holds them (priority 0). Slurm never starts a
  held job by itself; users cannot release it (the hook's ``slurm_job_modify`` guard).
* **The controller adopts them.** Every ``--interval`` seconds it reads ``squeue --json``: a new
  held managed job becomes a :class:`~gpuplan.models.JobSpec` (GPU range from the hook's marker,
  work from the job's ``--comment`` or its time limit) and a ``JobArrival`` for the engine.
* **The engine decides, the Slurm executor acts.** :class:`~gpuplan.executors.engine.Engine`
  runs the chosen policy and diffs plans into start/resize/migrate/preempt actions;
  :class:`~gpuplan.executors.slurm.executor.SlurmExecutor` carries them out on the *existing*
  Slurm job (update shape + release; checkpoint signal + ``requeuehold`` + update + release).
  :class:`ControllerExecutor` only adds what a daemon needs on top: adopting jobs it did not
  submit, journaling intents around every action, discovering arrivals and cancellations, and
  never ending.
* **Durable state** lives in :mod:`.journal`. **Restart** (:meth:`SlurmController._reconcile`):
  open intents are resolved against ``squeue --json`` first — a job whose checkpoint-stop was
  interrupted is brought to a safe state (held, pending) with Slurm's ``restart_cnt`` telling
  "requeued since the intent" apart from "exited after our signal, never requeued" — then every
  running managed job is adopted *as running* (no restart) and every held one as pending with its
  journaled progress. Any error inside the loop does the same thing in-process (crash-only
  design: there is one recovery path, and it is the one exercised at every start).
* **Fail-open**: the controller writes a heartbeat file; :func:`fail_open_check` (run by a timer
  on the Slurm controller host, or ``--fail-open-check --watch``) releases every engine-held job to
  Slurm's own scheduler once the heartbeat is older than ``--stale-after`` (``docs/controller.md``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.models import (
    ActiveJob,
    AllocationPlan,
    Checkpointing,
    Cluster,
    Elasticity,
    Event,
    GpuplanError,
    InputError,
    JobAllocation,
    JobArrival,
    JobFailure,
    JobSpec,
    ThroughputProfile,
    Timer,
    placement_rate,
)
from gpuplan.solver_core.registry import make_policy

from ..engine import Engine
from ..slurm.cli import (
    ControllerUnavailable,
    InvalidJobId,
    JobNotPending,
    SlurmCli,
    SlurmError,
    SlurmJob,
    gpus_in_tres,
)
from ..slurm.executor import (
    LaunchContext,
    SlurmExecutor,
    _Shape,
    _Tracked,
    cluster_from_slurm,
    file_key,
)
from .journal import TERMINAL_STATES, ActionIntent, JobRow, JobUpdate, Journal

log = logging.getLogger(__name__)

MARK = "gpuplan:"
"""Prefix of the hook's ``AdminComment`` marker (``gpuplan:<state>;gpus=N;min=A;max=B``)."""
FAILOPEN = "failopen"
REJECTED = "rejected"
"""Marker state of a job the controller could not schedule and released to Slurm's own
scheduler (out-of-range hook values, a fault while adopting it): not managed, not taken back."""
MAX_WORK = 1e15
"""Largest ``work=`` (iterations) a job may state; the hook enforces the same bound."""
MAX_DURATION_S = 10 * 365 * 86400.0
"""Largest ``duration=`` (ten years); the hook enforces the same bound."""
MAX_RATE = 1e9
"""Largest ``rate=`` (iterations per second per GPU); the hook enforces the same bound."""
NO_LIMIT = 0xFFFFFFFE
STOP_KINDS = frozenset({"resize", "migrate", "preempt", "evict", "stop"})
RUNNING_STATES = frozenset({"RUNNING", "CONFIGURING", "SUSPENDED", "SIGNALING", "RESIZING",
                            "STAGE_OUT"})


# ------------------------------------------------------------------------------- markers


def marker(admin_comment: str) -> tuple[str, dict[str, str]] | None:
    """``gpuplan:held;gpus=2;min=1;max=4`` -> ("held", {"gpus": "2", ...}); None if unmarked."""
    if not admin_comment.startswith(MARK):
        return None
    head, _, rest = admin_comment[len(MARK):].partition(";")
    return head, dict(re.findall(r"([A-Za-z_]+)=([^,;]*)", rest))


def with_marker_state(admin_comment: str, state: str) -> str:
    """The same marker with another state word (``held`` <-> ``failopen``)."""
    found = marker(admin_comment)
    if found is None:
        return admin_comment
    _, _, rest = admin_comment[len(MARK):].partition(";")
    return f"{MARK}{state};{rest}" if rest else f"{MARK}{state}"


def comment_options(comment: str) -> dict[str, str]:
    """The job's ``--comment gpuplan:min=1,max=8,work=5000`` options (the hook's convention:
    ``,`` or ``;`` between ``key=value`` fields)."""
    if not comment.startswith("gpuplan"):
        return {}
    return dict(re.findall(r"([A-Za-z_]+)=([^,;]*)", comment[len("gpuplan"):]))


def engine_id(slurm_id: int) -> str:
    """The engine's id for a Slurm job (stable across controller restarts)."""
    return f"slurm-{slurm_id}"


def fingerprint(sj: SlurmJob) -> str:
    """What a Slurm job *is* (owner, name, comment, command, directory, output): stable across
    requeues — unlike its submit time, which Slurm resets at every requeue — so a journal row
    can tell its job from a later one that got the same id after slurmctld lost its state."""
    raw = sj.raw
    text = "\0".join(str(x) for x in (sj.user_id, sj.name, sj.comment, raw.get("command"),
                                      raw.get("current_working_directory"),
                                      raw.get("standard_output")))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _partitions(sj: SlurmJob) -> set[str]:
    return {p for p in sj.partition.split(",") if p}


def is_managed(sj: SlurmJob, partitions: Iterable[str] = ()) -> bool:
    """Marked by the hook, not released by fail-open, in one of ``partitions`` (all if empty),
    and not submitted by a library-driven :class:`SlurmExecutor` (comment ``gpuplan:run=...``:
    that engine owns it)."""
    found = marker(sj.admin_comment)
    if found is None or found[0] in (FAILOPEN, REJECTED) or "run" in comment_options(sj.comment):
        return False
    wanted = set(partitions)
    return not wanted or bool(_partitions(sj) & wanted)


def is_failopen(sj: SlurmJob, partitions: Iterable[str] = ()) -> bool:
    found = marker(sj.admin_comment)
    wanted = set(partitions)
    return found is not None and found[0] == FAILOPEN and (
        not wanted or bool(_partitions(sj) & wanted))


def _requested_type(sj: SlurmJob) -> str | None:
    for spec in (sj.tres_per_node, sj.tres_per_job):
        match = re.search(r"gpu:([^:=,(]+):\d+", spec or "")
        if match:
            return match.group(1)
    return None


def requested_gpus(sj: SlurmJob) -> int:
    """GPUs the job asks for: the hook's ``gpus=`` field, else its TRES."""
    found = marker(sj.admin_comment)
    if found is not None and found[1].get("gpus", "").isdigit():
        return int(found[1]["gpus"])
    per_node = gpus_in_tres(sj.tres_per_node)
    if per_node:
        return per_node * max(1, int(sj.raw.get("node_count") or 1))
    return gpus_in_tres(sj.tres_per_job)


def spec_from_slurm(sj: SlurmJob, *, origin: float, cluster: Cluster,
                    default_duration_s: float) -> JobSpec:
    """The engine's view of a hook-marked Slurm job.

    * GPU range: the hook's marker (``min``/``max``; rigid when equal);
    * work: ``--comment gpuplan:...,work=ITERATIONS[,rate=ITER_PER_S_PER_GPU]`` or
      ``duration=SECONDS`` (at the requested size); else the job's time limit; else
      ``default_duration_s`` — length-aware policies (SRTF, AFS-L) need *some* estimate, and the
      time limit is the one every Slurm user already gives;
    * GPU type: only when the job asked for one (``--gpus=a100:2``).
    """
    found = marker(sj.admin_comment)
    fields = found[1] if found else {}
    opts = comment_options(sj.comment)
    requested = requested_gpus(sj)
    capacity = cluster.total_gpus
    if not 1 <= requested <= capacity:
        raise InputError(f"Slurm job {sj.job_id} requests {requested} GPUs; the managed "
                         f"partition has {capacity}", field="gpus")
    lo = _bounded_int(fields.get("min"), requested, 1, capacity, sj.job_id, "min")
    hi = _bounded_int(fields.get("max"), requested, 1, capacity, sj.job_id, "max")
    if not lo <= requested <= hi:
        raise InputError(f"Slurm job {sj.job_id}: GPU request {requested} is outside its range "
                         f"min={lo} max={hi}", field="min")
    gtype = _requested_type(sj)
    types = {n.gpu_type for n in cluster.nodes}
    ref = gtype if gtype in types else sorted(types)[0]
    rate = _bounded_float(opts.get("rate"), 1.0, MAX_RATE, sj.job_id, "rate")
    throughput = ThroughputProfile.linear(rate, reference_gpu=ref)
    work: dict[str, float] = {}
    if opts.get("work"):
        work["total_iterations"] = _bounded_float(opts["work"], None, MAX_WORK, sj.job_id,
                                                  "work")
    elif opts.get("duration"):
        work["duration"] = _bounded_float(opts["duration"], None, MAX_DURATION_S, sj.job_id,
                                          "duration")
    else:
        limit = sj.raw.get("time_limit")
        minutes = int(limit) if isinstance(limit, int | float) else 0
        work["duration"] = minutes * 60.0 if 0 < minutes < NO_LIMIT else default_duration_s
    submit = sj.raw.get("submit_time")
    submit_wall = float(submit) if isinstance(submit, int | float) else time.time()
    user = str(sj.raw.get("user_name") or sj.user_id or "")
    return JobSpec(
        id=engine_id(sj.job_id), user=user, submit_time=max(0.0, submit_wall - origin),
        requested_gpus=requested,
        elasticity=Elasticity(min_gpus=lo, max_gpus=hi) if hi > lo else None,
        throughput=throughput, gpu_type=gtype, checkpoint=Checkpointing(on_signal=True),
        model=opts.get("model") or None, **work,
    )


def _bounded_int(text: str | None, default: int, lo: int, hi: int, job_id: int,
                 field: str) -> int:
    """A hook-supplied integer in ``[lo, hi]`` (``default`` when absent); else InputError."""
    if text is None or text == "":
        return default
    if not text.isdigit() or len(text) > 9 or not lo <= int(text) <= hi:
        raise InputError(f"Slurm job {job_id}: {field}={text[:20]!r} must be an integer in "
                         f"[{lo}, {hi}]", field=field)
    return int(text)


def _bounded_float(text: str | None, default: float | None, hi: float, job_id: int,
                   field: str) -> float:
    """A hook-supplied number in ``(0, hi]`` (``default`` when absent); else InputError."""
    if text is None or text == "":
        if default is None:
            raise InputError(f"Slurm job {job_id}: {field} is empty", field=field)
        return default
    try:
        value = float(text[:40])
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= hi) or len(text) > 40:
        raise InputError(f"Slurm job {job_id}: {field}={text[:20]!r} must be a number in "
                         f"(0, {hi:g}]", field=field)
    return value


def _counts(alloc: JobAllocation | None) -> dict[str, int]:
    return {n: len(g) for n, g in alloc.placement.items()} if alloc is not None else {}


def _shape_counts(shape: _Shape | None) -> dict[str, int]:
    if shape is None or not shape.nodes:
        return {}
    if shape.per_node is not None:
        return dict.fromkeys(shape.nodes, shape.per_node)
    base, extra = divmod(shape.total, len(shape.nodes))
    return {n: base + (1 if i < extra else 0) for i, n in enumerate(shape.nodes)}


def _slurm_shape(sj: SlurmJob) -> dict[str, int]:
    """node -> GPUs of a running job (per-node TRES; an uneven per-job count is split evenly,
    which is all ``squeue`` tells without ``scontrol show job -d``)."""
    nodes = list(sj.nodes)
    if not nodes:
        return {}
    per_node = gpus_in_tres(sj.tres_per_node)
    if per_node:
        return dict.fromkeys(nodes, per_node)
    total = gpus_in_tres(sj.tres_per_job)
    base, extra = divmod(total, len(nodes))
    return {n: base + (1 if i < extra else 0) for i, n in enumerate(nodes)}


# ------------------------------------------------------------------------------- heartbeat


def write_heartbeat(path: Path, info: Mapping[str, Any]) -> None:
    """Replace the heartbeat file atomically (a watchdog never reads half a file); 0600, and
    the temporary file is created exclusively without following a planted symlink."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # left by a process that died between create and rename
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({**info, "time": time.time()}))
    os.replace(tmp, path)


def heartbeat_age(path: Path, now: float | None = None) -> float:
    """Seconds since the controller last wrote its heartbeat (inf when missing or unreadable:
    a controller that never ran is as absent as a dead one)."""
    try:
        stamp = float(json.loads(path.read_text())["time"])
    except (OSError, ValueError, KeyError, TypeError):
        return float("inf")
    return max(0.0, (time.time() if now is None else now) - stamp)


# ------------------------------------------------------------------------------- failpoints


class Failpoints:
    """Fault injection for the crash-recovery tests: ``GPUPLAN_FAILPOINT=cli.signal@1`` makes the
    process SIGKILL *itself* right after the first successful checkpoint signal.

    Names: ``intent`` (plan intents committed, nothing done), ``applied`` (plan done, outcome
    committed), ``cli.<verb>`` after a successful Slurm command (verbs: signal, requeue, release,
    update, hold, cancel). A real SIGKILL at a precise point, so the tests exercise exactly the
    recovery a crash would need; unset (production), every check is a dict lookup.
    """

    def __init__(self, spec: str | None) -> None:
        self.targets: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        for item in (spec or "").split(","):
            name, _, count = item.strip().partition("@")
            if name:
                self.targets[name] = int(count or 1)

    def hit(self, name: str) -> None:
        if name not in self.targets:
            return
        self.counts[name] = self.counts.get(name, 0) + 1
        if self.counts[name] == self.targets[name]:
            log.warning("failpoint %s@%d: SIGKILL", name, self.counts[name])
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)


def _verb(argv: Sequence[str]) -> str:
    exe = os.path.basename(argv[0])
    if exe == "scancel":
        return "signal" if any(a.startswith("--signal") for a in argv) else "cancel"
    if exe == "scontrol" and len(argv) > 1:
        return {"requeuehold": "requeue", "requeue": "requeue"}.get(argv[1], argv[1])
    return exe


class FailpointCli(SlurmCli):
    """:class:`SlurmCli` that reports each successful command to :class:`Failpoints`."""

    def __init__(self, failpoints: Failpoints, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.failpoints = failpoints

    def run(self, argv: Sequence[str], *, retry: bool = False, input_text: str | None = None
            ) -> str:
        out = super().run(argv, retry=retry, input_text=input_text)
        self.failpoints.hit(f"cli.{_verb(argv)}")
        return out


# ------------------------------------------------------------------------------- settings


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """What ``gpuplan slurm-controller`` was started with (times in seconds)."""

    policy: str
    state_db: Path
    partitions: tuple[str, ...] = ()
    interval_s: float = 2.0
    heartbeat: Path | None = None
    """Default: ``<state_db>.heartbeat``."""
    default_duration_s: float = 3600.0
    stop_timeout_s: float = 60.0
    """How long a job may take to checkpoint and exit after the signal before it is requeued
    (killed) anyway."""
    max_stall_s: float = 600.0
    """The heartbeat stops when the main loop has not come round for this long, so a wedged
    controller fails open like a dead one."""
    error_backoff_s: float = 5.0
    retention_days: float = 14.0
    seed: int = 0
    """Seed of the policy's random choices (AFS-P's coin, Themis' leftovers)."""

    @property
    def heartbeat_path(self) -> Path:
        return self.heartbeat or self.state_db.with_name(self.state_db.name + ".heartbeat")

    @property
    def work_dir(self) -> Path:
        return self.state_db.with_name(self.state_db.name + ".d")


class _Recycle(Exception):
    """The cluster changed shape (nodes added/removed): rebuild engine and executor."""


def _never_submit(ctx: LaunchContext) -> list[str]:
    raise GpuplanError(f"the controller never submits jobs (asked for {ctx.spec.id!r})")


# ------------------------------------------------------------------------------- executor


class ControllerExecutor(SlurmExecutor):
    """:class:`SlurmExecutor` for jobs users submitted (the controller adopts, never submits).

    Adds: adoption of existing Slurm jobs (pending or running), journaled intents/outcomes
    around every action, discovery of new and cancelled jobs on each poll, keeping the job's own
    GPU-type form (22.05 refuses to turn an untyped ``gres:gpu:2`` into ``gres:gpu:a100:3``),
    and no end: it runs until :meth:`shutdown`.

    It uses a few of :class:`SlurmExecutor`'s internals (``_tracked``, ``_stop``, ``_poll``,
    ``_shape``); see ``docs/controller.md`` for the public hooks that would replace them.
    """

    def __init__(self, cluster: Cluster, *, cli: SlurmCli, journal: Journal, run_id: int,
                 settings: ControllerSettings, failpoints: Failpoints,
                 on_poll: Callable[[float], list[Event]] | None = None) -> None:
        settings.work_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(cluster, (), cli=cli, state_dir=settings.work_dir,
                         command=_never_submit, protocol="exit",
                         poll_interval_s=settings.interval_s,
                         stop_timeout_s=settings.stop_timeout_s, max_wall_s=float("inf"),
                         run_tag="controller")
        self.journal = journal
        self.run_id = run_id
        self.settings = settings
        self.failpoints = failpoints
        self.on_poll = on_poll
        self._epoch = journal.origin  # one engine clock across controller restarts
        self._typed: dict[str, bool] = {}
        self._shutdown = False
        self.plans = 0

    # ------------------------------------------------------------------ lifecycle
    def shutdown(self) -> None:
        """Stop handing out events: :meth:`next_events` returns None at its next check."""
        self._shutdown = True

    def _all_done(self) -> bool:
        return self._shutdown

    def _poll(self, now: float) -> list[Event]:
        events = super()._poll(now)
        if self.on_poll is not None:
            events.extend(self.on_poll(now))
        return events

    # ------------------------------------------------------------------ adoption
    def tracked(self, eid: str) -> _Tracked | None:
        return self._tracked.get(eid)

    def tracked_ids(self) -> list[str]:
        return list(self._tracked)

    def adopt_pending(self, spec: JobSpec, sj: SlurmJob, *, stopped_at: float = 0.0
                      ) -> _Tracked:
        """Track a held Slurm job the engine will start (``_prepare`` updates its shape,
        ``_release`` sets ``StartTime=now`` and releases it)."""
        tracked = self._tracked.get(spec.id)
        if tracked is None:
            tracked = self._tracked[spec.id] = _Tracked(spec=spec, key=file_key(spec.id))
        tracked.spec = spec
        tracked.slurm_id = sj.job_id
        tracked.running = False
        tracked.completed = False
        # StartTime=now before release: harmless for a never-run job, and a requeued one would
        # otherwise wait cred_expire (120 s by default).
        tracked.requeued = True
        tracked.stopped_at = max(tracked.stopped_at, stopped_at)
        tracked.restart_count = sj.restart_count
        self._typed[spec.id] = _requested_type(sj) is not None
        return tracked

    def adopt_running(self, job: ActiveJob, sj: SlurmJob) -> _Tracked:
        """Track a job that runs in Slurm as running (no restart)."""
        shape = _slurm_shape(sj)
        counts = set(shape.values())
        typed = _requested_type(sj)
        tracked = self._tracked[job.id] = _Tracked(spec=job.spec, key=file_key(job.id))
        tracked.job = job
        tracked.slurm_id = sj.job_id
        tracked.shape = _Shape(nodes=tuple(sorted(shape)),
                               per_node=counts.pop() if len(counts) == 1 else None,
                               total=sum(shape.values()), gpu_type=typed)
        tracked.running = True
        tracked.restart_count = sj.restart_count
        self._typed[job.id] = typed is not None
        return tracked

    def stop_now(self, spec: JobSpec, sj: SlurmJob, reason: str) -> _Tracked:
        """Checkpoint-stop a job outside any plan and leave it held and pending (the executor's
        own stop: signal, wait for the exit, ``requeuehold``, wait for PENDING)."""
        tracked = self.adopt_pending(spec, sj)
        tracked.running = True
        tracked.requeued = False
        self._stop([tracked], self.now(), graceful=True, reasons={spec.id: reason})
        return tracked

    def forget(self, eid: str, reason: str) -> None:
        """The job left the engine's hands (cancelled, vanished): stop watching it."""
        tracked = self._tracked.get(eid)
        if tracked is not None:
            tracked.completed = True
            tracked.running = False
        self.failures[eid] = reason

    def _shape(self, alloc: JobAllocation) -> _Shape:
        shape = super()._shape(alloc)
        if not self._typed.get(alloc.job_id, True) and shape.gpu_type is not None:
            shape = dataclasses.replace(shape, gpu_type=None)
        return shape

    # ------------------------------------------------------------------ journaled actions
    def _restart_counts(self, eids: Iterable[str]) -> dict[str, int]:
        """Slurm's restart_cnt right now for the jobs about to be stopped: the reference a
        restarted controller compares against to know whether the stop got as far as the
        requeue."""
        ids = {self._tracked[e].slurm_id: e for e in eids
               if e in self._tracked and self._tracked[e].slurm_id is not None}
        if not ids:
            return {}
        jobs = self._retry(lambda: self.cli.jobs(list(ids)))  # type: ignore[arg-type]
        return {ids[j.job_id]: j.restart_count for j in jobs}  # type: ignore[union-attr]

    def apply(self, plan: AllocationPlan, jobs: Mapping[str, Any]) -> None:
        # A migrate within the same per-node counts never gets here: Slurm does not pin GPU
        # indices (capabilities.pin_gpus False), so the engine only relabels such moves.
        actions = [a for a in plan.actions if a.kind != "keep"]
        if not actions:
            return
        counts = self._restart_counts(a.job_id for a in actions if a.kind != "start")
        intents = [ActionIntent(
            engine_id=a.job_id, slurm_id=self._slurm_id_of(a.job_id), kind=a.kind,
            before=_counts(a.before), after=_counts(a.after),
            restart_count=counts.get(a.job_id, self._rc_of(a.job_id))) for a in actions]
        try:
            plan_json = plan.model_dump_json(exclude={"stats"})
        except ValueError:  # a model_construct'ed plan the serializer rejects: keep the actions
            plan_json = json.dumps({"time": plan.time, "policy": plan.policy})
        _, ids = self.journal.record_plan(self.run_id, plan.time, plan.policy, plan_json,
                                          intents)
        self.plans += 1
        self.failpoints.hit("intent")
        try:
            super().apply(plan.model_copy(update={"actions": actions}), jobs)
        except BaseException as err:
            self.journal.settle(ids, "failed", f"{type(err).__name__}: {err}"[:2000])
            raise
        self.journal.settle(ids, "applied")
        self.failpoints.hit("applied")

    def _stop(self, items: list[_Tracked], now: float, *, graceful: bool,
              reasons: Mapping[str, str]) -> None:
        """Every checkpoint-stop — planned, eviction, reconciliation or the base executor's
        "running behind our back" path — gets its own intent, with the restart count just
        before the signal."""
        live = [t for t in items if t.slurm_id is not None and not t.completed]
        if not live:
            super()._stop(items, now, graceful=graceful, reasons=reasons)
            return
        counts = self._restart_counts(t.spec.id for t in live)
        ids = self.journal.intend(self.run_id, [ActionIntent(
            engine_id=t.spec.id, slurm_id=t.slurm_id, kind="stop",
            before=_shape_counts(t.shape),
            after={}, restart_count=counts.get(t.spec.id, t.restart_count)) for t in live])
        try:
            super()._stop(items, now, graceful=graceful, reasons=reasons)
        except BaseException as err:
            self.journal.settle(ids, "failed", f"{type(err).__name__}: {err}"[:2000])
            raise
        self.journal.settle(ids, "applied", ", ".join(
            f"{t.spec.id}: {reasons.get(t.spec.id, 'stop')}" for t in live)[:2000])

    def _slurm_id_of(self, eid: str) -> int | None:
        tracked = self._tracked.get(eid)
        return tracked.slurm_id if tracked is not None else None

    def _rc_of(self, eid: str) -> int | None:
        tracked = self._tracked.get(eid)
        return tracked.restart_count if tracked is not None else None

    def trim(self, keep: int = 200) -> None:
        """A daemon must not grow without bound: keep only recent run/action records."""
        for name in ("segments", "actions", "restart_latencies", "start_latencies"):
            items = getattr(self, name)
            if len(items) > keep:
                del items[:-keep]


# ------------------------------------------------------------------------------- controller


class SlurmController:
    """The ``slurm-controller`` daemon: reconcile, then loop engine <-> Slurm until stopped."""

    def __init__(self, settings: ControllerSettings, cli: SlurmCli | None = None) -> None:
        self.settings = settings
        self.failpoints = Failpoints(os.environ.get("GPUPLAN_FAILPOINT"))
        self.cli = cli or FailpointCli(self.failpoints, timeout=30.0, unavailable_retry_s=0.0)
        self.journal: Journal | None = None
        self.run_id = 0
        self._stop = threading.Event()
        self._tick: float | None = None
        """When the control loop last completed a cycle (a poll or a decision); None until the
        first one. The heartbeat is written only while this is recent, so a controller that
        crashes (or crash-loops under a supervisor) before completing a cycle never looks
        alive to the fail-open watchdog."""
        self._executor: ControllerExecutor | None = None
        self._engine: Engine | None = None
        self._records_seen = 0
        self._last_touch = 0.0
        self._warned_failopen = False
        self._cluster_nodes: set[str] = set()
        self._nodes_checked = 0.0
        make_policy(settings.policy)  # fail fast on a bad name, before touching anything

    # ------------------------------------------------------------------ entry point
    def run(self) -> int:
        """Run until SIGTERM/SIGINT; returns the process exit code."""
        self.journal = Journal(self.settings.state_db)
        self.run_id = self.journal.begin_run(self.settings.policy)
        log.info("controller run %d: policy %s, journal %s (schema %d), heartbeat %s",
                 self.run_id, self.settings.policy, self.settings.state_db,
                 self.journal.schema_version, self.settings.heartbeat_path)
        self.journal.prune(self.settings.retention_days * 86400.0)
        previous = {signal.SIGTERM: signal.getsignal(signal.SIGTERM),
                    signal.SIGINT: signal.getsignal(signal.SIGINT)}
        for sig in previous:
            signal.signal(sig, self._on_signal)
        beat = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)
        beat.start()
        exit_ = "clean"
        try:
            backoff = self.settings.error_backoff_s
            while not self._stop.is_set():
                try:
                    self._cycle()
                    backoff = self.settings.error_backoff_s
                except _Recycle as why:
                    log.info("cluster changed (%s): rebuilding from Slurm", why)
                except Exception as err:
                    # Crash-only: drop all in-memory state and come back through reconcile,
                    # the same path a restart takes. Anything (a Slurm error, a damaged
                    # journal row, a bug) lands here instead of ending the process; the
                    # heartbeat is not refreshed by a failed cycle, so a fault that persists
                    # past --max-stall hands every held job to Slurm through the watchdog.
                    log.error("controller cycle failed: %s: %s; reconciling again in %.0f s",
                              type(err).__name__, err, backoff,
                              exc_info=not isinstance(err, (SlurmError, GpuplanError,
                                                            OSError)))
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 60.0)
        except BaseException as err:
            exit_ = f"error: {type(err).__name__}: {err}"[:500]
            raise
        finally:
            self._stop.set()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self.journal is not None:
                with contextlib.suppress(Exception):
                    self.journal.end_run(self.run_id, exit_)
                self.journal.close()
        return 0

    def _on_signal(self, signum: int, _frame: object) -> None:
        log.info("%s: finishing the current step, then exiting (jobs keep running)",
                 signal.Signals(signum).name)
        self._stop.set()
        if self._executor is not None:
            self._executor.shutdown()

    def _heartbeat_loop(self) -> None:
        path = self.settings.heartbeat_path
        period = max(0.2, min(self.settings.interval_s, 5.0))
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "state_db": str(self.settings.state_db)}
        while not self._stop.is_set():
            if self._tick is None:
                self._stop.wait(period)
                continue
            stalled = time.monotonic() - self._tick
            if stalled < self.settings.max_stall_s:
                try:
                    write_heartbeat(path, {**info, "run": self.run_id, "stalled_s": stalled})
                except OSError as err:
                    log.warning("cannot write heartbeat %s: %s", path, err)
            else:
                log.error("main loop stalled for %.0f s: heartbeat withheld (fail-open)", stalled)
            self._stop.wait(period)

    # ------------------------------------------------------------------ one cycle
    def _cycle(self) -> None:
        assert self.journal is not None
        cluster = self._cluster()
        executor = ControllerExecutor(cluster, cli=self.cli, journal=self.journal,
                                      run_id=self.run_id, settings=self.settings,
                                      failpoints=self.failpoints, on_poll=self._on_poll)
        engine = Engine(cluster, make_policy(self.settings.policy, seed=self.settings.seed),
                        executor,
                        sample_interval_s=None)
        self._executor, self._engine = executor, engine
        self._records_seen = 0
        self._cluster_nodes = {n.name for n in cluster.nodes}
        self._nodes_checked = time.monotonic()
        try:
            if self._stop.is_set():
                return
            self._reconcile(engine, executor)
            self._sync(engine, executor.now())
            self._tick = time.monotonic()
            executor.wake_at(executor.now())  # first decision right away, not at the next event
            while not self._stop.is_set():
                batch = executor.next_events()
                if batch is None:
                    break
                now, events = batch
                engine.handle(now, events)
                self._sync(engine, now)
                self._tick = time.monotonic()
        finally:
            self._executor = self._engine = None

    def _cluster(self) -> Cluster:
        nodes = self._retry_ctld(self.cli.nodes)
        wanted = set(self.settings.partitions)
        names = [n.name for n in nodes if n.gpus > 0 and (
            not wanted or wanted & set(n.raw.get("partitions") or []))]
        if not names:
            raise GpuplanError(f"no GPU node in partitions {sorted(wanted) or 'any'}")
        return cluster_from_slurm(self.cli, names)

    def _retry_ctld(self, fn: Callable[[], Any]) -> Any:
        """Call ``fn`` until slurmctld answers (or we are told to stop)."""
        delay = 0.5
        while True:
            try:
                return fn()
            except ControllerUnavailable as err:
                if self._stop.is_set():
                    raise
                log.warning("slurmctld unavailable (%s); retrying in %.1f s", err, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 10.0)

    # ------------------------------------------------------------------ reconcile
    def _all_jobs(self) -> dict[int, SlurmJob]:
        return {j.job_id: j for j in self._retry_ctld(lambda: self.cli.jobs())}

    def _managed(self, jobs: Mapping[int, SlurmJob]) -> list[SlurmJob]:
        return sorted((j for j in jobs.values() if is_managed(j, self.settings.partitions)),
                      key=lambda j: j.job_id)

    def _spec(self, sj: SlurmJob, row: JobRow | None, cluster: Cluster) -> JobSpec:
        if row is not None and row.spec is not None:
            return JobSpec.model_validate(row.spec)
        return spec_from_slurm(sj, origin=self.journal.origin,  # type: ignore[union-attr]
                               cluster=cluster,
                               default_duration_s=self.settings.default_duration_s)

    def _reconcile(self, engine: Engine, ex: ControllerExecutor) -> None:
        """Bring journal, Slurm and a fresh engine into agreement (start and after any error).

        1. re-take fail-open jobs still waiting in Slurm's queue;
        2. resolve every open intent (see :meth:`_resolve`);
        3. adopt: running managed jobs as running (no restart), held ones as pending with their
           journaled progress; finished ones are recorded; journal jobs Slurm forgot are
           ``gone``.
        """
        journal = self.journal
        assert journal is not None
        t0 = time.monotonic()
        jobs = self._all_jobs()
        self._retake_failopen(jobs.values())
        rows = journal.jobs()
        opened = journal.open_actions()
        by_job: dict[str, list[Any]] = {}
        for act in opened:
            by_job.setdefault(act.engine_id, []).append(act)
        for eid, acts in by_job.items():
            slurm_id = next((a.slurm_id for a in acts if a.slurm_id is not None), None)
            if slurm_id is None:
                journal.settle([a.id for a in acts], "reconciled", "no Slurm job")
                continue
            kinds = sorted({a.kind for a in acts})
            counts = [a.restart_count for a in acts if a.restart_count is not None]
            detail = self._resolve(kinds, min(counts) if counts else None, jobs.get(slurm_id),
                                   rows.get(eid), ex, engine.cluster)
            journal.settle([a.id for a in acts], "reconciled", detail)
            log.info("open intents %s of %s (Slurm %d): %s", "+".join(kinds), eid, slurm_id,
                     detail)
        jobs = self._settled_jobs()
        self._retake_failopen(jobs.values())
        now = ex.now()
        wall = time.time()
        adopted_running = adopted_pending = 0
        for sj in self._managed(jobs):
            eid = engine_id(sj.job_id)
            row = rows.get(eid)
            if row is not None and row.fingerprint != fingerprint(sj):
                row = None  # an older job that had the same id (add_job archives it)
            if row is not None and row.state in TERMINAL_STATES:
                continue
            try:
                spec = self._spec(sj, row, engine.cluster)
            except (GpuplanError, ValueError) as err:
                self._reject(sj, str(err))
                continue
            if row is None:
                self._add(sj, spec, "pending")
                row = journal.job(eid)
            if sj.finished:
                self._record_end(sj, eid)
                continue
            if sj.state == "PENDING" and not sj.held:
                sj = self._hold(sj)
            if sj.state in RUNNING_STATES and self._adopt_running(engine, ex, spec, sj, row,
                                                                  now, wall):
                adopted_running += 1
                continue
            if sj.state in RUNNING_STATES:
                # Cannot be placed in the engine's books (node not usable, GPUs double
                # counted): checkpoint-stop it and let the policy place it again.
                ex.stop_now(spec, sj, "reconcile: not adoptable")
                sj = self.cli.job(sj.job_id) or sj
            if sj.finished:
                self._record_end(sj, eid)
                continue
            if spec.min_gpus > engine.cluster.total_gpus:
                self._reject(sj, f"needs {spec.min_gpus} GPUs; the cluster has "
                             f"{engine.cluster.total_gpus}")
                continue
            ex.adopt_pending(spec, sj, stopped_at=wall if sj.restart_count else 0.0)
            done = row.done if row is not None else 0.0
            engine.pending[eid] = ActiveJob(spec=spec, status="pending", done=done,
                                            last_checkpoint_done=done, anchor_time=now,
                                            resume_time=now, pending_since=now)
            adopted_pending += 1
        # Journal jobs that are no longer the engine's: forgotten by Slurm, run to their end
        # under Slurm's scheduler after a fail-open, or unmarked by an operator.
        by_eid = {engine_id(j.job_id): j for j in jobs.values()}
        managed = {engine_id(j.job_id) for j in self._managed(jobs)}
        for eid, row in rows.items():
            if row.state not in ("pending", "running") or eid in managed:
                continue
            sj = by_eid.get(eid)
            if sj is None:
                journal.set_state(eid, "gone", "Slurm no longer knows the job (down longer than "
                                  "MinJobAge?); its end is unknown")
                log.warning("%s (Slurm %d) is gone from Slurm", eid, row.slurm_id)
            elif is_failopen(sj):
                journal.set_state(eid, "failopen", f"{sj.state} under Slurm's own scheduler "
                                  "(released by the fail-open watchdog)")
            elif marker(sj.admin_comment) is None:
                journal.set_state(eid, "failed", "taken out of the engine (AdminComment "
                                  "cleared)")
        log.info("reconciled in %.2f s: %d open intents, %d running adopted, %d pending",
                 time.monotonic() - t0, len(opened), adopted_running, adopted_pending)

    def _resolve(self, kinds: Sequence[str], rc0: int | None, sj: SlurmJob | None,
                 row: JobRow | None, ex: ControllerExecutor, cluster: Cluster) -> str:
        """Make a job's interrupted actions safe. Only stops need work: a stop that did not get
        as far as the requeue (Slurm's restart count unchanged since the intent) may have sent
        the checkpoint signal, so the job is either still running its old incarnation (maybe
        checkpointing) or has exited — which Slurm reports as COMPLETED, exactly like a job that
        finished. Finishing the stop (signal again, ``requeuehold``) is always safe: a job that
        had in fact reached its end resumes from its final checkpoint and exits at once. A stop
        that got past the requeue, and any start, left the job in a state the adoption handles
        as found (held, released, running or done)."""
        what = "+".join(kinds)
        if sj is None:
            return f"{what}: Slurm no longer knows the job"
        if not set(kinds) & STOP_KINDS:
            return f"{what}: Slurm says {sj.state}; adopted as found"
        if rc0 is not None and sj.restart_count > rc0:
            return (f"{what}: requeued since the intent (restart count {rc0} -> "
                    f"{sj.restart_count}), now {sj.state}; adopted as found")
        if sj.state in ("CANCELLED", "PENDING"):
            return f"{what}: {sj.state}, nothing to finish"
        spec = self._spec(sj, row, cluster)
        ex.stop_now(spec, sj, f"reconcile {what}")
        after = self.cli.job(sj.job_id)
        return (f"{what}: was {sj.state} at restart count {sj.restart_count}; stop finished "
                f"(checkpoint signal + requeuehold) -> "
                f"{after.state if after else 'gone'}{' held' if after and after.held else ''}")

    def _settled_jobs(self, timeout_s: float = 60.0) -> dict[int, SlurmJob]:
        """All jobs, after managed ones in transit (COMPLETING) have landed."""
        deadline = time.monotonic() + timeout_s
        while True:
            jobs = self._all_jobs()
            moving = [j for j in self._managed(jobs) if j.state == "COMPLETING"]
            if not moving or time.monotonic() > deadline:
                return jobs
            time.sleep(0.3)

    @staticmethod
    def _submit_wall(sj: SlurmJob) -> float:
        value = sj.raw.get("submit_time")
        return float(value) if isinstance(value, int | float) else 0.0

    def _add(self, sj: SlurmJob, spec: JobSpec | None, state: str, reason: str = "") -> None:
        assert self.journal is not None
        self.journal.add_job(engine_id(sj.job_id), sj.job_id, fingerprint(sj),
                             self._submit_wall(sj),
                             None if spec is None else spec.model_dump(mode="json"), state,
                             restart_count=sj.restart_count, reason=reason)

    def _hold(self, sj: SlurmJob) -> SlurmJob:
        """Hold a released-but-not-started managed job; if it started meanwhile, say so."""
        try:
            self.cli.hold(sj.job_id)
        except JobNotPending:
            pass
        except InvalidJobId:
            return sj
        return self.cli.job(sj.job_id) or sj

    def _adopt_running(self, engine: Engine, ex: ControllerExecutor, spec: JobSpec,
                       sj: SlurmJob, row: JobRow | None, now: float, wall: float) -> bool:
        shape = _slurm_shape(sj)
        if not shape or any(n not in engine.free or len(engine.free[n]) < c
                            for n, c in shape.items()):
            return False
        placement = {n: tuple(sorted(engine.free[n])[:c]) for n, c in shape.items()}
        alloc = JobAllocation.fast(spec.id, placement)
        rate = placement_rate(spec, engine.cluster, alloc)
        done = 0.0
        if row is not None:
            # It kept running while nobody watched: extrapolate at its modelled speed.
            done = row.done + (rate * max(0.0, wall - row.updated) if row.state == "running"
                               else 0.0)
        job = ActiveJob(spec=spec, status="running", done=min(done, spec.work),
                        last_checkpoint_done=row.done if row else 0.0, anchor_time=now,
                        resume_time=now, first_start=now, segment_start=now)
        job.set_allocation(alloc)
        job.rate = rate
        engine.running[spec.id] = job
        engine._acquire(job)  # the engine's own GPU bookkeeping (no public adopt API yet)
        ex.adopt_running(job, sj)
        return True

    def _record_end(self, sj: SlurmJob, eid: str) -> None:
        assert self.journal is not None
        if sj.state == "COMPLETED" and (sj.exit_code or 0) == 0:
            self.journal.set_state(eid, "completed", "completed in Slurm")
        else:
            self.journal.set_state(eid, "failed", f"{sj.state} {sj.reason}".strip())

    def _reject(self, sj: SlurmJob, reason: str) -> None:
        """Fail open for one job: journal why, then hand it to Slurm's own scheduler (marker
        ``rejected``, so neither this controller nor the watchdog takes it back). A job the
        engine cannot schedule must never sit held for ever."""
        assert self.journal is not None
        eid = engine_id(sj.job_id)
        self._add(sj, None, "rejected", reason[:500])
        try:
            release_to_slurm(self.cli, sj, REJECTED)
        except SlurmError as err:
            log.error("%s (Slurm %d) cannot be scheduled (%s) and could not be released to "
                      "Slurm: %s; retrying next poll", eid, sj.job_id, reason, err)
            self.journal.set_state(eid, "pending", f"release after rejection failed: {err}")
            return
        log.warning("%s (Slurm %d) cannot be scheduled: %s; released to Slurm's own scheduler",
                    eid, sj.job_id, reason)

    def _retake_failopen(self, jobs: Iterable[SlurmJob]) -> None:
        """Jobs the fail-open watchdog released come back under the engine: a pending one is
        held again, a running one keeps running (and is adopted as running); both get the
        ``held`` marker back, which makes them managed again."""
        for sj in jobs:
            if sj.finished or not is_failopen(sj, self.settings.partitions):
                continue
            if not self._warned_failopen and self._executor is not None \
                    and self._executor.plans:
                log.warning("fail-open released jobs while this controller was alive: is the "
                            "watchdog reading this controller's heartbeat (%s)?",
                            self.settings.heartbeat_path)
                self._warned_failopen = True
            try:
                if sj.state == "PENDING":
                    with contextlib.suppress(JobNotPending):
                        self.cli.hold(sj.job_id)
                self.cli.update_job(sj.job_id,
                                    AdminComment=with_marker_state(sj.admin_comment, "held"))
                log.info("took back fail-open job %d (%s)", sj.job_id, sj.state)
            except (JobNotPending, InvalidJobId):
                continue

    # ------------------------------------------------------------------ steady state
    def _on_poll(self, now: float) -> list[Event]:
        """Each executor poll: discover arrivals/cancellations, journal progress; a completed
        poll counts as a completed cycle for the heartbeat."""
        ex, engine = self._executor, self._engine
        if ex is None or engine is None:
            return []
        try:
            jobs = {j.job_id: j for j in self.cli.jobs()}
        except ControllerUnavailable as err:
            log.warning("squeue failed (%s); discovery skipped", err)
            return []
        self._retake_failopen(jobs.values())
        events: list[Event] = []
        journal = self.journal
        assert journal is not None
        for sj in self._managed(jobs):
            eid = engine_id(sj.job_id)
            tracked = ex.tracked(eid)
            if tracked is None:
                try:
                    events.extend(self._discovered(sj, engine, ex, now))
                except (SlurmError, _Recycle):
                    raise
                except Exception as err:  # the job at fault fails open; the rest are served
                    log.exception("adopting Slurm job %d failed", sj.job_id)
                    self._reject(sj, f"internal error while adopting it: "
                                     f"{type(err).__name__}: {err}")
            elif not tracked.running and not tracked.completed and sj.finished:
                reason = f"{sj.state.lower()} while pending"
                ex.forget(eid, reason)
                events.append(JobFailure(time=now, job_id=eid, reason=reason))
        by_eid = {engine_id(j.job_id): j for j in jobs.values()}
        for eid in ex.tracked_ids():
            tracked = ex.tracked(eid)
            if tracked is None or tracked.completed:
                continue
            sj = by_eid.get(eid)
            if sj is None:
                reason = "vanished from Slurm"
            elif marker(sj.admin_comment) is None:
                # An operator cleared the marker: the job is Slurm's from now on.
                reason = "taken out of the engine (AdminComment cleared)"
            else:
                continue
            ex.forget(eid, reason)
            events.append(JobFailure(time=now, job_id=eid, reason=reason))
        nodes = self._cluster_nodes_now(engine)
        if nodes is not None and nodes != self._cluster_nodes:
            raise _Recycle(f"nodes {sorted(self._cluster_nodes)} -> {sorted(nodes)}")
        self._sync(engine, now)
        self._tick = time.monotonic()
        return events

    def _discovered(self, sj: SlurmJob, engine: Engine, ex: ControllerExecutor, now: float
                    ) -> list[Event]:
        """A managed job the engine does not know yet: normally a new held job (-> arrival).
        A marked job that someone released (an admin, a bypassed hook) is held back first; one
        that already runs — released behind our back, or a fail-open job taken back — is
        adopted as running when its GPUs are free in the engine's books, else it arrives as
        pending and the executor checkpoint-stops it before placing it."""
        journal = self.journal
        assert journal is not None
        if sj.finished or sj.state not in RUNNING_STATES | {"PENDING"}:
            return []
        eid = engine_id(sj.job_id)
        row = journal.job(eid)
        if row is not None and row.state == "rejected" and row.fingerprint == fingerprint(sj):
            return []
        if sj.state == "PENDING" and not sj.held:
            sj = self._hold(sj)
            if sj.state == "PENDING" and not sj.held:
                return []
        try:
            spec = self._spec(sj, None, engine.cluster)
        except (GpuplanError, ValueError, OverflowError, MemoryError) as err:
            self._reject(sj, str(err))
            return []
        self._add(sj, spec, "pending")
        if sj.state in RUNNING_STATES and self._adopt_running(engine, ex, spec, sj, None, now,
                                                              time.time()):
            log.info("adopted running job %s (Slurm %d) on %s", eid, sj.job_id,
                     ",".join(sj.nodes))
            return [Timer(time=now, name="adopted")]
        ex.adopt_pending(spec, sj)
        log.info("new job %s (Slurm %d, %s, GPUs %d..%d)", eid, sj.job_id, sj.state,
                 spec.min_gpus, spec.max_gpus)
        return [JobArrival(time=now, job=spec)]

    def _cluster_nodes_now(self, engine: Engine) -> set[str] | None:
        """The GPU node set of the managed partitions, checked once a minute."""
        if time.monotonic() - self._nodes_checked < 60.0:
            return None
        self._nodes_checked = time.monotonic()
        try:
            nodes = self.cli.nodes()
        except ControllerUnavailable:
            return None
        wanted = set(self.settings.partitions)
        return {n.name for n in nodes if n.gpus > 0 and (
            not wanted or wanted & set(n.raw.get("partitions") or []))}

    def _sync(self, engine: Engine, now: float) -> None:
        """Journal every live job's state and progress, and the engine's new records."""
        journal = self.journal
        assert journal is not None
        updates = [JobUpdate(engine_id=j.id, state="running", done=j.done_at(now), gpus=j.gpus,
                             placement=_counts(j.allocation))
                   for j in engine.running.values()]
        updates += [JobUpdate(engine_id=j.id, state="pending", done=j.done_at(now))
                    for j in engine.pending.values()]
        for rec in engine.records[self._records_seen:]:
            if rec.failed:
                updates.append(JobUpdate(engine_id=rec.job_id, state="failed",
                                         done=rec.done_iterations, reason=rec.failure or ""))
            else:
                updates.append(JobUpdate(engine_id=rec.job_id, state="completed",
                                         done=rec.done_iterations, reason="completed"))
            log.info("%s %s", rec.job_id, "failed: " + (rec.failure or "") if rec.failed
                     else "completed")
        for job_id, reason in engine.rejected:
            updates.append(JobUpdate(engine_id=job_id, state="rejected", done=0.0,
                                     reason=reason))
        engine.rejected.clear()
        journal.update_jobs(updates)
        # Records are journaled: drop them (and other per-decision lists) so memory stays flat.
        del engine.records[:]
        self._records_seen = 0
        if len(engine.decision_ms) > 1000:
            del engine.decision_ms[:-1000]
        if self._executor is not None:
            self._executor.trim()
        if time.monotonic() - self._last_touch > 10.0:
            journal.touch_run(self.run_id)
            self._last_touch = time.monotonic()


# ------------------------------------------------------------------------------- fail-open


def fail_open_check(cli: SlurmCli, heartbeat: Path, stale_after_s: float,
                    partitions: Sequence[str] = ()) -> list[int]:
    """Release engine-held jobs to Slurm's own scheduler if the controller's heartbeat is stale.

    Each held managed job gets ``AdminComment=gpuplan:failopen;...`` (so a returning controller
    and operators can tell), its engine-chosen ``NodeList`` cleared (Slurm may place it
    anywhere), ``StartTime=now`` (a requeued job would otherwise wait ``cred_expire``), and is
    released. Returns the Slurm ids released (empty while the heartbeat is fresh).
    """
    age = heartbeat_age(heartbeat)
    if age <= stale_after_s:
        log.debug("heartbeat %s is %.1f s old: controller alive", heartbeat, age)
        return []
    released: list[int] = []
    for sj in cli.jobs(all_states=False):
        if sj.state != "PENDING" or not sj.held or not is_managed(sj, partitions):
            continue
        try:
            release_to_slurm(cli, sj, FAILOPEN)
        except (JobNotPending, InvalidJobId) as err:
            log.info("fail-open: job %d changed meanwhile (%s)", sj.job_id, err)
            continue
        except SlurmError as err:
            # Still held and still marked "held": the next pass tries it again. One failure
            # must not strand the jobs after it.
            log.error("fail-open: releasing job %d failed (%s); next pass retries", sj.job_id,
                      err)
            continue
        released.append(sj.job_id)
    if released:
        log.warning("controller heartbeat %s is %s: released %d held job(s) to Slurm: %s",
                    heartbeat, "missing" if age == float("inf") else f"{age:.0f} s old",
                    len(released), " ".join(map(str, released)))
    return released


def release_to_slurm(cli: SlurmCli, sj: SlurmJob, state: str) -> None:
    """Hand a held job to Slurm's own scheduler, then mark it ``state``.

    The engine-chosen ``NodeList`` is cleared (Slurm may place it anywhere) and ``StartTime``
    set to now (a requeued job would otherwise wait ``cred_expire``) before the release. The
    marker changes only after the release succeeded: a job whose release failed keeps its
    ``held`` marker, so the next pass (fail-open) or poll (rejection) tries again instead of
    skipping a job that is marked but still held.
    """
    cli.update_job(sj.job_id, NodeList="", StartTime="now")
    cli.release(sj.job_id)
    cli.update_job(sj.job_id, AdminComment=with_marker_state(sj.admin_comment, state))


def watch_fail_open(cli: SlurmCli, heartbeat: Path, stale_after_s: float, every_s: float,
                    partitions: Sequence[str] = (), stop: threading.Event | None = None) -> None:
    """:func:`fail_open_check` every ``every_s`` seconds until ``stop`` is set."""
    stop = stop or threading.Event()
    while not stop.is_set():
        try:
            fail_open_check(cli, heartbeat, stale_after_s, partitions)
        except SlurmError as err:
            log.warning("fail-open check failed: %s", err)
        stop.wait(every_s)
