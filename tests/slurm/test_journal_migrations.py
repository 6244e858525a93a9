"""Issue 25 item 6: the controller journal's schema migrations (no cluster needed).

An old journal is built exactly as gpuplan 0.1.0 built one (its frozen DDL in
``tests/data/journal_schema_v1.sql``, WAL, 0600, ``user_version`` 1) and filled with what an
upgrade must carry over: a held job with progress, a running job with its placement, a finished
one, a plan with an applied and an open (interrupted) action, policy memory. The current code
opens it and everything must still be there; a migration that fails or is killed must leave the
old journal as it was.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan import __version__
from gpuplan.executors.control import journal_schema
from gpuplan.executors.control.journal import (
    SCHEMA_VERSION,
    Journal,
    JournalError,
)
from gpuplan.executors.control.journal_files import TEMP_MARK

V1_DDL = Path(__file__).parents[1] / "data" / "journal_schema_v1.sql"
TABLES = ("meta", "runs", "jobs", "plans", "actions")


def build_v1_journal(path: Path) -> None:
    """A schema-1 journal with held, running and finished jobs, a plan with an applied and an
    open action, and policy memory (what 0.1.0's controller leaves behind when stopped)."""
    db = sqlite3.connect(path, isolation_level=None)
    os.chmod(path, 0o600)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(V1_DDL.read_text())
    db.execute(
        "INSERT INTO meta(key, value) VALUES ('created', '100.0'), ('origin', '100.0'), "
        "('policy_state:fifo:0', '{\"stints\": {\"slurm-11\": 3}}')"
    )
    db.execute(
        "INSERT INTO runs(pid, host, policy, started, last_seen, ended, exit) VALUES "
        "(11, 'h', 'fifo', 100.0, 150.0, 150.0, 'clean'), "
        "(12, 'h', 'fifo', 160.0, 200.0, NULL, NULL)"
    )
    spec = json.dumps({"id": "slurm-11", "requested_gpus": 2})
    jobs = [
        ("slurm-10", 10, "fp10", 101.0, spec, "completed", 50.0, 0, "{}", 0, "completed"),
        ("slurm-11", 11, "fp11", 102.0, spec, "running", 20.5, 2, '{"node1": 2}', 1, ""),
        ("slurm-12", 12, "fp12", 103.0, spec, "pending", 7.25, 0, "{}", 2, ""),
        ("slurm-13", 13, "fp13", 104.0, None, "rejected", 0.0, 0, "{}", 0, "refused"),
    ]
    db.executemany(
        "INSERT INTO jobs(engine_id, slurm_id, fingerprint, submit_time, spec, "
        "state, done, gpus, placement, restart_count, first_seen, updated, reason) "
        "VALUES (?,?,?,?,?,?,?,?,?,?,110.0,190.0,?)",
        jobs,
    )
    db.execute(
        "INSERT INTO plans(run_id, time, engine_time, policy, plan) VALUES "
        "(2, 170.0, 70.0, 'fifo', '{}')"
    )
    db.execute(
        "INSERT INTO actions(epoch, run_id, engine_id, slurm_id, kind, before, after, "
        "restart_count, status, intended_at, settled_at, detail) VALUES "
        "(1, 2, 'slurm-11', 11, 'start', '{}', '{\"node1\": 2}', 1, 'applied', 170.0, "
        "171.0, ''), "
        "(1, 2, 'slurm-12', 12, 'preempt', '{\"node2\": 1}', '{}', 2, 'intended', 170.0, "
        "NULL, '')"
    )
    db.execute("PRAGMA user_version = 1")
    db.close()


def _rows(path: Path, uri_mode: str = "ro") -> dict[str, list[tuple[object, ...]]]:
    """Every row of every schema-1 column (what a migration must not lose)."""
    db = sqlite3.connect(f"file:{path}?mode={uri_mode}", uri=True)
    try:
        out: dict[str, list[tuple[object, ...]]] = {}
        v1 = sqlite3.connect(":memory:")
        v1.executescript(V1_DDL.read_text())
        for table in TABLES:
            cols = [r[1] for r in v1.execute(f"PRAGMA table_info({table})")]
            out[table] = sorted(
                db.execute(
                    f"SELECT {', '.join(cols)} FROM {table} WHERE NOT (key LIKE 'migrated:%')"
                    if table == "meta"
                    else f"SELECT {', '.join(cols)} FROM {table}"
                ),
                key=repr,
            )
        return out
    finally:
        db.close()


def _shape(db: sqlite3.Connection) -> dict[str, object]:
    """Tables, columns (name, type, not null, default, pk) and indexes (with their SQL)."""
    shape: dict[str, object] = {}
    for (table,) in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name "
        "NOT LIKE 'sqlite_%' ORDER BY name"
    ):
        shape[table] = [tuple(r[1:]) for r in db.execute(f"PRAGMA table_info({table})")]
    shape["indexes"] = sorted(
        tuple(r)
        for r in db.execute(
            "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        )
    )
    return shape


def _version(path: Path) -> int:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def test_every_earlier_schema_has_a_migration_step() -> None:
    assert SCHEMA_VERSION >= 2
    assert set(journal_schema.MIGRATIONS) == set(range(1, SCHEMA_VERSION))


def test_a_schema_1_journal_is_migrated_with_nothing_lost(tmp_path: Path) -> None:
    db = tmp_path / "ctl.db"
    build_v1_journal(db)
    before = _rows(db)
    with pytest.raises(JournalError, match="controller of this release migrates it"):
        Journal(db, writer=False)  # a reader never migrates...
    assert _version(db) == 1  # ...and changed nothing
    with Journal(db) as journal:
        assert journal.schema_version == SCHEMA_VERSION
        # held and running jobs, progress, placement, the open intent, policy memory: all there
        assert journal.job("slurm-12").state == "pending"  # type: ignore[union-attr]
        assert journal.job("slurm-12").done == 7.25  # type: ignore[union-attr]
        running = journal.job("slurm-11")
        assert running is not None and running.placement == {"node1": 2}
        assert [(a.engine_id, a.kind) for a in journal.open_actions()] == [("slurm-12", "preempt")]
        assert journal.meta("policy_state:fifo:0") == '{"stints": {"slurm-11": 3}}'
        assert [r.version for r in journal.runs()] == ["", ""]  # unknown: before the upgrade
        run = journal.begin_run("fifo")
        assert journal.runs()[-1].run_id == run and journal.runs()[-1].version == __version__
        note = json.loads(journal.meta(f"migrated:1->{SCHEMA_VERSION}") or "{}")
        assert note["by"] == __version__ and note["backup"] == "ctl.db.schema1.bak"
    after = _rows(db)
    after["runs"] = [r for r in after["runs"] if r[0] != run]
    assert after == before
    # The schema-1 copy is private, complete and still what 0.1.0 can open (a downgrade).
    backup = tmp_path / "ctl.db.schema1.bak"
    assert (backup.stat().st_mode & 0o777) == 0o600
    assert _version(backup) == 1 and _rows(backup) == before
    assert not [p for p in tmp_path.iterdir() if TEMP_MARK in p.name]
    # A migrated journal has exactly the shape of a fresh one.
    with Journal(tmp_path / "fresh.db") as fresh:
        fresh_shape = _shape(fresh.db)
    with Journal(db) as migrated:  # opening again migrates nothing
        assert _shape(migrated.db) == fresh_shape
        assert migrated.meta(f"migrated:1->{SCHEMA_VERSION}") is not None


def test_a_failing_migration_step_leaves_the_old_journal_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "ctl.db"
    build_v1_journal(db)
    before = _rows(db)

    def half_done(conn: sqlite3.Connection) -> None:
        journal_schema._v1_to_v2(conn)  # the first change is made, then the step fails
        conn.execute("UPDATE jobs SET state = 'gone'")
        raise sqlite3.OperationalError("disk I/O error (simulated)")

    monkeypatch.setitem(journal_schema.MIGRATIONS, 1, half_done)
    with pytest.raises(JournalError, match=r"failed: disk I/O error.*journal is unchanged"):
        Journal(db)
    assert _version(db) == 1 and _rows(db) == before
    raw = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    assert "version" not in [r[1] for r in raw.execute("PRAGMA table_info(runs)")]
    raw.close()
    monkeypatch.undo()
    with Journal(db) as journal:  # the real step afterwards works: the lock went too
        assert journal.schema_version == SCHEMA_VERSION
    assert _rows(db) == before


def test_a_backup_that_cannot_be_written_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "ctl.db"
    build_v1_journal(db)
    before = _rows(db)
    (tmp_path / "ctl.db.schema1.bak").mkdir()  # the rename onto it fails
    with pytest.raises(JournalError, match=r"cannot back up.*nothing was changed"):
        Journal(db)
    assert _version(db) == 1 and _rows(db) == before
    assert not [p for p in tmp_path.iterdir() if TEMP_MARK in p.name]


def test_a_controller_killed_while_migrating_leaves_schema_1(tmp_path: Path) -> None:
    """SIGKILL inside the migration transaction (failpoint ``journal.migrate``, after every
    step ran): the journal is schema 1 with every row, and the next start migrates it."""
    db = tmp_path / "ctl.db"
    build_v1_journal(db)
    before = _rows(db)
    code = (
        "import sys\n"
        "from gpuplan.executors.control.failpoints import Failpoints\n"
        "from gpuplan.executors.control.journal import Journal\n"
        "Journal(sys.argv[1], failpoints=Failpoints('journal.migrate@1'))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(db)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert _version(db) == 1 and _rows(db) == before
    with Journal(db) as journal:
        assert journal.schema_version == SCHEMA_VERSION
        assert [a.kind for a in journal.open_actions()] == ["preempt"]
    assert _rows(db) == before


def test_a_schema_2_journal_gets_the_reasons_of_schema_3(tmp_path: Path) -> None:
    """2 -> 3: ``jobs.waiting``, ``actions.reason`` and the ``reasons`` table; every row kept,
    old rows read ``''`` (no reason recorded), and the new columns take reasons."""
    db = tmp_path / "ctl.db"
    build_v1_journal(db)
    raw = sqlite3.connect(db, isolation_level=None)
    journal_schema._v1_to_v2(raw)
    raw.execute("PRAGMA user_version = 2")
    raw.close()
    before = _rows(db)
    with Journal(db) as journal:
        assert journal.schema_version == SCHEMA_VERSION == 3
        assert journal.job("slurm-12").waiting == ""  # type: ignore[union-attr]
        assert [a.reason for a in journal.actions()] == ["", ""]
        assert journal.reasons("slurm-12") == []
        note = json.loads(journal.meta("migrated:2->3") or "{}")
        assert note["backup"] == "ctl.db.schema2.bak"
        why = '{"code":"behind","text":"behind 1 job","terms":{"ahead":1}}'
        journal.record_reasons(
            1,
            {"slurm-11": '{"code":"start","text":"s","terms":{}}'},
            {"slurm-12": why},
            [(70.0, "slurm-12", "waiting", why)],
        )
        assert journal.job("slurm-12").waiting == why  # type: ignore[union-attr]
        assert journal.actions("slurm-11")[0].reason.startswith('{"code":"start"')
        assert [(r.kind, r.reason) for r in journal.reasons("slurm-12")] == [("waiting", why)]
    after = _rows(db)
    assert after == before  # every schema-1 column of every row as it was
    assert _version(tmp_path / "ctl.db.schema2.bak") == 2
    with Journal(tmp_path / "fresh.db") as fresh:
        fresh_shape = _shape(fresh.db)
    with Journal(db) as migrated:
        assert _shape(migrated.db) == fresh_shape
