"""``gpuplan reproduce [NAME] [--json]``: run one of the papers' experiments that is not a
scenario run (:mod:`gpuplan.reproductions`) and print its rows.

Without a name it lists the reproductions. With ``--json`` the rows are a JSON list of flat
objects, the shape ``gpuplan compare --json`` prints, so a results page can quote a field per
row and ``tests/docs/test_doc_commands.py`` can check it. Registering the command loads
nothing; running one imports only its experiment's module.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from .term import console, print_table


def _cell(value: object) -> str:
    """A table cell: floats to 4 significant decimals' worth, the rest as text."""
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.0f}"
    return escape(str(value))


def cmd_reproduce(args: argparse.Namespace) -> int:
    from gpuplan.reproductions import REPRODUCTIONS, reproduction

    if args.name is None:
        table = Table(title="Reproductions (gpuplan reproduce NAME)")
        table.add_column("name")
        table.add_column("needs")
        table.add_column("what it prints")
        for r in REPRODUCTIONS.values():
            needs = ", ".join(n for n in ("shared traces" if r.traces else "", r.extra or "") if n)
            table.add_row(escape(r.name), escape(needs or "-"), escape(r.summary))
        print_table(console(), table)
        return 0
    rows = reproduction(args.name).rows(
        from_log=args.from_log, log=args.log, first=args.first, instances=args.instances
    )
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return 0
    table = Table(title=f"gpuplan reproduce {escape(args.name)}")
    fields = list(dict.fromkeys(k for row in rows for k in row))
    for name in fields:
        table.add_column(escape(name))
    for row in rows:
        table.add_row(*(_cell(row.get(name, "")) for name in fields))
    print_table(console(), table)
    return 0


def add_subcommand(subparsers: Any) -> None:
    """Register ``reproduce`` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "reproduce",
        help="run a paper experiment that is not a scenario run (OJPP Table 5, AIP, ...) "
        "and print its rows; without a name, list them",
    )
    p.add_argument("name", nargs="?", default=None, help="the reproduction (see the list)")
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    p.add_argument(
        "--from-log",
        type=Path,
        default=None,
        metavar="FILE",
        help="tabulate a per-instance log recorded with --log instead of running "
        "(reproductions that take it)",
    )
    p.add_argument(
        "--log",
        type=Path,
        default=None,
        metavar="FILE",
        help="append each instance's row to FILE (JSON lines) as it completes",
    )
    p.add_argument("--first", type=int, default=None, help="first seed of a run")
    p.add_argument("--instances", type=int, default=None, help="instances in a run")
    p.set_defaults(func=cmd_reproduce)
