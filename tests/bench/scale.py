"""Scale: simulated jobs/s and peak RSS for FIFO and SRTF as the cluster and the trace grow.

Workload: seeded synthetic rigid jobs (:func:`~gpuplan.scenarios.synthetic.synthetic_jobs`,
Poisson arrivals, lognormal durations with mean 1 h, sizes 1/2/4/8 GPUs) on ``N x 8``-GPU
nodes, the arrival rate set so the offered load per GPU stays at ``LOAD`` at every size: only
the scale changes between rows, so jobs/s falling with size is per-event cost growing with it.

Each (size, policy) runs in its own child process, so ``ru_maxrss`` (peak RSS) is that run's
alone. The reference is the minimal strict-FIFO heap loop of :mod:`.sim_throughput`, measured
in the same run on the same jobs: ``ratio = gpuplan / reference`` is independent of the
machine's speed. The engine's FIFO must reproduce the reference's mean JCT (checked).
Rates are per CPU-second of the process (``time.process_time``), wall-clock rates beside them:
on a shared machine a run may get a small fraction of a core, which wall time hides.

``python -m tests.bench.scale [--quick] [--huge] [--profile]``: ``--quick`` runs 64 GPUs / 2k
jobs only; ``--huge`` adds 8,192 GPUs / 100k jobs (FIFO: ~30 CPU-s there on the 2-core
bench machine; SRTF about a CPU-minute since round 4, which reads only the jobs the view's
change set names; see docs/performance.md); ``--profile`` prints cProfile's top entries of
each run, timed in CPU seconds (what docs/performance.md keeps). ``--one GPUS JOBS POLICY``
is one child run.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import Cluster, JobSpec
from gpuplan.scenarios.mapping import map_rigid
from gpuplan.scenarios.synthetic import synthetic_jobs
from gpuplan.solver_core.registry import make_policy

from .sim_throughput import reference_fifo

GPUS_PER_NODE = 8
SIZE_MIX = {1: 0.5, 2: 0.2, 4: 0.2, 8: 0.1}
MEAN_DURATION_S = 3600.0
LOAD = 0.9
SEED = 13
POLICIES = ("fifo", "srtf")
SIZES = [(64, 2_000), (1_024, 20_000)]
HUGE = (8_192, 100_000)
GOALS = {("fifo", 1_024): 5_000.0, ("srtf", 1_024): 2_000.0}
"""Issue 13's jobs/s goals at 1,024 GPUs / 20k jobs."""


def workload(gpus: int, n: int, seed: int = SEED) -> list[JobSpec]:
    """``n`` rigid jobs offering ``LOAD`` x ``gpus`` GPU-seconds per second."""
    mean_size = sum(s * w for s, w in SIZE_MIX.items()) / sum(SIZE_MIX.values())
    rate_per_h = LOAD * gpus * 3600.0 / (MEAN_DURATION_S * mean_size)
    return map_rigid(synthetic_jobs(n, rate_per_h, SIZE_MIX, MEAN_DURATION_S, seed))


def run_one(gpus: int, n: int, policy: str, profile: bool) -> dict[str, float | str]:
    """One run in this process (the child's entry point)."""
    jobs = workload(gpus, n)
    cluster = Cluster.uniform(gpus // GPUS_PER_NODE, GPUS_PER_NODE)
    t0, c0 = time.perf_counter(), time.process_time()
    ref_jct = reference_fifo(jobs, gpus)
    ref_rate = n / (time.perf_counter() - t0)
    ref_cpu_rate = n / max(time.process_time() - c0, 1e-9)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile(time.process_time)  # CPU time: the machine is shared
        profiler.enable()
    chosen = make_policy(policy)  # outside the timing: the first call imports every policy
    t0, c0 = time.perf_counter(), time.process_time()
    result, engine, _ = simulate(cluster, jobs, chosen, sample_interval_s=3600.0)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(24)
    done = [r.jct for r in result.jobs if r.jct is not None]
    if policy == "fifo" and len(done) == n:
        jct = sum(done) / n
        assert abs(jct - ref_jct) / ref_jct < 1e-6, f"FIFO mean JCT {jct} != reference {ref_jct}"
    ms = sorted(engine.decision_ms)
    return {
        "gpus": gpus,
        "jobs": n,
        "policy": policy,
        "wall_s": wall,
        "jobs_per_s": n / wall,
        "reference_jobs_per_s": ref_rate,
        "cpu_s": cpu,
        "jobs_per_cpu_s": n / cpu,
        "reference_jobs_per_cpu_s": ref_cpu_rate,
        "events": result.events,
        "finished": len(done),
        "decision_p50_ms": statistics.median(ms),
        "decision_p99_ms": ms[int(0.99 * (len(ms) - 1))],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }


def measure(gpus: int, n: int, policy: str, profile: bool) -> dict[str, float | str]:
    """Run :func:`run_one` in a child process so its peak RSS is its own."""
    cmd = [sys.executable, "-m", "tests.bench.scale", "--one", str(gpus), str(n), policy]
    if profile:
        cmd.append("--profile")
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> list[dict[str, float | str]]:
    if "--one" in argv:
        i = argv.index("--one")
        row = run_one(int(argv[i + 1]), int(argv[i + 2]), argv[i + 3], "--profile" in argv)
        print(json.dumps(row))
        return [row]
    sizes = SIZES[:1] if "--quick" in argv else list(SIZES)
    if "--huge" in argv and "--quick" not in argv:
        sizes.append(HUGE)
    rows = []
    base: dict[str, float] = {}
    print(f"synthetic rigid jobs, load {LOAD} per GPU, {GPUS_PER_NODE}-GPU nodes, seed {SEED}")
    for gpus, n in sizes:
        for policy in POLICIES:
            row = measure(gpus, n, policy, "--profile" in argv)
            rate, ref = float(row["jobs_per_cpu_s"]), float(row["reference_jobs_per_cpu_s"])
            base.setdefault(policy, rate)
            goal = GOALS.get((policy, gpus))
            verdict = (
                "" if goal is None else f"; goal {goal:,.0f}: {'met' if rate >= goal else 'MISSED'}"
            )
            print(
                f"  {gpus:>5} GPUs {n:>7,} jobs {policy:5s}: {rate:>7,.0f} jobs/CPU-s "
                f"({row['cpu_s']:.1f} CPU-s, {float(row['jobs_per_s']):,.0f} jobs/s over "
                f"{row['wall_s']:.1f} s wall, {row['events']:,} events, {row['finished']:,} "
                f"finished) = {rate / ref:.3f} x reference ({ref:,.0f} jobs/s), "
                f"{rate / base[policy]:.2f} x its smallest size; decision p50 "
                f"{row['decision_p50_ms']:.3f} ms p99 {row['decision_p99_ms']:.3f} ms; "
                f"peak RSS {row['peak_rss_mib']:,.0f} MiB{verdict}",
                flush=True,
            )
            rows.append(row)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
