"""Solver x size matrix of ``gpuplan solve``: every problem, every available solver, on the
seeded instances of ``gpuplan solve PROBLEM --generate`` (``python -m tests.bench.solver_matrix
[--quick] [--write-docs]``, part of ``make bench``).

Per cell: median wall ms / mean gap to the best objective any solver found on that instance (%)
/ proven optima. The reference is measured in the same run, so gaps survive a change of
machine; times do not (this is a busy 2-core machine). ``--write-docs`` replaces the tables
between the markers in docs/solvers.md and writes docs/results/solver-matrix.png (time and gap
against size, one column per problem).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from gpuplan.solve import PROBLEMS
from gpuplan.solver_core.limits import SolveLimits
from gpuplan.solver_core.problems.generate import SIZE_MEANS, generate

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "solvers.md"
PNG = ROOT / "docs" / "results" / "solver-matrix.png"
BEGIN, END = "<!-- solver-matrix:begin -->", "<!-- solver-matrix:end -->"

SIZES = {
    "mckp": (10, 100, 1000),
    "reclaim": (10, 100, 1000),
    "placement": (4, 8, 16),
    "packing": (10, 100, 500),
    "ojpp": (4, 8, 12),
}
MAXIMISE = {"mckp", "placement"}
"""Problems whose objective is better when larger (placement: its lexicographic score)."""


@dataclass
class Cell:
    times: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    proven: int = 0
    runs: int = 0


def run_problem(
    problem: str, sizes: tuple[int, ...], seeds: int, limits: SolveLimits
) -> dict[str, dict[int, Cell]]:
    """solver -> size -> cell, on seeds 0..seeds-1 of each size."""
    spec = PROBLEMS[problem]
    solvers = spec.default_solvers()
    cells = {s: {n: Cell() for n in sizes} for s in solvers}
    for n in sizes:
        for seed in range(seeds):
            inst = spec.load(generate(problem, n, seed), f"{problem}-{n}-{seed}")
            outs = {s: spec.run(inst, s, limits) for s in solvers}
            objs = [o.objective for o in outs.values() if o.objective is not None]
            best = (max(objs) if problem in MAXIMISE else min(objs)) if objs else None
            for s, o in outs.items():
                c = cells[s][n]
                c.runs += 1
                c.times.append(o.solve_ms + (o.build_ms or 0.0))
                c.proven += o.status == "optimal"
                if o.objective is not None and best is not None:
                    c.gaps.append(abs(o.objective - best) / max(1.0, abs(best)) * 100.0)
    return cells


def table(problem: str, cells: dict[str, dict[int, Cell]]) -> str:
    sizes = list(next(iter(cells.values())))
    head = f"| {problem} | " + " | ".join(f"n={n}" for n in sizes) + f" {SIZE_MEANS[problem]} |"
    lines = [head, "|---" * (len(sizes) + 1) + "|"]
    for solver, row in cells.items():
        parts = []
        for c in row.values():
            gap = f"{statistics.mean(c.gaps):.1f}" if c.gaps else "-"
            parts.append(f"{statistics.median(c.times):.0f} / {gap} / {c.proven}")
        lines.append(f"| {solver} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def plot(results: dict[str, dict[str, dict[int, Cell]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(results), figsize=(4.2 * len(results), 7.5), squeeze=False)
    for col, (problem, cells) in enumerate(results.items()):
        top, bottom = axes[0][col], axes[1][col]
        for i, (solver, row) in enumerate(cells.items()):
            sizes = list(row)
            style = ("-", "--", ":")[i // 10 % 3]  # the colour cycle has 10 colours
            top.plot(
                sizes,
                [max(0.05, statistics.median(c.times)) for c in row.values()],
                marker="o",
                linestyle=style,
                label=solver,
            )
            bottom.plot(
                sizes,
                [statistics.mean(c.gaps) if c.gaps else float("nan") for c in row.values()],
                marker="o",
                linestyle=style,
                label=solver,
            )
        for ax in (top, bottom):
            ax.set_xscale("log")
            ax.grid(alpha=0.3)
        top.set_yscale("log")
        top.set_title(problem)
        top.set_ylabel("median wall ms")
        bottom.set_ylabel("mean gap to best found (%)")
        bottom.set_xlabel(SIZE_MEANS[problem])
        top.legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_docs(text: str) -> None:
    doc = DOC.read_text(encoding="utf-8")
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOC}: markers {BEGIN} / {END} missing")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}", encoding="utf-8")


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    seeds = 2 if quick else 3
    limits = SolveLimits.wall(2.0 if quick else 10.0)
    only = [a for a in argv if a in SIZES]
    results: dict[str, dict[str, dict[int, Cell]]] = {}
    blocks = [
        f"Median ms / mean gap to the best objective any solver found (%) / proven "
        f"optima; {seeds} seeds (`--generate --seed 0..{seeds - 1}`), "
        f"{limits.wall_s:g} s wall limit per solver."
    ]
    for problem in only or list(SIZES):
        results[problem] = run_problem(problem, SIZES[problem], seeds, limits)
        block = table(problem, results[problem])
        blocks.append(block)
        print(f"\n{block}", flush=True)
    if "--write-docs" in argv:
        write_docs("\n\n".join(blocks))
        plot(results, PNG)
        print(f"\nwrote {DOC} and {PNG}")


if __name__ == "__main__":
    main(sys.argv[1:])
