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
