"""Where the command line writes: output folders and files, never through a planted link.

Why one place: ``simulate``/``compare --out``, ``solve --out``, ``sweep --out`` and
``solve --generate --instance FILE`` all write where a user points them, and a folder may hold
entries someone else put there earlier (a shared scratch directory, a reused output folder).
Every writer here therefore

* checks its target *before* any work runs (a run must not end in an error it could have had
  at the start: ``solve --out /dev/null`` is refused before a solver starts);
* refuses a symbolic link, or an existing non-directory / non-regular file, where it would
  write (a link planted at ``out`` or ``out/runs`` would redirect every file);
* creates each file under an unpredictable name with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and
  renames it into place: a rename replaces whatever sits at the final name instead of writing
  through it, and a reader never sees half a file.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from gpuplan.models import InputError

__all__ = ["check_file_target", "check_out_dir", "check_subdir", "staging_dir", "write_file_atomic"]

_CREATE = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def _lstat(path: Path, field: str | None, source: str | None = None) -> os.stat_result | None:
    """What sits at ``path`` itself (a link is not followed), or None when nothing does."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:  # ENAMETOOLONG, a NUL byte in the name, ...
        reason = getattr(err, "strerror", None) or "not a valid path"
        raise InputError(
            f"cannot use this path: {reason}", source=source or str(path), field=field
        ) from None


def _existing(
    path: Path, text: str, field: str, is_kind: Callable[[int], bool], give: str, kind: str
) -> os.stat_result | None:
    """``path``'s lstat (None if missing); a symlink, or an existing entry of another kind than
    ``is_kind`` accepts, is refused in one line."""
    info = _lstat(path, field)
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise InputError(f"is a symlink; give {give}", source=text, field=field)
    if info is not None and not is_kind(info.st_mode):
        raise InputError(f"exists and is not {kind}", source=text, field=field)
    return info


def check_out_dir(text: str, field: str = "out") -> Path:
    """An output folder for ``--out``: created (with its parents) if missing; a symlink or an
    existing non-directory is refused, and so is a folder this user cannot write."""
    out = Path(text)
    info = _existing(out, text, field, stat.S_ISDIR, "a real directory", "a directory")
    if info is None:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputError(
                f"cannot create the output directory: {err.strerror or err}",
                source=text,
                field=field,
            ) from None
        info = _lstat(out, field)
        if info is None or not stat.S_ISDIR(info.st_mode):  # swapped for a link under us
            raise InputError("is not a real directory", source=text, field=field)
    if not os.access(out, os.W_OK | os.X_OK):
        raise InputError("the output directory is not writable", source=text, field=field)
    return out


def check_subdir(out: Path, name: str, field: str = "out") -> Path:
    """``out/name``, created if missing; an existing symlink or non-directory there is
    refused (a link planted at ``out/runs`` would send every run file elsewhere)."""
    sub = out / name
    try:
        os.mkdir(sub)
    except FileExistsError:
        pass
    except OSError as err:
        raise InputError(
            f"cannot create {name}/: {err.strerror or err}", source=str(out), field=field
        ) from None
    info = _lstat(sub, field, str(out))
    if info is None or stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise InputError(
            f"{name} is a symlink or not a directory; remove it or choose another folder",
            source=str(out),
            field=field,
        )
    return sub


def check_file_target(text: str, field: str) -> Path:
    """A file the command will (re)write: missing, or an existing regular file; a symlink, a
    directory or a device (``/dev/null``) is refused before anything runs."""
    path = Path(text)
    _existing(path, text, field, stat.S_ISREG, "a regular file", "a regular file")
    parent = path.parent
    if not parent.is_dir():
        raise InputError(f"its folder {parent} does not exist", source=text, field=field)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"its folder {parent} is not writable", source=text, field=field)
    return path


def write_file_atomic(
    path: Path, write: Callable[[int], None] | bytes | str, field: str | None = None
) -> None:
    """Write ``path`` by creating a fresh file beside it (``O_EXCL | O_NOFOLLOW``, an
    unpredictable name, mode 0666 less the umask) and renaming it over ``path``.

    ``write`` is the content (text is UTF-8) or a function writing to the open descriptor."""
    tmp = path.with_name(f".{path.name[:64]}.{secrets.token_hex(8)}.tmp")
    try:
        fd = os.open(tmp, _CREATE, 0o666)
    except OSError as err:
        raise InputError(
            f"cannot write: {err.strerror or err}", source=str(path), field=field
        ) from None
    try:
        try:
            if callable(write):
                write(fd)
            else:
                data = write.encode("utf-8") if isinstance(write, str) else write
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as err:
        with suppress(OSError):
            os.unlink(tmp)
        raise InputError(
            f"cannot write: {err.strerror or err}", source=str(path), field=field
        ) from None
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


@contextmanager
def staging_dir(out: Path) -> Iterator[Path]:
    """A private (0700, unpredictable name) folder inside ``out`` for files written by
    libraries that open their own paths (plots, reports); the caller renames each file into
    ``out`` with :func:`os.replace`, and the folder is removed afterwards."""
    staging = Path(tempfile.mkdtemp(prefix=".gpuplan-", dir=out))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)
