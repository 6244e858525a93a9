"""How far each online policy is from the offline optimum (``offline-optimal``).

``python -m tests.bench.optimality [--quick] [--instances N] [--out DIR]``: N seeded small
instances (8 jobs on 2 x 4 GPUs, arrivals and durations on a 60 s grid), rigid and elastic.
Every policy that applies is simulated without overheads; ``offline-optimal`` solves each
instance (the exact continuous branch and bound with its default LP budget; on a rigid
instance it does not close, also the slotted CP-SAT fallback with ``--work-s``). Per policy:
the average relative gap of its average JCT to the offline schedule's and to the proven lower
bound. Writes
``optimality.md``-ready tables to stdout and, with ``--out``, a PNG bar chart
(``optimality.png``). ``--workers N`` spreads the instances over N processes (same numbers).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from statistics import mean

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import Cluster, Elasticity, JobSpec, Overheads, ThroughputProfile
from gpuplan.solver_core.policies.baselines.offline_optimal import OfflineOptimal, OfflineParams
from gpuplan.solver_core.registry import make_policy

SLOT_S = 60.0
NO_OVERHEADS = Overheads(start_s=0, restart_s=0, sidecar_s=0, stop_free_s=0, migrate_s=0)
RIGID_POLICIES = [
    "fifo",
    "fifo-backfill",
    "sjf",
    "srtf",
    "srsf",
    "tiresias-l",
    "themis",
    "max-min",
    "afs-l",
    "afs-p",
    "optimus",
]
ELASTIC_POLICIES = [
    "fifo",
    "srtf",
    "srsf",
    "tiresias-l",
    "themis",
    "max-min",
    "afs-l",
    "afs-p",
    "optimus",
    "srtf-e",
    "srsf-e",
    "elastic-tiresias",
    "edl-elastic",
]
CURVES = [
    {1: 1.0, 2: 1.9, 4: 3.5, 8: 6.0},  # scales well
    {1: 1.0, 2: 1.7, 4: 2.6, 8: 3.2},  # medium
    {1: 1.0, 2: 1.4, 4: 1.6, 8: 1.7},  # saturates early
]


def small_instance(
    seed: int, elastic: bool, jobs: int = 8, nodes: int = 2, gpus_per_node: int = 4
) -> tuple[Cluster, list[JobSpec]]:
    """A seeded instance on the slot grid: arrivals in [0, 6] slots, durations 1-5 slots at
    the requested count (1, 2 or 4 GPUs); elastic jobs may run on 1, 2, 4 or 8 GPUs with one
    of :data:`CURVES`."""
    rng = random.Random(seed * 2 + int(elastic))
    out = []
    for i in range(jobs):
        kw: dict[str, object] = {
            "id": f"j{i}",
            "submit_time": SLOT_S * rng.randint(0, 6),
            "requested_gpus": rng.choice([1, 1, 2, 4]),
            "duration": SLOT_S * rng.randint(1, 5),
        }
        if elastic:
            kw["elasticity"] = Elasticity(min_gpus=1, max_gpus=8, allowed=(1, 2, 4, 8))
            kw["throughput"] = ThroughputProfile(points=rng.choice(CURVES))
        out.append(JobSpec(**kw))  # type: ignore[arg-type]
    return Cluster.uniform(nodes, gpus_per_node), out


def avg_jct(cluster: Cluster, jobs: list[JobSpec], policy: object) -> float:
    result, _, _ = simulate(cluster, jobs, policy, overheads=NO_OVERHEADS)  # type: ignore[arg-type]
    jcts = [r.jct for r in result.jobs]
    if any(j is None for j in jcts):
        return float("inf")
    return mean(jcts)  # type: ignore[arg-type]


NOISE = 1e-5
"""Relative JCT difference below which a policy counts as equal to the offline schedule (the
elastic schedule does 1e-6 more work per job than the LP optimum, see offline_elastic)."""


def instance_row(seed: int, kind: str, work_s: float) -> dict[str, float]:
    """Every policy's average JCT on one instance, the offline bound and its solve's figures."""
    policies = RIGID_POLICIES if kind == "rigid" else ELASTIC_POLICIES
    cluster, jobs = small_instance(seed, kind == "elastic")
    offline = OfflineOptimal(OfflineParams(slot_s=SLOT_S, work_s=work_s), seed)
    t0 = time.perf_counter()
    row = {"offline": avg_jct(cluster, jobs, offline)}
    row["offline_wall_s"] = time.perf_counter() - t0
    assert offline.schedule is not None
    row["lower"] = offline.schedule.lower_bound_s
    assert offline.bound is not None
    row["optimal"] = float(offline.bound.status == "optimal")
    row["slotted"] = float(offline.bound.method == "slotted")
    row["lps"] = float(getattr(offline.schedule, "nodes", 0))
    for p in policies:
        row[p] = avg_jct(cluster, jobs, make_policy(p, seed=seed))
    return row


def run(
    instances: int,
    work_s: float,
    workers: int = 1,
    kinds: tuple[str, ...] = ("rigid", "elastic"),
    log: Path | None = None,
    first: int = 0,
) -> dict[str, dict[str, object]]:
    """Rows of every kind; ``log``: each row is also appended there as it completes (one
    JSON object a line with its kind and seed), so a long run can be read before it ends."""
    out: dict[str, dict[str, object]] = {}
    for kind in kinds:
        policies = RIGID_POLICIES if kind == "rigid" else ELASTIC_POLICIES
        t0 = time.perf_counter()
        one = partial(instance_row, kind=kind, work_s=work_s)
        rows = []
        with ProcessPoolExecutor(max(1, workers)) as pool:
            seeds = range(first, first + instances)
            for seed, row in zip(seeds, pool.map(one, seeds), strict=True):
                rows.append(row)
                if log is not None:
                    with log.open("a") as f:
                        f.write(json.dumps({"kind": kind, "seed": seed, **row}) + "\n")
        out[kind] = {"rows": rows, "policies": policies, "wall_s": time.perf_counter() - t0}
    return out


def from_log(path: Path) -> dict[str, dict[str, object]]:
    """The rows of a ``--log`` file (possibly of an unfinished or split run), in seed order,
    one per seed (split runs may overlap; their rows are the same)."""
    by_kind: dict[str, list[dict[str, float]]] = {}
    seen: set[tuple[str, int]] = set()
    for line in path.read_text().splitlines():
        row = json.loads(line)
        kind = row.pop("kind")
        if (kind, row["seed"]) not in seen:
            seen.add((kind, row["seed"]))
            by_kind.setdefault(kind, []).append(row)
    out: dict[str, dict[str, object]] = {}
    for kind in ("rigid", "elastic"):
        if kind in by_kind:
            rows = sorted(by_kind[kind], key=lambda r: r["seed"])
            out[kind] = {
                "rows": rows,
                "wall_s": sum(r["offline_wall_s"] for r in rows),
                # the heading's time: the offline solves (+ replay) summed
                "policies": RIGID_POLICIES if kind == "rigid" else ELASTIC_POLICIES,
            }
    return out


def summary(data: dict[str, dict[str, object]]) -> str:
    lines = []
    for kind, d in data.items():
        rows: list[dict[str, float]] = d["rows"]  # type: ignore[assignment]
        n = len(rows)
        proven = [(r["offline"] - r["lower"]) / r["lower"] for r in rows]
        solved = sum(r["optimal"] for r in rows)
        if kind == "rigid" and not any(r["lps"] for r in rows):  # a log from before rigid
            what = f"slotted model proven optimal on {solved:.0f}/{n}"  # jobs went continuous
        else:
            lps = sorted(r["lps"] for r in rows)
            secs = sorted(r["offline_wall_s"] for r in rows)
            what = (
                f"branch and bound closed (proven continuous optimum) on {solved:.0f}/{n}; "
                f"LPs per instance median {lps[n // 2]:.0f}, max {lps[-1]:.0f}; offline "
                f"solve + replay median {secs[n // 2]:.1f} s, max {secs[-1]:.1f} s"
            )
            if kind == "rigid":
                what += (
                    f"; slotted fallback's schedule kept on "
                    f"{sum(r.get('slotted', 0.0) for r in rows):.0f}"
                )
        lines += [
            f"### {kind} ({n} instances, {d['wall_s']:.0f} s)",
            "",
            f"offline-optimal: {what}; proven gap to the continuous optimum mean "
            f"{100 * mean(proven):.3g} %, max {100 * max(proven):.3g} %",
            "",
            "| policy | gap to offline-optimal (mean) | max | instances better than "
            "offline | gap to best known (mean) | gap to lower bound (mean) |",
            "|---|---|---|---|---|---|",
        ]
        names = list(d["policies"])  # type: ignore[call-overload]
        for p in ["offline", *names]:
            gaps = [(r[p] - r["offline"]) / r["offline"] for r in rows]
            known = [
                (r[p] - min(r[q] for q in ["offline", *names]))
                / min(r[q] for q in ["offline", *names])
                for r in rows
            ]
            lower = [(r[p] - r["lower"]) / r["lower"] for r in rows]
            better = sum(1 for g in gaps if g < -NOISE)
            lines.append(
                f"| {'offline-optimal' if p == 'offline' else p} | "
                f"{100 * mean(gaps):.1f} % | {100 * max(gaps):.1f} % | {better} | "
                f"{100 * mean(known):.1f} % | {100 * mean(lower):.1f} % |"
            )
        lines.append("")
    return "\n".join(lines)


def plot(data: dict[str, dict[str, object]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(data), figsize=(6 * len(data), 4.5), squeeze=False)
    for ax, (kind, d) in zip(axes[0], data.items(), strict=True):
        rows: list[dict[str, float]] = d["rows"]  # type: ignore[assignment]
        names = list(d["policies"])  # type: ignore[call-overload]
        gaps = [100 * mean((r[p] - r["offline"]) / r["offline"] for r in rows) for p in names]
        low = [100 * mean((r[p] - r["lower"]) / r["lower"] for r in rows) for p in names]
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], gaps, 0.4, label="vs offline-optimal schedule")
        ax.bar([x + 0.2 for x in xs], low, 0.4, label="vs proven lower bound")
        ax.set_xticks(list(xs), names, rotation=45, ha="right")
        ax.set_ylabel("average JCT gap (%)")
        ax.set_title(f"{kind}: {len(rows)} instances, 8 jobs, 8 GPUs")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.optimality")
    ap.add_argument("--quick", action="store_true", help="10 instances of each kind")
    ap.add_argument("--instances", type=int, default=100)
    ap.add_argument(
        "--work-s", type=float, default=1.0, help="CP-SAT deterministic seconds per instance"
    )
    ap.add_argument("--out", type=Path, default=None, help="directory for the PNG")
    ap.add_argument("--workers", type=int, default=1, help="processes (same numbers)")
    ap.add_argument("--kinds", default="rigid,elastic", help="rigid, elastic or both")
    ap.add_argument(
        "--json",
        type=Path,
        action="append",
        default=[],
        help="with --out: also write the raw rows there (optimality-KIND.json); "
        "given a file instead, read rows from it rather than running that kind",
    )
    ap.add_argument("--first", type=int, default=0, help="first seed (a run can be split)")
    ap.add_argument(
        "--log",
        type=Path,
        default=None,
        help="append each instance's row to this JSON-lines file as it completes",
    )
    ap.add_argument(
        "--from-log",
        type=Path,
        default=None,
        help="print (and plot) the rows of a --log file instead of running",
    )
    args = ap.parse_args(argv)
    if args.from_log is not None:
        logged = from_log(args.from_log)
        print(summary(logged))
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            plot(logged, args.out / "optimality.png")
        return
    n = 10 if args.quick else args.instances
    loaded = {k: v for f in args.json if f.is_file() for k, v in json.loads(f.read_text()).items()}
    todo = tuple(k for k in args.kinds.split(",") if k not in loaded)
    data = {**loaded, **run(n, args.work_s, args.workers, todo, args.log, args.first)}
    data = {k: data[k] for k in ("rigid", "elastic") if k in data}
    print(summary(data))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        plot(data, args.out / "optimality.png")
        for kind in todo:
            (args.out / f"optimality-{kind}.json").write_text(json.dumps({kind: data[kind]}))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
