"""Simulated jobs per second: FIFO and SRTF on the largest Philly VC (6214e9) on 64 GPUs.

Reference: a minimal FIFO discrete-event loop written inline here (heap of completions, list
of free GPUs, no policy layer, no placement, no metrics). It is the floor cost of replaying the
trace in Python on this machine, so ``ratio = gpuplan / reference`` says what the engine's
generality (views, policies, placement, plans, sampling) costs, independent of machine speed.
Goal from the foundation issue: >= 2,000 simulated jobs/s for both policies.
"""

from __future__ import annotations

import heapq
import time
from collections import deque

from gpuplan.executors.simulator.run import simulate
from gpuplan.models import Cluster, JobSpec
from gpuplan.scenarios.mapping import map_rigid
from gpuplan.scenarios.philly import load_philly
from gpuplan.scenarios.traces import resolve_trace_path
from gpuplan.solver_core.registry import make_policy

VC = "6214e9"
GOAL_JOBS_PER_S = 2000.0


def reference_fifo(jobs: list[JobSpec], gpus: int) -> float:
    """Strict FIFO rigid replay with nothing but a heap; returns mean JCT (to keep it honest)."""
    events: list[tuple[float, int, int]] = []  # (time, kind 0=finish 1=arrive, index)
    for i, job in enumerate(jobs):
        heapq.heappush(events, (job.submit_time, 1, i))
    free, queue, jct = gpus, deque(), 0.0
    while events:
        now, kind, i = heapq.heappop(events)
        if kind == 0:
            free += jobs[i].requested_gpus
            jct += now - jobs[i].submit_time
        else:
            queue.append(i)
        while queue and jobs[queue[0]].requested_gpus <= free:
            j = queue.popleft()
            free -= jobs[j].requested_gpus
            heapq.heappush(events, (now + jobs[j].work / jobs[j].requested_gpus, 0, j))
    return jct / len(jobs)


def main() -> list[dict[str, float | str]]:
    rows = load_philly(resolve_trace_path("philly_pollux/philly.csv"), vc=VC)
    origin = rows[0].submit_time
    jobs = [j.model_copy(update={"submit_time": j.submit_time - origin}) for j in map_rigid(rows)]
    cluster = Cluster.uniform(16, 4)
    t0 = time.perf_counter()
    ref_jct = reference_fifo(jobs, cluster.total_gpus)
    ref_s = time.perf_counter() - t0
    ref_rate = len(jobs) / ref_s
    print(f"Philly VC {VC}: {len(jobs)} jobs on {cluster.total_gpus} GPUs (16 x 4)")
    print(f"  reference minimal FIFO loop: {ref_rate:,.0f} jobs/s ({ref_s:.2f} s)")
    out: list[dict[str, float | str]] = []
    for name in ("fifo", "srtf"):
        t0 = time.perf_counter()
        result, _, _ = simulate(cluster, jobs, make_policy(name), sample_interval_s=3600.0)
        wall = time.perf_counter() - t0
        rate = len(jobs) / wall
        finished = sum(1 for r in result.jobs if r.finish_time is not None)
        if name == "fifo":
            fifo_jct = sum(r.jct for r in result.jobs if r.jct is not None) / finished
            assert abs(fifo_jct - ref_jct) / ref_jct < 1e-6, "engine FIFO disagrees with reference"
        verdict = "meets" if rate >= GOAL_JOBS_PER_S else "MISSES"
        print(
            f"  gpuplan {name:5s}: {rate:,.0f} jobs/s ({wall:.2f} s, {result.events} events, "
            f"{finished} finished) = {rate / ref_rate:.3f} x reference; {verdict} the "
            f"{GOAL_JOBS_PER_S:,.0f} jobs/s goal"
        )
        out.append({"policy": name, "jobs_per_s": rate, "ratio_to_reference": rate / ref_rate})
    return out


if __name__ == "__main__":
    main()
