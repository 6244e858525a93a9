"""Render ``docs/results/afs.md`` tables from the JSON that ``tests.bench.afs_vcs`` writes.

``python -m tests.bench.afs_report RESULTS_DIR > table.md``: per-VC average and p99 JCT for
both policy groups, and the reduction ratios against SRTF and Tiresias-L beside the paper's.
The prose around the tables (differences and their reasons) is written by hand in afs.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

AWARE = ["srtf", "srsf", "afs-l"]
UNAWARE = ["tiresias-l", "max-min", "optimus", "themis", "afs-p"]


def _h(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.1f}"


def _ratio(base: float | None, other: float | None) -> str:
    return "-" if not base or not other else f"{base / other:.2f}"


def render(data: dict) -> str:
    vcs = sorted(data["vcs"].items(), key=lambda kv: kv[1]["trace"] or 0)
    out: list[str] = []
    for title, group, base in (
        ("Length-aware", AWARE, "srtf"),
        ("Length-unaware", UNAWARE, "tiresias-l"),
    ):
        cols = [p for p in group if p in data["policies"]]
        out.append(f"### {title}: average JCT (h), mean over seeds {data['seeds']}\n")
        out.append("| # | VC | jobs | " + " | ".join(cols) + f" | best / {base} |")
        out.append("|---|---|---|" + "---|" * (len(cols) + 1))
        for vc, row in vcs:
            pol = row["policies"]
            jct = {p: pol[p]["avg_jct_s"] for p in cols if p in pol}
            best = min((v for k, v in jct.items() if k != base and v), default=None)
            cells = " | ".join(_h(jct.get(p)) for p in cols)
            out.append(
                f"| {row['trace']} | {vc} | {row['jobs']} | {cells} | "
                f"{_ratio(jct.get(base), best)} |"
            )
        out.append("")
        out.append(f"### {title}: p99 JCT (h)\n")
        out.append("| # | VC | " + " | ".join(cols) + " |")
        out.append("|---|---|" + "---|" * len(cols))
        for vc, row in vcs:
            pol = row["policies"]
            cells = " | ".join(_h(pol.get(p, {}).get("p99_jct_s")) for p in cols)
            out.append(f"| {row['trace']} | {vc} | {cells} |")
        out.append("")
    out.append("### Reduction ratios (baseline avg JCT / AFS avg JCT)\n")
    out.append("| # | VC | AFS-L vs SRTF | AFS-P vs Tiresias-L | AFS-P vs Themis | wall (s) |")
    out.append("|---|---|---|---|---|---|")
    for vc, row in vcs:
        pol = row["policies"]

        def get(p: str, pol: dict = pol) -> float | None:
            return pol.get(p, {}).get("avg_jct_s")

        out.append(
            f"| {row['trace']} | {vc} | {_ratio(get('srtf'), get('afs-l'))} | "
            f"{_ratio(get('tiresias-l'), get('afs-p'))} | "
            f"{_ratio(get('themis'), get('afs-p'))} | {row['wall_s']:.0f} |"
        )
    out.append(
        f"\nPaper (Fig. 5): AFS-L/SRTF 1.2-2.7x, AFS-P/Tiresias-L 1.9-3.1x, "
        f"AFS-P/Themis up to 2.2x. The `wall` column sums to "
        f"{data['total_wall_s']:,.0f} s (see **Time** above)."
    )
    return "\n".join(out)


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results")
    print(render(json.loads((folder / "afs.json").read_text())))
