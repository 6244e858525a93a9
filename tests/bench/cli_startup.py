"""CLI start-up: how long a fresh ``gpuplan`` process takes for the small commands.

``python -m tests.bench.cli_startup`` runs each case in a new interpreter (``--repeat`` times,
default 5) and prints the median wall time, the median user+sys CPU time of the child (the
figure that survives a loaded machine better than wall time) and both as a ratio to a bare
``python -c pass`` measured in the same run. Cases (issue 28 item 4, issue 27's acceptance):

* ``gpuplan scenarios`` and ``gpuplan policies`` (goal: <= 0.3 s);
* ``gpuplan simulate`` of the embedded 8-job ``h200-colocation`` (needs no shared trace);
* ``make_policy('fifo')`` from a fresh interpreter;
* ``gpuplan simulate`` of the Tiresias 60-job trace on 16 x 4 GPUs (goal: <= 0.5 s);
* preparing Pollux workload-1 (rigid mapping): once with ``GPUPLAN_NO_CACHE=1`` (every
  throughput model fitted) and once from a warm fit cache (goal: <= 0.3 s), the cache in a
  private temporary ``XDG_CACHE_HOME``.

``--baseline PYTHON`` also runs every case with another interpreter (another checkout's
venv, e.g. main's ``.venv/bin/python``), alternating with this one run by run so both see the
same load, and adds its medians and the ratio baseline / this to each row.

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


NEUTRAL_CWD = "/"
"""Children start here, not in a checkout: ``python -m gpuplan`` would otherwise import the
``gpuplan/`` folder of the current directory, whatever the interpreter's install says."""


def _once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, user+sys CPU s) of one child process; a failure stops the bench loudly."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        argv,
        env=env,
        cwd=NEUTRAL_CWD,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
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


def _paired(
    argv: list[str], base: list[str], env: dict[str, str], repeat: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """Medians (wall, CPU) of ``argv`` and of ``base`` (the same case with the baseline's
    interpreter), run alternately so that a change of load hits both alike."""
    runs, base_runs = [], []
    for _ in range(repeat):
        runs.append(_once(argv, env))
        base_runs.append(_once(base, env))

    def med(rs: list[tuple[float, float]]) -> tuple[float, float]:
        return (statistics.median(w for w, _ in rs), statistics.median(c for _, c in rs))

    return med(runs), med(base_runs)


def main(argv: Sequence[str] = ()) -> None:
    """Print one row per case: median wall, median CPU, ratios to a bare interpreter."""
    args = list(argv)
    repeat = int(args[args.index("--repeat") + 1]) if "--repeat" in args else 5
    baseline = args[args.index("--baseline") + 1] if "--baseline" in args else None
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
        h200 = ["simulate", "--scenario", "h200-colocation", "--policy", "fifo"]
        cases: list[tuple[str, list[str], dict[str, str]]] = [
            ("python -c pass (reference)", [py, "-c", "pass"], env),
            ("gpuplan scenarios", [py, "-m", "gpuplan", "scenarios"], env),
            ("gpuplan policies", [py, "-m", "gpuplan", "policies"], env),
            (
                "gpuplan simulate h200-colocation (8 jobs), fifo",
                [py, "-m", "gpuplan", *h200],
                env,
            ),
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
        head = "| case | wall s | CPU s (user+sys) | wall / bare | CPU / bare |"
        rule = "|---|---:|---:|---:|---:|"
        if baseline:
            head += " baseline wall s | baseline CPU s | CPU baseline / this |"
            rule += "---:|---:|---:|"
        print(head)
        print(rule)
        bare = (1.0, 1.0)
        for name, cmd, case_env in cases:
            base_cmd = [baseline, *cmd[1:]] if baseline else None
            _once(cmd, case_env)  # bytecode caches written, the fit cache warmed
            if base_cmd is None:
                (wall, cpu), base = _median(cmd, case_env, repeat), None
            else:
                _once(base_cmd, case_env)
                (wall, cpu), base = _paired(cmd, base_cmd, case_env, repeat)
            if cmd[1:] == ["-c", "pass"]:
                bare = (wall, cpu)
            row = (
                f"| {name} | {wall:.3f} | {cpu:.3f} | {wall / bare[0]:.1f} "
                f"| {cpu / max(bare[1], 1e-3):.1f} |"
            )
            if base is not None:
                row += f" {base[0]:.3f} | {base[1]:.3f} | {base[1] / max(cpu, 1e-3):.1f}x |"
            print(row, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
