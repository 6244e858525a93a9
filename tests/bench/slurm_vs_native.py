"""Slurm benchmark (issue 16): ``gpuplan slurm-controller`` vs Slurm alone on the lab.

``python -m tests.bench.slurm_vs_native [--jobs N] [--quick] [--policies afs-p,afs-l]``. The
seeded workload of the issue, scaled to the lab (4 nodes x 4 GPUs): jobs of 1/2/4 GPUs, 55 %
elastic (half to twice their request, at most one node), 5-30 s of stand-in work at their
requested size, submitted in bursts. Each mode runs the same jobs on an empty lab:

* ``slurm``: plain ``sbatch --gpus=N`` on the ordinary partition (Slurm's own scheduler);
* each policy: the same jobs through the hook (``--comment gpuplan:min=..,max=..,work=..``) and
  ``gpuplan slurm-controller --policy P`` with default settings, SIGKILLed once mid-run and
  restarted (the restart must stop no running job).

Reported per mode: drain time, mean/p95 JCT, split single-node jobs and unusable GPU-seconds
(GPUs on nodes other than the batch host, sampled every second), resize latency (journal
intent -> settled), controller CPU seconds, jobs stopped by the restart; and the simulator's
prediction for the same workload beside it. Goals: drain <= 0.9x and mean JCT <= 0.8x of Slurm
alone; 0 split; 0 unusable GPU-seconds; 0 stopped by a restart. No asserts: this reports.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuplan.executors.control.journal import Journal
from gpuplan.executors.simulator.run import simulate
from gpuplan.executors.slurm.cli import SlurmError, SlurmJob
from gpuplan.executors.slurm.lab import SlurmLab
from gpuplan.models import (
    Cluster,
    Elasticity,
    JobSpec,
    Node,
    NodeShape,
    Overheads,
    ThroughputProfile,
)
from gpuplan.solver_core.registry import make_policy
from tests import slurm_fixtures as fx

SEED = 16
LAB_OVERHEADS = Overheads(restart_s=2.5, migrate_s=2.5, start_s=1.0)
"""What a checkpoint-restart and a start cost on the lab (stand-in, measured in docs/slurm.md:
restart ~2 s; a release takes ~1 s to run), instead of the simulator's tens of seconds."""
PYTHON = "/usr/bin/python3"
ENGINE_PARTITION, PLAIN_PARTITION = "gpuplan", "gpu"


@dataclass(frozen=True)
class Item:
    name: str
    gpus: int
    lo: int
    hi: int
    work: float
    at: float


def workload(n: int, seed: int = SEED, burst: int = 25, gap_s: float = 25.0) -> list[Item]:
    rng = random.Random(seed)
    items = []
    for i in range(n):
        gpus = rng.choice((1, 2, 2, 4))
        seconds = rng.uniform(5.0, 30.0)
        lo, hi = (max(1, gpus // 2), min(4, 2 * gpus)) if rng.random() < 0.55 else (gpus, gpus)
        items.append(Item(f"j{i:03d}", gpus, lo, hi, round(seconds * gpus, 1),
                          (i // burst) * gap_s))
    return items


# ---------------------------------------------------------------------------------- simulator
def predict(items: list[Item], policy: str) -> dict[str, float]:
    """The simulator's run of the same jobs (``slurm``: FIFO over the rigid requests)."""
    rigid = policy == "slurm"
    specs = [JobSpec(id=it.name, submit_time=it.at, requested_gpus=it.gpus,
                     total_iterations=it.work,
                     elasticity=None if rigid or it.lo == it.hi else
                     Elasticity(min_gpus=it.lo, max_gpus=it.hi),
                     node_shape=NodeShape(max_nodes=1),
                     throughput=ThroughputProfile.linear(1.0, reference_gpu="a100"))
             for it in items]
    cluster = Cluster(nodes=[Node(name=f"node{k}", gpus=fx.GPUS_PER_NODE, gpu_type="a100")
                             for k in range(1, fx.NODES + 1)])
    result, _, _ = simulate(cluster, specs, make_policy("fifo" if rigid else policy, seed=0),
                            overheads=LAB_OVERHEADS, sample_interval_s=None)
    jcts = [r.jct for r in result.jobs if r.jct is not None]
    ends = [r.finish_time for r in result.jobs if r.finish_time is not None]
    return {"drain": max(ends), "mean": statistics.mean(jcts), "p95": _p95(jcts)}


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


# ---------------------------------------------------------------------------------- lab runs
@dataclass
class Run:
    mode: str
    submitted: dict[str, float] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)
    split: set[str] = field(default_factory=set)
    unusable_gpu_s: float = 0.0
    stopped_by_restart: int = 0
    cpu_s: float = 0.0
    resize_latency_s: list[float] = field(default_factory=list)
    resizes: int = 0
    ends: dict[str, float] = field(default_factory=dict)
    turnover_gaps: list[float] = field(default_factory=list)
    release_to_run_s: list[float] = field(default_factory=list)


def _sbatch(lab: SlurmLab, shared: Path, it: Item, managed: bool) -> int:
    if managed:
        opts = [f"--partition={ENGINE_PARTITION}",
                f"--comment=gpuplan:min={it.lo},max={it.hi},work={it.work:g}"]
    else:
        opts = [f"--partition={PLAIN_PARTITION}"]
    argv = ["sbatch", "--parsable", f"--gpus={it.gpus}", *opts, f"--job-name={it.name}",
            f"--output={shared}/{it.name}.out", "--open-mode=append", str(shared / "run.sh"),
            PYTHON, str(shared / "standin.py"), "--job-id", it.name, "--work", f"{it.work:g}",
            "--rate-per-gpu", "1", "--state-dir", str(shared), "--progress-interval", "1",
            "--checkpoint-interval", "2"]
    proc = fx.as_user(fx.UNPRIVILEGED_USER, argv, lab.env)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    return int(proc.stdout.strip().split(";")[0])


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def run_mode(lab: SlurmLab, items: list[Item], mode: str) -> Run:
    shared, run = fx.shared_job_dir("gpuplan-bench-"), Run(mode)
    db, log = shared / "state" / "controller.db", shared / "controller.log"
    managed = mode != "slurm"
    proc: subprocess.Popen[bytes] | None = None

    def start() -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "gpuplan", "slurm-controller", "--policy", mode,
                "--state-db", str(db), "--partition", ENGINE_PARTITION,
                "--wake-file", str(lab.wake_file)]
        with open(log, "ab") as out:
            return subprocess.Popen(argv, env={**os.environ, **lab.env}, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    if managed:
        proc = start()
    t0 = time.time()

    def submitter() -> None:
        for it in items:
            delay = t0 + it.at - time.time()
            if delay > 0:
                time.sleep(delay)
            run.ids[it.name] = _sbatch(lab, shared, it, managed)
            run.submitted[it.name] = time.time()

    thread = threading.Thread(target=submitter, daemon=True)
    thread.start()
    try:
        return _drive(lab, items, run, shared, thread, proc, start, t0)
    finally:
        if not os.environ.get("GPUPLAN_KEEP_TEST_DIRS"):
            shutil.rmtree(shared, ignore_errors=True)


def _drive(lab: SlurmLab, items: list[Item], run: Run, shared: Path, thread: threading.Thread,
           proc: subprocess.Popen[bytes] | None, start: Callable[[], subprocess.Popen[bytes]],
           t0: float) -> Run:
    """Sample until every job is done; SIGKILL and restart the controller once at 70 s."""
    cli, managed, mode = lab.cli(timeout=30), proc is not None, run.mode
    db = shared / "state" / "controller.db"
    stop = threading.Event()
    killed_at: dict[str, int] = {}
    acts: list = []
    last_seen: dict[int, SlurmJob] = {}
    last = time.time()
    while True:
        now = time.time()
        try:
            jobs = {j.job_id: j for j in cli.jobs(list(dict(run.ids).values()))}
        except SlurmError:  # a transient squeue error while jobs come and go: sample again
            stop.wait(0.5)
            continue
        # Slurm forgets a finished job MinJobAge (600 s) after its end: keep its last record.
        last_seen.update(jobs)
        dt, last = now - last, now
        for name, sid in list(run.ids.items()):
            sj = jobs.get(sid)
            if sj is None or sj.state != "RUNNING" or len(sj.nodes) < 2:
                continue
            run.split.add(name)
            try:
                per_node = {n: len(g) for n, g in cli.job_gpus(sid).items()}
            except SlurmError:
                continue
            run.unusable_gpu_s += dt * sum(c for n, c in per_node.items() if n != sj.batch_host)
        if managed and proc is not None and not killed_at and now - t0 > 70.0:
            killed_at = {n: jobs[s].restart_count for n, s in run.ids.items()
                         if s in jobs and jobs[s].state == "RUNNING"}
            run.cpu_s += _cpu_s(proc.pid)
            proc.kill()
            proc.wait()
            proc = start()
        if not thread.is_alive() and len(run.ids) == len(items) and all(
                (shared / f"{n}.done").exists() for n in run.ids) and all(
                s in last_seen and last_seen[s].finished for s in run.ids.values()):
            break
        if now - t0 > 3600:
            if proc is not None:
                proc.kill()
            raise RuntimeError(f"{mode}: not drained after an hour")
        stop.wait(1.0)
    if proc is not None:
        run.cpu_s += _cpu_s(proc.pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        with Journal(db, writer=False) as journal:
            acts = journal.actions()
        second = [a for a in acts if a.run_id == 2]
        plans = sorted({a.epoch for a in second if a.epoch is not None})
        first = plans[0] if plans else None
        sids = {run.ids[n] for n in killed_at}
        stopped = {a.slurm_id for a in second if a.slurm_id in sids and a.kind in (
            "stop", "preempt", "resize", "migrate") and (
            a.epoch == first or a.detail.startswith("reconcile"))}
        run.stopped_by_restart = len(stopped)
        run.resize_latency_s = [a.settled_at - a.intended_at for a in acts
                                if a.kind == "resize" and a.settled_at is not None]
        run.resizes = len(run.resize_latency_s)
    run_end = last_seen  # every job's record as last seen, finished (the loop's exit test)
    run.ends = {n: float(run_end[s].raw.get("end_time") or 0) for n, s in run.ids.items()}
    run.turnover_gaps = turnover_gaps(run, run_end)
    if managed:
        starts = {s: float(j.raw.get("start_time") or 0) for s, j in run_end.items()
                  if j.restart_count == 0}
        # The last start intent before Slurm's (only) start of a job that never restarted: an
        # earlier intent may have been overtaken by a stop before Slurm started it.
        last_intent: dict[int, float] = {}
        for a in acts:
            if a.kind == "start" and a.slurm_id in starts and \
                    a.intended_at <= starts[a.slurm_id] + 1.0:
                last_intent[a.slurm_id] = max(last_intent.get(a.slurm_id, 0.0), a.intended_at)
        run.release_to_run_s = [starts[s] - t for s, t in last_intent.items()]
    return run


def turnover_gaps(run: Run, final: dict[int, SlurmJob]) -> list[float]:
    """Per queued job that started once: seconds from the last job end before its start to its
    start — the time freed GPUs sat idle while it waited (Slurm's times have 1-s resolution)."""
    ends = sorted(float(j.raw.get("end_time") or 0) for j in final.values())
    gaps = []
    for name, sid in run.ids.items():
        job = final[sid]
        start = float(job.raw.get("start_time") or 0)
        if job.restart_count or start < run.submitted[name] + 1.0:
            continue  # never queued (started on arrival) or started more than once
        before = [e for e in ends if 0 < e <= start]
        if before:
            gaps.append(start - before[-1])
    return gaps


def summary(run: Run, t_first: float | None = None) -> dict[str, float]:
    ends = run.ends
    first = min(run.submitted.values()) if t_first is None else t_first
    jcts = [ends[n] - run.submitted[n] for n in run.submitted]
    return {"drain": max(ends.values()) - first, "mean": statistics.mean(jcts), "p95": _p95(jcts)}


def main(argv: list[str]) -> None:
    n = 200
    policies = ["afs-p", "afs-l"]
    for i, arg in enumerate(argv):
        if arg == "--jobs":
            n = int(argv[i + 1])
        if arg == "--policies":
            policies = argv[i + 1].split(",")
    if "--quick" in argv:
        n = min(n, 30)
    items = workload(n)
    print(f"{n} jobs, seed {SEED}: {sum(it.lo < it.hi for it in items)} elastic, "
          f"{sum(it.work for it in items):.0f} GPU-s of work, bursts of 25 "
          f"every 25 s; lab {fx.NODES} x {fx.GPUS_PER_NODE} GPUs", flush=True)
    fx.ensure_user(fx.UNPRIVILEGED_USER)
    session = fx.lab_session()
    lab = next(session)
    rows = []
    try:
        for mode in ["slurm", *policies]:
            t = time.monotonic()
            run = run_mode(lab, items, mode)
            got, sim = summary(run), predict(items, mode)
            rows.append((mode, got, sim, run))
            print(f"  {mode}: done in {time.monotonic() - t:.0f} s: lab {got}, sim {sim}, "
                  f"split {len(run.split)}, unusable {run.unusable_gpu_s:.1f} GPU-s, resizes "
                  f"{run.resizes}, cpu {run.cpu_s:.1f} s, stopped by restart "
                  f"{run.stopped_by_restart}", flush=True)
    finally:
        with contextlib.suppress(StopIteration):
            next(session)
    base = rows[0][1]
    print(f"{'mode':<7} {'drain s':>8} {'x':>5} {'meanJCT':>8} {'x':>5} {'p95':>6} "
          f"{'sim drain':>9} {'sim mean':>8} {'split':>5} {'unusable':>8} {'resizes':>7} "
          f"{'rs lat s':>8} {'cpu s':>6} {'restart-stopped':>15}")
    for mode, got, sim, run in rows:
        lat = statistics.mean(run.resize_latency_s) if run.resize_latency_s else float("nan")
        print(f"{mode:<7} {got['drain']:>8.1f} {got['drain'] / base['drain']:>5.2f} "
              f"{got['mean']:>8.1f} {got['mean'] / base['mean']:>5.2f} {got['p95']:>6.1f} "
              f"{sim['drain']:>9.1f} {sim['mean']:>8.1f} {len(run.split):>5} "
              f"{run.unusable_gpu_s:>8.1f} {run.resizes:>7} {lat:>8.2f} {run.cpu_s:>6.1f} "
              f"{run.stopped_by_restart:>15}")
    for mode, _, _, run in rows:
        gaps, rel = run.turnover_gaps, run.release_to_run_s
        print(f"{mode}: turnover gap (last end -> next start) mean "
              f"{statistics.mean(gaps) if gaps else float('nan'):.2f} s over {len(gaps)} starts"
              + (f"; start intent -> running mean {statistics.mean(rel):.2f} s, max "
                 f"{max(rel):.2f} s" if rel else ""))
    print(json.dumps({m: {"lab": g, "sim": s} for m, g, s, _ in rows}))


if __name__ == "__main__":
    main(sys.argv[1:])
