"""Issue 25 item 5 without a cluster: ``gpuplan --version`` and the hook's version line,
``sd_notify`` over a real datagram socket, the generated systemd unit, and ``--check`` where
Slurm is missing. The lab half (``--check`` passing on a correct set-up and naming what is
broken, the walk-through of docs/controller.md, READY/WATCHDOG from a real controller) is in
``tests/slurm/test_controller_ops.py``."""

from __future__ import annotations

import configparser
import importlib.metadata
import os
import secrets
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

from gpuplan import __version__
from gpuplan.executors.control import command
from gpuplan.executors.control.deploy import hook_version
from gpuplan.executors.control.sdnotify import Notifier, notify_address, watchdog_period_s
from tests.labs.slurm.lab_config import LabConfig
from tests.labs.slurm.lab_render import render_files

ROOT = Path(__file__).resolve().parents[2]


def _gpuplan(
    argv: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuplan", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd="/",
        env={**os.environ, **(env or {})},
    )


# ------------------------------------------------------------------------------ versions


def test_version_is_the_package_version_and_the_hooks() -> None:
    proc = _gpuplan(["--version"])
    assert proc.returncode == 0 and proc.stdout.strip() == f"gpuplan {__version__}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert __version__ == project["version"] == importlib.metadata.version("gpuplan")
    hook = (resources.files("gpuplan.executors.slurm") / "job_submit.lua").read_text()
    assert hook_version(hook) == __version__
    # The lab installs a rendered copy (site sizes rewritten): the version line survives.
    config = LabConfig(root=Path("/nonexistent"), nodes=2, gpus_per_node=4, job_submit_lua=True)
    rendered = render_files(config, Path("/nonexistent"), "v2", Path("/nonexistent/wake"))
    assert hook_version(rendered["job_submit.lua"]) == __version__


def test_hook_version_line_parsing() -> None:
    assert hook_version('local X = 1\nlocal GPUPLAN_HOOK_VERSION = "0.2.0"\n') == "0.2.0"
    assert hook_version('-- local GPUPLAN_HOOK_VERSION = "0.2.0"\n') is None  # a comment
    assert hook_version("local MAX_ENGINE_GPUS = 16\n") is None  # an older hook


# ------------------------------------------------------------------------------ sd_notify


@pytest.fixture
def notify_socket() -> Iterator[tuple[socket.socket, str]]:
    """A datagram socket standing in for systemd's (short path: AF_UNIX paths are limited to
    107 bytes), with SO_PASSCRED so the sender's pid can be checked as systemd does."""
    directory = Path(tempfile.mkdtemp(prefix="gp-notify-", dir="/tmp"))
    path = directory / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    sock.bind(str(path))
    sock.settimeout(60)
    try:
        yield sock, str(path)
    finally:
        sock.close()
        shutil.rmtree(directory, ignore_errors=True)


def receive(sock: socket.socket) -> tuple[str, int]:
    """One message and its sender's pid (from the kernel's credentials)."""
    data, ancillary, _flags, _addr = sock.recvmsg(4096, socket.CMSG_SPACE(12))
    pid = -1
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid = int.from_bytes(payload[:4], sys.byteorder)
    return data.decode(), pid


def test_sd_notify_sends_ready_watchdog_and_stopping(
    notify_socket: tuple[socket.socket, str],
) -> None:
    sock, path = notify_socket
    notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "4000000"})
    assert notifier.enabled and notifier.watchdog_s == 4.0
    assert notifier.ready("run 3:   first cycle\ndone")
    assert receive(sock) == ("READY=1\nSTATUS=run 3: first cycle done", os.getpid())
    assert notifier.ready("again")  # READY only once; later only the status
    assert receive(sock)[0] == "STATUS=again"
    assert notifier.alive() and receive(sock)[0] == "WATCHDOG=1"
    assert notifier.stopping() and receive(sock)[0] == "STOPPING=1"


def test_sd_notify_abstract_socket_and_environment_rules() -> None:
    name = f"gpuplan-test-{secrets.token_hex(6)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(60)
    try:
        assert Notifier({"NOTIFY_SOCKET": "@" + name}).alive()
        assert sock.recv(100) == b"WATCHDOG=1"
    finally:
        sock.close()
    assert notify_address({}) is None and notify_address({"NOTIFY_SOCKET": "vsock:2:9"}) is None
    assert not Notifier({}).ready() and not Notifier({}).alive()  # not under systemd: no-op
    assert watchdog_period_s({"WATCHDOG_USEC": "500000"}) == 0.5
    assert watchdog_period_s({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_period_s({"WATCHDOG_USEC": "soon"}) is None


def test_sd_notify_never_waits_for_a_full_receiver(
    notify_socket: tuple[socket.socket, str],
) -> None:
    """Nobody reads: the queue fills (net.unix.max_dgram_qlen) and later messages are dropped
    at once instead of blocking the controller's heartbeat thread or signal handler."""
    _sock, path = notify_socket
    notifier = Notifier({"NOTIFY_SOCKET": path})
    sent = [notifier.alive() for _ in range(2000)]
    assert sent[0] and not sent[-1]


def test_sd_notify_to_a_missing_socket_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone")})
    assert not notifier.alive() and not notifier.alive()
    assert sum("sd_notify" in r.getMessage() for r in caplog.records) == 1  # warned once


# ------------------------------------------------------------------------------ systemd unit


def _print_unit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``--print-systemd-unit`` in this process (a subprocess pays seconds of imports)."""
    code = command.main(["slurm-controller", "--print-systemd-unit", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _unit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> configparser.ConfigParser:
    code, out, err = _print_unit(argv, capsys)
    assert code == 0, err
    unit = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(out)
    return unit


def test_the_controller_unit_is_hardened_and_runs_these_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    unit = _unit(
        ["--policy", "afs-l", "--partition", "gpuplan", "--interval", "1.5", "--no-restart-gate"],
        capsys,
    )
    svc = unit["Service"]
    assert svc["Type"] == "notify" and int(svc["WatchdogSec"]) > 0
    for key, value in {
        "ProtectSystem": "strict",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "StateDirectory": "gpuplan",
        "StateDirectoryMode": "0700",
        "UMask": "0077",
        "CapabilityBoundingSet": "",
        "User": "gpuplan",
    }.items():
        assert svc[key] == value, key
    assert "ReadWritePaths" not in svc  # the journal and heartbeat live in the StateDirectory
    words = svc["ExecStart"].split()
    assert words[words.index("slurm-controller") + 1 :] == [
        "--policy",
        "afs-l",
        "--partition",
        "gpuplan",
        "--interval",
        "1.5",
        "--no-restart-gate",
    ]
    assert Path(words[0]).is_absolute()
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_a_heartbeat_elsewhere_is_the_only_extra_writable_path(
    capsys: pytest.CaptureFixture[str],
) -> None:
    unit = _unit(
        [
            "--policy",
            "fifo",
            "--state-db",
            "/srv/gpuplan/ctl.db",
            "--heartbeat",
            "/shared/gpuplan/hb",
        ],
        capsys,
    )
    svc = unit["Service"]
    assert "StateDirectory" not in svc
    assert svc["ReadWritePaths"].split() == ["/srv/gpuplan", "/shared/gpuplan"]
    watchdog = _unit(["--fail-open-check", "--heartbeat", "/shared/gpuplan/hb"], capsys)["Service"]
    assert watchdog["Type"] == "oneshot" and "ReadWritePaths" not in watchdog
    assert "--fail-open-check" in watchdog["ExecStart"].split()
    assert watchdog["ProtectSystem"] == "strict"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--partition", "gpuplan"], "--policy is required"),
        (["--policy", "fifo", "--state-db", "/var/lib/gp x/ctl.db"], "characters a unit file"),
        (["--policy", "fifo", "--heartbeat", "/run/%i/hb"], "characters a unit file"),
    ],
)
def test_a_unit_that_cannot_be_written_is_one_line_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _print_unit(argv, capsys)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_accepts_the_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _err = _print_unit(["--policy", "fifo"], capsys)
    path = tmp_path / "gpuplan-controller.service"
    path.write_text(out)
    assert code == 0
    check = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Offline, verify may warn about the host (no running systemd, no gpuplan user); what
    # must not appear is a complaint about the unit's own keys or values.
    complaints = [
        line
        for line in check.stderr.splitlines()
        if "gpuplan-controller.service" in line
        and ("Unknown" in line or "Failed to parse" in line or "bad" in line.lower())
    ]
    assert not complaints, check.stderr


# ------------------------------------------------------------------------------ --check


def test_check_without_slurm_names_every_failing_check(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "state"
    state.mkdir(mode=0o770)
    state.chmod(0o770)
    proc = _gpuplan(
        ["slurm-controller", "--check", "--state-db", str(state / "ctl.db")], {"PATH": str(bin_dir)}
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"gpuplan {__version__}"
    assert any(line.startswith("FAIL slurm") and "Slurm client not found" in line for line in lines)
    assert any(line.startswith("skip partition") for line in lines)
    assert any(line.startswith("FAIL state-dir") and "writable by group" in line for line in lines)
    assert proc.stderr.strip() == "error: --check failed: slurm, state-dir"
    assert not (state / "ctl.db").exists() and "Traceback" not in proc.stderr


def test_check_reads_the_journal_schema_without_changing_it(tmp_path: Path) -> None:
    from gpuplan.executors.control.deploy import _journal, _state_dir
    from gpuplan.executors.control.journal import SCHEMA_VERSION, Journal

    from .test_journal_migrations import _version, build_v1_journal

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    db = state / "ctl.db"
    assert _journal(db).ok and "created at the first start" in _journal(db).detail
    assert _state_dir(tmp_path / "missing" / "ctl.db").ok  # created 0700 at the first start
    build_v1_journal(db)
    old = _journal(db)
    assert old.ok and f"migrated to {SCHEMA_VERSION} at the next start" in old.detail
    assert _version(db) == 1  # --check never migrates
    with Journal(db):
        pass
    assert _journal(db).ok and "(current)" in _journal(db).detail
    raw = sqlite3.connect(db)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.commit()
    raw.close()
    newer = _journal(db)
    assert newer.ok is False and "newer gpuplan" in newer.detail
    assert newer.line().startswith("FAIL journal ")
