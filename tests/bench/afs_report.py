"""Render ``docs/results/afs.md`` tables from ``afs.json``, and ``afs.json`` from a sweep.

``python -m tests.bench.afs_report RESULTS_DIR > table.md``: per-VC average and p99 JCT for
both policy groups, and the reduction ratios against SRTF and Tiresias-L beside the paper's.
The prose around the tables (differences and their reasons) is written by hand in afs.md.

``python -m tests.bench.afs_report --from-sweep RESULTS_CSV > afs.json``: ``afs.json`` from the
``results.csv`` of ``gpuplan sweep docs/results/data/afs-reproduction.sweep.yaml`` (the page's
recording is ``docs/results/data/afs-reproduction.results.csv``): per VC and policy the mean over
seeds of each field as :func:`gpuplan.executors.metrics.mean_summary` takes it (floats summed
and divided, integers rounded), each seed's average and p99 JCT, and the VC's run seconds
(the sum of its runs' ``elapsed_s``, as ``tests.bench.afs_vcs`` counts them).
"""

from __future__ import annotations

import csv
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


def from_sweep(results_csv: Path) -> dict:
    """``afs.json``'s content from a reproduction sweep's ``results.csv`` (module docstring)."""
    from tests.bench.afs_vcs import TRACES

    with results_csv.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    seeds = sorted({int(r["seed"]) for r in rows})
    policies = [p for p in AWARE + UNAWARE if any(r["policy"] == p for r in rows)]
    ids = {vc: i for i, vc in TRACES.items()}
    runs = {(r["scenario"].removeprefix("philly-"), r["policy"], int(r["seed"])): r for r in rows}
    vcs: dict[str, dict] = {}
    for vc in dict.fromkeys(r["scenario"].removeprefix("philly-") for r in rows):
        row: dict[str, dict] = {}
        for policy in policies:
            mine = [runs[(vc, policy, seed)] for seed in seeds]

            def mean(field: str, cast: type, mine: list[dict] = mine) -> float:
                values = [cast(r[field]) for r in mine]
                total = sum(values) / len(values)
                return round(total) if cast is int else total

            row[policy] = {
                "avg_jct_s": mean("avg_jct_s", float),
                "p99_jct_s": mean("p99_jct_s", float),
                "unfinished": mean("unfinished", int),
                "preemptions": mean("preemptions", int),
                "resizes": mean("resizes", int),
                "decision_p95_ms": mean("decision_p95_ms", float),
                "per_seed": [
                    {
                        "seed": seed,
                        "avg_jct_s": float(r["avg_jct_s"]),
                        "p99_jct_s": float(r["p99_jct_s"]),
                    }
                    for seed, r in zip(seeds, mine, strict=True)
                ],
            }
        mine_all = [r for key, r in runs.items() if key[0] == vc]
        vcs[vc] = {
            "trace": ids.get(vc),
            "wall_s": sum(float(r["elapsed_s"]) for r in mine_all),
            "jobs": int(mine_all[0]["jobs"]),
            "policies": row,
        }
    total = sum(v["wall_s"] for v in vcs.values())
    return {"seeds": seeds, "policies": policies, "vcs": vcs, "total_wall_s": total}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--from-sweep":
        print(json.dumps(from_sweep(Path(sys.argv[2])), indent=2))
    else:
        folder = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results")
        print(render(json.loads((folder / "afs.json").read_text())))
