"""The single server's journal: every submitted job and where it stands, in SQLite.

Why a journal of its own (not the Slurm controller's): the controller journals intents around
Slurm actions and reads the queue back from Slurm; here the server *is* the queue, so what must
survive a crash is the job list itself (command, working directory, environment, GPU range)
and each job's last known state. The sidecars' own files say what runs; a restarted server
reads both (docs/single-server.md, crash recovery). One writer per process and thread; WAL
mode lets the socket thread insert while the engine thread updates.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 2
"""2 added ``memory`` and ``compute`` (a job's OJPP profile); a version-1 journal gains them
empty on open."""
FINAL = ("completed", "failed", "cancelled", "rejected")
"""States a job never leaves."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE,
    name TEXT NOT NULL,
    argv TEXT NOT NULL,
    cwd TEXT NOT NULL,
    env TEXT NOT NULL,
    gpus INTEGER NOT NULL,
    min_gpus INTEGER NOT NULL,
    max_gpus INTEGER NOT NULL,
    work REAL,
    duration REAL,
    submit_time REAL NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    placement TEXT NOT NULL DEFAULT '',
    done REAL NOT NULL DEFAULT 0,
    start_time REAL,
    end_time REAL,
    reason TEXT NOT NULL DEFAULT '',
    memory REAL,
    compute REAL
);
"""
_ADDED_IN_2 = ("memory", "compute")


@dataclass(frozen=True)
class JobRow:
    """One journaled job."""

    id: str
    name: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    gpus: int
    min_gpus: int
    max_gpus: int
    work: float | None
    duration: float | None
    submit_time: float
    state: str
    cancel_requested: bool
    placement: str
    done: float
    start_time: float | None
    end_time: float | None
    reason: str
    memory: float | None = None
    """Fraction of one GPU's memory each worker needs (OJPP's gamma); None: not co-locatable."""
    compute: float | None = None
    """Fraction of one GPU's compute each worker uses (OJPP's alpha)."""

    def public(self) -> dict[str, Any]:
        """What ``gpuplan status`` shows (no environment: it may hold secrets)."""
        return {
            "id": self.id,
            "name": self.name,
            "state": self.state,
            "gpus": self.gpus,
            "min_gpus": self.min_gpus,
            "max_gpus": self.max_gpus,
            "placement": self.placement,
            "done": self.done,
            "work": self.work,
            "submit_time": self.submit_time,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "reason": self.reason,
            "cancel_requested": self.cancel_requested,
            "argv": self.argv,
            "memory": self.memory,
            "compute": self.compute,
        }


class ServerJournal:
    """The journal at ``path`` (created 0600 inside the private state dir)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.touch(mode=0o600, exist_ok=True)
        with closing(sqlite3.connect(self.path, timeout=30.0, isolation_level=None)) as db:
            db.execute("PRAGMA journal_mode=WAL")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.path}: journal schema {version} is newer than this gpuplan's "
                    f"({SCHEMA_VERSION})"
                )
            db.executescript(_SCHEMA)
            have = {r[1] for r in db.execute("PRAGMA table_info(jobs)")}
            for column in _ADDED_IN_2:
                if column not in have:  # a version-1 journal: its jobs have no profile
                    db.execute(f"ALTER TABLE jobs ADD COLUMN {column} REAL")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=30.0, isolation_level=None)) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def add(
        self,
        *,
        name: str,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        gpus: int,
        min_gpus: int,
        max_gpus: int,
        work: float | None,
        duration: float | None,
        submit_time: float,
        memory: float | None = None,
        compute: float | None = None,
    ) -> JobRow:
        """Journal a new job (before the engine hears of it) and give it its id ``jN``."""
        with self._db() as db:
            cur = db.execute(
                "INSERT INTO jobs (name, argv, cwd, env, gpus, min_gpus, max_gpus, work, "
                "duration, submit_time, memory, compute) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    name,
                    json.dumps(list(argv)),
                    cwd,
                    json.dumps(dict(env)),
                    gpus,
                    min_gpus,
                    max_gpus,
                    work,
                    duration,
                    submit_time,
                    memory,
                    compute,
                ),
            )
            seq = cur.lastrowid
            job_id = f"j{seq}"
            db.execute("UPDATE jobs SET id = ? WHERE seq = ?", (job_id, seq))
        row = self.get(job_id)
        assert row is not None
        return row

    def update(self, job_id: str, **fields: Any) -> None:
        """Set some columns of one job (a final state is never left)."""
        if not fields:
            return
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._db() as db:
            db.execute(
                f"UPDATE jobs SET {cols} WHERE id = ? AND state NOT IN {FINAL!r}",
                (*fields.values(), job_id),
            )

    def prune(self, before: float) -> list[str]:
        """Forget the jobs that ended before ``before`` (the server's clock): their rows go,
        their environments (which may hold secrets) with them. Returns their ids, so the
        caller removes their files too. Ids are never reused (AUTOINCREMENT)."""
        with self._db() as db:
            ids = [
                r[0]
                for r in db.execute(
                    f"SELECT id FROM jobs WHERE state IN {FINAL!r} AND end_time IS NOT NULL "
                    "AND end_time < ? ORDER BY seq",
                    (before,),
                )
            ]
            db.executemany("DELETE FROM jobs WHERE id = ?", [(i,) for i in ids])
        return ids

    def get(self, job_id: str) -> JobRow | None:
        rows = self._select("WHERE id = ?", (job_id,))
        return rows[0] if rows else None

    def all(self) -> list[JobRow]:
        return self._select("", ())

    def unfinished(self) -> list[JobRow]:
        return self._select(f"WHERE state NOT IN {FINAL!r}", ())

    def _select(self, where: str, params: tuple[Any, ...]) -> list[JobRow]:
        with self._db() as db:
            rows = db.execute(
                "SELECT id, name, argv, cwd, env, gpus, min_gpus, max_gpus, work, duration, "
                "submit_time, state, cancel_requested, placement, done, start_time, end_time, "
                f"reason, memory, compute FROM jobs {where} ORDER BY seq",
                params,
            ).fetchall()
        return [
            JobRow(
                id=r[0],
                name=r[1],
                argv=json.loads(r[2]),
                cwd=r[3],
                env=json.loads(r[4]),
                gpus=r[5],
                min_gpus=r[6],
                max_gpus=r[7],
                work=r[8],
                duration=r[9],
                submit_time=r[10],
                state=r[11],
                cancel_requested=bool(r[12]),
                placement=r[13],
                done=r[14],
                start_time=r[15],
                end_time=r[16],
                reason=r[17],
                memory=r[18],
                compute=r[19],
            )
            for r in rows
        ]
