"""The single server's journal schema 2 (a job's OJPP profile) and the submit boundary's checks
of the profile, without a daemon."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from gpuplan.executors.local import journal as journal_module
from gpuplan.executors.local.journal import ServerJournal
from gpuplan.executors.local.server import _fraction, spec_of
from gpuplan.models import InputError

V1_TABLE = journal_module._SCHEMA.replace(",\n    memory REAL,\n    compute REAL", "")


def _row(j: ServerJournal, **extra: float) -> str:
    return j.add(
        name="resnet18",
        argv=["true"],
        cwd="/",
        env={},
        gpus=1,
        min_gpus=1,
        max_gpus=1,
        work=10.0,
        duration=None,
        submit_time=0.0,
        **extra,
    ).id


def test_a_version_1_journal_gains_the_profile_columns_and_keeps_its_jobs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.sqlite"
    assert "memory" not in V1_TABLE and "reason TEXT" in V1_TABLE
    with sqlite3.connect(path) as db:
        db.executescript(V1_TABLE)
        db.execute(
            "INSERT INTO jobs (id, name, argv, cwd, env, gpus, min_gpus, max_gpus, work, "
            "duration, submit_time) VALUES ('j1', 'old', '[\"true\"]', '/', '{}', 1, 1, 1, 5, "
            "NULL, 0)"
        )
        db.execute("PRAGMA user_version = 1")
    j = ServerJournal(path)
    old = j.get("j1")
    assert old is not None and old.name == "old" and old.memory is None and old.compute is None
    assert spec_of(old).memory is None  # an old job keeps whole GPUs
    new = j.get(_row(j, memory=0.25, compute=0.5))
    assert new is not None and (new.memory, new.compute) == (0.25, 0.5)
    profile = spec_of(new).memory
    assert profile is not None
    assert (profile.gamma, profile.delta, profile.p, profile.compute) == (0.25, 0.0, 0.0, 0.5)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2
    ServerJournal(path)  # opening again is a no-op


def test_compute_alone_gives_a_profile_with_no_memory(tmp_path: Path) -> None:
    j = ServerJournal(tmp_path / "journal.sqlite")
    row = j.get(_row(j, compute=0.3))
    assert row is not None
    profile = spec_of(row).memory
    assert profile is not None and profile.gamma == 0.0 and profile.compute == 0.3


@pytest.mark.parametrize("value", [0, -0.1, 1.0001, math.nan, math.inf, "x", [1]])
def test_the_socket_boundary_refuses_a_fraction_outside_0_1(value: object) -> None:
    with pytest.raises(InputError) as err:
        _fraction(value, "--memory")
    assert err.value.field == "--memory"


def test_the_socket_boundary_takes_fractions_and_absence() -> None:
    assert _fraction(None, "--compute") is None
    assert _fraction(1, "--compute") == 1.0
    assert _fraction("0.5", "--compute") == 0.5


def test_prune_forgets_ended_jobs_and_their_files_only(tmp_path: Path) -> None:
    """A long-lived server forgets jobs that ended over ``keep_finished_s`` ago: their rows
    (environments included) and files (checkpoints, the sidecar's folder). Running jobs,
    recently ended ones and another job's files that merely share a prefix stay."""
    from gpuplan.executors.local.gpus import choose_gpus
    from gpuplan.executors.local.server import Server, ServerOptions
    from gpuplan.executors.nvml.records import NodeInventory

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    options = ServerOptions(
        state_dir=state,
        gpus=choose_gpus("1", NodeInventory(nvml=False, reason="test")),
        policy="fifo",
        keep_finished_s=100.0,
    )
    server = Server(options)
    try:
        j = server.journal
        old, recent, running = _row(j), _row(j), _row(j)
        j.update(old, state="completed", end_time=10.0)
        j.update(recent, state="cancelled", end_time=150.0)
        j.update(running, state="running")
        jobs, runs = server.state_dir / "jobs", server.state_dir / "runs"
        doomed = [jobs / f"{old}.progress", jobs / f"{old}.pt", jobs / f".{old}.pt.77.tmp"]
        kept = [jobs / f"{old}0.progress", jobs / f"{recent}.ckpt", jobs / f"{running}.ckpt"]
        for path in [*doomed, *kept]:
            path.write_text("{}")
        (runs / f"{old}@local").mkdir()
        (runs / f"{old}@local" / "state.json").write_text("{}")
        assert server.prune(now=200.0) == [old]
        assert j.get(old) is None and j.get(recent) is not None and j.get(running) is not None
        assert not any(p.exists() for p in doomed) and all(p.exists() for p in kept)
        assert not (runs / f"{old}@local").exists()
        assert server.prune(now=200.0) == []
        assert _row(j) == "j4"  # ids are never reused
    finally:
        server._lock_fh.close()
