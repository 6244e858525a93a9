"""Submission -> first decision under ``gpuplan slurm-controller`` on the lab (issue 24, item 7).

``python -m tests.bench.arrival_latency [--jobs N] [--checks 0,0.25]``. For each
``--arrival-check`` value (0: no probe, the controller as before item 7) the controller runs
with its default settings otherwise (``--interval 2``, the lab's wake-up epilog, FIFO) and an
unprivileged user submits N one-GPU jobs of 2 s of work, one at a time with seeded gaps of
0.5-2 s (so submissions fall anywhere in the poll interval and every job finds a free GPU: its
first decision is its start). Reported per setting: median / p90 / max seconds from ``sbatch``
returning to the controller's journal row of the job (``first_seen``: discovery) and to the
journaled start intent (the first decision), and the controller's CPU seconds per minute.
No asserts: this reports (the mechanism's test is ``tests/slurm/test_controller_arrivals.py``).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gpuplan.executors.control.journal import Journal
from tests import slurm_fixtures as fx
from tests.labs.slurm.lab import SlurmLab

SEED = 24
PARTITION = "gpuplan"
PYTHON = "/usr/bin/python3"


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _submit(lab: SlurmLab, shared: Path, name: str) -> int:
    argv = [
        "sbatch",
        "--parsable",
        f"--partition={PARTITION}",
        "--nodes=1",
        "--gpus=1",
        "--comment=gpuplan:min=1,max=1,work=2",
        f"--job-name={name}",
        f"--output={shared}/{name}.out",
        str(shared / "run.sh"),
        PYTHON,
        str(shared / "standin.py"),
        "--job-id",
        name,
        "--work",
        "2",
        "--rate-per-gpu",
        "1",
        "--state-dir",
        str(shared),
        "--progress-interval",
        "0.5",
    ]
    proc = fx.as_user(fx.UNPRIVILEGED_USER, argv, lab.env)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    return int(proc.stdout.strip().split(";")[0])


def _stats(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return (
        f"median {statistics.median(ordered):.3f} s, p90 {p90:.3f} s, "
        f"max {ordered[-1]:.3f} s (n={len(ordered)})"
    )


def measure(lab: SlurmLab, jobs: int, check: float) -> dict[str, list[float] | float]:
    shared = fx.shared_job_dir("gpuplan-arrivals-")
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    argv = [
        sys.executable,
        "-m",
        "gpuplan",
        "slurm-controller",
        "--policy",
        "fifo",
        "--state-db",
        str(db),
        "--partition",
        PARTITION,
        "--wake-file",
        str(lab.wake_file),
        "--arrival-check",
        f"{check:g}",
    ]
    rng = random.Random(SEED)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            env={**os.environ, **lab.env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        heartbeat = db.with_name(db.name + ".heartbeat")
        t0 = time.monotonic()
        while not heartbeat.exists():
            if time.monotonic() - t0 > 300 or proc.poll() is not None:
                raise RuntimeError(f"controller did not come up: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        cpu0, wall0 = _cpu_s(proc.pid), time.monotonic()
        submitted: dict[int, float] = {}
        for k in range(jobs):
            time.sleep(rng.uniform(0.5, 2.0))
            sid = _submit(lab, shared, f"a{k:02d}")
            submitted[sid] = time.time()
        cli = lab.cli(timeout=30)
        t0 = time.monotonic()
        while True:
            states = {j.job_id: j for j in cli.jobs(list(submitted))}
            if all(s in states and states[s].finished for s in submitted):
                break
            if time.monotonic() - t0 > 600:
                raise RuntimeError("jobs did not finish within 600 s")
            time.sleep(0.5)
        cpu = (_cpu_s(proc.pid) - cpu0) / (time.monotonic() - wall0) * 60.0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    with Journal(db, writer=False) as journal:
        rows = journal.jobs()
        starts: dict[str, float] = {}
        for a in journal.actions():
            if a.kind == "start":
                starts.setdefault(a.engine_id, a.intended_at)
    seen = [rows[f"slurm-{s}"].first_seen - t for s, t in submitted.items()]
    decided = [starts[f"slurm-{s}"] - t for s, t in submitted.items() if f"slurm-{s}" in starts]
    if not os.environ.get("GPUPLAN_KEEP_TEST_DIRS"):
        shutil.rmtree(shared, ignore_errors=True)
    return {"seen": seen, "decided": decided, "cpu_s_per_min": cpu}


def main(argv: list[str]) -> None:
    jobs, checks = 24, [0.0, 0.25]
    for i, arg in enumerate(argv):
        if arg == "--jobs":
            jobs = int(argv[i + 1])
        if arg == "--checks":
            checks = [float(x) for x in argv[i + 1].split(",")]
    fx.ensure_user(fx.UNPRIVILEGED_USER)
    session = fx.lab_session()
    lab = next(session)
    try:
        for check in checks:
            got = measure(lab, jobs, check)
            print(
                f"--arrival-check {check:g}: submit -> discovered: {_stats(got['seen'])}; "  # type: ignore[arg-type]
                f"submit -> first decision (start intent): {_stats(got['decided'])}; "  # type: ignore[arg-type]
                f"controller CPU {got['cpu_s_per_min']:.2f} s/min",
                flush=True,
            )
    finally:
        with contextlib.suppress(StopIteration):
            next(session)


if __name__ == "__main__":
    main(sys.argv[1:])
