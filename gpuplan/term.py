"""The command line's consoles and tables: readable at any width, 80 columns included.

Two behaviours differ from rich's own:

* Output to a closed pipe. rich's reaction to ``BrokenPipeError`` (``gpuplan scenarios |
  head -1``) is to exit with status 1 at once, which reads as a failure and skips the CLI's
  handling. Here the error is raised as it is, so :func:`gpuplan.cli.main` treats every closed
  stdout the same way: quietly, with status 141 (docs/cli.md).
* Tables too wide for the console. rich shrinks every column and cuts what no longer fits with
  an ellipsis: numbers read "17.…" and two inline configurations of one policy print as the
  same "tiresias-l(thr…". :func:`print_table` instead never cuts a cell (docs/cli.md, "Tables"):
  numbers keep their full width, a header wraps at its spaces, a long name or description
  wraps onto more lines of its cell, and a table that still does not fit is printed in parts
  of consecutive columns, each part repeating the first (name) column.
"""

from __future__ import annotations

import copy
import dataclasses
import errno
import os
import sys
from typing import Literal

from rich.cells import cell_len
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

__all__ = ["console", "fit_table", "print_table"]

DEFAULT_WIDTH = 160
"""Width of a console that is not a terminal (a pipe, a log) when ``COLUMNS`` is not set."""

NAME_MIN = 20
"""A first (name) column narrower than its longest name wraps the names, but is never made
narrower than this (or than a quarter of the width, when that is more)."""

TEXT_MIN = 16
"""The narrowest a text column (a description) is made: it wraps at spaces down to this."""

HEADER_LINES = 3
"""A number column is made at least as wide as its header needs to take this many lines."""

Kind = Literal["name", "number", "text"]


class _PipeConsole(Console):
    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more is rendered to a stream nobody reads
        raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")


def _columns_env() -> int | None:
    """``COLUMNS`` when it is a sensible width (what a user sets to get 80 or 200 columns)."""
    text = os.environ.get("COLUMNS", "")
    if text.isascii() and text.isdigit() and 20 <= int(text) <= 1000:
        return int(text)
    return None


def console(err: bool = False) -> Console:
    """A console on stdout (or stderr): a terminal's own width; when the stream is piped or
    logged, ``COLUMNS`` if set, else 160 columns so the comparison table is not split.
    ``emoji=False``: text is printed as written (a description or job id holding ``:smile:``
    stays text), and rich's table of emoji codes is never loaded (start-up time)."""
    stream = sys.stderr if err else sys.stdout
    width = None if stream.isatty() else (_columns_env() or DEFAULT_WIDTH)
    return _PipeConsole(stderr=err, highlight=False, width=width, emoji=False)


# ------------------------------------------------------------------------------ tables
@dataclasses.dataclass
class _Col:
    """One column of the table being fitted: what it holds and how narrow it may go."""

    column: Column
    kind: Kind
    natural: int  # every cell on one line, the header wrapped at its spaces
    floor: int  # the narrowest width that cuts nothing


def _plain(cell: object) -> str:
    """The text a cell shows (cells are rich markup strings, escaped where they quote input)."""
    if isinstance(cell, Text):
        return cell.plain
    return Text.from_markup(cell, emoji=False).plain if isinstance(cell, str) else str(cell)


def _widest_line(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)


def _widest_word(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=0)


def _header_width(header: str, lines: int) -> int:
    """The narrowest width at which ``header``, wrapped at its spaces, takes at most
    ``lines`` lines (its widest line, when it has more lines of its own)."""
    for width in range(max(_widest_word(header), 1), _widest_line(header) + 1):
        used = 0
        for line in header.splitlines():
            count, length = 1, -1
            for word in line.split():
                if length + 1 + cell_len(word) > width:
                    count, length = count + 1, cell_len(word)
                else:
                    length += 1 + cell_len(word)
            used += count
        if used <= lines:
            return width
    return max(_widest_line(header), 1)


def _measure(table: Table, width: int) -> list[_Col]:
    """Each column's kind (the first is the name column, right-justified ones are numbers,
    the rest text) and its natural (header on its own lines, cells whole) and narrowest
    widths (a header may wrap at its spaces; a number never wraps)."""
    cols = []
    for index, column in enumerate(table.columns):
        cells = [_plain(c) for c in column.cells]
        header = _plain(column.header)
        body = max((_widest_line(c) for c in cells), default=0)
        natural = max(_widest_line(header), body, 1)
        word = max(_widest_word(header), 1)
        kind: Kind = "name" if index == 0 else "number" if column.justify == "right" else "text"
        if kind == "number":
            floor = max(body, _header_width(header, HEADER_LINES))
        elif kind == "name":
            floor = min(natural, max(NAME_MIN, width // 4, word))
        else:
            floor = min(natural, max(TEXT_MIN, word))
        cols.append(_Col(column, kind, natural, floor))
    return cols


def _overhead(table: Table, count: int) -> int:
    """Columns of borders and padding a copy of ``table`` with ``count`` columns draws."""
    probe = copy.copy(table)
    probe.columns = [Column(_index=i) for i in range(count)]
    return probe._extra_width + sum(probe._get_padding_width(i) for i in range(count))


def _widths(table: Table, cols: list[_Col], width: int) -> list[int] | None:
    """Widths for ``cols`` in ``width`` columns (``None`` when even their floors do not fit):
    the floors, then what is left goes to the name column (whole names), then to the number
    columns (headers on fewer lines), then to the text columns, in equal shares where
    a column that lacks less than a share gets what it lacks; none past its natural width."""
    spare = width - _overhead(table, len(cols)) - sum(c.floor for c in cols)
    if spare < 0:
        return None
    widths = [c.floor for c in cols]
    for kind in ("name", "number", "text"):
        wanted = {i: c.natural - widths[i] for i, c in enumerate(cols) if c.kind == kind}
        # equal shares, the columns that want less than a share filled first (water-filling)
        for n, i in enumerate(sorted(wanted, key=lambda i: (wanted[i], i))):
            grant = min(wanted[i], spare // (len(wanted) - n))
            widths[i] += grant
            spare -= grant
    return widths


def _groups(table: Table, cols: list[_Col], width: int) -> list[list[_Col]]:
    """The columns in parts that each fit ``width``: one part when the whole table fits,
    else consecutive columns filled greedily, each part led by the name column."""
    if len(cols) < 2 or _widths(table, cols, width) is not None:
        return [cols]
    name, rest = cols[0], cols[1:]
    parts: list[list[_Col]] = [[name]]
    for c in rest:
        if len(parts[-1]) > 1 and _widths(table, [*parts[-1], c], width) is None:
            parts.append([name])
        parts[-1].append(c)
    return parts


def _part(table: Table, cols: list[_Col], widths: list[int], index: int, count: int) -> Table:
    part = copy.copy(table)
    part.columns = [
        dataclasses.replace(
            c.column,
            _index=i,
            width=w,
            min_width=None,
            max_width=None,
            no_wrap=False,
            overflow="fold",  # a word wider than its column goes on the next line, never "…"
            _cells=list(c.column.cells),
        )
        for i, (c, w) in enumerate(zip(cols, widths, strict=True))
    ]
    if count > 1:
        part.title = f"{table.title or 'Table'} ({index + 1} of {count})"
        part.caption = table.caption if index == count - 1 else None
    return part


def fit_table(table: Table, width: int) -> list[Table]:
    """``table`` as one or more tables that each fit ``width`` columns without cutting a
    cell: see the module's docstring. Column widths are set here, so rich does not shrink
    them; a width too small for even one column and the names is printed as wide as needed."""
    cols = _measure(table, width)
    if not cols:
        return [table]
    parts = _groups(table, cols, width)
    tables = []
    for index, part in enumerate(parts):
        widths = _widths(table, part, width) or [c.floor for c in part]
        tables.append(_part(table, part, widths, index, len(parts)))
    return tables


def print_table(out: Console, table: Table) -> None:
    """Print ``table`` on ``out`` fitted to its width (:func:`fit_table`)."""
    for part in fit_table(table, out.width):
        out.print(part)
