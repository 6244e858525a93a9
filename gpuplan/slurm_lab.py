"""The Slurm lab benchmark's experiment definition (docs/results/slurm.md): its seeded
workload, the lab's shape and the modes it compares.

The live measurement (real slurmctld/slurmd, ``python -m tests.bench.slurm_vs_native``) is a
test-tree harness; what it measures against is defined here so that the simulator's prediction
(:mod:`gpuplan.slurm_lab_predict`, ``gpuplan reproduce slurm-prediction``) and the measured
tables (:mod:`gpuplan.slurm_lab_report`, ``gpuplan slurm-lab-report``) are product commands
that a results page can name, and the harness runs exactly these jobs. Standard library only:
registering or listing a command that uses it loads nothing heavy.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SEED = 16
"""The issue's seed (issue 16): every run and prediction draws the same jobs."""
LAB_NODES = 4
LAB_GPUS_PER_NODE = 4
"""The lab's shape (``tests/slurm_fixtures.py`` starts it so; a test checks they agree)."""
LAB_GPUS = LAB_NODES * LAB_GPUS_PER_NODE

BASELINES = ("slurm-nodes1", "slurm-multifactor", "slurm-gpus")
"""Slurm alone, three ways: as operators submit single-node GPU jobs (``--nodes=1``), the same
under ``priority/multifactor`` (age and job size, small first), and the older ``--gpus=N`` with
no node count, which Slurm may split over nodes (kept only as an extra row). How each is
submitted is the harness's business; which modes are Slurm alone is the report's and the
prediction's."""
FAIR_BASELINES = ("slurm-nodes1", "slurm-multifactor")
"""The baselines a policy is judged against (the ``--gpus`` one splits jobs: not fair)."""
REFERENCE = "slurm-nodes1"
"""The mode every ratio ("x nodes1") is taken against."""

DEFAULT_MODES = (
    "slurm-nodes1",
    "slurm-multifactor",
    "afs-l",
    "afs-p",
    "max-min",
    "elastic-tiresias",
    "sidecar",
    "srtf",
    "srsf",
    "tiresias-l",
    "aryl-sjf",
    "slurm-gpus",
)
"""The fair baselines first, every policy the issue names (plus srsf and Aryl's SJF with skip,
the simulator's best here), the split-prone ``--gpus`` baseline last (an extra row)."""

DEFAULT_JOBS = 200
"""The issue's workload size (the docs' tables; ``--quick`` runs 30)."""


@dataclass(frozen=True)
class Item:
    """One job of the workload: its name, requested GPUs, elastic range ``lo..hi`` (equal for
    a rigid job), GPU-seconds of stand-in work at its requested size, and submit offset (s)."""

    name: str
    gpus: int
    lo: int
    hi: int
    work: float
    at: float


def workload(n: int, seed: int = SEED, burst: int = 25, gap_s: float = 25.0) -> list[Item]:
    """The issue's workload scaled to the lab: ``n`` jobs of 1/2/4 GPUs (weights 1:2:1), 55 %
    elastic (half to twice their request, at most one node), 5-30 s of work at their requested
    size, submitted in bursts of ``burst`` every ``gap_s`` seconds. The draw order is fixed:
    changing it changes every recorded run's jobs."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        gpus = rng.choice((1, 2, 2, 4))
        seconds = rng.uniform(5.0, 30.0)
        lo, hi = (max(1, gpus // 2), min(4, 2 * gpus)) if rng.random() < 0.55 else (gpus, gpus)
        items.append(
            Item(f"j{i:03d}", gpus, lo, hi, round(seconds * gpus, 1), (i // burst) * gap_s)
        )
    return items


def drain_bound(items: list[Item]) -> float:
    """Lower bound on the drain: the workload's GPU-seconds over the lab's GPUs (start-ups
    not counted)."""
    return sum(it.work for it in items) / LAB_GPUS


def p95(values: list[float]) -> float:
    """The 95th percentile as the benchmark has always taken it (nearest rank, no
    interpolation): the recorded rows and the prediction use this one."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def startup_mean(spec: str | None) -> float:
    """Mean seconds of the stand-in's ``--startup-s`` (``S`` or ``uniform:LO:HI``)."""
    if not spec:
        return 0.0
    if spec.startswith("uniform:"):
        lo, hi = (float(x) for x in spec.split(":")[1:3])
        return (lo + hi) / 2
    return float(spec)
