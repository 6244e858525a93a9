"""Issue 16: a job's end wakes ``gpuplan slurm-controller`` through Slurm's ``EpilogSlurmctld``.

Unit tests of the watcher and of the shipped script (run by a real ``sh``), then one test on the
REAL Slurm lab: with ``--interval 3600`` the controller polls once at start and then only when
woken, so the second job of a strictly sequential pair can start within the wait bound only if
the first job's end woke it.
"""

# ruff: noqa: F811 - the lab fixtures are imported from test_controller and used by name
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from gpuplan.executors.slurm.wake import WakeFile, epilog_script
from tests.labs.slurm.lab import SlurmLab

from .test_controller import (  # noqa: F401 - fixtures
    LAB_WAIT_S,
    Controller,
    _states,
    _submit,
    _wait,
    clean_partition,
    lab,
    shared,
    user,
)


def test_wake_file_reports_each_change_once(tmp_path: Path) -> None:
    path = tmp_path / "wake"
    watcher = WakeFile(path)
    assert not watcher.changed()  # missing: nothing to report
    path.write_text("17\n")
    assert watcher.changed() and not watcher.changed()
    os.utime(path, ns=(1, 1))  # any change of the stamp, even to an older time, is a wake-up
    assert watcher.changed() and not watcher.changed()
    path.unlink()
    assert not watcher.changed()


def test_shipped_epilog_rewrites_its_wake_file_and_always_exits_zero(tmp_path: Path) -> None:
    wake = tmp_path / "wake"
    script = tmp_path / "epilog_wake.sh"
    script.write_text(epilog_script(wake))
    ran = subprocess.run(
        ["sh", str(script)],
        env={"SLURM_JOB_ID": "4242", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0 and wake.read_text() == "4242\n"
    # A missing directory (hook installed, controller host not set up yet) must not fail jobs.
    script.write_text(epilog_script(tmp_path / "absent" / "wake"))
    ran = subprocess.run(
        ["sh", str(script)],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0 and ran.stderr == ""


def test_a_job_end_wakes_the_controller_long_before_its_next_poll(
    lab: SlurmLab, user: str, shared: Path, clean_partition: None
) -> None:
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    # FIFO without backfill: B needs all 16 GPUs, so it can only start once A has ended.
    ids = {
        "A": _submit(lab, user, shared, "A", 4.0, 4, 4, 4),
        "B": _submit(lab, user, shared, "B", 16.0, 16, 16, 16),
    }
    run = Controller(
        lab,
        db,
        log,
        args=("--policy", "fifo", "--interval", "3600", "--wake-file", str(lab.wake_file)),
    )
    try:
        _wait("A to complete", lambda: _states(lab, ids)["A"].state == "COMPLETED", LAB_WAIT_S, log)
        # Without a wake-up the next poll is an hour away: B starting within the bound
        # (generous for a busy machine, far below the interval) proves the epilog woke it.
        _wait(
            "B to start after A's end",
            lambda: _states(lab, ids)["B"].state in ("RUNNING", "COMPLETING", "COMPLETED"),
            LAB_WAIT_S,
            log,
        )
    finally:
        run.kill(signal.SIGTERM)
    assert run.wait(LAB_WAIT_S) == 0
