"""``gpuplan solve --out DIR``: the comparison as a CSV and a plot, for reports and the bench."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

__all__ = ["write_report"]

COLUMNS = ("solver", "status", "objective", "bound", "gap", "build_ms", "solve_ms", "wall_ms")


def write_report(rows: list[dict[str, Any]], out: Path, title: str) -> None:
    """``solve.csv`` (one line per solver) and ``solve.png`` (objective and solve time)."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "solve.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow(["" if r.get(k, r.get(f"_{k}")) is None else r.get(k, r.get(f"_{k}"))
                        for k in COLUMNS])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["solver"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    colors = ["tab:green" if r["status"] == "optimal" else "tab:orange" for r in rows]
    ax1.bar(names, [r["objective"] or 0.0 for r in rows], color=colors)
    ax1.set_title("objective (green: proven optimal)")
    ax2.bar(names, [r["wall_ms"] for r in rows], color="tab:blue")
    ax2.set_yscale("log")
    ax2.set_title("wall time (ms)")
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", rotation=45)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out / "solve.png", dpi=100)
    plt.close(fig)
