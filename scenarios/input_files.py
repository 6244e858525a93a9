"""Reading user-supplied files (scenarios, state snapshots) without hanging or tracing back.

Why one place: every file a user names goes through the same hazards — a device (``/dev/zero``)
or a huge file that would be read for ever, bytes that are not UTF-8, YAML nested deep enough
to exhaust the recursion limit, an integer of thousands of digits that Python refuses to
convert — and each must become one :class:`~gpuplan.models.InputError` naming the file.
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


def read_text(path: Path, what: str) -> str:
    """The text of ``path`` (a regular file of at most ``MAX_INPUT_BYTES``, UTF-8)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise InputError(f"cannot read {what}: {err.strerror}", source=str(path)) from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{what} is not a regular file", source=str(path))
        if info.st_size > MAX_INPUT_BYTES:
            raise InputError(f"{what} is {info.st_size} bytes; at most {MAX_INPUT_BYTES} are "
                             "read", source=str(path))
        data = fh.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"{what} is larger than {MAX_INPUT_BYTES} bytes", source=str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{what} is not UTF-8 text (byte {err.start})",
                         source=str(path)) from None


def read_stdin(what: str) -> str:
    data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"{what} on stdin is larger than {MAX_INPUT_BYTES} bytes",
                         source="-")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{what} is not UTF-8 text (byte {err.start})", source="-") from None


def parse_structured(text: str, source: str, *, json_only: bool = False) -> Any:
    """YAML (a superset of JSON) or strict JSON, with every parser failure as one line."""
    try:
        return json.loads(text) if json_only else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        detail = " ".join(str(err).split())[:300]
        raise InputError(f"not valid {'JSON' if json_only else 'YAML/JSON'}: {detail}",
                         source=source) from None
    except RecursionError:
        raise InputError("nested too deeply", source=source) from None
    except (ValueError, OverflowError) as err:  # e.g. a 5,000-digit integer
        detail = " ".join(str(err).split())[:200]
        raise InputError(f"a value cannot be read: {detail}", source=source) from None
