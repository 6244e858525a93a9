"""The single server's private state directory: where it is, and refusing one others control.

The directory holds the journal, the Unix socket clients talk to, the sidecars' run root and
the jobs' protocol files. Whoever controls it controls what runs as the server's user, so
(threat model in docs/single-server.md) it is never a predictable shared path: the default is
``$XDG_RUNTIME_DIR/gpuplan-server`` (a per-user 0700 tmpfs made by the login manager) or else
``~/.local/state/gpuplan/server``, and any directory, default or given, is refused when it is
a symlink, not a directory, not owned by the caller, or open to group/others. Server and
clients check it the same way before touching anything in it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpuplan.models import InputError

SOCKET_NAME = "server.sock"
JOURNAL_NAME = "server.db"
SOCKET_PATH_MAX = 107
"""sun_path holds 108 bytes including the terminating NUL."""


def default_state_dir() -> Path:
    """``$XDG_RUNTIME_DIR/gpuplan-server`` when that runtime dir is ours and private, else
    ``~/.local/state/gpuplan/server``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        try:
            info = os.lstat(runtime)
        except OSError:
            info = None
        if (
            info is not None
            and stat.S_ISDIR(info.st_mode)
            and info.st_uid == os.geteuid()
            and not info.st_mode & 0o077
        ):
            return Path(runtime) / "gpuplan-server"
    return Path.home() / ".local" / "state" / "gpuplan" / "server"


def check_private(path: Path, what: str = "state dir") -> None:
    """Refuse ``path`` unless it is a real directory of ours that only we can use."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise InputError(f"{what} does not exist", source=str(path), field="state_dir") from None
    except OSError as err:
        raise InputError(
            f"cannot read: {err.strerror}", source=str(path), field="state_dir"
        ) from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise InputError(
            f"{what} is not a directory (a symlink?); refusing it",
            source=str(path),
            field="state_dir",
        )
    if info.st_uid != os.geteuid():
        raise InputError(
            f"{what} is owned by uid {info.st_uid}, not by you (uid {os.geteuid()}); refusing it",
            source=str(path),
            field="state_dir",
        )
    if info.st_mode & 0o077:
        raise InputError(
            f"{what} has mode {info.st_mode & 0o777:o}: others may use it; it must be 0700",
            source=str(path),
            field="state_dir",
        )


def prepare_state_dir(path: Path) -> Path:
    """Create ``path`` (0700; missing parents 0700 too) if missing, then check it. Returns
    its absolute form. An existing directory is never chmod-ed into shape: a directory made
    open by someone else may already hold their files."""
    path = Path(os.path.abspath(path))
    if not os.path.lexists(path):
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass  # raced with another start: checked below like any existing one
        except OSError as err:
            raise InputError(
                f"cannot create: {err.strerror}", source=str(path), field="state_dir"
            ) from None
    check_private(path)
    for sub in ("runs", "jobs"):
        child = path / sub
        if not os.path.lexists(child):
            os.mkdir(child, 0o700)
        check_private(child, f"{sub} dir")
    socket_path(path)
    return path


def socket_path(state_dir: Path) -> Path:
    """The server's socket in ``state_dir`` (refused when the path is too long for one)."""
    sock = Path(os.path.abspath(state_dir)) / SOCKET_NAME
    if len(os.fsencode(sock)) > SOCKET_PATH_MAX:
        raise InputError(
            f"too long for a Unix socket path ({len(os.fsencode(sock))} bytes, at most "
            f"{SOCKET_PATH_MAX}); use a shorter --state-dir",
            source=str(sock),
            field="state_dir",
        )
    return sock
