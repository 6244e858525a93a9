"""What the controller's HTTP thread shows: an immutable snapshot the control loop publishes.

Why a snapshot and not queries from the HTTP thread: the control loop owns the journal's
connection and its write path (one ``BEGIN IMMEDIATE`` at a time); a scrape or a page view must
never wait on it, take its lock or delay a cycle, and a hostile client must not be able to make
the loop do work. So the loop, at the end of a cycle (:meth:`LivePublisher.publish`, at most
one snapshot per :data:`MIN_PUBLISH_S`), builds a :class:`LiveSnapshot` — plain frozen
dataclasses and tuples — and swaps one reference; the HTTP thread only reads that reference
(:meth:`LivePublisher.latest`). Nothing in a snapshot is ever mutated after publication.

Why from the journal: every figure is the one the journal records (one source of truth, what
``sqlite3``, ``gpuplan status`` and the tests read): the live jobs are the journal's
``pending``/``running`` rows just written by the cycle (state, GPUs, node counts, ``reason``),
decisions and their actions are the journal's ``plans``/``actions`` rows (read incrementally
by primary key, so a publish costs the rows that are new since the last one), the cycle
latencies are the :class:`~.cycle_times.CycleTimes` rows journaled as ``cycle_times:<run>``,
and the restart gate's counters and measured change costs are its ``summary()`` that
:mod:`.gate_journal` writes. Three things are not in the journal and come from the loop
itself: which GPU indices a running job holds (the journal keeps node -> count; the engine's
books hold the indices, for the GPU map), the Slurm job's name (its last full ``squeue
--json`` record) and the solver statistics of plans without actions (only plans with actions
are journaled).

Job names and the journal's reasons may come from hostile Slurm users: they are kept as data
here, bounded (:data:`MAX_TEXT`), and escaped where they are shown (:mod:`.live_page`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan import __version__

MIN_PUBLISH_S = 1.0
"""Least time between two snapshots: a burst of cycles publishes at most once a second (the
page refreshes every 2 s, Prometheus scrapes every 15 s or so). A snapshot of 1,000 live
jobs costs ~20 ms of the loop (reading their journal rows), so at most ~2 % of a core."""
RECENT_ACTIONS = 50
"""Journal actions kept for the page's "recent decisions"."""
MAX_JOBS = 2000
"""Jobs in one snapshot (running first, then the queue in submission order); more are
counted in :attr:`LiveSnapshot.jobs_omitted`, so a response stays bounded."""
MAX_TEXT = 200
"""Characters kept of any free text (a job name, a reason, an action's detail)."""
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds (seconds) of the poll/decision/apply latency histograms (+Inf implied)."""
HISTOGRAMS = ("poll_s", "decide_s", "apply_s")
"""The :class:`~.cycle_times.CycleTimes` columns exported as histograms."""


def _text(value: object) -> str:
    """A bounded, printable copy of free text (control characters become spaces)."""
    text = ("" if value is None else str(value))[:MAX_TEXT]
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else " " for c in text)


@dataclass(frozen=True, slots=True)
class JobView:
    """One job as the page and the metrics see it (from its journal row)."""

    engine_id: str
    slurm_id: int
    name: str
    user: str
    state: str
    """The journal's state, or ``held`` for a job kept held because it cannot be read."""
    gpus: int
    requested: int
    placement: tuple[tuple[str, tuple[int, ...]], ...]
    """node -> GPU indices (running jobs; the engine's books, counts as journaled)."""
    reason: str
    submit_time: float


@dataclass(frozen=True, slots=True)
class ActionView:
    """One journaled action (the page's recent decisions)."""

    id: int
    time: float
    engine_id: str
    slurm_id: int | None
    kind: str
    before: tuple[tuple[str, int], ...]
    after: tuple[tuple[str, int], ...]
    status: str
    detail: str
    reason: str
    """The action's reason when the journal has one (empty until it records reasons)."""


@dataclass(frozen=True, slots=True)
class Histogram:
    """Cumulative bucket counts (``le`` -> count), their sum and count, over the run."""

    buckets: tuple[tuple[float, int], ...]
    count: int
    total: float


@dataclass(frozen=True, slots=True)
class LiveSnapshot:
    """Everything ``/metrics``, ``/state.json`` and the page show, as of :attr:`time`."""

    time: float
    run_id: int
    policy: str
    nodes: tuple[tuple[str, int], ...]
    jobs: tuple[JobView, ...]
    jobs_omitted: int
    queue: int
    running: int
    held_refused: int
    gpus_total: int
    gpus_allocated: int
    decisions: int
    plans: int
    actions: tuple[tuple[str, str, int], ...]
    """(kind, status, count) of the actions this run saw settled."""
    actions_open: int
    recent: tuple[ActionView, ...]
    histograms: tuple[tuple[str, Histogram], ...]
    solver_calls: tuple[tuple[str, str, int], ...]
    """(backend, status, count) over every plan this run decided."""
    solver_fallbacks: int
    gate_changes: tuple[tuple[str, str, int], ...]
    """(kind, proposed|carried_out|skipped, count) of the restart gate."""
    change_costs: tuple[tuple[str, int, float], ...]
    """(kind, samples, median seconds) of the measured change latencies."""
    journal_bytes: int
    failopen_jobs: int
    loop_tick: float | None
    """``time.monotonic()`` of the last completed cycle (the heartbeat's rule)."""
    max_stall_s: float
    heartbeat: Path
    version: str = __version__

    def to_json(self) -> dict[str, Any]:
        """The ``/state.json`` document (bounded by :data:`MAX_JOBS`, :data:`MAX_TEXT`)."""
        return {
            "gpuplan": self.version,
            "policy": self.policy,
            "run": self.run_id,
            "time": round(self.time, 3),
            "nodes": [{"name": n, "gpus": g} for n, g in self.nodes],
            "jobs": [
                {
                    "id": j.engine_id,
                    "slurm": j.slurm_id,
                    "name": j.name,
                    "user": j.user,
                    "state": j.state,
                    "gpus": j.gpus,
                    "requested": j.requested,
                    "placement": {n: list(g) for n, g in j.placement},
                    "reason": j.reason,
                    "submitted": round(j.submit_time, 3),
                }
                for j in self.jobs
            ],
            "jobs_omitted": self.jobs_omitted,
            "actions": [
                {
                    "id": a.id,
                    "time": round(a.time, 3),
                    "job": a.engine_id,
                    "slurm": a.slurm_id,
                    "kind": a.kind,
                    "before": dict(a.before),
                    "after": dict(a.after),
                    "status": a.status,
                    "detail": a.detail,
                    "reason": a.reason,
                }
                for a in reversed(self.recent)
            ],
            "summary": {
                "queue": self.queue,
                "running": self.running,
                "held_refused": self.held_refused,
                "gpus_total": self.gpus_total,
                "gpus_allocated": self.gpus_allocated,
                "decisions": self.decisions,
                "plans": self.plans,
                "actions_open": self.actions_open,
                "failopen_jobs": self.failopen_jobs,
            },
        }


@dataclass(slots=True)
class _Hist:
    counts: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))
    count: int = 0
    total: float = 0.0

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        for i, bound in enumerate(LATENCY_BUCKETS):
            if value <= bound:
                self.counts[i] += 1

    def frozen(self) -> Histogram:
        return Histogram(
            tuple(zip(LATENCY_BUCKETS, self.counts, strict=True)), self.count, self.total
        )


def _pairs(raw: str | None) -> tuple[tuple[str, int], ...]:
    try:
        data = json.loads(raw or "{}")
        return tuple(sorted((_text(k), int(v)) for k, v in data.items()))
    except (ValueError, TypeError, AttributeError):
        return ()


_JOB_COLUMNS = "engine_id, slurm_id, state, gpus, placement, reason, submit_time, waiting"
"""What a view needs of a job row that may change (the spec's user and GPU request do not:
they are read once per job, :meth:`LivePublisher._spec_fields`)."""


def _job_view(
    row: tuple[Any, ...],
    name: str,
    books: tuple[tuple[str, tuple[int, ...]], ...],
    user: object,
    requested: object,
) -> JobView:
    """A job's view from its journal row (:data:`_JOB_COLUMNS`), Slurm name and, when it runs,
    the engine's GPU indices (node -> indices; used where they agree with the journal's
    node -> count, else the map shows the first GPUs of the node)."""
    eid, slurm_id, state, gpus, placement, reason, submit, waiting = row
    if state == "pending" and waiting:  # the engine's reason at its latest decision
        reason = _waiting_text(waiting) or reason
    placed: tuple[tuple[str, tuple[int, ...]], ...] = ()
    if state == "running":
        indices = dict(books)
        placed = tuple(
            (n, indices[n] if len(indices.get(n, ())) == c else tuple(range(c)))
            for n, c in _pairs(placement)
        )
    try:
        asked = int(requested or 0)
    except (TypeError, ValueError):
        asked = 0
    return JobView(
        engine_id=_text(eid),
        slurm_id=int(slurm_id),
        name=_text(name),
        user=_text(user or ""),
        state="held" if state == "rejected" else state,
        gpus=int(gpus) if state == "running" else 0,
        requested=asked,
        placement=placed,
        reason=_text(reason),
        submit_time=float(submit),
    )


def _waiting_text(raw: object) -> str:
    """The text of a ``jobs.waiting`` reason (a ``Reason`` as JSON, schema 3); ``''`` when it
    does not parse (the page then shows the journal's own ``reason``)."""
    try:
        text = json.loads(str(raw)).get("text", "")
    except (ValueError, AttributeError):
        return ""
    return text if isinstance(text, str) else ""


class LivePublisher:
    """Builds :class:`LiveSnapshot` s in the control loop (its thread only) and hands the
    latest one to readers in other threads (one reference swap: no lock needed)."""

    def __init__(
        self,
        db: sqlite3.Connection,
        run_id: int,
        policy: str,
        state_db: Path,
        heartbeat: Path,
        max_stall_s: float,
    ) -> None:
        self._db = db
        self.run_id, self.policy = run_id, policy
        self.state_db, self.heartbeat, self.max_stall_s = state_db, heartbeat, max_stall_s
        self._latest: LiveSnapshot | None = None
        self._published = float("-inf")
        # Actions and plans journaled before this run are history: count from here on, but
        # the open intents of an earlier run are followed (their reconciliation counts).
        self._last_action = int(
            db.execute("SELECT COALESCE(MAX(id), 0) FROM actions").fetchone()[0]
        )
        self._last_epoch = int(
            db.execute("SELECT COALESCE(MAX(epoch), 0) FROM plans").fetchone()[0]
        )
        self._open: dict[int, ActionView] = {
            a.id: a
            for a in self._views(
                db.execute("SELECT * FROM actions WHERE status = 'intended' ORDER BY id")
            )
        }
        self._recent: deque[ActionView] = deque(maxlen=RECENT_ACTIONS)
        self._settled: Counter[tuple[str, str]] = Counter()
        self._plans = 0
        self._decisions = 0
        self._cycles_seen = 0
        self._hists = {name: _Hist() for name in HISTOGRAMS}
        self._solver: Counter[tuple[str, str]] = Counter()
        self._fallbacks = 0
        self._views_cache: dict[str, tuple[tuple[Any, ...], JobView]] = {}
        """engine id -> (its journal row, name, GPU indices; its view): a job whose row did not
        change is not parsed again (1,000 live jobs cost ~100 ms a snapshot without it)."""
        self._specs: dict[str, tuple[object, object]] = {}
        """engine id -> the user and GPU request of its journaled spec (read once per job)."""

    # ------------------------------------------------------------------ readers' side
    def latest(self) -> LiveSnapshot | None:
        """The newest snapshot (None before the first cycle); safe from any thread."""
        return self._latest

    # ------------------------------------------------------------------ loop's side
    def saw_plan(self, plan: Any) -> None:
        """Count one decision's solver calls (``AllocationPlan.stats``: what the journal
        records with the plan when it has actions)."""
        for stats in getattr(plan, "stats", ()) or ():
            self._solver[(_text(stats.backend), _text(stats.status))] += 1
            self._fallbacks += bool(stats.fell_back)

    def due(self) -> bool:
        """Whether :data:`MIN_PUBLISH_S` passed since the last snapshot."""
        return time.monotonic() - self._published >= MIN_PUBLISH_S

    def publish(
        self,
        *,
        engine: Any,
        slurm_jobs: Mapping[int, Any],
        failopen_jobs: int,
        tick: float | None,
        gate: Mapping[str, Any] | None,
    ) -> LiveSnapshot:
        """Build and publish a snapshot: ``engine`` is the live engine (GPU indices, cluster;
        None between engines), ``slurm_jobs`` the last full Slurm records by id (names,
        refused held jobs), ``gate`` the restart gate's ``summary()``. Call
        :meth:`take_cycles` first."""
        self._published = time.monotonic()
        self._take_actions()
        snap = self._build(engine, slurm_jobs, failopen_jobs, tick, gate)
        self._latest = snap
        return snap

    def take_cycles(self, times: Any) -> None:
        """Feed the histograms with the cycles ``times`` (the run's
        :class:`~.cycle_times.CycleTimes`) recorded since the last call: the newest rows of
        its ring (every cycle is seen: the controller calls this after every cycle)."""
        new = times.cycles - self._cycles_seen
        self._cycles_seen = times.cycles
        if new <= 0:
            return
        ring = times.rows
        rows = [ring[-i] for i in range(min(new, len(ring)), 0, -1)]  # the newest, in order
        for _t, poll_s, decide_s, apply_s, _sync, _jobs, _full in rows:
            if decide_s is not None:
                self._decisions += 1
            for name, value in (("poll_s", poll_s), ("decide_s", decide_s), ("apply_s", apply_s)):
                if value is not None:
                    self._hists[name].add(value)

    @staticmethod
    def _views(rows: Iterable[sqlite3.Row]) -> list[ActionView]:
        out = []
        for r in rows:
            keys = r.keys()
            out.append(
                ActionView(
                    id=int(r["id"]),
                    time=float(r["intended_at"]),
                    engine_id=_text(r["engine_id"]),
                    slurm_id=r["slurm_id"],
                    kind=_text(r["kind"]),
                    before=_pairs(r["before"]),
                    after=_pairs(r["after"]),
                    status=_text(r["status"]),
                    detail=_text(r["detail"]),
                    reason=_text(r["reason"]) if "reason" in keys else "",
                )
            )
        return out

    def _take_actions(self) -> None:
        """New plans and actions since the last publish, and the outcome of open intents
        (each read by primary key or the journal's open-intent index)."""
        db = self._db
        for epoch, run_id in db.execute(
            "SELECT epoch, run_id FROM plans WHERE epoch > ? ORDER BY epoch", (self._last_epoch,)
        ):
            self._last_epoch = int(epoch)
            self._plans += int(run_id) == self.run_id
        for view in self._views(
            db.execute("SELECT * FROM actions WHERE id > ? ORDER BY id", (self._last_action,))
        ):
            self._last_action = view.id
            if view.status == "intended":
                self._open[view.id] = view
            else:
                self._settled[(view.kind, view.status)] += 1
            self._recent.append(view)
        if self._open:
            ids = list(self._open)
            marks = ",".join("?" * len(ids))
            done = self._views(
                db.execute(
                    f"SELECT * FROM actions WHERE id IN ({marks}) AND status != 'intended'", ids
                )
            )
            for view in done:
                del self._open[view.id]
                self._settled[(view.kind, view.status)] += 1
                self._recent = deque(
                    (view if a.id == view.id else a for a in self._recent), maxlen=RECENT_ACTIONS
                )

    def _spec_fields(self, eid: str) -> tuple[object, object]:
        row = self._db.execute(
            "SELECT json_extract(spec, '$.user'), json_extract(spec, "
            "'$.requested_gpus') FROM jobs WHERE engine_id = ?",
            (eid,),
        ).fetchone()
        return (row[0], row[1]) if row is not None else ("", 0)

    def _build(
        self,
        engine: Any,
        slurm_jobs: Mapping[int, Any],
        failopen_jobs: int,
        tick: float | None,
        gate: Mapping[str, Any] | None,
    ) -> LiveSnapshot:
        from .markers import MARK, REFUSED, engine_id

        db = self._db
        rows = list(
            db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state IN ('pending', 'running')")
        )
        refused = f"{MARK}{REFUSED}"
        for sj in slurm_jobs.values():
            if sj.state == "PENDING" and sj.admin_comment.startswith(refused):
                rows.extend(
                    db.execute(
                        f"SELECT {_JOB_COLUMNS} FROM jobs WHERE engine_id = ? "
                        "AND state = 'rejected'",
                        (engine_id(sj.job_id),),
                    )
                )
        running_books = getattr(engine, "running", {}) if engine is not None else {}
        cache, self._views_cache = self._views_cache, {}
        specs, self._specs = self._specs, {}
        views = []
        for row in rows:
            eid, slurm_id, state = row[0], int(row[1]), row[2]
            sj = slurm_jobs.get(slurm_id)
            books: tuple[tuple[str, tuple[int, ...]], ...] = ()
            if state == "running":
                alloc = getattr(running_books.get(eid), "allocation", None)
                if alloc is not None:
                    books = tuple((n, tuple(g)) for n, g in alloc.placement.items())
            fields = specs.get(eid) or self._spec_fields(eid)
            self._specs[eid] = fields
            key = (tuple(row), sj.name if sj is not None else "", books, *fields)
            old = cache.get(eid)
            view = old[1] if old is not None and old[0] == key else _job_view(*key)
            self._views_cache[eid] = (key, view)
            views.append(view)
        views.sort(key=lambda v: (v.state != "running", v.submit_time, v.slurm_id))
        nodes: tuple[tuple[str, int], ...] = ()
        if engine is not None:
            nodes = tuple((n.name, n.gpus) for n in engine.cluster.nodes)
        changes: list[tuple[str, str, int]] = []
        costs: list[tuple[str, int, float]] = []
        for kind, row in sorted(((gate or {}).get("changes") or {}).items()):
            for key, label in (
                ("proposed", "proposed"),
                ("done", "carried_out"),
                ("skipped", "skipped"),
            ):
                changes.append((_text(kind), label, int(row.get(key, 0))))
        for kind, row in sorted(((gate or {}).get("costs") or {}).items()):
            costs.append((_text(kind), int(row.get("samples", 0)), float(row.get("median_s", 0.0))))
        size = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                size += os.stat(f"{self.state_db}{suffix}").st_size
        return LiveSnapshot(
            time=time.time(),
            run_id=self.run_id,
            policy=self.policy,
            nodes=nodes,
            jobs=tuple(views[:MAX_JOBS]),
            jobs_omitted=max(0, len(views) - MAX_JOBS),
            queue=sum(v.state == "pending" for v in views),
            running=sum(v.state == "running" for v in views),
            held_refused=sum(v.state == "held" for v in views),
            gpus_total=sum(g for _, g in nodes),
            gpus_allocated=sum(v.gpus for v in views if v.state == "running"),
            decisions=self._decisions,
            plans=self._plans,
            actions=tuple((k, s, n) for (k, s), n in sorted(self._settled.items())),
            actions_open=len(self._open),
            recent=tuple(self._recent),
            histograms=tuple((name, h.frozen()) for name, h in self._hists.items()),
            solver_calls=tuple((b, s, n) for (b, s), n in sorted(self._solver.items())),
            solver_fallbacks=self._fallbacks,
            gate_changes=tuple(changes),
            change_costs=tuple(costs),
            journal_bytes=size,
            failopen_jobs=failopen_jobs,
            loop_tick=tick,
            max_stall_s=self.max_stall_s,
            heartbeat=self.heartbeat,
        )
