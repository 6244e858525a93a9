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
  :class:`~.executor.ControllerExecutor` (which holds a ``SlurmExecutor``) only adds what a
  daemon needs on top: adopting jobs it did not
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

Modules: this one is the daemon (:class:`SlurmController`: reconcile, discover, journal
progress); :mod:`.reconcile` its start-up/after-error reconcile (a mixin);
:mod:`.adoption` the per-job adoption steps; :mod:`.executor` the journaled
executor; :mod:`.markers` how a Slurm job maps to a ``JobSpec``; :mod:`.failopen` the heartbeat
and watchdog; :mod:`.failpoints` crash injection. The names they define are re-exported here
(tests, ``command.py`` and docs import them from here).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from gpuplan.models import (
    Cluster,
    GpuplanError,
)
from gpuplan.solver_core.registry import make_policy

from ..engine import Engine
from ..reasons import DecisionReasons
from ..slurm.cli import (
    ControllerUnavailable,
    SlurmCli,
    SlurmError,
)
from ..slurm.executor import cluster_from_slurm
from .adoption import JobAdoption
from .change_latency import ChangeLatencyProbe
from .cycle_records import CycleRecordsMixin
from .cycle_times import CycleTimes
from .executor import ControllerExecutor, ControllerSettings
from .failopen import (
    fail_open_check,
    heartbeat_age,
    release_to_slurm,
    watch_fail_open,
    write_heartbeat,
)
from .failpoints import FailpointCli, Failpoints
from .gate_journal import restore_gate
from .journal import (
    Journal,
    check_private_dir,
    check_state_path,
)
from .live_state import LivePublisher
from .markers import (
    FAILOPEN,
    MARK,
    MAX_DURATION_S,
    MAX_RATE,
    MAX_WORK,
    NO_LIMIT,
    REJECTED,
    RUNNING_STATES,
    STOP_KINDS,
    comment_options,
    engine_id,
    fingerprint,
    is_failopen,
    is_managed,
    marker,
    requested_gpus,
    spec_from_slurm,
    with_marker_state,
)
from .policy_memory import PolicyMemoryMixin
from .poll_events import PollEventsMixin, Recycle
from .poll_reads import PollReadsMixin
from .reason_journal import ReasonPublisher
from .reconcile import ReconcileMixin
from .sdnotify import Notifier

__all__ = [
    "FAILOPEN",
    "MARK",
    "MAX_DURATION_S",
    "MAX_RATE",
    "MAX_WORK",
    "NO_LIMIT",
    "REJECTED",
    "RUNNING_STATES",
    "STOP_KINDS",
    "ControllerExecutor",
    "ControllerSettings",
    "FailpointCli",
    "Failpoints",
    "SlurmController",
    "comment_options",
    "engine_id",
    "fail_open_check",
    "fingerprint",
    "heartbeat_age",
    "is_failopen",
    "is_managed",
    "marker",
    "release_to_slurm",
    "requested_gpus",
    "spec_from_slurm",
    "watch_fail_open",
    "with_marker_state",
    "write_heartbeat",
]

log = logging.getLogger(__name__)


class SlurmController(
    ReconcileMixin, PollReadsMixin, PollEventsMixin, CycleRecordsMixin, PolicyMemoryMixin
):
    """The ``slurm-controller`` daemon: reconcile, then loop engine <-> Slurm until stopped."""

    def __init__(
        self,
        settings: ControllerSettings,
        cli: SlurmCli | None = None,
        *,
        connect_timeout_s: float = 60.0,
    ) -> None:
        self.settings = settings
        self.connect_timeout_s = connect_timeout_s
        """Longest start-up wait for slurmctld to answer (:meth:`preflight`)."""
        self.failpoints = Failpoints(os.environ.get("GPUPLAN_FAILPOINT"))
        self.cli = cli or FailpointCli(self.failpoints, timeout=30.0, unavailable_retry_s=0.0)
        self.journal: Journal | None = None
        self._adoption: JobAdoption | None = None
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
        self._policy_saved: str | None = None
        self._gate_saved: dict[str, str] = {}
        self._latency: ChangeLatencyProbe | None = None
        """Measures each change's intent -> RUNNING again for the gate (see
        :mod:`.change_latency`)."""
        """The restart gate's journal rows as last written (see :mod:`.gate_journal`)."""
        self._read_back: dict[str, tuple[Any, ...]] = {}
        """engine id -> (restart count, nodes, engine counts) last read back from Slurm."""
        self._notifier = Notifier()
        """systemd's READY/WATCHDOG/STOPPING (a no-op outside systemd; :mod:`.sdnotify`)."""
        self.times = CycleTimes()
        """Per-cycle poll/decision/apply/journal wall times (:mod:`.cycle_times`), written
        to the journal's ``meta`` table under ``cycle_times:<run>``."""
        self._init_poll_reads()
        self._probe_calls = 0
        """``sdiag`` looks of the arrival probes of the executors this run dropped."""
        self._reasons: ReasonPublisher | None = None
        """Journals, logs and shows each decision's reasons (:mod:`.reason_journal`)."""
        self._pending_written: dict[str, float] = {}
        """engine id -> progress last journaled for a pending job (:meth:`_sync` skips the
        rows that did not change)."""
        self._http: Any = None
        """``--http``: the :class:`~.http_server.LiveHttpServer` (None without it)."""
        self._live: LivePublisher | None = None
        """The snapshots the HTTP thread serves (:mod:`.live_state`; None without ``--http``)."""
        self._publish_failed = False
        make_policy(settings.policy)  # fail fast on a bad name, before touching anything

    # ------------------------------------------------------------------ entry point
    def preflight(self) -> None:
        """Refuse a set-up that cannot work, before anything is created (``docs/controller.md``
        § Start-up checks): the journal's and the heartbeat's directories must be this user's
        and private (:class:`~.journal.UnsafeStatePath`); the Slurm client must be installed,
        slurmctld must answer within ``connect_timeout_s`` and every ``--partition`` must
        exist with GPU nodes (:class:`~gpuplan.executors.slurm.cli.SlurmSetupError`). Without
        it, a controller with no Slurm client created its journal and then retried for ever."""
        check_state_path(self.settings.state_db)
        heartbeat_dir = self.settings.heartbeat_path.parent
        if heartbeat_dir != self.settings.state_db.parent:
            check_private_dir(heartbeat_dir, "heartbeat directory")
        self.cli.check_setup(self.settings.partitions, self.connect_timeout_s, self._stop)

    def run(self) -> int:
        """Check the set-up (:meth:`preflight`), then run until SIGTERM/SIGINT; returns the
        process exit code."""
        self.preflight()
        if self.settings.http_port is not None:  # a port in use: refused before any state
            from .http_server import LiveHttpServer

            self._http = LiveHttpServer(
                self.settings.http_bind,
                self.settings.http_port,
                lambda: self._live.latest() if self._live else None,
            )
        try:
            self.journal = Journal(self.settings.state_db, failpoints=self.failpoints)
        except BaseException:
            if self._http is not None:
                self._http.server_close()
            raise
        self._adoption = JobAdoption(self.cli, self.journal, self.settings)
        self.run_id = self.journal.begin_run(self.settings.policy)
        if self._http is not None:
            self._live = LivePublisher(
                self.journal.db,
                self.run_id,
                self.settings.policy,
                self.settings.state_db,
                self.settings.heartbeat_path,
                self.settings.max_stall_s,
            )
            self._http.start()
        log.info(
            "controller run %d: policy %s, journal %s (schema %d), heartbeat %s",
            self.run_id,
            self.settings.policy,
            self.settings.state_db,
            self.journal.schema_version,
            self.settings.heartbeat_path,
        )
        self.journal.prune(self.settings.retention_days * 86400.0)
        previous = {
            signal.SIGTERM: signal.getsignal(signal.SIGTERM),
            signal.SIGINT: signal.getsignal(signal.SIGINT),
        }
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
                except Recycle as why:
                    log.info("cluster changed (%s): rebuilding from Slurm", why)
                except Exception as err:
                    # Crash-only: drop all in-memory state and come back through reconcile,
                    # the same path a restart takes. Anything (a Slurm error, a damaged
                    # journal row, a bug) lands here instead of ending the process; the
                    # heartbeat is not refreshed by a failed cycle, so a fault that persists
                    # past --max-stall hands every held job to Slurm through the watchdog.
                    log.error(
                        "controller cycle failed: %s: %s; reconciling again in %.0f s",
                        type(err).__name__,
                        err,
                        backoff,
                        exc_info=not isinstance(err, (SlurmError, GpuplanError, OSError)),
                    )
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 60.0)
        except BaseException as err:
            exit_ = f"error: {type(err).__name__}: {err}"[:500]
            raise
        finally:
            self._stop.set()
            if self._http is not None:
                self._http.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self.journal is not None:
                with contextlib.suppress(Exception):
                    self._save_times()
                with contextlib.suppress(Exception):
                    self.journal.end_run(self.run_id, exit_)
                self.journal.close()
        return 0

    @property
    def adoption(self) -> JobAdoption:
        """The per-job adoption steps (available once :meth:`run` opened the journal)."""
        assert self._adoption is not None
        return self._adoption

    def _on_signal(self, signum: int, _frame: object) -> None:
        log.info(
            "%s: finishing the current step, then exiting (jobs keep running)",
            signal.Signals(signum).name,
        )
        self._stop.set()
        self._notifier.stopping()
        if self._executor is not None:
            self._executor.shutdown()

    def _heartbeat_loop(self) -> None:
        path = self.settings.heartbeat_path
        period = max(0.2, min(self.settings.interval_s, 5.0))
        notifier = self._notifier
        if notifier.watchdog_s is not None:  # systemd's WatchdogSec: ping twice per period
            period = max(0.1, min(period, notifier.watchdog_s / 2))
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "state_db": str(self.settings.state_db),
        }
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
                # systemd (Type=notify): ready after the first completed cycle; alive while
                # the loop is not stalled, like the heartbeat (sdnotify.py).
                if not notifier.ready_sent:
                    notifier.ready(f"run {self.run_id}: first cycle done")
                notifier.alive()
            else:
                log.error("main loop stalled for %.0f s: heartbeat withheld (fail-open)", stalled)
            self._stop.wait(period)

    # ------------------------------------------------------------------ one cycle
    def _cycle(self) -> None:
        assert self.journal is not None
        cluster = self._cluster()
        executor = ControllerExecutor(
            cluster,
            cli=self.cli,
            journal=self.journal,
            run_id=self.run_id,
            settings=self.settings,
            failpoints=self.failpoints,
            on_poll=self._on_poll,
            read_jobs=self._read_for_poll,
            on_quiet_poll=self._quiet_poll,
        )
        engine = Engine(
            cluster,
            make_policy(self.settings.policy, seed=self.settings.seed),
            executor,
            sample_interval_s=None,
            restart_gate="auto" if self.settings.restart_gate else None,
        )
        self._executor, self._engine = executor, engine
        self._reasons = ReasonPublisher(self.journal, self.cli)
        engine.reasons = DecisionReasons(engine.policy, self._reasons.take, changed_only=False)
        costs = engine.restart_gate.costs if engine.restart_gate is not None else None
        self._latency = ChangeLatencyProbe(self.journal, costs) if costs is not None else None
        self._records_seen = 0
        self._read_back = {}
        self._forget_reads()  # the first poll reads every job in full
        self._pending_written = {}
        self._cluster_nodes = {n.name for n in cluster.nodes}
        self._nodes_checked = time.monotonic()
        try:
            if self._stop.is_set():
                return
            self._restore_policy(engine)
            restore_gate(engine, self.journal)
            self._reconcile(engine, executor)
            if engine.restart_gate is not None:  # no resize of adopted jobs in the first plans
                engine.restart_gate.hold(list(engine.running), executor.now())
            self._sync(engine, executor.now())
            self._tick = time.monotonic()
            self._publish(force=True)
            executor.wake_at(executor.now())  # first decision right away, not at the next event
            while not self._stop.is_set():
                batch = executor.next_events()
                if batch is None:
                    break
                now, events = batch
                executor.apply_s = 0.0
                t0 = time.perf_counter()
                plan = engine.handle(now, events)
                t1 = time.perf_counter()
                if self._live is not None:
                    self._live.saw_plan(plan)
                self._sync(engine, now)
                t2 = time.perf_counter()
                self._tick = time.monotonic()
                # apply_s stays 0.0 when the plan had no action to carry out: no apply part
                self._timed(
                    executor.slurm.batch_poll_s,
                    t1 - t0 - executor.apply_s,
                    executor.apply_s or None,
                    t2 - t1,
                    len(engine.running) + len(engine.pending),
                )
        finally:
            self._probe_calls += executor.probe_calls
            self._executor = self._engine = None

    # ------------------------------------------------------------------ cycle times
    def _cluster(self) -> Cluster:
        nodes = self._retry_ctld(self.cli.nodes)
        wanted = set(self.settings.partitions)
        names = [
            n.name
            for n in nodes
            if n.gpus > 0 and (not wanted or wanted & set(n.raw.get("partitions") or []))
        ]
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
