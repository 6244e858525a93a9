"""CLI start-up: how long a fresh ``gpuplan`` process takes for the small commands.

``python -m tests.bench.cli_startup`` runs each case in a new interpreter (``--repeat`` times,
default 5) and prints the median wall time, the median user+sys CPU time of the child (the
figure that survives a loaded machine better than wall time) and both as a ratio to a bare
``python -c pass`` measured in the same run. Cases (issue 28 item 4, issue 27's acceptance):

* ``gpuplan scenarios`` and ``gpuplan policies`` (goal: <= 0.3 s);
* ``make_policy('fifo')`` from a fresh interpreter;
* ``gpuplan simulate`` of the Tiresias 60-job trace on 16 x 4 GPUs (goal: <= 0.5 s);
* preparing Pollux workload-1 (rigid mapping): once with ``GPUPLAN_NO_CACHE=1`` (every
  throughput model fitted) and once from a warm fit cache (goal: <= 0.3 s), the cache in a
  private temporary ``XDG_CACHE_HOME``.

Each case runs once untimed first (it writes the bytecode caches: the children run without
``PYTHONDONTWRITEBYTECODE``, as an installed gpuplan would, since compiling ~250 modules from
source on every start would be measured otherwise). The trace cases are skipped when the shared
traces are missing. No assertion: the numbers go to docs/performance.md.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tests.conftest import traces_dir

TIRESIAS_60 = """\
name: tiresias-60
cluster: {nodes: 16, gpus_per_node: 4}
workload: {source: tiresias, path: tiresias/60_job.csv}
"""
POLLUX_1 = """\
name: pollux-1
cluster: {nodes: 16, gpus_per_node: 4, gpu_type: t4}
workload: {source: pollux, path: pollux/workloads/workload-1.csv, mapping: rigid}
"""


def _once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, user+sys CPU s) of one child process; a failure stops the bench loudly."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _median(argv: list[str], env: dict[str, str], repeat: int) -> tuple[float, float]:
    runs = [_once(argv, env) for _ in range(repeat)]
    return (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))


def main(argv: Sequence[str] = ()) -> None:
    """Print one row per case: median wall, median CPU, ratios to a bare interpreter."""
    args = list(argv)
    repeat = int(args[args.index("--repeat") + 1]) if "--repeat" in args else 5
    py = sys.executable
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(prefix="gpuplan-bench-") as tmp:
        cache_env = {**env, "XDG_CACHE_HOME": str(Path(tmp) / "cache")}
        nocache_env = {**env, "GPUPLAN_NO_CACHE": "1"}
        scenario = Path(tmp) / "tiresias60.scenario.yaml"
        scenario.write_text(TIRESIAS_60)
        pollux = Path(tmp) / "pollux1.scenario.yaml"
        pollux.write_text(POLLUX_1)
        prepare = [py, "-c", f"from gpuplan.api import prepare; prepare({str(pollux)!r})"]
        cases: list[tuple[str, list[str], dict[str, str]]] = [
            ("python -c pass (reference)", [py, "-c", "pass"], env),
            ("gpuplan scenarios", [py, "-m", "gpuplan", "scenarios"], env),
            ("gpuplan policies", [py, "-m", "gpuplan", "policies"], env),
            (
                "make_policy('fifo')",
                [
                    py,
                    "-c",
                    "from gpuplan.solver_core.registry import make_policy; make_policy('fifo')",
                ],
                env,
            ),
        ]
        if traces_dir() is not None:
            cases += [
                (
                    "gpuplan simulate tiresias 60 jobs, fifo",
                    [
                        py,
                        "-m",
                        "gpuplan",
                        "simulate",
                        "--scenario",
                        str(scenario),
                        "--policy",
                        "fifo",
                    ],
                    env,
                ),
                ("prepare pollux workload-1, no cache", prepare, nocache_env),
                ("prepare pollux workload-1, cached fits", prepare, cache_env),
            ]
        else:
            print("trace cases skipped: no shared traces")
        print(
            f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, median of "
            f"{repeat} fresh processes"
        )
        print("| case | wall s | CPU s (user+sys) | wall / bare | CPU / bare |")
        print("|---|---:|---:|---:|---:|")
        bare = (1.0, 1.0)
        for name, cmd, case_env in cases:
            _once(cmd, case_env)  # bytecode caches written, the fit cache warmed
            wall, cpu = _median(cmd, case_env, repeat)
            if cmd[1:] == ["-c", "pass"]:
                bare = (wall, cpu)
            print(
                f"| {name} | {wall:.3f} | {cpu:.3f} | {wall / bare[0]:.1f} "
                f"| {cpu / max(bare[1], 1e-3):.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
