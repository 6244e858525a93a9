-- The controller journal's schema 1, as gpuplan 0.1.0 (before schema migrations) created it.
-- Frozen test data: tests/slurm/test_journal_migrations.py builds an old journal from it. Never edit.
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
    exit      TEXT
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
    reason        TEXT    NOT NULL DEFAULT ''
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
    detail        TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX actions_open ON actions(status) WHERE status = 'intended';
CREATE INDEX actions_job ON actions(engine_id);
