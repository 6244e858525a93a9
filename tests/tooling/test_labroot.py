"""The labs' private-root helpers (tests.labs.labroot): what they refuse and what they
never follow. The lab tests (test_slurm.py, test_ssh.py) replay issue 23's attacks with a
second user; these run as anyone, plus one that needs root (the dpkg lock)."""

from __future__ import annotations

import fcntl
import os
import platform
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.labs.labroot import (
    apt_get,
    private_dir,
    private_root,
    process_is,
    read_file,
    write_file,
)


class Refused(Exception):
    pass


def test_a_root_is_created_private_and_then_accepted(tmp_path: Path) -> None:
    root = tmp_path / "lab"
    assert private_root(root, mode=0o711, error=Refused) is True
    assert stat.S_IMODE(root.stat().st_mode) == 0o711
    assert private_root(root, mode=0o711, error=Refused) is False
    assert private_root(tmp_path / "absent", mode=0o700, error=Refused, create=False) is None
    assert not (tmp_path / "absent").exists()


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ("others-write", "writable by group or others"),
        ("link", "symbolic link"),
        ("file", "not a directory"),
        ("open-parent", "writable by others and not sticky"),
    ],
)
def test_roots_others_could_change_are_refused(tmp_path: Path, shape: str, message: str) -> None:
    root = tmp_path / "lab"
    if shape == "others-write":
        root.mkdir()
        root.chmod(0o757)
    elif shape == "link":
        (tmp_path / "target").mkdir()
        root.symlink_to(tmp_path / "target")
    elif shape == "file":
        root.write_text("")
    else:
        (tmp_path / "open").mkdir()
        (tmp_path / "open").chmod(0o777)
        root = tmp_path / "open" / "lab"
    with pytest.raises(Refused, match=message):
        private_root(root, mode=0o700, error=Refused)
    if shape == "open-parent":
        assert not root.exists()


def test_a_sticky_world_writable_parent_is_fine(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp").chmod(0o1777)
    assert private_root(tmp_path / "tmp" / "lab", mode=0o700, error=Refused) is True


def test_directories_below_are_checked_and_links_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "lab"
    private_root(root, mode=0o700, error=Refused)
    made = private_dir(root, "state/d/node1", error=Refused)
    assert made.is_dir() and stat.S_IMODE(made.stat().st_mode) == 0o755
    (root / "log").symlink_to(tmp_path)
    with pytest.raises(Refused, match="log is a symbolic link"):
        private_dir(root, "log", error=Refused)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (root / "conf").symlink_to(victim)
    write_file(root / "conf", "ours", mode=0o644, error=Refused)
    assert victim.read_text() == "precious"
    assert not (root / "conf").is_symlink() and (root / "conf").read_text() == "ours"
    assert stat.S_IMODE((root / "conf").stat().st_mode) == 0o644
    (root / "pid").symlink_to(victim)
    with pytest.raises(Refused, match="refusing to read"):
        read_file(root / "pid", limit=64, error=Refused)
    assert read_file(root / "nothing", limit=64, error=Refused) is None
    (root / "big").write_bytes(b"x" * 65)
    with pytest.raises(Refused, match="larger than 64 bytes"):
        read_file(root / "big", limit=64, error=Refused)
    (root / "open").write_text("1")
    (root / "open").chmod(0o666)
    with pytest.raises(Refused, match="another user could have written it"):
        read_file(root / "open", limit=64, error=Refused)


def test_a_pid_is_ours_only_with_the_right_uid_executable_and_command_line() -> None:
    argv = [sys.executable, "-c", "import time; time.sleep(600)"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    try:
        # Right after exec the kernel may still show an empty command line (seen on a busy
        # machine: 2 in 300 starts); the check is about a settled process, so wait for it.
        deadline = time.monotonic() + 60.0
        while not Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline, "the child never showed its command line"
            time.sleep(0.01)
        raw = Path(f"/proc/{proc.pid}/stat").read_text()
        ticks = int(raw[raw.rfind(")") + 2 :].split()[19])
        uid = os.geteuid()
        assert process_is(proc.pid, exe=sys.executable, uid=uid, argv=argv, start_ticks=ticks)
        assert not process_is(
            proc.pid, exe=sys.executable, uid=uid, argv=argv, start_ticks=ticks + 1
        )  # a reused PID
        assert not process_is(proc.pid, exe=sys.executable, uid=uid + 1, argv=argv)
        assert not process_is(proc.pid, exe="/bin/sleep", uid=uid, argv=argv)
        assert not process_is(proc.pid, exe=sys.executable, uid=uid, argv=argv[:1])
        assert process_is(proc.pid, exe=sys.executable, uid=uid, cmdline_contains="sleep(600)")
        assert not process_is(1, exe="/sbin/init", uid=0)  # never PID 1
    finally:
        proc.kill()
        proc.wait()
    assert not process_is(proc.pid, exe=sys.executable, uid=os.geteuid(), argv=argv)


def _apt_children(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = raw[raw.rfind(")") + 2 :].split()
            if int(fields[1]) == parent and "(apt-get)" in raw:
                found.append(int(entry))
    return found


_SLEEP_SYSCALLS = {"x86_64": {"35", "230"}, "aarch64": {"101", "115"}}
"""nanosleep / clock_nanosleep: apt sleeps only in its wait for a lock someone else holds (it
closes the lock file between tries, so an open file would not show it)."""


def _sleeping(pid: int) -> bool:
    try:
        return (
            Path(f"/proc/{pid}/syscall").read_text().split()[0]
            in _SLEEP_SYSCALLS[platform.machine()]
        )
    except (OSError, IndexError):
        return False


def test_apt_waits_for_the_dpkg_lock_instead_of_failing() -> None:
    """Issue 23: the SSH lab's apt-get failed when another process held the dpkg lock. Hold
    it, start an (idempotent) install, let go once apt is at the lock: it must succeed."""
    lock = "/var/lib/dpkg/lock-frontend"
    if os.geteuid() != 0 or not Path(lock).exists() or platform.machine() not in _SLEEP_SYSCALLS:
        pytest.skip("needs root, dpkg and a known syscall table")
    outcome: list[BaseException | None] = []

    def install() -> None:
        try:
            apt_get(
                ["install", "-y", "-qq", "--no-install-recommends", "openssh-client"],
                error=Refused,
                lock_wait_s=300,
            )
            outcome.append(None)
        except BaseException as err:  # handed to the test thread
            outcome.append(err)

    fd = os.open(lock, os.O_RDWR)
    worker = threading.Thread(target=install)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
        worker.start()
        deadline = time.monotonic() + 120
        while not any(_sleeping(p) for p in _apt_children(os.getpid())):
            assert worker.is_alive(), f"apt-get ended while the lock was held: {outcome}"
            assert time.monotonic() < deadline, "apt-get never waited for the dpkg lock"
            time.sleep(0.05)
        assert worker.is_alive()
    finally:
        os.close(fd)  # lets go of the lock
        worker.join(timeout=600)
    assert outcome == [None]
