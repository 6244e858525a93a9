"""``gpuplan slurm-lab-report FILE... [--run NAME] [--json]``: the Slurm lab benchmark's
measured table from recorded rows (docs/results/slurm.md).

The lab run itself is a root-only harness (``python -m tests.bench.slurm_vs_native --out
rows.jsonl``) that records one JSON line per mode; this command is how a results page names
where each measured number comes from: the Markdown table the doc shows, or with ``--json`` one
flat object per mode, which ``tests/docs/test_doc_commands.py`` compares with the doc's
statements. A bad file, line or run is one line naming the file, the line and the field, exit
2. Registering the command loads nothing (standard library modules only when run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def cmd_slurm_lab_report(args: argparse.Namespace) -> int:
    from gpuplan.slurm_lab import workload
    from gpuplan.slurm_lab_report import load_rows, report, report_rows

    rows = load_rows(args.files, args.run)
    # The bound and the workload are the recorded rows' (load_rows refuses mixed sizes).
    items = workload(rows[0]["jobs"]) if rows else []
    if args.json:
        sys.stdout.write(json.dumps(report_rows(rows, items), indent=1) + "\n")
    elif not rows:
        sys.stdout.write("no rows\n")
    else:
        sys.stdout.write(report(rows, items) + "\n")
    return 0


def add_subcommand(subparsers: Any) -> None:
    """Register ``slurm-lab-report`` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "slurm-lab-report",
        help="the Slurm lab benchmark's measured table (docs/results/slurm.md) from rows the "
        "lab harness recorded (JSON lines)",
    )
    p.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="recorded rows, JSON lines (docs/results/data/slurm-runs.jsonl)",
    )
    p.add_argument(
        "--run",
        default=None,
        metavar="NAME",
        help="only the rows whose 'run' is NAME (the doc's runs: A, B, C, S)",
    )
    p.add_argument("--json", action="store_true", help="print JSON rows instead of the table")
    p.set_defaults(func=cmd_slurm_lab_report)
