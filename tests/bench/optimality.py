"""How far each online policy is from the offline optimum (``offline-optimal``): the tables of
docs/results/optimality.md as markdown, and their plot.

``python -m tests.bench.optimality [--quick] [--instances N] [--first F] [--kinds K]
[--log FILE] [--from-log FILE] [--out DIR]``. The instances, the runs and the tabulation are
the product's (:mod:`gpuplan.optimality_reproduction`, ``gpuplan reproduce optimality-rigid``
/ ``optimality-elastic`` and their ``-offline`` / ``-open`` rows, the numbers the doc checks);
this script only writes them as the doc's markdown and, with ``--out``, draws
``optimality.png``. ``--from-log`` tabulates a recording (docs/results/data/optimality-KIND.jsonl)
instead of running.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpuplan.optimality_reproduction import (
    KINDS,
    Row,
    offline_summary,
    policy_table,
    read_log,
    run_rows,
)


def summary(data: dict[str, list[Row]]) -> str:
    """The doc's heading, summary line and table of each kind (the command's rows, rounded)."""
    lines = []
    for kind, rows in data.items():
        (s,) = offline_summary(kind, rows)
        n = s["instances"]
        what = (
            f"branch and bound closed (proven continuous optimum) on {s['closed']}/{n}; "
            f"LPs per instance median {s['lps_median']:.0f}, max {s['lps_max']:.0f}"
        )
        if kind == "rigid":
            what += f"; slotted fallback's schedule kept on {s['slotted']}"
        lines += [
            f"### {kind} ({n} instances)",
            "",
            f"offline-optimal: {what}; proven gap to the continuous optimum mean "
            f"{s['proven_gap_mean_pct']:.3g} %, max {s['proven_gap_max_pct']:.3g} %",
            "",
            "| policy | gap to offline-optimal (mean) | max | instances better than "
            "offline | gap to best known (mean) | gap to lower bound (mean) |",
            "|---|---|---|---|---|---|",
        ]
        for r in policy_table(kind, rows):
            lines.append(
                f"| {r['policy']} | {r['gap_mean_pct']:.1f} % | {r['gap_max_pct']:.1f} % | "
                f"{r['better']} | {r['gap_best_known_pct']:.1f} % | {r['gap_lower_pct']:.1f} % |"
            )
        lines.append("")
    return "\n".join(lines)


def plot(data: dict[str, list[Row]], path: Path) -> None:
    """Each policy's mean gap to the offline schedule and to the proven lower bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(data), figsize=(6 * len(data), 4.5), squeeze=False)
    for ax, (kind, rows) in zip(axes[0], data.items(), strict=True):
        table = policy_table(kind, rows)[1:]  # the online policies
        xs = range(len(table))
        ax.bar([x - 0.2 for x in xs], [r["gap_mean_pct"] for r in table], 0.4,
               label="vs offline-optimal schedule")  # fmt: skip
        ax.bar([x + 0.2 for x in xs], [r["gap_lower_pct"] for r in table], 0.4,
               label="vs proven lower bound")  # fmt: skip
        ax.set_xticks(list(xs), [r["policy"] for r in table], rotation=45, ha="right")
        ax.set_ylabel("average JCT gap (%)")
        ax.set_title(f"{kind}: {len(rows)} instances, 8 jobs, 8 GPUs")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _logged(path: Path, kind: str) -> list[Row]:
    """The rows of ``kind`` in one recording, none if it holds only the other kind."""
    from gpuplan.models.errors import InputError

    try:
        return read_log(path, kind)
    except InputError as err:
        if f"no {kind} rows" in str(err):
            return []
        raise


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.optimality")
    ap.add_argument("--quick", action="store_true", help="10 instances of each kind")
    ap.add_argument("--instances", type=int, default=100)
    ap.add_argument("--first", type=int, default=0, help="first seed (a run can be split)")
    ap.add_argument("--kinds", default="rigid,elastic", help="rigid, elastic or both")
    ap.add_argument("--out", type=Path, default=None, help="directory for the PNG")
    ap.add_argument("--log", type=Path, default=None, help="append each row to this file")
    ap.add_argument(
        "--from-log",
        type=Path,
        action="append",
        default=[],
        help="tabulate (and plot) recorded rows instead of running (once per file)",
    )
    args = ap.parse_args(argv)
    kinds = [k for k in KINDS if k in args.kinds.split(",")]
    data: dict[str, list[Row]] = {}
    for kind in kinds:
        if args.from_log:
            rows = [r for f in args.from_log for r in _logged(f, kind)]
            if rows:
                data[kind] = rows
            continue
        n = 10 if args.quick else args.instances
        data[kind] = run_rows(kind, n, args.first, args.log)
    print(summary(data))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        plot(data, args.out / "optimality.png")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
