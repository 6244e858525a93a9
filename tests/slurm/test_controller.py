"""The Slurm controller (``gpuplan slurm-controller``): journal, crash recovery and fail-open.

The first block are unit tests of the journal and of parsing (no cluster). The rest runs against
the REAL Slurm lab of ``tests/slurm_fixtures.py`` (slurmctld + 4 slurmd x 4 fake A100, the shipped
``job_submit.lua``): jobs are submitted by an unprivileged user with plain ``sbatch`` — the hook
marks and holds them — and the controller runs as a subprocess that is SIGKILLed at several
points and restarted on the same journal. Under CI (``CI=true``) a lab that cannot start fails
these tests instead of skipping them (``slurm_fixtures.unavailable``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuplan.executors.control import command
from gpuplan.executors.control.controller import (
    Failpoints,
    comment_options,
    engine_id,
    fail_open_check,
    fingerprint,
    heartbeat_age,
    is_failopen,
    is_managed,
    marker,
    spec_from_slurm,
    with_marker_state,
    write_heartbeat,
)
from gpuplan.executors.control.journal import (
    SCHEMA_VERSION,
    ActionIntent,
    JobUpdate,
    Journal,
    JournalError,
)
from gpuplan.executors.slurm.cli import SlurmError, SlurmJob
from gpuplan.models import Cluster, InputError, Node
from tests.labs.slurm.lab import SlurmLab

from .. import slurm_fixtures as fx

# ---------------------------------------------------------------------------------------- unit


def test_journal_schema_intents_and_outcomes(tmp_path: Path) -> None:
    db = tmp_path / "j.db"
    with Journal(db) as journal:
        assert journal.schema_version == SCHEMA_VERSION
        assert journal.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        run = journal.begin_run("max-min")
        journal.add_job("slurm-7", 7, "fp7", 100.0, {"id": "slurm-7"}, "pending")
        epoch, ids = journal.record_plan(
            run,
            1.5,
            "max-min",
            "{}",
            [
                ActionIntent("slurm-7", 7, "start", {}, {"node1": 2}, 0),
                ActionIntent("slurm-8", 8, "resize", {"node2": 4}, {"node2": 2}, 3),
            ],
        )
        assert epoch == 1 and len(ids) == 2
        assert [a.kind for a in journal.open_actions()] == ["start", "resize"]
        journal.settle(ids[:1], "applied")
        open_ = journal.open_actions()
        assert [(a.engine_id, a.restart_count, a.after) for a in open_] == [
            ("slurm-8", 3, {"node2": 2})
        ]
        journal.update_jobs([JobUpdate("slurm-7", "running", 4.0, 2, {"node1": 2})])
        row = journal.job("slurm-7")
        assert row is not None and (row.state, row.done, row.placement) == (
            "running",
            4.0,
            {"node1": 2},
        )
        with pytest.raises(ValueError):
            journal.settle(ids, "intended")
        with pytest.raises(ValueError):
            journal.update_jobs([JobUpdate("slurm-7", "exploded", 0.0)])
    # A reader sees the same state while (or after) the writer runs, without taking its lock.
    reader = Journal(db, writer=False)
    try:
        assert [a.engine_id for a in reader.open_actions()] == ["slurm-8"]
        with pytest.raises(JournalError, match="read-only"):
            reader.set_meta("x", "y")
    finally:
        reader.close()


def test_a_failed_transaction_leaves_nothing_behind(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.db") as journal:
        run = journal.begin_run("fifo")
        with pytest.raises(sqlite3.IntegrityError):
            # The second intent violates the schema: the plan row and the first intent must
            # not survive either (all or nothing).
            journal.record_plan(
                run,
                0.0,
                "fifo",
                "{}",
                [
                    ActionIntent("a", 1, "start", {}, {}, 0),
                    ActionIntent(None, 2, "start", {}, {}, 0),
                ],
            )  # type: ignore[arg-type]
        assert journal.plan_count() == 0 and journal.open_actions() == []


def test_journal_has_one_writer_and_refuses_newer_schemas(tmp_path: Path) -> None:
    db = tmp_path / "j.db"
    first = Journal(db)
    try:
        with pytest.raises(JournalError, match="in use by another controller"):
            Journal(db)
    finally:
        first.close()
    Journal(db).close()  # the lock went with the first writer
    raw = sqlite3.connect(db)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.commit()
    raw.close()
    with pytest.raises(JournalError, match="newer gpuplan"):
        Journal(db)
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    (tmp_path / "junk.db").chmod(0o600)  # private, so the content is what is refused
    with pytest.raises(JournalError, match="not a SQLite database"):
        Journal(tmp_path / "junk.db")


def test_reused_slurm_ids_do_not_inherit_old_rows(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.db") as journal:
        journal.add_job("slurm-3", 3, "old-job", 10.0, None, "running")
        journal.add_job("slurm-3", 3, "old-job", 99.0, None, "running")  # same job, requeued
        assert len(journal.jobs()) == 1
        journal.add_job("slurm-3", 3, "new-job", 500.0, None, "pending")
        rows = journal.jobs()
        assert sorted(rows) == sorted(
            ["slurm-3", next(k for k in rows if k.startswith("slurm-3~"))]
        )
        archived = next(r for k, r in rows.items() if k != "slurm-3")
        assert archived.fingerprint == "old-job" and archived.state == "gone"
        assert rows["slurm-3"].fingerprint == "new-job"


V38_HELD = {
    "job_id": 41,
    "name": "train.sh",
    "job_state": "PENDING",
    "state_reason": "JobHeldUser",
    "priority": 0,
    "partition": "gpuplan",
    "admin_comment": "gpuplan:held;gpus=2;min=1;max=4",
    "comment": "gpuplan:min=1,max=4,work=60,rate=0.5",
    "tres_per_node": "gres:gpu:2",
    "tres_per_job": "",
    "node_count": 1,
    "restart_cnt": 0,
    "submit_time": 1_000_100,
    "time_limit": None,
    "user_id": 1001,
    "user_name": "alice",
    "nodes": "",
    "command": "/home/alice/train.sh",
    "current_working_directory": "/home/alice",
    "standard_output": "/home/alice/out",
}


def _cluster() -> Cluster:
    return Cluster(nodes=[Node(name=f"node{i}", gpus=4, gpu_type="a100") for i in (1, 2)])


def test_markers_comments_and_management() -> None:
    assert marker("gpuplan:held;gpus=2;min=1;max=4") == (
        "held",
        {"gpus": "2", "min": "1", "max": "4"},
    )
    assert marker("something else") is None
    assert with_marker_state("gpuplan:held;gpus=2", "failopen") == "gpuplan:failopen;gpus=2"
    assert comment_options("gpuplan:min=1,max=8;work=5") == {"min": 1, "max": 8, "work": 5.0}
    assert comment_options("not ours:min=1") == {}
    held = SlurmJob.from_json(V38_HELD)
    assert is_managed(held) and is_managed(held, ["gpuplan"]) and not is_managed(held, ["gpu"])
    released = SlurmJob.from_json({**V38_HELD, "admin_comment": "gpuplan:failopen;gpus=2"})
    assert not is_managed(released) and is_failopen(released)
    # Jobs a library-driven SlurmExecutor submitted belong to that engine, not the controller.
    own = SlurmJob.from_json({**V38_HELD, "comment": "gpuplan:run=ab12;id=x;min=1;max=4"})
    assert not is_managed(own)
    # The fingerprint survives a requeue (Slurm resets submit_time) but not another job.
    requeued = SlurmJob.from_json({**V38_HELD, "submit_time": 1_000_900, "restart_cnt": 2})
    assert fingerprint(requeued) == fingerprint(held)
    assert fingerprint(SlurmJob.from_json({**V38_HELD, "command": "/x"})) != fingerprint(held)


def test_spec_from_a_hook_marked_job() -> None:
    spec = spec_from_slurm(
        SlurmJob.from_json(V38_HELD), origin=1_000_000, cluster=_cluster(), default_duration_s=3600
    )
    assert spec.id == engine_id(41) == "slurm-41"
    assert (spec.requested_gpus, spec.min_gpus, spec.max_gpus, spec.elastic) == (2, 1, 4, True)
    assert spec.work == 60.0 and spec.submit_time == 100.0 and spec.user == "alice"
    assert spec.throughput.rate(2) == pytest.approx(1.0)  # rate=0.5 per GPU
    assert spec.gpu_type is None and spec.checkpoint.on_signal
    # Rigid, typed, sized by its time limit (minutes) when the comment gives no work.
    rigid = SlurmJob.from_json(
        {
            **V38_HELD,
            "admin_comment": "gpuplan:held;gpus=8;min=8;max=8",
            "comment": "",
            "tres_per_node": "gres:gpu:a100:4",
            "node_count": 2,
            "time_limit": 30,
        }
    )
    spec = spec_from_slurm(rigid, origin=0, cluster=_cluster(), default_duration_s=3600)
    assert (spec.requested_gpus, spec.elastic, spec.gpu_type) == (8, False, "a100")
    assert spec.work == pytest.approx(1800 * spec.throughput.rate(8))


def test_heartbeat_age(tmp_path: Path) -> None:
    path = tmp_path / "hb"
    assert heartbeat_age(path) == float("inf")  # never written = controller absent
    write_heartbeat(path, {"pid": 1})
    assert heartbeat_age(path) < 1.0
    assert heartbeat_age(path, now=time.time() + 50) == pytest.approx(50, abs=1.0)
    path.write_text("{broken")
    assert heartbeat_age(path) == float("inf")


def test_failpoints_kill_the_process_at_the_nth_hit() -> None:
    points = Failpoints("cli.signal@2,intent")
    assert points.targets == {"cli.signal": 2, "intent": 1}
    points.hit("cli.release")  # not armed: nothing happens
    code = (
        "from gpuplan.executors.control.controller import Failpoints\n"
        "p = Failpoints('x@2')\np.hit('x')\nprint('first', flush=True)\np.hit('x')\n"
        "print('never')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == -signal.SIGKILL and proc.stdout == "first\n"


def test_command_line_checks_before_touching_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "j.db"
    assert command.main(["slurm-controller", "--state-db", str(db)]) == 2  # no --policy
    assert (
        command.main(["slurm-controller", "--policy", "no-such-policy", "--state-db", str(db)]) == 2
    )
    assert not db.exists()  # a bad policy is refused before the journal is created
    # A fresh heartbeat: the watchdog decides without asking Slurm (no cluster here at all).
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "missing-slurm.conf"))
    write_heartbeat(Path(f"{db}.heartbeat"), {"pid": 1})
    t0 = time.monotonic()
    assert command.main(["slurm-controller", "--fail-open-check", "--state-db", str(db)]) == 0
    assert time.monotonic() - t0 < 5.0


@pytest.mark.parametrize(
    ("admin", "comment", "field"),
    [
        ("gpuplan:held;gpus=2;min=1;max=1000000000", "gpuplan:work=60", "max"),
        ("gpuplan:held;gpus=2;min=0;max=4", "gpuplan:work=60", "min"),
        ("gpuplan:held;gpus=2;min=3;max=4", "gpuplan:work=60", "min"),
        ("gpuplan:held;gpus=2;min=1;max=4", "gpuplan:work=nan", "comment"),
        ("gpuplan:held;gpus=2;min=1;max=4", "gpuplan:work=1e400", "comment"),
        ("gpuplan:held;gpus=2;min=1;max=4", "gpuplan:duration=-5", "comment"),
        ("gpuplan:held;gpus=2;min=1;max=4", "gpuplan:work=5,rate=inf", "comment"),
        ("gpuplan:held;gpus=99;min=1;max=99", "gpuplan:work=5", "gpus"),
    ],
)
def test_hook_values_out_of_bounds_are_refused_by_the_controller(
    admin: str, comment: str, field: str
) -> None:
    """The controller re-checks every hook-supplied value against the partition it sees: a job
    whose marker was written by an outdated or bypassed hook cannot make it allocate for a
    billion GPUs or run for ever (bounds in docs/controller.md)."""
    job = SlurmJob.from_json({**V38_HELD, "admin_comment": admin, "comment": comment})
    with pytest.raises(InputError) as err:
        spec_from_slurm(job, origin=0, cluster=_cluster(), default_duration_s=3600)
    assert err.value.field == field and "Slurm job 41" in str(err.value)


def test_an_empty_or_damaged_journal_is_refused_never_restarted(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch(mode=0o600)  # private, so the content is what is refused
    with pytest.raises(JournalError, match=r"is empty \(0 bytes\)"):
        Journal(empty)
    assert empty.stat().st_size == 0  # untouched: the operator decides
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    garbage.chmod(0o600)
    with pytest.raises(JournalError, match="not a SQLite database"):
        Journal(garbage)
    # a real journal damaged in the middle (pages overwritten)
    damaged = tmp_path / "damaged.db"
    with Journal(damaged) as journal:
        run = journal.begin_run("fifo")
        for k in range(300):
            journal.add_job(
                f"slurm-{k}", k, "fp", 1.0, {"id": f"slurm-{k}", "pad": "x" * 500}, "pending"
            )
        journal.end_run(run, "clean")
    data = bytearray(damaged.read_bytes())
    for offset in range(4096, len(data) - 4096, 8192):
        data[offset : offset + 2048] = b"\xff" * 2048
    damaged.write_bytes(bytes(data))
    with pytest.raises(JournalError, match=r"damaged|not a usable journal"):
        Journal(damaged)
    # an SQLite file that is not a gpuplan journal is not silently turned into one
    foreign = tmp_path / "foreign.db"
    sqlite3.connect(foreign).execute("CREATE TABLE t(x)").connection.close()
    foreign.chmod(0o600)
    with pytest.raises(JournalError, match="holds no gpuplan journal"):
        Journal(foreign)


def test_journal_paths_are_escaped_and_files_private(tmp_path: Path) -> None:
    base = tmp_path / "state dir"
    db = base / "a#1?x=y.db"
    with Journal(db) as journal:
        journal.begin_run("fifo")
    assert db.exists() and not (base / "a").exists()  # the lock and the DB are one file's
    with Journal(db, writer=False) as reader:
        assert len(reader.runs()) == 1
    assert base.stat().st_mode & 0o777 == 0o700
    write_heartbeat(Path(f"{db}.heartbeat"), {"pid": 1})
    for path in (db, Path(f"{db}.lock"), Path(f"{db}.heartbeat")):
        assert path.stat().st_mode & 0o777 == 0o600, path
    for extra in (Path(f"{db}-wal"), Path(f"{db}-shm")):
        if extra.exists():
            assert extra.stat().st_mode & 0o077 == 0, extra
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(JournalError, match="writable by group or others"):
        Journal(shared / "j.db")
    link = tmp_path / "link.db"
    link.symlink_to(db)
    with pytest.raises(JournalError, match="is a symlink"):
        Journal(link)


@pytest.mark.parametrize(
    "bad",
    [
        ["--stale-after", "nan"],
        ["--stale-after", "-1"],
        ["--interval", "nan"],
        ["--interval", "0"],
        ["--watch", "inf"],
        ["--max-stall", "1e300"],
        ["--seed", "-1"],
        # the live endpoint's options (issue 25; its other tests: test_controller_http.py)
        ["--http", "65536"],
        ["--http", "-1"],
        ["--http", "http"],
        ["--http", "\u0661"],
        ["--http-bind", "localhost"],
        ["--http-bind", "0.0.0.0; rm"],
    ],
)
def test_bad_options_are_one_line_and_exit_2(
    bad: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "j.db"
    with pytest.raises(SystemExit) as exit_:
        command.main(["slurm-controller", "--policy", "fifo", "--state-db", str(db), *bad])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and bad[0] in err[0], err
    assert not db.exists()


class _ReleaseFailsOnce:
    """The watchdog's view of Slurm for a unit test of its decision logic: two held jobs whose
    first release fails once (a busy slurmctld), recording every call in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, dict[str, str]]] = []
        self.failed = False
        self.held = {41: True, 42: True}
        self.marks = {41: "gpuplan:held;gpus=2;min=1;max=4", 42: "gpuplan:held;gpus=2;min=1;max=4"}

    def jobs(self, all_states: bool = True) -> list[SlurmJob]:
        return [
            SlurmJob.from_json(
                {
                    **V38_HELD,
                    "job_id": j,
                    "priority": 0 if h else 1,
                    "state_reason": "JobHeldUser" if h else "None",
                    "admin_comment": self.marks[j],
                }
            )
            for j, h in self.held.items()
        ]

    def update_job(self, job_id: int, **fields: str) -> None:
        self.calls.append(("update", job_id, fields))
        if "AdminComment" in fields:
            self.marks[job_id] = fields["AdminComment"]

    def release(self, job_id: int) -> None:
        self.calls.append(("release", job_id, {}))
        if job_id == 41 and not self.failed:
            self.failed = True
            raise SlurmError("slurm_release_job error: Socket timed out")
        self.held[job_id] = False


def test_fail_open_marks_only_released_jobs_and_continues_past_a_failure(tmp_path: Path) -> None:
    cli = _ReleaseFailsOnce()
    hb = tmp_path / "hb"  # missing: the controller is down
    assert fail_open_check(cli, hb, 5.0) == [42]  # type: ignore[arg-type]
    # 41's release failed: still held and still marked held, so the next pass retries it
    assert cli.held[41] and cli.marks[41].startswith("gpuplan:held;")
    assert cli.marks[42].startswith("gpuplan:failopen;")
    assert fail_open_check(cli, hb, 5.0) == [41]  # type: ignore[arg-type]
    assert cli.marks[41].startswith("gpuplan:failopen;")
    # the marker is written after the release, never before
    for job in (41, 42):
        kinds = [(k, "AdminComment" in f) for k, j, f in cli.calls if j == job]
        assert kinds.index(("update", True)) > max(
            i for i, k in enumerate(kinds) if k == ("release", False)
        )


# ---------------------------------------------------------------------------------------- lab

PARTITION = "gpuplan"
LAB_WAIT_S = 300.0
"""Bound of every wait for a lab state: generous, because it stands for "never happened", not
for "too slow" (a busy 2-core machine can stretch Slurm's scheduling by tens of seconds)."""
PYTHON = "/usr/bin/python3"
"""The jobs run as an unprivileged user, who cannot read the test venv (under /root): the
stand-in needs only the standard library, so the system interpreter runs it."""


@pytest.fixture(scope="module")
def lab() -> Iterator[SlurmLab]:
    """The project's lab via ``slurm_fixtures.lab_session`` (module scope: released for
    ``test_slurm.py``'s session fixture when this module is done)."""
    yield from fx.module_lab()


@pytest.fixture(scope="module")
def user(lab: SlurmLab) -> str:
    if not Path(PYTHON).exists():
        fx.unavailable(f"{PYTHON} is missing (jobs run the stand-in with it)")
    fx.ensure_user(fx.UNPRIVILEGED_USER)
    return fx.UNPRIVILEGED_USER


@pytest.fixture
def shared() -> Iterator[Path]:
    """:func:`slurm_fixtures.shared_job_dir`, removed afterwards."""
    path = fx.shared_job_dir("gpuplan-ctl-")
    yield path
    if not os.environ.get("GPUPLAN_KEEP_TEST_DIRS"):  # keep them to debug a failure
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def clean_partition(lab: SlurmLab) -> Iterator[None]:
    """No leftover job in the engine partition before, and none of ours after."""
    _cancel_partition(lab)
    yield
    _cancel_partition(lab)


def _cancel_partition(lab: SlurmLab) -> None:
    """Cancel every job of the engine partition (and blockers) and wait until none of them is
    pending, running or completing: a cancelled stand-in still runs (or completes) for a while,
    and a test that starts while its GPUs are taken measures the last test's jobs."""
    cli = lab.cli(timeout=30)

    def ours() -> list[int]:
        with contextlib.suppress(SlurmError):
            return [
                job.job_id
                for job in cli.jobs(all_states=False)
                if (PARTITION in job.partition.split(",") or job.name == "blocker")
                and not job.finished  # squeue --json lists finished jobs too
            ]
        return [-1]  # slurmctld did not answer: ask again

    for job_id in ours():
        with contextlib.suppress(SlurmError):
            cli.cancel(job_id)
    _wait("the partition's jobs to be gone", lambda: not ours(), LAB_WAIT_S)


def _submit(
    lab: SlurmLab, user: str, shared: Path, name: str, work: float, gpus: int, lo: int, hi: int
) -> int:
    """``sbatch`` as the user would: the hook marks, normalises and holds the job."""
    proc = fx.submit_standin(
        lab, user, shared, name, work=work, gpus=gpus, lo=lo, hi=hi, checkpoint_interval_s=None
    )
    assert "held for the GPU engine" in proc.stderr
    return fx.submitted_id(proc)


class Controller:
    """``gpuplan slurm-controller`` as a subprocess (what systemd would run)."""

    def __init__(
        self,
        lab: SlurmLab,
        db: Path,
        log: Path,
        *,
        failpoint: str | None = None,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        env = {**os.environ, **lab.env, **(env or {})}
        env.pop("GPUPLAN_FAILPOINT", None)
        if failpoint:
            env["GPUPLAN_FAILPOINT"] = failpoint
        argv = [
            sys.executable,
            "-m",
            "gpuplan",
            "slurm-controller",
            *args,
            "--state-db",
            str(db),
            "--partition",
            PARTITION,
        ]
        self.failpoint = failpoint
        with open(log, "ab") as out:
            out.write(f"\n==== {' '.join(argv[2:])} failpoint={failpoint}\n".encode())
            self.proc = subprocess.Popen(
                argv,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"controller (failpoint {self.failpoint}) still running after {timeout_s:g} s"
            ) from None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)


def _controller_args(interval: float = 0.5) -> tuple[str, ...]:
    # without the restart gate: these tests crash the controller in the middle of the changes
    # max-min plans, which the gate could skip (tests/engine/test_restart_gate.py tests the gate)
    return (
        "--policy",
        "max-min",
        "--interval",
        f"{interval:g}",
        "--stop-timeout",
        "20",
        "--no-restart-gate",
    )


def _wait(what: str, check: Callable[[], bool], timeout_s: float, log: Path | None = None) -> float:
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > timeout_s:
            tail = log.read_text()[-4000:] if log is not None and log.exists() else ""
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}\n{tail}")
        time.sleep(0.2)
    return time.monotonic() - t0


def _states(lab: SlurmLab, ids: dict[str, int]) -> dict[str, SlurmJob]:
    found = {j.job_id: j for j in lab.cli(timeout=30).jobs(list(ids.values()))}
    return {name: found[i] for name, i in ids.items() if i in found}


def _state_of(lab: SlurmLab, job_id: int) -> str:
    job = lab.cli(timeout=30).job(job_id)
    return job.state if job is not None else "UNKNOWN"


def _segments(shared: Path, name: str) -> list[dict[str, float | str]]:
    path = shared / f"{name}.log"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _assert_tiles(shared: Path, name: str, work: float) -> list[dict[str, float | str]]:
    """The stand-in's committed segments of all its runs tile [0, work] exactly."""
    segs = _segments(shared, name)
    assert segs and segs[0]["start"] == 0.0, (name, segs)
    for a, b in itertools.pairwise(segs):
        assert b["start"] == pytest.approx(a["end"], abs=1e-9), (name, segs)
    assert segs[-1]["reason"] == "complete", (name, segs)
    total = sum(float(s["end"]) - float(s["start"]) for s in segs)
    assert total == pytest.approx(work, abs=1e-9), (name, total, segs)
    assert (shared / f"{name}.done").exists()
    return segs


# ---------------------------------------------------------------------------------------- crashes


def test_controller_survives_sigkill_at_four_points(
    lab: SlurmLab, user: str, shared: Path, clean_partition: None
) -> None:
    """Six elastic/rigid jobs under max-min; the controller is SIGKILLed four times:

    1. right after the first checkpoint signal of a shrink (job exited, not requeued),
    2. during recovery, right after the ``requeuehold`` that finishes that stop,
    3. in the middle of a plan's starts (two jobs released, the others not),
    4. from outside, at an arbitrary moment of steady running;

    the fifth run must finish everything: every job completes, each stand-in's committed
    segments over all its runs sum to its work, and the rigid jobs that were never in a plan's
    way kept running through every controller crash (adopted, not restarted)."""
    t0 = time.monotonic()
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    first = [("A", 60.0, 2, 1, 4), ("B", 60.0, 2, 1, 4), ("C", 40.0, 4, 4, 4), ("D", 40.0, 4, 4, 4)]
    late = [("E", 30.0, 2, 1, 4), ("F", 30.0, 2, 1, 4)]
    work = {name: w for name, w, *_ in first + late}
    ids = {name: _submit(lab, user, shared, name, w, g, lo, hi) for name, w, g, lo, hi in first}
    assert all(j.held for j in _states(lab, ids).values())
    args = _controller_args()
    codes: list[int] = []

    # Run 1: starts A-D (max-min: A, B grow to 4), then E, F arrive and A, B must shrink.
    run = Controller(lab, db, log, failpoint="cli.signal@1", args=args)
    _wait(
        "A-D running",
        lambda: (
            all(j.state == "RUNNING" for j in _states(lab, ids).values())
            and len(_states(lab, ids)) == 4
        ),
        LAB_WAIT_S,
        log,
    )
    ids |= {name: _submit(lab, user, shared, name, w, g, lo, hi) for name, w, g, lo, hi in late}
    codes.append(run.wait(LAB_WAIT_S))
    _wait(
        "the signalled job to exit",
        lambda: any(j.state == "COMPLETED" for j in _states(lab, ids).values()),
        LAB_WAIT_S,
        log,
    )
    # Killed after signalling one job: its stand-in checkpointed and exited, Slurm says
    # COMPLETED — indistinguishable from a finished job without the journal.
    with Journal(db, writer=False) as journal:
        assert {a.kind for a in journal.open_actions()} >= {"resize", "stop"}
    exited = [n for n, j in _states(lab, ids).items() if j.state == "COMPLETED"]
    assert exited and all(_segments(shared, n)[-1]["reason"] == "signal:SIGUSR1" for n in exited), (
        exited
    )

    # Run 2: dies during its own recovery, right after requeueing that job.
    codes.append(Controller(lab, db, log, failpoint="cli.requeue@1", args=args).wait(LAB_WAIT_S))
    # Run 3: recovers, plans, dies after the second release of its first plan.
    codes.append(Controller(lab, db, log, failpoint="cli.release@2", args=args).wait(LAB_WAIT_S))
    # Run 4: killed from outside once it has made a plan (or after a while in steady state).
    run = Controller(lab, db, log, args=args)
    with contextlib.suppress(AssertionError):
        _wait("a plan from run 4", lambda: _plans_of_run(db, 4) > 0, 15, log)
    time.sleep(1.0)  # the scenario: a kill at an arbitrary moment of steady running
    run.kill()
    codes.append(run.wait(LAB_WAIT_S))
    assert codes == [-signal.SIGKILL] * 4, codes

    # Run 5 finishes the work; SIGTERM then stops it cleanly (jobs would keep running).
    run = Controller(lab, db, log, args=args)
    try:
        # Slurm says COMPLETED also for a moment during every checkpoint-stop, so "done" is the
        # stand-in's completion marker, Slurm's state AND the engine's record, together.
        _wait(
            "all six jobs completed",
            lambda: (
                all((shared / f"{n}.done").exists() for n in ids)
                and _journal_states(db, ids) == {"completed"}
                and all(j.state == "COMPLETED" for j in _states(lab, ids).values())
            ),
            150,
            log,
        )
    finally:
        run.kill(signal.SIGTERM)
    assert run.wait(LAB_WAIT_S) == 0
    wall = time.monotonic() - t0

    # Nothing lost, nothing done twice: every job's runs tile its work exactly.
    segments = {name: _assert_tiles(shared, name, work[name]) for name in ids}
    resized = [n for n in ("A", "B", "E", "F") if len(segments[n]) > 1]
    assert resized, segments
    # C and D were never in a plan's way: they ran through four controller crashes in one go.
    assert len(segments["C"]) == 1 and len(segments["D"]) == 1, segments
    # Every engine job stayed one Slurm job (no resubmission), and Slurm finished each once.
    states = _states(lab, ids)
    assert sorted(states) == sorted(ids) and {j.state for j in states.values()} == {"COMPLETED"}

    with Journal(db, writer=False) as journal:
        runs = journal.runs()
        assert len(runs) == 5
        assert [r.ended is None for r in runs] == [True] * 4 + [False]
        assert runs[-1].exit == "clean"
        assert journal.open_actions() == []
        actions = journal.actions()
        details = [a.detail for a in actions if a.status == "reconciled"]
        assert any("stop finished" in d for d in details), details
        # Run 3 reconciles the stop run 2 died in after its requeue: "requeued since the
        # intent" when Slurm's restart count already shows the requeue, else the stop is
        # finished again (safe either way; which one depends on how fast slurmctld updates
        # the count on a loaded machine).
        assert (
            sum("requeued since the intent" in d or "stop finished" in d for d in details) >= 2
        ), details
        # A resize was planned and interrupted (run 1). Since single-node shapes (issue 16) the
        # later runs restart A/B as stops + starts, so no later resize needs to be applied.
        assert any(a.kind == "resize" and a.status in ("applied", "reconciled") for a in actions)
        rows = journal.jobs()
        assert {rows[engine_id(i)].state for i in ids.values()} == {"completed"}
    print(
        f"\n[controller: 6 jobs, 4 SIGKILLs, {wall:.1f} s; segments per job "
        f"{ {n: len(s) for n, s in segments.items()} }]"
    )


def _plans_of_run(db: Path, run_id: int) -> int:
    with Journal(db, writer=False) as journal:
        return int(
            journal.db.execute("SELECT COUNT(*) FROM plans WHERE run_id = ?", (run_id,)).fetchone()[
                0
            ]
        )


def _journal_states(db: Path, ids: dict[str, int]) -> set[str]:
    with Journal(db, writer=False) as journal:
        rows = journal.jobs()
    return {rows[engine_id(i)].state if engine_id(i) in rows else "missing" for i in ids.values()}


# ---------------------------------------------------------------------------------------- fail-open

STALE_AFTER = 4.0
WATCH = 0.5


def test_fail_open_when_the_controller_dies(
    lab: SlurmLab, user: str, shared: Path, clean_partition: None
) -> None:
    """Controller SIGKILLed -> its heartbeat ages -> the watchdog releases the hook-held jobs ->
    Slurm's own scheduler runs them. Documented bound (docs/controller.md): held jobs start
    within ``stale_after + watchdog period + Slurm's scheduling latency`` of the controller's
    death; while the heartbeat is fresh nothing is released."""
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    heartbeat = Path(f"{db}.heartbeat")
    run = Controller(lab, db, log, args=_controller_args())
    _wait("the controller's heartbeat", lambda: heartbeat_age(heartbeat) < 1.0, LAB_WAIT_S, log)
    run.kill()
    assert run.wait(LAB_WAIT_S) == -signal.SIGKILL
    # While the heartbeat is fresh (a controller restarting) nothing is released: the test
    # keeps it fresh itself, so the check does not depend on how fast this machine is.
    keep_fresh = threading.Event()

    def beat() -> None:
        while not keep_fresh.wait(0.2):
            write_heartbeat(heartbeat, {"pid": 0, "test": "fresh"})

    write_heartbeat(heartbeat, {"pid": 0, "test": "fresh"})
    beater = threading.Thread(target=beat, daemon=True)
    beater.start()
    watchdog = Controller(
        lab,
        db,
        log,
        args=(
            "--fail-open-check",
            "--watch",
            f"{WATCH:g}",
            "--stale-after",
            f"{STALE_AFTER:g}",
            "--log-level",
            "DEBUG",
        ),
    )
    try:
        ids = {"P": _submit(lab, user, shared, "P", 6.0, 2, 1, 2)}
        seen = log.read_text().count("controller alive")
        _wait(
            "two watchdog passes over a fresh heartbeat",
            lambda: log.read_text().count("controller alive") >= seen + 2,
            LAB_WAIT_S,
            log,
        )
        assert _states(lab, ids)["P"].held
        ids |= {name: _submit(lab, user, shared, name, 6.0, 2, 1, 2) for name in ("Q", "R")}
        keep_fresh.set()
        beater.join()
        t_dead = time.time()
        _wait(
            "fail-open jobs to start",
            lambda: (
                len(_states(lab, ids)) == 3
                and all(j.state in ("RUNNING", "COMPLETED") for j in _states(lab, ids).values())
            ),
            LAB_WAIT_S,
            log,
        )
        started = time.time() - t_dead
        _wait(
            "fail-open jobs to complete",
            lambda: all(j.state == "COMPLETED" for j in _states(lab, ids).values()),
            LAB_WAIT_S,
            log,
        )
    finally:
        watchdog.kill(signal.SIGTERM)
    assert watchdog.wait(LAB_WAIT_S) == 0
    # Never before the heartbeat went stale; how long after is Slurm's scheduling latency on
    # this machine (printed below; docs/controller.md gives the bound on a quiet one).
    assert started >= STALE_AFTER - 0.5, started
    for name, job in _states(lab, ids).items():
        assert job.admin_comment.startswith("gpuplan:failopen;"), job.admin_comment
        _assert_tiles(shared, name, 6.0)
    with Journal(db, writer=False) as journal:  # the dead controller never saw them
        assert not {engine_id(i) for i in ids.values()} & set(journal.jobs())
    print(
        f"\n[fail-open: jobs started {started:.1f} s after the controller died "
        f"(stale-after {STALE_AFTER:g} s, watchdog every {WATCH:g} s)]"
    )


def test_a_returning_controller_takes_back_failopen_jobs(
    lab: SlurmLab, user: str, shared: Path, clean_partition: None
) -> None:
    """Jobs released by fail-open that Slurm could not start yet (the GPUs are busy) are held
    again and scheduled by the controller when it comes back."""
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    cli = lab.cli(timeout=30)
    blocker = cli.sbatch(
        None,
        options=[
            "--job-name=blocker",
            "--partition=gpu",
            "--nodes=4",
            "--gres=gpu:4",
            "--output=/dev/null",
            "--wrap=sleep 300",
        ],
    )
    try:
        _wait(
            "the blocker to hold every GPU",
            lambda: _state_of(lab, blocker) == "RUNNING",
            LAB_WAIT_S,
        )
        ids = {name: _submit(lab, user, shared, name, 4.0, 2, 1, 2) for name in ("S", "T")}
        # No heartbeat at all: a controller that never ran is as absent as a dead one.
        check = Controller(lab, db, log, args=("--fail-open-check", "--stale-after", "1"))
        assert check.wait(LAB_WAIT_S) == 0
        released = _states(lab, ids)
        assert all(
            j.admin_comment.startswith("gpuplan:failopen;") and not j.held and j.state == "PENDING"
            for j in released.values()
        ), released
        run = Controller(lab, db, log, args=_controller_args())
        try:
            _wait(
                "the controller to take them back",
                lambda: all(
                    j.admin_comment.startswith("gpuplan:held;") for j in _states(lab, ids).values()
                ),
                LAB_WAIT_S,
                log,
            )
            # A job submitted now is planned at once (the engine owns the GPUs, Slurm makes it
            # wait for the blocker); its owner cancels it: a failure, not a completion.
            gone = _submit(lab, user, shared, "U", 4.0, 1, 1, 1)
            _wait(
                "the controller to release U",
                lambda: not (lab.cli(timeout=30).job(gone) or _held_record()).held,
                LAB_WAIT_S,
                log,
            )
            assert fx.as_user(user, ["scancel", str(gone)], lab.env).returncode == 0
            _wait(
                "U recorded as failed",
                lambda: _journal_states(db, {"U": gone}) == {"failed"},
                LAB_WAIT_S,
                log,
            )
            cli.cancel(blocker)
            _wait(
                "taken-back jobs to complete",
                lambda: all(j.state == "COMPLETED" for j in _states(lab, ids).values()),
                LAB_WAIT_S,
                log,
            )
            _wait(
                "the journal to record them",
                lambda: _journal_states(db, ids) == {"completed"},
                LAB_WAIT_S,
                log,
            )
        finally:
            run.kill(signal.SIGTERM)
        assert run.wait(LAB_WAIT_S) == 0
    finally:
        with contextlib.suppress(SlurmError):
            cli.cancel(blocker)
    for name in ids:
        _assert_tiles(shared, name, 4.0)
    with Journal(db, writer=False) as journal:
        starts = {
            a.engine_id for a in journal.actions() if a.kind == "start" and a.status == "applied"
        }
        cancelled = journal.job(engine_id(gone))
    assert {engine_id(i) for i in ids.values()} <= starts  # placed by the engine's plan
    assert cancelled is not None and "cancelled" in cancelled.reason


def _held_record() -> SlurmJob:
    """What to assume while ``squeue`` does not list a just-submitted job yet: still held."""
    return SlurmJob.from_json({"job_id": 0, "job_state": "PENDING", "priority": 0})


def test_out_of_bounds_hook_values_never_stall_the_controller(
    lab: SlurmLab, user: str, shared: Path, clean_partition: None
) -> None:
    """``max=1000000000`` once made the controller build a billion allowed counts, die, and —
    its heartbeat written at start-up — keep every held job held under a restart loop.

    Now the hook refuses it at submit; and a marker that got past the hook (an outdated hook,
    an operator's typo) is re-checked by the controller, which keeps that one job held, marked
    ``refused`` (never released to Slurm's own scheduler: no queue bypass), and keeps
    scheduling the others, its heartbeat fresh throughout."""
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    greedy = [
        "sbatch",
        "--parsable",
        f"--partition={PARTITION}",
        "--gpus=2",
        "--comment=gpuplan:min=1,max=1000000000,work=5",
        "--job-name=greedy",
        "--output=/dev/null",
        "--wrap=true",
    ]
    proc = fx.as_user(user, greedy, lab.env)
    assert proc.returncode != 0 and "max=1000000000" in proc.stderr, proc.stderr
    reserved = [*greedy[:4], "--comment=gpuplan:run=x,work=5", *greedy[5:]]
    proc = fx.as_user(user, reserved, lab.env)
    assert proc.returncode != 0 and "reserved" in proc.stderr, proc.stderr

    ids = {"X": _submit(lab, user, shared, "X", 4.0, 2, 1, 2)}
    lab.cli(timeout=30).update_job(
        ids["X"], AdminComment="gpuplan:held;gpus=2;min=1;max=1000000000"
    )
    ids["G"] = _submit(lab, user, shared, "G", 4.0, 2, 1, 2)
    heartbeat = Path(f"{db}.heartbeat")
    run = Controller(lab, db, log, args=_controller_args())
    try:
        _wait(
            "X marked refused",
            lambda: _states(lab, ids)["X"].admin_comment.startswith("gpuplan:refused;"),
            LAB_WAIT_S,
            log,
        )
        _wait(
            "G completed",
            lambda: (
                _states(lab, ids)["G"].state == "COMPLETED"
                and _journal_states(db, {"G": ids["G"]}) == {"completed"}
            ),
            LAB_WAIT_S,
            log,
        )
        x = _states(lab, ids)["X"]
        assert x.state == "PENDING" and x.held and "why=" in x.admin_comment, x
        assert run.proc.poll() is None, "the controller exited"
        _wait(
            "a heartbeat written after these cycles",
            lambda: heartbeat_age(heartbeat) < 5.0,
            LAB_WAIT_S,
            log,
        )
    finally:
        run.kill(signal.SIGTERM)
    assert run.wait(LAB_WAIT_S) == 0
    with Journal(db, writer=False) as journal:
        row = journal.job(engine_id(ids["X"]))
        assert row is not None and row.state == "rejected" and "max=" in row.reason, row
        starts = {a.engine_id for a in journal.actions() if a.kind == "start"}
    assert engine_id(ids["G"]) in starts and engine_id(ids["X"]) not in starts
    _assert_tiles(shared, "G", 4.0)
    lab.cli(timeout=30).cancel(ids["X"])


def test_a_controller_that_never_completes_a_cycle_writes_no_heartbeat(
    lab: SlurmLab, shared: Path
) -> None:
    """The heartbeat means "a cycle completed", not "the process started": a controller that
    passed its start-up checks but then cannot reach Slurm never looks alive to the watchdog.
    (A wrong slurm.conf no longer gets this far: the start-up check refuses it, exit 2 —
    ``tests/slurm/test_controller_safety.py``.) Here ``squeue`` says what it says while slurmctld is
    unreachable; sinfo and scontrol are the real ones, so the start-up checks pass."""
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    heartbeat = Path(f"{db}.heartbeat")
    bindir = shared / "state" / "bin"
    bindir.mkdir()
    (bindir / "squeue").write_text(
        "#!/bin/sh\necho 'squeue: error: Unable to contact slurm "
        "controller (connect failure)' >&2\nexit 1\n"
    )
    (bindir / "squeue").chmod(0o755)
    run = Controller(
        lab,
        db,
        log,
        args=_controller_args(),
        env={"PATH": f"{bindir}:{os.environ.get('PATH', os.defpath)}"},
    )
    try:
        _wait(
            "the controller to try Slurm and fail twice",
            lambda: (
                log.read_text().count("slurmctld unavailable")
                + log.read_text().count("cycle failed")
                >= 2
            ),
            LAB_WAIT_S,
            log,
        )
        assert run.proc.poll() is None  # still alive, retrying with backoff
        assert not heartbeat.exists(), "heartbeat written without a completed cycle"
    finally:
        run.kill(signal.SIGTERM)
    run.wait(LAB_WAIT_S)
