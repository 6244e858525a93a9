"""Where a controller journal lives on disk: the private-path checks, the atomic creation of a
fresh journal file, and the writer's lock file.

Why its own module: these are the defences around the journal's *files* (another local user
must not be able to plant a journal, hold its lock or swap a symlink in; a controller killed
while creating the journal must not leave a half-built file at the real path), and they change
together, apart from how :class:`.journal.Journal` reads and writes rows. The module docstring
of :mod:`.journal` explains the reasons in full. The exceptions live here because these checks
raise them; they and the public functions are re-exported from :mod:`.journal`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import stat as stat_mod
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING
from urllib.parse import quote

from gpuplan.models import GpuplanError

from ..pidlock import lock_with_pid
from .journal_schema import SCHEMA, SCHEMA_VERSION

if TYPE_CHECKING:
    from .failpoints import Failpoints


class JournalError(GpuplanError):
    """The journal cannot be opened (locked by another controller, newer schema, bad file)."""


class UnsafeStatePath(JournalError):
    """The journal's directory, the journal or its lock is not private to this user (owned by
    someone else, writable by group or others, a symlink, not a regular file): a set-up error,
    refused before anything is created (``gpuplan slurm-controller`` exits 2)."""


TEMP_MARK = ".creating."
"""Temporary journals are ``.<name>.creating.<hex>`` in the journal's own directory."""


def _owner_problem(st: os.stat_result, what: str, path: Path) -> str | None:
    """Why a file or directory that the controller trusts is not private to this user (None
    when it is): owned by another user, or writable by group/others (sticky or not: in a sticky
    ``/tmp`` another user still owns what they created first)."""
    if st.st_uid != os.geteuid():
        return (
            f"{what} {path} belongs to uid {st.st_uid}, not to this controller's user "
            f"(uid {os.geteuid()})"
        )
    if st.st_mode & 0o022:
        return (
            f"{what} {path} is writable by group or others (mode {stat_mod.S_IMODE(st.st_mode):o})"
        )
    return None


def check_state_path(path: str | Path) -> None:
    """Refuse a journal location another local user could tamper with; create nothing.

    The directory (when it exists; a missing one is created 0700 later) must belong to this
    user and not be writable by group or others — a world-writable sticky ``/tmp`` included: a
    user who pre-creates the journal or its lock there keeps it. A symlinked directory is
    followed only when the link itself is this user's or root's. The journal and its lock, when
    they exist, must be regular files of this user, not symlinks, and private (no group/other
    access). Raises :class:`UnsafeStatePath` naming the path."""
    path = Path(path)
    check_private_dir(path.parent)
    for file, what in ((path, "journal"), (path.with_name(path.name + ".lock"), "journal lock")):
        try:
            st = os.lstat(file)
        except FileNotFoundError:
            continue
        except OSError as err:
            raise UnsafeStatePath(f"{what} {file}: {err.strerror}") from None
        _check_private_file(st, what, file)


def check_private_dir(parent: Path, what: str = "journal directory") -> None:
    """The directory part of :func:`check_state_path` (a missing one passes; it will be
    created 0700): also used for the heartbeat's directory."""
    try:
        link = os.lstat(parent)
    except FileNotFoundError:
        return
    except OSError as err:
        raise UnsafeStatePath(f"{what} {parent}: {err.strerror}") from None
    if stat_mod.S_ISLNK(link.st_mode) and link.st_uid not in (0, os.geteuid()):
        raise UnsafeStatePath(
            f"{what} {parent} is a symlink owned by uid {link.st_uid}; use "
            "a directory of this controller's user"
        )
    try:
        st = os.stat(parent)
    except OSError as err:
        raise UnsafeStatePath(f"{what} {parent}: {err.strerror}") from None
    if not stat_mod.S_ISDIR(st.st_mode):
        raise UnsafeStatePath(f"{what} {parent} is not a directory")
    problem = _owner_problem(st, what, parent)
    if problem:
        raise UnsafeStatePath(f"{problem}; use a private directory (0700) of this user")


def _check_private_file(st: os.stat_result, what: str, path: Path) -> None:
    if stat_mod.S_ISLNK(st.st_mode):
        raise UnsafeStatePath(f"{what} {path} is a symlink; refusing to follow it")
    if not stat_mod.S_ISREG(st.st_mode):
        raise UnsafeStatePath(f"{what} {path} is not a regular file; refusing to open it")
    problem = _owner_problem(st, what, path)
    if problem is None and st.st_mode & 0o077:
        problem = (
            f"{what} {path} is readable by group or others (mode {stat_mod.S_IMODE(st.st_mode):o})"
        )
    if problem:
        raise UnsafeStatePath(f"{problem}; it must be a private file (0600) of this user")


def _private_dir(path: Path) -> None:
    """Create ``path`` 0700 if missing, then check it again (someone may have created it
    between :func:`check_state_path` and here)."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise JournalError(f"cannot create journal directory {path}: {err.strerror}") from None
    check_private_dir(path)


def remove_leftovers(path: Path) -> list[Path]:
    """Delete the temporary journals (and their SQLite side files) a creator killed before its
    rename left beside ``path``; only regular files of this user are touched. Call with the
    writer lock held (no creator can be running then). Returns what was removed."""
    prefix = f".{path.name}{TEMP_MARK}"
    removed: list[Path] = []
    try:
        names = os.listdir(path.parent)
    except FileNotFoundError:
        return removed
    for name in names:
        if not name.startswith(prefix):
            continue
        leftover = path.parent / name
        try:
            st = os.lstat(leftover)
        except FileNotFoundError:
            continue
        if stat_mod.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
                removed.append(leftover)
    return removed


def _create(path: Path, failpoints: Failpoints | None) -> None:
    """Create the journal at ``path`` atomically: the schema is built in a temporary file in
    the same directory (``O_EXCL``, 0600), checkpointed and fsynced, then renamed into place
    and the directory fsynced. A kill at any point leaves either no journal (and a temporary
    file :func:`remove_leftovers` deletes) or a complete one; never an empty or schema-less
    file at ``path``."""
    hit = failpoints.hit if failpoints is not None else (lambda _name: None)
    tmp = path.with_name(f".{path.name}{TEMP_MARK}{secrets.token_hex(8)}")
    os.close(
        os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    )
    hit("journal.tmp")
    db = sqlite3.connect(_sqlite_uri(tmp, "rw"), uri=True, isolation_level=None)
    try:
        # WAL here already, so the file renamed into place is a WAL journal from its first
        # byte; the side files inherit the temporary file's 0600.
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("BEGIN IMMEDIATE")
        for statement in SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        now = time.time()
        db.execute(
            "INSERT INTO meta(key, value) VALUES ('created', ?), ('origin', ?)",
            (repr(now), repr(now)),
        )
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
        hit("journal.schema")
        busy = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        if busy:
            raise JournalError(
                f"cannot create journal {path}: checkpoint of the new journal did not complete"
            )
    finally:
        db.close()
    _fsync_file(tmp)
    hit("journal.synced")
    os.rename(tmp, path)
    hit("journal.renamed")
    _fsync_dir(path.parent)
    remove_leftovers(path)  # the WAL/SHM side files SQLite may leave under the temporary name


def _fsync_file(path: Path) -> None:
    """Flush a file SQLite wrote under a temporary name before it is renamed into place
    (opened without following a link: the name is ours, a planted link is refused)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def backup_copy(db: sqlite3.Connection, path: Path, version: int) -> Path:
    """Copy the open journal ``db`` (at schema ``version``) to ``<path>.schema<version>.bak``
    before a migration: built under a temporary name (``O_EXCL``, 0600, removed by
    :func:`remove_leftovers` if a kill interrupts it) with SQLite's online backup, fsynced and
    renamed over any older copy. The copy is what the previous release can still open after
    a downgrade. Returns its path."""
    dest = path.with_name(f"{path.name}.schema{version}.bak")
    tmp = path.with_name(f".{path.name}{TEMP_MARK}{secrets.token_hex(8)}")
    os.close(
        os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    )
    try:
        copy = sqlite3.connect(_sqlite_uri(tmp, "rw"), uri=True, isolation_level=None)
        try:
            db.backup(copy)
            copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        finally:
            copy.close()
        _fsync_file(tmp)
        os.rename(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)
    return dest


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_existing(path: Path, *, private: bool = True) -> bool:
    """True when ``path`` does not exist yet (a fresh journal may be created). An existing
    one must be a regular file (not a symlink) with a SQLite header — for the writer
    (``private``) also this user's and 0600: an empty or foreign file is an error naming it,
    never a silent fresh start."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    if private:
        _check_private_file(st, "journal", path)
    elif not stat_mod.S_ISREG(st.st_mode):
        raise JournalError(
            f"journal {path} is not a regular file (a symlink or device?); refusing to open it"
        )
    if st.st_size == 0:
        raise JournalError(
            f"journal {path} is empty (0 bytes): the real journal was lost or "
            "truncated; refusing to start over (open intents would be lost). "
            "Move it away to start a fresh journal"
        )
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        header = fh.read(16)
    if header != b"SQLite format 3\x00":
        raise JournalError(
            f"journal {path} is not a SQLite database (damaged header); refusing to open it"
        )
    return False


def _sqlite_uri(path: Path, mode: str) -> str:
    """A ``file:`` URI for ``path`` with every special character escaped: ``a#1.db`` must
    open ``a#1.db`` (the file the lock protects), not ``a``."""
    return f"file:{quote(str(path.absolute()), safe='/')}?mode={mode}"


def _take_lock(path: Path, timeout_s: float) -> IO[str]:
    try:
        fd = os.open(
            path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except OSError as err:
        raise UnsafeStatePath(f"journal lock {path}: {err.strerror}") from None
    try:
        _check_private_file(os.fstat(fd), "journal lock", path)  # as opened, not as named
    except UnsafeStatePath:
        os.close(fd)
        raise
    fh = os.fdopen(fd, "a+")  # kept open for the journal's lifetime (the lock)
    if not lock_with_pid(fh, timeout_s, poll_s=0.2):
        holder = path.read_text().strip() if path.exists() else "?"
        fh.close()
        raise JournalError(
            f"journal {path.with_suffix('')} is in use by another controller (pid {holder or '?'})"
        )
    return fh
