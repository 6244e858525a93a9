"""The controller starts safely or fails fast (issue 23, items 5 and 6).

* The journal is created atomically: a first start SIGKILLed at any point (every step through
  failpoints, and 60 seeded random moments) leaves either no journal or a complete one, and the
  next start opens or creates it cleanly (before: 43 of 60 kills left a journal every later
  start refused).
* ``--state-db``'s directory, the journal and its lock must be private to the controller's
  user: anything another local user could have planted is refused in one line, exit 2, and
  nothing is created.
* The fail-open watchdog reads its heartbeat bounded and without following links: a symlink,
  ``/dev/zero``, a FIFO or a huge file is a stale heartbeat and one log line, never a crash.
* ``gpuplan slurm-controller`` refuses a broken Slurm set-up before creating anything: no client
  installed, an unreachable slurmctld (after ``--connect-timeout``), an unknown partition. The
  last two run against the REAL lab of ``tests/slurm_fixtures.py`` (skipped outside CI when it
  cannot start, failed under CI).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplan.executors.control import command
from gpuplan.executors.control.failopen import (
    HEARTBEAT_MAX_BYTES,
    heartbeat_age,
    write_heartbeat,
)
from gpuplan.executors.control.journal import (
    SCHEMA_VERSION,
    TEMP_MARK,
    Journal,
    UnsafeStatePath,
)
from tests.labs.slurm.lab import SlurmLab

from .. import slurm_fixtures as fx

NOBODY = 65534
"""A uid that is not ours (the tests that need it run as root and chown to it)."""


def _tree(path: Path) -> list[str]:
    """Everything under ``path`` (names and modes): "nothing created" means this is unchanged."""
    if not path.exists():
        return []
    return sorted(f"{p.relative_to(path)}:{p.lstat().st_mode:o}" for p in path.rglob("*"))


def _leftovers(db: Path) -> list[str]:
    return sorted(n for n in os.listdir(db.parent) if n.startswith(f".{db.name}{TEMP_MARK}"))


def _assert_clean_start(db: Path) -> None:
    """The next start after a kill: opens (or creates) a complete journal, and the temporary
    files the killed creator left are gone."""
    with Journal(db) as journal:
        assert journal.schema_version == SCHEMA_VERSION
        assert journal.meta("origin") is not None
        run = journal.begin_run("fifo")
        journal.end_run(run, "clean")
    assert _leftovers(db) == [], _leftovers(db)
    assert db.stat().st_mode & 0o777 == 0o600


# ------------------------------------------------------------------------ atomic creation


@pytest.mark.parametrize(
    "point", ["journal.tmp", "journal.schema", "journal.synced", "journal.renamed"]
)
def test_first_start_killed_at_each_creation_step_recovers(tmp_path: Path, point: str) -> None:
    """A real SIGKILL (failpoint) at every step of the creation: the real path is either absent
    or a complete journal, never an empty or schema-0 file, and the next start works."""
    db = tmp_path / "state" / "ctl.db"
    code = (
        "import os, sys\n"
        "from gpuplan.executors.control.failpoints import Failpoints\n"
        "from gpuplan.executors.control.journal import Journal\n"
        "Journal(sys.argv[1], failpoints=Failpoints(os.environ['GPUPLAN_FAILPOINT']))"
        ".close()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(db)],
        capture_output=True,
        text=True,
        env={**os.environ, "GPUPLAN_FAILPOINT": point},
        timeout=120,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    if point == "journal.renamed":
        assert db.exists()  # complete: renamed only after its schema was durable
    else:
        assert not db.exists() and _leftovers(db), "the temporary journal should be left"
    _assert_clean_start(db)


def _create_in_child(db: Path, ready_w: int) -> None:
    """The forked child: say "about to create", create the journal, exit."""
    try:
        os.write(ready_w, b"r")
        Journal(db).close()
    finally:
        os._exit(0)


def test_first_start_killed_at_60_random_moments_always_recovers(tmp_path: Path) -> None:
    """60 real processes creating a journal, each SIGKILLed after a seeded random delay within
    the time a creation takes here; after each, the next start opens or creates cleanly."""
    rng = random.Random(23)
    outcomes = {"no journal": 0, "complete journal": 0, "finished before the kill": 0}

    def one(db: Path, delay: float | None) -> float:
        ready_r, ready_w = os.pipe()
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(ready_r)
            _create_in_child(db, ready_w)
        os.close(ready_w)
        try:
            select.select([ready_r], [], [], 60)
            os.read(ready_r, 1)
            if delay is not None:
                time.sleep(delay)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        finally:
            os.close(ready_r)
        if delay is not None and os.WIFSIGNALED(status):
            outcomes["complete journal" if db.exists() else "no journal"] += 1
        elif delay is not None:
            outcomes["finished before the kill"] += 1
        return time.monotonic() - t0

    # How long one creation takes on this machine now (the kills spread over 1.2x that).
    took = sorted(one(tmp_path / f"calibrate{k}" / "ctl.db", None) for k in range(5))
    span = took[2] * 1.2
    for k in range(60):
        db = tmp_path / f"kill{k}" / "ctl.db"
        one(db, rng.uniform(0.0, span))
        _assert_clean_start(db)
    logging.getLogger(__name__).info("60 kills over %.1f ms: %s", span * 1e3, outcomes)
    print(f"60 kills over {span * 1e3:.1f} ms: {outcomes}")


def test_leftover_temporary_journals_are_removed_only_when_ours(tmp_path: Path) -> None:
    db = tmp_path / "state" / "ctl.db"
    db.parent.mkdir(mode=0o700)
    ours = [
        db.with_name(f".ctl.db{TEMP_MARK}{'a' * 16}{suffix}") for suffix in ("", "-wal", "-shm")
    ]
    for path in ours:
        path.write_bytes(b"x")
    unrelated = db.with_name(".ctl.db.other")
    unrelated.write_bytes(b"y")
    planted_link = db.with_name(f".ctl.db{TEMP_MARK}link")
    planted_link.symlink_to(unrelated)
    foreign = db.with_name(f".ctl.db{TEMP_MARK}{'b' * 16}")
    foreign.write_bytes(b"z")
    if os.geteuid() == 0:
        os.chown(foreign, NOBODY, NOBODY)
    with Journal(db):
        pass
    assert not any(p.exists() for p in ours)
    assert unrelated.read_bytes() == b"y" and planted_link.is_symlink()
    if os.geteuid() == 0:
        assert foreign.exists()  # another user's file: not ours to delete


# ------------------------------------------------------------------------ private state paths


def _refused(
    argv_tail: list[str], root: Path, capsys: pytest.CaptureFixture[str], match: str
) -> None:
    before = _tree(root)
    code = command.main(["slurm-controller", "--policy", "fifo", *argv_tail])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and match in err[0], (code, err)
    assert _tree(root) == before, "something was created before the refusal"


def test_state_db_in_a_shared_or_foreign_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)  # like /tmp
    _refused(
        ["--state-db", str(sticky / "ctl.db")], tmp_path, capsys, "writable by group or others"
    )
    _refused(
        ["--state-db", str(sticky / "ctl.db"), "--heartbeat", str(tmp_path / "hb")],
        tmp_path,
        capsys,
        "writable by group or others",
    )
    group = tmp_path / "group"
    group.mkdir()
    group.chmod(0o770)
    _refused(["--state-db", str(group / "ctl.db")], tmp_path, capsys, "writable by group or others")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    _refused(
        ["--state-db", str(private / "ctl.db"), "--heartbeat", str(sticky / "hb")],
        tmp_path,
        capsys,
        "heartbeat directory",
    )
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, NOBODY, NOBODY)
        _refused(
            ["--state-db", str(theirs / "ctl.db")], tmp_path, capsys, f"belongs to uid {NOBODY}"
        )
        link = tmp_path / "link-dir"
        link.symlink_to(private)
        os.lchown(link, NOBODY, NOBODY)
        _refused(["--state-db", str(link / "ctl.db")], tmp_path, capsys, "symlink owned by")


def test_a_planted_journal_or_lock_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    db = state / "ctl.db"
    with Journal(db):
        pass
    elsewhere = tmp_path / "elsewhere.db"
    shutil.copy(db, elsewhere)
    # A journal readable by others, a symlink, a FIFO; then the same for the lock.
    db.chmod(0o644)
    _refused(["--state-db", str(db)], tmp_path, capsys, "readable by group or others")
    db.chmod(0o600)
    moved = state / "real.db"
    db.rename(moved)
    db.symlink_to(elsewhere)
    _refused(["--state-db", str(db)], tmp_path, capsys, "is a symlink")
    db.unlink()
    os.mkfifo(db, 0o600)
    _refused(["--state-db", str(db)], tmp_path, capsys, "not a regular file")
    db.unlink()
    moved.rename(db)
    lock = state / "ctl.db.lock"
    lock.unlink()
    lock.symlink_to(tmp_path / "victim")
    _refused(["--state-db", str(db)], tmp_path, capsys, "journal lock")
    assert not (tmp_path / "victim").exists()
    lock.unlink()
    lock.write_text("")
    lock.chmod(0o666)
    _refused(["--state-db", str(db)], tmp_path, capsys, "journal lock")
    if os.geteuid() == 0:
        lock.chmod(0o600)
        os.chown(lock, NOBODY, NOBODY)
        _refused(["--state-db", str(db)], tmp_path, capsys, f"belongs to uid {NOBODY}")
        os.chown(lock, 0, 0)
        os.chown(db, NOBODY, NOBODY)
        _refused(["--state-db", str(db)], tmp_path, capsys, f"belongs to uid {NOBODY}")
        os.chown(db, 0, 0)
    # The library refuses the same way (a controller embedded elsewhere).
    db.chmod(0o640)
    with pytest.raises(UnsafeStatePath, match="readable by group"):
        Journal(db)
    db.chmod(0o600)
    lock.chmod(0o600)
    with Journal(db) as journal:  # all private again: opens
        assert journal.schema_version == SCHEMA_VERSION


# ------------------------------------------------------------------------ heartbeat reader


def test_a_bad_heartbeat_is_stale_and_never_kills_the_reader(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hb = tmp_path / "hb"
    real = tmp_path / "real-hb"
    write_heartbeat(real, {"pid": 1})
    assert heartbeat_age(real) < 60.0
    cases: list[tuple[str, object]] = []

    def case(name: str, make: object) -> None:
        cases.append((name, make))

    case("symlink to /dev/zero", lambda: hb.symlink_to("/dev/zero"))
    case("symlink to a fresh heartbeat", lambda: hb.symlink_to(real))
    case("a FIFO (open must not block)", lambda: os.mkfifo(hb, 0o600))
    case("a directory", lambda: hb.mkdir())
    case("a huge file", lambda: hb.write_bytes(b'{"time": 1, "pad": "' + b"x" * 10_000_000 + b'"}'))
    case(
        "just over the bound",
        lambda: hb.write_bytes(b'{"time": 1e12, "p": "' + b"x" * HEARTBEAT_MAX_BYTES + b'"}'),
    )
    case("world-writable", lambda: (hb.write_text(real.read_text()), hb.chmod(0o666)))
    case("not JSON", lambda: hb.write_bytes(b"\xff\xfe garbage"))
    case("a JSON list", lambda: hb.write_text("[1, 2]"))
    case("time nan", lambda: hb.write_text('{"time": NaN}'))
    case("time a string", lambda: hb.write_text('{"time": "now"}'))
    case("time true", lambda: hb.write_text('{"time": true}'))
    for name, make in cases:
        if hb.is_dir() and not hb.is_symlink():
            hb.rmdir()
        elif hb.exists() or hb.is_symlink():
            hb.unlink()
        make()  # type: ignore[operator]
        if not hb.is_symlink() and hb.is_file():
            hb.chmod(0o666 if name == "world-writable" else 0o600)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="gpuplan.executors.control.failopen"):
            assert heartbeat_age(hb) == float("inf"), name
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1 and "treated as stale" in lines[0], (name, lines)
    # A missing heartbeat is stale without a warning (a controller that never ran).
    hb.unlink()
    caplog.clear()
    assert heartbeat_age(hb) == float("inf") and not caplog.records


# ------------------------------------------------------------------------ fail fast: no Slurm


def _cli(
    args: list[str], env: dict[str, str], timeout_s: float = 300.0
) -> subprocess.CompletedProcess[str]:
    """``gpuplan slurm-controller`` as an operator would run it (a real process)."""
    return subprocess.run(
        [sys.executable, "-m", "gpuplan", "slurm-controller", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _assert_one_line_exit_2(proc: subprocess.CompletedProcess[str], match: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and match in lines[0], (
        proc.returncode,
        proc.stderr[-2000:],
    )


def test_no_slurm_client_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    """Before: "sinfo not found" retried for ever, after creating the journal."""
    empty_path = tmp_path / "bin"
    empty_path.mkdir()
    state = tmp_path / "state" / "sub"
    env = {**os.environ, "PATH": str(empty_path)}
    proc = _cli(["--policy", "fifo", "--state-db", str(state / "ctl.db")], env)
    _assert_one_line_exit_2(proc, "Slurm client not found")
    assert not (tmp_path / "state").exists()


# ------------------------------------------------------------------------ fail fast: real lab


@pytest.fixture(scope="module")
def lab() -> Iterator[SlurmLab]:
    yield from fx.module_lab()


@pytest.fixture
def private_dir(tmp_path: Path) -> Path:
    path = tmp_path / "ctl"
    path.mkdir(mode=0o700)
    return path


def _closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_slurmctld_fails_after_the_connect_timeout(
    lab: SlurmLab, private_dir: Path
) -> None:
    """The lab's real client configuration pointed at a port where no slurmctld listens: the
    controller waits --connect-timeout, then exits 2 in one line, creating nothing."""
    text = lab.conf_path.read_text()
    port = _closed_port()
    conf = private_dir / "slurm.conf"
    lines = [
        f"SlurmctldPort={port}" if line.startswith("SlurmctldPort=") else line
        for line in text.splitlines()
    ]
    assert any(line == f"SlurmctldPort={port}" for line in lines)
    conf.write_text("\n".join(lines) + "\n")
    state = private_dir / "state"
    env = {**os.environ, **lab.env, "SLURM_CONF": str(conf)}
    proc = _cli(
        ["--policy", "fifo", "--state-db", str(state / "ctl.db"), "--connect-timeout", "3"], env
    )
    _assert_one_line_exit_2(proc, "slurmctld unreachable")
    assert "--connect-timeout" in proc.stderr
    assert not state.exists()


def test_an_unknown_partition_is_one_line_and_creates_nothing(
    lab: SlurmLab, private_dir: Path
) -> None:
    state = private_dir / "state"
    env = {**os.environ, **lab.env}
    proc = _cli(
        [
            "--policy",
            "fifo",
            "--state-db",
            str(state / "ctl.db"),
            "--partition",
            "gpuplan,no-such-partition",
        ],
        env,
    )
    _assert_one_line_exit_2(proc, "unknown partition 'no-such-partition'")
    assert "gpuplan" in proc.stderr  # names the partitions slurmctld has
    assert not state.exists()


def test_the_watchdog_survives_a_dev_zero_heartbeat(lab: SlurmLab, private_dir: Path) -> None:
    """The fail-open watchdog, for real against the lab, with its heartbeat replaced by a
    symlink to /dev/zero: each pass treats it as stale (one line) instead of reading until
    MemoryError; SIGTERM ends it cleanly."""
    hb = private_dir / "hb"
    hb.symlink_to("/dev/zero")
    log = private_dir / "watchdog.log"
    env = {**os.environ, **lab.env}
    argv = [
        sys.executable,
        "-m",
        "gpuplan",
        "slurm-controller",
        "--fail-open-check",
        "--watch",
        "0.5",
        "--heartbeat",
        str(hb),
        "--state-db",
        str(private_dir / "ctl.db"),
        "--partition",
        "no-jobs-here",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        deadline = time.monotonic() + 300
        while log.read_text().count("treated as stale") < 3:
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=300)
    assert code == 0, log.read_text()[-2000:]
    assert "MemoryError" not in log.read_text() and "Traceback" not in log.read_text()


def test_library_check_setup_lists_partitions(lab: SlurmLab) -> None:
    """``SlurmCli.partitions`` / ``check_setup`` on the real lab (what the start-up relies on)."""
    cli = lab.cli(timeout=30)
    parts = cli.partitions()
    assert {"gpu", "gpuplan"} <= set(parts) and set(parts["gpuplan"]) == set(lab.node_names)
    nodes = cli.check_setup(["gpuplan"], wait_s=60, stop=threading.Event())
    assert {n.name for n in nodes} >= set(lab.node_names)


def test_the_controllers_first_start_killed_while_creating_its_journal(
    lab: SlurmLab, private_dir: Path
) -> None:
    """The real ``gpuplan slurm-controller`` on the lab, SIGKILLed (failpoint) after its new
    journal's schema was written but before the rename: the next start creates the journal,
    completes a cycle (its heartbeat appears) and leaves no temporary file."""
    db = private_dir / "state" / "ctl.db"
    log = private_dir / "controller.log"
    argv = [
        sys.executable,
        "-m",
        "gpuplan",
        "slurm-controller",
        "--policy",
        "fifo",
        "--state-db",
        str(db),
        "--partition",
        "gpuplan",
        "--interval",
        "0.5",
        "--wake-file",
        "none",
    ]
    env = {**os.environ, **lab.env, "GPUPLAN_FAILPOINT": "journal.schema"}
    with open(log, "ab") as out:
        first = subprocess.run(
            argv,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=300,
            check=False,
        )
    assert first.returncode == -signal.SIGKILL, log.read_text()[-2000:]
    assert not db.exists() and _leftovers(db)
    env.pop("GPUPLAN_FAILPOINT")
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        deadline = time.monotonic() + 300
        while heartbeat_age(Path(f"{db}.heartbeat")) > 60.0:
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=300)
    assert code == 0, log.read_text()[-2000:]
    assert _leftovers(db) == []
    with Journal(db, writer=False) as journal:
        assert journal.schema_version == SCHEMA_VERSION and len(journal.runs()) == 1
