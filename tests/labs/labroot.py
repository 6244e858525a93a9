"""Private lab roots: directories only the caller can write, checked on every use.

Why: the Slurm and SSH labs run as root and hand paths under their root to root daemons
(slurmctld runs ``etc/epilog_wake.sh``, sshd reads ``authorized_keys/root``), and they read back
PIDs they later signal. A root at a predictable path under ``/tmp`` that another local user
created first, or anything inside it that another user can write or swap for a symbolic link,
would hand that user root. So:

* :func:`private_root` creates the root (``mkdir``, so never someone else's) or accepts an
  existing one only when it is a real directory (not a link) owned by the caller and writable by
  no one else, and every directory above it is owned by root or the caller and writable by no
  one else unless sticky (``/tmp``: others may add names there, never rename ours);
* :func:`private_dir` does the same for every component the lab creates below the root;
* :func:`write_file` replaces a file atomically without following links (a fresh ``O_EXCL |
  O_NOFOLLOW`` file, then ``rename``), :func:`read_file` reads one only when it is a regular file
  of ours that no one else can write, and only up to a bound;
* :func:`process_is` tells whether a PID read from such a file is still the process the lab
  started (uid, executable, command line, start time), so a stale or forged PID is never
  signalled;
* :func:`apt_get` runs apt and waits (bounded) for the dpkg and package-list locks instead of
  failing when another apt holds them.

Errors are raised as the caller's own exception class (each lab has one), with one line that
names the path and what is wrong with it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["apt_get", "private_dir", "private_root", "process_is", "read_file", "write_file"]

APT_LOCK_WAIT_S = 600
"""How long apt waits for another apt/dpkg to let go of its locks (``DPkg::Lock::Timeout``)."""

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _check_dir(path: Path, st: os.stat_result, uid: int, error: type[Exception], what: str) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise error(f"{what} {path} is a symbolic link; refusing to use it")
    if not stat.S_ISDIR(st.st_mode):
        raise error(f"{what} {path} is not a directory; refusing to use it")
    if st.st_uid != uid:
        raise error(
            f"{what} {path} belongs to uid {st.st_uid}, not to this user (uid {uid}); "
            "refusing to use it (remove it or choose another root)"
        )
    if st.st_mode & _OTHERS_WRITE:
        raise error(
            f"{what} {path} is writable by group or others (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); refusing to use it"
        )


def _prefixes(path: Path) -> list[Path]:
    return [Path(*path.parts[:k]) for k in range(1, len(path.parts) + 1)]


def check_ancestors(path: Path, error: type[Exception]) -> None:
    """Every directory above ``path`` (as written and as resolved) is owned by root or the
    caller and not writable by others unless sticky; a link on the way is owned by root or
    the caller (its target is checked as part of the resolved path)."""
    uid = os.geteuid()
    parent = path.parent
    for chain in (_prefixes(parent), _prefixes(Path(os.path.realpath(parent)))):
        for p in chain:
            try:
                st = os.lstat(p)
            except OSError as err:
                raise error(f"cannot check {p} (above {path}): {err.strerror}") from None
            if st.st_uid not in (0, uid):
                raise error(
                    f"{p} (above {path}) belongs to uid {st.st_uid}; refusing a root "
                    "below a directory another user controls"
                )
            if stat.S_ISLNK(st.st_mode):
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise error(f"{p} (above {path}) is not a directory")
            if st.st_mode & _OTHERS_WRITE and not st.st_mode & stat.S_ISVTX:
                raise error(
                    f"{p} (above {path}) is writable by others and not sticky; "
                    "refusing a root there"
                )


def private_root(
    path: str | Path, *, mode: int, error: type[Exception], create: bool = True
) -> bool | None:
    """Make sure ``path`` is a root only the caller controls; return True when it was created
    here (new), False when an existing one passed the checks, None when it does not exist and
    ``create`` is False. The mode is set to ``mode`` either way (labs use 0711: others may
    traverse to the files they must read, never list or write)."""
    root = Path(os.path.abspath(path))
    check_ancestors(root, error)
    created = False
    if create:
        try:
            os.mkdir(root, 0o700)
            created = True
        except FileExistsError:
            pass
        except OSError as err:
            raise error(f"cannot create the lab root {root}: {err.strerror}") from None
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:  # ELOOP (a link) or ENOTDIR: say which, from lstat
        _check_dir(root, os.lstat(root), os.geteuid(), error, "lab root")
        raise error(f"lab root {root} cannot be opened") from None
    try:
        _check_dir(root, os.fstat(fd), os.geteuid(), error, "lab root")
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return created


def private_dir(root: Path, rel: str | Path, *, error: type[Exception], mode: int = 0o755) -> Path:
    """``root/rel``, each component created (``mode``) or checked: a directory of ours that no
    one else can write, never a link. ``root`` itself must have passed :func:`private_root`."""
    uid = os.geteuid()
    cur = root
    for part in Path(rel).parts:
        cur = cur / part
        made = False
        try:
            os.mkdir(cur, mode)
            made = True
        except FileExistsError:
            pass
        _check_dir(cur, os.lstat(cur), uid, error, "lab directory")
        if made:
            os.chmod(cur, mode)  # mkdir's mode went through the umask
    return cur


def write_file(path: Path, data: str | bytes, *, mode: int, error: type[Exception]) -> None:
    """Replace ``path`` with ``data`` (file mode ``mode``) without ever following a link: a new
    file beside it (``O_EXCL | O_NOFOLLOW``, mode set before any content), renamed over it. A
    link planted at ``path`` is replaced, its target untouched."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except OSError as err:
        raise error(f"cannot write {path}: {err.strerror}") from None
    try:
        os.fchmod(fd, mode)
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise error(f"cannot write {path}: {err.strerror}") from None


def read_file(path: Path, *, limit: int, error: type[Exception]) -> bytes | None:
    """The content of ``path`` (None when it does not exist), read only when it is a regular
    file owned by the caller that no one else can write, and at most ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise error(f"refusing to read {path}: {err.strerror} (a symbolic link?)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"refusing to read {path}: not a regular file")
        if st.st_uid != os.geteuid() or st.st_mode & _OTHERS_WRITE:
            raise error(
                f"refusing to read {path}: owned by uid {st.st_uid} with mode "
                f"{stat.S_IMODE(st.st_mode):04o} (another user could have written it)"
            )
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(65536, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise error(f"refusing to read {path}: larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _proc_uids(pid: int) -> tuple[int, int] | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Uid:"):
            real, effective = line.split()[1:3]
            return int(real), int(effective)
    return None


def process_is(
    pid: int,
    *,
    exe: str,
    uid: int,
    argv: Sequence[str] | None = None,
    cmdline_contains: str | None = None,
    start_ticks: int | None = None,
) -> bool:
    """``pid`` runs (not a zombie), as ``uid`` (real and effective), from the executable
    ``exe`` (a command found on ``PATH`` or a path; compared after resolving links, since
    Debian's alternatives make ``slurmctld`` run as ``slurmctld-wlm``), with exactly ``argv``
    (or a command line containing ``cmdline_contains``) and, when given, the kernel start time
    ``start_ticks``.

    A PID from a file is only a hint: it may have been reused, or forged. Only a process that
    passes all of these is ours to signal."""
    if pid <= 1:
        return False
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
        target = os.readlink(f"/proc/{pid}/exe")
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    rest = raw[raw.rfind(")") + 2 :].split()
    if rest[0] in ("Z", "X") or (start_ticks is not None and int(rest[19]) != start_ticks):
        return False
    if _proc_uids(pid) != (uid, uid):
        return False
    if target.removesuffix(" (deleted)") != os.path.realpath(shutil.which(exe) or exe):
        return False
    if argv is not None and cmd.rstrip(b"\0").split(b"\0") != [a.encode() for a in argv]:
        return False
    return (
        cmdline_contains is None
        or cmdline_contains in cmd.replace(b"\0", b" ").decode(errors="replace") + " "
    )


def apt_get(
    args: Sequence[str],
    *,
    error: type[Exception],
    lock_wait_s: float = APT_LOCK_WAIT_S,
    timeout_s: float = 1800,
) -> None:
    """``apt-get ARGS`` non-interactively. apt waits up to ``lock_wait_s`` for the dpkg lock
    (``DPkg::Lock::Timeout``); ``apt-get update`` does not honour that for the package lists'
    lock, so a "Could not get lock" failure is retried within the same bound. Anything else
    fails at once with apt's own last lines."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    argv = ["apt-get", "-o", f"DPkg::Lock::Timeout={int(lock_wait_s)}", *args]
    deadline = time.monotonic() + lock_wait_s
    while True:
        try:
            proc = subprocess.run(
                argv,
                env=env,
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                timeout=timeout_s,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise error(f"{' '.join(argv)} failed: {err}") from None
        if proc.returncode == 0:
            return
        locked = "Could not get lock" in proc.stderr or "Unable to lock" in proc.stderr
        if not locked or time.monotonic() > deadline:
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
            raise error(f"{' '.join(argv)} failed: {tail}")
        time.sleep(2.0)
