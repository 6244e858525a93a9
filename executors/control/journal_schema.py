"""What a controller journal holds: its schema version, the job and action states, the SQLite
schema a fresh journal is built with, and the migrations from every earlier schema version.

Why its own module: the schema and the state vocabulary change together (a new job state needs
the ``CHECK`` constraint here and nothing else), while :mod:`.journal` (the ``Journal`` class)
and :mod:`.journal_files` (building a fresh journal file) both read them. The public names are
re-exported from :mod:`.journal`, where callers import them.

Why migrations and not "start a fresh journal": the journal holds what Slurm cannot tell an
upgraded controller (open intents of interrupted checkpoint-stops, progress, policy memory), so
a release that changes the schema must carry every older journal forward. Each entry of
:data:`MIGRATIONS` takes a journal from one version to the next; :class:`.journal.Journal`'s
writer applies the chain in ONE transaction (after a backup copy), so a failed or killed
migration leaves the old journal as it was. A fresh journal is built from :data:`SCHEMA`
directly; the tests check that a migrated journal ends up with the same tables, columns and
indexes as a fresh one.

History: 1 (gpuplan 0.1.0): meta, runs, jobs, plans, actions. 2: ``runs.version``, the gpuplan
release of each controller run (what ran before and after an upgrade). 3: reasons
(:mod:`gpuplan.models.reasons`, each a JSON ``{"code", "text", "terms"}``):
``jobs.waiting``, a pending job's reason at the latest decision (``''`` when it is not
pending or none was computed yet); ``actions.reason``, why each planned action was taken; the
``reasons`` table, one row each time the code of a job's waiting reason changed (``kind``
``waiting``) or a change the policy proposed was skipped by the restart gate (``kind``
``skipped``), the history ``gpuplan explain`` shows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

SCHEMA_VERSION = 3

JOB_STATES = ("pending", "running", "completed", "failed", "rejected", "failopen", "gone")
"""``pending``/``running``: the engine manages it; ``completed``/``failed``: ended (``failed``
covers cancellations and crashes past the restart budget); ``rejected``: the engine cannot run it
(e.g. larger than the cluster, out-of-range hook values) and released it to Slurm's own
scheduler; ``failopen``: the fail-open watchdog released it to Slurm's own scheduler and it ran
there; ``gone``: Slurm no longer knows it and its end is
unknown (the controller was down for longer than ``MinJobAge``)."""

TERMINAL_STATES = frozenset({"completed", "failed", "gone", "failopen"})
ACTION_STATUSES = ("intended", "applied", "failed", "reconciled")

SCHEMA = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE runs (
    run_id    INTEGER PRIMARY KEY AUTOINCREMENT,
    pid       INTEGER NOT NULL,
    host      TEXT    NOT NULL,
    policy    TEXT    NOT NULL,
    started   REAL    NOT NULL,
    last_seen REAL    NOT NULL,
    ended     REAL,
    exit      TEXT,
    version   TEXT    NOT NULL DEFAULT ''
);
CREATE TABLE jobs (
    engine_id     TEXT PRIMARY KEY,
    slurm_id      INTEGER NOT NULL,
    fingerprint   TEXT    NOT NULL,
    submit_time   REAL    NOT NULL,
    spec          TEXT,
    state         TEXT    NOT NULL CHECK (state IN
                  ('pending','running','completed','failed','rejected','failopen','gone')),
    done          REAL    NOT NULL DEFAULT 0,
    gpus          INTEGER NOT NULL DEFAULT 0,
    placement     TEXT    NOT NULL DEFAULT '{}',
    restart_count INTEGER NOT NULL DEFAULT 0,
    first_seen    REAL    NOT NULL,
    updated       REAL    NOT NULL,
    reason        TEXT    NOT NULL DEFAULT '',
    waiting       TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX jobs_slurm ON jobs(slurm_id);
CREATE INDEX jobs_live ON jobs(state) WHERE state IN ('pending', 'running');
CREATE TABLE plans (
    epoch       INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      INTEGER NOT NULL REFERENCES runs(run_id),
    time        REAL    NOT NULL,
    engine_time REAL    NOT NULL,
    policy      TEXT    NOT NULL,
    plan        TEXT    NOT NULL
);
CREATE TABLE actions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    epoch         INTEGER REFERENCES plans(epoch) ON DELETE CASCADE,
    run_id        INTEGER NOT NULL REFERENCES runs(run_id),
    engine_id     TEXT    NOT NULL,
    slurm_id      INTEGER,
    kind          TEXT    NOT NULL,
    before        TEXT    NOT NULL DEFAULT '{}',
    after         TEXT    NOT NULL DEFAULT '{}',
    restart_count INTEGER,
    status        TEXT    NOT NULL CHECK (status IN ('intended','applied','failed','reconciled')),
    intended_at   REAL    NOT NULL,
    settled_at    REAL,
    detail        TEXT    NOT NULL DEFAULT '',
    reason        TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX actions_open ON actions(status) WHERE status = 'intended';
CREATE INDEX actions_job ON actions(engine_id);
CREATE TABLE reasons (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    time        REAL    NOT NULL,
    engine_time REAL    NOT NULL,
    engine_id   TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    reason      TEXT    NOT NULL
);
CREATE INDEX reasons_job ON reasons(engine_id);
"""
"""The current schema (version :data:`SCHEMA_VERSION`), as a fresh journal is created."""


def _v1_to_v2(db: sqlite3.Connection) -> None:
    """Schema 2: each run records the gpuplan release that ran it (runs before the upgrade
    read ``''``: unknown, i.e. 0.1.0 or older)."""
    db.execute("ALTER TABLE runs ADD COLUMN version TEXT NOT NULL DEFAULT ''")


def _v2_to_v3(db: sqlite3.Connection) -> None:
    """Schema 3: reasons (a waiting job's current one, each action's, the history table).
    Rows written before the upgrade read ``''``: no reason was recorded."""
    db.execute("ALTER TABLE jobs ADD COLUMN waiting TEXT NOT NULL DEFAULT ''")
    db.execute("ALTER TABLE actions ADD COLUMN reason TEXT NOT NULL DEFAULT ''")
    db.execute(
        "CREATE TABLE reasons (\n"
        "    id          INTEGER PRIMARY KEY AUTOINCREMENT,\n"
        "    time        REAL    NOT NULL,\n"
        "    engine_time REAL    NOT NULL,\n"
        "    engine_id   TEXT    NOT NULL,\n"
        "    kind        TEXT    NOT NULL,\n"
        "    reason      TEXT    NOT NULL\n"
        ")"
    )
    db.execute("CREATE INDEX reasons_job ON reasons(engine_id)")


Migration = Callable[[sqlite3.Connection], None]

MIGRATIONS: dict[int, Migration] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
}
"""Version ``v`` -> the step that takes a journal from ``v`` to ``v + 1``, inside the writer's
migration transaction (DDL is transactional in SQLite). Every version from 1 to
``SCHEMA_VERSION - 1`` has one; a step never commits, and never deletes a row."""
