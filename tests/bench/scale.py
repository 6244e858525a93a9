"""Scale under load: simulated jobs per CPU-second and peak RSS as the cluster and trace grow.

Two workloads, both seeded synthetic jobs (:func:`~gpuplan.scenarios.synthetic.synthetic_jobs`:
Poisson arrivals, lognormal durations with mean 1 h, sizes 1/2/4/8 GPUs weighted .5/.2/.2/.1)
on ``N x 8``-GPU nodes, the arrival rate set so the offered load per GPU is the same at every
size: only the scale changes between rows of one load, so a rate falling with size is
per-decision cost growing with it.

* :func:`workload` (issue 13, and the fingerprints of :mod:`.fingerprint`): rigid jobs at
  load 0.9 (``LOAD``), linear profiles. Kept as it is: the fingerprints hash runs on it.
* :func:`overload_workload` (issue 28 item 2, what this bench measures): the same arrivals,
  sizes and durations at any offered load (``--loads``, default 0.9 and 1.5: at 1.5 the queue
  grows for as long as jobs arrive), mapped the AFS way
  (:func:`~gpuplan.scenarios.mapping.map_afs`, seed ``SEED``): each job trains a model of the
  AFS Table 4 zoo that scales to its size, is elastic from 1 GPU to that model's max useful
  GPUs (capped at the cluster), and takes its drawn duration at its requested size. Rigid
  policies run it at its requested size, elastic ones (AFS-L/P, Max-Min, Themis,
  Elastic-Tiresias) along its ladder: the same jobs for every policy at a size and load.

Each (size, load, policy) runs in its own child process, so ``ru_maxrss`` (peak RSS) is that
run's alone. The reference is the minimal strict-FIFO heap loop of :mod:`.sim_throughput` on
the same jobs in the same child: ``ratio = gpuplan / reference`` does not depend on the
machine's speed, and the engine's FIFO must reproduce the loop's mean JCT (checked, every
load). Rates are per CPU-second of the child (``time.process_time``), wall-clock rates beside
them: on a shared machine a run may get a small fraction of a core, which wall time hides.
Every row also gives its rate over the same policy's rate at the same load and the first size
measured, 2k jobs / 64 GPUs by default (issue 28's goal: >= 0.5 at 100k / 8,192 for each
policy at each load).

``--cpu-limit S`` bounds each child's simulation at S CPU-seconds (``RLIMIT_CPU``: the kernel
sends SIGXCPU, the child reports how many jobs had finished and at what simulated time, and a
hard limit 30 CPU-s later kills it if it cannot); such a row says "> S CPU-s" and is listed
as a miss, so one slow policy cannot block the bench. The default budget is 600 CPU-s.

``python -m tests.bench.scale [--quick] [--huge] [--loads 0.9,1.5] [--policies a,b]
[--sizes 64:2000,...] [--cpu-limit S] [--workers K] [--json FILE] [--profile]``: ``--quick``
runs 64 GPUs / 2k jobs at the first load only; ``--huge`` adds 8,192 GPUs / 100k jobs;
``--sizes`` replaces the sizes (``GPUS:JOBS``); ``--workers`` runs that many children at a
time (CPU-s rates stay per child); ``--profile`` prints cProfile's top entries of each run in
CPU time. ``--one GPUS JOBS POLICY [LOAD]`` is one child run (one JSON line).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import Cluster, JobSpec
from gpuplan.scenarios.mapping import map_afs, map_rigid
from gpuplan.scenarios.synthetic import synthetic_jobs
from gpuplan.scenarios.zoo import load_afs_zoo
from gpuplan.solver_core.registry import make_policy

from .sim_throughput import reference_fifo

GPUS_PER_NODE = 8
SIZE_MIX = {1: 0.5, 2: 0.2, 4: 0.2, 8: 0.1}
MEAN_DURATION_S = 3600.0
LOAD = 0.9
"""The offered load of :func:`workload` (issue 13's rows and the fingerprints)."""
LOADS = (0.9, 1.5)
SEED = 13
POLICIES = (
    "fifo",
    "fifo-backfill",
    "srtf",
    "srsf",
    "sjf",
    "tiresias-l",
    "afs-l",
    "afs-p",
    "max-min",
    "themis",
    "elastic-tiresias",
)
"""Issue 28 item 1's policies, in its order."""
SIZES = [(64, 2_000), (1_024, 20_000)]
HUGE = (8_192, 100_000)
BASE = SIZES[0]
"""The size every row's ratio is taken against by default (same policy, same load)."""
GOAL_RATIO = 0.5
"""Issue 28: jobs per CPU-s at 100k / 8,192 >= 0.5 x that at 2k / 64, each policy and load."""
GOALS = {("fifo", 1_024): 5_000.0, ("srtf", 1_024): 2_000.0}
"""Issue 13's jobs/s goals at 1,024 GPUs / 20k jobs (its load, 0.9)."""
HARD_LIMIT_MARGIN_S = 30
DEFAULT_CPU_LIMIT_S = 600.0
"""Each child's simulation budget unless ``--cpu-limit`` says otherwise (issue 28's ask)."""
REPO = Path(__file__).resolve().parents[2]
"""Where the children start, so ``-m tests.bench.scale`` resolves from any working directory."""


def _rate_per_h(gpus: int, load: float) -> float:
    """Arrivals per hour offering ``load`` x ``gpus`` GPU-seconds per second."""
    mean_size = sum(s * w for s, w in SIZE_MIX.items()) / sum(SIZE_MIX.values())
    return load * gpus * 3600.0 / (MEAN_DURATION_S * mean_size)


def workload(gpus: int, n: int, seed: int = SEED) -> list[JobSpec]:
    """``n`` rigid jobs offering ``LOAD`` x ``gpus`` GPU-seconds per second (issue 13)."""
    return map_rigid(synthetic_jobs(n, _rate_per_h(gpus, LOAD), SIZE_MIX, MEAN_DURATION_S, seed))


def overload_workload(gpus: int, n: int, load: float, seed: int = SEED) -> list[JobSpec]:
    """``n`` elastic AFS-zoo jobs offering ``load`` x ``gpus`` GPU-s per second at their request.

    Arrivals, sizes and durations are :func:`workload`'s draws at the new rate; the model, its
    profile and the ladder ``[1, min(model max, gpus)]`` come from :func:`map_afs`.
    """
    rows = synthetic_jobs(n, _rate_per_h(gpus, load), SIZE_MIX, MEAN_DURATION_S, seed)
    return map_afs(rows, load_afs_zoo(), seed, gpus)


class _RefJob(NamedTuple):
    """A job as :func:`reference_fifo` reads it: ``work / requested_gpus`` is its duration."""

    submit_time: float
    requested_gpus: int
    work: float


def _reference_jobs(jobs: Sequence[JobSpec]) -> list[Any]:
    """The jobs rigid at their request, with work in GPU-seconds (the loop's linear model)."""
    out = []
    for job in jobs:
        seconds = job.work / job.throughput.rate(job.requested_gpus)
        out.append(_RefJob(job.submit_time, job.requested_gpus, seconds * job.requested_gpus))
    return out


class _OverBudget(Exception):
    """Raised by the SIGXCPU handler: the child's CPU budget is spent."""


def run_one(
    gpus: int, n: int, policy: str, load: float, profile: bool, cpu_limit: float | None
) -> dict[str, Any]:
    """One run in this process (the child's entry point)."""
    jobs = overload_workload(gpus, n, load)
    cluster = Cluster.uniform(gpus // GPUS_PER_NODE, GPUS_PER_NODE)
    ref_jobs = _reference_jobs(jobs)
    t0, c0 = time.perf_counter(), time.process_time()
    ref_jct = reference_fifo(ref_jobs, gpus)
    ref_rate = n / max(time.perf_counter() - t0, 1e-9)
    ref_cpu_rate = n / max(time.process_time() - c0, 1e-9)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile(time.process_time)  # CPU time: the machine is shared
    chosen = make_policy(policy)  # outside the timing: the first call imports every policy
    seen = [0, 0.0]  # jobs finished, simulated time: what an over-budget row reports

    def progress(done: int, now: float) -> None:
        seen[0], seen[1] = done, now

    def over_budget(signum: int, frame: Any) -> None:
        raise _OverBudget

    if cpu_limit is not None:
        # RLIMIT_CPU counts the whole process: the budget starts now, rounded up to a second
        used = resource.getrusage(resource.RUSAGE_SELF)
        soft = math.ceil(used.ru_utime + used.ru_stime + cpu_limit)
        signal.signal(signal.SIGXCPU, over_budget)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + HARD_LIMIT_MARGIN_S))
    row: dict[str, Any] = {"gpus": gpus, "jobs": n, "policy": policy, "load": load}
    if profiler is not None:
        profiler.enable()
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        result, engine, _ = simulate(
            cluster, jobs, chosen, sample_interval_s=3600.0, progress=progress
        )
    except _OverBudget:
        result = engine = None
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(24)
    row.update(
        wall_s=wall,
        cpu_s=cpu,
        reference_jobs_per_s=ref_rate,
        reference_jobs_per_cpu_s=ref_cpu_rate,
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    )
    if result is None or engine is None:
        row.update(over_budget=True, finished=seen[0], sim_time_s=seen[1])
        return row
    done = [r.jct for r in result.jobs if r.jct is not None]
    if policy == "fifo" and len(done) == n:
        jct = sum(done) / n
        assert abs(jct - ref_jct) / ref_jct < 1e-6, f"FIFO mean JCT {jct} != reference {ref_jct}"
        row["fifo_matches_reference"] = True
    ms = sorted(engine.decision_ms)
    row.update(
        over_budget=False,
        finished=len(done),
        sim_time_s=seen[1],
        jobs_per_s=n / wall,
        jobs_per_cpu_s=n / cpu,
        events=result.events,
        mean_jct_s=sum(done) / len(done) if done else None,
        reference_mean_jct_s=ref_jct,
        decisions=len(ms),
        decision_p50_ms=statistics.median(ms) if ms else 0.0,
        decision_p99_ms=ms[int(0.99 * (len(ms) - 1))] if ms else 0.0,
    )
    return row


def measure(
    gpus: int, n: int, policy: str, load: float, profile: bool, cpu_limit: float | None
) -> dict[str, Any]:
    """Run :func:`run_one` in a child process so its peak RSS and CPU budget are its own."""
    cmd = [sys.executable, "-m", "tests.bench.scale", "--one", str(gpus), str(n), policy]
    cmd += [repr(load)]
    if cpu_limit is not None:
        cmd += ["--cpu-limit", repr(cpu_limit)]
    if profile:
        cmd.append("--profile")
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=REPO)
    lines = out.stdout.strip().splitlines()
    if out.returncode == 0 and lines:
        return json.loads(lines[-1])
    # killed (the hard CPU limit: stuck in native code past SIGXCPU) or failed
    return {
        "gpus": gpus,
        "jobs": n,
        "policy": policy,
        "load": load,
        "over_budget": cpu_limit is not None and out.returncode in (-signal.SIGKILL, -9),
        "failed": f"exit {out.returncode}",
        "finished": None,
    }


def _with_ratios(rows: list[dict[str, Any]], base_size: tuple[int, int]) -> None:
    """Each row's rate over its policy's rate at ``base_size`` and the same load (if measured)."""
    base = {
        (r["policy"], r["load"]): r["jobs_per_cpu_s"]
        for r in rows
        if (r["gpus"], r["jobs"]) == base_size and r.get("jobs_per_cpu_s")
    }
    for r in rows:
        b = base.get((r["policy"], r["load"]))
        r["ratio_to_base"] = r["jobs_per_cpu_s"] / b if b and r.get("jobs_per_cpu_s") else None


def misses(rows: list[dict[str, Any]]) -> list[str]:
    """Rows over budget or failed, and 100k / 8,192 rows below the ratio goal."""
    out = []
    for r in rows:
        where = f"{r['policy']} at load {r['load']} on {r['gpus']} GPUs / {r['jobs']:,} jobs"
        if r.get("failed"):
            out.append(f"{where}: {r['failed']}")
        elif r["over_budget"]:
            out.append(f"{where}: over the CPU budget, {r['finished']:,} jobs done")
        elif (r["gpus"], r["jobs"]) == HUGE and (r["ratio_to_base"] or 0.0) < GOAL_RATIO:
            ratio = r["ratio_to_base"]
            shown = "unknown (no base row)" if ratio is None else f"{ratio:.2f}"
            out.append(f"{where}: ratio {shown} < {GOAL_RATIO}")
    return out


def format_row(r: dict[str, Any], cpu_limit: float | None) -> str:
    """One printed line per row."""
    head = f"{r['policy']:>16} {r['load']:>4} {r['gpus']:>5} GPUs {r['jobs']:>7,} jobs:"
    if r.get("failed"):
        return f"{head} FAILED ({r['failed']})"
    rss = f"peak RSS {r['peak_rss_mib']:,.0f} MiB"
    if r["over_budget"]:
        return (
            f"{head} > {cpu_limit:g} CPU-s, {r['finished']:,} jobs done by simulated "
            f"{r['sim_time_s'] / 3600:,.1f} h ({r['wall_s']:.1f} s wall); {rss}"
        )
    rate, ref = r["jobs_per_cpu_s"], r["reference_jobs_per_cpu_s"]
    ratio = "-" if r.get("ratio_to_base") is None else f"{r['ratio_to_base']:.2f}"
    goal = GOALS.get((r["policy"], r["gpus"])) if r["load"] == LOAD else None
    verdict = "" if goal is None else f"; goal {goal:,.0f}: {'met' if rate >= goal else 'MISSED'}"
    return (
        f"{head} {rate:>7,.0f} jobs/CPU-s ({r['cpu_s']:.1f} CPU-s, {r['wall_s']:.1f} s wall), "
        f"{ratio} x its first size's rate, {rate / ref:.3f} x FIFO reference ({ref:,.0f}); "
        f"decision p50 {r['decision_p50_ms']:.3f} p99 {r['decision_p99_ms']:.3f} ms; "
        f"{r['finished']:,} finished; {rss}{verdict}"
    )


def _sizes(text: str) -> list[tuple[int, int]]:
    try:
        pairs = [tuple(int(x) for x in part.split(":")) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes are GPUS:JOBS,...; got {text!r}") from None
    if any(len(p) != 2 or min(p) < 1 or p[0] % GPUS_PER_NODE for p in pairs):
        raise argparse.ArgumentTypeError(f"sizes are GPUS:JOBS with GPUS a multiple of 8: {text!r}")
    return [(p[0], p[1]) for p in pairs]


def _loads(text: str) -> list[float]:
    try:
        loads = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"loads are numbers, comma-separated; got {text!r}"
        ) from None
    if not all(math.isfinite(x) and x > 0 for x in loads):
        raise argparse.ArgumentTypeError(f"loads must be finite and > 0: {text!r}")
    return loads


def _policies(text: str) -> list[str]:
    names = [x for x in text.split(",") if x]
    for name in names:
        try:
            make_policy(name)  # an unknown name fails here, before any child starts
        except Exception as e:  # InputError: argparse turns this into its one-line error
            raise argparse.ArgumentTypeError(str(e)) from None
    return names


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 GPUs / 2k jobs, first load")
    parser.add_argument("--huge", action="store_true", help="add 8,192 GPUs / 100k jobs")
    parser.add_argument("--loads", type=_loads, default=list(LOADS))
    parser.add_argument("--policies", type=_policies, default=list(POLICIES))
    parser.add_argument("--sizes", type=_sizes, default=None, help="GPUS:JOBS,...")
    parser.add_argument("--cpu-limit", type=float, default=DEFAULT_CPU_LIMIT_S, metavar="S")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--json", default=None, metavar="FILE", help="write the rows here")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--one", nargs="+", metavar="ARG", help="GPUS JOBS POLICY [LOAD]")
    args = parser.parse_args(argv)
    if args.cpu_limit is not None and not (math.isfinite(args.cpu_limit) and args.cpu_limit > 0):
        parser.error("--cpu-limit must be > 0")
    if args.one:
        gpus, n, policy = int(args.one[0]), int(args.one[1]), args.one[2]
        load = float(args.one[3]) if len(args.one) > 3 else LOAD
        row = run_one(gpus, n, policy, load, args.profile, args.cpu_limit)
        print(json.dumps(row), flush=True)
        return [row]
    sizes = list(args.sizes or SIZES)
    loads = args.loads
    if args.quick:
        sizes, loads = [BASE], loads[:1]
    elif args.huge and HUGE not in sizes:
        sizes.append(HUGE)
    limit = args.cpu_limit
    print(
        f"synthetic AFS-zoo elastic jobs, loads {', '.join(map(str, loads))} per GPU, "
        f"{GPUS_PER_NODE}-GPU nodes, seed {SEED}"
        + ("" if limit is None else f", {limit:g} CPU-s per run at most"),
        flush=True,
    )
    cases = [(g, n, p, ld) for g, n in sizes for ld in loads for p in args.policies]
    with ThreadPoolExecutor(max(1, args.workers)) as pool:
        futures = [pool.submit(measure, *c, args.profile, limit) for c in cases]
        rows = []
        for future in futures:
            rows.append(future.result())
            _with_ratios(rows, sizes[0])
            print(format_row(rows[-1], limit), flush=True)
    _with_ratios(rows, sizes[0])
    missed = misses(rows)
    print(f"{len(missed)} misses" + "".join(f"\n  {m}" for m in missed))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
