"""Reading delimited trace files with row numbers, and typed field parsing that names the culprit.

Every trace loader funnels its input through here so that a bad value anywhere in any trace is
reported the same way: ``InputError`` naming the file, the row and the field. No ``ValueError``,
``KeyError`` or ``csv.Error`` escapes to the user.

Row-number convention (used in every message and in ``TraceJob.source``): **1-based data row
number**. The header line, when there is one, is not counted, so in a headered file row ``n`` is
line ``n + 1``; in a header-less file (Gavel ``.trace``) row ``n`` is line ``n``. Blank lines are
skipped but still counted, so the number keeps pointing at the right line in an editor.
"""

from __future__ import annotations

import csv
import functools
import gc
import io
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import ParamSpec, TypeVar

from gpuplan.models.errors import InputError

from .input_files import MAX_TRACE_BYTES, read_text

__all__ = [
    "Table",
    "gc_paused",
    "parse_datetime",
    "parse_float",
    "parse_int",
    "parse_str",
    "read_table",
    "source_label",
]


P = ParamSpec("P")
R = TypeVar("R")


def gc_paused(func: Callable[P, R]) -> Callable[P, R]:
    """Run a loader with the cyclic garbage collector paused.

    A loader allocates a few hundred thousand long-lived, acyclic objects (tuples, ``TraceJob``
    instances with their dicts); each allocation burst triggers collections that rescan them.
    Measured on the 82k-row Philly file this doubles the load time (0.5 s -> 1.0-1.5 s,
    worse when other large structures are alive). Nothing a loader builds can form a cycle, so
    pausing loses nothing. The collector is re-enabled only if it was on at entry, so nested
    loaders and callers that disabled it themselves are left as they were.
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return func(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return wrapper


@dataclass(frozen=True, slots=True)
class Table:
    """A parsed delimited file: header positions plus ``(row_number, fields)`` records.

    Records are plain lists of strings; loaders pick columns by index (``col``) once and parse
    each field with the ``parse_*`` helpers, which keeps the 82k-row Philly load fast.
    """

    source: str
    columns: dict[str, int]
    rows: list[tuple[int, list[str]]]

    def col(self, name: str) -> int:
        """Index of column ``name``; a missing column is an input error naming it."""
        try:
            return self.columns[name]
        except KeyError:
            have = ", ".join(self.columns) or "none"
            raise InputError(
                f"missing column '{name}' (columns present: {have})", source=self.source
            ) from None


def source_label(path: str | Path) -> str:
    """The file as named in ``TraceJob.source`` (``<path>, row <n>``): the path as given.

    The whole path, not a short label, so that an error about a mapped row reads exactly like
    one raised while parsing it (``/x/philly.csv, row 3, field 'gpus': ...``, the
    :class:`InputError` form) and names a file the operator can open.
    """
    return str(path)


def read_table(
    path: str | Path,
    *,
    delimiter: str = ",",
    header: bool = True,
    required: Iterable[str] = (),
    quoting: bool = True,
    allow_empty: bool = False,
) -> Table:
    """Read a CSV/TSV file into a :class:`Table`.

    With ``header=True`` the first non-blank line names the columns; every ``required`` column
    must be present and every data row must have exactly as many fields as the header (a short
    row would otherwise silently shift values between columns). Header-less files get no width
    check: the caller knows the shape (see Gavel's auto-detection).

    ``quoting=False`` treats ``"`` as an ordinary character; Gavel's tab-separated traces hold
    shell commands and are split on tabs only by their own parser.

    A file with no data rows is an error unless ``allow_empty``: an empty trace is almost always
    a truncated copy, and replaying zero jobs would look like a perfect schedule.
    """
    p = Path(path).expanduser()
    source = str(p)
    # the one safe reader: a regular file only (never a device or FIFO), at most
    # MAX_TRACE_BYTES, UTF-8 (a spreadsheet's byte-order mark dropped)
    text = read_text(p, "trace file", limit=MAX_TRACE_BYTES, bom=True)
    reader = csv.reader(
        io.StringIO(text),
        delimiter=delimiter,
        quoting=csv.QUOTE_MINIMAL if quoting else csv.QUOTE_NONE,
        strict=True,
    )
    columns: dict[str, int] = {}
    rows: list[tuple[int, list[str]]] = []
    width = -1
    row = 0
    try:
        for fields in reader:
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                if width >= 0 or not header:
                    row += 1  # blank line after the header: counted, not returned
                continue
            if header and width < 0:
                names = [f.strip() for f in fields]
                for name in names:
                    if name in columns:
                        raise InputError(f"duplicate column '{name}' in header", source=source)
                    columns[name] = len(columns)
                width = len(names)
                continue
            row += 1
            if header and len(fields) != width:
                raise InputError(
                    f"expected {width} fields like the header, found {len(fields)}",
                    source=source,
                    row=row,
                )
            rows.append((row, fields))
    except csv.Error as err:
        raise InputError(f"malformed CSV ({err})", source=source, row=row + 1) from None
    if header and width < 0:
        raise InputError("empty file (no header line)", source=source)
    table = Table(source=source, columns=columns, rows=rows)
    for name in required:
        table.col(name)
    if not rows and not allow_empty:
        raise InputError("no data rows" if header else "empty file", source=source)
    return table


def _bad(value: str, what: str, row: int, field: str, source: str) -> InputError:
    return InputError(f"expected {what}, got {value!r}", source=source, row=row, field=field)


def parse_float(
    value: str,
    row: int,
    field: str,
    source: str,
    *,
    ge: float | None = None,
    gt: float | None = None,
) -> float:
    """A finite float, optionally bounded below (``ge`` inclusive, ``gt`` exclusive).

    ``nan`` and ``inf`` are rejected: Python's ``float()`` accepts them, and either would poison
    every sum and comparison in a simulation without any error.
    """
    try:
        x = float(value)
    except ValueError:
        raise _bad(value, "a number", row, field, source) from None
    if not math.isfinite(x):
        raise _bad(value, "a finite number", row, field, source)
    if ge is not None and x < ge:
        raise _bad(value, f"a number >= {ge:g}", row, field, source)
    if gt is not None and x <= gt:
        raise _bad(value, f"a number > {gt:g}", row, field, source)
    return x


def parse_int(value: str, row: int, field: str, source: str, *, ge: int | None = None) -> int:
    """An integer; ``"8.0"`` is accepted (pandas-written traces), ``"8.5"`` is not."""
    try:
        x = int(value)
    except ValueError:
        try:
            f = float(value)
        except ValueError:
            raise _bad(value, "an integer", row, field, source) from None
        if not f.is_integer():
            raise _bad(value, "an integer", row, field, source) from None
        x = int(f)
    if ge is not None and x < ge:
        raise _bad(value, f"an integer >= {ge}", row, field, source)
    return x


def parse_str(value: str, row: int, field: str, source: str) -> str:
    """A non-empty string with surrounding whitespace removed (an id, a model, a VC)."""
    s = value.strip()
    if not s:
        raise InputError("empty value", source=source, row=row, field=field)
    return s


def parse_unique_str(value: str, row: int, field: str, source: str, seen: dict[str, int]) -> str:
    """:func:`parse_str` for an id column: a value already in ``seen`` (value -> the row it
    first stood in; this call adds it) is an error naming both rows, since two jobs with one
    id could not be told apart downstream."""
    s = parse_str(value, row, field, source)
    first = seen.setdefault(s, row)
    if first != row:
        raise InputError(
            f"duplicate {field} {s!r} (first at row {first})", source=source, row=row, field=field
        )
    return s


def parse_datetime(value: str, row: int, field: str, source: str) -> float:
    """An ISO date-time (``YYYY-MM-DD HH:MM:SS``) as POSIX seconds.

    Naive times are taken as UTC so that differences between rows are exact (no local DST jump);
    traces only ever use differences from an origin, so the zone itself does not matter.
    """
    try:
        dt = datetime.fromisoformat(value.strip())
    except ValueError:
        raise _bad(value, "a date-time like '2017-10-09 07:01:55'", row, field, source) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()
