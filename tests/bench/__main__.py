"""Run every benchmark: ``python -m tests.bench`` (``make bench``).

Each benchmark prints its numbers as ratios against a reference measured in the same run.
``--quick`` trims the slowest ones (placement gap: fewer seeds).
"""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = [
    ("simulator throughput (FIFO, SRTF on Philly 6214e9)", "sim_throughput", []),
    ("scale: jobs/s and peak RSS, 64 -> 1,024 GPUs (docs/performance.md)", "scale", ["--quick"]),
    ("AFS share computation, production vs Algorithm 1", "afs_shares", []),
    ("AFS-L decisions at 8,192 GPUs / 5,000 active jobs", "afs_scale", ["--quick"]),
    ("placement: greedy vs exact gap", "placement_gap", ["--quick"]),
    ("Aryl: reclaim and MCKP", "aryl", []),
    ("Pollux throughput-model fit (scipy)", "throughput_fit", ["--quick"]),
    (
        "CLI start-up: scenarios, policies, make_policy, simulate, Pollux prepare (issue 28)",
        "cli_startup",
        ["--repeat", "3"],
    ),
    ("OJPP: exact vs heuristic placement", "ojpp", ["--quick"]),
    ("OJPP results: Table 5, strategies, AIP", "ojpp_table5", ["--quick"]),
    (
        "reclaim at scale: exact at 1 det-s vs the best known (1,000 servers)",
        "reclaim_scale",
        ["--quick"],
    ),
    ("OJPAP in the simulation loop: benefit vs migration cost", "ojpp_online_run", ["--quick"]),
    (
        "MIP layer: MipModel -> MathOpt translation, bulk proto vs element by element",
        "mip_translate",
        ["--quick"],
    ),
    ("gpuplan solve: solver x size matrix (generated instances)", "solver_matrix", ["--quick"]),
    ("offline-optimal: each policy's gap to the optimum", "optimality", ["--quick"]),
    (
        "AFS reproduction through the sweep runner (issue 13: all 11 VCs x 8 policies x 3 seeds "
        "<= 10 min; --quick: 2 small VCs, seed 0)",
        "afs_vcs",
        ["--vcs", "e13805,2869ce", "--seeds", "0"],
    ),
    (
        "Slurm lab: controller (aryl-sjf, afs-p) vs Slurm alone --nodes=1",
        "slurm_vs_native",
        ["--quick", "--modes", "slurm-nodes1,aryl-sjf,afs-p"],
    ),
    (
        "Slurm lab at scale: controller cycle times and CPU (--quick: 8 x 8 GPUs, 100 jobs)",
        "slurm_scale",
        ["--quick"],
    ),
]


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    for title, module_name, quick_args in BENCHMARKS:
        try:
            module = importlib.import_module(f"tests.bench.{module_name}")
        except ModuleNotFoundError:
            continue
        print(f"\n== {title} ==", flush=True)
        if module_name == "sim_throughput":
            module.main()
        else:
            module.main(quick_args if quick else [])


if __name__ == "__main__":
    main(sys.argv[1:])
