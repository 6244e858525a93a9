"""``gpuplan solve --out DIR``: the comparison as a CSV and a plot, for reports and the bench."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

from .out_paths import staging_dir, write_file_atomic

__all__ = ["write_report"]

COLUMNS = ("solver", "status", "objective", "bound", "gap", "build_ms", "solve_ms", "wall_ms")


def write_report(rows: list[dict[str, Any]], out: Path, title: str) -> None:
    """``solve.csv`` (one line per solver) and ``solve.png`` (objective and solve time) in
    ``out``, a folder :func:`~gpuplan.out_paths.check_out_dir` accepted. Each file is made
    under a fresh name and renamed into place, so a link planted at ``out/solve.csv`` is
    replaced, never written through."""
    buffer = io.StringIO()
    w = csv.writer(buffer)
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow(
            ["" if r.get(k, r.get(f"_{k}")) is None else r.get(k, r.get(f"_{k}")) for k in COLUMNS]
        )
    write_file_atomic(out / "solve.csv", buffer.getvalue(), field="out")
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
    with staging_dir(out) as staging:  # matplotlib opens its own path: a private folder
        fig.savefig(staging / "solve.png", dpi=100)
        os.replace(staging / "solve.png", out / "solve.png")
    plt.close(fig)
