"""Per-run CPU seconds and result hashes of single AFS-reproduction runs (issue 13).

``python -m tests.bench.afs_runs --cases philly-103959:themis:0,philly-b436b2:afs-l:0
[--save FILE | --check FILE]`` runs each case (scenario, policy, seed: one run of
``tests.bench.afs_vcs``' sweep) one after another in this process and prints its CPU seconds
(``time.process_time``, so a shared machine's load does not count), wall seconds and the
SHA-256 of its full ``RunResult`` dump (timing fields excluded, as in ``tests.bench.fingerprint``).
``--save`` writes the hashes and CPU figures, ``--check`` compares the hashes with a saved file
and prints "N of N equal" (exit 1 on a difference) plus the CPU ratio per case. Run ``--save``
on the parent commit and ``--check`` on the change. ``--all-vcs POLICIES`` expands to every
Table 3 VC for those policies (seed from ``--seed``, default 0).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from gpuplan.api import prepare, run

from .afs_vcs import TRACES
from .fingerprint import digest


def run_case(scenario: str, policy: str, seed: int) -> tuple[str, float, float]:
    """Simulate one case; return (digest, CPU seconds, wall seconds) of the run alone."""
    prepared = prepare(scenario, seed=seed)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = run(prepared, policy)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return digest(result), cpu, wall


def parse_cases(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """The (scenario, policy, seed) triples the command line names."""
    out: list[tuple[str, str, int]] = []
    for item in filter(None, (args.cases or "").split(",")):
        scenario, policy, seed = item.split(":")
        out.append((scenario, policy, int(seed)))
    for policy in filter(None, (args.all_vcs or "").split(",")):
        out += [(f"philly-{vc}", policy, args.seed) for vc in TRACES.values()]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", default="", help="scenario:policy:seed,...")
    parser.add_argument("--all-vcs", default="", help="policies to run on every Table 3 VC")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", default=None)
    parser.add_argument("--check", default=None)
    args = parser.parse_args(argv)
    saved: dict[str, dict] = {}
    if args.check:
        with open(args.check, encoding="utf-8") as fh:
            saved = json.load(fh)
    out: dict[str, dict] = {}
    differ: list[str] = []
    for scenario, policy, seed in parse_cases(args):
        key = f"{scenario}/{policy}/{seed}"
        h, cpu, wall = run_case(scenario, policy, seed)
        out[key] = {"hash": h, "cpu_s": cpu, "wall_s": wall}
        line = f"{key}: cpu {cpu:.2f} s, wall {wall:.2f} s, {h[:12]}"
        if key in saved:
            same = saved[key]["hash"] == h
            if not same:
                differ.append(key)
            line += f"  {'equal' if same else 'DIFFERS'}, cpu {cpu / saved[key]['cpu_s']:.2f}x"
        print(line, flush=True)
        if args.save:  # after every case, so a long list can be checked part-way
            with open(args.save, "w", encoding="utf-8") as fh:
                json.dump(out, fh, indent=1, sort_keys=True)
    if args.check:
        common = [k for k in out if k in saved]
        print(f"{len(common) - len(differ)} of {len(common)} equal")
        for k in differ:
            print(f"  differs: {k}")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
