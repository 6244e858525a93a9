"""``gpuplan interference-eval``: how well each interference model predicts a measured
co-location table (docs/results/interference.md prints exactly this command's output).

Registering the command loads nothing; running it needs the ``ml`` extra (scikit-learn, for
the OJPP predictor's regressors), checked before any work so a missing extra is one line.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

TABLES = ("h200",)
"""The embedded measured tables with two repetitions (``scenarios/measured_tables.py``)."""


def cmd_interference_eval(args: argparse.Namespace) -> int:
    from gpuplan.models.extras import require_extra

    require_extra("ml", "gpuplan interference-eval", "sklearn")
    from gpuplan.scenarios.interference_eval import evaluate, report

    sys.stdout.write(report(evaluate()))
    return 0


def add_subcommand(subparsers: Any) -> None:
    """Register ``interference-eval`` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "interference-eval",
        help="errors of the interference models (simulator default, OJPP predictor, "
        "time-slicing, compositions) on a measured co-location table, as markdown",
    )
    p.add_argument(
        "--table",
        choices=TABLES,
        default="h200",
        help="the measured table (embedded: h200, two repetitions on one NVIDIA H200)",
    )
    p.set_defaults(func=cmd_interference_eval)
