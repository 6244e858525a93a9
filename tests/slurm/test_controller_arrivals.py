"""Issue 24, item 7: a submission wakes ``gpuplan slurm-controller`` (no wait for the next poll).

Unit tests of the arrival probe (``sdiag``'s "Jobs submitted" counter, read through a stand-in
reader: parsing and wake-up logic only), then one test on the REAL Slurm lab: with
``--interval 3600`` and no wake file the controller polls once at start and then only when
woken, so a job submitted afterwards can start within the wait bound only if the probe saw its
submission and woke the controller.
"""

# ruff: noqa: F811 - the lab fixtures are imported from test_controller and used by name
from __future__ import annotations

import signal
from pathlib import Path

import pytest

from gpuplan.executors.control import command
from gpuplan.executors.slurm.wake import AnyWake, SubmitProbe, WakeFile, submitted_count
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

SDIAG = """*******************************************************
sdiag output at Fri Nov 27 07:50:01 2026 (1795679401)
Data since      Fri Nov 27 00:00:00 2026 (1795651200)
*******************************************************
Server thread count:  1
Agent queue size:     0
Jobs submitted: {n}
Jobs started:   3
Jobs completed: 2
Jobs canceled:  0
Jobs failed:    0
"""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_sdiag_submitted_count_is_parsed() -> None:
    assert submitted_count(SDIAG.format(n=12)) == 12
    assert submitted_count("Jobs started: 3\n") is None
    assert submitted_count(SDIAG.format(n="12x")) is None


def test_the_probe_wakes_once_per_change_and_looks_at_most_every_interval() -> None:
    count = [5]
    reads: list[float] = []
    clock = Clock()

    def read() -> str:
        reads.append(clock.now)
        return SDIAG.format(n=count[0])

    probe = SubmitProbe(read, 0.25, clock=clock)
    assert reads == [0.0]  # the reference, read when the probe is made
    count[0] = 6
    clock.now = 0.1
    assert not probe.changed() and reads == [0.0]  # too soon: not even a look
    clock.now = 0.25
    assert probe.changed() and probe.wakes == 1
    clock.now = 0.5
    assert not probe.changed()  # same count: no wake-up
    count[0] = 0  # the counter's reset at midnight is a change too (one early poll)
    clock.now = 0.75
    assert probe.changed() and probe.wakes == 2
    assert reads == [0.0, 0.25, 0.5, 0.75]


def test_a_failing_probe_never_wakes_and_rests_until_it_works_again() -> None:
    clock = Clock()
    calls = [0]
    broken = [True]

    def read() -> str:
        calls[0] += 1
        if broken[0]:
            raise OSError("sdiag: Access/permission denied")
        return SDIAG.format(n=9)

    probe = SubmitProbe(read, 0.25, max_failures=3, rest_s=60.0, clock=clock)
    for step in range(10):
        clock.now = step * 0.25
        assert not probe.changed()
    assert calls[0] == 3 and probe.resting  # the reference and two looks, then a rest
    broken[0] = False
    clock.now = 70.0
    assert not probe.changed() and calls[0] == 4 and not probe.resting  # a new reference
    clock.now = 70.25
    assert not probe.changed() and calls[0] == 5
    with pytest.raises(ValueError):
        SubmitProbe(read, 0.0)


def test_any_wake_consumes_every_source(tmp_path: Path) -> None:
    path = tmp_path / "wake"
    first, second = WakeFile(path), WakeFile(tmp_path / "other")
    both = AnyWake(first, second)
    assert not both.changed()
    path.write_text("1\n")
    (tmp_path / "other").write_text("1\n")
    assert both.changed()
    assert not both.changed()  # both changes were taken at once: no second wake-up


def test_arrival_check_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("-1", "nan", "soon"):
        with pytest.raises(SystemExit) as exc:
            command.main(
                [
                    "slurm-controller",
                    "--policy",
                    "fifo",
                    "--state-db",
                    str(tmp_path / "j.db"),
                    "--arrival-check",
                    bad,
                ]
            )
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "--arrival-check" in err and "Traceback" not in err


def test_a_submission_wakes_the_controller_long_before_its_next_poll(
    lab: SlurmLab, user: str, shared: Path, clean_partition: None
) -> None:
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    run = Controller(
        lab,
        db,
        log,
        args=(
            "--policy",
            "fifo",
            "--interval",
            "3600",
            "--wake-file",
            "none",
            "--arrival-check",
            "0.25",
        ),
    )
    try:
        heartbeat = db.with_name(db.name + ".heartbeat")
        # The heartbeat is written once the first cycle (reconcile + first poll) is done.
        _wait("the controller's first cycle", heartbeat.exists, LAB_WAIT_S, log)
        ids = {"A": _submit(lab, user, shared, "A", 2.0, 1, 1, 1)}
        # The next poll is an hour away and no wake file is watched: A starting within the
        # bound (generous for a busy machine, far below the interval) proves the probe woke it.
        _wait(
            "A to start after its submission",
            lambda: _states(lab, ids)["A"].state in ("RUNNING", "COMPLETING", "COMPLETED"),
            LAB_WAIT_S,
            log,
        )
    finally:
        run.kill(signal.SIGTERM)
    assert run.wait(LAB_WAIT_S) == 0
