"""Reading every user-named file (scenario, state, instance, sweep, traces, QPS series,
throughput and interference tables) without hanging or tracing back.

Why one place: every file a user names goes through the same hazards — a directory, a FIFO or
a device (``/dev/zero``) that would fail late or be read for ever, a huge file, bytes that are
not UTF-8, YAML nested deep enough to exhaust the recursion limit, an integer of thousands of
digits that Python refuses to convert, a key written twice (YAML and JSON keep the last one
silently) — and each must become one :class:`~gpuplan.models.InputError` naming the file.

The file is checked *before* it is read: ``stat`` first, so a device or a FIFO is never even
opened, then ``fstat`` on the opened descriptor, so a file swapped for one between the two
checks is still refused. A symbolic link to a regular file is followed (datasets are often
linked into place); what it points to must be a regular file like any other.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import yaml

from gpuplan.models import InputError
from gpuplan.models.bounds import MAX_INPUT_BYTES

__all__ = [
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "MAX_TRACE_BYTES",
    "check_path_text",
    "check_regular_file",
    "parse_structured",
    "read_bytes",
    "read_stdin",
    "read_text",
]

MAX_TRACE_BYTES = 1 << 30
"""Largest trace, QPS series, throughput or interference table read (1 GiB): public traces
are larger than scenario files (Alibaba's and Philly's full job tables run to hundreds of MB),
and the loaders hold a parsed copy in memory, so the cap stays within a workstation's RAM."""

_CHUNK = 1 << 20


def _refuse(message: str, path: Path | str, field: str | None) -> InputError:
    return InputError(message, source=str(path), field=field)


def _not_regular(what: str, mode: int, path: Path | str, field: str | None) -> InputError:
    kind = (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a special file"
    )
    return _refuse(f"{what} is not a regular file ({kind})", path, field)


def _os_error(what: str, err: OSError, path: Path | str, field: str | None) -> InputError:
    reason = "file not found" if isinstance(err, FileNotFoundError) else (err.strerror or str(err))
    return _refuse(f"cannot read {what}: {reason}", path, field)


MAX_PATH_BYTES = 4095
"""Longest path text tried as a file name (Linux's PATH_MAX less its NUL); one component may
hold at most ``MAX_NAME_BYTES``."""
MAX_NAME_BYTES = 255


def check_path_text(
    text: str, what: str, field: str | None = None, source: str | None = None
) -> None:
    """Refuse text that cannot name a file (a NUL byte, an unencodable character, longer than
    the OS allows) before any ``exists()`` or ``stat`` call sees it: those raise on such text
    (``ENAMETOOLONG``, ``ValueError``) instead of answering "no such file"."""
    shown = text if len(text) <= 60 else text[:57] + "..."
    if not text:  # Path("") is ".": `--out ''` silently wrote into the working directory
        raise InputError(f"{what} is empty; give a path", source=source, field=field)
    try:
        raw = os.fsencode(text)
    except UnicodeError:
        raise InputError(
            f"{what} {shown!r} cannot be a file name (unencodable character)",
            source=source,
            field=field,
        ) from None
    if b"\0" in raw:
        raise InputError(
            f"{what} {shown!r} cannot be a file name (a NUL byte)", source=source, field=field
        )
    if len(raw) > MAX_PATH_BYTES or any(len(part) > MAX_NAME_BYTES for part in raw.split(b"/")):
        raise InputError(
            f"{what} of {len(text)} characters is too long for a file name "
            f"(at most {MAX_PATH_BYTES} bytes, {MAX_NAME_BYTES} per component)",
            source=source,
            field=field,
        )


def check_regular_file(path: Path | str, what: str, *, field: str | None = None) -> os.stat_result:
    """``path``'s status if it is a regular file (a link to one is followed); a missing file,
    a directory, a device or a FIFO is one :class:`InputError`, found by ``stat`` alone (a
    FIFO nobody writes would block an ``open``)."""
    try:
        info = os.stat(path)
    except OSError as err:
        raise _os_error(what, err, path, field) from None
    except ValueError:  # a NUL byte in the name
        raise _refuse(f"cannot read {what}: not a valid file name", path, field) from None
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(what, info.st_mode, path, field)
    return info


def read_bytes(
    path: Path | str, what: str, *, limit: int = MAX_INPUT_BYTES, field: str | None = None
) -> bytes:
    """The bytes of ``path``: a regular file (a link to one is followed) of at most ``limit``
    bytes; anything else is one :class:`InputError` naming the file (and ``field``)."""
    before = check_regular_file(path, what, field=field)
    if before.st_size > limit:
        raise _refuse(f"{what} is {before.st_size} bytes; at most {limit} are read", path, field)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise _os_error(what, err, path, field) from None
    try:
        info = os.fstat(fd)  # the file now open, not the one stat saw: no swap in between
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(what, info.st_mode, path, field)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as err:
        raise _os_error(what, err, path, field) from None
    finally:
        os.close(fd)
    if size > limit:
        raise _refuse(f"{what} is larger than {limit} bytes", path, field)
    return b"".join(chunks)


def _decode(data: bytes, what: str, source: str, field: str | None, bom: bool) -> str:
    try:
        return data.decode("utf-8-sig" if bom else "utf-8")
    except UnicodeDecodeError as err:
        raise InputError(
            f"{what} is not UTF-8 text (byte {err.start})", source=source, field=field
        ) from None


def read_text(
    path: Path | str,
    what: str,
    *,
    limit: int = MAX_INPUT_BYTES,
    field: str | None = None,
    bom: bool = False,
) -> str:
    """The UTF-8 text of ``path`` (checked as :func:`read_bytes` does). ``bom`` drops a
    byte-order mark that spreadsheet exports put before a CSV's first header name."""
    return _decode(read_bytes(path, what, limit=limit, field=field), what, str(path), field, bom)


def read_stdin(what: str) -> str:
    """Standard input as UTF-8 text, at most ``MAX_INPUT_BYTES``."""
    data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"{what} on stdin is larger than {MAX_INPUT_BYTES} bytes", source="-")
    return _decode(data, what, "-", None, False)


# --------------------------------------------------------------------------- parsing
class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int | None = None, first: int | None = None) -> None:
        super().__init__(key)
        self.key, self.line, self.first = key, line, first


_SafeBase: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser where PyYAML was built with it (the wheels are): the pure-Python one takes
over 40 s on a 200,000-entry list under load, long before the models can refuse the list."""


class _StrictLoader(_SafeBase):  # type: ignore[misc, valid-type]
    """PyYAML's safe loader, except that a key written twice in one mapping is an error
    (PyYAML keeps the last value silently, so a typo'd override would be lost unseen).
    Keys brought in by a ``<<`` merge may still be overridden: that is what merges are for."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    continue  # the base class reports an unhashable key itself
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise _DuplicateKey(key, line, seen[key])
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _duplicate_message(dup: _DuplicateKey) -> str:
    shown = repr(dup.key) if len(repr(dup.key)) <= 80 else repr(dup.key)[:77] + "..."
    where = f" at line {dup.line} (first at line {dup.first})" if dup.line else ""
    return f"duplicate key {shown}{where}"


def parse_structured(
    text: str, source: str, *, json_only: bool = False, line_as_row: bool = False
) -> Any:
    """YAML (a superset of JSON) or strict JSON, with every parser failure as one line; a key
    written twice in one mapping is refused, naming the key (and, in YAML, its lines).
    ``line_as_row``: a JSON syntax error carries its line as the error's ``row`` (tables whose
    errors are located by row)."""
    try:
        if json_only:
            return json.loads(text, object_pairs_hook=_no_duplicates)
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no tags run code
    except _DuplicateKey as dup:
        raise InputError(_duplicate_message(dup), source=source) from None
    except json.JSONDecodeError as err:
        if line_as_row:
            raise InputError(f"invalid JSON: {err.msg}", source=source, row=err.lineno) from None
        detail = " ".join(str(err).split())[:300]
        raise InputError(f"not valid JSON: {detail}", source=source) from None
    except yaml.YAMLError as err:
        detail = " ".join(str(err).split())[:300]
        raise InputError(f"not valid YAML/JSON: {detail}", source=source) from None
    except RecursionError:
        raise InputError("nested too deeply", source=source) from None
    except (ValueError, OverflowError) as err:  # e.g. a 5,000-digit integer
        detail = " ".join(str(err).split())[:200]
        raise InputError(f"a value cannot be read: {detail}", source=source) from None
