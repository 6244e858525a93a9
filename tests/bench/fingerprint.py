"""Result fingerprints: prove an engine/policy speed-up changed no result.

Each case (a scenario or a seeded synthetic workload under one policy) is simulated and its
full :class:`~gpuplan.models.RunResult` dump (every job record, sample and counter; the timing
fields ``decision_ms``, ``solver_ms`` and ``wall_s`` left out, as they are wall-clock) hashed
with SHA-256. ``--save FILE`` writes the hashes, ``--check FILE`` recomputes them and prints
"N of N equal" (exit 1 on a difference, naming the cases). Run it on the parent commit with
``--save`` and on the change with ``--check``: how docs/performance.md's "bit-identical"
claims are made. ``--quick`` runs a smaller set (the synthetic and Aryl cases only).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

from gpuplan.api import prepare, run
from gpuplan.executors.simulator.run import simulate
from gpuplan.models import Cluster, RunResult
from gpuplan.solver_core.registry import make_policy

from .scale import GPUS_PER_NODE, workload

PHILLY_POLICIES = (
    "fifo",
    "fifo-backfill",
    "srtf",
    "srsf",
    "tiresias-l",
    "afs-l",
    "afs-p",
    "max-min",
    "themis",
    "optimus",
    "srtf-e",
    "srsf-e",
    "elastic-tiresias",
    "sjf",
    "k8s-default",
    "afs-l-packed",
    "srtf-reuse",
)
ARYL_POLICIES = ("aryl-sjf", "aryl-loaning", "aryl-scaling", "aryl")
SYNTHETIC = ((256, 3_000), (1_024, 6_000))
SYNTHETIC_POLICIES = ("fifo", "fifo-backfill", "srtf", "srsf", "tiresias-l", "afs-l")
TIMING = {"decision_ms", "solver_ms", "wall_s"}
REPORTED = {"usage_overall_raw", "usage_bound", "heterogeneous_jobs", "mixed_jobs"}
"""Loaning metrics derived from a run after the fact (issue 29): left out of the digest so a
baseline taken before they existed still compares; they change no simulated result."""


def digest(result: RunResult) -> str:
    """SHA-256 of the result's JSON dump without its wall-clock fields (nor the after-the-fact
    loaning fields of ``REPORTED``)."""
    data = result.model_dump(mode="json", exclude=TIMING)
    if data.get("loaning"):
        data["loaning"] = {k: v for k, v in data["loaning"].items() if k not in REPORTED}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def cases(quick: bool) -> list[tuple[str, str]]:
    """(workload, policy) pairs; a workload is a scenario name or ``synthetic-GPUS-JOBS``."""
    out = [(f"synthetic-{g}-{n}", p) for g, n in SYNTHETIC for p in SYNTHETIC_POLICIES]
    out += [("aryl-testbed", p) for p in ARYL_POLICIES]
    if not quick:
        out += [("philly-default", p) for p in PHILLY_POLICIES]
    return out


def run_case(workload_name: str, policy: str) -> str:
    """Simulate one case and return its digest."""
    if workload_name.startswith("synthetic-"):
        _, gpus, n = workload_name.split("-")
        jobs = workload(int(gpus), int(n))
        cluster = Cluster.uniform(int(gpus) // GPUS_PER_NODE, GPUS_PER_NODE)
        result, _, _ = simulate(cluster, jobs, make_policy(policy), sample_interval_s=3600.0)
        return digest(result)
    return digest(run(prepare(workload_name), policy))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.fingerprint",
        description="Result fingerprints of the simulated cases (refactors keep behaviour: "
        "--save before, --check after).",
    )
    parser.add_argument("--quick", action="store_true", help="the small cases only")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--save", metavar="FILE", help="write the fingerprints to FILE")
    what.add_argument("--check", metavar="FILE", help="compare with FILE; exit 1 if any differ")
    args = parser.parse_args(argv)
    saved = None
    if args.check:  # read first: a missing file is refused before minutes of runs
        with open(args.check, encoding="utf-8") as fh:
            saved = json.load(fh)
    hashes = {f"{w}/{p}": run_case(w, p) for w, p in cases(args.quick)}
    if args.save:
        with open(args.save, "w", encoding="utf-8") as fh:
            json.dump(hashes, fh, indent=1, sort_keys=True)
        print(f"saved {len(hashes)} fingerprints to {args.save}")
        return 0
    if saved is not None:
        common = [k for k in hashes if k in saved]
        differ = [k for k in common if hashes[k] != saved[k]]
        print(f"{len(common) - len(differ)} of {len(common)} equal")
        for k in differ:
            print(f"  differs: {k}")
        return 1 if differ else 0
    for k, v in hashes.items():
        print(k, v)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
