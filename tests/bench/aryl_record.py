"""docs/results/aryl.md's Tab. 5 tables from ``gpuplan compare`` commands (issue 29).

Every number of the page's two results tables, the bullet lists under them and the "Paper vs
ours" table comes from one ``gpuplan compare --scenario S --policies P --json`` command per
row, listed in the page's fenced block of recorded commands (:data:`COMMANDS` makes the list
from the bench's ``RESULT_CONFIGS``; ``tests/docs/test_aryl_results_doc.py`` checks the page
lists exactly these). Running all of them takes half an hour or more, so their JSON outputs are
recorded once in ``docs/results/data/aryl-results.json``::

    python -m tests.bench.aryl_record [--jobs 2] [--force] [--match philly]

runs the commands not yet recorded (``--force``: all of them; ``--match``: only commands
containing the text) as separate ``python -m gpuplan`` processes, and stores each output as
soon as it finishes, so an interrupted recording resumes where it stopped. :func:`render`
turns a recording into the page's lines (the bench's own ``results_markdown`` for the tables
and bullets), which the doc test compares with the page.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.bench.aryl import RESULT_CONFIGS, results_markdown

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "results" / "aryl.md"
RECORDING = ROOT / "docs" / "results" / "data" / "aryl-results.json"

TRACES: dict[str, str] = {
    "Philly VC 6c71a0, days 18-32": "aryl-philly-6c71a0",
    "ITP cluster07, days 14-21": "aryl-itp-cluster07",
}
"""The bench's trace titles and their embedded scenarios (the loaning one; ``-training``: the
same with an inference pool that never lends; ``-advanced``: 10 % of jobs heterogeneous)."""


def scenario_of(base: str, loaning: bool, hetero: float) -> str:
    """The embedded scenario of a ``RESULT_CONFIGS`` row: the bench runs the non-lending rows
    without loan events, the Advanced rows with 10 % of the jobs flagged heterogeneous."""
    if hetero:
        return f"{base}-advanced"
    return base if loaning else f"{base}-training"


def command(base: str, policy: str, loaning: bool, hetero: float) -> str:
    """One table row's command."""
    return (
        f"gpuplan compare --scenario {scenario_of(base, loaning, hetero)} "
        f"--policies {policy} --json"
    )


COMMANDS: list[tuple[str, tuple[str, str, str, bool, float], str]] = [
    (trace, cfg, command(base, cfg[2], cfg[3], cfg[4]))
    for trace, base in TRACES.items()
    for cfg in RESULT_CONFIGS
]
"""(trace title, RESULT_CONFIGS row, command) for every row of the two results tables."""


def doc_commands(text: str) -> list[str]:
    """The commands of the page's fenced block of recorded commands (lines ``gpuplan ...``
    inside a fenced block that follows the words "recorded commands")."""
    start = text.index("recorded commands")
    fence = text.index("```", start)
    end = text.index("```", fence + 3)
    block = text[text.index("\n", fence) + 1 : end]
    return [line.strip() for line in block.splitlines() if line.strip().startswith("gpuplan ")]


def _run(cmd: str) -> list[dict[str, Any]]:
    """One command's JSON output (``python -m gpuplan``, so it is the installed CLI's)."""
    argv = [sys.executable, "-m", "gpuplan", *shlex.split(cmd)[1:]]
    out = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {out.returncode}: {out.stderr.strip()[-400:]}")
    return json.loads(out.stdout)


def load(path: Path = RECORDING) -> dict[str, Any]:
    """A recording: ``{"commands": {command: JSON rows}}`` (empty when there is none)."""
    if not path.is_file():
        return {"commands": {}}
    return json.loads(path.read_text(encoding="utf-8"))


def _save(rec: dict[str, Any], path: Path) -> None:
    """Write atomically (a temporary file in the same folder, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".aryl-results.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(rec, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def record(
    commands: Sequence[str], path: Path = RECORDING, jobs: int = 1, force: bool = False
) -> dict[str, Any]:
    """Run ``commands`` (those not in the recording yet, or all with ``force``), ``jobs`` at a
    time, saving the recording after each one."""
    rec = load(path)
    todo = [c for c in commands if force or c not in rec["commands"]]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(_run, c): c for c in todo}
        for fut in futures:
            cmd = futures[fut]
            rec["commands"][cmd] = fut.result()
            _save(rec, path)
            print(f"recorded: {cmd}", flush=True)
    return rec


def rows_of(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The recording as the bench's row dicts (``run_result``'s keys), in table order; rows
    whose command is not recorded are left out."""
    out = []
    for trace, (scenario, solution, policy, loaning, _), cmd in COMMANDS:
        if cmd not in rec["commands"]:
            continue
        (r,) = rec["commands"][cmd]
        m = r["loaning"]
        out.append(
            {
                "trace": trace,
                "scenario": scenario,
                "solution": solution,
                "policy": policy,
                "jobs": r["jobs"],
                "unfinished": r["unfinished"],
                "qt_mean": r["avg_queueing_s"],
                "qt_median": r["median_queueing_s"],
                "qt_p95": r["p95_queueing_s"],
                "jct_mean": r["avg_jct_s"],
                "jct_median": r["median_jct_s"],
                "jct_p95": r["p95_jct_s"],
                "usage_training": m["usage_training"],
                "usage_overall": m["usage_overall"],
                "usage_overall_raw": m["usage_overall_raw"],
                "usage_bound": m["usage_bound"],
                "preemption_ratio": m["preemption_ratio"],
                "lost_gpu_h": r["lost_iterations"] / 3600.0,
                "collateral": m["collateral_damage"] if loaning else None,
                "met_by_flexible": m["met_by_flexible"] if loaning else None,
                "hetero_jobs": m["heterogeneous_jobs"],
                "mixed_jobs": m["mixed_jobs"],
                # the section heading's counts are not in the JSON; the heading is not compared
                "elastic_jobs": 0,
                "training_gpus": 0,
                "inference_gpus": 0,
            }
        )
    return out


def render_results(rec: dict[str, Any]) -> list[str]:
    """The results tables' rows, the usage-bound lines and the bullets, as the bench prints
    them (its ``results_markdown``), from the recording."""
    text = results_markdown(rows_of(rec))
    return [line for line in text.splitlines() if line.startswith(("| ", "* ", "Highest"))]


def _x(a: float, b: float, digits: int) -> str:
    return f"{a / b:.{digits}f}x"


def _pct(v: float) -> str:
    return f"{v * 100:.1f} %"


def render_paper_vs_ours(rec: dict[str, Any]) -> dict[str, list[str]]:
    """The "Paper vs ours" table's cells of one trace column per row label: ``{label: [Philly
    cell, ITP cell]}`` (the paper's column is quoted, not computed)."""
    rows = rows_of(rec)
    out: dict[str, list[str]] = {}

    def add(label: str, cell: str) -> None:
        out.setdefault(label, []).append(cell)

    for trace in TRACES:
        r = {x["policy"]: x for x in rows if x["trace"] == trace}
        b, a, lo, sc = r["fifo"], r["aryl"], r["aryl-loaning"], r["aryl-scaling"]
        sjf, nv, adv = r["aryl-sjf"], r["aryl-naive"], r["aryl-hetero"]
        scf, rnd = r["aryl-loaning-scf"], r["aryl-loaning-random"]
        add(
            "Mean queueing time",
            f"**{_x(b['qt_mean'], a['qt_mean'], 1)}** lower "
            f"({b['qt_mean']:,.0f} -> {a['qt_mean']:,.0f} s)",
        )
        add(
            "Mean JCT",
            f"**{_x(b['jct_mean'], a['jct_mean'], 2)}** lower "
            f"({b['jct_mean']:,.0f} -> {a['jct_mean']:,.0f} s)",
        )
        add(
            "Overall GPU usage",
            f"{(a['usage_overall'] / b['usage_overall'] - 1) * 100:+.1f} % "
            f"({b['usage_overall']:.2f} -> {a['usage_overall']:.2f})",
        )
        for label, row in (("Loaning only", lo), ("Scaling only", sc)):
            add(
                f"{label}, QT / JCT",
                f"{_x(b['qt_mean'], row['qt_mean'], 1)} / {_x(b['jct_mean'], row['jct_mean'], 2)}",
            )
        add(
            "SJF alone (not in the paper)",
            f"{_x(b['qt_mean'], sjf['qt_mean'], 1)} / {_x(b['jct_mean'], sjf['jct_mean'], 2)}",
        )
        add(
            "Full Aryl over SJF alone, QT / JCT",
            f"{_x(sjf['qt_mean'], a['qt_mean'], 1)} / {_x(sjf['jct_mean'], a['jct_mean'], 2)}",
        )
        add(
            "Preemption ratio, loaning only -> both",
            f"{_pct(lo['preemption_ratio'])} -> {_pct(a['preemption_ratio'])}",
        )
        add(
            "Reclaim preemptions, SCF / Aryl, Random / Aryl",
            f"{_x(scf['preemption_ratio'], lo['preemption_ratio'], 2)}, "
            f"{_x(rnd['preemption_ratio'], lo['preemption_ratio'], 1)}",
        )
        add(
            "Collateral damage, SCF / Aryl, Random / Aryl",
            f"{_x(scf['collateral'], lo['collateral'], 1)}, "
            f"{_x(rnd['collateral'], lo['collateral'], 1)}",
        )
        add("Demand met by the flexible group", _pct(a["met_by_flexible"]))
        add(
            "No grouped placement (Tab. 6): preemption ratio, QT",
            f"{(nv['preemption_ratio'] / a['preemption_ratio'] - 1) * 100:+.0f} %, "
            f"{(nv['qt_mean'] / a['qt_mean'] - 1) * 100:+.0f} %",
        )
        add(
            "Advanced (10 % heterogeneous at 70 %) over Basic Aryl, QT / JCT",
            f"{_x(a['qt_mean'], adv['qt_mean'], 2)} / {_x(a['jct_mean'], adv['jct_mean'], 2)}",
        )
        add(
            "Preemption ratio, Basic -> Advanced",
            f"{_pct(a['preemption_ratio'])} -> {_pct(adv['preemption_ratio'])}",
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.aryl_record", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1, help="commands run at a time")
    parser.add_argument("--force", action="store_true", help="rerun recorded commands too")
    parser.add_argument("--match", default="", help="only commands containing this text")
    args = parser.parse_args(argv)
    named = doc_commands(DOC.read_text(encoding="utf-8"))
    record([c for c in named if args.match in c], jobs=args.jobs, force=args.force)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
