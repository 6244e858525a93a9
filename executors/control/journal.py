"""The Slurm controller's durable memory: one SQLite file (WAL mode) with jobs, plans and actions.

Why a journal at all: the controller is the only component that knows *why* a Slurm job is in
the state it is in. Slurm remembers the job (held, running, requeued) but not that the controller
was half-way through a checkpoint-restart when it died: a job that exited after the checkpoint
signal looks exactly like a job that finished. So every plan is written down *before* anything is
done (one ``intended`` row per action, with the Slurm restart count seen just before), and the
outcome after (``applied`` / ``failed``). A controller killed at any point finds the actions that
have an intent but no outcome and re-checks them against ``squeue --json`` (see
:mod:`.controller`), then marks them ``reconciled`` with what it found.

Why SQLite + WAL: a single local file, atomic multi-row transactions (a plan and all its intents
commit together or not at all, also on SIGKILL or power loss with ``synchronous=FULL``), and
readers (operators, tests, ``sqlite3`` on the command line) never block the writer. There is one
writer — the controller holds an exclusive ``flock`` on ``<db>.lock`` for its whole life — so two
controllers can never interleave their intents in one journal.

The schema is versioned with ``PRAGMA user_version``; :class:`Journal`'s writer migrates an
older journal (:data:`.journal_schema.MIGRATIONS`, one transaction, after a backup copy) and
refuses a file written by a newer version rather than guessing; a reader never migrates.

Why the journal is created under a temporary name: a controller SIGKILLed during its very first
start used to leave the real path holding an empty file or an SQLite file without the schema,
which every later start (rightly) refuses as "maybe a lost journal". The schema is now built in
``.<name>.creating.<random>`` (created ``O_EXCL``, 0600, in the same private directory), made
durable (``fsync``) and only then renamed into place, so the real path either does not exist or
holds a complete journal. Temporary files a killed creator left are removed by the next writer,
under the writer lock, and only when they are regular files of this user.

Why the paths are checked before anything is created: the directory holds files that decide
which Slurm jobs get signalled and requeued; another local user who can write there (a shared
``/tmp``, sticky or not) could plant a journal with forged intents or hold its lock for ever.
:func:`check_state_path` refuses such a set-up with :class:`UnsafeStatePath` (one line, exit 2)
and creates nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from gpuplan import __version__

from .failpoints import Failpoints

# The path checks, the creation of a fresh journal file and the schema live in their own
# modules; the names callers import from here are re-exported (noqa: F401).
from .journal_files import (
    TEMP_MARK,  # noqa: F401
    JournalError,
    UnsafeStatePath,  # noqa: F401
    _check_existing,
    _create,
    _private_dir,
    _sqlite_uri,
    _take_lock,
    backup_copy,
    check_private_dir,  # noqa: F401
    check_state_path,
    remove_leftovers,
)
from .journal_rows import (
    ActionIntent,
    ActionRow,
    JobRow,
    JobUpdate,
    ReasonRow,
    RunRow,
    action_row,
    job_row,
)
from .journal_schema import (
    ACTION_STATUSES,
    JOB_STATES,
    MIGRATIONS,
    SCHEMA_VERSION,
    TERMINAL_STATES,  # noqa: F401
)

log = logging.getLogger(__name__)


class Journal:
    """Read and write the controller journal at ``path``.

    ``writer=True`` (the controller) takes the single-writer lock and creates/migrates the schema;
    ``writer=False`` opens an existing journal read-only (operators, tests) and never blocks the
    controller.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        writer: bool = True,
        lock_timeout_s: float = 0.0,
        failpoints: Failpoints | None = None,
    ) -> None:
        self.path = Path(path)
        self.writer = writer
        self._lock: IO[str] | None = None
        self._failpoints = failpoints if failpoints is not None else Failpoints(None)
        if writer:
            check_state_path(self.path)  # before anything is created
            _private_dir(self.path.parent)
            self._lock = _take_lock(self.path.with_name(self.path.name + ".lock"), lock_timeout_s)
            try:
                remove_leftovers(self.path)
                if _check_existing(self.path):
                    _create(self.path, failpoints)
            except (JournalError, OSError, sqlite3.Error) as err:
                self.close()
                if isinstance(err, JournalError):
                    raise
                raise JournalError(f"cannot create journal {self.path}: {err}") from err
            uri = _sqlite_uri(self.path, "rw")
        else:
            if not self.path.exists():
                raise JournalError(f"no journal at {self.path}")
            _check_existing(self.path, private=False)
            uri = _sqlite_uri(self.path, "ro")
        try:
            # isolation_level=None: no implicit transactions; every write goes through
            # transaction() with an explicit BEGIN IMMEDIATE, so what is atomic is visible here.
            self.db = sqlite3.connect(
                uri, uri=True, isolation_level=None, timeout=30.0, check_same_thread=False
            )
        except sqlite3.Error as err:
            self.close()
            raise JournalError(f"cannot open journal {self.path}: {err}") from err
        self.db.row_factory = sqlite3.Row
        try:
            if writer:
                mode = self.db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise JournalError(
                        f"{self.path}: SQLite refused WAL mode ({mode}); is it on "
                        "a network file system?"
                    )
                # FULL: an intent is on disk before the action it announces starts, even if the
                # machine (not only the process) dies right after.
                self.db.execute("PRAGMA synchronous=FULL")
                self.db.execute("PRAGMA foreign_keys=ON")
                check = self.db.execute("PRAGMA quick_check").fetchone()[0]
                if str(check).lower() != "ok":
                    raise JournalError(
                        f"journal {self.path} is damaged ({check}); refusing to use it"
                    )
                self._migrate()
            else:
                version = self.db.execute("PRAGMA user_version").fetchone()[0]
                if version != SCHEMA_VERSION:
                    # A reader never migrates (it may run beside an older controller that
                    # still writes this journal); the upgraded controller's writer does.
                    hint = (
                        ": the controller of this release migrates it when it starts"
                        if 0 < version < SCHEMA_VERSION
                        else ""
                    )
                    raise JournalError(
                        f"{self.path}: schema version {version}, this gpuplan "
                        f"reads {SCHEMA_VERSION}{hint}"
                    )
        except sqlite3.DatabaseError as err:
            self.close()
            raise JournalError(f"{self.path} is not a usable journal: {err}") from err
        except JournalError:
            self.close()
            raise

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        db = getattr(self, "db", None)
        if db is not None:
            db.close()
            self.db = None  # type: ignore[assignment]
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic write: ``BEGIN IMMEDIATE`` ... ``COMMIT`` (rolled back on any error)."""
        if not self.writer:
            raise JournalError("journal opened read-only")
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _migrate(self) -> None:
        """Bring an older journal to :data:`SCHEMA_VERSION` (writer only; a reader never
        migrates). First a backup copy ``<db>.schema<v>.bak`` (what the previous release can
        still open, for a downgrade), then every step of :data:`MIGRATIONS` and the new
        ``user_version`` in ONE transaction: a step that fails, or a kill at any point, leaves
        the journal exactly as the previous release wrote it."""
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise JournalError(
                f"{self.path}: written by a newer gpuplan (schema {version}; this "
                f"one knows {SCHEMA_VERSION}); refusing to touch it"
            )
        if version == SCHEMA_VERSION:
            return
        if version == 0:
            # A journal is only ever renamed into place with its schema (_create), so schema 0
            # here is not one gpuplan created (an empty SQLite database someone made, or our
            # file with its header lost). Creating tables in it would silently start over and
            # forget every open intent.
            raise JournalError(
                f"{self.path} exists but holds no gpuplan journal (schema 0); "
                "refusing to start a fresh journal over it: move it away, or "
                "restore the real one"
            )
        missing = [v for v in range(version, SCHEMA_VERSION) if v not in MIGRATIONS]
        if missing:
            raise JournalError(
                f"{self.path}: no migration from schema {missing[0]}; refusing to touch it"
            )
        try:
            backup = backup_copy(self.db, self.path, version)
        except (OSError, sqlite3.Error) as err:
            raise JournalError(
                f"cannot back up journal {self.path} before migrating it from "
                f"schema {version}: {err}; nothing was changed"
            ) from err
        try:
            with self.transaction() as db:
                for step in range(version, SCHEMA_VERSION):
                    MIGRATIONS[step](db)
                self._failpoints.hit("journal.migrate")
                db.execute(
                    "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO "
                    "UPDATE SET value = excluded.value",
                    (
                        f"migrated:{version}->{SCHEMA_VERSION}",
                        json.dumps({"time": time.time(), "by": __version__, "backup": backup.name}),
                    ),
                )
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.Error as err:
            raise JournalError(
                f"migrating journal {self.path} from schema {version} to "
                f"{SCHEMA_VERSION} failed: {err}; the journal is unchanged "
                f"(backup {backup})"
            ) from err
        log.info(
            "journal %s migrated from schema %d to %d (the schema-%d copy is %s)",
            self.path,
            version,
            SCHEMA_VERSION,
            version,
            backup,
        )

    @property
    def schema_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    # ------------------------------------------------------------------ meta
    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                "SET value = excluded.value",
                (key, value),
            )

    @property
    def origin(self) -> float:
        """Wall time the journal was created: the engine clock's zero across restarts."""
        value = self.meta("origin")
        return float(value) if value is not None else 0.0

    # ------------------------------------------------------------------ runs
    def begin_run(self, policy: str) -> int:
        now = time.time()
        with self.transaction() as db:
            cur = db.execute(
                "INSERT INTO runs(pid, host, policy, started, last_seen, version) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (os.getpid(), socket.gethostname(), policy, now, now, __version__),
            )
            return int(cur.lastrowid)  # type: ignore[arg-type]

    def touch_run(self, run_id: int) -> None:
        with self.transaction() as db:
            db.execute("UPDATE runs SET last_seen = ? WHERE run_id = ?", (time.time(), run_id))

    def end_run(self, run_id: int, exit_: str) -> None:
        now = time.time()
        with self.transaction() as db:
            db.execute(
                "UPDATE runs SET ended = ?, last_seen = ?, exit = ? WHERE run_id = ?",
                (now, now, exit_, run_id),
            )

    def runs(self) -> list[RunRow]:
        return [RunRow(**dict(r)) for r in self.db.execute("SELECT * FROM runs ORDER BY run_id")]

    # ------------------------------------------------------------------ jobs
    def add_job(
        self,
        engine_id: str,
        slurm_id: int,
        fingerprint: str,
        submit_time: float,
        spec: Mapping[str, Any] | None,
        state: str,
        *,
        done: float = 0.0,
        restart_count: int = 0,
        reason: str = "",
    ) -> None:
        """Insert a job, or refresh an existing row of the *same* Slurm job.

        A row with this engine id but another ``fingerprint`` (what the job is: owner, name,
        command, ... — not its submit time, which Slurm resets at every requeue) belongs to an
        earlier Slurm job that had the same id (ids restart when slurmctld loses its state): it
        is archived under ``<id>~<first seen>`` instead of being mistaken for this one.
        """
        _check_state(state)
        now = time.time()
        spec_json = None if spec is None else json.dumps(spec, sort_keys=True)
        with self.transaction() as db:
            old = db.execute(
                "SELECT fingerprint, first_seen FROM jobs WHERE engine_id = ?", (engine_id,)
            ).fetchone()
            if old is not None and old[0] != fingerprint:
                db.execute(
                    "UPDATE jobs SET engine_id = ?, state = CASE WHEN state IN "
                    "('pending', 'running') THEN 'gone' ELSE state END WHERE "
                    "engine_id = ?",
                    (f"{engine_id}~{float(old[1]):.0f}", engine_id),
                )
                old = None
            if old is None:
                db.execute(
                    "INSERT INTO jobs(engine_id, slurm_id, fingerprint, submit_time, spec, state, "
                    "done, restart_count, first_seen, updated, reason) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        engine_id,
                        slurm_id,
                        fingerprint,
                        submit_time,
                        spec_json,
                        state,
                        done,
                        restart_count,
                        now,
                        now,
                        reason,
                    ),
                )
            else:
                db.execute(
                    "UPDATE jobs SET spec = COALESCE(?, spec), state = ?, "
                    "restart_count = ?, updated = ?, reason = ? WHERE engine_id = ?",
                    (spec_json, state, restart_count, now, reason, engine_id),
                )

    def update_jobs(self, updates: Iterable[JobUpdate]) -> int:
        """Record state/progress of many jobs in one transaction; returns rows changed."""
        now = time.time()
        rows = [
            (
                u.state,
                float(u.done),
                int(u.gpus),
                json.dumps(dict(u.placement or {}), sort_keys=True),
                u.restart_count,
                u.reason,
                now,
                u.engine_id,
            )
            for u in updates
        ]
        for u in rows:
            _check_state(u[0])
        if not rows:
            return 0
        with self.transaction() as db:
            cur = db.executemany(
                "UPDATE jobs SET state = ?, done = ?, gpus = ?, placement = ?, "
                "restart_count = COALESCE(?, restart_count), reason = COALESCE(?, reason), "
                "updated = ? WHERE engine_id = ?",
                rows,
            )
            return int(cur.rowcount)

    def set_state(self, engine_id: str, state: str, reason: str = "") -> None:
        _check_state(state)
        with self.transaction() as db:
            db.execute(
                "UPDATE jobs SET state = ?, reason = ?, updated = ? WHERE engine_id = ?",
                (state, reason, time.time(), engine_id),
            )

    def jobs(self, states: Sequence[str] | None = None) -> dict[str, JobRow]:
        sql = "SELECT * FROM jobs"
        args: tuple[Any, ...] = ()
        if states is not None:
            sql += f" WHERE state IN ({','.join('?' * len(states))})"
            args = tuple(states)
        return {r["engine_id"]: job_row(r) for r in self.db.execute(sql, args)}

    def job(self, engine_id: str) -> JobRow | None:
        r = self.db.execute("SELECT * FROM jobs WHERE engine_id = ?", (engine_id,)).fetchone()
        return None if r is None else job_row(r)

    # ------------------------------------------------------------------ plans and actions
    def record_plan(
        self,
        run_id: int,
        engine_time: float,
        policy: str,
        plan_json: str,
        intents: Sequence[ActionIntent],
    ) -> tuple[int, list[int]]:
        """Write a plan and one ``intended`` row per action in ONE transaction, before acting.

        Returns (epoch, action ids)."""
        now = time.time()
        with self.transaction() as db:
            cur = db.execute(
                "INSERT INTO plans(run_id, time, engine_time, policy, plan) VALUES (?, ?, ?, ?, ?)",
                (run_id, now, engine_time, policy, plan_json),
            )
            epoch = int(cur.lastrowid)  # type: ignore[arg-type]
            ids = [self._insert_intent(db, run_id, epoch, i, now) for i in intents]
        return epoch, ids

    def intend(self, run_id: int, intents: Sequence[ActionIntent]) -> list[int]:
        """Intents outside a plan (evictions, reconciliation steps)."""
        now = time.time()
        with self.transaction() as db:
            return [self._insert_intent(db, run_id, None, i, now) for i in intents]

    @staticmethod
    def _insert_intent(
        db: sqlite3.Connection, run_id: int, epoch: int | None, intent: ActionIntent, now: float
    ) -> int:
        cur = db.execute(
            "INSERT INTO actions(epoch, run_id, engine_id, slurm_id, kind, before, after, "
            "restart_count, status, intended_at) VALUES (?,?,?,?,?,?,?,?,'intended',?)",
            (
                epoch,
                run_id,
                intent.engine_id,
                intent.slurm_id,
                intent.kind,
                json.dumps(dict(intent.before), sort_keys=True),
                json.dumps(dict(intent.after), sort_keys=True),
                intent.restart_count,
                now,
            ),
        )
        return int(cur.lastrowid)  # type: ignore[arg-type]

    def settle(self, action_ids: Sequence[int], status: str, detail: str = "") -> None:
        """Record the outcome of intended actions (``applied``/``failed``/``reconciled``)."""
        if status not in ACTION_STATUSES or status == "intended":
            raise ValueError(f"bad outcome {status!r}")
        if not action_ids:
            return
        now = time.time()
        with self.transaction() as db:
            db.executemany(
                "UPDATE actions SET status = ?, settled_at = ?, detail = ? "
                "WHERE id = ? AND status = 'intended'",
                [(status, now, detail, i) for i in action_ids],
            )

    def open_actions(self) -> list[ActionRow]:
        """Actions with an intent and no outcome, oldest first."""
        return [
            action_row(r)
            for r in self.db.execute("SELECT * FROM actions WHERE status = 'intended' ORDER BY id")
        ]

    def actions(self, engine_id: str | None = None) -> list[ActionRow]:
        if engine_id is None:
            rows = self.db.execute("SELECT * FROM actions ORDER BY id")
        else:
            rows = self.db.execute(
                "SELECT * FROM actions WHERE engine_id = ? ORDER BY id", (engine_id,)
            )
        return [action_row(r) for r in rows]

    # ------------------------------------------------------------------ reasons (schema 3)
    def record_reasons(
        self,
        epoch: int | None,
        actions: Mapping[str, str],
        waiting: Mapping[str, str],
        history: Sequence[tuple[float, str, str, str]],
    ) -> None:
        """One decision's reasons in ONE transaction: ``actions`` (engine id -> reason JSON)
        onto the actions of plan ``epoch``; ``waiting`` (engine id -> reason JSON, ``''`` to
        clear) onto the jobs; ``history`` rows ``(engine time, engine id, kind, reason
        JSON)`` into ``reasons``."""
        if not (actions and epoch is not None) and not waiting and not history:
            return
        now = time.time()
        with self.transaction() as db:
            if epoch is not None and actions:
                db.executemany(
                    "UPDATE actions SET reason = ? WHERE epoch = ? AND engine_id = ?",
                    [(r, epoch, e) for e, r in actions.items()],
                )
            if waiting:
                db.executemany(
                    "UPDATE jobs SET waiting = ? WHERE engine_id = ?",
                    [(r, e) for e, r in waiting.items()],
                )
            if history:
                db.executemany(
                    "INSERT INTO reasons(time, engine_time, engine_id, kind, reason) "
                    "VALUES (?, ?, ?, ?, ?)",
                    [(now, t, e, k, r) for t, e, k, r in history],
                )

    def reasons(self, engine_id: str) -> list[ReasonRow]:
        """A job's reason history, oldest first."""
        rows = self.db.execute(
            "SELECT * FROM reasons WHERE engine_id = ? ORDER BY id", (engine_id,)
        )
        return [
            ReasonRow(
                id=int(r["id"]),
                time=float(r["time"]),
                engine_time=float(r["engine_time"]),
                engine_id=r["engine_id"],
                kind=r["kind"],
                reason=r["reason"],
            )
            for r in rows
        ]

    def plan_count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM plans").fetchone()[0])

    def prune(self, older_than_s: float) -> int:
        """Delete settled plans/actions older than ``older_than_s`` and ended jobs not updated
        since; open intents and live jobs are never deleted. Returns rows removed."""
        cutoff = time.time() - older_than_s
        with self.transaction() as db:
            n = db.execute(
                "DELETE FROM actions WHERE status != 'intended' AND intended_at < ?", (cutoff,)
            ).rowcount
            n += db.execute(
                "DELETE FROM plans WHERE time < ? AND NOT EXISTS (SELECT 1 FROM "
                "actions a WHERE a.epoch = plans.epoch)",
                (cutoff,),
            ).rowcount
            n += db.execute(
                "DELETE FROM reasons WHERE time < ? AND engine_id NOT IN (SELECT "
                "engine_id FROM jobs WHERE state IN ('pending', 'running'))",
                (cutoff,),
            ).rowcount
            n += db.execute(
                "DELETE FROM jobs WHERE state IN ('completed','failed','gone',"
                "'failopen') AND updated < ?",
                (cutoff,),
            ).rowcount
            n += db.execute(
                "DELETE FROM runs WHERE ended IS NOT NULL AND ended < ? AND NOT "
                "EXISTS (SELECT 1 FROM plans p WHERE p.run_id = runs.run_id) AND "
                "NOT EXISTS (SELECT 1 FROM actions a WHERE a.run_id = runs.run_id)",
                (cutoff,),
            ).rowcount
        return int(n)


def _check_state(state: str) -> None:
    if state not in JOB_STATES:
        raise ValueError(f"bad job state {state!r}")
