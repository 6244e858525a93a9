"""An on-disk cache of fitted Pollux throughput models, so a workload prepares in a blink.

Why: fitting a Pollux model (:func:`~gpuplan.scenarios.throughput_fit.fit_pollux_params`,
scipy's ``least_squares``) costs about half a second of CPU per model, and a Pollux workload
fits every model it names on every run (issue 28: 3.1 s per ``gpuplan simulate``). The fit is
deterministic, so its result depends only on the samples it reads and on the fit's code.

Key (:func:`content_key`): SHA-256 of what the cached value is computed from -- the bytes of
every file it reads (a Pollux model's ``validation-*.csv``, ``placements.csv`` and
``scalability.csv``), the kind and version of the computation, :data:`FIT_VERSION`, numpy's and
scipy's versions -- so an edited table, a new fit or a new scipy misses the cache; the
files' names are part of it, their folder and times are not. A hit skips reading and
checking the tables as well as the fit (the stored value was computed from the same bytes,
which passed those checks then). Values are stored as JSON, whose floats keep their shortest
round-trip repr, so a run is bit-identical with and without the cache
(tests/scenarios/test_fit_cache.py).

Where: ``$XDG_CACHE_HOME/gpuplan`` (an absolute path), else ``~/.cache/gpuplan``; created mode
0700. Other local users are hostile (threat model: docs/cli.md, "The fit cache"):

* the folder is used only if it is a real directory (not a symlink) owned by this user and
  writable by nobody else; otherwise nothing is read or written there and the fit runs;
* a file is opened with ``O_NOFOLLOW``, read only if it is a regular file owned by this user
  and writable by nobody else, of at most 4 MiB, and its content checked field by field;
  anything else (corrupt, truncated, foreign) is ignored and the fit's result rewritten;
* files are written to an unpredictable ``O_EXCL`` temporary name (mode 0600) in the folder
  and renamed into place, so a reader never sees half a file and a planted link is replaced,
  never followed.

Any failure of the cache falls back to fitting: the cache can make a run faster, never fail it.
``GPUPLAN_NO_CACHE=1`` turns it off (no read, no write).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import stat
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .input_files import MAX_TRACE_BYTES

if TYPE_CHECKING:
    from .throughput_fit import FitResult

__all__ = [
    "FIT_VERSION",
    "cache_dir",
    "content_key",
    "disabled",
    "fit_from_json",
    "fit_to_json",
    "load",
    "store",
]

FIT_VERSION = 1
"""Bump when :func:`fit_pollux_params` may give other numbers for the same samples."""
ENV_OFF = "GPUPLAN_NO_CACHE"
MAX_FILE_BYTES = 4 * 1024 * 1024
"""A cached model (fit plus a model's validation tables) is tens of KiB; larger is not ours."""
_PARAMS = ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma")


def disabled() -> bool:
    """Whether ``GPUPLAN_NO_CACHE`` turns the cache off (set, and not empty or ``0``)."""
    return os.environ.get(ENV_OFF, "") not in ("", "0")


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/gpuplan`` when that is an absolute path (the XDG rule: a relative
    value is ignored), else ``~/.cache/gpuplan``. Not created here."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "gpuplan"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "none"


def content_key(kind: str, version: int, paths: Sequence[Path]) -> str | None:
    """Hex SHA-256 of ``kind``, ``version``, numpy's and scipy's versions and every file's
    name and bytes (a missing file counts as missing), or None when a file cannot be read as
    a regular file of at most ``MAX_TRACE_BYTES`` (then the caller parses as usual, and its
    parser reports the problem)."""
    digest = hashlib.sha256(
        json.dumps([kind, version, FIT_VERSION, _version("numpy"), _version("scipy")]).encode()
    )
    for path in paths:
        digest.update(f"\0{path.name}\0".encode())
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO: no hang
        except FileNotFoundError:
            digest.update(b"missing")
            continue
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_TRACE_BYTES:
                return None
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = fh.read(MAX_TRACE_BYTES + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        digest.update(f"{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _private_dir(path: Path, create: bool) -> bool:
    """Whether ``path`` is a directory this user owns that nobody else can write (made,
    0700, when missing and ``create``). A symlink, a foreign owner or group/world write
    permission: not trusted (False)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return False
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.mkdir(path, 0o700)
        except OSError:
            return False
        return _private_dir(path, create=False)
    except OSError:
        return False
    return (
        stat.S_ISDIR(st.st_mode)
        and st.st_uid == os.getuid()
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def _read(path: Path) -> dict[str, Any] | None:
    """The JSON object at ``path`` if it is a trusted regular file, else None."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0)  # a FIFO: no hang
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_uid != os.getuid()
            or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            or st.st_size > MAX_FILE_BYTES
        ):
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = json.loads(fh.read(MAX_FILE_BYTES + 1))
    except (OSError, ValueError, RecursionError):
        return None
    finally:
        os.close(fd)
    return data if isinstance(data, dict) else None


def fit_from_json(data: Any) -> FitResult | None:
    """A :class:`FitResult` from :func:`fit_to_json`'s object, or None unless every field is
    there with the right type."""
    from .throughput_fit import FitResult, PolluxPerfParams

    try:
        params = data["params"]
        values = [params[name] for name in _PARAMS]
        floats = [*values, data["rmsle"], data["max_abs_log_error"]]
        if not all(type(v) is float for v in floats):
            return None
        n, ok, msg, fixed = data["n_samples"], data["success"], data["message"], data["fixed"]
        if (
            type(n) is not int
            or type(ok) is not bool
            or not isinstance(msg, str)
            or not isinstance(fixed, list)
            or not all(isinstance(f, str) and f in _PARAMS for f in fixed)
        ):
            return None
        return FitResult(
            params=PolluxPerfParams(*values),
            rmsle=data["rmsle"],
            max_abs_log_error=data["max_abs_log_error"],
            n_samples=n,
            success=ok,
            message=msg,
            fixed=tuple(fixed),
        )
    except (KeyError, TypeError):
        return None


def fit_to_json(fit: FitResult) -> dict[str, Any]:
    """A fit as JSON-ready values (floats exact: JSON keeps their round-trip repr)."""
    p = fit.params
    return {
        "params": {name: getattr(p, name) for name in _PARAMS},
        "rmsle": fit.rmsle,
        "max_abs_log_error": fit.max_abs_log_error,
        "n_samples": fit.n_samples,
        "success": fit.success,
        "message": fit.message,
        "fixed": list(fit.fixed),
    }


def _write(folder: Path, name: str, text: str) -> None:
    """``text`` at ``folder/name``: an ``O_EXCL`` file of a random name, then a rename."""
    tmp = folder / f".{name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, folder / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _name(key: str) -> str:
    return f"{key[:40]}.json"


def load(key: str) -> Any:
    """The value stored under ``key`` (:func:`content_key`), or None: cache off, folder or
    file untrusted, unreadable, corrupt, or for another key."""
    if disabled():
        return None
    folder = cache_dir()
    if not _private_dir(folder, create=False):
        return None
    data = _read(folder / _name(key))
    if data is None or data.get("key") != key or data.get("version") != FIT_VERSION:
        return None
    return data.get("value")


def store(key: str, value: Any) -> None:
    """Keep ``value`` (JSON-ready) under ``key``; silently nothing when the cache is off or its
    folder cannot be made private (the cache never fails a run)."""
    if disabled():
        return
    folder = cache_dir()
    if not _private_dir(folder, create=True):
        return
    text = json.dumps({"version": FIT_VERSION, "key": key, "value": value})
    if len(text) <= MAX_FILE_BYTES:
        with contextlib.suppress(OSError):
            _write(folder, _name(key), text)
